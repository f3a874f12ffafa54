-- When a service is full, a claim takes back an idle id, oldest tier first (7 days, 1 day, then
-- 1 hour with an alert); the history says from whom. The holders here were written by hand.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never

INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT 'tiers', m, ('192.0.2.' || (m % 250))::inet, 10000 + m, 1 FROM generate_series(0, 1023) m;
-- Three holders stopped heartbeating: 2 hours, 2 days and 8 days ago (their reported
-- watermarks are as old, so the next holder need not wait).
UPDATE system_nodes SET last_seen = now() - interval '2 hours', issued_until = now() - interval '2 hours' WHERE service = 'tiers' AND machine_id = 10;
UPDATE system_nodes SET last_seen = now() - interval '2 days', issued_until = now() - interval '2 days' WHERE service = 'tiers' AND machine_id = 20;
UPDATE system_nodes SET last_seen = now() - interval '8 days', issued_until = now() - interval '8 days' WHERE service = 'tiers' AND machine_id = 30;
SELECT machine_id, state FROM idgen_nodes WHERE service = 'tiers' AND state <> 'live' ORDER BY machine_id;

-- Three nodes boot: the 7-day tier goes first, then the 1-day, then the 1-hour one (with an
-- alert WARNING; its payload is in tests/cluster/tests/tiers.rs).
SELECT machine_id, outcome FROM idgen_claim('tiers', '10.0.0.1', 8080);
SELECT machine_id, outcome FROM idgen_claim('tiers', '10.0.0.2', 8080);
SET client_min_messages = error;
SELECT machine_id, outcome FROM idgen_claim('tiers', '10.0.0.3', 8080);
RESET client_min_messages;
SELECT event, machine_id, outcome, holder, previous_holder FROM idgen_events
 WHERE service = 'tiers' AND event = 'take_back' ORDER BY event_id;
SELECT take_backs_7d, take_backs_1d, take_backs_1h FROM idgen_metrics WHERE service = 'tiers';

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
