-- A released machine id cools down (idgen.release_cooldown, 1 minute by default) before another
-- node gets it; the node that released it gets it back at once, at a new version.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id, version, outcome FROM idgen_claim('cool', '10.0.0.1', 8080);
SELECT idgen_release('cool', 0, '10.0.0.1', 8080, 1, now());
SELECT machine_id, state FROM idgen_nodes WHERE service = 'cool';
-- Another node: not machine id 0, still cooling down.
SELECT machine_id, version, outcome FROM idgen_claim('cool', '10.0.0.2', 8080);
SELECT in_use, cooling_down, free FROM idgen_capacity WHERE service = 'cool';
-- The node that released it: its own id back, a new version.
SELECT machine_id, version, outcome FROM idgen_claim('cool', '10.0.0.1', 8080);
-- A release of an id not held: false and a WARNING, the registry unchanged.
SELECT idgen_release('cool', 5, '10.0.0.1', 8080, 1);
SELECT machine_id, host, version, released_at IS NULL AS held FROM system_nodes WHERE service = 'cool' ORDER BY machine_id;
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
