-- idgen 0.10.1 -> 0.10.2: idgen_health()'s findings as data.
-- - Each finding is its own function (idgen_private.health_<finding>(), or the library's
--   writer_findings() and layout_findings()) and a row of idgen_private.health_findings naming its
--   severity and that function; idgen_health() calls them, one line each, and sorts their rows as
--   before. Its answers do not change. From here on, an update that adds a finding creates its
--   function, inserts its row and adds its call, and one that changes a finding replaces that function
--   alone.
-- This script makes the move once: each finding's query is 0.10.1's arm of idgen_health(), unchanged.
-- The 0.10.2 library runs against 0.10.1's objects until this update, and against those before, as
-- 0.10.1's library did.
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.10.2'" to load this file. \quit

-- idgen_health()'s findings, each defined once: the function that reports it (its rows: severity,
-- finding, subject, detail with the facts, action with the runbook link) and its row of
-- idgen_private.health_findings (its severity, that function), and a call in idgen_health(). An update
-- that adds a finding creates its function, inserts its row and adds its call (idgen_health() lists
-- calls, one line each); one that changes a finding replaces its function alone.
-- tests/cluster/tests/runbook_links.rs ties the rows, the calls and docs/operations.md's table of findings.
CREATE TABLE idgen_private.health_findings (
    finding text PRIMARY KEY,
    severity text NOT NULL CHECK (severity IN ('critical', 'warning', 'notice', 'critical / warning')),
    reported_by text NOT NULL
);
COMMENT ON TABLE idgen_private.health_findings IS
    'What idgen_health() reports: each finding, its severity, and the function of idgen_private that reports it, which idgen_health() calls.';
COMMENT ON COLUMN idgen_private.health_findings.finding IS 'The finding, as idgen_health() names it.';
COMMENT ON COLUMN idgen_private.health_findings.severity IS 'critical, warning or notice, as docs/operations.md lists it; critical / warning: by the level found.';
COMMENT ON COLUMN idgen_private.health_findings.reported_by IS 'The function of idgen_private that reports it (no arguments); idgen_health() calls each one.';
REVOKE ALL ON idgen_private.health_findings FROM PUBLIC;
GRANT SELECT ON idgen_private.health_findings TO PUBLIC;

CREATE FUNCTION idgen_private.health_settings_inconsistent()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'critical', 'settings_inconsistent', 'idgen.*',
       p.problem,
       'Correct the idgen.* settings: ALTER SYSTEM SET each one that must change, then one SELECT pg_reload_conf() (docs/operations.md#changing-the-thresholds). The detail says what claims run by meanwhile.'
  FROM idgen_policy() p WHERE p.problem IS NOT NULL;
END;
COMMENT ON FUNCTION idgen_private.health_settings_inconsistent() IS
    'idgen_health()''s settings_inconsistent: the idgen.* settings contradict each other (claims run by the last consistent ones).';
GRANT EXECUTE ON FUNCTION idgen_private.health_settings_inconsistent() TO PUBLIC;

CREATE FUNCTION idgen_private.health_services_hidden()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'services_hidden', CURRENT_USER::text,
       pg_catalog.format('%s services are not shown to role %s: this report, idgen_capacity, idgen_nodes, idgen_events and idgen_metrics leave them out, healthy or not.',
                         v.hidden_services, CURRENT_USER),
       pg_catalog.format('For monitoring, GRANT pg_monitor TO %I (it reads every service); or grant the role the services it serves: SELECT idgen_grant_service(service, %L) (docs/security.md#who-sees-what).', CURRENT_USER, CURRENT_USER)
  FROM idgen_visibility v WHERE v.hidden_services OPERATOR(pg_catalog.>) 0;
END;
COMMENT ON FUNCTION idgen_private.health_services_hidden() IS
    'idgen_health()''s services_hidden: the caller does not see some services: their findings are left out.';
GRANT EXECUTE ON FUNCTION idgen_private.health_services_hidden() TO PUBLIC;

CREATE FUNCTION idgen_private.health_server_clock_behind()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'critical', 'server_clock_behind', 'registry',
       pg_catalog.format('The newest registry write (last_seen %s) is %s ahead of the server clock: the clock stepped back.',
                         x.newest, x.newest OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()),
       'Fix the time source (chronyc tracking, timedatectl). Backends wait out up to idgen.max_clock_backward and then refuse; IDs never reuse time. Do not move the clock back further.'
  FROM (SELECT pg_catalog.max(n.last_seen) AS newest FROM idgen_nodes n) x
 WHERE x.newest OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
END;
COMMENT ON FUNCTION idgen_private.health_server_clock_behind() IS
    'idgen_health()''s server_clock_behind: the newest registry write is ahead of the server clock: the clock stepped back.';
GRANT EXECUTE ON FUNCTION idgen_private.health_server_clock_behind() TO PUBLIC;

CREATE FUNCTION idgen_private.health_tombstone_ahead()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'tombstone_ahead', t.service,
       pg_catalog.format('%s machine ids whose rows were deleted or truncated by hand may still be stamped by their holders until %s (machine ids %s): claims skip them until then.',
                         t.n, t.until, t.ids),
       'Nothing else is held back: claims take other ids meanwhile. Next time free ids with idgen_release, not DELETE or TRUNCATE (docs/operations.md#freeing-an-id-by-hand-safely).'
  FROM (SELECT s.service, pg_catalog.count(*) AS n, pg_catalog.max(s.bound) AS until,
               pg_catalog.string_agg(s.machine_id::text, ', '::text ORDER BY s.machine_id) AS ids
          FROM idgen_tombstones s WHERE s.ahead GROUP BY s.service) t;
END;
COMMENT ON FUNCTION idgen_private.health_tombstone_ahead() IS
    'idgen_health()''s tombstone_ahead: machine ids whose rows were deleted or truncated by hand may still be stamped.';
GRANT EXECUTE ON FUNCTION idgen_private.health_tombstone_ahead() TO PUBLIC;

CREATE FUNCTION idgen_private.health_capacity()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
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
  FROM idgen_capacity c CROSS JOIN idgen_policy() p WHERE c.level IS NOT NULL;
END;
COMMENT ON FUNCTION idgen_private.health_capacity() IS
    'idgen_health()''s capacity: services above idgen.capacity_warning or idgen.capacity_critical.';
GRANT EXECUTE ON FUNCTION idgen_private.health_capacity() TO PUBLIC;

CREATE FUNCTION idgen_private.health_holder_clock_skew()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'holder_clock_skew', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
       pg_catalog.format('%s''s clock was %s %s the server''s at its last heartbeat (%s ago), more than idgen.clock_skew_alert (%s).',
                         n.holder, GREATEST(n.clock_offset, OPERATOR(pg_catalog.-) n.clock_offset),
                         CASE WHEN n.clock_offset OPERATOR(pg_catalog.>) interval '0' THEN 'ahead of'::text ELSE 'behind'::text END,
                         n.idle, p.clock_skew_alert),
       'Check the node''s time synchronisation (chronyc tracking, timedatectl). A clock ahead keeps its machine id from other nodes for as long after it stops; a clock behind stamps behind the server''s time, and behind its not_before after a claim.'
  FROM idgen_nodes n CROSS JOIN idgen_policy() p
 WHERE n.released_at IS NULL
   AND (n.clock_offset OPERATOR(pg_catalog.>) p.clock_skew_alert
        OR n.clock_offset OPERATOR(pg_catalog.<) (OPERATOR(pg_catalog.-) p.clock_skew_alert));
END;
COMMENT ON FUNCTION idgen_private.health_holder_clock_skew() IS
    'idgen_health()''s holder_clock_skew: holders whose clock was off the server''s by more than idgen.clock_skew_alert.';
GRANT EXECUTE ON FUNCTION idgen_private.health_holder_clock_skew() TO PUBLIC;

CREATE FUNCTION idgen_private.health_clock_backward_refusals()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'clock_backward_refusals', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
       pg_catalog.format('%s reports %s clock steps back since its claim that were too large to wait out: its generator refused to issue IDs meanwhile.', n.holder, n.clock_backward_refusals),
       'Fix the node''s time source (chronyc tracking, timedatectl); its generator issues again once its clock passes its last stamp. Its clock_offset in idgen_nodes shows how far it is off.'
  FROM idgen_nodes n
 WHERE n.released_at IS NULL AND n.clock_backward_refusals OPERATOR(pg_catalog.>) 0;
END;
COMMENT ON FUNCTION idgen_private.health_clock_backward_refusals() IS
    'idgen_health()''s clock_backward_refusals: holders whose generator refused clock steps back too large to wait out.';
GRANT EXECUTE ON FUNCTION idgen_private.health_clock_backward_refusals() TO PUBLIC;

CREATE FUNCTION idgen_private.health_restart_loop()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'restart_loop', pg_catalog.format('%s %s', r.service, r.holder),
       pg_catalog.format('%s claimed %s times within idgen.restart_loop_window (%s), from %s to %s (machine ids %s): it restarts in a loop.',
                         r.holder, r.claims, p.restart_loop_window, r.first_at, r.last_at, r.machine_ids),
       pg_catalog.format('Find why the node exits (its logs: a crash, an OOM kill, a failing health check): SELECT * FROM idgen_events WHERE service = %L AND host = %L AND port = %s ORDER BY at. A start that cannot reuse its id takes another one, so the service fills.', r.service, pg_catalog.host(r.host), r.port)
  FROM idgen_restart_loops r CROSS JOIN idgen_policy() p;
END;
COMMENT ON FUNCTION idgen_private.health_restart_loop() IS
    'idgen_health()''s restart_loop: service nodes that claim in a loop.';
GRANT EXECUTE ON FUNCTION idgen_private.health_restart_loop() TO PUBLIC;

CREATE FUNCTION idgen_private.health_id_flapping()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'id_flapping', pg_catalog.format('%s machine id %s', f.service, f.machine_id),
       pg_catalog.format('Machine id %s moved between holders %s times within idgen.restart_loop_window (%s), from %s to %s (taken by %s).',
                         f.machine_id, f.moves, p.restart_loop_window, f.first_at, f.last_at, f.holders),
       pg_catalog.format('Nodes take the id from each other: look for nodes that release and restart at once, or that stop heartbeating: SELECT * FROM idgen_events WHERE service = %L AND machine_id = %s ORDER BY at.', f.service, f.machine_id)
  FROM idgen_flapping_ids f CROSS JOIN idgen_policy() p;
END;
COMMENT ON FUNCTION idgen_private.health_id_flapping() IS
    'idgen_health()''s id_flapping: machine ids that move between holders again and again.';
GRANT EXECUTE ON FUNCTION idgen_private.health_id_flapping() TO PUBLIC;

CREATE FUNCTION idgen_private.health_setting_deprecated()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'setting_deprecated', 'idgen.capacity_alert',
       pg_catalog.format('idgen.capacity_alert is set (%s), but since idgen 0.6.0 it has no effect: idgen.capacity_warning (%s) and idgen.capacity_critical (%s) replace it.',
                         p.deprecated_capacity_alert, p.capacity_warning, p.capacity_critical),
       'ALTER SYSTEM RESET idgen.capacity_alert; ALTER SYSTEM SET idgen.capacity_warning = ... (and idgen.capacity_critical); SELECT pg_reload_conf();'
  FROM idgen_policy() p
 WHERE p.deprecated_capacity_alert IS NOT NULL;
END;
COMMENT ON FUNCTION idgen_private.health_setting_deprecated() IS
    'idgen_health()''s setting_deprecated: idgen.capacity_alert is set, without effect since 0.6.0.';
GRANT EXECUTE ON FUNCTION idgen_private.health_setting_deprecated() TO PUBLIC;

CREATE FUNCTION idgen_private.health_capacity_levels_inverted()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'capacity_levels_inverted', 'idgen.capacity_warning',
       pg_catalog.format('idgen.capacity_warning (%s) is above idgen.capacity_critical (%s): the warning level is taken as the critical one.',
                         p.inverted_capacity_warning, p.capacity_critical),
       'ALTER SYSTEM SET idgen.capacity_warning = ... (at or below idgen.capacity_critical); SELECT pg_reload_conf();'
  FROM idgen_policy() p
 WHERE p.inverted_capacity_warning IS NOT NULL;
END;
COMMENT ON FUNCTION idgen_private.health_capacity_levels_inverted() IS
    'idgen_health()''s capacity_levels_inverted: idgen.capacity_warning above idgen.capacity_critical.';
GRANT EXECUTE ON FUNCTION idgen_private.health_capacity_levels_inverted() TO PUBLIC;

CREATE FUNCTION idgen_private.health_setting_ignored()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
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
       (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())]);
END;
COMMENT ON FUNCTION idgen_private.health_setting_ignored() IS
    'idgen_health()''s setting_ignored: a server-wide idgen.* setting set for a role or a database.';
GRANT EXECUTE ON FUNCTION idgen_private.health_setting_ignored() TO PUBLIC;

CREATE FUNCTION idgen_private.health_holder_past_lease()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'holder_past_lease', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
       pg_catalog.format('%s last heartbeat %s ago; its lease ended at %s, so it must have stopped issuing IDs.', n.holder, n.idle, n.lease_until),
       'If the node still runs, it lost the database or its heartbeat died: restart it (it claims its id back). If it is gone for good, nothing is needed: the id is taken back after idgen.takeover_idle_1h, or release it by hand.'
  FROM idgen_nodes n
 WHERE n.kind OPERATOR(pg_catalog.=) 'service'::text
   AND n.state OPERATOR(pg_catalog.=) ANY (ARRAY['past_lease'::text, 'idle_1h'::text]);
END;
COMMENT ON FUNCTION idgen_private.health_holder_past_lease() IS
    'idgen_health()''s holder_past_lease: service nodes past their lease.';
GRANT EXECUTE ON FUNCTION idgen_private.health_holder_past_lease() TO PUBLIC;

CREATE FUNCTION idgen_private.health_watermark_ahead()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'watermark_ahead', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
       pg_catalog.format('Its watermark %s is %s ahead of the server clock, more than a lease and a heartbeat interval: %s reported time from a clock that ran ahead, or the server clock stepped back.',
                         n.issued_until, n.issued_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(), n.holder),
       'No other node can use this id until then (claims skip it). Check the clocks of the node and of the server.'
  FROM idgen_nodes n CROSS JOIN idgen_policy() p
 WHERE n.issued_until OPERATOR(pg_catalog.>)
       (GREATEST(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p.lease, n.lease_until) OPERATOR(pg_catalog.+) p.heartbeat_interval);
END;
COMMENT ON FUNCTION idgen_private.health_watermark_ahead() IS
    'idgen_health()''s watermark_ahead: watermarks further ahead of the server clock than a lease and a heartbeat interval.';
GRANT EXECUTE ON FUNCTION idgen_private.health_watermark_ahead() TO PUBLIC;

CREATE FUNCTION idgen_private.health_released_fenced()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
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
         GROUP BY n.service) r;
END;
COMMENT ON FUNCTION idgen_private.health_released_fenced() IS
    'idgen_health()''s released_fenced: released machine ids whose watermark is still ahead.';
GRANT EXECUTE ON FUNCTION idgen_private.health_released_fenced() TO PUBLIC;

CREATE FUNCTION idgen_private.health_watermark_behind()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'warning', 'watermark_behind', pg_catalog.format('%s machine id %s', w.service, w.machine_id),
       pg_catalog.format('%s reported a watermark behind the one the registry holds (last at %s): %s', w.holder, w.at, w.detail),
       'Check the node''s clock (NTP) and that it reports UTC; a node stamping behind its not_before may repeat IDs of the id''s earlier holder: stop it, fix the clock, restart it.'
  FROM (SELECT DISTINCT ON (e.service, e.machine_id) e.service, e.machine_id, e.holder, e.at, e.detail
          FROM idgen_events e
         WHERE e.event OPERATOR(pg_catalog.=) 'watermark_behind'::text
           AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day')
         ORDER BY e.service, e.machine_id, e.at DESC) w;
END;
COMMENT ON FUNCTION idgen_private.health_watermark_behind() IS
    'idgen_health()''s watermark_behind: holders that reported a watermark behind the registry''s.';
GRANT EXECUTE ON FUNCTION idgen_private.health_watermark_behind() TO PUBLIC;

CREATE FUNCTION idgen_private.health_outside_range()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
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
 CROSS JOIN idgen_policy() p;
END;
COMMENT ON FUNCTION idgen_private.health_outside_range() IS
    'idgen_health()''s outside_range: rows outside the machine ids this server hands out that may still be stamped.';
GRANT EXECUTE ON FUNCTION idgen_private.health_outside_range() TO PUBLIC;

CREATE FUNCTION idgen_private.health_replication()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
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
 WHERE r.synchronous OPERATOR(pg_catalog.=) 0 AND (r.names OR r.standbys OPERATOR(pg_catalog.>) 0);
END;
COMMENT ON FUNCTION idgen_private.health_replication() IS
    'idgen_health()''s synchronous_standby_missing, replication_async: no synchronous standby: synchronous_standby_missing, or replication_async.';
GRANT EXECUTE ON FUNCTION idgen_private.health_replication() TO PUBLIC;

CREATE FUNCTION idgen_private.health_generator_waits()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'notice', 'generator_waits', pg_catalog.format('%s machine id %s', n.service, n.machine_id),
       pg_catalog.format('%s reports, since its claim, %s clock steps back waited out and %s waits for the next millisecond after using up a millisecond''s sequence.',
                         n.holder, COALESCE(n.clock_backward_waits, 0), COALESCE(n.sequence_exhaustions, 0)),
       'Nothing is wrong: its IDs stay unique. Many clock waits: check its time source. Many sequence waits: the node issues at its limit; spread the load over more nodes.'
  FROM idgen_nodes n
 WHERE n.released_at IS NULL
   AND (n.clock_backward_waits OPERATOR(pg_catalog.>) 0 OR n.sequence_exhaustions OPERATOR(pg_catalog.>) 0);
END;
COMMENT ON FUNCTION idgen_private.health_generator_waits() IS
    'idgen_health()''s generator_waits: holders whose generator waited for its clock or its sequence.';
GRANT EXECUTE ON FUNCTION idgen_private.health_generator_waits() TO PUBLIC;

CREATE FUNCTION idgen_private.health_stale_backend_rows()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'notice', 'stale_backend_rows', b.service,
       pg_catalog.format('%s backend rows idle longer than idgen.takeover_idle_7d (machine ids %s): their slots have not used idgen since.', b.n, b.ids),
       'Nothing is wrong: the next claims of the service take them back first. To tidy up: docs/operations.md#freeing-an-id-by-hand-safely.'
  FROM (SELECT n.service, pg_catalog.count(*) AS n, pg_catalog.string_agg(n.machine_id::text, ', '::text ORDER BY n.machine_id) AS ids
          FROM idgen_nodes n
         WHERE n.kind OPERATOR(pg_catalog.=) 'backend'::text AND n.state OPERATOR(pg_catalog.=) 'idle_7d'::text
         GROUP BY n.service) b;
END;
COMMENT ON FUNCTION idgen_private.health_stale_backend_rows() IS
    'idgen_health()''s stale_backend_rows: backend rows idle longer than idgen.takeover_idle_7d.';
GRANT EXECUTE ON FUNCTION idgen_private.health_stale_backend_rows() TO PUBLIC;

CREATE FUNCTION idgen_private.health_history_purge_due()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
BEGIN ATOMIC
SELECT 'notice', 'history_purge_due', 'idgen_history',
       pg_catalog.format('The oldest history event is from %s, older than idgen.history_retention (%s).', e.oldest, p.history_retention),
       'SELECT idgen_purge_history(); and schedule it daily (cron or pg_cron).'
  FROM (SELECT pg_catalog.min(e.at) AS oldest FROM idgen_events e) e CROSS JOIN idgen_policy() p
 WHERE e.oldest OPERATOR(pg_catalog.<)
       (pg_catalog.now() OPERATOR(pg_catalog.-) p.history_retention OPERATOR(pg_catalog.-) interval '1 day');
END;
COMMENT ON FUNCTION idgen_private.health_history_purge_due() IS
    'idgen_health()''s history_purge_due: a history older than idgen.history_retention.';
GRANT EXECUTE ON FUNCTION idgen_private.health_history_purge_due() TO PUBLIC;

INSERT INTO idgen_private.health_findings (finding, severity, reported_by) VALUES
    ('settings_inconsistent', 'critical', 'health_settings_inconsistent'),
    ('services_hidden', 'warning', 'health_services_hidden'),
    ('server_clock_behind', 'critical', 'health_server_clock_behind'),
    ('tombstone_ahead', 'warning', 'health_tombstone_ahead'),
    ('capacity', 'critical / warning', 'health_capacity'),
    ('holder_clock_skew', 'warning', 'health_holder_clock_skew'),
    ('clock_backward_refusals', 'warning', 'health_clock_backward_refusals'),
    ('restart_loop', 'warning', 'health_restart_loop'),
    ('id_flapping', 'warning', 'health_id_flapping'),
    ('setting_deprecated', 'warning', 'health_setting_deprecated'),
    ('capacity_levels_inverted', 'warning', 'health_capacity_levels_inverted'),
    ('setting_ignored', 'warning', 'health_setting_ignored'),
    ('holder_past_lease', 'warning', 'health_holder_past_lease'),
    ('watermark_ahead', 'warning', 'health_watermark_ahead'),
    ('released_fenced', 'notice', 'health_released_fenced'),
    ('watermark_behind', 'warning', 'health_watermark_behind'),
    ('outside_range', 'warning', 'health_outside_range'),
    ('synchronous_standby_missing', 'critical', 'health_replication'),
    ('replication_async', 'warning', 'health_replication'),
    ('generator_waits', 'notice', 'health_generator_waits'),
    ('stale_backend_rows', 'notice', 'health_stale_backend_rows'),
    ('history_purge_due', 'notice', 'health_history_purge_due'),
    ('registry_writers_missing', 'critical', 'writer_findings'),
    ('worker_budget', 'warning', 'writer_findings'),
    ('worker_slots_exhausted', 'warning', 'writer_findings'),
    ('pools_apart_at_other_bits', 'warning', 'layout_findings');

-- One row per finding; none means healthy. Each finding's function, as the caller (its rows are
-- what the views show the caller). jit = off: compiling the plan would take far longer than running
-- it (it reads every registry row a few times); the SET also keeps it from being inlined into the
-- caller's query, whose plan would then be JIT-compiled instead. ROWS: a healthy registry has none.
-- The subject sorts by "C", as it did when these were one query (two findings' subjects are names).
CREATE OR REPLACE FUNCTION idgen_health()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE sql STABLE
    SET jit = off
    ROWS 10
BEGIN ATOMIC
SELECT f.severity, f.finding, f.subject, f.detail, f.action FROM (
    SELECT * FROM idgen_private.health_settings_inconsistent()
    UNION ALL SELECT * FROM idgen_private.health_services_hidden()
    UNION ALL SELECT * FROM idgen_private.health_server_clock_behind()
    UNION ALL SELECT * FROM idgen_private.health_tombstone_ahead()
    UNION ALL SELECT * FROM idgen_private.health_capacity()
    UNION ALL SELECT * FROM idgen_private.health_holder_clock_skew()
    UNION ALL SELECT * FROM idgen_private.health_clock_backward_refusals()
    UNION ALL SELECT * FROM idgen_private.health_restart_loop()
    UNION ALL SELECT * FROM idgen_private.health_id_flapping()
    UNION ALL SELECT * FROM idgen_private.health_setting_deprecated()
    UNION ALL SELECT * FROM idgen_private.health_capacity_levels_inverted()
    UNION ALL SELECT * FROM idgen_private.health_setting_ignored()
    UNION ALL SELECT * FROM idgen_private.health_holder_past_lease()
    UNION ALL SELECT * FROM idgen_private.health_watermark_ahead()
    UNION ALL SELECT * FROM idgen_private.health_released_fenced()
    UNION ALL SELECT * FROM idgen_private.health_watermark_behind()
    UNION ALL SELECT * FROM idgen_private.health_outside_range()
    UNION ALL SELECT * FROM idgen_private.health_replication()
    UNION ALL SELECT * FROM idgen_private.health_generator_waits()
    UNION ALL SELECT * FROM idgen_private.health_stale_backend_rows()
    UNION ALL SELECT * FROM idgen_private.health_history_purge_due()
    UNION ALL SELECT * FROM idgen_private.writer_findings()
    UNION ALL SELECT * FROM idgen_private.layout_findings()
) f
ORDER BY CASE WHEN f.severity OPERATOR(pg_catalog.=) 'critical'::text THEN 1
              WHEN f.severity OPERATOR(pg_catalog.=) 'warning'::text THEN 2 ELSE 3 END, f.finding, f.subject COLLATE pg_catalog."C";
END;
COMMENT ON FUNCTION idgen_health() IS
    'What the person on call must know, one row per finding (severity critical, warning or notice; what; which rows; what to do), over the services you may read. No rows: healthy.';
