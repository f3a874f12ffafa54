-- The machine-id registry. One row per (service, machine_id): who holds it,
-- at which version, and when it was last heard from.
CREATE TABLE system_nodes (
    service     VARCHAR(64) NOT NULL,
    machine_id  SMALLINT NOT NULL,
    host        INET NOT NULL,
    port        INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ,
    backend_slot INTEGER,
    PRIMARY KEY (service, machine_id),
    -- A service node is (service, host, port); a database backend adds its slot.
    CONSTRAINT system_nodes_node_identity UNIQUE NULLS NOT DISTINCT (service, host, port, backend_slot),
    CONSTRAINT system_nodes_backend_slot_not_negative CHECK (backend_slot >= 0),
    CONSTRAINT system_nodes_machine_id_not_negative CHECK (machine_id >= 0),
    CONSTRAINT system_nodes_port_in_range CHECK (port BETWEEN 1 AND 65535),
    CONSTRAINT system_nodes_version_positive CHECK (version >= 1)
);

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
COMMENT ON COLUMN system_nodes.backend_slot IS
    'For a database backend''s lease: its slot on the server (MyBackendId; MyProcNumber from PostgreSQL 17), with host = idgen.node_host and port = the server''s port. A new connection in the same slot gets the same row back. NULL for service nodes.';

-- Registry rows are state, not configuration: pg_dump must keep them.
SELECT pg_catalog.pg_extension_config_dump('system_nodes', '');

-- Only idgen's functions write the registry, with the extension owner's rights.
REVOKE ALL ON system_nodes FROM PUBLIC;
