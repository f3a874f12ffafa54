-- The machine-id registry. One row per (service, machine_id): who holds it,
-- at which version, when it was last heard from, and the lease it was granted.
CREATE TABLE system_nodes (
    service     VARCHAR(64) NOT NULL,
    machine_id  INTEGER NOT NULL,
    host        INET NOT NULL,
    port        INTEGER NOT NULL,
    version     BIGINT NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ,
    backend_slot INTEGER,
    issued_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    lease_until TIMESTAMPTZ,
    takeover_at TIMESTAMPTZ,
    reports_version BIGINT,
    clock_offset INTERVAL,
    clock_backward_waits BIGINT,
    clock_backward_refusals BIGINT,
    sequence_exhaustions BIGINT,
    PRIMARY KEY (service, machine_id),
    CONSTRAINT system_nodes_backend_slot_not_negative CHECK (backend_slot >= 0),
    CONSTRAINT system_nodes_machine_id_in_range CHECK (machine_id BETWEEN 0 AND 65535),
    CONSTRAINT system_nodes_port_in_range CHECK (port BETWEEN 1 AND 65535),
    CONSTRAINT system_nodes_version_positive CHECK (version >= 1),
    CONSTRAINT system_nodes_generator_counts_not_negative
        CHECK (clock_backward_waits >= 0 AND clock_backward_refusals >= 0 AND sequence_exhaustions >= 0)
);

-- A service node is (service, host, port); a database backend adds its slot. Only
-- held rows count: a node whose machine id cannot be used yet (its watermark is
-- ahead of the clock) releases it and moves to another, keeping its identity.
CREATE UNIQUE INDEX system_nodes_node_identity
    ON system_nodes (service, host, port, backend_slot) NULLS NOT DISTINCT
    WHERE released_at IS NULL;

COMMENT ON TABLE system_nodes IS
    'idgen registry: which node holds each Snowflake machine id of a service. Service nodes write it through idgen_claim, idgen_heartbeat and idgen_release; database backends through idgen_next_id.';
COMMENT ON COLUMN system_nodes.service IS
    'Service name; nodes (and database backends) of one service share its machine-id space.';
COMMENT ON COLUMN system_nodes.machine_id IS
    'Snowflake machine id, within the service''s pool (idgen_layouts: 0 to 1023 by default, at most 0 to 65535).';
COMMENT ON COLUMN system_nodes.host IS
    'Address of the holding node; with port, the node''s identity within the service.';
COMMENT ON COLUMN system_nodes.port IS
    'Port of the holding node, 1 to 65535. For a database backend: the server''s port.';
COMMENT ON COLUMN system_nodes.version IS
    'Ownership epoch: raised by every claim, take-back and release. A heartbeat or release with an older version fails, so a stale node learns that ownership moved.';
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
COMMENT ON COLUMN system_nodes.reports_version IS
    'The version the last heartbeat reported at: clock_offset and the generator counts below are of that holder, and count only while the row keeps this version (a claim or release raises it). NULL: no heartbeat reported since 0.6.0.';
COMMENT ON COLUMN system_nodes.clock_offset IS
    'How far the holder''s clock was ahead of the server''s (negative: behind) at its last heartbeat: the watermark it reported (its clock or its last stamp, whichever was later) minus the server clock at the heartbeat. NULL when it reported no watermark.';
COMMENT ON COLUMN system_nodes.clock_backward_waits IS
    'Reported by the holder''s last heartbeat: how often since its claim its clock stepped back and the generator waited it out. NULL: not reported.';
COMMENT ON COLUMN system_nodes.clock_backward_refusals IS
    'Reported by the holder''s last heartbeat: how often since its claim its clock stepped back further than it may wait, and the generator refused to issue. NULL: not reported.';
COMMENT ON COLUMN system_nodes.sequence_exhaustions IS
    'Reported by the holder''s last heartbeat: how often since its claim the generator used up a millisecond''s sequence and waited for the next. NULL: not reported.';
COMMENT ON INDEX system_nodes_node_identity IS
    'A node identity (service, host, port, backend_slot) holds at most one machine id; released rows do not count.';

-- A claim looks for the claimant's own rows, released ones included, by its identity: without this,
-- in a service of 32,768 rows it read them all.
CREATE INDEX system_nodes_node_rows ON system_nodes (service, host, port);
COMMENT ON INDEX system_nodes_node_rows IS
    'The rows of a node identity, held or released: a claim finds the claimant''s own row by it, whatever the size of the service.';
COMMENT ON COLUMN system_nodes.backend_slot IS
    'For a database backend''s lease: its slot on the server (MyBackendId; MyProcNumber from PostgreSQL 17), with host = idgen.node_host and port = the server''s port. A new connection in the same slot gets the same row back. NULL for service nodes.';

-- Registry rows are state, not configuration: pg_dump must keep them.
SELECT pg_catalog.pg_extension_config_dump('system_nodes', '');

-- Only idgen's functions write the registry, with the extension owner's rights.
REVOKE ALL ON system_nodes FROM PUBLIC;

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
-- at creation, so nothing on a caller's search_path can change what it calls. STABLE, as its
-- timestamptz + interval is: the planner then inlines it into each statement (an IMMUTABLE
-- declaration over a stable body made it a function call per row).
CREATE FUNCTION idgen_private.holder_bound(n idgen_private.nodes, lease interval, takeover_age interval)
    RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
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

-- One row: the registry's incarnation.
CREATE TABLE idgen_private.idgen_registry (
    singleton    BOOLEAN PRIMARY KEY DEFAULT true CONSTRAINT idgen_registry_one_row CHECK (singleton),
    epoch        BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    version_base BIGINT NOT NULL CONSTRAINT idgen_registry_version_base_not_negative CHECK (version_base >= 0),
    own_service  VARCHAR(64) NOT NULL,
    own_database OID NOT NULL
);
COMMENT ON TABLE idgen_private.idgen_registry IS
    'idgen''s registry as a whole: one row with its epoch.';
COMMENT ON COLUMN idgen_private.idgen_registry.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN idgen_private.idgen_registry.epoch IS
    'Incarnation of the registry: new at CREATE EXTENSION, raised by TRUNCATE system_nodes. A database backend whose lease was granted in another epoch drops it at its next lease check.';
COMMENT ON COLUMN idgen_private.idgen_registry.created_at IS 'When this registry was created.';
COMMENT ON COLUMN idgen_private.idgen_registry.own_service IS
    'The database''s own service: the one its backends use when idgen.service is empty, with no grant. The database''s name when idgen was created in it (or updated to 0.8.0); a rename of the database keeps it, so that no rename hands its roles another service.';
COMMENT ON COLUMN idgen_private.idgen_registry.own_database IS
    'The database own_service was recorded in (its oid). In another database (one copied from this one with CREATE DATABASE ... TEMPLATE) the record does not count: there the own service is the database''s name, so that a copy never mints for the service of the database it was copied from.';
COMMENT ON COLUMN idgen_private.idgen_registry.version_base IS
    'A row of a machine id never registered here starts at version_base + 1: drawn at random at CREATE EXTENSION (below 2^52), so that a node of a dropped registry, whose heartbeat names the version it holds, matches no row of a registry created again. 0 for a registry updated from before 0.7.0 that had rows, tombstones or history (they start at 1, as they did).';
-- A new registry grants at once: dropping one is refused while it guards anything (the
-- event trigger idgen_drop_guard), so no holder of an earlier registry of this database
-- can still be stamping.
INSERT INTO idgen_private.idgen_registry (epoch, created_at, version_base, own_service, own_database)
SELECT pg_catalog.floor(pg_catalog.random() OPERATOR(pg_catalog.*) 9007199254740991::float8)::bigint,
       pg_catalog.clock_timestamp(),
       pg_catalog.floor(pg_catalog.random() OPERATOR(pg_catalog.*) 4503599627370496::float8)::bigint,
       pg_catalog.current_database(),
       d.oid
FROM pg_catalog.pg_database d
WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database();
REVOKE ALL ON idgen_private.idgen_registry FROM PUBLIC;

-- What the registry knows of rows removed by hand (DELETE, TRUNCATE): whoever held them
-- may still be stamping until their bound, so no claim hands that machine id out before
-- it, and a row restored later is fenced. One row per machine id: it holds back that id
-- alone, never the whole registry.
CREATE TABLE idgen_private.idgen_tombstones (
    service    VARCHAR(64) NOT NULL,
    machine_id INTEGER NOT NULL,
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
    bucket  INTEGER NOT NULL CONSTRAINT idgen_claim_guards_bucket_in_range CHECK (bucket BETWEEN 0 AND 2048),
    PRIMARY KEY (service, bucket)
);
COMMENT ON TABLE idgen_private.idgen_claim_guards IS
    'Row locks that serialise claims of one node identity, and inserts of one new machine id, within one service and without waiting (FOR UPDATE SKIP LOCKED). Private to the extension owner, so no other role can hold them; a claim of one service never takes a guard of another.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.service IS 'The service whose claims the guard serialises.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.bucket IS
    'Buckets 0 to 1023: one per never-registered machine id; 1024 to 2047: service node identities hash onto these; 2048: the turn to announce a change of the service''s capacity level. Machine ids past 1023 (the pools of wider fields) share the first 1,024, modulo 1,024.';
REVOKE ALL ON idgen_private.idgen_claim_guards FROM PUBLIC;

-- Which roles may act for which service (besides superusers and the extension owner;
-- a database's own backends may use its own service, idgen_registry.own_service). Managed by
-- idgen_grant_service and idgen_revoke_service; dumped, and restored by role name.
CREATE TABLE idgen_private.idgen_service_members (
    service    VARCHAR(64) NOT NULL,
    member     REGROLE NOT NULL,
    granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (service, member)
);
COMMENT ON TABLE idgen_private.idgen_service_members IS
    'Roles that may claim, heartbeat and release the machine ids of a service, and use it in idgen_next_id (besides superusers, the extension owner, and a database''s own backends for its own service, idgen_registry.own_service). Managed with idgen_grant_service and idgen_revoke_service.';
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
