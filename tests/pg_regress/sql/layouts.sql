-- Layouts per service as a DBA meets them: presets, definitions, decoding, claims by machine id.
CREATE EXTENSION idgen;
-- Each registry draws the version its new rows start after (version_base, below 2^52, so that a node
-- of a dropped registry matches no row of one created again); this test's starts them at 1.
UPDATE idgen_private.idgen_registry SET version_base = 0;
SET TIME ZONE 'UTC';

-- A Sonyflake fleet's service, limited to 256 machine ids; a JavaScript-safe one; a custom one.
SELECT service, preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order,
       pool_first, pool_last, machine_ids, ids_per_second, ends_at, defined_by, fixed_at
  FROM idgen_define_layout('fleet', 'sonyflake', pool_first => 0, pool_last => 255);
SELECT preset, machine_ids, ids_per_second, ends_at
  FROM idgen_define_layout('web', 'js_safe');
SELECT preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order, ends_at
  FROM idgen_define_layout('custom', 'snowflake', epoch => '2020-01-01', time_unit_ms => 100,
                           machine_bits => 12, sequence_bits => 10, field_order => 'time_sequence_machine');
SELECT service, preset, pool_first, pool_last, machine_ids, fixed_at IS NOT NULL AS fixed
  FROM idgen_layouts ORDER BY service;

-- Bad definitions name the argument.
SELECT * FROM idgen_define_layout('x', 'twitter');
SELECT * FROM idgen_define_layout('x', 'snowflake', machine_bits => 17);
SELECT * FROM idgen_define_layout('x', 'sonyflake', pool_last => 65536);
SELECT * FROM idgen_define_layout('x', 'snowflake', epoch => 'infinity');

-- Decoding by the service's layout: a Sonyflake ID (10 ms ticks since 2014-09-01, time | sequence | machine id).
SELECT * FROM idgen_decode((1::bigint << 24) | (2 << 16) | 300, 'fleet');
SELECT idgen_min_id('2026-11-29 12:00:00.123+00', 'fleet') AS min_id,
       idgen_max_id('2026-11-29 12:00:00.123+00', 'fleet') AS max_id;
-- js_safe: its largest ID is 2^53 - 1, at the end of its time; none after.
SELECT idgen_max_id('2068-07-21 06:52:14.719+00', 'web') = (1::bigint << 53) - 1 AS largest_is_2_53_minus_1;
SELECT idgen_max_id('2068-07-21 06:52:14.720+00', 'web');
SELECT * FROM idgen_decode(1::bigint << 53, 'web');

-- A node claims the machine id it already uses, inside the pool; a second node cannot have it
-- (its DETAIL names the holder and when it was last seen).
SELECT machine_id, version, outcome FROM idgen_claim('fleet', '10.0.0.5', 8080, 200);
\set VERBOSITY terse
SELECT machine_id FROM idgen_claim('fleet', '10.0.0.6', 8080, 200);
\set VERBOSITY default
SELECT machine_id FROM idgen_claim('fleet', '10.0.0.6', 8080, 300);
SELECT fixed_at IS NOT NULL AS fixed FROM idgen_layouts WHERE service = 'fleet';

-- Fixed: another layout is refused (its DETAIL says when and how), the same one answered as is.
\set VERBOSITY terse
SELECT * FROM idgen_define_layout('fleet', 'snowflake');
\set VERBOSITY default
SELECT preset, pool_last FROM idgen_define_layout('fleet', 'sonyflake', pool_first => 0, pool_last => 255);

-- Backends of the service mint by its layout, from its pool.
CREATE TABLE events (id bigint PRIMARY KEY DEFAULT idgen_next_id('fleet'), note text);
INSERT INTO events (note) SELECT 'e' || g FROM generate_series(1, 1000) g;
SELECT count(DISTINCT id) AS ids, bool_and(d.machine_id <= 255 AND d.machine_id <> 200) AS in_pool_and_not_the_nodes
  FROM events, idgen_decode(events.id, 'fleet') d;
SELECT service, machine_ids, capacity, in_use FROM idgen_capacity JOIN idgen_layouts USING (service)
 WHERE service = 'fleet';

-- A database whose IDs can be thrown away (this one) may drop the registry anyway.
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
