-- A backend's own leases (idgen_backend_leases()): one per service it minted for, each a row of
-- the registry with a backend slot, and the IDs it issued from it.
CREATE EXTENSION idgen;
UPDATE idgen_private.idgen_registry SET version_base = 0;
\set SHOW_CONTEXT never
SELECT count(*) AS leases FROM idgen_backend_leases();
SELECT service FROM idgen_define_layout('audit', 'sonyflake');
SELECT count(DISTINCT id) AS ids FROM (SELECT idgen_next_id() AS id FROM generate_series(1, 100)) s;
SELECT count(DISTINCT id) AS ids FROM (SELECT idgen_next_id('audit') AS id FROM generate_series(1, 5)) s;
SELECT service = current_database() AS own_service, ids_issued, lease_until > verified_at AS leased,
       backend_slot IS NOT NULL AS has_slot
  FROM idgen_backend_leases() ORDER BY service = current_database() DESC;
-- Each is a registry row of this server's address with this backend's slot.
SELECT n.kind, n.state, n.pid = pg_backend_pid() AS this_backend
  FROM idgen_backend_leases() l JOIN idgen_nodes n USING (service, machine_id) ORDER BY n.service = current_database() DESC;
-- The IDs decode to the lease's machine id, by each service's layout.
SELECT l.machine_id = (idgen_decode(idgen_next_id('audit'), 'audit')).machine_id AS audit_from_its_lease
  FROM idgen_backend_leases() l WHERE l.service = 'audit';
ALTER EVENT TRIGGER idgen_drop_guard DISABLE;
DROP EXTENSION idgen CASCADE;
