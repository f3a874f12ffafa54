-- idgen_next_id as a migration meets it: the database's own service, a service that must exist
-- first (42704 names the function that creates it), one created by the same open transaction
-- (55000), and arguments refused.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never

-- The database's own service needs nothing.
SELECT idgen_next_id() > 0 AS minted, idgen_next_id(current_database()) > 0 AS minted_by_name;
-- A misspelt service is refused, for a superuser too, and creates nothing.
SELECT idgen_next_id('ordrs');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS services FROM idgen_layouts WHERE service = 'ordrs';
-- Defined and committed: it mints.
SELECT service, preset FROM idgen_define_layout('orders');
SELECT idgen_next_id('orders') > 0 AS minted;
-- Defined by this transaction, not committed yet: commit that first.
BEGIN;
SELECT service FROM idgen_define_layout('invoices');
SELECT idgen_next_id('invoices');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- idgen.service names the service of idgen_next_id() without an argument; the same rule holds.
SET idgen.service = 'orders';
SELECT (idgen_decode(idgen_next_id(), 'orders')).machine_id = machine_id AS from_its_lease
  FROM idgen_backend_leases() WHERE service = 'orders';
SET idgen.service = 'ordrs';
SELECT idgen_next_id();
RESET idgen.service;
-- Arguments refused.
SELECT idgen_next_id(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_next_id(repeat('x', 65));
-- Not in a parallel worker: the function is parallel unsafe, so a parallel plan keeps it in the leader.
SELECT proparallel FROM pg_proc WHERE proname = 'idgen_next_id' ORDER BY pronargs;

DROP EXTENSION idgen CASCADE;
