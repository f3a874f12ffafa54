-- idgen 0.1.0 -> 0.2.0: time watermarks (system_nodes.issued_until, not_before), a bigint version,
-- the registry's epoch and floor (idgen_registry), identities that may move off
-- a machine id whose watermark is ahead.
--
-- Sessions that used idgen_next_id() before the update keep the library code
-- they loaded, which does not write watermarks: reconnect them (or restart the
-- server) right after ALTER EXTENSION idgen UPDATE.

\echo Use "ALTER EXTENSION idgen UPDATE TO '0.2.0'" to load this file. \quit

ALTER TABLE @extschema@.system_nodes ADD COLUMN issued_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity';
-- Every claim of a row bumps its version: a reconnect-heavy slot must never run out.
ALTER TABLE @extschema@.system_nodes ALTER COLUMN version TYPE BIGINT;

-- Watermarks for the rows 0.1.0 left, from what 0.1.0 guaranteed: a backend
-- issued until its next lease check (one heartbeat interval after its last
-- write); a released id was last stamped before its release, on a clock within
-- the lease margin of the server's; a held service row is bounded by its lease,
-- which idgen_holder_bound adds to last_seen.
UPDATE @extschema@.system_nodes n
   SET issued_until = CASE
       WHEN n.released_at IS NOT NULL
       THEN n.released_at OPERATOR(pg_catalog.+)
            coalesce(pg_catalog.current_setting('idgen.lease_safety_margin', true), '5min')::interval
       WHEN n.backend_slot IS NOT NULL
       THEN n.last_seen OPERATOR(pg_catalog.+)
            coalesce(pg_catalog.current_setting('idgen.heartbeat_interval', true), '5min')::interval
       ELSE n.last_seen
   END;

ALTER TABLE @extschema@.system_nodes DROP CONSTRAINT system_nodes_node_identity;
CREATE UNIQUE INDEX system_nodes_node_identity
    ON @extschema@.system_nodes (service, host, port, backend_slot) NULLS NOT DISTINCT
    WHERE released_at IS NULL;
COMMENT ON COLUMN system_nodes.issued_until IS
    'Watermark: an upper bound of every timestamp the holders of this machine id may have stamped in IDs. Only ever raised. A database backend writes the end of the window it may issue in before its next lease check; a service reports its own (idgen_heartbeat, idgen_release). Every claim returns not_before at or after it.';
COMMENT ON INDEX system_nodes_node_identity IS
    'A node identity (service, host, port, backend_slot) holds at most one machine id; released rows do not count.';

-- The latest time any holder of a row's machine id may stamp, as a node taking
-- the id over must assume: a silent service node may go on issuing for a whole
-- lease after its last report (its clock) or, as the server sees it, until its
-- take-back age; everyone else is bounded by issued_until. The body is bound at
-- creation, so nothing on a caller's search_path can change what it calls.
CREATE FUNCTION idgen_holder_bound(n system_nodes, lease interval, takeover_age interval)
    RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN n.backend_slot IS NULL AND n.released_at IS NULL
    THEN greatest(n.issued_until OPERATOR(pg_catalog.+) lease,
                             n.last_seen OPERATOR(pg_catalog.+) takeover_age)
    ELSE n.issued_until
END;
COMMENT ON FUNCTION idgen_holder_bound(system_nodes, interval, interval) IS
    'The latest time any holder of the row''s machine id may stamp in an ID, for a node taking it over: issued_until, or for a service node that has not released it, its last report plus a lease (and at least last_seen plus the take-back age).';

-- One row: the registry's incarnation and its floor.
CREATE TABLE idgen_registry (
    singleton  BOOLEAN PRIMARY KEY DEFAULT true CONSTRAINT idgen_registry_one_row CHECK (singleton),
    epoch      BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    floor      TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE idgen_registry IS
    'idgen''s registry as a whole: one row with its epoch and its floor.';
COMMENT ON COLUMN idgen_registry.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN idgen_registry.epoch IS
    'Incarnation of the registry: new at CREATE EXTENSION, raised by TRUNCATE system_nodes. A database backend whose lease was granted in another epoch drops it at its next lease check.';
COMMENT ON COLUMN idgen_registry.created_at IS 'When this registry was created.';
COMMENT ON COLUMN idgen_registry.floor IS
    'No claim grants a machine id that may be stamped at or before this time. Raised to the watermark of every row deleted or truncated (its holder may still be issuing), and at CREATE EXTENSION to one heartbeat interval ahead when other sessions are connected (they may hold leases of an earlier installation until their next check).';

INSERT INTO idgen_registry (epoch, created_at, floor)
SELECT pg_catalog.floor(pg_catalog.random() OPERATOR(pg_catalog.*) 9007199254740991::float8)::bigint,
       clock.now,
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
                          WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
                            AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
                            AND a.backend_type OPERATOR(pg_catalog.=) 'client backend'::text)
            THEN clock.now OPERATOR(pg_catalog.+)
                 coalesce(pg_catalog.current_setting('idgen.heartbeat_interval', true), '5min')::interval
            ELSE '-infinity'::timestamptz
       END
  FROM (SELECT pg_catalog.clock_timestamp() AS now) clock;

-- Rows leave the registry only by hand (DELETE, TRUNCATE): whoever held them may
-- still be issuing until their watermark, so the floor keeps it. TRUNCATE also
-- starts a new epoch, so that rows restored afterwards fence the old leases.
CREATE FUNCTION idgen_registry_rows_removed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    takeover_age interval := coalesce(pg_catalog.current_setting('idgen.takeover_idle_1h', true), '1h')::interval;
    lease interval := takeover_age OPERATOR(pg_catalog.-)
        coalesce(pg_catalog.current_setting('idgen.lease_safety_margin', true), '5min')::interval;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
        UPDATE @extschema@.idgen_registry r
           SET floor = greatest(r.floor, (SELECT pg_catalog.max(@extschema@.idgen_holder_bound(n, lease, takeover_age))
                                                       FROM @extschema@.system_nodes n)),
               epoch = r.epoch OPERATOR(pg_catalog.+) 1;
        RETURN NULL;
    END IF;
    UPDATE @extschema@.idgen_registry r
       SET floor = greatest(r.floor, @extschema@.idgen_holder_bound(OLD, lease, takeover_age));
    RETURN OLD;
END
$$;
COMMENT ON FUNCTION idgen_registry_rows_removed() IS
    'Trigger of system_nodes: raises idgen_registry.floor to the watermark of rows deleted or truncated; TRUNCATE also starts a new epoch.';
CREATE TRIGGER idgen_rows_deleted BEFORE DELETE ON system_nodes
    FOR EACH ROW EXECUTE FUNCTION idgen_registry_rows_removed();
CREATE TRIGGER idgen_rows_truncated BEFORE TRUNCATE ON system_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION idgen_registry_rows_removed();
-- Also under session_replication_role = replica (pg_restore --disable-triggers aside).
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_rows_deleted;
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_rows_truncated;
COMMENT ON TRIGGER idgen_rows_deleted ON system_nodes IS
    'Keeps the watermark of a deleted row in idgen_registry.floor.';
COMMENT ON TRIGGER idgen_rows_truncated ON system_nodes IS
    'Keeps the watermarks of truncated rows in idgen_registry.floor and starts a new epoch.';

REVOKE ALL ON idgen_registry FROM PUBLIC;

-- Guards that make a claim never wait for another session, locked with FOR UPDATE
-- SKIP LOCKED by the extension owner only: unlike advisory-lock keys, no other role
-- can hold them (see core/src/guard.rs). Keys hash onto these rows.
CREATE TABLE idgen_claim_guards (
    bucket INTEGER PRIMARY KEY CONSTRAINT idgen_claim_guards_bucket_in_range CHECK (bucket BETWEEN 0 AND 65535)
);
INSERT INTO idgen_claim_guards (bucket) SELECT pg_catalog.generate_series(0, 65535);
COMMENT ON TABLE idgen_claim_guards IS
    'Row locks that serialise claims of one node identity, and inserts of one new machine id, without waiting (FOR UPDATE SKIP LOCKED). Private to the extension owner, so no other role can hold them.';
COMMENT ON COLUMN idgen_claim_guards.bucket IS 'A guard: node identities and new machine ids hash onto 65,536 of them.';
REVOKE ALL ON idgen_claim_guards FROM PUBLIC;

-- Which roles may act for which service (besides superusers and the extension owner;
-- a database's own backends may use the service named like the database). Managed by
-- idgen_grant_service and idgen_revoke_service; dumped, and restored by role name.
CREATE TABLE idgen_service_members (
    service    VARCHAR(64) NOT NULL,
    member     REGROLE NOT NULL,
    granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (service, member)
);
COMMENT ON TABLE idgen_service_members IS
    'Roles that may claim, heartbeat and release the machine ids of a service, and use it in idgen_next_id (besides superusers, the extension owner, and a database''s own backends for the service named like the database). Managed with idgen_grant_service and idgen_revoke_service.';
COMMENT ON COLUMN idgen_service_members.service IS 'The service.';
COMMENT ON COLUMN idgen_service_members.member IS 'A role that may act for the service; so may the roles that are members of it.';
COMMENT ON COLUMN idgen_service_members.granted_at IS 'When the grant was made.';
SELECT pg_catalog.pg_extension_config_dump('idgen_service_members', '');
REVOKE ALL ON idgen_service_members FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_registry_rows_removed() FROM PUBLIC;

-- Functions whose signature changed. DROP loses their grants: keep them and grant them again.
CREATE FUNCTION pg_temp.idgen_upgrade_grants() RETURNS TABLE (fn text, grantee text)
    LANGUAGE sql AS $$
    SELECT p.proname::text,
           CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                ELSE pg_catalog.quote_ident(r.rolname::text) END
      FROM pg_catalog.pg_proc p
      CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::regnamespace
       AND p.proname OPERATOR(pg_catalog.=) ANY ('{idgen_claim,idgen_heartbeat,idgen_release}'::name[])
       AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
       AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
$$;
CREATE TEMP TABLE idgen_upgrade_kept_grants AS SELECT * FROM pg_temp.idgen_upgrade_grants();

DROP FUNCTION @extschema@.idgen_backend_leases();
DROP FUNCTION @extschema@.idgen_claim(text, inet, integer);
DROP FUNCTION @extschema@.idgen_heartbeat(text, smallint, inet, integer, integer);
DROP FUNCTION @extschema@.idgen_release(text, smallint, inet, integer, integer);

CREATE  FUNCTION "idgen_backend_leases"() RETURNS TABLE (
	"service" TEXT,  /* String */
	"machine_id" smallint,  /* i16 */
	"version" bigint,  /* i64 */
	"backend_slot" INT,  /* Option < i32 > */
	"claimed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"not_before" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"verified_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"issued_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"ids_issued" bigint,  /* i64 */
	"last_used_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"uncommitted" bool  /* bool */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_backend_leases_wrapper';
CREATE  FUNCTION "idgen_claim"(
	"service" TEXT, /* Option < & str > */
	"host" inet, /* Option < Inet > */
	"port" INT /* Option < i32 > */
) RETURNS TABLE (
	"machine_id" smallint,  /* i16 */
	"version" bigint,  /* i64 */
	"outcome" TEXT,  /* String */
	"lease_until" timestamp with time zone,  /* TimestampWithTimeZone */
	"not_before" timestamp with time zone  /* TimestampWithTimeZone */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_claim_wrapper';
CREATE  FUNCTION "idgen_heartbeat"(
	"service" TEXT, /* Option < & str > */
	"machine_id" smallint, /* Option < i16 > */
	"host" inet, /* Option < Inet > */
	"port" INT, /* Option < i32 > */
	"version" bigint, /* Option < i64 > */
	"issued_until" timestamp with time zone DEFAULT NULL /* Option < TimestampWithTimeZone > */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_heartbeat_wrapper';
CREATE  FUNCTION "idgen_release"(
	"service" TEXT, /* Option < & str > */
	"machine_id" smallint, /* Option < i16 > */
	"host" inet, /* Option < Inet > */
	"port" INT, /* Option < i32 > */
	"version" bigint, /* Option < i64 > */
	"issued_until" timestamp with time zone DEFAULT NULL /* Option < TimestampWithTimeZone > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_release_wrapper';

COMMENT ON FUNCTION idgen_backend_leases() IS
    'This backend''s leases on machine ids, one row per service: machine id, version, slot, when claimed, not_before (its IDs are stamped after it), last verified, lease end, issued_until (the watermark the registry holds; no ID is stamped at or past it), IDs issued and the time of the last one. uncommitted is true while the transaction that claimed or renewed the lease is open.';
COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot. Returns (machine_id, version, outcome, lease_until, not_before); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Stamp no ID at or before not_before (earlier holders may have used that time); heartbeat before lease_until.';
COMMENT ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default), reporting issued_until: the latest timestamp the node has stamped or its clock''s reading, whichever is later (NULL: the server clock stands in). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) IS
    'Give a machine id back on graceful shutdown, reporting issued_until: the latest timestamp the node stamped. Others may take it after idgen.release_cooldown and after that watermark (without one: the release time plus idgen.lease_safety_margin); the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Services get EXECUTE by an explicit GRANT (see the README), never through PUBLIC.
REVOKE EXECUTE ON FUNCTION idgen_claim(text, inet, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) FROM PUBLIC;

CREATE  FUNCTION "idgen_grant_service"(
	"service" TEXT, /* Option < & str > */
	"role" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_grant_service_wrapper';
CREATE  FUNCTION "idgen_revoke_service"(
	"service" TEXT, /* Option < & str > */
	"role" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_revoke_service_wrapper';

COMMENT ON FUNCTION idgen_grant_service(text, text) IS
    'Let a role (and its members) claim, heartbeat and release the machine ids of a service and use it in idgen_next_id(service); also grants it EXECUTE on idgen_claim, idgen_heartbeat and idgen_release. Returns true when the grant is new. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_revoke_service(text, text) IS
    'Take a service back from a role; returns true when it had been granted. EXECUTE on the registry functions stays (the role may act for other services). Superusers and the extension owner only.';
-- Who may act for which service is decided by superusers and the extension owner only.
REVOKE EXECUTE ON FUNCTION idgen_grant_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_revoke_service(text, text) FROM PUBLIC;

DO $$
DECLARE
    kept record;
BEGIN
    FOR kept IN SELECT * FROM pg_temp.idgen_upgrade_kept_grants LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.%s TO %s',
            CASE kept.fn
                WHEN 'idgen_claim' THEN 'idgen_claim(text, inet, integer)'
                WHEN 'idgen_heartbeat' THEN 'idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz)'
                ELSE 'idgen_release(text, smallint, inet, integer, bigint, timestamptz)'
            END, kept.grantee);
    END LOOP;
END
$$;
DROP TABLE pg_temp.idgen_upgrade_kept_grants;
DROP FUNCTION pg_temp.idgen_upgrade_grants();
