-- idgen_health() as the person on call reads it: one row per finding (none: healthy), each with
-- what to do. Findings about the server's background workers depend on how it runs: left out here.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id FROM idgen_claim('shop', '10.0.0.1', 8080);
SELECT count(*) AS findings FROM idgen_health()
 WHERE finding NOT IN ('registry_writers_missing', 'worker_budget', 'worker_slots_exhausted');

-- A holder that stopped heartbeating and is past its lease: a warning naming it (its DETAIL has
-- times, left out here).
UPDATE system_nodes SET last_seen = now() - interval '58 minutes', lease_until = now() - interval '3 minutes'
 WHERE service = 'shop';
SELECT severity, finding, subject FROM idgen_health()
 WHERE finding NOT IN ('registry_writers_missing', 'worker_budget', 'worker_slots_exhausted');

-- A server-wide threshold cannot be set for one role in a session that has idgen loaded (as this
-- one): PostgreSQL refuses it. Stored by a session that had not (a placeholder), idgen_health()
-- reports it as setting_ignored (tests/cluster/tests/settings.rs).
CREATE ROLE regress_idgen_tuned;
ALTER ROLE regress_idgen_tuned SET idgen.takeover_idle_1h = '3min';
\echo :LAST_ERROR_SQLSTATE
DROP ROLE regress_idgen_tuned;

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
