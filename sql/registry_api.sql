-- Comments and privileges of the registry functions (created by pgrx from src/registry/api.rs;
-- idgen_grant_service and idgen_revoke_service from src/registry/access.rs).

COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot. Returns (machine_id, version, outcome, lease_until, not_before); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Stamp no ID at or before not_before (earlier holders may have used that time); heartbeat before lease_until. Call it in a transaction of its own.';
COMMENT ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz, bigint, bigint, bigint) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default), reporting issued_until: the latest timestamp the node has stamped or its clock''s reading, whichever is later (NULL: the server clock stands in; the report minus the server clock is kept as the node''s clock_offset), and its generator''s counts since the claim: clock_backward_waits, clock_backward_refusals, sequence_exhaustions (NULL: not counted; negative: 22023, nothing written). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) IS
    'Give a machine id back on graceful shutdown, reporting issued_until: the latest timestamp the node stamped. Others may take it after idgen.release_cooldown and after that watermark (without one: the release time plus idgen.lease_safety_margin); the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Open to every role: each call checks, for the role acting at that moment, that it may act
-- for the service (idgen_grant_service), and refuses with 42501 before reading or writing
-- anything else. The functions switch to the extension owner's rights only after that.
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz, bigint, bigint, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_release(text, smallint, inet, integer, bigint, timestamptz) TO PUBLIC;

COMMENT ON FUNCTION idgen_grant_service(text, text) IS
    'Let a role (and its members) claim, heartbeat and release the machine ids of a service and use it in idgen_next_id(service). Takes effect at the next statement of every session. Returns true when the grant is new. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_revoke_service(text, text) IS
    'Take a service back from a role; returns true when it had been granted. Takes effect at the next statement of every session, open ones included. Superusers and the extension owner only.';
-- Who may act for which service is decided by superusers and the extension owner only.
REVOKE EXECUTE ON FUNCTION idgen_grant_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_revoke_service(text, text) FROM PUBLIC;
