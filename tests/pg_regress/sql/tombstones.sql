-- Registry rows deleted by hand leave tombstones: no claim hands their machine id out before the
-- time its holder may have stamped up to, and a row restored for it takes a newer version.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id, version FROM idgen_claim('gone', '10.0.0.1', 8080);
SELECT idgen_heartbeat('gone', 0, '10.0.0.1', 8080, 1, now() + interval '1 hour') > now() AS renewed;
DELETE FROM system_nodes WHERE service = 'gone';
SELECT service, machine_id, ahead, version FROM idgen_tombstones;
-- The next node does not get machine id 0 while its bound is ahead.
SELECT machine_id, version FROM idgen_claim('gone', '10.0.0.2', 8080);
-- A row restored by hand (a restore of an old dump) takes the bound and a newer version.
INSERT INTO system_nodes (service, machine_id, host, port, version) VALUES ('gone', 0, '10.0.0.1', 8080, 1);
SELECT machine_id, version > 1 AS newer_version, issued_until > now() + interval '50 minutes' AS keeps_the_bound
  FROM system_nodes WHERE service = 'gone' AND machine_id = 0;
-- TRUNCATE leaves one for every row.
TRUNCATE system_nodes;
SELECT service, count(*) AS tombstones FROM idgen_tombstones GROUP BY service ORDER BY service;
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
