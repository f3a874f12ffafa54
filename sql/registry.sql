-- The machine-id registry. One row per (service, machine_id): who holds it,
-- at which version, and when it was last heard from.
CREATE TABLE system_nodes (
    service     VARCHAR(64) NOT NULL,
    machine_id  SMALLINT NOT NULL,
    host        INET NOT NULL,
    port        INTEGER NOT NULL,
    version     BIGINT NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ,
    backend_slot INTEGER,
    issued_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (service, machine_id),
    CONSTRAINT system_nodes_backend_slot_not_negative CHECK (backend_slot >= 0),
    CONSTRAINT system_nodes_machine_id_not_negative CHECK (machine_id >= 0),
    CONSTRAINT system_nodes_port_in_range CHECK (port BETWEEN 1 AND 65535),
    CONSTRAINT system_nodes_version_positive CHECK (version >= 1)
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
    'Snowflake machine id, within the ID layout''s range (0 to 1023 by default).';
COMMENT ON COLUMN system_nodes.host IS
    'Address of the holding node; with port, the node''s identity within the service.';
COMMENT ON COLUMN system_nodes.port IS
    'Port of the holding node, 1 to 65535. For a database backend: the server''s port.';
COMMENT ON COLUMN system_nodes.version IS
    'Ownership epoch: raised by every claim, take-back and release. A heartbeat or release with an older version fails, so a stale node learns that ownership moved.';
COMMENT ON COLUMN system_nodes.last_seen IS
    'Last successful claim or heartbeat. Rows idle past idgen.takeover_idle_* may be taken back by other nodes.';
COMMENT ON COLUMN system_nodes.created_at IS
    'When this machine id was first registered for the service.';
COMMENT ON COLUMN system_nodes.released_at IS
    'Set by idgen_release: others may take the id once idgen.release_cooldown has passed. NULL while held.';
COMMENT ON COLUMN system_nodes.issued_until IS
    'Watermark: an upper bound of every timestamp the holders of this machine id may have stamped in IDs. Only ever raised. A database backend writes the end of the window it may issue in before its next lease check; a service reports its own (idgen_heartbeat, idgen_release). Every claim returns not_before at or after it.';
COMMENT ON INDEX system_nodes_node_identity IS
    'A node identity (service, host, port, backend_slot) holds at most one machine id; released rows do not count.';
COMMENT ON COLUMN system_nodes.backend_slot IS
    'For a database backend''s lease: its slot on the server (MyBackendId; MyProcNumber from PostgreSQL 17), with host = idgen.node_host and port = the server''s port. A new connection in the same slot gets the same row back. NULL for service nodes.';

-- Registry rows are state, not configuration: pg_dump must keep them.
SELECT pg_catalog.pg_extension_config_dump('system_nodes', '');

-- Only idgen's functions write the registry, with the extension owner's rights.
REVOKE ALL ON system_nodes FROM PUBLIC;

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
