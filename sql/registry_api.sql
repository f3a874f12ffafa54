-- Comments and privileges of the registry functions (created by pgrx from src/registry/api.rs).

COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot. Returns (machine_id, version, outcome, lease_until); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Heartbeat before lease_until.';
COMMENT ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, integer) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, smallint, inet, integer, integer) IS
    'Give a machine id back on graceful shutdown. Others may take it after idgen.release_cooldown; the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Services get EXECUTE by an explicit GRANT (see the README), never through PUBLIC.
REVOKE EXECUTE ON FUNCTION idgen_claim(text, inet, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_release(text, smallint, inet, integer, integer) FROM PUBLIC;
