-- Comments and privileges of the ID functions (created by pgrx from src/ids.rs and src/backend.rs).

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
