-- Who may act for a service: idgen_grant_service and idgen_revoke_service, and what a role
-- without a grant is told (42501). Superusers and the extension owner act for every service.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
CREATE ROLE regress_idgen_app;
CREATE ROLE regress_idgen_other;

-- A grant answers true when it changed something, false when the role had it already.
SELECT idgen_grant_service('billing', 'regress_idgen_app') AS granted;
SELECT idgen_grant_service('billing', 'regress_idgen_app') AS granted_again;
SELECT service, role FROM idgen_private.idgen_service_members m
  CROSS JOIN LATERAL (SELECT m.member::regrole::text AS role) r ORDER BY service, role;

-- The granted role claims and mints for its service; another service is refused.
SET ROLE regress_idgen_app;
SELECT machine_id, outcome FROM idgen_claim('billing', '10.0.0.1', 8080);
SELECT idgen_next_id('billing') > 0 AS minted;
SELECT * FROM idgen_claim('payroll', '10.0.0.1', 8080);
\echo :LAST_ERROR_SQLSTATE
SELECT service FROM idgen_capacity ORDER BY service;
RESET ROLE;

-- A role granted nothing learns nothing of which services exist.
SET ROLE regress_idgen_other;
SELECT * FROM idgen_claim('billing', '10.0.0.2', 8080);
SELECT idgen_next_id('nosuch');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Revoked: the role's next call is refused.
SELECT idgen_revoke_service('billing', 'regress_idgen_app') AS revoked;
SELECT idgen_revoke_service('billing', 'regress_idgen_app') AS revoked_again;
SET ROLE regress_idgen_app;
SELECT idgen_heartbeat('billing', 0, '10.0.0.1', 8080, 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Refused arguments.
SELECT idgen_grant_service('billing', 'regress_idgen_nosuch');
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_grant_service(NULL, 'regress_idgen_app');
SELECT idgen_grant_service('billing ', 'regress_idgen_app');
-- Only a superuser or the extension owner grants.
SET ROLE regress_idgen_app;
SELECT idgen_grant_service('billing', 'regress_idgen_app');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
DROP ROLE regress_idgen_app;
DROP ROLE regress_idgen_other;
