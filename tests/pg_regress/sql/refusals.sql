-- A claim refused, as a service node meets it: a full service (53000), its SQLSTATE, what the
-- history records of a flood of refusals (one per kind and minute) and what the metrics count
-- (every one). Times stay out of the output (terse where a DETAIL names them).
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never

-- Every machine id of service "packed" held by a node (written by hand: 1,024 holders).
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT 'packed', m, ('192.0.2.' || (m % 250))::inet, 10000 + m, 1 FROM generate_series(0, 1023) m;
SELECT capacity, in_use, free, takeable_7d, takeable_1d, takeable_1h FROM idgen_capacity WHERE service = 'packed';

-- Four nodes boot: each is refused (terse: the DETAIL names the least recently seen holder and
-- when; the HINT says what to do, tests/cluster/tests/errors.rs).
SET client_min_messages = error;
\set VERBOSITY terse
SELECT * FROM idgen_claim('packed', '10.0.0.1', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idgen_claim('packed', '10.0.0.2', 1);
SELECT * FROM idgen_claim('packed', '10.0.0.3', 1);
-- Refused inside a transaction that rolls back: counted all the same.
BEGIN;
SELECT * FROM idgen_claim('packed', '10.0.0.4', 1);
ROLLBACK;
\set VERBOSITY default
RESET client_min_messages;

-- The history records the first refusal of the minute; the metrics count all four.
SELECT event, service, machine_id, holder FROM idgen_events WHERE service = 'packed';
SELECT refused_claims, refused_claims_since_start, capacity_level FROM idgen_metrics WHERE service = 'packed';
-- The count a role that may not read the service gets: none (NULL), not 0.
CREATE ROLE regress_idgen_outsider;
SET ROLE regress_idgen_outsider;
SELECT * FROM idgen_private.refusals_since_start('packed');
SELECT count(*) AS services_seen FROM idgen_metrics;
RESET ROLE;
DROP ROLE regress_idgen_outsider;

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
