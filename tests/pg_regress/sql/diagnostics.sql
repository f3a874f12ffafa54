-- Diagnostics as the person on call meets them: node states, the history behind
-- idgen_explain, capacity, idgen_health() and the metrics. Times are left out of
-- the output (they change every run); states, holders and findings are not.
CREATE EXTENSION idgen;
-- Each registry draws the version its new rows start after (version_base, below 2^52, so that a node
-- of a dropped registry matches no row of one created again); this test's starts them at 1.
UPDATE idgen_private.idgen_registry SET version_base = 0;
SET TIME ZONE 'UTC';

-- What \d+ shows: every view and column explained, in this order.
SELECT c.relname AS view, a.attname AS column, col_description(c.oid, a.attnum) IS NOT NULL AS commented
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.relname IN ('idgen_nodes', 'idgen_capacity', 'idgen_events', 'idgen_metrics')
 ORDER BY c.relname, a.attnum;
SELECT relname, obj_description(oid, 'pg_class') IS NOT NULL AS commented FROM pg_class
 WHERE relname LIKE 'idgen\_%' AND relkind IN ('r', 'v') ORDER BY relname;

-- Healthy: an empty registry has no findings.
SELECT * FROM idgen_health();

-- Every state of idgen_nodes, reached by back-dating rows: the last heartbeat and the terms
-- granted with it (nodes never write these times).
SELECT c.machine_id, c.outcome FROM generate_series(1, 7) g,
       LATERAL idgen_claim('states', ('10.0.0.' || g)::inet, 8000) c;
UPDATE system_nodes SET last_seen = last_seen - d, lease_until = lease_until - d, takeover_at = takeover_at - d
  FROM (VALUES (1, interval '56 minutes'), (2, interval '2 hours'), (3, interval '2 days'), (4, interval '8 days')) b(m, d)
 WHERE service = 'states' AND machine_id = b.m;
SELECT idgen_release('states', 5::smallint, '10.0.0.6', 8000, 1);
-- Machine id 6 by its holder, with its last stamp: free once the cooldown is over.
SELECT idgen_release('states', 6::smallint, '10.0.0.7', 8000, 1, now());
UPDATE system_nodes SET released_at = now() - interval '2 minutes' WHERE service = 'states' AND machine_id = 6;
-- A backend's own row, with the live connection in its slot.
SELECT idgen_next_id('states') > 0 AS minted;
SELECT machine_id, kind, state, holder LIKE 'backend slot % of 127.0.0.1:%' AS backend_holder,
       idle < interval '1 hour' AS recent, lease_until > now() AS leased
  FROM idgen_nodes WHERE service = 'states' ORDER BY machine_id;
SELECT pid = pg_backend_pid() AS this_session, usename, database = current_database() AS this_database, application_name
  FROM idgen_nodes WHERE service = 'states' AND kind = 'backend';
SELECT service, capacity, in_use, free, used, above_alert, held, live, past_lease,
       takeable_7d, takeable_1d, takeable_1h, cooling_down, released, oldest_idle_machine_id, oldest_idle_holder,
       oldest_idle >= interval '8 days' AS oldest_idle_8_days
  FROM idgen_capacity;

-- idgen_health(): each problem, and what the person on call reads first.
UPDATE system_nodes SET last_seen = last_seen - interval '8 days', lease_until = lease_until - interval '8 days',
                        takeover_at = takeover_at - interval '8 days', issued_until = issued_until - interval '8 days'
 WHERE service = 'states' AND backend_slot IS NOT NULL;
UPDATE system_nodes SET issued_until = now() + interval '3 hours' WHERE service = 'states' AND machine_id = 0;
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT 'warm', m, '10.1.0.1', 1000 + m, 1 FROM generate_series(0, 849) m;
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT 'full', m, '10.2.0.1', 1000 + m, 1 FROM generate_series(0, 1023) m;
SELECT severity, finding, subject FROM idgen_health();
SELECT detail FROM idgen_health() WHERE finding = 'stale_backend_rows';
-- A claim refused because the service is full is recorded, though the claim rolls back.
SET client_min_messages = error;
\set VERBOSITY terse
SELECT * FROM idgen_claim('full', '10.2.0.2', 1);
\set VERBOSITY default
RESET client_min_messages;
SELECT event, service, machine_id, holder FROM idgen_events WHERE event LIKE 'refused%';
-- The clock behind the newest registry write, and a tombstone left by a row deleted by hand: its
-- machine id waits for the holder's lease to end; nothing else does.
UPDATE system_nodes SET last_seen = now() + interval '1 minute' WHERE service = 'states' AND machine_id = 0;
DELETE FROM system_nodes WHERE service = 'full' AND machine_id = 0;
SELECT severity, finding, subject FROM idgen_health() WHERE severity = 'critical' OR finding = 'tombstone_ahead';
SELECT service, machine_id, version, ahead, bound > now() + interval '50 minutes' AS a_lease_ahead FROM idgen_tombstones;
-- History older than the retention: a notice, until purged; the metrics keep counting it.
INSERT INTO idgen_private.idgen_history (at, event, service, machine_id) VALUES (now() - interval '100 days', 'release', 'states', 9);
SELECT severity, finding, subject FROM idgen_health() WHERE finding = 'history_purge_due';
SELECT idgen_purge_history() AS purged;
SELECT idgen_purge_history() AS purged_again;
SELECT count(*) AS purge_findings FROM idgen_health() WHERE finding = 'history_purge_due';
-- Metrics: numeric columns only, one row per service.
SELECT service, held, in_use, capacity, free, used_ratio, take_backs_released, take_backs_7d, take_backs_1d,
       take_backs_1h, ownership_losses, refused_claims, oldest_idle_seconds >= 8 * 86400 AS oldest_8_days, history_events_purged
  FROM idgen_metrics ORDER BY service;
SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
 WHERE a.attrelid = 'idgen_metrics'::regclass AND a.attnum > 1 AND format_type(a.atttypid, a.atttypmod) NOT IN ('bigint', 'integer', 'double precision');
-- The history is append-only.
UPDATE idgen_private.idgen_history SET service = 'x';
-- These leases are made up: drop the registry anyway (see registry.sql for the refusal).
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;

-- A take-back chain A -> B -> C of machine id 0: each takes the id from an idle holder,
-- and idgen_explain names the holder of IDs minted in each epoch. (A new registry: its own base.)
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT 'chain', m, '10.9.0.1', 1000 + m, 1 FROM generate_series(1, 1023) m;
SET client_min_messages = error; -- the take-back alerts carry times
SELECT machine_id, version, outcome FROM idgen_claim('chain', '10.0.0.1', 8080);
-- A falls silent for 2 hours; its last report lets it stamp until 3 minutes from now.
UPDATE system_nodes SET last_seen = now() - interval '2 hours', lease_until = now() - interval '65 minutes',
                        takeover_at = now() - interval '1 hour', issued_until = now() - interval '52 minutes'
 WHERE service = 'chain' AND machine_id = 0;
SELECT machine_id, version, outcome FROM idgen_claim('chain', '10.0.0.2', 8080);
-- B falls silent; it may stamp until 4 minutes from now.
UPDATE system_nodes SET last_seen = now() - interval '2 hours', lease_until = now() - interval '65 minutes',
                        takeover_at = now() - interval '1 hour', issued_until = now() - interval '51 minutes'
 WHERE service = 'chain' AND machine_id = 0;
SELECT machine_id, version, outcome FROM idgen_claim('chain', '10.0.0.3', 8080);
RESET client_min_messages;
SELECT event, machine_id, version, outcome, holder, previous_holder, previous_version,
       previous_bound > not_before - interval '1 second' AS bound_before_next_start
  FROM idgen_events WHERE service = 'chain' ORDER BY event_id;
-- (A's claim filled the service: the capacity_critical event is its announcement, of no machine id.)
-- An ID just after each holder's start, and one while B held it.
SELECT e.holder AS minted_by, x.service, x.machine_id, x.sequence, x.finding, x.holder, x.version, x.role
  FROM idgen_events e, idgen_explain(idgen_min_id(e.not_before + interval '1 millisecond')) x
 WHERE e.service = 'chain' AND e.machine_id IS NOT NULL ORDER BY e.event_id;
SELECT finding, holder, version FROM idgen_explain(idgen_min_id(now() + interval '210 seconds') | (0 << 12) | 5, 'chain');
-- Before A: machine id 0 was never registered, so no holder made such an ID.
SELECT finding, holder FROM idgen_explain(idgen_min_id(now() - interval '1 day'), 'chain');
-- With A's claim purged, the history no longer reaches back that far, and says so (the capacity
-- announcement that came with the claim stays: it is the service's newest).
SELECT idgen_purge_history(now() - (SELECT at FROM idgen_private.idgen_history WHERE host = '10.0.0.1' AND event = 'capacity_critical') - interval '1 microsecond') AS purged;
SELECT finding, holder FROM idgen_explain(idgen_min_id(now() - interval '1 day'), 'chain');
-- A history that shows two holders at once (written here by hand): a WARNING, and both holders.
INSERT INTO idgen_private.idgen_history (event, service, machine_id, version, outcome, host, port, not_before,
                           previous_host, previous_port, previous_version, previous_bound)
VALUES ('take_back', 'chain', 0, 4, 'idle_1h', '10.0.0.4', 8080, now() + interval '5 minutes',
        '10.0.0.3', 8080, 3, now() + interval '10 minutes');
\set VERBOSITY terse
SELECT finding, holder, version FROM idgen_explain(idgen_min_id(now() + interval '7 minutes'), 'chain') ORDER BY version;
\set VERBOSITY default
-- A machine id with no history: what the registry shows now. Unknown ones and negative IDs are refused.
SELECT finding, detail FROM idgen_explain(idgen_min_id(now()) | (77 << 12), 'chain');
SELECT * FROM idgen_explain(idgen_min_id(now()), 'nobody');
SELECT * FROM idgen_explain(-1);
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
