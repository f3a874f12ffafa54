-- The registry as a DBA meets it: the table, the functions, the refused inputs.
CREATE EXTENSION idgen;
\d+ system_nodes
\df idgen_*

-- Two nodes boot; the first restarts on the same address.
SELECT machine_id, version, outcome, date_trunc('second', lease_until - now()) AS lease FROM idgen_claim('orders', '10.0.0.5', 8080);
SELECT machine_id, version, outcome FROM idgen_claim('orders', '2001:db8::6', 8080);
SELECT machine_id, version, outcome FROM idgen_claim('orders', '10.0.0.5', 8080);
SELECT date_trunc('second', idgen_heartbeat('orders', 0::smallint, '10.0.0.5', 8080, 2) - now()) AS lease;
SELECT idgen_release('orders', 1::smallint, '2001:db8::6', 8080, 1);
SELECT service, machine_id, host, port, version, released_at IS NOT NULL AS released FROM system_nodes ORDER BY machine_id;

-- Refused inputs: each names its argument; none writes anything.
CREATE TEMP TABLE before AS SELECT * FROM system_nodes;
SELECT * FROM idgen_claim(NULL, '10.0.0.1', 1);
SELECT * FROM idgen_claim('', '10.0.0.1', 1);
SELECT * FROM idgen_claim(repeat('x', 65), '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders ', '10.0.0.1', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.0/24', 1);
SELECT * FROM idgen_claim('orders', '10.0.0.1', 0);
SELECT idgen_heartbeat('orders', 1024::smallint, '10.0.0.1', 1, 1);
SELECT idgen_heartbeat('orders', 0::smallint, '10.0.0.1', 1, 0);
SELECT idgen_release('orders', NULL, '10.0.0.1', 1, 1);
SET idgen.takeover_idle_1d = '30min';
SELECT * FROM idgen_claim('orders', '10.0.0.1', 1);
RESET idgen.takeover_idle_1d;
SELECT count(*) AS changed_rows FROM (SELECT * FROM system_nodes EXCEPT SELECT * FROM before) changed;

-- Settings, with units.
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'idgen.%' ORDER BY name;
DROP EXTENSION idgen;
