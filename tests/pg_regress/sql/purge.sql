-- The history's retention: idgen_purge_history() removes events older than an age (default
-- idgen.history_retention), the metrics keep counting them, and each service's newest capacity
-- announcement stays. Ages that are not positive are refused (22023).
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never

SELECT machine_id, outcome FROM idgen_claim('kept', '10.0.0.1', 8080);
SELECT idgen_release('kept', 0, '10.0.0.1', 8080, 1, now());
SELECT machine_id, outcome FROM idgen_claim('kept', '10.0.0.1', 8080);
SELECT event, outcome FROM idgen_events WHERE service = 'kept' ORDER BY event_id;

-- Nothing is 90 days old; every event is older than a microsecond (they were committed before).
SELECT idgen_purge_history() AS purged_by_the_retention;
SELECT idgen_purge_history(interval '1 microsecond') AS purged;
SELECT count(*) AS events_left FROM idgen_events WHERE service = 'kept';
SELECT take_backs_released, restarts, history_events_purged FROM idgen_metrics WHERE service = 'kept';
SELECT service, event, outcome, events FROM idgen_private.idgen_history_purged ORDER BY event, outcome;

SELECT idgen_purge_history(interval '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_purge_history(interval '-1 day');
-- Only superusers, the extension owner and roles granted EXECUTE purge.
SELECT has_function_privilege('public', 'idgen_purge_history(interval)', 'EXECUTE') AS public_may_purge;

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
