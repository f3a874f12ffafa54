-- What a service node's heartbeat reports: its watermark (the last time it may have stamped),
-- and its generator's counts; idgen_nodes and idgen_metrics show them. Counts must not be negative.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id FROM idgen_claim('fleet', '10.0.0.1', 8080);
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 1, now() + interval '2 seconds',
                       clock_backward_waits => 3, clock_backward_refusals => 1, sequence_exhaustions => 12) > now() AS renewed;
SELECT clock_backward_waits, clock_backward_refusals, sequence_exhaustions FROM idgen_nodes WHERE service = 'fleet';
SELECT clock_backward_waits, clock_backward_refusals, sequence_exhaustions FROM idgen_metrics WHERE service = 'fleet';
-- A heartbeat without counts clears them: the node does not count (any more).
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 1) > now() AS renewed;
SELECT clock_backward_waits, sequence_exhaustions FROM idgen_nodes WHERE service = 'fleet';
-- Refused counts and watermarks.
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 1, NULL, clock_backward_waits => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 1, '-infinity');
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 0);
-- A watermark behind what the registry holds is kept as the registry had it, with a WARNING.
\set VERBOSITY terse
SELECT idgen_heartbeat('fleet', 0, '10.0.0.1', 8080, 1, issued_until - interval '1 hour') > now() AS renewed
  FROM system_nodes WHERE service = 'fleet';
\set VERBOSITY default
SELECT issued_until > now() AS watermark_kept FROM system_nodes WHERE service = 'fleet';
SELECT event FROM idgen_events WHERE service = 'fleet' ORDER BY event_id;
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
