-- The registry as a DBA meets it: the table, the functions, the refused inputs.
CREATE EXTENSION idgen;
\d+ system_nodes
\d+ idgen_registry
\df idgen_*

-- Two nodes boot; the first restarts on the same address. Leases run from the write (last_seen).
SELECT machine_id, version, outcome, lease_until, not_before FROM idgen_claim('orders', '10.0.0.5', 8080) \gset
SELECT :machine_id AS machine_id, :version AS version, :'outcome' AS outcome,
       :'lease_until'::timestamptz - last_seen AS lease, :'not_before'::timestamptz = date_trunc('milliseconds', last_seen) AS not_before_is_the_claim
  FROM system_nodes WHERE machine_id = :machine_id;
SELECT machine_id, version, outcome FROM idgen_claim('orders', '2001:db8::6', 8080);
SELECT machine_id, version, outcome FROM idgen_claim('orders', '10.0.0.5', 8080);
-- A heartbeat with the node's watermark (its clock); a lower one later changes nothing.
BEGIN;
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.5', 8080, 2, now() + interval '10 seconds') IS NOT NULL AS renewed;
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.5', 8080, 2, now() - interval '1 hour') IS NOT NULL AS renewed;
SELECT issued_until - now() AS watermark_ahead FROM system_nodes WHERE machine_id = 0;
-- A release with the node's last timestamp: the next holder starts after it.
SELECT idgen_release('orders', 1::smallint, '2001:db8::6', 8080, 1, now() + interval '20 seconds');
SELECT service, machine_id, host, port, version, released_at IS NOT NULL AS released, issued_until - now() AS watermark_ahead
  FROM system_nodes ORDER BY machine_id;
COMMIT;

-- Refused inputs: each names its argument (tests/cluster/tests/inputs.rs checks that none writes anything).
SELECT * FROM idgen_claim(NULL, '10.0.0.1', 1);
SELECT * FROM idgen_claim('', '10.0.0.1', 1);
SELECT * FROM idgen_claim(repeat('x', 65), '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders ', '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.0/24', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.1', 0);
SELECT idgen_heartbeat('orders', 1024::smallint, '10.0.0.1', 1, 1);
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.1', 1, 0);
SELECT idgen_release('orders', NULL, '10.0.0.1', 1, 1);
-- (Its DETAIL shows the clock: terse here.)
\set VERBOSITY terse
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.5', 8080, 2, clock_timestamp() + interval '3 days');
\set VERBOSITY default
-- Thresholds are one for the whole cluster: not per session.
SET idgen.takeover_idle_1d = '30min';

-- Settings, with units.
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'idgen.%' ORDER BY name;
DROP EXTENSION idgen;
