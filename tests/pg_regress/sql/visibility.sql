-- Who sees what in the diagnostics: a role sees the services granted to it, and is told how many
-- it does not see (never "healthy" by omission); pg_monitor sees every service.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
CREATE ROLE regress_idgen_team;
CREATE ROLE regress_idgen_monitor IN ROLE pg_monitor;
SELECT machine_id FROM idgen_claim('cart', '10.0.0.1', 8080);
SELECT machine_id FROM idgen_claim('search', '10.0.0.1', 8081);
SELECT idgen_grant_service('cart', 'regress_idgen_team');

SET ROLE regress_idgen_team;
SELECT reads_all, services, hidden_services FROM idgen_visibility;
SELECT service, held FROM idgen_capacity ORDER BY service;
SELECT severity, finding, subject, detail FROM idgen_health() WHERE finding = 'services_hidden';
RESET ROLE;

SET ROLE regress_idgen_monitor;
SELECT reads_all, hidden_services FROM idgen_visibility;
SELECT service, held FROM idgen_capacity ORDER BY service;
SELECT count(*) AS services_hidden_findings FROM idgen_health() WHERE finding = 'services_hidden';
-- Reading is not acting: pg_monitor claims nothing.
SELECT * FROM idgen_claim('cart', '10.0.0.9', 8080);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
DROP ROLE regress_idgen_team;
DROP ROLE regress_idgen_monitor;
