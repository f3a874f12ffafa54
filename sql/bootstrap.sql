-- The parts of an idgen ID, as idgen_decode returns them: a single composite
-- value, so (idgen_decode(id)).ts works in WHERE clauses and aggregates.
CREATE TYPE idgen_id_parts AS (
    ts          TIMESTAMPTZ,
    machine_id  INTEGER,
    sequence    INTEGER
);
COMMENT ON TYPE idgen_id_parts IS
    'The parts of an idgen ID: when it was stamped (the start of its tick: a millisecond, or the service layout''s time unit), by which machine id, at which sequence.';

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
