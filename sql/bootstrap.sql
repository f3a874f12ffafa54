-- The parts of an idgen ID, as idgen_decode returns them: a single composite
-- value, so (idgen_decode(id)).ts works in WHERE clauses and aggregates.
CREATE TYPE idgen_id_parts AS (
    ts          TIMESTAMPTZ,
    machine_id  SMALLINT,
    sequence    INTEGER
);
COMMENT ON TYPE idgen_id_parts IS
    'The parts of an idgen ID: when it was stamped (millisecond precision), by which machine id, at which sequence.';
