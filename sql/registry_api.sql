-- Comments and privileges of the registry functions (created by pgrx from src/registry/api.rs;
-- idgen_grant_service and idgen_revoke_service from src/registry/access.rs).

COMMENT ON FUNCTION idgen_claim(text, inet, integer) IS
    'Claim a Snowflake machine id for a service node at boot: a free one of the service''s pool within this server''s idgen.machine_id_range. Returns (machine_id, version, outcome, lease_until, not_before); outcome is reused, new, released, idle_7d, idle_1d or idle_1h. Stamp no ID at or before not_before (earlier holders may have used that time), cut by the service''s layout (idgen_layouts); heartbeat before lease_until. Call it in a transaction of its own.';
COMMENT ON FUNCTION idgen_claim(text, inet, integer, integer) IS
    'Claim the machine id a service node already uses (a fleet that computes or pins its ids, adopted into the registry): granted only if it is free, the node''s own, or takeable as any claim takes one back (released past the cooldown, idle past the take-back tiers), with the same not_before; refused with its holder named (55006) otherwise, and 22023 when the pool or this server''s idgen.machine_id_range does not hold it.';
COMMENT ON FUNCTION idgen_define_layout(text, text, integer, integer, timestamptz, integer, integer, integer, integer, text) IS
    'Define the ID layout and pool of a service before its first claim: a preset (snowflake, sonyflake or js_safe), changed by the parts given (epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order), and the machine ids claims hand out (pool_first, pool_last; default: all the field holds). It may be defined again until a claim fixes it; after that a different layout is refused (55000), the same one answered as is. Returns the layout as recorded. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint) IS
    'Renew a claim (every idgen.heartbeat_interval, 5 minutes by default), reporting issued_until: the latest timestamp the node has stamped or its clock''s reading, whichever is later (NULL: the server clock stands in; the report minus the server clock is kept as the node''s clock_offset), and its generator''s counts since the claim: clock_backward_waits, clock_backward_refusals, sequence_exhaustions (NULL: not counted; negative: 22023, nothing written). Returns the new lease_until; raises SQLSTATE 55000 when ownership has moved: the caller must stop issuing IDs and exit.';
COMMENT ON FUNCTION idgen_release(text, integer, inet, integer, bigint, timestamptz) IS
    'Give a machine id back on graceful shutdown, reporting issued_until: the latest timestamp the node stamped. Others may take it after idgen.release_cooldown and after that watermark (without one: the release time plus idgen.lease_safety_margin); the same node may claim it straight back. Returns false, with a WARNING, when the caller does not hold it.';

-- Open to every role: each call checks, for the role acting at that moment, that it may act
-- for the service (idgen_grant_service), and refuses with 42501 before reading or writing
-- anything else. The functions switch to the extension owner's rights only after that.
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_release(text, integer, inet, integer, bigint, timestamptz) TO PUBLIC;

COMMENT ON FUNCTION idgen_grant_service(text, text) IS
    'Let a role (and its members) claim, heartbeat and release the machine ids of a service and use it in idgen_next_id(service). Takes effect at the next statement of every session. Returns true when the grant is new. Superusers and the extension owner only.';
COMMENT ON FUNCTION idgen_revoke_service(text, text) IS
    'Take a service back from a role; returns true when it had been granted. Takes effect at the next statement of every session, open ones included. Superusers and the extension owner only.';
-- Who may act for which service, and how a service's IDs are cut, are decided by superusers and
-- the extension owner only.
REVOKE EXECUTE ON FUNCTION idgen_grant_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_revoke_service(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION idgen_define_layout(text, text, integer, integer, timestamptz, integer, integer, integer, integer, text) FROM PUBLIC;
