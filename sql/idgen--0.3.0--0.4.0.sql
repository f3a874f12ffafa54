-- idgen 0.3.0 -> 0.4.0: no ID twice and no escalation, round two.
-- - Private state moves into the schema idgen_private, of the extension's owner: the
--   registry's epoch, the claim guards (now one set per service), the service grants
--   and the history. Privileged SQL reaches system_nodes through idgen_private.nodes.
-- - system_nodes records the lease each holder was granted (lease_until, takeover_at).
-- - Rows removed by hand leave per-id tombstones instead of raising a registry-wide
--   floor; the floor is gone (the update is refused while it is still ahead).
-- - DROP of the extension is refused while its registry guards machine ids that may
--   still be stamped (the event trigger idgen_drop_guard).
-- - The registry functions are no longer SECURITY DEFINER: they check the role acting
--   at the call, and are open to PUBLIC (42501 for a role not granted the service).
-- - idgen_backend_leases loses its column uncommitted: every lease is committed.
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.4.0'" to load this file. \quit

-- What the floor guarded cannot be told apart per machine id: wait for it.
DO $$
BEGIN
    IF (SELECT r.floor FROM @extschema@.idgen_registry r) OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION 'idgen cannot be updated to 0.4.0 before its registry''s floor, %, has passed',
                        (SELECT r.floor FROM @extschema@.idgen_registry r)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Rows of system_nodes were deleted or truncated while their holders may still issue IDs; 0.4.0 keeps that per machine id, and 0.3.0 kept it for the whole registry.',
                  HINT = 'Retry ALTER EXTENSION idgen UPDATE after that time.';
    END IF;
END
$$;

-- The diagnostics are created anew below (their state function takes the recorded lease).
DROP FUNCTION idgen_health();
DROP VIEW idgen_metrics;
DROP VIEW idgen_capacity;
DROP VIEW idgen_nodes;
DROP VIEW idgen_events;
DROP VIEW idgen_registry_status;
DROP VIEW idgen_visibility;
DROP FUNCTION idgen_node_state(timestamptz, timestamptz);
DROP TRIGGER idgen_rows_deleted ON system_nodes;
DROP TRIGGER idgen_rows_truncated ON system_nodes;
DROP FUNCTION idgen_registry_rows_removed();
DROP FUNCTION idgen_holder_bound(system_nodes, interval, interval);

-- Everything idgen's privileged SQL names lives here, in a schema of the extension's owner
-- (a superuser): no lower role can rename it, create in it, or drop what is in it. The
-- schema idgen is installed in (public by default) belongs to the database owner, who
-- could rename it and create a look-alike, so no privileged statement resolves a name
-- there: it reaches system_nodes through the view idgen_private.nodes, bound when
-- created. CREATE SCHEMA without IF NOT EXISTS: a schema of that name planted before the
-- install makes CREATE EXTENSION fail instead of putting idgen's state in it.
CREATE SCHEMA idgen_private;
COMMENT ON SCHEMA idgen_private IS
    'idgen''s private state (registry epoch, tombstones, claim guards, service grants, history) and the objects its privileged SQL uses. Owned by the extension''s owner; read it through the views in idgen''s schema.';
REVOKE ALL ON SCHEMA idgen_private FROM PUBLIC;
-- Name lookup only (idgen_explain reads the views below as its caller); every object keeps its own privileges.
GRANT USAGE ON SCHEMA idgen_private TO PUBLIC;

-- The lease each holder was granted, as the settings of now grant it.
ALTER TABLE system_nodes ADD COLUMN lease_until TIMESTAMPTZ, ADD COLUMN takeover_at TIMESTAMPTZ;
UPDATE system_nodes n
   SET lease_until = n.last_seen OPERATOR(pg_catalog.+) p.lease,
       takeover_at = n.last_seen OPERATOR(pg_catalog.+) p.takeover_idle_1h
  FROM idgen_policy() p;
COMMENT ON COLUMN system_nodes.last_seen IS
    'Last successful claim or heartbeat. Rows idle past idgen.takeover_idle_* (and past their takeover_at) may be taken back by other nodes.';
COMMENT ON COLUMN system_nodes.created_at IS
    'When this machine id was first registered for the service.';
COMMENT ON COLUMN system_nodes.released_at IS
    'Set by idgen_release: others may take the id once idgen.release_cooldown has passed. NULL while held.';
COMMENT ON COLUMN system_nodes.issued_until IS
    'Watermark: an upper bound of every timestamp the holders of this machine id may have stamped in IDs. A database backend writes the end of the window it may issue in, and commits it, before issuing; when it disconnects it records its last stamp instead. A service reports its own (idgen_heartbeat, idgen_release). Every claim returns not_before at or after it.';
COMMENT ON COLUMN system_nodes.lease_until IS
    'The lease the holder was granted at its last claim or heartbeat: it issues no ID from then on without a newer heartbeat. Kept as granted, whatever the settings become. NULL: not recorded (a row written by hand), and the lease of today''s settings applies.';
COMMENT ON COLUMN system_nodes.takeover_at IS
    'No take-back before this time: last_seen plus idgen.takeover_idle_1h as they were when the lease was granted, whatever the settings become. NULL: not recorded, and today''s settings apply.';

ALTER TABLE idgen_registry SET SCHEMA idgen_private;
ALTER TABLE idgen_private.idgen_registry DROP COLUMN floor;
ALTER TABLE idgen_service_members SET SCHEMA idgen_private;
ALTER TABLE idgen_history SET SCHEMA idgen_private;
ALTER TABLE idgen_history_purged SET SCHEMA idgen_private;
ALTER FUNCTION idgen_history_append_only() SET SCHEMA idgen_private;
ALTER FUNCTION idgen_private.idgen_history_append_only() RENAME TO history_append_only;
-- A function of the library now: nothing of idgen depends on PL/pgSQL any more.
CREATE OR REPLACE FUNCTION idgen_private.history_append_only() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'history_append_only_wrapper';
COMMENT ON FUNCTION idgen_private.history_append_only() IS 'Trigger of idgen_history: refuses UPDATE.';
DROP TABLE idgen_claim_guards;
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

COMMENT ON TABLE idgen_private.idgen_registry IS
    'idgen''s registry as a whole: one row with its epoch.';
COMMENT ON COLUMN idgen_private.idgen_registry.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN idgen_private.idgen_registry.epoch IS
    'Incarnation of the registry: new at CREATE EXTENSION, raised by TRUNCATE system_nodes. A database backend whose lease was granted in another epoch drops it at its next lease check.';
COMMENT ON COLUMN idgen_private.idgen_registry.created_at IS 'When this registry was created.';
-- What the registry knows of rows removed by hand (DELETE, TRUNCATE): whoever held them
-- may still be stamping until their bound, so no claim hands that machine id out before
-- it, and a row restored later is fenced. One row per machine id: it holds back that id
-- alone, never the whole registry.
CREATE TABLE idgen_private.idgen_tombstones (
    service    VARCHAR(64) NOT NULL,
    machine_id SMALLINT NOT NULL,
    version    BIGINT NOT NULL,
    bound      TIMESTAMPTZ NOT NULL,
    removed_at TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (service, machine_id)
);
COMMENT ON TABLE idgen_private.idgen_tombstones IS
    'Machine ids whose registry row was deleted or truncated by hand: the latest time their holders may stamp, and their last version. A claim of the id stamps after bound; a row inserted for it (a restore) takes bound and a newer version, so its old holder is fenced.';
COMMENT ON COLUMN idgen_private.idgen_tombstones.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_tombstones.machine_id IS 'The machine id whose row was removed.';
COMMENT ON COLUMN idgen_private.idgen_tombstones.version IS 'The highest version the removed rows had.';
COMMENT ON COLUMN idgen_private.idgen_tombstones.bound IS 'The latest time a holder of the removed rows may stamp (their holder bound).';
COMMENT ON COLUMN idgen_private.idgen_tombstones.removed_at IS 'When the last of them was removed.';
SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_tombstones', '');
REVOKE ALL ON idgen_private.idgen_tombstones FROM PUBLIC;

-- Rows leave the registry only by hand: the triggers keep their bounds as tombstones
-- (TRUNCATE also starts a new epoch), and a row inserted by hand or restored takes the
-- tombstone of its machine id. Functions of idgen's library (src/registry/triggers.rs):
-- they read today's settings there, not through SQL, and pin their own search_path.
CREATE FUNCTION idgen_private.rows_removed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'rows_removed_wrapper';
CREATE FUNCTION idgen_private.rows_inserted() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'rows_inserted_wrapper';
CREATE FUNCTION idgen_private.grants_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'grants_changed_wrapper';
CREATE FUNCTION idgen_private.drop_guard() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'drop_guard_wrapper';
CREATE FUNCTION idgen_private.key_unchanged() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'key_unchanged_wrapper';
CREATE TRIGGER idgen_rows_deleted BEFORE DELETE ON system_nodes
    FOR EACH ROW EXECUTE FUNCTION idgen_private.rows_removed();
CREATE TRIGGER idgen_rows_truncated BEFORE TRUNCATE ON system_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION idgen_private.rows_removed();
CREATE TRIGGER idgen_rows_inserted AFTER INSERT ON system_nodes
    FOR EACH ROW EXECUTE FUNCTION idgen_private.rows_inserted();
-- A row's key never changes: moving a row to another machine id or service would leave no
-- tombstone behind, and hand the id out again while its holder stamps.
CREATE TRIGGER idgen_key_unchanged BEFORE UPDATE OF service, machine_id ON system_nodes
    FOR EACH ROW EXECUTE FUNCTION idgen_private.key_unchanged();
-- Also under session_replication_role = replica (pg_restore --disable-triggers aside).
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_rows_deleted;
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_rows_truncated;
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_rows_inserted;
ALTER TABLE system_nodes ENABLE ALWAYS TRIGGER idgen_key_unchanged;
COMMENT ON TRIGGER idgen_rows_deleted ON system_nodes IS
    'Keeps the bound of a deleted row as its machine id''s tombstone.';
COMMENT ON TRIGGER idgen_rows_truncated ON system_nodes IS
    'Keeps the bounds of truncated rows as tombstones and starts a new epoch.';
COMMENT ON TRIGGER idgen_rows_inserted ON system_nodes IS
    'A row inserted for a machine id with a tombstone (a restore) takes its bound and a newer version, and consumes it.';
COMMENT ON TRIGGER idgen_key_unchanged ON system_nodes IS
    'Refuses an UPDATE that changes a row''s service or machine_id.';

-- Guards that make a claim never wait for another session, locked with FOR UPDATE SKIP
-- LOCKED by the extension owner only: unlike advisory-lock keys, no other role can hold
-- them (see core/src/guard.rs). A guard belongs to one service, so claims of different
-- services never share one. A service's rows are created once, in a transaction of their
-- own, when it first needs them.
CREATE TABLE idgen_private.idgen_claim_guards (
    service VARCHAR(64) NOT NULL,
    bucket  INTEGER NOT NULL CONSTRAINT idgen_claim_guards_bucket_in_range CHECK (bucket BETWEEN 0 AND 2047),
    PRIMARY KEY (service, bucket)
);
COMMENT ON TABLE idgen_private.idgen_claim_guards IS
    'Row locks that serialise claims of one node identity, and inserts of one new machine id, within one service and without waiting (FOR UPDATE SKIP LOCKED). Private to the extension owner, so no other role can hold them; a claim of one service never takes a guard of another.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.service IS 'The service whose claims the guard serialises.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.bucket IS
    'Buckets 0 to 1023: one per never-registered machine id; 1024 to 2047: service node identities hash onto these.';
REVOKE ALL ON idgen_private.idgen_claim_guards FROM PUBLIC;

COMMENT ON TABLE idgen_private.idgen_service_members IS
    'Roles that may claim, heartbeat and release the machine ids of a service, and use it in idgen_next_id (besides superusers, the extension owner, and a database''s own backends for the service named like the database). Managed with idgen_grant_service and idgen_revoke_service.';
COMMENT ON COLUMN idgen_private.idgen_service_members.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_service_members.member IS 'A role that may act for the service; so may the roles that are members of it.';
COMMENT ON COLUMN idgen_private.idgen_service_members.granted_at IS 'When the grant was made.';
SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_service_members', '');
REVOKE ALL ON idgen_private.idgen_service_members FROM PUBLIC;
-- Every change of the grants, however made, reaches every session's cache of who may act
-- for which service at its next statement: grants and revocations take effect at once.
CREATE TRIGGER idgen_grants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idgen_private.idgen_service_members
    FOR EACH STATEMENT EXECUTE FUNCTION idgen_private.grants_changed();
ALTER TABLE idgen_private.idgen_service_members ENABLE ALWAYS TRIGGER idgen_grants_changed;
COMMENT ON TRIGGER idgen_grants_changed ON idgen_private.idgen_service_members IS
    'Tells every session that the grants changed, so that it checks them again before its next ID for a service.';

-- No DROP of the registry while it guards machine ids that may still be stamped: a
-- registry created afterwards would hand them out again. DROP SCHEMA ... CASCADE and
-- DROP OWNED would take the extension with them, and are checked too; ALTER EXTENSION
-- idgen DROP (an object leaving the extension, to be dropped on its own) is refused. No
-- other DROP ... CASCADE reaches idgen: its objects depend on nothing outside pg_catalog
-- but its schema and its owner (tests/cluster/tests/drop_create.rs checks).
CREATE EVENT TRIGGER idgen_drop_guard ON ddl_command_start
    WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED', 'ALTER EXTENSION')
    EXECUTE FUNCTION idgen_private.drop_guard();
ALTER EVENT TRIGGER idgen_drop_guard ENABLE ALWAYS;
COMMENT ON EVENT TRIGGER idgen_drop_guard IS
    'Refuses (55006) a DROP that would remove the idgen extension while its registry guards machine ids that may still be stamped.';

COMMENT ON FUNCTION idgen_private.rows_removed() IS
    'Trigger of system_nodes: keeps the bound of rows deleted or truncated by hand as tombstones; TRUNCATE also starts a new epoch.';
COMMENT ON FUNCTION idgen_private.rows_inserted() IS
    'Trigger of system_nodes: a row inserted for a machine id with a tombstone takes the tombstone''s bound and a newer version.';
COMMENT ON FUNCTION idgen_private.grants_changed() IS
    'Trigger of idgen_service_members: tells every session to check who may act for which service again.';
COMMENT ON FUNCTION idgen_private.drop_guard() IS
    'Event trigger: refuses to drop the idgen extension while its registry guards machine ids that may still be stamped.';
COMMENT ON FUNCTION idgen_private.key_unchanged() IS
    'Trigger of system_nodes: refuses an UPDATE that changes a row''s service or machine_id.';
REVOKE EXECUTE ON FUNCTION idgen_private.rows_removed(), idgen_private.rows_inserted(),
    idgen_private.grants_changed(), idgen_private.drop_guard(), idgen_private.key_unchanged() FROM PUBLIC;

-- The history, in idgen_private now; refusals are recorded at most once per service, kind and minute.
CREATE INDEX idgen_history_refusals ON idgen_private.idgen_history (service, event, at);
COMMENT ON TABLE idgen_private.idgen_history IS
    'idgen ownership history, append-only: claims, take-backs, releases, ownership losses and refused claims (at most one refusal of each kind per service and minute). Read it through the view idgen_events; purge it with idgen_purge_history().';
COMMENT ON SEQUENCE idgen_private.idgen_history_event_id_seq IS 'Numbers the history''s events in the order they were recorded (idgen_history.event_id); dumped with the history.';
COMMENT ON COLUMN idgen_private.idgen_history.event_id IS 'Order of recording.';
COMMENT ON COLUMN idgen_private.idgen_history.at IS 'When it happened (server clock).';
COMMENT ON COLUMN idgen_private.idgen_history.event IS
    'claim (a new id, or a node''s own released id back), take_back (from a released or idle holder; outcome names the tier), release, set_aside (a node''s own id left because its bound was too far ahead, or it is outside idgen.machine_id_range), ownership_lost (a holder learnt it lost the id), refused_full, refused_watermark, refused_no_standby (idgen.require_synchronous_standby). Losses and refusals: at most one of each kind per service and minute.';
COMMENT ON COLUMN idgen_private.idgen_history.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_history.machine_id IS 'The machine id concerned; NULL for a claim refused because the service is full.';
COMMENT ON COLUMN idgen_private.idgen_history.version IS 'Ownership epoch after the event (claims, take-backs, releases) or the one the holder had (losses).';
COMMENT ON COLUMN idgen_private.idgen_history.outcome IS 'For claims and take-backs: new, reused, released, idle_7d, idle_1d or idle_1h.';
COMMENT ON COLUMN idgen_private.idgen_history.host IS 'The node''s address (for a backend: idgen.node_host).';
COMMENT ON COLUMN idgen_private.idgen_history.port IS 'The node''s port (for a backend: the server''s).';
COMMENT ON COLUMN idgen_private.idgen_history.backend_slot IS 'The backend''s slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_private.idgen_history.role IS 'The role that called idgen: the one acting at the call (after SET ROLE, or the owner of a SECURITY DEFINER function that called it).';
COMMENT ON COLUMN idgen_private.idgen_history.pid IS 'The server process that recorded it: the backend, or the service''s session.';
COMMENT ON COLUMN idgen_private.idgen_history.not_before IS 'For claims and take-backs: the holder stamps IDs strictly after this.';
COMMENT ON COLUMN idgen_private.idgen_history.issued_until IS 'For releases and set-asides: the watermark the holder left (it stamped nothing later).';
COMMENT ON COLUMN idgen_private.idgen_history.previous_host IS 'For take-backs: the address of the holder the id was taken from.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_port IS 'For take-backs: its port.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_backend_slot IS 'For take-backs: its backend slot, if a backend.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_version IS 'For take-backs: its version.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_idle_seconds IS 'For take-backs: how long it had been idle.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_bound IS 'For take-backs: the latest time it may have stamped, as the claim assumed.';
COMMENT ON COLUMN idgen_private.idgen_history.detail IS 'For refusals and losses: what the caller was told.';
COMMENT ON INDEX idgen_private.idgen_history_refusals IS 'A refusal is recorded only if none of its kind was for the service within a minute.';
-- Removes events older than the retention (idgen.history_retention unless given, read
-- through idgen_policy(): the setting as the library knows it, also after a RESET),
-- counting them into idgen_history_purged. Bound when created, so nothing on a
-- caller's search_path takes part.
CREATE OR REPLACE FUNCTION idgen_purge_history(older_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH cutoff AS (
        SELECT pg_catalog.now() OPERATOR(pg_catalog.-) COALESCE(older_than, p.history_retention) AS at
          FROM @extschema@.idgen_policy() p
    ), purged AS (
        DELETE FROM idgen_private.idgen_history h USING cutoff c
         WHERE h.at OPERATOR(pg_catalog.<) c.at
        RETURNING h.service, h.event, COALESCE(h.outcome, ''::text) AS outcome
    ), counted AS (
        INSERT INTO idgen_private.idgen_history_purged AS t (service, event, outcome, events, last_purged_at)
        SELECT p.service, p.event, p.outcome, pg_catalog.count(*), pg_catalog.now() FROM purged p
         GROUP BY p.service, p.event, p.outcome
        ON CONFLICT (service, event, outcome) DO UPDATE
           SET events = t.events OPERATOR(pg_catalog.+) excluded.events, last_purged_at = excluded.last_purged_at
        RETURNING t.events
    )
    SELECT pg_catalog.count(*) FROM purged;
END;
COMMENT ON FUNCTION idgen_purge_history(interval) IS
    'Removes history events older than older_than (default: the setting idgen.history_retention, 90 days) and returns how many; the metrics keep counting them. Superusers and the extension owner, or roles granted EXECUTE. Schedule it daily (cron, pg_cron).';

-- Functions of the library whose SQL changed.
ALTER FUNCTION idgen_claim(text, inet, integer) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idgen_grant_service(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idgen_revoke_service(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idgen_explain(bigint, text) RESET search_path;

DROP FUNCTION idgen_backend_leases();
-- idgen::backend::idgen_backend_leases
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
	"last_used_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_backend_leases_wrapper';

-- idgen::diagnostics::nodes::idgen_node_state
CREATE  FUNCTION "idgen_node_state"(
	"last_seen" timestamp with time zone, /* TimestampWithTimeZone */
	"released_at" timestamp with time zone, /* Option < TimestampWithTimeZone > */
	"lease_until" timestamp with time zone, /* Option < TimestampWithTimeZone > */
	"takeover_at" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS TEXT /* & '_ str */
STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'idgen_node_state_wrapper';

-- Comments of the ID functions.
COMMENT ON FUNCTION idgen_next_id() IS
    'Next Snowflake ID for the session''s service (setting idgen.service, default the database name): 41 bits of milliseconds since 2025-01-01 | 10-bit machine id | 12-bit sequence. Use as a column default: id bigint PRIMARY KEY DEFAULT idgen_next_id(). The backend claims its own machine id in system_nodes on first use, with the extension owner''s rights, and every registry write behind an ID commits on its own before the ID is returned: no rollback or savepoint can take it back.';
COMMENT ON FUNCTION idgen_next_id(text) IS
    'Next Snowflake ID for the given service. IDs of one service never collide, whether minted by database backends or by service nodes that claimed their machine ids with idgen_claim.';
COMMENT ON FUNCTION idgen_decode(bigint) IS
    'Splits an idgen ID into (ts, machine_id, sequence); ts has millisecond precision.';
COMMENT ON FUNCTION idgen_min_id(timestamptz) IS
    'Smallest ID stamped in the millisecond of ts: WHERE id BETWEEN idgen_min_id(a) AND idgen_max_id(b) selects a time range through the primary key.';
COMMENT ON FUNCTION idgen_max_id(timestamptz) IS
    'Largest ID stamped in the millisecond of ts: WHERE id BETWEEN idgen_min_id(a) AND idgen_max_id(b) selects a time range through the primary key.';
COMMENT ON FUNCTION idgen_backend_leases() IS
    'This backend''s leases on machine ids, one row per service: machine id, version, slot, when claimed, not_before (its IDs are stamped after it), last verified, lease end, issued_until (the watermark the registry holds; no ID is stamped at or past it), IDs issued and the time of the last one. Every lease shown is committed in the registry.';


-- The diagnostics, as a fresh install creates them (sql/diagnostics.sql).
-- Diagnostics for the person on call: views over the registry and its history,
-- idgen_health(), and the metrics. States and thresholds come from the Rust
-- functions idgen_policy() and idgen_node_state() (src/diagnostics/nodes.rs),
-- the same code the claim runs by.
--
-- Who sees what: superusers, the extension owner and members of pg_monitor see
-- every service; any other role sees the services granted to it (or to a role
-- it is a member of) with idgen_grant_service. The rule is the view
-- idgen_visibility; every other view filters through it.
--
-- Views and SQL-standard function bodies are bound when created, and every
-- operator and function below is pg_catalog's, named so: nothing a lower role
-- plants on a search_path takes part when a superuser reads them.

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
       n.machine_id OPERATOR(pg_catalog.>=) p.machine_id_first
           AND n.machine_id OPERATOR(pg_catalog.<=) p.machine_id_last AS in_range,
       a.pid,
       a.usename AS "user",
       a.datname AS database,
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
 CROSS JOIN idgen_policy() p
 CROSS JOIN idgen_visibility v
  LEFT JOIN pg_catalog.pg_stat_activity a
         ON a.pid OPERATOR(pg_catalog.=) idgen_slot_pid(n.host, n.port, n.backend_slot)
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
COMMENT ON COLUMN idgen_nodes.in_range IS 'Inside this server''s idgen.machine_id_range: claims here hand out only such ids. A holder outside keeps its id until it stops.';
COMMENT ON COLUMN idgen_nodes.pid IS 'Backend rows of this server: the process in the row''s slot now, if any (it holds the row, or reuses it on its first idgen_next_id()).';
COMMENT ON COLUMN idgen_nodes."user" IS 'That process''s user (pg_stat_activity.usename).';
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
       p.machine_ids AS capacity,
       s.in_use,
       p.machine_ids OPERATOR(pg_catalog.-) s.in_use AS free,
       pg_catalog.round(s.in_use::numeric OPERATOR(pg_catalog./) p.machine_ids::numeric, 3) AS used,
       (s.in_use::float8 OPERATOR(pg_catalog./) p.machine_ids::float8) OPERATOR(pg_catalog.>) p.capacity_alert AS above_alert,
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
  LEFT JOIN LATERAL (SELECT n.machine_id, n.holder, n.idle FROM idgen_nodes n
                      WHERE n.service OPERATOR(pg_catalog.=) s.service AND n.in_range AND n.released_at IS NULL
                      ORDER BY n.last_seen, n.machine_id LIMIT 1) o ON true;
COMMENT ON VIEW idgen_capacity IS
    'Per service you may read, within this server''s idgen.machine_id_range: how many machine ids are in use (held, or cooling down after a release), free for the next claim, and takeable per tier, and the oldest idle holder. A claim that leaves a service above idgen.capacity_alert raises an idgen_alert.';
COMMENT ON COLUMN idgen_capacity.service IS 'The service.';
COMMENT ON COLUMN idgen_capacity.capacity IS 'Machine ids a service can have on this server (idgen.machine_id_range, by default the ID layout''s 1,024).';
COMMENT ON COLUMN idgen_capacity.in_use IS 'Held, or released and still cooling down: a claim gets none of them without a take-back.';
COMMENT ON COLUMN idgen_capacity.free IS 'Never registered, or released past the cooldown: the next claims get these first.';
COMMENT ON COLUMN idgen_capacity.used IS 'in_use / capacity.';
COMMENT ON COLUMN idgen_capacity.above_alert IS 'used is above idgen.capacity_alert.';
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
    'The ownership history (idgen_history) of the services you may read: who got which machine id when and how, who it was taken from, releases, losses and refused claims. Reuses of a held row by the same node are not recorded (ownership does not move).';
COMMENT ON COLUMN idgen_events.at IS 'When it happened.';
COMMENT ON COLUMN idgen_events.event IS 'claim, take_back, release, set_aside, ownership_lost, refused_full or refused_watermark.';
COMMENT ON COLUMN idgen_events.service IS 'The service.';
COMMENT ON COLUMN idgen_events.machine_id IS 'The machine id; NULL for refused_full.';
COMMENT ON COLUMN idgen_events.version IS 'Ownership epoch after the event (or the one a loser held).';
COMMENT ON COLUMN idgen_events.outcome IS 'Claims and take-backs: new, reused, released, idle_7d, idle_1d, idle_1h.';
COMMENT ON COLUMN idgen_events.holder IS 'The node: host:port, or backend slot N of host:port.';
COMMENT ON COLUMN idgen_events.role IS 'The role that called idgen.';
COMMENT ON COLUMN idgen_events.pid IS 'The server process that recorded it.';
COMMENT ON COLUMN idgen_events.previous_holder IS 'Take-backs: who the id was taken from.';
COMMENT ON COLUMN idgen_events.previous_version IS 'Take-backs: its version.';
COMMENT ON COLUMN idgen_events.previous_idle IS 'Take-backs: how long it had been idle.';
COMMENT ON COLUMN idgen_events.not_before IS 'Claims and take-backs: the holder stamps after this.';
COMMENT ON COLUMN idgen_events.issued_until IS 'Releases and set-asides: the watermark left.';
COMMENT ON COLUMN idgen_events.previous_bound IS 'Take-backs: the latest time the previous holder may have stamped.';
COMMENT ON COLUMN idgen_events.detail IS 'Refusals and losses: what the caller was told.';
COMMENT ON COLUMN idgen_events.event_id IS 'Order of recording.';
COMMENT ON COLUMN idgen_events.host IS 'The node''s address.';
COMMENT ON COLUMN idgen_events.port IS 'The node''s port.';
COMMENT ON COLUMN idgen_events.backend_slot IS 'The backend slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_events.previous_host IS 'Take-backs: the previous holder''s address.';
COMMENT ON COLUMN idgen_events.previous_port IS 'Take-backs: its port.';
COMMENT ON COLUMN idgen_events.previous_backend_slot IS 'Take-backs: its backend slot, if a backend.';

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
       COALESCE(t.history_events_purged, 0)::bigint AS history_events_purged
  FROM idgen_capacity c
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
              pg_catalog.sum(k.n) FILTER (WHERE k.purged) AS history_events_purged
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
COMMENT ON VIEW idgen_private.visible_events IS 'idgen_events, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_nodes IS 'idgen_nodes, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_metrics IS 'idgen_metrics, as idgen_explain reads it (bound when created).';

-- One row per finding; none means healthy. Reads only the views above, as the caller.
CREATE FUNCTION idgen_health()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
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
    SELECT CASE WHEN c.free OPERATOR(pg_catalog.=) 0
                 AND (c.takeable_7d OPERATOR(pg_catalog.+) c.takeable_1d OPERATOR(pg_catalog.+) c.takeable_1h) OPERATOR(pg_catalog.=) 0
                THEN 'critical' ELSE 'warning' END,
           'capacity', c.service,
           pg_catalog.format('%s of %s machine ids in use (%s), above idgen.capacity_alert; %s free, takeable 7d/1d/1h: %s/%s/%s; oldest idle: machine id %s, %s, idle %s.',
                             c.in_use, c.capacity, c.used, c.free, c.takeable_7d, c.takeable_1d, c.takeable_1h,
                             c.oldest_idle_machine_id, c.oldest_idle_holder, c.oldest_idle),
           pg_catalog.format('Find why so many nodes hold ids: SELECT * FROM idgen_nodes WHERE service = %L ORDER BY last_seen; release the ids of nodes stopped for good (README: freeing an id by hand), or give the nodes their own service names.', c.service)
      FROM idgen_capacity c WHERE c.above_alert
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
    SELECT 'warning', 'outside_range', o.service,
           pg_catalog.format('%s rows outside idgen.machine_id_range (%s-%s) may still be stamped until %s (machine ids %s): %s of them held.',
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
              FROM pg_catalog.pg_stat_get_wal_senders() s) r
     WHERE r.synchronous OPERATOR(pg_catalog.=) 0 AND (r.names OR r.standbys OPERATOR(pg_catalog.>) 0)
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

GRANT SELECT ON idgen_visibility, idgen_nodes, idgen_capacity, idgen_events, idgen_metrics, idgen_tombstones,
    idgen_registry_status TO PUBLIC;
GRANT SELECT ON idgen_private.visible_events, idgen_private.visible_nodes, idgen_private.visible_metrics TO PUBLIC;

COMMENT ON FUNCTION idgen_policy() IS
    'The effective idgen settings as the claim uses them, one row: the lease, heartbeat interval, cooldown, take-back ages, capacity alert, history retention, the machine ids a service can have on this server (idgen.machine_id_range: count, first, last), whether claims require a synchronous standby, and problem (why the settings are inconsistent, or NULL).';
COMMENT ON FUNCTION idgen_node_state(timestamptz, timestamptz, timestamptz, timestamptz) IS
    'The state of a registry row from its last_seen, released_at, lease_until and takeover_at, by the claim''s own rules: live, past_lease, idle_1h, idle_1d, idle_7d, cooling_down or released.';
COMMENT ON FUNCTION idgen_node_name(inet, integer, integer) IS 'How idgen names a node: host:port, or backend slot N of host:port.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer) IS
    'For a backend row of this server (host idgen.node_host, this port): the pid of the process in its slot now, or NULL.';
COMMENT ON FUNCTION idgen_explain(bigint, text) IS
    'Who made an ID: decodes it and names the holder of its machine id at its timestamp, with the version then in force, from the history and the registry; one row per service you may read (or the one given). Says when the history does not reach back that far, and warns when two holders overlap.';

-- The registry functions' comments and privileges (sql/registry_api.sql).
COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot. Returns (machine_id, version, outcome, lease_until, not_before); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Stamp no ID at or before not_before (earlier holders may have used that time); heartbeat before lease_until. Call it in a transaction of its own.';
COMMENT ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default), reporting issued_until: the latest timestamp the node has stamped or its clock''s reading, whichever is later (NULL: the server clock stands in). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) IS
    'Give a machine id back on graceful shutdown, reporting issued_until: the latest timestamp the node stamped. Others may take it after idgen.release_cooldown and after that watermark (without one: the release time plus idgen.lease_safety_margin); the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Open to every role: each call checks, for the role acting at that moment, that it may act
-- for the service (idgen_grant_service), and refuses with 42501 before reading or writing
-- anything else. The functions switch to the extension owner's rights only after that.
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) TO PUBLIC;

COMMENT ON FUNCTION idgen_grant_service(text, text) IS
    'Let a role (and its members) claim, heartbeat and release the machine ids of a service and use it in idgen_next_id(service). Takes effect at the next statement of every session. Returns true when the grant is new. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_revoke_service(text, text) IS
    'Take a service back from a role; returns true when it had been granted. Takes effect at the next statement of every session, open ones included. Superusers and the extension owner only.';
-- Who may act for which service is decided by superusers and the extension owner only.
REVOKE EXECUTE ON FUNCTION idgen_grant_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_revoke_service(text, text) FROM PUBLIC;
