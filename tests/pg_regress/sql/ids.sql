-- IDs as a user meets them: the column default, decoding, time ranges, refusals.
CREATE EXTENSION idgen;
-- Each registry draws the version its new rows start after (version_base, below 2^52, so that a node
-- of a dropped registry matches no row of one created again); this test's starts them at 1.
UPDATE idgen_private.idgen_registry SET version_base = 0;
SET TIME ZONE 'UTC';

-- The layout: 41 bits of ms since 2025-01-01 | 10-bit machine id | 12-bit sequence.
SELECT * FROM idgen_decode(0);
SELECT * FROM idgen_decode((1::bigint << 22) | (5 << 12) | 7);
SELECT * FROM idgen_decode(9223372036854775807);
SELECT idgen_min_id('2025-01-01 00:00:00+00'), idgen_max_id('2025-01-01 00:00:00.0009+00');
SELECT idgen_min_id('2026-11-29 12:00:00.123456+00') AS min_id, idgen_max_id('2026-11-29 12:00:00.123+00') AS max_id;
SELECT ts, machine_id, sequence FROM idgen_decode(idgen_max_id('2026-11-29 12:00:00.123+00'));
SELECT idgen_decode(NULL) IS NULL AS decode_null, idgen_min_id(NULL) IS NULL AS min_null;

-- Refused: negative IDs and times the layout cannot stamp.
SELECT * FROM idgen_decode(-1);
SELECT idgen_min_id('2024-12-31 23:59:59.999+00');
SELECT idgen_max_id('2094-09-07 15:47:35.552+00');
SELECT idgen_max_id('2094-09-07 15:47:35.551+00') = 9223372036854775807 AS last_id;
SELECT idgen_min_id('infinity');

-- The column default: time-ordered keys, and a range through the primary key.
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id(), item text);
INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 1000) g;
SELECT count(*) AS rows, count(DISTINCT id) AS ids, min(id) > 0 AS positive FROM orders;
SELECT bool_and(d.ts BETWEEN now() - interval '1 minute' AND clock_timestamp()) AS stamped_now,
       count(DISTINCT d.machine_id) AS machine_ids
FROM orders, idgen_decode(orders.id) d;
-- One composite value: usable in WHERE and in aggregates.
SELECT count(*) AS from_one_machine FROM orders
WHERE (idgen_decode(id)).machine_id = (SELECT machine_id FROM idgen_backend_leases());
SELECT max((idgen_decode(id)).sequence) < 4096 AS sequence_fits FROM orders;
SELECT count(*) AS in_range FROM orders
WHERE id BETWEEN idgen_min_id(now() - interval '1 minute') AND idgen_max_id(clock_timestamp());
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id BETWEEN idgen_min_id('2026-01-01') AND idgen_max_id('2026-01-02');
RESET enable_seqscan;

-- This backend's lease, and its row in the registry.
SELECT service = current_database() AS default_service, machine_id, version, backend_slot IS NOT NULL AS has_slot,
       ids_issued, lease_until - verified_at AS lease
FROM idgen_backend_leases();
SELECT service = current_database() AS default_service, host, port = current_setting('port')::int AS server_port,
       backend_slot IS NOT NULL AS has_slot
FROM system_nodes;

-- Refused arguments and settings.
SELECT idgen_next_id(NULL);
SELECT idgen_next_id('');
SET idgen.service = 'orders ';
SHOW idgen.service;
RESET idgen.service;
SET idgen.max_clock_backward = -1;
SHOW idgen.max_clock_backward;

-- This session's own lease counts as what it stamped: nothing else guards an id, so the
-- registry may be dropped.
DROP EXTENSION idgen CASCADE;
