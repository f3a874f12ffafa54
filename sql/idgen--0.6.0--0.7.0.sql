-- idgen 0.6.0 -> 0.7.0: per-service ID layouts (issue 20).
-- - idgen_private.idgen_layouts keeps each service's layout and pool, fixed at its first claim;
--   every service of this registry gets the layout it has used so far (snowflake, all 1,024 ids),
--   fixed. idgen_define_layout defines a new service's layout before its first claim; the view
--   idgen_layouts shows them.
-- - Machine ids are integer (a 16-bit field holds 65,536): system_nodes, the tombstones, the
--   history, idgen_id_parts, idgen_claim's result, idgen_heartbeat's and idgen_release's
--   argument (a call that passes 0::smallint still works: smallint casts to integer),
--   idgen_backend_leases and idgen_explain.
-- - idgen_claim(service, host, port, machine_id) claims a machine id a fleet already uses;
--   idgen_decode, idgen_min_id and idgen_max_id take a service and follow its layout.
-- - idgen_nodes, idgen_capacity and idgen_health() count each service's pool within
--   idgen.machine_id_range.
-- - idgen_registry.version_base: rows never registered start at a version drawn for each
--   registry (0 here if it has rows, tombstones or history: they keep starting at 1).
-- Every view and SQL function that reads a table whose machine_id changes type is dropped and
-- created again, as a fresh install has them. The 0.7.0 library also runs against 0.6.0's,
-- 0.5.1's, 0.5.0's and 0.4.0's objects until this update (every service has the default layout
-- there).
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.7.0'" to load this file. \quit

-- A reader or writer of the registry or the history would make the update wait, and every claim
-- queue behind it: fail at once instead (55P03), and retry.
LOCK TABLE idgen_private.idgen_history, idgen_private.nodes, idgen_private.idgen_tombstones,
    idgen_private.idgen_registry IN ACCESS EXCLUSIVE MODE NOWAIT;

-- This update drops every view of the extension and the functions below, changes the type of the
-- machine_id columns (system_nodes, the tombstones, the history, idgen_id_parts), and creates
-- them again. An object outside the extension that depends on any of them (a view, an SQL-standard
-- function, a row security policy of a user's, a view reading (idgen_decode(id)).machine_id) would
-- be dropped with them, silently, or block the update: refuse first, naming each, so that nothing
-- outside idgen changes. Every name is pg_catalog's or the extension's own (found through
-- pg_depend, not the search_path).
DO $refuse_outside_dependents$
DECLARE
    outside text;
BEGIN
    WITH RECURSIVE member AS (
        SELECT d.classid, d.objid
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::pg_catalog.name
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'::"char"
    ), recreated AS (
        -- (classid, objid, objsubid): an object, or (objsubid > 0) one column of a table or type.
        SELECT m.classid, m.objid, 0 AS objsubid
          FROM member m JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) m.objid
         WHERE m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['idgen_claim', 'idgen_heartbeat', 'idgen_release',
               'idgen_backend_leases', 'idgen_explain', 'idgen_health', 'holder_bound']::pg_catalog.name[])
        UNION ALL
        SELECT m.classid, m.objid, 0
          FROM member m JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) m.objid
         WHERE m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND c.relkind OPERATOR(pg_catalog.=) 'v'::"char"
        UNION ALL
        SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, a.attrelid, a.attnum
          FROM pg_catalog.pg_attribute a
         WHERE a.attname OPERATOR(pg_catalog.=) 'machine_id'::pg_catalog.name
           AND a.attrelid OPERATOR(pg_catalog.=) ANY (ARRAY[
               (SELECT c.oid FROM member m JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) m.objid
                 WHERE m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                   AND c.relname OPERATOR(pg_catalog.=) 'system_nodes'::pg_catalog.name),
               'idgen_private.idgen_tombstones'::pg_catalog.regclass::pg_catalog.oid,
               'idgen_private.idgen_history'::pg_catalog.regclass::pg_catalog.oid,
               (SELECT t.typrelid FROM member m JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) m.objid
                 WHERE m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                   AND t.typname OPERATOR(pg_catalog.=) 'idgen_id_parts'::pg_catalog.name)])
    ), dropped(classid, objid, objsubid) AS (
        SELECT r.classid, r.objid, r.objsubid FROM recreated r
        UNION
        -- What depends on a dropped object or changed column; a view's rule stands for its view.
        SELECT x.classid, x.objid, 0
          FROM dropped a
          JOIN pg_catalog.pg_depend d
            ON d.refclassid OPERATOR(pg_catalog.=) a.classid AND d.refobjid OPERATOR(pg_catalog.=) a.objid
           AND (a.objsubid OPERATOR(pg_catalog.=) 0 OR d.refobjsubid OPERATOR(pg_catalog.=) a.objsubid)
           AND d.deptype OPERATOR(pg_catalog.=) 'n'::"char"
          LEFT JOIN pg_catalog.pg_rewrite w
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
           AND w.oid OPERATOR(pg_catalog.=) d.objid
         CROSS JOIN LATERAL (SELECT CASE WHEN w.oid IS NULL THEN d.classid
                                         ELSE 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid END,
                                    COALESCE(w.ev_class, d.objid)) x(classid, objid)
    )
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.format('%s (owner %s)',
               pg_catalog.pg_describe_object(a.classid, a.objid, 0),
               COALESCE(pg_catalog.pg_get_userbyid((SELECT c.relowner FROM pg_catalog.pg_class c
                                                     WHERE a.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                                       AND c.oid OPERATOR(pg_catalog.=) a.objid)),
                        pg_catalog.pg_get_userbyid((SELECT p.proowner FROM pg_catalog.pg_proc p
                                                     WHERE a.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                                                       AND p.oid OPERATOR(pg_catalog.=) a.objid)),
                        pg_catalog.pg_get_userbyid((SELECT c.relowner FROM pg_catalog.pg_policy y
                                                      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) y.polrelid
                                                     WHERE a.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_policy'::pg_catalog.regclass
                                                       AND y.oid OPERATOR(pg_catalog.=) a.objid)),
                        'unknown')), '; ')
      INTO outside
      FROM dropped a
     WHERE a.objsubid OPERATOR(pg_catalog.=) 0
       AND NOT EXISTS (SELECT FROM member m
                        WHERE m.classid OPERATOR(pg_catalog.=) a.classid AND m.objid OPERATOR(pg_catalog.=) a.objid)
       -- A changed column's own table or type is no dependent, nor is a trigger or a constraint of
       -- idgen's own tables (idgen_key_unchanged, UPDATE OF machine_id, and the machine id's CHECK:
       -- created again below).
       AND NOT EXISTS (SELECT FROM recreated r
                        WHERE r.objsubid OPERATOR(pg_catalog.>) 0 AND r.objid OPERATOR(pg_catalog.=) a.objid)
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t JOIN member m ON m.objid OPERATOR(pg_catalog.=) t.tgrelid
                        WHERE a.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
                          AND t.oid OPERATOR(pg_catalog.=) a.objid)
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint c JOIN member m ON m.objid OPERATOR(pg_catalog.=) c.conrelid
                        WHERE a.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass
                          AND c.oid OPERATOR(pg_catalog.=) a.objid);
    IF outside IS NOT NULL THEN
        RAISE EXCEPTION 'idgen cannot update to 0.7.0: objects outside the extension depend on views, functions or machine_id columns the update changes'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = pg_catalog.format('Depending on them: %s. The update would drop them or stop at them. Nothing was changed.', outside),
                  HINT = 'Drop those objects (a temporary one goes with its session: pg_terminate_backend), run ALTER EXTENSION idgen UPDATE, then create them again.';
    END IF;
END
$refuse_outside_dependents$;

-- The privileges set on idgen's objects (a REVOKE ... FROM PUBLIC on a view, an EXECUTE granted
-- to a purge role) are kept for the objects created again: saved here, set again at the end.
CREATE TABLE idgen_private.update_saved_privileges (object text PRIMARY KEY, kind "char", owner pg_catalog.oid, acl pg_catalog.aclitem[]);
INSERT INTO idgen_private.update_saved_privileges
SELECT 'TABLE ' OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text, 'r', c.relowner, c.relacl
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
 WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::pg_catalog.name AND d.deptype OPERATOR(pg_catalog.=) 'e'::"char"
   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass AND c.relacl IS NOT NULL
UNION ALL
-- heartbeat and release take their machine id as integer now: their privileges go to the new ones
SELECT 'FUNCTION ' OPERATOR(pg_catalog.||) pg_catalog.replace(p.oid::pg_catalog.regprocedure::pg_catalog.text, '(text,smallint,', '(text,integer,'),
       'f', p.proowner, p.proacl
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
  JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
 WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::pg_catalog.name AND d.deptype OPERATOR(pg_catalog.=) 'e'::"char"
   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.proacl IS NOT NULL;

-- Every diagnostic, and what reads the registry's rows by their type, goes: created again below.
DROP FUNCTION idgen_health();
DROP VIEW idgen_private.visible_events, idgen_private.visible_nodes, idgen_private.visible_metrics,
    idgen_registry_status, idgen_tombstones, idgen_metrics, idgen_flapping_ids, idgen_restart_loops,
    idgen_events, idgen_capacity, idgen_nodes, idgen_visibility;
DROP FUNCTION idgen_private.holder_bound(idgen_private.nodes, interval, interval);
DROP VIEW idgen_private.nodes;
DROP FUNCTION idgen_claim(text, inet, integer);
DROP FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz, bigint, bigint, bigint);
DROP FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz);
DROP FUNCTION idgen_backend_leases();
DROP FUNCTION idgen_explain(bigint, text);

-- A claim looks for the claimant's own rows, released ones included, by its identity: without this,
-- in a service of 32,768 rows it read them all.
CREATE INDEX system_nodes_node_rows ON system_nodes (service, host, port);
COMMENT ON INDEX system_nodes_node_rows IS
    'The rows of a node identity, held or released: a claim finds the claimant''s own row by it, whatever the size of the service.';

-- Versions of rows never registered start at a base drawn for each registry, so that a node of a
-- dropped registry matches no row of one created again. This registry's rows started at 1, and
-- its history counts on that: its base is 0, unless it has nothing yet.
ALTER TABLE idgen_private.idgen_registry
    ADD COLUMN version_base BIGINT NOT NULL DEFAULT 0
        CONSTRAINT idgen_registry_version_base_not_negative CHECK (version_base >= 0);
ALTER TABLE idgen_private.idgen_registry ALTER COLUMN version_base DROP DEFAULT;
-- A registry with nothing in it yet (created at 0.6.0 and updated at once, as after a DROP with the
-- old install script at hand) draws its base as a new one does.
UPDATE idgen_private.idgen_registry
   SET version_base = pg_catalog.floor(pg_catalog.random() OPERATOR(pg_catalog.*) 4503599627370496::float8)::bigint
 WHERE NOT EXISTS (SELECT FROM system_nodes)
   AND NOT EXISTS (SELECT FROM idgen_private.idgen_tombstones)
   AND NOT EXISTS (SELECT FROM idgen_private.idgen_history);
COMMENT ON COLUMN idgen_private.idgen_registry.version_base IS
    'A row of a machine id never registered here starts at version_base + 1: drawn at random at CREATE EXTENSION (below 2^52), so that a node of a dropped registry, whose heartbeat names the version it holds, matches no row of a registry created again. 0 for a registry updated from before 0.7.0 that had rows, tombstones or history (they start at 1, as they did).';

-- Machine ids of a 16-bit field. (The trigger names the column: it goes for the change.)
DROP TRIGGER idgen_key_unchanged ON system_nodes;
ALTER TABLE system_nodes ALTER COLUMN machine_id TYPE integer;
ALTER TABLE system_nodes DROP CONSTRAINT system_nodes_machine_id_not_negative;
ALTER TABLE system_nodes ADD CONSTRAINT system_nodes_machine_id_in_range CHECK (machine_id BETWEEN 0 AND 65535);
COMMENT ON COLUMN system_nodes.machine_id IS
    'Snowflake machine id, within the service''s pool (idgen_layouts: 0 to 1023 by default, at most 0 to 65535).';
CREATE TRIGGER idgen_key_unchanged BEFORE UPDATE OF service, machine_id ON system_nodes
    FOR EACH ROW EXECUTE FUNCTION idgen_private.key_unchanged();
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_key_unchanged;
COMMENT ON TRIGGER idgen_key_unchanged ON system_nodes IS
    'Refuses an UPDATE that changes a row''s service or machine_id.';
ALTER TABLE idgen_private.idgen_tombstones ALTER COLUMN machine_id TYPE integer;
ALTER TABLE idgen_private.idgen_history ALTER COLUMN machine_id TYPE integer;
ALTER TYPE idgen_id_parts ALTER ATTRIBUTE machine_id TYPE integer;
COMMENT ON TYPE idgen_id_parts IS
    'The parts of an idgen ID: when it was stamped (the start of its tick: a millisecond, or the service layout''s time unit), by which machine id, at which sequence.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.bucket IS
    'Buckets 0 to 1023: one per never-registered machine id; 1024 to 2047: service node identities hash onto these. Machine ids past 1023 (the pools of wider fields) share the first 1,024, modulo 1,024.';

-- system_nodes as idgen's privileged SQL reaches it: bound to the table when created, so
-- that renaming or replacing the schema idgen is installed in changes nothing here.
-- (Automatically updatable: claims, heartbeats and releases write through it.)
CREATE VIEW idgen_private.nodes AS SELECT * FROM system_nodes;
COMMENT ON VIEW idgen_private.nodes IS
    'system_nodes, bound when the extension was created: idgen''s privileged SQL reads and writes the registry through this view, never through a name in a schema a lower role may own.';
REVOKE ALL ON idgen_private.nodes FROM PUBLIC;

-- The latest time any holder of a row's machine id may stamp, as a node taking the id
-- over must assume: a service node that has not released it may go on issuing for the
-- lease it was granted after its last report (its clock) and, as the server sees it,
-- until its takeover_at; everyone else is bounded by issued_until. lease and
-- takeover_age are today's settings, for rows that record no terms. The body is bound
-- at creation, so nothing on a caller's search_path can change what it calls.
CREATE FUNCTION idgen_private.holder_bound(n idgen_private.nodes, lease interval, takeover_age interval)
    RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN n.backend_slot IS NULL AND n.released_at IS NULL
    THEN GREATEST(n.issued_until OPERATOR(pg_catalog.+) COALESCE(n.lease_until OPERATOR(pg_catalog.-) n.last_seen, lease),
                  COALESCE(n.takeover_at, n.last_seen OPERATOR(pg_catalog.+) takeover_age))
    ELSE n.issued_until
END;
COMMENT ON FUNCTION idgen_private.holder_bound(idgen_private.nodes, interval, interval) IS
    'The latest time any holder of the row''s machine id may stamp in an ID, for a node taking it over: issued_until, or for a service node that has not released it, its last report plus the lease it was granted (and at least its takeover_at). lease and takeover_age stand in for rows that record no terms.';
-- Arithmetic only, and the view idgen_nodes (read by every role that may read it) calls it.
GRANT EXECUTE ON FUNCTION idgen_private.holder_bound(idgen_private.nodes, interval, interval) TO PUBLIC;

-- Each service's ID layout and pool. A service's first claim fixes it (recording snowflake,
-- every machine id, for a service never given a layout); before that, idgen_define_layout
-- may define it and define it again. From then on it never changes: the IDs already minted
-- are cut by it, and so are those of every holder still minting. pg_dump keeps it.
CREATE TABLE idgen_private.idgen_layouts (
    service           VARCHAR(64) PRIMARY KEY,
    preset            TEXT NOT NULL,
    epoch             TIMESTAMPTZ NOT NULL,
    time_unit_ms      INTEGER NOT NULL,
    time_bits         INTEGER NOT NULL,
    machine_bits      INTEGER NOT NULL,
    sequence_bits     INTEGER NOT NULL,
    field_order       TEXT NOT NULL,
    pool_first        INTEGER NOT NULL,
    pool_last         INTEGER NOT NULL,
    defined_at        TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    defined_by        TEXT NOT NULL,
    fixed_at          TIMESTAMPTZ,
    unregistered_from INTEGER NOT NULL,
    CONSTRAINT idgen_layouts_preset_known CHECK (preset OPERATOR(pg_catalog.=) ANY (ARRAY['snowflake', 'sonyflake', 'js_safe', 'custom'])),
    CONSTRAINT idgen_layouts_field_order_known CHECK (field_order OPERATOR(pg_catalog.=) ANY (ARRAY['time_machine_sequence', 'time_sequence_machine'])),
    CONSTRAINT idgen_layouts_widths CHECK (time_bits >= 1 AND machine_bits BETWEEN 1 AND 16 AND sequence_bits >= 1
                                           AND time_bits + machine_bits + sequence_bits <= 63),
    CONSTRAINT idgen_layouts_time_unit_positive CHECK (time_unit_ms >= 1),
    CONSTRAINT idgen_layouts_pool_in_field CHECK (pool_first >= 0 AND pool_first <= pool_last
                                                  AND pool_last < (1 << machine_bits))
);
COMMENT ON TABLE idgen_private.idgen_layouts IS
    'Each service''s ID layout (epoch, time unit, field widths and order) and pool (the machine ids claims hand out). Defined with idgen_define_layout before the service''s first claim, which fixes it (a service never defined gets snowflake, every machine id); never changed after. Read it through the view idgen_layouts.';
COMMENT ON COLUMN idgen_private.idgen_layouts.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_layouts.preset IS 'snowflake, sonyflake or js_safe when the layout is that preset''s (whatever the pool), custom otherwise.';
COMMENT ON COLUMN idgen_private.idgen_layouts.epoch IS 'When the time field is 0.';
COMMENT ON COLUMN idgen_private.idgen_layouts.time_unit_ms IS 'Milliseconds per tick of the time field; a tick is stamped until its end.';
COMMENT ON COLUMN idgen_private.idgen_layouts.time_bits IS 'Bits of the time field (the highest field).';
COMMENT ON COLUMN idgen_private.idgen_layouts.machine_bits IS 'Bits of the machine-id field, 1 to 16.';
COMMENT ON COLUMN idgen_private.idgen_layouts.sequence_bits IS 'Bits of the sequence field: a holder stamps 2^sequence_bits IDs per tick at most.';
COMMENT ON COLUMN idgen_private.idgen_layouts.field_order IS 'time_machine_sequence (Snowflake) or time_sequence_machine (Sonyflake): the two fields below the time.';
COMMENT ON COLUMN idgen_private.idgen_layouts.pool_first IS 'The lowest machine id claims hand out for the service (with idgen.machine_id_range on each server).';
COMMENT ON COLUMN idgen_private.idgen_layouts.pool_last IS 'The highest machine id claims hand out for the service.';
COMMENT ON COLUMN idgen_private.idgen_layouts.defined_at IS 'When the layout was defined (or recorded by the first claim).';
COMMENT ON COLUMN idgen_private.idgen_layouts.defined_by IS 'The role that defined it, "first claim" for the default a claim recorded, or "update to 0.7.0" for a service of an earlier version.';
COMMENT ON COLUMN idgen_private.idgen_layouts.fixed_at IS 'When the service''s first claim fixed the layout: from then on it never changes. NULL: defined, not claimed yet (idgen_define_layout may define it again).';
COMMENT ON COLUMN idgen_private.idgen_layouts.unregistered_from IS 'A hint for claims: every machine id of the pool below it has a registry row or a tombstone, so the search for a never-registered id starts here.';
SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_layouts', '');
REVOKE ALL ON idgen_private.idgen_layouts FROM PUBLIC;

-- Every service of this registry has cut its IDs by the snowflake layout, with all 1,024 ids:
-- recorded, and fixed. (Those with no row nor guard yet are fixed by their first claim.)
INSERT INTO idgen_private.idgen_layouts
    (service, preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order, pool_first, pool_last,
     defined_by, fixed_at, unregistered_from)
SELECT s.service, 'snowflake', '2025-01-01 00:00:00+00', 1, 41, 10, 12, 'time_machine_sequence', 0, 1023,
       'update to 0.7.0', pg_catalog.clock_timestamp(), 0
  FROM (SELECT n.service FROM idgen_private.nodes n
        UNION SELECT t.service FROM idgen_private.idgen_tombstones t
        UNION SELECT g.service FROM idgen_private.idgen_claim_guards g
        UNION SELECT h.service FROM idgen_private.idgen_history h) s;

-- The functions whose machine id is integer now, the claim by machine id, the layout's
-- definition, and the decoders that take a service.
CREATE  FUNCTION "idgen_claim"(
	"service" TEXT, /* Option < & str > */
	"host" inet, /* Option < Inet > */
	"port" INT /* Option < i32 > */
) RETURNS TABLE (
	"machine_id" INT,  /* i32 */
	"version" bigint,  /* i64 */
	"outcome" TEXT,  /* String */
	"lease_until" timestamp with time zone,  /* TimestampWithTimeZone */
	"not_before" timestamp with time zone  /* TimestampWithTimeZone */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_claim_wrapper';

CREATE  FUNCTION "idgen_claim"(
	"service" TEXT, /* Option < & str > */
	"host" inet, /* Option < Inet > */
	"port" INT, /* Option < i32 > */
	"machine_id" INT /* Option < i32 > */
) RETURNS TABLE (
	"machine_id" INT,  /* i32 */
	"version" bigint,  /* i64 */
	"outcome" TEXT,  /* String */
	"lease_until" timestamp with time zone,  /* TimestampWithTimeZone */
	"not_before" timestamp with time zone  /* TimestampWithTimeZone */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_claim_machine_id_wrapper';

CREATE  FUNCTION "idgen_heartbeat"(
	"service" TEXT, /* Option < & str > */
	"machine_id" INT, /* Option < i32 > */
	"host" inet, /* Option < Inet > */
	"port" INT, /* Option < i32 > */
	"version" bigint, /* Option < i64 > */
	"issued_until" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"clock_backward_waits" bigint DEFAULT NULL, /* Option < i64 > */
	"clock_backward_refusals" bigint DEFAULT NULL, /* Option < i64 > */
	"sequence_exhaustions" bigint DEFAULT NULL /* Option < i64 > */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'node_heartbeat_reporting_wrapper';

CREATE  FUNCTION "idgen_release"(
	"service" TEXT, /* Option < & str > */
	"machine_id" INT, /* Option < i32 > */
	"host" inet, /* Option < Inet > */
	"port" INT, /* Option < i32 > */
	"version" bigint, /* Option < i64 > */
	"issued_until" timestamp with time zone DEFAULT NULL /* Option < TimestampWithTimeZone > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'node_release_wrapper';

CREATE  FUNCTION "idgen_backend_leases"() RETURNS TABLE (
	"service" TEXT,  /* String */
	"machine_id" INT,  /* i32 */
	"version" bigint,  /* i64 */
	"backend_slot" INT,  /* Option < i32 > */
	"claimed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"not_before" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"verified_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"issued_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"ids_issued" bigint,  /* i64 */
	"last_used_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_backend_leases_wrapper';

CREATE  FUNCTION "idgen_explain"(
	"id" bigint, /* Option < i64 > */
	"service" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"service" TEXT,  /* String */
	"machine_id" INT,  /* i32 */
	"stamped_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"sequence" INT,  /* i32 */
	"finding" TEXT,  /* String */
	"holder" TEXT,  /* Option < String > */
	"role" TEXT,  /* Option < String > */
	"pid" INT,  /* Option < i32 > */
	"version" bigint,  /* Option < i64 > */
	"stamps_after" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"stamps_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"detail" TEXT  /* String */
)
STABLE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_explain_wrapper';

CREATE  FUNCTION "idgen_define_layout"(
	"service" TEXT, /* Option < & str > */
	"preset" TEXT DEFAULT 'snowflake', /* Option < & str > */
	"pool_first" INT DEFAULT NULL, /* Option < i32 > */
	"pool_last" INT DEFAULT NULL, /* Option < i32 > */
	"epoch" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"time_unit_ms" INT DEFAULT NULL, /* Option < i32 > */
	"time_bits" INT DEFAULT NULL, /* Option < i32 > */
	"machine_bits" INT DEFAULT NULL, /* Option < i32 > */
	"sequence_bits" INT DEFAULT NULL, /* Option < i32 > */
	"field_order" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"service" TEXT,  /* String */
	"preset" TEXT,  /* String */
	"epoch" timestamp with time zone,  /* TimestampWithTimeZone */
	"time_unit_ms" INT,  /* i32 */
	"time_bits" INT,  /* i32 */
	"machine_bits" INT,  /* i32 */
	"sequence_bits" INT,  /* i32 */
	"field_order" TEXT,  /* String */
	"pool_first" INT,  /* i32 */
	"pool_last" INT,  /* i32 */
	"machine_ids" INT,  /* i32 */
	"ids_per_second" bigint,  /* i64 */
	"ends_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"defined_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"defined_by" TEXT,  /* String */
	"fixed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_define_layout_wrapper';

CREATE  FUNCTION "idgen_decode"(
	"id" bigint, /* i64 */
	"service" TEXT /* & str */
) RETURNS idgen_id_parts /* :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx :: pgbox :: AllocatedByRust
> */
STRICT STABLE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_decode_for_service_wrapper';

CREATE  FUNCTION "idgen_min_id"(
	"ts" timestamp with time zone, /* TimestampWithTimeZone */
	"service" TEXT /* & str */
) RETURNS bigint /* i64 */
STRICT STABLE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_min_id_for_service_wrapper';

CREATE  FUNCTION "idgen_max_id"(
	"ts" timestamp with time zone, /* TimestampWithTimeZone */
	"service" TEXT /* & str */
) RETURNS bigint /* i64 */
STRICT STABLE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_max_id_for_service_wrapper';

-- Comments and privileges of the registry functions, as a fresh install has them.

COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot: a free one of the service''s pool within this server''s idgen.machine_id_range. Returns (machine_id, version, outcome, lease_until, not_before); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Stamp no ID at or before not_before (earlier holders may have used that time), cut by the service''s layout (idgen_layouts); heartbeat before lease_until. Call it in a transaction of its own.';
COMMENT ON FUNCTION idgen_claim(text, inet, integer, integer) IS
    'Claim the machine id a service node already uses (a fleet that computes or pins its ids, adopted into the registry): granted only if it is free, the node''s own, or takeable as any claim takes one back (released past the cooldown, idle past the take-back tiers), with the same not_before; refused with its holder named (55006) otherwise, and 22023 when the pool or this server''s idgen.machine_id_range does not hold it.';
COMMENT ON FUNCTION idgen_define_layout(text, text, integer, integer, timestamptz, integer, integer, integer, integer, text) IS
    'Define the ID layout and pool of a service before its first claim: a preset (snowflake, sonyflake or js_safe), changed by the parts given (epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order), and the machine ids claims hand out (pool_first, pool_last; default: all the field holds). It may be defined again until a claim fixes it; after that a different layout is refused (55000), the same one answered as is. Returns the layout as recorded. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default), reporting issued_until: the latest timestamp the node has stamped or its clock''s reading, whichever is later (NULL: the server clock stands in; the report minus the server clock is kept as the node''s clock_offset), and its generator''s counts since the claim: clock_backward_waits, clock_backward_refusals, sequence_exhaustions (NULL: not counted; negative: 22023, nothing written). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, integer, inet, integer, bigint, timestamptz) IS
    'Give a machine id back on graceful shutdown, reporting issued_until: the latest timestamp the node stamped. Others may take it after idgen.release_cooldown and after that watermark (without one: the release time plus idgen.lease_safety_margin); the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Open to every role: each call checks, for the role acting at that moment, that it may act
-- for the service (idgen_grant_service), and refuses with 42501 before reading or writing
-- anything else. The functions switch to the extension owner's rights only after that.
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_release(text, integer, inet, integer, bigint, timestamptz) TO PUBLIC;

COMMENT ON FUNCTION idgen_grant_service(text, text) IS
    'Let a role (and its members) claim, heartbeat and release the machine ids of a service and use it in idgen_next_id(service). Takes effect at the next statement of every session. Returns true when the grant is new. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_revoke_service(text, text) IS
    'Take a service back from a role; returns true when it had been granted. Takes effect at the next statement of every session, open ones included. Superusers and the extension owner only.';
-- Who may act for which service, and how a service's IDs are cut, are decided by superusers and
-- the extension owner only.
REVOKE EXECUTE ON FUNCTION idgen_grant_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_revoke_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_define_layout(text, text, integer, integer, timestamptz, integer, integer, integer, integer, text) FROM PUBLIC;

-- Comments and privileges of the ID functions, as a fresh install has them.

COMMENT ON FUNCTION idgen_next_id() IS
    'Next Snowflake ID for the session''s service (setting idgen.service, default the database name): 41 bits of milliseconds since 2025-01-01 | 10-bit machine id | 12-bit sequence. Use as a column default: id bigint PRIMARY KEY DEFAULT idgen_next_id(). The backend claims its own machine id in system_nodes on first use, with the extension owner''s rights, and every registry write behind an ID commits on its own before the ID is returned: no rollback or savepoint can take it back.';
COMMENT ON FUNCTION idgen_next_id(text) IS
    'Next Snowflake ID for the given service, cut by the service''s layout (idgen_layouts). IDs of one service never collide, whether minted by database backends or by service nodes that claimed their machine ids with idgen_claim.';
COMMENT ON FUNCTION idgen_decode(bigint) IS
    'Splits an ID of the default (snowflake) layout into (ts, machine_id, sequence); ts has millisecond precision.';
COMMENT ON FUNCTION idgen_decode(bigint, text) IS
    'Splits an ID of the service''s layout into (ts, machine_id, sequence); ts is the start of its tick (a millisecond, 10 ms for sonyflake and js_safe).';
COMMENT ON FUNCTION idgen_min_id(timestamptz) IS
    'Smallest ID (default layout) stamped in the millisecond of ts: WHERE id BETWEEN idgen_min_id(a) AND idgen_max_id(b) selects a time range through the primary key.';
COMMENT ON FUNCTION idgen_max_id(timestamptz) IS
    'Largest ID (default layout) stamped in the millisecond of ts: WHERE id BETWEEN idgen_min_id(a) AND idgen_max_id(b) selects a time range through the primary key.';
COMMENT ON FUNCTION idgen_min_id(timestamptz, text) IS
    'Smallest ID of the service''s layout stamped in the tick of ts. Every ID the service mints from now on is at least idgen_min_id(clock_timestamp(), service): a column whose keys are all below it can take DEFAULT idgen_next_id(service) and keep its keys unique and ordered.';
COMMENT ON FUNCTION idgen_max_id(timestamptz, text) IS
    'Largest ID of the service''s layout stamped in the tick of ts.';
COMMENT ON FUNCTION idgen_backend_leases() IS
    'This backend''s leases on machine ids, one row per service: machine id, version, slot, when claimed, not_before (its IDs are stamped after it), last verified, lease end, issued_until (the watermark the registry holds; no ID is stamped at or past it), IDs issued and the time of the last one. Every lease shown is committed in the registry.';

-- One lease per service a backend mints for: usually one (the default of 1,000 rows misleads plans).
ALTER FUNCTION idgen_backend_leases() ROWS 1;

-- Any role may mint IDs; the registry writes behind it run as the extension owner.
GRANT EXECUTE ON FUNCTION idgen_next_id() TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_next_id(text) TO PUBLIC;

-- Every diagnostic, as a fresh install creates it.
CREATE VIEW idgen_visibility AS
SELECT pg_catalog.pg_has_role(CURRENT_USER, 'pg_monitor'::name, 'MEMBER'::text)
       OR EXISTS (SELECT FROM pg_catalog.pg_extension e
                   WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::name
                     AND pg_catalog.pg_has_role(CURRENT_USER, e.extowner, 'MEMBER'::text)) AS reads_all,
       ARRAY(SELECT DISTINCT m.service::text FROM idgen_private.idgen_service_members m
              WHERE pg_catalog.pg_has_role(CURRENT_USER, m.member::pg_catalog.oid, 'MEMBER'::text)) AS services;
COMMENT ON VIEW idgen_visibility IS
    'Which services the current role may read in the idgen views: all of them (reads_all: superusers, the extension owner, pg_monitor), or those granted to it with idgen_grant_service.';
COMMENT ON COLUMN idgen_visibility.reads_all IS 'True when the role reads every service.';
COMMENT ON COLUMN idgen_visibility.services IS 'The services granted to the role (or to roles it is a member of).';

CREATE VIEW idgen_layouts WITH (security_barrier) AS
SELECT l.service,
       l.preset,
       l.epoch,
       l.time_unit_ms,
       l.time_bits,
       l.machine_bits,
       l.sequence_bits,
       l.field_order,
       l.pool_first,
       l.pool_last,
       l.pool_last OPERATOR(pg_catalog.-) l.pool_first OPERATOR(pg_catalog.+) 1 AS machine_ids,
       (1::bigint OPERATOR(pg_catalog.<<) l.sequence_bits) OPERATOR(pg_catalog.*) 1000 OPERATOR(pg_catalog./) l.time_unit_ms AS ids_per_second,
       l.epoch OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => ((((1::bigint OPERATOR(pg_catalog.<<) l.time_bits) OPERATOR(pg_catalog.*) l.time_unit_ms)
           OPERATOR(pg_catalog.-) 1)::float8 OPERATOR(pg_catalog./) 1000::float8)) AS ends_at,
       l.defined_at,
       l.defined_by,
       l.fixed_at
  FROM idgen_private.idgen_layouts l
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR l.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_layouts IS
    'The ID layout and pool of each service you may read (idgen_define_layout; a service''s first claim fixes it, and records snowflake for a service never given one). A service with no row here uses snowflake, every machine id, until its first claim.';
COMMENT ON COLUMN idgen_layouts.service IS 'The service.';
COMMENT ON COLUMN idgen_layouts.preset IS 'snowflake, sonyflake or js_safe when the layout is that preset''s, custom otherwise.';
COMMENT ON COLUMN idgen_layouts.epoch IS 'When the time field is 0.';
COMMENT ON COLUMN idgen_layouts.time_unit_ms IS 'Milliseconds per tick of the time field.';
COMMENT ON COLUMN idgen_layouts.time_bits IS 'Bits of the time field.';
COMMENT ON COLUMN idgen_layouts.machine_bits IS 'Bits of the machine-id field.';
COMMENT ON COLUMN idgen_layouts.sequence_bits IS 'Bits of the sequence field.';
COMMENT ON COLUMN idgen_layouts.field_order IS 'time_machine_sequence or time_sequence_machine.';
COMMENT ON COLUMN idgen_layouts.pool_first IS 'The lowest machine id claims hand out for the service.';
COMMENT ON COLUMN idgen_layouts.pool_last IS 'The highest machine id claims hand out for the service.';
COMMENT ON COLUMN idgen_layouts.machine_ids IS 'How many machine ids the pool holds (each server hands out those inside its idgen.machine_id_range).';
COMMENT ON COLUMN idgen_layouts.ids_per_second IS 'IDs one holder can stamp per second at most: 2^sequence_bits per tick.';
COMMENT ON COLUMN idgen_layouts.ends_at IS 'The last time the layout can stamp: from then on no ID of the service can be issued.';
COMMENT ON COLUMN idgen_layouts.defined_at IS 'When it was defined, or recorded by the first claim.';
COMMENT ON COLUMN idgen_layouts.defined_by IS 'The role that defined it, "first claim", or "update to 0.7.0" (a service of an earlier version).';
COMMENT ON COLUMN idgen_layouts.fixed_at IS 'When the service''s first claim fixed it; NULL: it may still be defined again.';

CREATE VIEW idgen_nodes WITH (security_barrier) AS
SELECT n.service,
       n.machine_id,
       CASE WHEN n.backend_slot IS NULL THEN 'service'::text ELSE 'backend'::text END AS kind,
       idgen_node_state(n.last_seen, n.released_at, n.lease_until, n.takeover_at) AS state,
       idgen_node_name(n.host, n.port, n.backend_slot) AS holder,
       pg_catalog.date_trunc('second'::text, pg_catalog.now() OPERATOR(pg_catalog.-) n.last_seen) AS idle,
       COALESCE(n.lease_until, n.last_seen OPERATOR(pg_catalog.+) p.lease) AS lease_until,
       n.issued_until,
       idgen_private.holder_bound(n, p.lease, p.takeover_idle_1h) AS bound,
       n.version,
       n.machine_id OPERATOR(pg_catalog.>=) GREATEST(COALESCE(l.pool_first, 0), p.machine_id_first)
           AND n.machine_id OPERATOR(pg_catalog.<=) LEAST(COALESCE(l.pool_last, 1023), p.machine_id_last) AS in_range,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_offset END AS clock_offset,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_backward_waits END AS clock_backward_waits,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_backward_refusals END AS clock_backward_refusals,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.sequence_exhaustions END AS sequence_exhaustions,
       a.pid,
       pg_catalog.pg_get_userbyid(a.usesysid) AS "user",
       (SELECT d.datname FROM pg_catalog.pg_database d WHERE d.oid OPERATOR(pg_catalog.=) a.datid) AS database,
       a.application_name,
       a.backend_start,
       n.host,
       n.port,
       n.backend_slot,
       n.last_seen,
       n.released_at,
       n.created_at,
       n.takeover_at
  FROM idgen_private.nodes n
  LEFT JOIN idgen_private.idgen_layouts l ON l.service::text OPERATOR(pg_catalog.=) n.service::text
 CROSS JOIN idgen_policy() p
 CROSS JOIN idgen_visibility v
  LEFT JOIN pg_catalog.pg_stat_get_activity(NULL::integer) a
         ON a.pid OPERATOR(pg_catalog.=) idgen_slot_pid(n.host, n.port, n.backend_slot, n.last_seen)
 WHERE v.reads_all OR n.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_nodes IS
    'Every registry row (system_nodes) you may read, with its kind, its state by the claim''s own rules, its lease and watermark, and for a backend row the live connection now in its slot.';
COMMENT ON COLUMN idgen_nodes.service IS 'The service.';
COMMENT ON COLUMN idgen_nodes.machine_id IS 'The Snowflake machine id.';
COMMENT ON COLUMN idgen_nodes.kind IS 'service (a node that called idgen_claim) or backend (a database backend''s own lease).';
COMMENT ON COLUMN idgen_nodes.state IS
    'live (inside its lease), past_lease (its holder must have stopped issuing; not takeable yet), idle_1h / idle_1d / idle_7d (idle long enough for that take-back tier), cooling_down (released, within idgen.release_cooldown), released (released, free for the next claim).';
COMMENT ON COLUMN idgen_nodes.holder IS 'The holder: host:port, or backend slot N of host:port.';
COMMENT ON COLUMN idgen_nodes.idle IS 'Time since the last claim or heartbeat (to the second).';
COMMENT ON COLUMN idgen_nodes.lease_until IS 'When the holder must stop issuing unless it heartbeats: the lease it was granted (for a row that records none, last_seen plus today''s lease).';
COMMENT ON COLUMN idgen_nodes.issued_until IS 'The watermark: the latest timestamp the holders of this id reported, or (a backend) the end of the window it may issue in, or its last stamp once it stopped.';
COMMENT ON COLUMN idgen_nodes.bound IS 'The latest time any holder of this id may have stamped: the next holder starts after it (for a held service node, its last report plus its lease).';
COMMENT ON COLUMN idgen_nodes.version IS 'Ownership epoch.';
COMMENT ON COLUMN idgen_nodes.in_range IS 'Inside the machine ids this server hands out for the service: its pool (idgen_layouts) within idgen.machine_id_range. A holder outside keeps its id until it stops.';
COMMENT ON COLUMN idgen_nodes.clock_offset IS 'Service nodes: how far the holder''s clock was ahead of the server''s (negative: behind) at its last heartbeat, from the watermark it reported (its clock or its last stamp, whichever was later) minus the server clock. NULL: not reported by this holder (no watermark, or no heartbeat since its claim). idgen_health() reports holder_clock_skew past idgen.clock_skew_alert.';
COMMENT ON COLUMN idgen_nodes.clock_backward_waits IS 'Service nodes, as their last heartbeat reported: how often since the claim the generator''s clock stepped back and it waited. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.clock_backward_refusals IS 'Service nodes, as their last heartbeat reported: how often since the claim the clock stepped back further than the generator may wait, and it refused to issue. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.sequence_exhaustions IS 'Service nodes, as their last heartbeat reported: how often since the claim the generator used up a millisecond''s sequence and waited for the next. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.pid IS 'Backend rows of this server: the process holding the row, if it still runs (a process that took the slot after the row was last written is not shown: it has not used the row).';
COMMENT ON COLUMN idgen_nodes."user" IS 'That process''s user (as pg_stat_activity.usename).';
COMMENT ON COLUMN idgen_nodes.database IS 'That process''s database.';
COMMENT ON COLUMN idgen_nodes.application_name IS 'That process''s application_name.';
COMMENT ON COLUMN idgen_nodes.backend_start IS 'When that process started (visible to its own user, superusers and pg_read_all_stats).';
COMMENT ON COLUMN idgen_nodes.host IS 'The holder''s address.';
COMMENT ON COLUMN idgen_nodes.port IS 'The holder''s port.';
COMMENT ON COLUMN idgen_nodes.backend_slot IS 'The backend slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_nodes.last_seen IS 'Last claim or heartbeat.';
COMMENT ON COLUMN idgen_nodes.released_at IS 'When it was released; NULL while held.';
COMMENT ON COLUMN idgen_nodes.created_at IS 'When the machine id was first registered for the service.';
COMMENT ON COLUMN idgen_nodes.takeover_at IS 'No take-back before this time, as granted with the lease (NULL: not recorded).';

CREATE VIEW idgen_capacity WITH (security_barrier) AS
SELECT s.service,
       c.capacity,
       s.in_use,
       c.capacity OPERATOR(pg_catalog.-) s.in_use AS free,
       pg_catalog.round(s.in_use::numeric OPERATOR(pg_catalog./) c.capacity::numeric, 3) AS used,
       (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_warning AS above_alert,
       CASE WHEN (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_critical THEN 'critical'::text
            WHEN (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_warning THEN 'warning'::text
       END AS level,
       s.held,
       s.live,
       s.past_lease,
       s.takeable_7d,
       s.takeable_1d,
       s.takeable_1h,
       s.cooling_down,
       s.released,
       o.machine_id AS oldest_idle_machine_id,
       o.holder AS oldest_idle_holder,
       o.idle AS oldest_idle
  FROM (SELECT n.service,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.<>) 'released'::text) AS in_use,
               pg_catalog.count(*) FILTER (WHERE n.released_at IS NULL) AS held,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'live'::text) AS live,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'past_lease'::text) AS past_lease,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_7d'::text) AS takeable_7d,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_1d'::text) AS takeable_1d,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_1h'::text) AS takeable_1h,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'cooling_down'::text) AS cooling_down,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'released'::text) AS released
          FROM idgen_nodes n WHERE n.in_range GROUP BY n.service) s
 CROSS JOIN idgen_policy() p
  LEFT JOIN idgen_private.idgen_layouts l ON l.service::text OPERATOR(pg_catalog.=) s.service::text
 CROSS JOIN LATERAL (SELECT GREATEST(LEAST(COALESCE(l.pool_last, 1023), p.machine_id_last)
                                     OPERATOR(pg_catalog.-) GREATEST(COALESCE(l.pool_first, 0), p.machine_id_first)
                                     OPERATOR(pg_catalog.+) 1, 0) AS capacity) c
  LEFT JOIN LATERAL (SELECT n.machine_id, n.holder, n.idle FROM idgen_nodes n
                      WHERE n.service OPERATOR(pg_catalog.=) s.service AND n.in_range AND n.released_at IS NULL
                      ORDER BY n.last_seen, n.machine_id LIMIT 1) o ON true;
COMMENT ON VIEW idgen_capacity IS
    'Per service you may read, within the machine ids this server hands out for it (its pool within idgen.machine_id_range): how many are in use (held, or cooling down after a release), free for the next claim, and takeable per tier, and the oldest idle holder. A claim that leaves a service above idgen.capacity_warning or idgen.capacity_critical raises an idgen_alert with the level.';
COMMENT ON COLUMN idgen_capacity.service IS 'The service.';
COMMENT ON COLUMN idgen_capacity.capacity IS 'Machine ids the service can have on this server: its pool (by default the snowflake layout''s 1,024) within idgen.machine_id_range.';
COMMENT ON COLUMN idgen_capacity.in_use IS 'Held, or released and still cooling down: a claim gets none of them without a take-back.';
COMMENT ON COLUMN idgen_capacity.free IS 'Never registered, or released past the cooldown: the next claims get these first.';
COMMENT ON COLUMN idgen_capacity.used IS 'in_use / capacity.';
COMMENT ON COLUMN idgen_capacity.above_alert IS 'used is above idgen.capacity_warning (level is not NULL).';
COMMENT ON COLUMN idgen_capacity.level IS 'warning (used above idgen.capacity_warning), critical (above idgen.capacity_critical), or NULL below both.';
COMMENT ON COLUMN idgen_capacity.held IS 'Rows not released (live, past their lease, or idle).';
COMMENT ON COLUMN idgen_capacity.live IS 'Held inside their lease.';
COMMENT ON COLUMN idgen_capacity.past_lease IS 'Held past their lease, not yet takeable.';
COMMENT ON COLUMN idgen_capacity.takeable_7d IS 'Held, idle long enough for the 7-day tier.';
COMMENT ON COLUMN idgen_capacity.takeable_1d IS 'Held, idle long enough for the 1-day tier (and not the 7-day one).';
COMMENT ON COLUMN idgen_capacity.takeable_1h IS 'Held, idle long enough for the 1-hour tier only (taking one raises an alert).';
COMMENT ON COLUMN idgen_capacity.cooling_down IS 'Released within idgen.release_cooldown.';
COMMENT ON COLUMN idgen_capacity.released IS 'Released past the cooldown (counted in free).';
COMMENT ON COLUMN idgen_capacity.oldest_idle_machine_id IS 'The held machine id seen longest ago.';
COMMENT ON COLUMN idgen_capacity.oldest_idle_holder IS 'Its holder.';
COMMENT ON COLUMN idgen_capacity.oldest_idle IS 'How long it has been idle.';

CREATE VIEW idgen_events WITH (security_barrier) AS
SELECT h.at,
       h.event,
       h.service,
       h.machine_id,
       h.version,
       h.outcome,
       idgen_node_name(h.host, h.port, h.backend_slot) AS holder,
       h.role,
       h.pid,
       idgen_node_name(h.previous_host, h.previous_port, h.previous_backend_slot) AS previous_holder,
       h.previous_version,
       h.previous_idle_seconds::float8 OPERATOR(pg_catalog.*) interval '1 second' AS previous_idle,
       h.not_before,
       h.issued_until,
       h.previous_bound,
       h.detail,
       h.event_id,
       h.host,
       h.port,
       h.backend_slot,
       h.previous_host,
       h.previous_port,
       h.previous_backend_slot
  FROM idgen_private.idgen_history h
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR h.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_events IS
    'The ownership history (idgen_history) of the services you may read: who got which machine id when and how, who it was taken from, restarts, releases, losses and refused claims. A database backend''s reuse of its slot''s held row is not recorded (ownership does not move); a service node''s claim of the row it still held is a restart.';
COMMENT ON COLUMN idgen_events.at IS 'When it happened.';
COMMENT ON COLUMN idgen_events.event IS 'claim, take_back, restart (a service node claimed the id it still held), release, set_aside, ownership_lost, refused_full, refused_watermark, refused_no_standby or watermark_behind.';
COMMENT ON COLUMN idgen_events.service IS 'The service.';
COMMENT ON COLUMN idgen_events.machine_id IS 'The machine id; NULL for refused_full and refused_no_standby.';
COMMENT ON COLUMN idgen_events.version IS 'Ownership epoch after the event (or the one a loser held).';
COMMENT ON COLUMN idgen_events.outcome IS 'Claims, take-backs and restarts: new, reused, released, idle_7d, idle_1d, idle_1h.';
COMMENT ON COLUMN idgen_events.holder IS 'The node: host:port, or backend slot N of host:port.';
COMMENT ON COLUMN idgen_events.role IS 'The role that called idgen.';
COMMENT ON COLUMN idgen_events.pid IS 'The server process that recorded it.';
COMMENT ON COLUMN idgen_events.previous_holder IS 'Take-backs: who the id was taken from.';
COMMENT ON COLUMN idgen_events.previous_version IS 'Take-backs: its version; restarts: the version of the node''s earlier process.';
COMMENT ON COLUMN idgen_events.previous_idle IS 'Take-backs: how long it had been idle.';
COMMENT ON COLUMN idgen_events.not_before IS 'Claims, take-backs and restarts: the holder stamps after this.';
COMMENT ON COLUMN idgen_events.issued_until IS 'Releases and set-asides: the watermark left.';
COMMENT ON COLUMN idgen_events.previous_bound IS 'Take-backs: the latest time the previous holder may have stamped; restarts: the node''s earlier process.';
COMMENT ON COLUMN idgen_events.detail IS 'Refusals and losses: what the caller was told.';
COMMENT ON COLUMN idgen_events.event_id IS 'Order of recording.';
COMMENT ON COLUMN idgen_events.host IS 'The node''s address.';
COMMENT ON COLUMN idgen_events.port IS 'The node''s port.';
COMMENT ON COLUMN idgen_events.backend_slot IS 'The backend slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_events.previous_host IS 'Take-backs: the previous holder''s address.';
COMMENT ON COLUMN idgen_events.previous_port IS 'Take-backs: its port.';
COMMENT ON COLUMN idgen_events.previous_backend_slot IS 'Take-backs: its backend slot, if a backend.';

CREATE VIEW idgen_restart_loops WITH (security_barrier) AS
SELECT e.service,
       e.holder,
       pg_catalog.count(*) AS claims,
       pg_catalog.min(e.at) AS first_at,
       pg_catalog.max(e.at) AS last_at,
       pg_catalog.string_agg(DISTINCT e.machine_id::text, ', '::text) AS machine_ids,
       e.host,
       e.port
  FROM idgen_events e
 CROSS JOIN idgen_policy() p
 WHERE e.event OPERATOR(pg_catalog.=) ANY (ARRAY['claim'::text, 'take_back'::text, 'restart'::text])
   AND e.backend_slot IS NULL
   AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) p.restart_loop_window)
 GROUP BY e.service, e.holder, e.host, e.port, p.restart_loop_claims
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) p.restart_loop_claims;
COMMENT ON VIEW idgen_restart_loops IS
    'Service nodes (service, host, port) of the services you may read that claimed more than idgen.restart_loop_claims times within idgen.restart_loop_window: claims, take-backs and restarts (a claim of the id the node still held) in the history. A node in a loop takes another machine id at each start it cannot reuse its own: the service fills.';
COMMENT ON COLUMN idgen_restart_loops.service IS 'The service.';
COMMENT ON COLUMN idgen_restart_loops.holder IS 'The node: host:port.';
COMMENT ON COLUMN idgen_restart_loops.claims IS 'Its claims (claim, take_back and restart events) within the window.';
COMMENT ON COLUMN idgen_restart_loops.first_at IS 'The first of them in the window.';
COMMENT ON COLUMN idgen_restart_loops.last_at IS 'The last of them.';
COMMENT ON COLUMN idgen_restart_loops.machine_ids IS 'The machine ids it got.';
COMMENT ON COLUMN idgen_restart_loops.host IS 'The node''s address.';
COMMENT ON COLUMN idgen_restart_loops.port IS 'The node''s port.';

CREATE VIEW idgen_flapping_ids WITH (security_barrier) AS
SELECT e.service,
       e.machine_id,
       pg_catalog.count(*) AS moves,
       pg_catalog.min(e.at) AS first_at,
       pg_catalog.max(e.at) AS last_at,
       pg_catalog.string_agg(DISTINCT e.holder, ', '::text) AS holders
  FROM idgen_events e
 CROSS JOIN idgen_policy() p
 WHERE e.event OPERATOR(pg_catalog.=) 'take_back'::text
   AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) p.restart_loop_window)
   AND (e.previous_host IS NULL
        OR e.previous_host OPERATOR(pg_catalog.<>) e.host
        OR e.previous_port OPERATOR(pg_catalog.<>) e.port
        OR COALESCE(e.previous_backend_slot, -1) OPERATOR(pg_catalog.<>) COALESCE(e.backend_slot, -1))
 GROUP BY e.service, e.machine_id, p.restart_loop_claims
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) p.restart_loop_claims;
COMMENT ON VIEW idgen_flapping_ids IS
    'Machine ids of the services you may read that moved from one holder to another (take-backs of released or idle ids) more than idgen.restart_loop_claims times within idgen.restart_loop_window.';
COMMENT ON COLUMN idgen_flapping_ids.service IS 'The service.';
COMMENT ON COLUMN idgen_flapping_ids.machine_id IS 'The machine id.';
COMMENT ON COLUMN idgen_flapping_ids.moves IS 'Take-backs by another holder within the window.';
COMMENT ON COLUMN idgen_flapping_ids.first_at IS 'The first of them in the window.';
COMMENT ON COLUMN idgen_flapping_ids.last_at IS 'The last of them.';
COMMENT ON COLUMN idgen_flapping_ids.holders IS 'The holders that took it.';

CREATE VIEW idgen_metrics WITH (security_barrier) AS
SELECT c.service,
       c.held,
       c.in_use,
       c.capacity,
       c.free,
       c.used::float8 AS used_ratio,
       COALESCE(t.take_backs_released, 0)::bigint AS take_backs_released,
       COALESCE(t.take_backs_7d, 0)::bigint AS take_backs_7d,
       COALESCE(t.take_backs_1d, 0)::bigint AS take_backs_1d,
       COALESCE(t.take_backs_1h, 0)::bigint AS take_backs_1h,
       COALESCE(t.ownership_losses, 0)::bigint AS ownership_losses,
       COALESCE(t.refused_claims, 0)::bigint AS refused_claims,
       COALESCE(pg_catalog.date_part('epoch'::text, c.oldest_idle), 0::float8) AS oldest_idle_seconds,
       COALESCE(t.history_events_purged, 0)::bigint AS history_events_purged,
       COALESCE(t.restarts, 0)::bigint AS restarts,
       COALESCE(r.restart_loops, 0)::bigint AS restart_loops,
       COALESCE(f.flapping_ids, 0)::bigint AS flapping_ids,
       COALESCE(g.max_clock_offset_seconds, 0::float8) AS max_clock_offset_seconds,
       -- Sums of bigint counts are numeric: capped, so that no report can make the view fail.
       LEAST(COALESCE(g.clock_backward_waits, 0), 9223372036854775807)::bigint AS clock_backward_waits,
       LEAST(COALESCE(g.clock_backward_refusals, 0), 9223372036854775807)::bigint AS clock_backward_refusals,
       LEAST(COALESCE(g.sequence_exhaustions, 0), 9223372036854775807)::bigint AS sequence_exhaustions,
       CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text THEN 2
            WHEN c.level OPERATOR(pg_catalog.=) 'warning'::text THEN 1 ELSE 0 END AS capacity_level
  FROM idgen_capacity c
  LEFT JOIN (SELECT n.service,
                    pg_catalog.max(pg_catalog.abs(pg_catalog.date_part('epoch'::text, n.clock_offset))) AS max_clock_offset_seconds,
                    pg_catalog.sum(n.clock_backward_waits) AS clock_backward_waits,
                    pg_catalog.sum(n.clock_backward_refusals) AS clock_backward_refusals,
                    pg_catalog.sum(n.sequence_exhaustions) AS sequence_exhaustions
               FROM idgen_nodes n WHERE n.released_at IS NULL GROUP BY n.service) g
         ON g.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN (SELECT l.service, pg_catalog.count(*) AS restart_loops FROM idgen_restart_loops l GROUP BY l.service) r
         ON r.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN (SELECT i.service, pg_catalog.count(*) AS flapping_ids FROM idgen_flapping_ids i GROUP BY i.service) f
         ON f.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN LATERAL (
       SELECT pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'released'::text) AS take_backs_released,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_7d'::text) AS take_backs_7d,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_1d'::text) AS take_backs_1d,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_1h'::text) AS take_backs_1h,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'ownership_lost'::text) AS ownership_losses,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) ANY (ARRAY['refused_full'::text, 'refused_watermark'::text, 'refused_no_standby'::text])) AS refused_claims,
              pg_catalog.sum(k.n) FILTER (WHERE k.purged) AS history_events_purged,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'restart'::text) AS restarts
         FROM (SELECT h.event, h.outcome, pg_catalog.count(*) AS n, false AS purged FROM idgen_private.idgen_history h
                WHERE h.service OPERATOR(pg_catalog.=) c.service GROUP BY h.event, h.outcome
               UNION ALL
               SELECT p.event, CASE WHEN p.outcome OPERATOR(pg_catalog.=) ''::text THEN NULL ELSE p.outcome END, p.events, true
                 FROM idgen_private.idgen_history_purged p WHERE p.service OPERATOR(pg_catalog.=) c.service) k
  ) t ON true;
COMMENT ON VIEW idgen_metrics IS
    'One row per service you may read, numeric columns only, for postgres_exporter (see the README''s queries.yaml). The counters count every event since the extension was created, purged ones included.';
COMMENT ON COLUMN idgen_metrics.service IS 'The service (a label).';
COMMENT ON COLUMN idgen_metrics.held IS 'Machine ids held (not released).';
COMMENT ON COLUMN idgen_metrics.in_use IS 'Held or cooling down.';
COMMENT ON COLUMN idgen_metrics.capacity IS 'Machine ids a service can have.';
COMMENT ON COLUMN idgen_metrics.free IS 'Free for the next claim without a take-back.';
COMMENT ON COLUMN idgen_metrics.used_ratio IS 'in_use / capacity, 0 to 1.';
COMMENT ON COLUMN idgen_metrics.take_backs_released IS 'Counter: released ids taken over by another node.';
COMMENT ON COLUMN idgen_metrics.take_backs_7d IS 'Counter: take-backs in the 7-day tier.';
COMMENT ON COLUMN idgen_metrics.take_backs_1d IS 'Counter: take-backs in the 1-day tier.';
COMMENT ON COLUMN idgen_metrics.take_backs_1h IS 'Counter: take-backs in the 1-hour tier (each also alerted).';
COMMENT ON COLUMN idgen_metrics.ownership_losses IS 'Counter: holders that learnt their id had moved (at most one per minute).';
COMMENT ON COLUMN idgen_metrics.refused_claims IS 'Counter: claims refused (service full, watermark ahead, or no synchronous standby), at most one of each kind per minute.';
COMMENT ON COLUMN idgen_metrics.oldest_idle_seconds IS 'Idle time of the held id seen longest ago, in seconds.';
COMMENT ON COLUMN idgen_metrics.history_events_purged IS 'Counter: history events removed by idgen_purge_history().';
COMMENT ON COLUMN idgen_metrics.restarts IS 'Counter: service nodes that claimed the id they still held (restarts without a release).';
COMMENT ON COLUMN idgen_metrics.restart_loops IS 'Service nodes in a restart loop now (idgen_restart_loops).';
COMMENT ON COLUMN idgen_metrics.flapping_ids IS 'Machine ids moving between holders now (idgen_flapping_ids).';
COMMENT ON COLUMN idgen_metrics.max_clock_offset_seconds IS 'The largest clock offset (ahead or behind, in seconds) a holder of the service reported at its last heartbeat; 0 when none reported.';
COMMENT ON COLUMN idgen_metrics.clock_backward_waits IS 'The holders'' clock steps back waited out, as their last heartbeats reported (each since its claim: a restart starts it again).';
COMMENT ON COLUMN idgen_metrics.clock_backward_refusals IS 'The holders'' clock steps back refused, as their last heartbeats reported (each since its claim).';
COMMENT ON COLUMN idgen_metrics.sequence_exhaustions IS 'The holders'' waits for the next millisecond after using up one''s sequence, as their last heartbeats reported (each since its claim).';
COMMENT ON COLUMN idgen_metrics.capacity_level IS '0 below idgen.capacity_warning, 1 above it (warning), 2 above idgen.capacity_critical (critical).';

CREATE VIEW idgen_tombstones WITH (security_barrier) AS
SELECT t.service,
       t.machine_id,
       t.bound,
       t.bound OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS ahead,
       t.version,
       t.removed_at
  FROM idgen_private.idgen_tombstones t
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR t.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_tombstones IS
    'Machine ids of the services you may read whose registry rows were deleted or truncated by hand: no claim hands one out before its bound, and a row restored for it takes the bound and a newer version.';
COMMENT ON COLUMN idgen_tombstones.service IS 'The service.';
COMMENT ON COLUMN idgen_tombstones.machine_id IS 'The machine id whose row was removed.';
COMMENT ON COLUMN idgen_tombstones.bound IS 'The latest time a holder of the removed rows may stamp: claims of the id stamp after it.';
COMMENT ON COLUMN idgen_tombstones.ahead IS 'The bound is still ahead of the clock: claims skip the id until then.';
COMMENT ON COLUMN idgen_tombstones.version IS 'The highest version the removed rows had; a row restored for the id gets a newer one.';
COMMENT ON COLUMN idgen_tombstones.removed_at IS 'When the last of them was removed.';

CREATE VIEW idgen_registry_status AS
SELECT r.created_at,
       (SELECT pg_catalog.count(*) FROM idgen_tombstones t) AS tombstones,
       (SELECT pg_catalog.max(t.bound) FROM idgen_tombstones t WHERE t.ahead) AS held_back_until
  FROM idgen_private.idgen_registry r;
COMMENT ON VIEW idgen_registry_status IS 'When this registry was created, and what it keeps of rows removed by hand (idgen_tombstones) in the services you may read.';
COMMENT ON COLUMN idgen_registry_status.created_at IS 'When the registry was created (CREATE EXTENSION).';
COMMENT ON COLUMN idgen_registry_status.tombstones IS 'Machine ids whose rows were deleted or truncated by hand: claims stamp after their bound.';
COMMENT ON COLUMN idgen_registry_status.held_back_until IS 'The latest tombstone bound still ahead of the clock: until then some machine ids are skipped by claims. NULL: none.';

-- What idgen_explain reads, as its caller: the views above, reached through names in a
-- schema no lower role controls (bound when created, like every view).
CREATE VIEW idgen_private.visible_events AS SELECT * FROM idgen_events;
CREATE VIEW idgen_private.visible_nodes AS SELECT * FROM idgen_nodes;
CREATE VIEW idgen_private.visible_metrics AS SELECT * FROM idgen_metrics;
CREATE VIEW idgen_private.visible_layouts AS SELECT * FROM idgen_layouts;
COMMENT ON VIEW idgen_private.visible_events IS 'idgen_events, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_nodes IS 'idgen_nodes, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_metrics IS 'idgen_metrics, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_layouts IS 'idgen_layouts, as idgen_explain reads it (bound when created).';

-- One row per finding; none means healthy. Reads only the views above, as the caller.
-- jit = off: compiling its plan would take far longer than running it (it reads every
-- registry row a few times); the SET also keeps it from being inlined into the caller's
-- query, whose plan would then be JIT-compiled instead. ROWS: a healthy registry has none.
CREATE FUNCTION idgen_health()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
    SET jit = off
    ROWS 10
BEGIN ATOMIC
SELECT f.severity, f.finding, f.subject, f.detail, f.action FROM (
    SELECT 'critical'::text AS severity, 'settings_inconsistent'::text AS finding, 'idgen.*'::text AS subject,
           p.problem AS detail,
           'Correct the idgen.* settings (ALTER SYSTEM SET ..., then SELECT pg_reload_conf()). Until then no machine id is claimed or renewed.'::text AS action
      FROM idgen_policy() p WHERE p.problem IS NOT NULL
    UNION ALL
    SELECT 'critical', 'server_clock_behind', 'registry',
           pg_catalog.format('The newest registry write (last_seen %s) is %s ahead of the server clock: the clock stepped back.',
                             x.newest, x.newest OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()),
           'Fix the time source (chronyc tracking, timedatectl). Backends wait out up to idgen.max_clock_backward and then refuse; IDs never reuse time. Do not move the clock back further.'
      FROM (SELECT pg_catalog.max(n.last_seen) AS newest FROM idgen_nodes n) x
     WHERE x.newest OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    UNION ALL
    SELECT 'warning', 'tombstone_ahead', t.service,
           pg_catalog.format('%s machine ids whose rows were deleted or truncated by hand may still be stamped by their holders until %s (machine ids %s): claims skip them until then.',
                             t.n, t.until, t.ids),
           'Nothing else is held back: claims take other ids meanwhile. Next time free ids with idgen_release, not DELETE or TRUNCATE (README: freeing an id by hand).'
      FROM (SELECT s.service, pg_catalog.count(*) AS n, pg_catalog.max(s.bound) AS until,
                   pg_catalog.string_agg(s.machine_id::text, ', '::text ORDER BY s.machine_id) AS ids
              FROM idgen_tombstones s WHERE s.ahead GROUP BY s.service) t
    UNION ALL
    SELECT CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text
                  OR (c.free OPERATOR(pg_catalog.=) 0
                      AND (c.takeable_7d OPERATOR(pg_catalog.+) c.takeable_1d OPERATOR(pg_catalog.+) c.takeable_1h) OPERATOR(pg_catalog.=) 0)
                THEN 'critical' ELSE 'warning' END,
           'capacity', c.service,
           pg_catalog.format('%s of %s machine ids in use (%s), above idgen.capacity_%s (%s); %s free, takeable 7d/1d/1h: %s/%s/%s; oldest idle: machine id %s, %s, idle %s.',
                             c.in_use, c.capacity, c.used, c.level,
                             CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text THEN p.capacity_critical ELSE p.capacity_warning END,
                             c.free, c.takeable_7d, c.takeable_1d, c.takeable_1h,
                             c.oldest_idle_machine_id, c.oldest_idle_holder, c.oldest_idle),
           pg_catalog.format('Find why so many nodes hold ids: SELECT * FROM idgen_nodes WHERE service = %L ORDER BY last_seen; release the ids of nodes stopped for good (README: freeing an id by hand), or give the nodes their own service names.', c.service)
      FROM idgen_capacity c CROSS JOIN idgen_policy() p WHERE c.level IS NOT NULL
    UNION ALL
    SELECT 'warning', 'holder_clock_skew', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s''s clock was %s %s the server''s at its last heartbeat (%s ago), more than idgen.clock_skew_alert (%s).',
                             n.holder, GREATEST(n.clock_offset, OPERATOR(pg_catalog.-) n.clock_offset),
                             CASE WHEN n.clock_offset OPERATOR(pg_catalog.>) interval '0' THEN 'ahead of'::text ELSE 'behind'::text END,
                             n.idle, p.clock_skew_alert),
           'Check the node''s time synchronisation (chronyc tracking, timedatectl). A clock ahead keeps its machine id from other nodes for as long after it stops; a clock behind stamps behind the server''s time, and behind its not_before after a claim.'
      FROM idgen_nodes n CROSS JOIN idgen_policy() p
     WHERE n.released_at IS NULL
       AND (n.clock_offset OPERATOR(pg_catalog.>) p.clock_skew_alert
            OR n.clock_offset OPERATOR(pg_catalog.<) (OPERATOR(pg_catalog.-) p.clock_skew_alert))
    UNION ALL
    SELECT 'warning', 'clock_backward_refusals', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s reports %s clock steps back since its claim that were too large to wait out: its generator refused to issue IDs meanwhile.', n.holder, n.clock_backward_refusals),
           'Fix the node''s time source (chronyc tracking, timedatectl); its generator issues again once its clock passes its last stamp. Its clock_offset in idgen_nodes shows how far it is off.'
      FROM idgen_nodes n
     WHERE n.released_at IS NULL AND n.clock_backward_refusals OPERATOR(pg_catalog.>) 0
    UNION ALL
    SELECT 'warning', 'restart_loop', pg_catalog.format('%s %s', r.service, r.holder),
           pg_catalog.format('%s claimed %s times within idgen.restart_loop_window (%s), from %s to %s (machine ids %s): it restarts in a loop.',
                             r.holder, r.claims, p.restart_loop_window, r.first_at, r.last_at, r.machine_ids),
           pg_catalog.format('Find why the node exits (its logs: a crash, an OOM kill, a failing health check): SELECT * FROM idgen_events WHERE service = %L AND host = %L AND port = %s ORDER BY at. A start that cannot reuse its id takes another one, so the service fills.', r.service, pg_catalog.host(r.host), r.port)
      FROM idgen_restart_loops r CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT 'warning', 'id_flapping', pg_catalog.format('%s machine id %s', f.service, f.machine_id),
           pg_catalog.format('Machine id %s moved between holders %s times within idgen.restart_loop_window (%s), from %s to %s (taken by %s).',
                             f.machine_id, f.moves, p.restart_loop_window, f.first_at, f.last_at, f.holders),
           pg_catalog.format('Nodes take the id from each other: look for nodes that release and restart at once, or that stop heartbeating: SELECT * FROM idgen_events WHERE service = %L AND machine_id = %s ORDER BY at.', f.service, f.machine_id)
      FROM idgen_flapping_ids f CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT 'warning', 'setting_deprecated', 'idgen.capacity_alert',
           pg_catalog.format('idgen.capacity_alert is set (%s), but since idgen 0.6.0 it has no effect: idgen.capacity_warning (%s) and idgen.capacity_critical (%s) replace it.',
                             p.deprecated_capacity_alert, p.capacity_warning, p.capacity_critical),
           'ALTER SYSTEM RESET idgen.capacity_alert; ALTER SYSTEM SET idgen.capacity_warning = ... (and idgen.capacity_critical); SELECT pg_reload_conf();'
      FROM idgen_policy() p
     WHERE p.deprecated_capacity_alert IS NOT NULL
    UNION ALL
    SELECT 'warning', 'capacity_levels_inverted', 'idgen.capacity_warning',
           pg_catalog.format('idgen.capacity_warning (%s) is above idgen.capacity_critical (%s): the warning level is taken as the critical one.',
                             p.inverted_capacity_warning, p.capacity_critical),
           'ALTER SYSTEM SET idgen.capacity_warning = ... (at or below idgen.capacity_critical); SELECT pg_reload_conf();'
      FROM idgen_policy() p
     WHERE p.inverted_capacity_warning IS NOT NULL
    UNION ALL
    SELECT 'warning', 'holder_past_lease', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s last heartbeat %s ago; its lease ended at %s, so it must have stopped issuing IDs.', n.holder, n.idle, n.lease_until),
           'If the node still runs, it lost the database or its heartbeat died: restart it (it claims its id back). If it is gone for good, nothing is needed: the id is taken back after idgen.takeover_idle_1h, or release it by hand.'
      FROM idgen_nodes n
     WHERE n.kind OPERATOR(pg_catalog.=) 'service'::text
       AND n.state OPERATOR(pg_catalog.=) ANY (ARRAY['past_lease'::text, 'idle_1h'::text])
    UNION ALL
    SELECT 'warning', 'watermark_ahead', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('Its watermark %s is %s ahead of the server clock, more than a lease and a heartbeat interval: %s reported time from a clock that ran ahead, or the server clock stepped back.',
                             n.issued_until, n.issued_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(), n.holder),
           'No other node can use this id until then (claims skip it). Check the clocks of the node and of the server.'
      FROM idgen_nodes n CROSS JOIN idgen_policy() p
     WHERE n.issued_until OPERATOR(pg_catalog.>)
           (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p.lease OPERATOR(pg_catalog.+) p.heartbeat_interval)
    UNION ALL
    SELECT 'warning', 'watermark_behind', pg_catalog.format('%s machine id %s', w.service, w.machine_id),
           pg_catalog.format('%s reported a watermark behind the one the registry holds (last at %s): %s', w.holder, w.at, w.detail),
           'Check the node''s clock (NTP) and that it reports UTC; a node stamping behind its not_before may repeat IDs of the id''s earlier holder: stop it, fix the clock, restart it.'
      FROM (SELECT DISTINCT ON (e.service, e.machine_id) e.service, e.machine_id, e.holder, e.at, e.detail
              FROM idgen_events e
             WHERE e.event OPERATOR(pg_catalog.=) 'watermark_behind'::text
               AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day')
             ORDER BY e.service, e.machine_id, e.at DESC) w
    UNION ALL
    SELECT 'warning', 'outside_range', o.service,
           pg_catalog.format('%s rows outside the machine ids this server hands out for the service (its pool within idgen.machine_id_range %s-%s) may still be stamped until %s (machine ids %s): %s of them held.',
                             o.n, p.machine_id_first, p.machine_id_last, o.until, o.ids, o.held),
           'This server hands them out no more; their holders keep them until they stop, and move inside the range on restart. Do not give these ids to another server before that time has passed and none is held here (README: sharding).'
      FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.count(*) FILTER (WHERE n.released_at IS NULL) AS held,
                   pg_catalog.max(n.issued_until) AS until,
                   pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
              FROM idgen_nodes n
             WHERE NOT n.in_range
               AND (n.released_at IS NULL OR n.issued_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
             GROUP BY n.service) o
     CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT CASE WHEN r.names THEN 'critical' ELSE 'warning' END,
           CASE WHEN r.names THEN 'synchronous_standby_missing' ELSE 'replication_async' END,
           'replication',
           CASE WHEN r.names
                THEN pg_catalog.format('synchronous_standby_names is %L but no synchronous standby streams: every registry write waits for one (claims, heartbeats and lease renewals hang).', pg_catalog.current_setting('synchronous_standby_names'))
                ELSE pg_catalog.format('%s standbys stream from this server, none synchronously: a failover to one of them can lose committed claims, and hand a machine id out twice.', r.standbys)
           END,
           CASE WHEN r.names
                THEN 'Bring a standby back, or change synchronous_standby_names; do not turn synchronous_commit off for idgen (it raises it for its own writes anyway).'
                ELSE 'Make a standby synchronous (synchronous_standby_names), or keep failover off that standby; idgen.require_synchronous_standby = on refuses claims meanwhile.'
           END
      FROM (SELECT pg_catalog.count(*) FILTER (WHERE s.state OPERATOR(pg_catalog.=) 'streaming'::text) AS standbys,
                   pg_catalog.count(*) FILTER (WHERE s.state OPERATOR(pg_catalog.=) 'streaming'::text
                                              AND s.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text])) AS synchronous,
                   pg_catalog.current_setting('synchronous_standby_names') OPERATOR(pg_catalog.<>) ''::text AS names
              FROM pg_catalog.pg_stat_get_wal_senders() s
             -- Standbys only: a logical-replication walsender serves a database, not a failover.
             WHERE (SELECT a.datid FROM pg_catalog.pg_stat_get_activity(s.pid) a) IS NULL) r
     WHERE r.synchronous OPERATOR(pg_catalog.=) 0 AND (r.names OR r.standbys OPERATOR(pg_catalog.>) 0)
    UNION ALL
    SELECT 'notice', 'generator_waits', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s reports, since its claim, %s clock steps back waited out and %s waits for the next millisecond after using up a millisecond''s sequence.',
                             n.holder, COALESCE(n.clock_backward_waits, 0), COALESCE(n.sequence_exhaustions, 0)),
           'Nothing is wrong: its IDs stay unique. Many clock waits: check its time source. Many sequence waits: the node issues at its limit; spread the load over more nodes.'
      FROM idgen_nodes n
     WHERE n.released_at IS NULL
       AND (n.clock_backward_waits OPERATOR(pg_catalog.>) 0 OR n.sequence_exhaustions OPERATOR(pg_catalog.>) 0)
    UNION ALL
    SELECT 'notice', 'stale_backend_rows', b.service,
           pg_catalog.format('%s backend rows idle longer than idgen.takeover_idle_7d (machine ids %s): their slots have not used idgen since.', b.n, b.ids),
           'Nothing is wrong: the next claims of the service take them back first. To tidy up, see the README (freeing an id by hand).'
      FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
              FROM idgen_nodes n
             WHERE n.kind OPERATOR(pg_catalog.=) 'backend'::text AND n.state OPERATOR(pg_catalog.=) 'idle_7d'::text
             GROUP BY n.service) b
    UNION ALL
    SELECT 'notice', 'history_purge_due', 'idgen_history',
           pg_catalog.format('The oldest history event is from %s, older than idgen.history_retention (%s).', e.oldest, p.history_retention),
           'SELECT idgen_purge_history(); and schedule it daily (cron or pg_cron).'
      FROM (SELECT pg_catalog.min(e.at) AS oldest FROM idgen_events e) e CROSS JOIN idgen_policy() p
     WHERE e.oldest OPERATOR(pg_catalog.<)
           (pg_catalog.now() OPERATOR(pg_catalog.-) p.history_retention OPERATOR(pg_catalog.-) interval '1 day')
) f
ORDER BY CASE WHEN f.severity OPERATOR(pg_catalog.=) 'critical'::text THEN 1
              WHEN f.severity OPERATOR(pg_catalog.=) 'warning'::text THEN 2 ELSE 3 END, f.finding, f.subject;
END;
COMMENT ON FUNCTION idgen_health() IS
    'What the person on call must know, one row per finding (severity critical, warning or notice; what; which rows; what to do), over the services you may read. No rows: healthy.';

GRANT SELECT ON idgen_visibility, idgen_layouts, idgen_nodes, idgen_capacity, idgen_events, idgen_metrics, idgen_tombstones,
    idgen_restart_loops, idgen_flapping_ids,
    idgen_registry_status TO PUBLIC;
GRANT SELECT ON idgen_private.visible_events, idgen_private.visible_nodes, idgen_private.visible_metrics,
    idgen_private.visible_layouts TO PUBLIC;

-- The planner's estimates: idgen_policy() returns one row (the default of 1,000 made every
-- view that joins it cost a thousand times its size, and JIT-compile), idgen_explain() one
-- per service. tests/cluster/tests/diagnostics.rs keeps every plan under jit_above_cost.
ALTER FUNCTION idgen_policy() ROWS 1;
ALTER FUNCTION idgen_explain(bigint, text) ROWS 1;

COMMENT ON FUNCTION idgen_policy() IS
    'The effective idgen settings as the claim uses them, one row: the lease, heartbeat interval, cooldown, take-back ages, the capacity levels (idgen.capacity_warning, idgen.capacity_critical), history retention, the machine ids this server hands out (idgen.machine_id_range: count, first, last; each service''s pool within it), whether claims require a synchronous standby, problem (why the settings are inconsistent, or NULL), what idgen_health() reports by: idgen.clock_skew_alert, idgen.restart_loop_window, idgen.restart_loop_claims, deprecated_capacity_alert (idgen.capacity_alert when set: it has no effect since 0.6.0), and inverted_capacity_warning (idgen.capacity_warning as set, when above idgen.capacity_critical: capacity_warning is then the critical level).';
COMMENT ON FUNCTION idgen_node_state(timestamptz, timestamptz, timestamptz, timestamptz) IS
    'The state of a registry row from its last_seen, released_at, lease_until and takeover_at, by the claim''s own rules: live, past_lease, idle_1h, idle_1d, idle_7d, cooling_down or released.';
COMMENT ON FUNCTION idgen_node_name(inet, integer, integer) IS 'How idgen names a node: host:port, or backend slot N of host:port.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer) IS
    'For a backend row of this server (host idgen.node_host, this port): the pid of the process in its slot now, whoever it is, or NULL.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer, timestamptz) IS
    'For a backend row of this server (host idgen.node_host, this port) last written at last_seen: the pid of the process in its slot if it started before then (it holds the row), or NULL.';
COMMENT ON FUNCTION idgen_explain(bigint, text) IS
    'Who made an ID: decodes it and names the holder of its machine id at its timestamp, with the version then in force, from the history and the registry; one row per service you may read (or the one given). Says when the history does not reach back that far, and warns when two holders overlap.';

-- The privileges saved at the start, set again on the objects created again (their owner's own
-- entries aside). pg_dump counts privileges set by an extension script as the extension's own:
-- the WARNING lists them, to be granted again after a restore into a new CREATE EXTENSION.
DO $restore_privileges$
DECLARE
    o record;
    g record;
    kept text;
BEGIN
    FOR o IN
        SELECT s.object, s.kind, s.owner, s.acl AS saved, cur.acl AS now
          FROM idgen_private.update_saved_privileges s
          JOIN LATERAL (
              SELECT c.relacl AS acl FROM pg_catalog.pg_depend d
                JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
                JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
                JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
               WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::pg_catalog.name AND d.deptype OPERATOR(pg_catalog.=) 'e'::"char"
                 AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND 'TABLE ' OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text OPERATOR(pg_catalog.=) s.object
              UNION ALL
              SELECT p.proacl FROM pg_catalog.pg_depend d
                JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
                JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
                JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
               WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::pg_catalog.name AND d.deptype OPERATOR(pg_catalog.=) 'e'::"char"
                 AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                 AND 'FUNCTION ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text OPERATOR(pg_catalog.=) s.object
          ) cur ON true
         WHERE cur.acl IS NULL OR NOT (cur.acl OPERATOR(pg_catalog.=) s.acl)
    LOOP
        FOR g IN SELECT DISTINCT a.grantee
                   FROM pg_catalog.aclexplode(COALESCE(o.now, pg_catalog.acldefault(o.kind, o.owner))) a
                  WHERE a.grantee OPERATOR(pg_catalog.<>) o.owner LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', o.object,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END);
        END LOOP;
        FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable
                   FROM pg_catalog.aclexplode(o.saved) a
                  WHERE a.grantee OPERATOR(pg_catalog.<>) o.owner LOOP
            EXECUTE pg_catalog.format('GRANT %s ON %s TO %s%s', g.privilege_type, o.object,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        kept := COALESCE(kept OPERATOR(pg_catalog.||) '; ', '') OPERATOR(pg_catalog.||) o.object;
    END LOOP;
    IF kept IS NOT NULL THEN
        RAISE WARNING 'idgen: the update to 0.7.0 created objects again and set the privileges you had set on them again: %', kept
            USING DETAIL = 'pg_dump counts privileges set during an extension update as the extension''s own: a dump restored into a new CREATE EXTENSION idgen does not carry them.',
                  HINT = 'After such a restore, grant them again (\dp and \df+ show them now).';
    END IF;
END
$restore_privileges$;
DROP TABLE idgen_private.update_saved_privileges;
