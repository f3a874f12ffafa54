-- The settings as the claim runs by (idgen_policy()), and the settings idgen defines, with units
-- and contexts: the thresholds are the whole server's, never one session's.
CREATE EXTENSION idgen;
\set SHOW_CONTEXT never
\x on
SELECT * FROM idgen_policy();
\x off
-- A threshold set for one session is refused: every process must take back ids by the same rules.
SET idgen.takeover_idle_1h = '30min';
\echo :LAST_ERROR_SQLSTATE
SET idgen.lease_safety_margin = '1min';
-- A value wrong on its own is refused when set, naming the setting.
ALTER SYSTEM SET idgen.takeover_idle_1h = '-5min';
ALTER SYSTEM SET idgen.capacity_warning = 1.5;
ALTER SYSTEM SET idgen.machine_id_range = '900-100';
-- The settings a session may change, and their values here.
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'idgen.%' AND context IN ('user', 'superuser') ORDER BY name;
DROP EXTENSION idgen CASCADE;
