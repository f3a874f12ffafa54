-- What protects the registry from being dropped or emptied while its ids may still be stamped:
-- DROP EXTENSION is refused (55006) while a node holds an id inside its lease; the refused DROP
-- changes nothing. Released, the registry may go.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id FROM idgen_claim('guarded', '10.0.0.1', 8080);
\set VERBOSITY terse
DROP EXTENSION idgen;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT count(*) AS rows_kept FROM system_nodes;
-- The registry's tables are closed to PUBLIC: no role below the extension's owner writes them by hand.
-- (idgen_health()'s list of findings is read by every role, written by none.)
SELECT c.relname, has_table_privilege('public', c.oid, 'SELECT') AS public_reads,
       has_table_privilege('public', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE') AS public_writes
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'idgen_private' AND c.relkind = 'r' ORDER BY c.relname;
SELECT has_table_privilege('public', 'system_nodes', 'SELECT') AS public_reads_system_nodes;
-- Released with its last stamp: nothing is guarded any more (this session minted nothing).
SELECT idgen_release('guarded', 0, '10.0.0.1', 8080, 1, now() - interval '1 second');
DROP EXTENSION idgen;
