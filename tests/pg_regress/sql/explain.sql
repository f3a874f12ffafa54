-- "Who made this ID?" (idgen_explain): the holder of its machine id at its time, from the
-- history, for a service node's ID and for one stamped before a take-back.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT machine_id FROM idgen_claim('told', '10.0.0.1', 8080);
-- An ID node 10.0.0.1 stamps now with machine id 0 (a service node mints outside the database).
SELECT idgen_min_id(now()) AS id_now \gset
SELECT service, machine_id, sequence, finding, holder, version FROM idgen_explain(:id_now, 'told');
-- No service named: each service the caller may read whose registry or history knows machine id 0.
SELECT service, finding FROM idgen_explain(:id_now) ORDER BY service;
SELECT * FROM idgen_explain(NULL);
\echo :LAST_ERROR_SQLSTATE
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
