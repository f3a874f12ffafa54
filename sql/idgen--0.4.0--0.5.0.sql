-- idgen 0.4.0 -> 0.5.0: day one in a real database.
-- - The history records watermarks reported behind the registry's (event watermark_behind),
--   and idgen_health() reports them; it no longer counts logical-replication walsenders as
--   asynchronous standbys.
-- - idgen_purge_history refuses an age that is not positive (idgen_private.purge_age).
-- - idgen_nodes shows a backend row's process only if it holds the row
--   (idgen_slot_pid(host, port, backend_slot, last_seen)), and reads pg_stat_get_activity()
--   rather than the (unpinned) view pg_stat_activity.
-- - Plans: idgen_policy(), idgen_explain() and idgen_backend_leases() say how many rows they
--   return, and idgen_health() runs with jit = off: no diagnostic is JIT-compiled.
-- - Heartbeat, release and node state are bound to new C symbols (src/earlier_symbols.rs).
-- - Every machine id held at the update gets a history event, so that the IDs its holder
--   stamps from now on are explained (the history did not know holders that claimed before
--   it existed, or whose claims it did not record).
-- The 0.5.0 library also runs against 0.4.0's objects until this update.
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.5.0'" to load this file. \quit

-- A reader of the history or of the registry (idgen_nodes, idgen_events) or an open claim would
-- make the update wait, and every claim queue behind it: fail at once instead (55P03), and retry.
-- (idgen_private.nodes, a view, locks system_nodes; idgen_nodes itself is not locked here: a lock
-- on it would reach pg_catalog's tables through the view pg_stat_activity that 0.4.0 read.)
LOCK TABLE idgen_private.idgen_history, idgen_private.nodes IN ACCESS EXCLUSIVE MODE NOWAIT;

ALTER TABLE idgen_private.idgen_history DROP CONSTRAINT idgen_history_event_known;
ALTER TABLE idgen_private.idgen_history ADD
CONSTRAINT idgen_history_event_known CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
        'claim', 'take_back', 'release', 'set_aside', 'ownership_lost', 'refused_full', 'refused_watermark',
        'refused_no_standby', 'watermark_behind']));
COMMENT ON COLUMN idgen_private.idgen_history.event IS
    'claim (a new id, or a node''s own released id back), take_back (from a released or idle holder; outcome names the tier), release, set_aside (a node''s own id left because its bound was too far ahead, or it is outside idgen.machine_id_range), ownership_lost (a holder learnt it lost the id), refused_full, refused_watermark, refused_no_standby (idgen.require_synchronous_standby), watermark_behind (a node reported a watermark behind the registry''s: its clock is behind). Losses, refusals and watermarks behind: at most one of each kind per service and minute.';

CREATE FUNCTION idgen_private.purge_age(older_than interval, retention interval) RETURNS interval
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'purge_age_wrapper';
CREATE OR REPLACE FUNCTION idgen_purge_history(older_than interval DEFAULT NULL)
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
COMMENT ON FUNCTION idgen_private.purge_age(interval, interval) IS
    'The age idgen_purge_history removes events by: older_than, or the retention when it is NULL. Refuses (22023) an age of zero or less, which would remove every event.';
REVOKE EXECUTE ON FUNCTION idgen_private.purge_age(interval, interval) FROM PUBLIC;

CREATE FUNCTION idgen_slot_pid(host inet, port integer, backend_slot integer, last_seen timestamptz) RETURNS integer
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'idgen_slot_holder_pid_wrapper';
CREATE OR REPLACE VIEW idgen_nodes WITH (security_barrier) AS
SELECT n.service,
       n.machine_id,
       CASE WHEN n.backend_slot IS NULL THEN 'service'::text ELSE 'backend'::text END AS kind,
       idgen_node_state(n.last_seen, n.released_at, n.lease_until, n.takeover_at) AS state,
       idgen_node_name(n.host, n.port, n.backend_slot) AS holder,
       pg_catalog.date_trunc('second'::text, pg_catalog.now() OPERATOR(pg_catalog.-) n.last_seen) AS idle,
       COALESCE(n.lease_until, n.last_seen OPERATOR(pg_catalog.+) p.lease) AS lease_until,
       n.issued_until,
       idgen_private.holder_bound(n, p.lease, p.takeover_idle_1h) AS bound,
       n.version,
       n.machine_id OPERATOR(pg_catalog.>=) p.machine_id_first
           AND n.machine_id OPERATOR(pg_catalog.<=) p.machine_id_last AS in_range,
       a.pid,
       pg_catalog.pg_get_userbyid(a.usesysid) AS "user",
       (SELECT d.datname FROM pg_catalog.pg_database d WHERE d.oid OPERATOR(pg_catalog.=) a.datid) AS database,
       a.application_name,
       a.backend_start,
       n.host,
       n.port,
       n.backend_slot,
       n.last_seen,
       n.released_at,
       n.created_at,
       n.takeover_at
  FROM idgen_private.nodes n
 CROSS JOIN idgen_policy() p
 CROSS JOIN idgen_visibility v
  LEFT JOIN pg_catalog.pg_stat_get_activity(NULL::integer) a
         ON a.pid OPERATOR(pg_catalog.=) idgen_slot_pid(n.host, n.port, n.backend_slot, n.last_seen)
 WHERE v.reads_all OR n.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON COLUMN idgen_nodes.pid IS 'Backend rows of this server: the process holding the row, if it still runs (a process that took the slot after the row was last written is not shown: it has not used the row).';
COMMENT ON COLUMN idgen_nodes."user" IS 'That process''s user (as pg_stat_activity.usename).';
COMMENT ON COLUMN idgen_events.event IS 'claim, take_back, release, set_aside, ownership_lost, refused_full, refused_watermark, refused_no_standby or watermark_behind.';
-- jit = off: compiling its plan would take far longer than running it (it reads every
-- registry row a few times); the SET also keeps it from being inlined into the caller's
-- query, whose plan would then be JIT-compiled instead. ROWS: a healthy registry has none.
CREATE OR REPLACE FUNCTION idgen_health()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
    SET jit = off
    ROWS 10
BEGIN ATOMIC
SELECT f.severity, f.finding, f.subject, f.detail, f.action FROM (
    SELECT 'critical'::text AS severity, 'settings_inconsistent'::text AS finding, 'idgen.*'::text AS subject,
           p.problem AS detail,
           'Correct the idgen.* settings (ALTER SYSTEM SET ..., then SELECT pg_reload_conf()). Until then no machine id is claimed or renewed.'::text AS action
      FROM idgen_policy() p WHERE p.problem IS NOT NULL
    UNION ALL
    SELECT 'critical', 'server_clock_behind', 'registry',
           pg_catalog.format('The newest registry write (last_seen %s) is %s ahead of the server clock: the clock stepped back.',
                             x.newest, x.newest OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()),
           'Fix the time source (chronyc tracking, timedatectl). Backends wait out up to idgen.max_clock_backward and then refuse; IDs never reuse time. Do not move the clock back further.'
      FROM (SELECT pg_catalog.max(n.last_seen) AS newest FROM idgen_nodes n) x
     WHERE x.newest OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    UNION ALL
    SELECT 'warning', 'tombstone_ahead', t.service,
           pg_catalog.format('%s machine ids whose rows were deleted or truncated by hand may still be stamped by their holders until %s (machine ids %s): claims skip them until then.',
                             t.n, t.until, t.ids),
           'Nothing else is held back: claims take other ids meanwhile. Next time free ids with idgen_release, not DELETE or TRUNCATE (README: freeing an id by hand).'
      FROM (SELECT s.service, pg_catalog.count(*) AS n, pg_catalog.max(s.bound) AS until,
                   pg_catalog.string_agg(s.machine_id::text, ', '::text ORDER BY s.machine_id) AS ids
              FROM idgen_tombstones s WHERE s.ahead GROUP BY s.service) t
    UNION ALL
    SELECT CASE WHEN c.free OPERATOR(pg_catalog.=) 0
                 AND (c.takeable_7d OPERATOR(pg_catalog.+) c.takeable_1d OPERATOR(pg_catalog.+) c.takeable_1h) OPERATOR(pg_catalog.=) 0
                THEN 'critical' ELSE 'warning' END,
           'capacity', c.service,
           pg_catalog.format('%s of %s machine ids in use (%s), above idgen.capacity_alert; %s free, takeable 7d/1d/1h: %s/%s/%s; oldest idle: machine id %s, %s, idle %s.',
                             c.in_use, c.capacity, c.used, c.free, c.takeable_7d, c.takeable_1d, c.takeable_1h,
                             c.oldest_idle_machine_id, c.oldest_idle_holder, c.oldest_idle),
           pg_catalog.format('Find why so many nodes hold ids: SELECT * FROM idgen_nodes WHERE service = %L ORDER BY last_seen; release the ids of nodes stopped for good (README: freeing an id by hand), or give the nodes their own service names.', c.service)
      FROM idgen_capacity c WHERE c.above_alert
    UNION ALL
    SELECT 'warning', 'holder_past_lease', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s last heartbeat %s ago; its lease ended at %s, so it must have stopped issuing IDs.', n.holder, n.idle, n.lease_until),
           'If the node still runs, it lost the database or its heartbeat died: restart it (it claims its id back). If it is gone for good, nothing is needed: the id is taken back after idgen.takeover_idle_1h, or release it by hand.'
      FROM idgen_nodes n
     WHERE n.kind OPERATOR(pg_catalog.=) 'service'::text
       AND n.state OPERATOR(pg_catalog.=) ANY (ARRAY['past_lease'::text, 'idle_1h'::text])
    UNION ALL
    SELECT 'warning', 'watermark_ahead', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('Its watermark %s is %s ahead of the server clock, more than a lease and a heartbeat interval: %s reported time from a clock that ran ahead, or the server clock stepped back.',
                             n.issued_until, n.issued_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(), n.holder),
           'No other node can use this id until then (claims skip it). Check the clocks of the node and of the server.'
      FROM idgen_nodes n CROSS JOIN idgen_policy() p
     WHERE n.issued_until OPERATOR(pg_catalog.>)
           (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p.lease OPERATOR(pg_catalog.+) p.heartbeat_interval)
    UNION ALL
    SELECT 'warning', 'watermark_behind', pg_catalog.format('%s machine id %s', w.service, w.machine_id),
           pg_catalog.format('%s reported a watermark behind the one the registry holds (last at %s): %s', w.holder, w.at, w.detail),
           'Check the node''s clock (NTP) and that it reports UTC; a node stamping behind its not_before may repeat IDs of the id''s earlier holder: stop it, fix the clock, restart it.'
      FROM (SELECT DISTINCT ON (e.service, e.machine_id) e.service, e.machine_id, e.holder, e.at, e.detail
              FROM idgen_events e
             WHERE e.event OPERATOR(pg_catalog.=) 'watermark_behind'::text
               AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day')
             ORDER BY e.service, e.machine_id, e.at DESC) w
    UNION ALL
    SELECT 'warning', 'outside_range', o.service,
           pg_catalog.format('%s rows outside idgen.machine_id_range (%s-%s) may still be stamped until %s (machine ids %s): %s of them held.',
                             o.n, p.machine_id_first, p.machine_id_last, o.until, o.ids, o.held),
           'This server hands them out no more; their holders keep them until they stop, and move inside the range on restart. Do not give these ids to another server before that time has passed and none is held here (README: sharding).'
      FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.count(*) FILTER (WHERE n.released_at IS NULL) AS held,
                   pg_catalog.max(n.issued_until) AS until,
                   pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
              FROM idgen_nodes n
             WHERE NOT n.in_range
               AND (n.released_at IS NULL OR n.issued_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
             GROUP BY n.service) o
     CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT CASE WHEN r.names THEN 'critical' ELSE 'warning' END,
           CASE WHEN r.names THEN 'synchronous_standby_missing' ELSE 'replication_async' END,
           'replication',
           CASE WHEN r.names
                THEN pg_catalog.format('synchronous_standby_names is %L but no synchronous standby streams: every registry write waits for one (claims, heartbeats and lease renewals hang).', pg_catalog.current_setting('synchronous_standby_names'))
                ELSE pg_catalog.format('%s standbys stream from this server, none synchronously: a failover to one of them can lose committed claims, and hand a machine id out twice.', r.standbys)
           END,
           CASE WHEN r.names
                THEN 'Bring a standby back, or change synchronous_standby_names; do not turn synchronous_commit off for idgen (it raises it for its own writes anyway).'
                ELSE 'Make a standby synchronous (synchronous_standby_names), or keep failover off that standby; idgen.require_synchronous_standby = on refuses claims meanwhile.'
           END
      FROM (SELECT pg_catalog.count(*) FILTER (WHERE s.state OPERATOR(pg_catalog.=) 'streaming'::text) AS standbys,
                   pg_catalog.count(*) FILTER (WHERE s.state OPERATOR(pg_catalog.=) 'streaming'::text
                                              AND s.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text])) AS synchronous,
                   pg_catalog.current_setting('synchronous_standby_names') OPERATOR(pg_catalog.<>) ''::text AS names
              FROM pg_catalog.pg_stat_get_wal_senders() s
             -- Standbys only: a logical-replication walsender serves a database, not a failover.
             WHERE (SELECT a.datid FROM pg_catalog.pg_stat_get_activity(s.pid) a) IS NULL) r
     WHERE r.synchronous OPERATOR(pg_catalog.=) 0 AND (r.names OR r.standbys OPERATOR(pg_catalog.>) 0)
    UNION ALL
    SELECT 'notice', 'stale_backend_rows', b.service,
           pg_catalog.format('%s backend rows idle longer than idgen.takeover_idle_7d (machine ids %s): their slots have not used idgen since.', b.n, b.ids),
           'Nothing is wrong: the next claims of the service take them back first. To tidy up, see the README (freeing an id by hand).'
      FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
              FROM idgen_nodes n
             WHERE n.kind OPERATOR(pg_catalog.=) 'backend'::text AND n.state OPERATOR(pg_catalog.=) 'idle_7d'::text
             GROUP BY n.service) b
    UNION ALL
    SELECT 'notice', 'history_purge_due', 'idgen_history',
           pg_catalog.format('The oldest history event is from %s, older than idgen.history_retention (%s).', e.oldest, p.history_retention),
           'SELECT idgen_purge_history(); and schedule it daily (cron or pg_cron).'
      FROM (SELECT pg_catalog.min(e.at) AS oldest FROM idgen_events e) e CROSS JOIN idgen_policy() p
     WHERE e.oldest OPERATOR(pg_catalog.<)
           (pg_catalog.now() OPERATOR(pg_catalog.-) p.history_retention OPERATOR(pg_catalog.-) interval '1 day')
) f
ORDER BY CASE WHEN f.severity OPERATOR(pg_catalog.=) 'critical'::text THEN 1
              WHEN f.severity OPERATOR(pg_catalog.=) 'warning'::text THEN 2 ELSE 3 END, f.finding, f.subject;
END;
COMMENT ON FUNCTION idgen_health() IS
    'What the person on call must know, one row per finding (severity critical, warning or notice; what; which rows; what to do), over the services you may read. No rows: healthy.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer) IS
    'For a backend row of this server (host idgen.node_host, this port): the pid of the process in its slot now, whoever it is, or NULL.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer, timestamptz) IS
    'For a backend row of this server (host idgen.node_host, this port) last written at last_seen: the pid of the process in its slot if it started before then (it holds the row), or NULL.';

ALTER FUNCTION idgen_policy() ROWS 1;
ALTER FUNCTION idgen_explain(bigint, text) ROWS 1;
ALTER FUNCTION idgen_backend_leases() ROWS 1;

-- The library's heartbeat, release and node state under their own symbols; the ones 0.4.0 declared
-- stay in the library, guarded (src/earlier_symbols.rs), for databases not updated yet.
CREATE OR REPLACE FUNCTION idgen_heartbeat(
    service text, machine_id smallint, host inet, port integer, version bigint, issued_until timestamptz DEFAULT NULL
) RETURNS timestamptz
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'node_heartbeat_wrapper';
CREATE OR REPLACE FUNCTION idgen_release(
    service text, machine_id smallint, host inet, port integer, version bigint, issued_until timestamptz DEFAULT NULL
) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'node_release_wrapper';
CREATE OR REPLACE FUNCTION idgen_node_state(
    last_seen timestamptz, released_at timestamptz, lease_until timestamptz, takeover_at timestamptz
) RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'node_state_wrapper';

-- Holders that kept their machine id across the update: their tenure is known from their last
-- write on (they held the id at this version then, and no ownership change came since).
INSERT INTO idgen_private.idgen_history (event, service, machine_id, version, outcome, host, port, backend_slot, not_before, detail)
SELECT 'claim', n.service, n.machine_id, n.version, 'reused', n.host, n.port, n.backend_slot,
       n.last_seen OPERATOR(pg_catalog.-) interval '1 millisecond',
       'Held across ALTER EXTENSION idgen UPDATE to 0.5.0 at this version; the history knows this holder from its last claim or heartbeat before the update on.'
  FROM idgen_private.nodes n
 WHERE n.released_at IS NULL
   AND NOT EXISTS (SELECT FROM idgen_private.idgen_history h
                    WHERE h.service OPERATOR(pg_catalog.=) n.service AND h.machine_id OPERATOR(pg_catalog.=) n.machine_id
                      AND h.version OPERATOR(pg_catalog.=) n.version
                      AND h.event OPERATOR(pg_catalog.=) ANY (ARRAY['claim'::text, 'take_back'::text]));
