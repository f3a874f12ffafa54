-- The ownership history: an append-only record of every change of who holds a
-- machine id, and of claims refused. Written by idgen's functions with the
-- extension owner's rights, in the transaction of the change. Refusals (a
-- claim refused, a heartbeat or release that finds ownership moved) are
-- recorded in a transaction of their own, at most one of each kind per service
-- and minute (see src/history.rs): they outlive the caller's rollback, and a
-- flood of refused calls writes and starts next to nothing.
CREATE SEQUENCE idgen_private.idgen_history_event_id_seq AS bigint;
CREATE TABLE idgen_private.idgen_history (
    event_id              BIGINT PRIMARY KEY DEFAULT pg_catalog.nextval('idgen_private.idgen_history_event_id_seq'::regclass),
    at                    TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    event                 TEXT NOT NULL,
    service               VARCHAR(64) NOT NULL,
    machine_id            INTEGER,
    version               BIGINT,
    outcome               TEXT,
    host                  INET,
    port                  INTEGER,
    backend_slot          INTEGER,
    role                  TEXT,
    pid                   INTEGER,
    not_before            TIMESTAMPTZ,
    issued_until          TIMESTAMPTZ,
    previous_host         INET,
    previous_port         INTEGER,
    previous_backend_slot INTEGER,
    previous_version      BIGINT,
    previous_idle_seconds BIGINT,
    previous_bound        TIMESTAMPTZ,
    detail                TEXT,
    CONSTRAINT idgen_history_event_known CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
        'claim', 'take_back', 'release', 'set_aside', 'ownership_lost', 'refused_full', 'refused_watermark',
        'refused_no_standby', 'watermark_behind', 'restart', 'capacity_warning', 'capacity_critical',
        'capacity_cleared'])),
    CONSTRAINT idgen_history_outcome_known CHECK (outcome OPERATOR(pg_catalog.=) ANY (ARRAY[
        'new', 'reused', 'released', 'idle_7d', 'idle_1d', 'idle_1h']))
);
ALTER SEQUENCE idgen_private.idgen_history_event_id_seq OWNED BY idgen_private.idgen_history.event_id;
CREATE INDEX idgen_history_machine_id ON idgen_private.idgen_history (service, machine_id, event_id);
CREATE INDEX idgen_history_at ON idgen_private.idgen_history (at);
CREATE INDEX idgen_history_refusals ON idgen_private.idgen_history (service, event, at);

COMMENT ON TABLE idgen_private.idgen_history IS
    'idgen ownership history, append-only: claims, take-backs, releases, ownership losses, refused claims (at most one refusal of each kind per service and minute) and the capacity levels announced. Read it through the view idgen_events; purge it with idgen_purge_history().';
COMMENT ON SEQUENCE idgen_private.idgen_history_event_id_seq IS 'Numbers the history''s events in the order they were recorded (idgen_history.event_id); dumped with the history.';
COMMENT ON COLUMN idgen_private.idgen_history.event_id IS 'Order of recording.';
COMMENT ON COLUMN idgen_private.idgen_history.at IS 'When it happened (server clock).';
COMMENT ON COLUMN idgen_private.idgen_history.event IS
    'claim (a new id, or a node''s own released id back), take_back (from a released or idle holder; outcome names the tier), release, set_aside (a node''s own id left because its bound was too far ahead, or it is outside idgen.machine_id_range), ownership_lost (a holder learnt it lost the id), refused_full, refused_watermark, refused_no_standby (idgen.require_synchronous_standby), watermark_behind (a node reported a watermark behind the registry''s: its clock is behind), restart (a service node claimed the id it still held: it restarted without releasing), capacity_warning, capacity_critical, capacity_cleared (a claim changed the service''s capacity level from the one announced last, with an alert; later claims compare with the newest). Losses, refusals and watermarks behind: at most one of each kind per service and minute.';
COMMENT ON COLUMN idgen_private.idgen_history.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_history.machine_id IS 'The machine id concerned; NULL for a claim refused because the service is full or no synchronous standby streams (refused_full, refused_no_standby), and for capacity levels announced.';
COMMENT ON COLUMN idgen_private.idgen_history.version IS 'Ownership epoch after the event (claims, take-backs, releases) or the one the holder had (losses).';
COMMENT ON COLUMN idgen_private.idgen_history.outcome IS 'For claims, take-backs and restarts: new, reused, released, idle_7d, idle_1d or idle_1h.';
COMMENT ON COLUMN idgen_private.idgen_history.host IS 'The node''s address (for a backend: idgen.node_host).';
COMMENT ON COLUMN idgen_private.idgen_history.port IS 'The node''s port (for a backend: the server''s).';
COMMENT ON COLUMN idgen_private.idgen_history.backend_slot IS 'The backend''s slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_private.idgen_history.role IS 'The role that called idgen: the one acting at the call (after SET ROLE, or the owner of a SECURITY DEFINER function that called it).';
COMMENT ON COLUMN idgen_private.idgen_history.pid IS 'The server process that recorded it: the backend, or the service''s session.';
COMMENT ON COLUMN idgen_private.idgen_history.not_before IS 'For claims, take-backs and restarts: the holder stamps IDs strictly after this.';
COMMENT ON COLUMN idgen_private.idgen_history.issued_until IS 'For releases and set-asides: the watermark the holder left (it stamped nothing later).';
COMMENT ON COLUMN idgen_private.idgen_history.previous_host IS 'For take-backs: the address of the holder the id was taken from.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_port IS 'For take-backs: its port.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_backend_slot IS 'For take-backs: its backend slot, if a backend.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_version IS 'For take-backs: its version; for restarts: the version of the node''s earlier process.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_idle_seconds IS 'For take-backs: how long it had been idle.';
COMMENT ON COLUMN idgen_private.idgen_history.previous_bound IS 'For take-backs: the latest time it may have stamped, as the claim assumed; for restarts: the latest time the node''s earlier process may have stamped.';
COMMENT ON COLUMN idgen_private.idgen_history.detail IS 'For refusals and losses: what the caller was told; for capacity levels announced: the alert.';
COMMENT ON INDEX idgen_private.idgen_history_machine_id IS 'idgen_explain reads one machine id''s events in order.';
COMMENT ON INDEX idgen_private.idgen_history_at IS 'idgen_purge_history deletes by age.';
COMMENT ON INDEX idgen_private.idgen_history_refusals IS 'A refusal is recorded only if none of its kind was for the service within a minute; a claim reads the capacity level announced last.';

-- Append-only: not even the owner updates an event. A function of the library
-- (src/registry/triggers.rs), not PL/pgSQL: nothing of idgen depends on an object outside
-- pg_catalog that a DROP ... CASCADE could take it with (DROP EXTENSION plpgsql CASCADE).
CREATE FUNCTION idgen_private.history_append_only() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'history_append_only_wrapper';
COMMENT ON FUNCTION idgen_private.history_append_only() IS 'Trigger of idgen_history: refuses UPDATE.';
CREATE TRIGGER idgen_history_append_only BEFORE UPDATE ON idgen_private.idgen_history
    FOR EACH STATEMENT EXECUTE FUNCTION idgen_private.history_append_only();
ALTER TABLE idgen_private.idgen_history ENABLE ALWAYS TRIGGER idgen_history_append_only;
COMMENT ON TRIGGER idgen_history_append_only ON idgen_private.idgen_history IS 'Events are never changed.';
REVOKE EXECUTE ON FUNCTION idgen_private.history_append_only() FROM PUBLIC;

-- Events purged, counted per kind, so that the metrics stay monotonic counters.
CREATE TABLE idgen_private.idgen_history_purged (
    service VARCHAR(64) NOT NULL,
    event   TEXT NOT NULL,
    outcome TEXT NOT NULL,
    events  BIGINT NOT NULL,
    last_purged_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (service, event, outcome)
);
COMMENT ON TABLE idgen_private.idgen_history_purged IS
    'How many events idgen_purge_history() removed, per service, event and outcome: the metrics add them to the events still in idgen_history.';
COMMENT ON COLUMN idgen_private.idgen_history_purged.service IS 'The service.';
COMMENT ON COLUMN idgen_private.idgen_history_purged.event IS 'The event kind.';
COMMENT ON COLUMN idgen_private.idgen_history_purged.outcome IS 'The claim outcome, or an empty string.';
COMMENT ON COLUMN idgen_private.idgen_history_purged.events IS 'How many were purged.';
COMMENT ON COLUMN idgen_private.idgen_history_purged.last_purged_at IS 'When the last of them was purged.';

SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_history', '');
SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_history_event_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('idgen_private.idgen_history_purged', '');
REVOKE ALL ON idgen_private.idgen_history, idgen_private.idgen_history_purged FROM PUBLIC;
REVOKE ALL ON SEQUENCE idgen_private.idgen_history_event_id_seq FROM PUBLIC;

-- Removes events older than the retention (idgen.history_retention unless given, read
-- through idgen_policy(): the setting as the library knows it, also after a RESET; an age
-- given must be positive, see idgen_private.purge_age), counting them into idgen_history_purged. Bound when created, so nothing on a
-- caller's search_path takes part.
CREATE FUNCTION idgen_private.purge_age(older_than interval, retention interval) RETURNS interval
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'purge_age_wrapper';
CREATE FUNCTION idgen_purge_history(older_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH cutoff AS (
        SELECT pg_catalog.now() OPERATOR(pg_catalog.-) idgen_private.purge_age(older_than, p.history_retention) AS at
          FROM @extschema@.idgen_policy() p
    ), purged AS (
        DELETE FROM idgen_private.idgen_history h USING cutoff c
         WHERE h.at OPERATOR(pg_catalog.<) c.at
           -- Each service's newest capacity announcement stays, however old: claims compare with it.
           AND (h.event OPERATOR(pg_catalog.<>) ALL (ARRAY['capacity_warning'::text, 'capacity_critical'::text, 'capacity_cleared'::text])
                OR EXISTS (SELECT FROM idgen_private.idgen_history k
                            WHERE k.service::pg_catalog.text OPERATOR(pg_catalog.=) h.service::pg_catalog.text
                              AND k.event OPERATOR(pg_catalog.=) ANY (ARRAY['capacity_warning'::text, 'capacity_critical'::text, 'capacity_cleared'::text])
                              AND k.event_id OPERATOR(pg_catalog.>) h.event_id))
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
    'Removes history events older than older_than (default: the setting idgen.history_retention, 90 days) and returns how many; the metrics keep counting them. Each service''s newest capacity announcement stays: later claims compare with it. Superusers and the extension owner, or roles granted EXECUTE. Schedule it daily (cron, pg_cron).';
REVOKE EXECUTE ON FUNCTION idgen_purge_history(interval) FROM PUBLIC;
COMMENT ON FUNCTION idgen_private.purge_age(interval, interval) IS
    'The age idgen_purge_history removes events by: older_than, or the retention when it is NULL. Refuses (22023) an age of zero or less, which would remove every event.';
REVOKE EXECUTE ON FUNCTION idgen_private.purge_age(interval, interval) FROM PUBLIC;
