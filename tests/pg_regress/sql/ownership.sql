-- A holder whose machine id moved, as it meets it: its heartbeat refused (55000), its release
-- answered false with a WARNING, each counted; the history records one per minute.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never

SELECT machine_id, version, outcome FROM idgen_claim('moved', '10.0.0.1', 8080);
SELECT idgen_heartbeat('moved', 0, '10.0.0.1', 8080, 1) > now() AS renewed;
-- Another process took the id over (a take-back, written here by hand).
UPDATE system_nodes SET host = '10.0.0.2', version = 2 WHERE service = 'moved' AND machine_id = 0;

-- The first holder must stop issuing: its heartbeat says so, twice (its DETAIL names the new holder).
\set VERBOSITY terse
SELECT idgen_heartbeat('moved', 0, '10.0.0.1', 8080, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_heartbeat('moved', 0, '10.0.0.1', 8080, 1);
-- Its release at shutdown changes nothing: false, with a WARNING.
SELECT idgen_release('moved', 0, '10.0.0.1', 8080, 1);
\set VERBOSITY default
SELECT host, version, released_at IS NULL AS held FROM system_nodes WHERE service = 'moved';

SELECT event, holder, version FROM idgen_events WHERE service = 'moved' ORDER BY event_id;
SELECT ownership_losses, ownership_losses_since_start FROM idgen_metrics WHERE service = 'moved';

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
