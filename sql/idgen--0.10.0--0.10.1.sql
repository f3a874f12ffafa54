-- idgen 0.10.0 -> 0.10.1: every refusal counted.
-- - idgen_metrics.refused_claims_since_start and ownership_losses_since_start: every refused claim
--   and every ownership loss since the server started, recorded in the history or not (it records
--   one of each kind per service and minute, which refused_claims and ownership_losses count), from
--   the server's shared memory (idgen_private.refusals_since_start()).
-- - idgen_health()'s setting_ignored action: the RESET from a new session that has not used idgen
--   (one that has, as the session reading the finding, is refused 55P02), or RESET ALL where idgen
--   is preloaded.
-- The 0.10.1 library runs against 0.10.0's objects until this update (their idgen_metrics has no
-- such columns), and against those before, as 0.10.0's library did.
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.10.1'" to load this file. \quit

-- Every refused claim and ownership loss since the server started, recorded in the history or not
-- (it records one of each kind per service and minute): counted in shared memory
-- (src/history.rs, core/src/tally.rs). NULL for a service the caller may not read, which it
-- learns through the view below, as the caller.
CREATE VIEW idgen_private.visibility AS SELECT v.reads_all, v.services FROM idgen_visibility v;
COMMENT ON VIEW idgen_private.visibility IS 'idgen_visibility, as idgen_private.refusals_since_start() reads it (bound when created).';
GRANT SELECT ON idgen_private.visibility TO PUBLIC;
CREATE FUNCTION idgen_private.refusals_since_start(service text)
    RETURNS TABLE (refused_claims bigint, ownership_losses bigint)
    LANGUAGE c STABLE STRICT PARALLEL RESTRICTED ROWS 1
    AS 'MODULE_PATHNAME', 'refusals_since_start_wrapper';
COMMENT ON FUNCTION idgen_private.refusals_since_start(text) IS
    'The claims of a service refused and the ownership losses its holders were told in this database since the server started, every one (the history records one of each kind per minute); NULL for a service the caller may not read, or when the server could not keep the count.';
GRANT EXECUTE ON FUNCTION idgen_private.refusals_since_start(text) TO PUBLIC;

-- New columns at the end; idgen_private.visible_metrics (SELECT *) is made again to show them.
CREATE OR REPLACE VIEW idgen_metrics WITH (security_barrier) AS
SELECT c.service,
       c.held,
       c.in_use,
       c.capacity,
       c.free,
       c.used::float8 AS used_ratio,
       COALESCE(t.take_backs_released, 0)::bigint AS take_backs_released,
       COALESCE(t.take_backs_7d, 0)::bigint AS take_backs_7d,
       COALESCE(t.take_backs_1d, 0)::bigint AS take_backs_1d,
       COALESCE(t.take_backs_1h, 0)::bigint AS take_backs_1h,
       COALESCE(t.ownership_losses, 0)::bigint AS ownership_losses,
       COALESCE(t.refused_claims, 0)::bigint AS refused_claims,
       COALESCE(pg_catalog.date_part('epoch'::text, c.oldest_idle), 0::float8) AS oldest_idle_seconds,
       COALESCE(t.history_events_purged, 0)::bigint AS history_events_purged,
       COALESCE(t.restarts, 0)::bigint AS restarts,
       COALESCE(r.restart_loops, 0)::bigint AS restart_loops,
       COALESCE(f.flapping_ids, 0)::bigint AS flapping_ids,
       COALESCE(g.max_clock_offset_seconds, 0::float8) AS max_clock_offset_seconds,
       -- Sums of bigint counts are numeric: capped, so that no report can make the view fail.
       LEAST(COALESCE(g.clock_backward_waits, 0), 9223372036854775807)::bigint AS clock_backward_waits,
       LEAST(COALESCE(g.clock_backward_refusals, 0), 9223372036854775807)::bigint AS clock_backward_refusals,
       LEAST(COALESCE(g.sequence_exhaustions, 0), 9223372036854775807)::bigint AS sequence_exhaustions,
       CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text THEN 2
            WHEN c.level OPERATOR(pg_catalog.=) 'warning'::text THEN 1 ELSE 0 END AS capacity_level,
       s.refused_claims AS refused_claims_since_start,
       s.ownership_losses AS ownership_losses_since_start
  FROM idgen_capacity c
  LEFT JOIN LATERAL idgen_private.refusals_since_start(c.service::text) s ON true
  LEFT JOIN (SELECT n.service,
                    pg_catalog.max(pg_catalog.abs(pg_catalog.date_part('epoch'::text, n.clock_offset))) AS max_clock_offset_seconds,
                    pg_catalog.sum(n.clock_backward_waits) AS clock_backward_waits,
                    pg_catalog.sum(n.clock_backward_refusals) AS clock_backward_refusals,
                    pg_catalog.sum(n.sequence_exhaustions) AS sequence_exhaustions
               FROM idgen_nodes n WHERE n.released_at IS NULL GROUP BY n.service) g
         ON g.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN (SELECT l.service, pg_catalog.count(*) AS restart_loops FROM idgen_restart_loops l GROUP BY l.service) r
         ON r.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN (SELECT i.service, pg_catalog.count(*) AS flapping_ids FROM idgen_flapping_ids i GROUP BY i.service) f
         ON f.service OPERATOR(pg_catalog.=) c.service
  LEFT JOIN LATERAL (
       SELECT pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'released'::text) AS take_backs_released,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_7d'::text) AS take_backs_7d,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_1d'::text) AS take_backs_1d,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'take_back'::text
                                           AND k.outcome OPERATOR(pg_catalog.=) 'idle_1h'::text) AS take_backs_1h,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'ownership_lost'::text) AS ownership_losses,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) ANY (ARRAY['refused_full'::text, 'refused_watermark'::text, 'refused_no_standby'::text])) AS refused_claims,
              pg_catalog.sum(k.n) FILTER (WHERE k.purged) AS history_events_purged,
              pg_catalog.sum(k.n) FILTER (WHERE k.event OPERATOR(pg_catalog.=) 'restart'::text) AS restarts
         FROM (SELECT h.event, h.outcome, pg_catalog.count(*) AS n, false AS purged FROM idgen_private.idgen_history h
                WHERE h.service OPERATOR(pg_catalog.=) c.service GROUP BY h.event, h.outcome
               UNION ALL
               SELECT p.event, CASE WHEN p.outcome OPERATOR(pg_catalog.=) ''::text THEN NULL ELSE p.outcome END, p.events, true
                 FROM idgen_private.idgen_history_purged p WHERE p.service OPERATOR(pg_catalog.=) c.service) k
  ) t ON true;
CREATE OR REPLACE VIEW idgen_private.visible_metrics AS SELECT * FROM idgen_metrics;
COMMENT ON COLUMN idgen_metrics.ownership_losses IS 'Counter: holders that learnt their id had moved, as the history records them (a service node''s at most one per minute); every one is in ownership_losses_since_start.';
COMMENT ON COLUMN idgen_metrics.refused_claims IS 'Counter: claims refused (service full, watermark ahead, or no synchronous standby) as the history records them, at most one of each kind per minute; every one is in refused_claims_since_start.';
COMMENT ON COLUMN idgen_metrics.refused_claims_since_start IS 'Counter: every claim refused since the server started, recorded in the history or not (NULL: the server could not keep the count); starts at 0 again at a restart or a failover, as Prometheus counters do.';
COMMENT ON COLUMN idgen_metrics.ownership_losses_since_start IS 'Counter: every holder told its id had moved since the server started, recorded in the history or not (NULL: the server could not keep the count); starts at 0 again at a restart or a failover.';

-- One row per finding; none means healthy. Reads only the views above, as the caller.
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
           'Correct the idgen.* settings: ALTER SYSTEM SET each one that must change, then one SELECT pg_reload_conf() (docs/operations.md#changing-the-thresholds). The detail says what claims run by meanwhile.'::text AS action
      FROM idgen_policy() p WHERE p.problem IS NOT NULL
    UNION ALL
    SELECT 'warning', 'services_hidden', CURRENT_USER::text,
           pg_catalog.format('%s services are not shown to role %s: this report, idgen_capacity, idgen_nodes, idgen_events and idgen_metrics leave them out, healthy or not.',
                             v.hidden_services, CURRENT_USER),
           pg_catalog.format('For monitoring, GRANT pg_monitor TO %I (it reads every service); or grant the role the services it serves: SELECT idgen_grant_service(service, %L) (docs/security.md#who-sees-what).', CURRENT_USER, CURRENT_USER)
      FROM idgen_visibility v WHERE v.hidden_services OPERATOR(pg_catalog.>) 0
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
           'Nothing else is held back: claims take other ids meanwhile. Next time free ids with idgen_release, not DELETE or TRUNCATE (docs/operations.md#freeing-an-id-by-hand-safely).'
      FROM (SELECT s.service, pg_catalog.count(*) AS n, pg_catalog.max(s.bound) AS until,
                   pg_catalog.string_agg(s.machine_id::text, ', '::text ORDER BY s.machine_id) AS ids
              FROM idgen_tombstones s WHERE s.ahead GROUP BY s.service) t
    UNION ALL
    SELECT CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text
                  OR (c.free OPERATOR(pg_catalog.=) 0
                      AND (c.takeable_7d OPERATOR(pg_catalog.+) c.takeable_1d OPERATOR(pg_catalog.+) c.takeable_1h) OPERATOR(pg_catalog.=) 0)
                THEN 'critical' ELSE 'warning' END,
           'capacity', c.service,
           pg_catalog.format('%s of %s machine ids in use (%s), above idgen.capacity_%s (%s); %s free, takeable 7d/1d/1h: %s/%s/%s; %s',
                             c.in_use, c.capacity, c.used, c.level,
                             CASE WHEN c.level OPERATOR(pg_catalog.=) 'critical'::text THEN p.capacity_critical ELSE p.capacity_warning END,
                             c.free, c.takeable_7d, c.takeable_1d, c.takeable_1h,
                             CASE WHEN c.oldest_idle_machine_id IS NULL THEN 'none is held (cooling down or fenced).'::text
                                  ELSE pg_catalog.format('oldest idle: machine id %s, %s, idle %s.',
                                                         c.oldest_idle_machine_id, c.oldest_idle_holder, c.oldest_idle)
                             END),
           pg_catalog.format('Find why so many nodes hold ids: SELECT * FROM idgen_nodes WHERE service = %L ORDER BY last_seen; release the ids of nodes stopped for good (docs/operations.md#freeing-an-id-by-hand-safely), or give the nodes their own service names (docs/operations.md#a-service-is-full).', c.service)
      FROM idgen_capacity c CROSS JOIN idgen_policy() p WHERE c.level IS NOT NULL
    UNION ALL
    SELECT 'warning', 'holder_clock_skew', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s''s clock was %s %s the server''s at its last heartbeat (%s ago), more than idgen.clock_skew_alert (%s).',
                             n.holder, GREATEST(n.clock_offset, OPERATOR(pg_catalog.-) n.clock_offset),
                             CASE WHEN n.clock_offset OPERATOR(pg_catalog.>) interval '0' THEN 'ahead of'::text ELSE 'behind'::text END,
                             n.idle, p.clock_skew_alert),
           'Check the node''s time synchronisation (chronyc tracking, timedatectl). A clock ahead keeps its machine id from other nodes for as long after it stops; a clock behind stamps behind the server''s time, and behind its not_before after a claim.'
      FROM idgen_nodes n CROSS JOIN idgen_policy() p
     WHERE n.released_at IS NULL
       AND (n.clock_offset OPERATOR(pg_catalog.>) p.clock_skew_alert
            OR n.clock_offset OPERATOR(pg_catalog.<) (OPERATOR(pg_catalog.-) p.clock_skew_alert))
    UNION ALL
    SELECT 'warning', 'clock_backward_refusals', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s reports %s clock steps back since its claim that were too large to wait out: its generator refused to issue IDs meanwhile.', n.holder, n.clock_backward_refusals),
           'Fix the node''s time source (chronyc tracking, timedatectl); its generator issues again once its clock passes its last stamp. Its clock_offset in idgen_nodes shows how far it is off.'
      FROM idgen_nodes n
     WHERE n.released_at IS NULL AND n.clock_backward_refusals OPERATOR(pg_catalog.>) 0
    UNION ALL
    SELECT 'warning', 'restart_loop', pg_catalog.format('%s %s', r.service, r.holder),
           pg_catalog.format('%s claimed %s times within idgen.restart_loop_window (%s), from %s to %s (machine ids %s): it restarts in a loop.',
                             r.holder, r.claims, p.restart_loop_window, r.first_at, r.last_at, r.machine_ids),
           pg_catalog.format('Find why the node exits (its logs: a crash, an OOM kill, a failing health check): SELECT * FROM idgen_events WHERE service = %L AND host = %L AND port = %s ORDER BY at. A start that cannot reuse its id takes another one, so the service fills.', r.service, pg_catalog.host(r.host), r.port)
      FROM idgen_restart_loops r CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT 'warning', 'id_flapping', pg_catalog.format('%s machine id %s', f.service, f.machine_id),
           pg_catalog.format('Machine id %s moved between holders %s times within idgen.restart_loop_window (%s), from %s to %s (taken by %s).',
                             f.machine_id, f.moves, p.restart_loop_window, f.first_at, f.last_at, f.holders),
           pg_catalog.format('Nodes take the id from each other: look for nodes that release and restart at once, or that stop heartbeating: SELECT * FROM idgen_events WHERE service = %L AND machine_id = %s ORDER BY at.', f.service, f.machine_id)
      FROM idgen_flapping_ids f CROSS JOIN idgen_policy() p
    UNION ALL
    SELECT 'warning', 'setting_deprecated', 'idgen.capacity_alert',
           pg_catalog.format('idgen.capacity_alert is set (%s), but since idgen 0.6.0 it has no effect: idgen.capacity_warning (%s) and idgen.capacity_critical (%s) replace it.',
                             p.deprecated_capacity_alert, p.capacity_warning, p.capacity_critical),
           'ALTER SYSTEM RESET idgen.capacity_alert; ALTER SYSTEM SET idgen.capacity_warning = ... (and idgen.capacity_critical); SELECT pg_reload_conf();'
      FROM idgen_policy() p
     WHERE p.deprecated_capacity_alert IS NOT NULL
    UNION ALL
    SELECT 'warning', 'capacity_levels_inverted', 'idgen.capacity_warning',
           pg_catalog.format('idgen.capacity_warning (%s) is above idgen.capacity_critical (%s): the warning level is taken as the critical one.',
                             p.inverted_capacity_warning, p.capacity_critical),
           'ALTER SYSTEM SET idgen.capacity_warning = ... (at or below idgen.capacity_critical); SELECT pg_reload_conf();'
      FROM idgen_policy() p
     WHERE p.inverted_capacity_warning IS NOT NULL
    UNION ALL
    SELECT 'warning', 'setting_ignored', pg_catalog.format('%s (%s)', g.name, o.scope),
           pg_catalog.format('%s sets %s, a server-wide setting no role or database can have its own of. Sessions refuse it when idgen loads (a WARNING at connect): the server''s value (%s) applies, or, where falling back would be unsafe, their claims are refused (22023) until it is reset.',
                             o.scope, c.setting, pg_catalog.current_setting(g.name)),
           -- PostgreSQL refuses the RESET (55P02) in a session that has loaded idgen, as this one has.
           pg_catalog.format('%1$s RESET %2$s; from a new session that has not used idgen (psql -c ''%1$s RESET %2$s''): one that has refuses it (55P02), and with idgen in shared_preload_libraries every session has: then %1$s RESET ALL, and set its other settings again. To change it for the whole server: ALTER SYSTEM SET %2$s = ...; SELECT pg_reload_conf(); (docs/operations.md#changing-the-thresholds).',
                             o.statement, g.name)
      FROM pg_catalog.pg_db_role_setting s
     CROSS JOIN LATERAL pg_catalog.unnest(s.setconfig) c(setting)
      -- pg_show_all_settings(), not the view pg_settings: a pinned function no DROP ... CASCADE reaches.
      JOIN pg_catalog.pg_show_all_settings() g
        ON g.name OPERATOR(pg_catalog.=) pg_catalog.lower(pg_catalog.split_part(c.setting, '='::text, 1))
     CROSS JOIN LATERAL (
           SELECT CASE WHEN s.setrole OPERATOR(pg_catalog.=) 0::oid AND s.setdatabase OPERATOR(pg_catalog.=) 0::oid
                       THEN 'all roles'::text
                       WHEN s.setrole OPERATOR(pg_catalog.=) 0::oid
                       THEN pg_catalog.format('database %I', pg_catalog.current_database())
                       WHEN s.setdatabase OPERATOR(pg_catalog.=) 0::oid
                       THEN pg_catalog.format('role %I', pg_catalog.pg_get_userbyid(s.setrole))
                       ELSE pg_catalog.format('role %I in database %I', pg_catalog.pg_get_userbyid(s.setrole), pg_catalog.current_database())
                  END AS scope,
                  CASE WHEN s.setrole OPERATOR(pg_catalog.=) 0::oid AND s.setdatabase OPERATOR(pg_catalog.=) 0::oid
                       THEN 'ALTER ROLE ALL'::text
                       WHEN s.setrole OPERATOR(pg_catalog.=) 0::oid
                       THEN pg_catalog.format('ALTER DATABASE %I', pg_catalog.current_database())
                       WHEN s.setdatabase OPERATOR(pg_catalog.=) 0::oid
                       THEN pg_catalog.format('ALTER ROLE %I', pg_catalog.pg_get_userbyid(s.setrole))
                       ELSE pg_catalog.format('ALTER ROLE %I IN DATABASE %I', pg_catalog.pg_get_userbyid(s.setrole), pg_catalog.current_database())
                  END AS statement) o
     WHERE g.name OPERATOR(pg_catalog.~~) 'idgen.%'::text
       AND g.context OPERATOR(pg_catalog.=) ANY (ARRAY['sighup'::text, 'postmaster'::text])
       AND s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::oid,
           (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
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
           (GREATEST(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p.lease, n.lease_until) OPERATOR(pg_catalog.+) p.heartbeat_interval)
    UNION ALL
    SELECT 'notice', 'released_fenced', r.service,
           pg_catalog.format('%s released machine ids keep a watermark ahead of the clock, until %s (machine ids %s): their holders may have stamped until then (a release by hand keeps the holder''s bound; a holder''s clock ahead reports its own). Claims take other ids meanwhile.',
                             r.n, r.until, r.ids),
           'Nothing is wrong: they come free at that time. A node that releases its own id with a true clock frees it at once (docs/operations.md#freeing-an-id-by-hand-safely).'
      FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.max(n.issued_until) AS until,
                   pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
              FROM idgen_nodes n CROSS JOIN idgen_policy() p
             WHERE n.state OPERATOR(pg_catalog.=) 'fenced'::text
               AND n.issued_until OPERATOR(pg_catalog.<=)
                   (GREATEST(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p.lease, n.lease_until) OPERATOR(pg_catalog.+) p.heartbeat_interval)
             GROUP BY n.service) r
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
           pg_catalog.format('%s rows outside the machine ids this server hands out for the service (its pool within idgen.machine_id_range %s-%s) may still be stamped until %s (machine ids %s): %s of them held.',
                             o.n, p.machine_id_first, p.machine_id_last, o.until, o.ids, o.held),
           'This server hands them out no more; their holders keep them until they stop, and move inside the range on restart. Do not give these ids to another server before that time has passed and none is held here (docs/ha.md#scale-out-several-primaries-one-id-space).'
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
    SELECT 'notice', 'generator_waits', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
           pg_catalog.format('%s reports, since its claim, %s clock steps back waited out and %s waits for the next millisecond after using up a millisecond''s sequence.',
                             n.holder, COALESCE(n.clock_backward_waits, 0), COALESCE(n.sequence_exhaustions, 0)),
           'Nothing is wrong: its IDs stay unique. Many clock waits: check its time source. Many sequence waits: the node issues at its limit; spread the load over more nodes.'
      FROM idgen_nodes n
     WHERE n.released_at IS NULL
       AND (n.clock_backward_waits OPERATOR(pg_catalog.>) 0 OR n.sequence_exhaustions OPERATOR(pg_catalog.>) 0)
    UNION ALL
    SELECT 'notice', 'stale_backend_rows', b.service,
           pg_catalog.format('%s backend rows idle longer than idgen.takeover_idle_7d (machine ids %s): their slots have not used idgen since.', b.n, b.ids),
           'Nothing is wrong: the next claims of the service take them back first. To tidy up: docs/operations.md#freeing-an-id-by-hand-safely.'
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
    UNION ALL
    SELECT w.severity, w.finding, w.subject, w.detail, w.action FROM idgen_private.writer_findings() w
    UNION ALL
    SELECT l.severity, l.finding, l.subject, l.detail, l.action FROM idgen_private.layout_findings() l
) f
ORDER BY CASE WHEN f.severity OPERATOR(pg_catalog.=) 'critical'::text THEN 1
              WHEN f.severity OPERATOR(pg_catalog.=) 'warning'::text THEN 2 ELSE 3 END, f.finding, f.subject;
END;
COMMENT ON FUNCTION idgen_health() IS
    'What the person on call must know, one row per finding (severity critical, warning or notice; what; which rows; what to do), over the services you may read. No rows: healthy.';
