-- idgen 0.9.0 -> 0.10.0: diagnostics that do not mislead.
-- - idgen_nodes.state: a backend row of this server inside its lease with no process in its slot
--   is parked (it was live): the slot's next backend of the service takes it up, or the registry
--   writer closes it. idgen_backend_row_here() tells such rows. idgen_capacity counts parked rows
--   as live, as before.
-- - idgen_nodes.state: a row released past the cooldown whose watermark is still ahead (released
--   by hand: the holders' bound) is fenced (it was released): claims skip it until its time, and
--   idgen_capacity counts it in use (new column fenced), as the claim's capacity alert does.
--   idgen_health() reports such rows once (released_fenced), not as watermark_ahead, which now
--   looks past the lease each row was granted.
-- - idgen_nodes.usename: the process's user, as "user" showed it. "user" stays for this release
--   (deprecated: SQL reads an unquoted user as CURRENT_USER) and goes in 0.11.0.
-- - idgen_visibility.hidden_services, and idgen_health()'s services_hidden: a role that does not
--   see every service is told how many it does not see, and which grant shows them. The actions
--   of idgen_health() link the docs' sections (the README had none of them any more).
-- - A backend mints only for a service that exists (the library's rule, no object changes).
-- - Capacity alerts on crossings: the history records each capacity level announced
--   (capacity_warning, capacity_critical, capacity_cleared) and the claim guards get the turn to
--   announce one (bucket 2048); idgen_purge_history() keeps each service's newest announcement.
-- - idgen_health()'s setting_ignored: a server-wide idgen setting set for a role or a database.
-- The 0.10.0 library also runs against 0.9.0's objects until this update (and those before, as
-- 0.9.0's library did).
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.10.0'" to load this file. \quit

CREATE OR REPLACE VIEW idgen_visibility AS
SELECT v.reads_all,
       v.services,
       CASE WHEN v.reads_all THEN 0::bigint
            ELSE (SELECT pg_catalog.count(*)
                    FROM (SELECT n.service::text AS service FROM idgen_private.nodes n
                          UNION
                          SELECT l.service::text FROM idgen_private.idgen_layouts l) s
                   WHERE s.service OPERATOR(pg_catalog.<>) ALL (v.services))
       END AS hidden_services
  FROM (SELECT pg_catalog.pg_has_role(CURRENT_USER, 'pg_monitor'::name, 'MEMBER'::text)
               OR EXISTS (SELECT FROM pg_catalog.pg_extension e
                           WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::name
                             AND pg_catalog.pg_has_role(CURRENT_USER, e.extowner, 'MEMBER'::text)) AS reads_all,
               ARRAY(SELECT DISTINCT m.service::text FROM idgen_private.idgen_service_members m
                      WHERE pg_catalog.pg_has_role(CURRENT_USER, m.member::pg_catalog.oid, 'MEMBER'::text)) AS services) v;
COMMENT ON VIEW idgen_visibility IS
    'Which services the current role may read in the idgen views: all of them (reads_all: superusers, the extension owner, pg_monitor), or those granted to it with idgen_grant_service; and how many it does not see.';
COMMENT ON COLUMN idgen_visibility.hidden_services IS 'How many services of the registry (with rows or a layout) the role does not see: the idgen views and idgen_health() leave them out. idgen_health() says so (services_hidden).';

CREATE FUNCTION idgen_backend_row_here(host inet, port integer, backend_slot integer)
    RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'idgen_backend_row_here_wrapper';
COMMENT ON FUNCTION idgen_backend_row_here(inet, integer, integer) IS
    'Whether a registry row is a backend row of this server: a backend slot, host idgen.node_host and this server''s port, on a primary (a standby''s rows are its primary''s). idgen_nodes shows such a row inside its lease with no process in its slot as parked.';

CREATE OR REPLACE VIEW idgen_nodes WITH (security_barrier) AS
SELECT n.service,
       n.machine_id,
       CASE WHEN n.backend_slot IS NULL THEN 'service'::text ELSE 'backend'::text END AS kind,
       CASE WHEN s.state OPERATOR(pg_catalog.=) 'live'::text
                 AND idgen_backend_row_here(n.host, n.port, n.backend_slot)
                 AND idgen_slot_pid(n.host, n.port, n.backend_slot) IS NULL THEN 'parked'::text
            WHEN s.state OPERATOR(pg_catalog.=) 'released'::text
                 AND n.issued_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN 'fenced'::text
            ELSE s.state
       END AS state,
       idgen_node_name(n.host, n.port, n.backend_slot) AS holder,
       pg_catalog.date_trunc('second'::text, pg_catalog.now() OPERATOR(pg_catalog.-) n.last_seen) AS idle,
       COALESCE(n.lease_until, n.last_seen OPERATOR(pg_catalog.+) p.lease) AS lease_until,
       n.issued_until,
       idgen_private.holder_bound(n, p.lease, p.takeover_idle_1h) AS bound,
       n.version,
       n.machine_id OPERATOR(pg_catalog.>=) GREATEST(COALESCE(l.pool_first, 0), p.machine_id_first)
           AND n.machine_id OPERATOR(pg_catalog.<=) LEAST(COALESCE(l.pool_last, 1023), p.machine_id_last) AS in_range,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_offset END AS clock_offset,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_backward_waits END AS clock_backward_waits,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.clock_backward_refusals END AS clock_backward_refusals,
       CASE WHEN n.reports_version OPERATOR(pg_catalog.=) n.version THEN n.sequence_exhaustions END AS sequence_exhaustions,
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
       n.takeover_at,
       pg_catalog.pg_get_userbyid(a.usesysid) AS usename
  FROM idgen_private.nodes n
 CROSS JOIN LATERAL (SELECT idgen_node_state(n.last_seen, n.released_at, n.lease_until, n.takeover_at) AS state) s
  LEFT JOIN idgen_private.idgen_layouts l ON l.service::text OPERATOR(pg_catalog.=) n.service::text
 CROSS JOIN idgen_policy() p
 CROSS JOIN idgen_visibility v
  LEFT JOIN pg_catalog.pg_stat_get_activity(NULL::integer) a
         ON a.pid OPERATOR(pg_catalog.=) idgen_slot_pid(n.host, n.port, n.backend_slot, n.last_seen)
 WHERE v.reads_all OR n.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON COLUMN idgen_nodes.state IS
    'live (inside its lease), parked (a backend row of this server inside its lease with no process in its slot: its backend exited, and the slot''s next backend of the service takes the lease up, or the registry writer closes it; after a server restart, or in a database copied with its registry, it ends with its lease; not takeable before then), past_lease (its holder must have stopped issuing; not takeable yet), idle_1h / idle_1d / idle_7d (idle long enough for that take-back tier), cooling_down (released, within idgen.release_cooldown), fenced (released past the cooldown, with a watermark still ahead: its holders'' bound after a release without their last stamp, by hand, or a holder''s clock ahead; no claim takes it before its time is near: a node''s within idgen.lease_safety_margin, a backend''s within idgen.max_clock_backward), released (released, free for the next claim).';
COMMENT ON COLUMN idgen_nodes."user" IS 'Deprecated (it goes in 0.11.0): usename, under a name SQL reads as CURRENT_USER unless quoted.';
COMMENT ON COLUMN idgen_nodes.usename IS 'That process''s user (as pg_stat_activity.usename).';

-- Bound when created: it takes the new column too.
CREATE OR REPLACE VIEW idgen_private.visible_nodes AS SELECT * FROM idgen_nodes;

CREATE OR REPLACE VIEW idgen_capacity WITH (security_barrier) AS
SELECT s.service,
       c.capacity,
       s.in_use,
       c.capacity OPERATOR(pg_catalog.-) s.in_use AS free,
       pg_catalog.round(s.in_use::numeric OPERATOR(pg_catalog./) c.capacity::numeric, 3) AS used,
       (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_warning AS above_alert,
       CASE WHEN (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_critical THEN 'critical'::text
            WHEN (s.in_use::float8 OPERATOR(pg_catalog./) c.capacity::float8) OPERATOR(pg_catalog.>) p.capacity_warning THEN 'warning'::text
       END AS level,
       s.held,
       s.live,
       s.past_lease,
       s.takeable_7d,
       s.takeable_1d,
       s.takeable_1h,
       s.cooling_down,
       s.released,
       o.machine_id AS oldest_idle_machine_id,
       o.holder AS oldest_idle_holder,
       o.idle AS oldest_idle,
       s.fenced
  FROM (SELECT n.service,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.<>) 'released'::text) AS in_use,
               pg_catalog.count(*) FILTER (WHERE n.released_at IS NULL) AS held,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) ANY (ARRAY['live'::text, 'parked'::text])) AS live,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'past_lease'::text) AS past_lease,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_7d'::text) AS takeable_7d,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_1d'::text) AS takeable_1d,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'idle_1h'::text) AS takeable_1h,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'cooling_down'::text) AS cooling_down,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'released'::text) AS released,
               pg_catalog.count(*) FILTER (WHERE n.state OPERATOR(pg_catalog.=) 'fenced'::text) AS fenced
          FROM idgen_nodes n WHERE n.in_range GROUP BY n.service) s
 CROSS JOIN idgen_policy() p
  LEFT JOIN idgen_private.idgen_layouts l ON l.service::text OPERATOR(pg_catalog.=) s.service::text
 CROSS JOIN LATERAL (SELECT GREATEST(LEAST(COALESCE(l.pool_last, 1023), p.machine_id_last)
                                     OPERATOR(pg_catalog.-) GREATEST(COALESCE(l.pool_first, 0), p.machine_id_first)
                                     OPERATOR(pg_catalog.+) 1, 0) AS capacity) c
  LEFT JOIN LATERAL (SELECT n.machine_id, n.holder, n.idle FROM idgen_nodes n
                      WHERE n.service OPERATOR(pg_catalog.=) s.service AND n.in_range AND n.released_at IS NULL
                      ORDER BY n.last_seen, n.machine_id LIMIT 1) o ON true;
COMMENT ON VIEW idgen_capacity IS
    'Per service you may read, within the machine ids this server hands out for it (its pool within idgen.machine_id_range): how many are in use (held, cooling down after a release, or fenced until their watermark), free for the next claim, and takeable per tier, and the oldest idle holder. A claim that leaves a service above idgen.capacity_warning or idgen.capacity_critical raises an idgen_alert with the level.';
COMMENT ON COLUMN idgen_capacity.in_use IS 'Held, released and still cooling down, or released and fenced: a claim gets none of them without a take-back, or before the fenced ones'' time.';
COMMENT ON COLUMN idgen_capacity.live IS 'Held inside their lease (parked backend leases included).';
COMMENT ON COLUMN idgen_capacity.fenced IS 'Released past the cooldown with a watermark still ahead (a release by hand keeps the holders'' bound): no claim takes them before that time (counted in in_use).';

COMMENT ON VIEW idgen_metrics IS
    'One row per service you may read, numeric columns only, for postgres_exporter (docs/operations.md#metrics-for-postgres_exporter). The counters count every event since the extension was created, purged ones included.';

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
           pg_catalog.format('%s RESET %s; to change it for the whole server: ALTER SYSTEM SET %s = ...; SELECT pg_reload_conf(); (docs/operations.md#changing-the-thresholds).',
                             o.statement, g.name, g.name)
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

-- The capacity levels announced (alerts on crossings): the history records each, and the claim guards
-- have the turn to announce one (bucket 2048) for every service that has guards.
ALTER TABLE idgen_private.idgen_history DROP CONSTRAINT idgen_history_event_known,
    ADD CONSTRAINT idgen_history_event_known CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
            'claim', 'take_back', 'release', 'set_aside', 'ownership_lost', 'refused_full', 'refused_watermark',
            'refused_no_standby', 'watermark_behind', 'restart', 'capacity_warning', 'capacity_critical',
            'capacity_cleared']));
ALTER TABLE idgen_private.idgen_claim_guards DROP CONSTRAINT idgen_claim_guards_bucket_in_range,
    ADD CONSTRAINT idgen_claim_guards_bucket_in_range CHECK (bucket BETWEEN 0 AND 2048);
INSERT INTO idgen_private.idgen_claim_guards (service, bucket)
    SELECT DISTINCT g.service, 2048 FROM idgen_private.idgen_claim_guards g
    ON CONFLICT DO NOTHING;
COMMENT ON TABLE idgen_private.idgen_history IS
    'idgen ownership history, append-only: claims, take-backs, releases, ownership losses, refused claims (at most one refusal of each kind per service and minute) and the capacity levels announced. Read it through the view idgen_events; purge it with idgen_purge_history().';
COMMENT ON COLUMN idgen_private.idgen_history.event IS
    'claim (a new id, or a node''s own released id back), take_back (from a released or idle holder; outcome names the tier), release, set_aside (a node''s own id left because its bound was too far ahead, or it is outside idgen.machine_id_range), ownership_lost (a holder learnt it lost the id), refused_full, refused_watermark, refused_no_standby (idgen.require_synchronous_standby), watermark_behind (a node reported a watermark behind the registry''s: its clock is behind), restart (a service node claimed the id it still held: it restarted without releasing), capacity_warning, capacity_critical, capacity_cleared (a claim changed the service''s capacity level from the one announced last, with an alert; later claims compare with the newest). Losses, refusals and watermarks behind: at most one of each kind per service and minute.';
COMMENT ON COLUMN idgen_private.idgen_history.machine_id IS 'The machine id concerned; NULL for a claim refused because the service is full or no synchronous standby streams (refused_full, refused_no_standby), and for capacity levels announced.';
COMMENT ON COLUMN idgen_private.idgen_history.detail IS 'For refusals and losses: what the caller was told; for capacity levels announced: the alert.';
COMMENT ON INDEX idgen_private.idgen_history_refusals IS 'A refusal is recorded only if none of its kind was for the service within a minute; a claim reads the capacity level announced last.';
COMMENT ON COLUMN idgen_private.idgen_claim_guards.bucket IS
    'Buckets 0 to 1023: one per never-registered machine id; 1024 to 2047: service node identities hash onto these; 2048: the turn to announce a change of the service''s capacity level. Machine ids past 1023 (the pools of wider fields) share the first 1,024, modulo 1,024.';
COMMENT ON VIEW idgen_events IS
    'The ownership history (idgen_history) of the services you may read: who got which machine id when and how, who it was taken from, restarts, releases, losses, refused claims and the capacity levels announced. A database backend''s reuse of its slot''s held row is not recorded (ownership does not move); a service node''s claim of the row it still held is a restart.';
COMMENT ON COLUMN idgen_events.event IS 'claim, take_back, restart (a service node claimed the id it still held), release, set_aside, ownership_lost, refused_full, refused_watermark, refused_no_standby, watermark_behind, or capacity_warning, capacity_critical, capacity_cleared (a claim changed the service''s capacity level from the one announced last, with an alert).';
COMMENT ON COLUMN idgen_events.machine_id IS 'The machine id; NULL for refused_full, refused_no_standby and capacity levels announced.';
COMMENT ON COLUMN idgen_events.detail IS 'Refusals and losses: what the caller was told; capacity levels announced: the alert.';

-- Each service's newest capacity announcement outlives the purge: claims compare with it.
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
