-- The registry as a DBA meets it: the table, the functions, the refused inputs.
CREATE EXTENSION idgen;
\d+ system_nodes
\d+ idgen_private.idgen_registry
\d+ idgen_private.idgen_tombstones
\df idgen_*
SELECT version_base BETWEEN 0 AND 4503599627370495 AS drawn_below_2_52 FROM idgen_private.idgen_registry;
-- Each registry draws the version its new rows start after (version_base, below 2^52, so that a node
-- of a dropped registry matches no row of one created again); this test's starts them at 1.
UPDATE idgen_private.idgen_registry SET version_base = 0;

-- Two nodes boot. Leases run from the write (last_seen).
SELECT machine_id, version, outcome, lease_until, not_before FROM idgen_claim('orders', '10.0.0.5', 8080) \gset
SELECT :machine_id AS machine_id, :version AS version, :'outcome' AS outcome,
       :'lease_until'::timestamptz - last_seen AS lease, :'not_before'::timestamptz = date_trunc('milliseconds', last_seen) AS not_before_is_the_claim
  FROM system_nodes WHERE machine_id = :machine_id;
SELECT machine_id, version, outcome FROM idgen_claim('orders', '2001:db8::6', 8080);
-- The first restarts gracefully: it releases with its last stamp, and gets its id back.
SELECT idgen_release('orders', 0::smallint, '10.0.0.5', 8080, 1, now());
SELECT machine_id, version, outcome FROM idgen_claim('orders', '10.0.0.5', 8080);
-- A second process with that address, while the first holds the id: it may be stamping, so the
-- newcomer gets another id (with a WARNING naming times, tests/cluster/tests/fencing.rs), and
-- the first learns at its next heartbeat.
SET client_min_messages = error;
SELECT machine_id, version, outcome FROM idgen_claim('orders', '10.0.0.5', 8080);
RESET client_min_messages;
\set VERBOSITY terse
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.5', 8080, 3);
\set VERBOSITY default
-- A heartbeat with the node's watermark (its clock); a lower one later changes nothing, and
-- draws a WARNING (terse: its DETAIL shows the clock).
BEGIN;
SELECT idgen_heartbeat('orders', 2::smallint, '10.0.0.5', 8080, 1, now() + interval '10 seconds') IS NOT NULL AS renewed;
\set VERBOSITY terse
SELECT idgen_heartbeat('orders', 2::smallint, '10.0.0.5', 8080, 1, now() - interval '1 hour') IS NOT NULL AS renewed;
\set VERBOSITY default
SELECT issued_until - now() AS watermark_ahead FROM system_nodes WHERE machine_id = 2;
-- A release with the node's last timestamp: the next holder starts after it.
SELECT idgen_release('orders', 1::smallint, '2001:db8::6', 8080, 1, now() + interval '20 seconds');
SELECT service, machine_id, host, port, version, released_at IS NOT NULL AS released, issued_until - now() AS watermark_ahead
  FROM system_nodes WHERE machine_id > 0 ORDER BY machine_id;
-- The id set aside for the twin keeps its holder's whole lease as its watermark.
SELECT machine_id, version, released_at IS NOT NULL AS released, issued_until >= takeover_at AS holds_the_lease
  FROM system_nodes WHERE machine_id = 0;
COMMIT;

-- Refused inputs: each names its argument (tests/cluster/tests/inputs.rs checks that none writes anything).
SELECT * FROM idgen_claim(NULL, '10.0.0.1', 1);
SELECT * FROM idgen_claim('', '10.0.0.1', 1);
SELECT * FROM idgen_claim(repeat('x', 65), '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders ', '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.0/24', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.1', 0);
SELECT * FROM idgen_claim('orders', '0.0.0.0', 8080);
SELECT * FROM idgen_claim('orders', '::', 8080);
SELECT idgen_heartbeat('orders', 1024::smallint, '10.0.0.1', 1, 1);
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.1', 1, 0);
SELECT idgen_release('orders', NULL, '10.0.0.1', 1, 1);
-- A watermark days ahead is kept (the node may have stamped that far), with a WARNING
-- (tests/cluster/tests/watermarks.rs); an infinite one bounds nothing and is refused.
SET client_min_messages = error;
SELECT idgen_heartbeat('orders', 2::smallint, '10.0.0.5', 8080, 1, clock_timestamp() + interval '3 days') IS NOT NULL AS renewed;
RESET client_min_messages;
SELECT issued_until > now() + interval '2 days' AS kept FROM system_nodes WHERE machine_id = 2;
SELECT idgen_heartbeat('orders', 2::smallint, '10.0.0.5', 8080, 1, 'infinity');
-- Thresholds are one for the whole cluster: not per session.
SET idgen.takeover_idle_1d = '30min';

-- Settings, with units.
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'idgen.%' ORDER BY name;

-- Dropping the registry while it guards ids that may still be stamped is refused: a new one
-- would hand them out again. (The DETAIL names holders and times: terse here.)
\set VERBOSITY terse
DROP EXTENSION idgen;
\set VERBOSITY default
-- A database whose IDs can be thrown away (this one) may drop it anyway.
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen;
