-- Diagnostics for the person on call: views over the registry and its history,
-- idgen_health(), and the metrics. States and thresholds come from the Rust
-- functions idgen_policy() and idgen_node_state() (src/diagnostics/nodes.rs),
-- the same code the claim runs by.
--
-- Who sees what: superusers, the extension owner and members of pg_monitor see
-- every service; any other role sees the services granted to it (or to a role
-- it is a member of) with idgen_grant_service. The rule is the view
-- idgen_visibility; every other view filters through it.
--
-- Views and SQL-standard function bodies are bound when created, and every
-- operator and function below is pg_catalog's, named so: nothing a lower role
-- plants on a search_path takes part when a superuser reads them. They read
-- pg_catalog's tables and functions, which are pinned, and none of its views
-- (pg_stat_activity is not pinned: DROP VIEW ... CASCADE of it would drop idgen
-- past its drop guard).

CREATE VIEW idgen_visibility AS
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
COMMENT ON COLUMN idgen_visibility.reads_all IS 'True when the role reads every service.';
COMMENT ON COLUMN idgen_visibility.services IS 'The services granted to the role (or to roles it is a member of).';
COMMENT ON COLUMN idgen_visibility.hidden_services IS 'How many services of the registry (with rows or a layout) the role does not see: the idgen views and idgen_health() leave them out. idgen_health() says so (services_hidden).';

CREATE VIEW idgen_layouts WITH (security_barrier) AS
SELECT l.service,
       l.preset,
       l.epoch,
       l.time_unit_ms,
       l.time_bits,
       l.machine_bits,
       l.sequence_bits,
       l.field_order,
       l.pool_first,
       l.pool_last,
       l.pool_last OPERATOR(pg_catalog.-) l.pool_first OPERATOR(pg_catalog.+) 1 AS machine_ids,
       (1::bigint OPERATOR(pg_catalog.<<) l.sequence_bits) OPERATOR(pg_catalog.*) 1000 OPERATOR(pg_catalog./) l.time_unit_ms AS ids_per_second,
       l.epoch OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => ((((1::bigint OPERATOR(pg_catalog.<<) l.time_bits) OPERATOR(pg_catalog.*) l.time_unit_ms)
           OPERATOR(pg_catalog.-) 1)::float8 OPERATOR(pg_catalog./) 1000::float8)) AS ends_at,
       l.defined_at,
       l.defined_by,
       l.fixed_at
  FROM idgen_private.idgen_layouts l
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR l.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_layouts IS
    'The ID layout and pool of each service you may read (idgen_define_layout; a service''s first claim fixes it, and records snowflake for a service never given one). A service with no row here uses snowflake, every machine id, until its first claim.';
COMMENT ON COLUMN idgen_layouts.service IS 'The service.';
COMMENT ON COLUMN idgen_layouts.preset IS 'snowflake, sonyflake or js_safe when the layout is that preset''s, custom otherwise.';
COMMENT ON COLUMN idgen_layouts.epoch IS 'When the time field is 0.';
COMMENT ON COLUMN idgen_layouts.time_unit_ms IS 'Milliseconds per tick of the time field.';
COMMENT ON COLUMN idgen_layouts.time_bits IS 'Bits of the time field.';
COMMENT ON COLUMN idgen_layouts.machine_bits IS 'Bits of the machine-id field.';
COMMENT ON COLUMN idgen_layouts.sequence_bits IS 'Bits of the sequence field.';
COMMENT ON COLUMN idgen_layouts.field_order IS 'time_machine_sequence or time_sequence_machine.';
COMMENT ON COLUMN idgen_layouts.pool_first IS 'The lowest machine id claims hand out for the service.';
COMMENT ON COLUMN idgen_layouts.pool_last IS 'The highest machine id claims hand out for the service.';
COMMENT ON COLUMN idgen_layouts.machine_ids IS 'How many machine ids the pool holds (each server hands out those inside its idgen.machine_id_range).';
COMMENT ON COLUMN idgen_layouts.ids_per_second IS 'IDs one holder can stamp per second at most: 2^sequence_bits per tick.';
COMMENT ON COLUMN idgen_layouts.ends_at IS 'The last time the layout can stamp: from then on no ID of the service can be issued.';
COMMENT ON COLUMN idgen_layouts.defined_at IS 'When it was defined, or recorded by the first claim.';
COMMENT ON COLUMN idgen_layouts.defined_by IS 'The role that defined it, "first claim", or "update to 0.7.0" (a service of an earlier version).';
COMMENT ON COLUMN idgen_layouts.fixed_at IS 'When the service''s first claim fixed it; NULL: it may still be defined again.';

CREATE VIEW idgen_nodes WITH (security_barrier) AS
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
COMMENT ON VIEW idgen_nodes IS
    'Every registry row (system_nodes) you may read, with its kind, its state by the claim''s own rules, its lease and watermark, and for a backend row the live connection now in its slot.';
COMMENT ON COLUMN idgen_nodes.service IS 'The service.';
COMMENT ON COLUMN idgen_nodes.machine_id IS 'The Snowflake machine id.';
COMMENT ON COLUMN idgen_nodes.kind IS 'service (a node that called idgen_claim) or backend (a database backend''s own lease).';
COMMENT ON COLUMN idgen_nodes.state IS
    'live (inside its lease), parked (a backend row of this server inside its lease with no process in its slot: its backend exited, and the slot''s next backend of the service takes the lease up, or the registry writer closes it; after a server restart, or in a database copied with its registry, it ends with its lease; not takeable before then), past_lease (its holder must have stopped issuing; not takeable yet), idle_1h / idle_1d / idle_7d (idle long enough for that take-back tier), cooling_down (released, within idgen.release_cooldown), fenced (released past the cooldown, with a watermark still ahead: its holders'' bound after a release without their last stamp, by hand, or a holder''s clock ahead; no claim takes it before its time is near: a node''s within idgen.lease_safety_margin, a backend''s within idgen.max_clock_backward), released (released, free for the next claim).';
COMMENT ON COLUMN idgen_nodes.holder IS 'The holder: host:port, or backend slot N of host:port.';
COMMENT ON COLUMN idgen_nodes.idle IS 'Time since the last claim or heartbeat (to the second).';
COMMENT ON COLUMN idgen_nodes.lease_until IS 'When the holder must stop issuing unless it heartbeats: the lease it was granted (for a row that records none, last_seen plus today''s lease).';
COMMENT ON COLUMN idgen_nodes.issued_until IS 'The watermark: the latest timestamp the holders of this id reported, or (a backend) the end of the window it may issue in, or its last stamp once it stopped.';
COMMENT ON COLUMN idgen_nodes.bound IS 'The latest time any holder of this id may have stamped: the next holder starts after it (for a held service node, its last report plus its lease).';
COMMENT ON COLUMN idgen_nodes.version IS 'Ownership epoch.';
COMMENT ON COLUMN idgen_nodes.in_range IS 'Inside the machine ids this server hands out for the service: its pool (idgen_layouts) within idgen.machine_id_range. A holder outside keeps its id until it stops.';
COMMENT ON COLUMN idgen_nodes.clock_offset IS 'Service nodes: how far the holder''s clock was ahead of the server''s (negative: behind) at its last heartbeat, from the watermark it reported (its clock or its last stamp, whichever was later) minus the server clock. NULL: not reported by this holder (no watermark, or no heartbeat since its claim). idgen_health() reports holder_clock_skew past idgen.clock_skew_alert.';
COMMENT ON COLUMN idgen_nodes.clock_backward_waits IS 'Service nodes, as their last heartbeat reported: how often since the claim the generator''s clock stepped back and it waited. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.clock_backward_refusals IS 'Service nodes, as their last heartbeat reported: how often since the claim the clock stepped back further than the generator may wait, and it refused to issue. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.sequence_exhaustions IS 'Service nodes, as their last heartbeat reported: how often since the claim the generator used up a millisecond''s sequence and waited for the next. NULL: not reported by this holder.';
COMMENT ON COLUMN idgen_nodes.pid IS 'Backend rows of this server: the process holding the row, if it still runs (a process that took the slot after the row was last written is not shown: it has not used the row).';
COMMENT ON COLUMN idgen_nodes."user" IS 'Deprecated (it goes in 0.11.0): usename, under a name SQL reads as CURRENT_USER unless quoted.';
COMMENT ON COLUMN idgen_nodes.database IS 'That process''s database.';
COMMENT ON COLUMN idgen_nodes.application_name IS 'That process''s application_name.';
COMMENT ON COLUMN idgen_nodes.backend_start IS 'When that process started (visible to its own user, superusers and pg_read_all_stats).';
COMMENT ON COLUMN idgen_nodes.usename IS 'That process''s user (as pg_stat_activity.usename).';
COMMENT ON COLUMN idgen_nodes.host IS 'The holder''s address.';
COMMENT ON COLUMN idgen_nodes.port IS 'The holder''s port.';
COMMENT ON COLUMN idgen_nodes.backend_slot IS 'The backend slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_nodes.last_seen IS 'Last claim or heartbeat.';
COMMENT ON COLUMN idgen_nodes.released_at IS 'When it was released; NULL while held.';
COMMENT ON COLUMN idgen_nodes.created_at IS 'When the machine id was first registered for the service.';
COMMENT ON COLUMN idgen_nodes.takeover_at IS 'No take-back before this time, as granted with the lease (NULL: not recorded).';

CREATE VIEW idgen_capacity WITH (security_barrier) AS
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
COMMENT ON COLUMN idgen_capacity.service IS 'The service.';
COMMENT ON COLUMN idgen_capacity.capacity IS 'Machine ids the service can have on this server: its pool (by default the snowflake layout''s 1,024) within idgen.machine_id_range.';
COMMENT ON COLUMN idgen_capacity.in_use IS 'Held, released and still cooling down, or released and fenced: a claim gets none of them without a take-back, or before the fenced ones'' time.';
COMMENT ON COLUMN idgen_capacity.free IS 'Never registered, or released past the cooldown: the next claims get these first.';
COMMENT ON COLUMN idgen_capacity.used IS 'in_use / capacity.';
COMMENT ON COLUMN idgen_capacity.above_alert IS 'used is above idgen.capacity_warning (level is not NULL).';
COMMENT ON COLUMN idgen_capacity.level IS 'warning (used above idgen.capacity_warning), critical (above idgen.capacity_critical), or NULL below both.';
COMMENT ON COLUMN idgen_capacity.held IS 'Rows not released (live, past their lease, or idle).';
COMMENT ON COLUMN idgen_capacity.live IS 'Held inside their lease (parked backend leases included).';
COMMENT ON COLUMN idgen_capacity.past_lease IS 'Held past their lease, not yet takeable.';
COMMENT ON COLUMN idgen_capacity.takeable_7d IS 'Held, idle long enough for the 7-day tier.';
COMMENT ON COLUMN idgen_capacity.takeable_1d IS 'Held, idle long enough for the 1-day tier (and not the 7-day one).';
COMMENT ON COLUMN idgen_capacity.takeable_1h IS 'Held, idle long enough for the 1-hour tier only (taking one raises an alert).';
COMMENT ON COLUMN idgen_capacity.cooling_down IS 'Released within idgen.release_cooldown.';
COMMENT ON COLUMN idgen_capacity.released IS 'Released past the cooldown (counted in free).';
COMMENT ON COLUMN idgen_capacity.oldest_idle_machine_id IS 'The held machine id seen longest ago.';
COMMENT ON COLUMN idgen_capacity.oldest_idle_holder IS 'Its holder.';
COMMENT ON COLUMN idgen_capacity.oldest_idle IS 'How long it has been idle.';
COMMENT ON COLUMN idgen_capacity.fenced IS 'Released past the cooldown with a watermark still ahead (a release by hand keeps the holders'' bound): no claim takes them before that time (counted in in_use).';

CREATE VIEW idgen_events WITH (security_barrier) AS
SELECT h.at,
       h.event,
       h.service,
       h.machine_id,
       h.version,
       h.outcome,
       idgen_node_name(h.host, h.port, h.backend_slot) AS holder,
       h.role,
       h.pid,
       idgen_node_name(h.previous_host, h.previous_port, h.previous_backend_slot) AS previous_holder,
       h.previous_version,
       h.previous_idle_seconds::float8 OPERATOR(pg_catalog.*) interval '1 second' AS previous_idle,
       h.not_before,
       h.issued_until,
       h.previous_bound,
       h.detail,
       h.event_id,
       h.host,
       h.port,
       h.backend_slot,
       h.previous_host,
       h.previous_port,
       h.previous_backend_slot
  FROM idgen_private.idgen_history h
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR h.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_events IS
    'The ownership history (idgen_history) of the services you may read: who got which machine id when and how, who it was taken from, restarts, releases, losses, refused claims and the capacity levels announced. A database backend''s reuse of its slot''s held row is not recorded (ownership does not move); a service node''s claim of the row it still held is a restart.';
COMMENT ON COLUMN idgen_events.at IS 'When it happened.';
COMMENT ON COLUMN idgen_events.event IS 'claim, take_back, restart (a service node claimed the id it still held), release, set_aside, ownership_lost, refused_full, refused_watermark, refused_no_standby, watermark_behind, or capacity_warning, capacity_critical, capacity_cleared (a claim changed the service''s capacity level from the one announced last, with an alert).';
COMMENT ON COLUMN idgen_events.service IS 'The service.';
COMMENT ON COLUMN idgen_events.machine_id IS 'The machine id; NULL for refused_full, refused_no_standby and capacity levels announced.';
COMMENT ON COLUMN idgen_events.version IS 'Ownership epoch after the event (or the one a loser held).';
COMMENT ON COLUMN idgen_events.outcome IS 'Claims, take-backs and restarts: new, reused, released, idle_7d, idle_1d, idle_1h.';
COMMENT ON COLUMN idgen_events.holder IS 'The node: host:port, or backend slot N of host:port.';
COMMENT ON COLUMN idgen_events.role IS 'The role that called idgen.';
COMMENT ON COLUMN idgen_events.pid IS 'The server process that recorded it.';
COMMENT ON COLUMN idgen_events.previous_holder IS 'Take-backs: who the id was taken from.';
COMMENT ON COLUMN idgen_events.previous_version IS 'Take-backs: its version; restarts: the version of the node''s earlier process.';
COMMENT ON COLUMN idgen_events.previous_idle IS 'Take-backs: how long it had been idle.';
COMMENT ON COLUMN idgen_events.not_before IS 'Claims, take-backs and restarts: the holder stamps after this.';
COMMENT ON COLUMN idgen_events.issued_until IS 'Releases and set-asides: the watermark left.';
COMMENT ON COLUMN idgen_events.previous_bound IS 'Take-backs: the latest time the previous holder may have stamped; restarts: the node''s earlier process.';
COMMENT ON COLUMN idgen_events.detail IS 'Refusals and losses: what the caller was told; capacity levels announced: the alert.';
COMMENT ON COLUMN idgen_events.event_id IS 'Order of recording.';
COMMENT ON COLUMN idgen_events.host IS 'The node''s address.';
COMMENT ON COLUMN idgen_events.port IS 'The node''s port.';
COMMENT ON COLUMN idgen_events.backend_slot IS 'The backend slot; NULL for service nodes.';
COMMENT ON COLUMN idgen_events.previous_host IS 'Take-backs: the previous holder''s address.';
COMMENT ON COLUMN idgen_events.previous_port IS 'Take-backs: its port.';
COMMENT ON COLUMN idgen_events.previous_backend_slot IS 'Take-backs: its backend slot, if a backend.';

CREATE VIEW idgen_restart_loops WITH (security_barrier) AS
SELECT e.service,
       e.holder,
       pg_catalog.count(*) AS claims,
       pg_catalog.min(e.at) AS first_at,
       pg_catalog.max(e.at) AS last_at,
       pg_catalog.string_agg(DISTINCT e.machine_id::text, ', '::text) AS machine_ids,
       e.host,
       e.port
  FROM idgen_events e
 CROSS JOIN idgen_policy() p
 WHERE e.event OPERATOR(pg_catalog.=) ANY (ARRAY['claim'::text, 'take_back'::text, 'restart'::text])
   AND e.backend_slot IS NULL
   AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) p.restart_loop_window)
 GROUP BY e.service, e.holder, e.host, e.port, p.restart_loop_claims
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) p.restart_loop_claims;
COMMENT ON VIEW idgen_restart_loops IS
    'Service nodes (service, host, port) of the services you may read that claimed more than idgen.restart_loop_claims times within idgen.restart_loop_window: claims, take-backs and restarts (a claim of the id the node still held) in the history. A node in a loop takes another machine id at each start it cannot reuse its own: the service fills.';
COMMENT ON COLUMN idgen_restart_loops.service IS 'The service.';
COMMENT ON COLUMN idgen_restart_loops.holder IS 'The node: host:port.';
COMMENT ON COLUMN idgen_restart_loops.claims IS 'Its claims (claim, take_back and restart events) within the window.';
COMMENT ON COLUMN idgen_restart_loops.first_at IS 'The first of them in the window.';
COMMENT ON COLUMN idgen_restart_loops.last_at IS 'The last of them.';
COMMENT ON COLUMN idgen_restart_loops.machine_ids IS 'The machine ids it got.';
COMMENT ON COLUMN idgen_restart_loops.host IS 'The node''s address.';
COMMENT ON COLUMN idgen_restart_loops.port IS 'The node''s port.';

CREATE VIEW idgen_flapping_ids WITH (security_barrier) AS
SELECT e.service,
       e.machine_id,
       pg_catalog.count(*) AS moves,
       pg_catalog.min(e.at) AS first_at,
       pg_catalog.max(e.at) AS last_at,
       pg_catalog.string_agg(DISTINCT e.holder, ', '::text) AS holders
  FROM idgen_events e
 CROSS JOIN idgen_policy() p
 WHERE e.event OPERATOR(pg_catalog.=) 'take_back'::text
   AND e.at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) p.restart_loop_window)
   AND (e.previous_host IS NULL
        OR e.previous_host OPERATOR(pg_catalog.<>) e.host
        OR e.previous_port OPERATOR(pg_catalog.<>) e.port
        OR COALESCE(e.previous_backend_slot, -1) OPERATOR(pg_catalog.<>) COALESCE(e.backend_slot, -1))
 GROUP BY e.service, e.machine_id, p.restart_loop_claims
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) p.restart_loop_claims;
COMMENT ON VIEW idgen_flapping_ids IS
    'Machine ids of the services you may read that moved from one holder to another (take-backs of released or idle ids) more than idgen.restart_loop_claims times within idgen.restart_loop_window.';
COMMENT ON COLUMN idgen_flapping_ids.service IS 'The service.';
COMMENT ON COLUMN idgen_flapping_ids.machine_id IS 'The machine id.';
COMMENT ON COLUMN idgen_flapping_ids.moves IS 'Take-backs by another holder within the window.';
COMMENT ON COLUMN idgen_flapping_ids.first_at IS 'The first of them in the window.';
COMMENT ON COLUMN idgen_flapping_ids.last_at IS 'The last of them.';
COMMENT ON COLUMN idgen_flapping_ids.holders IS 'The holders that took it.';

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

CREATE VIEW idgen_metrics WITH (security_barrier) AS
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
COMMENT ON VIEW idgen_metrics IS
    'One row per service you may read, numeric columns only, for postgres_exporter (docs/operations.md#metrics-for-postgres_exporter). The counters count every event since the extension was created, purged ones included.';
COMMENT ON COLUMN idgen_metrics.service IS 'The service (a label).';
COMMENT ON COLUMN idgen_metrics.held IS 'Machine ids held (not released).';
COMMENT ON COLUMN idgen_metrics.in_use IS 'Held or cooling down.';
COMMENT ON COLUMN idgen_metrics.capacity IS 'Machine ids a service can have.';
COMMENT ON COLUMN idgen_metrics.free IS 'Free for the next claim without a take-back.';
COMMENT ON COLUMN idgen_metrics.used_ratio IS 'in_use / capacity, 0 to 1.';
COMMENT ON COLUMN idgen_metrics.take_backs_released IS 'Counter: released ids taken over by another node.';
COMMENT ON COLUMN idgen_metrics.take_backs_7d IS 'Counter: take-backs in the 7-day tier.';
COMMENT ON COLUMN idgen_metrics.take_backs_1d IS 'Counter: take-backs in the 1-day tier.';
COMMENT ON COLUMN idgen_metrics.take_backs_1h IS 'Counter: take-backs in the 1-hour tier (each also alerted).';
COMMENT ON COLUMN idgen_metrics.ownership_losses IS 'Counter: holders that learnt their id had moved, as the history records them (a service node''s at most one per minute); every one is in ownership_losses_since_start.';
COMMENT ON COLUMN idgen_metrics.refused_claims IS 'Counter: claims refused (service full, watermark ahead, or no synchronous standby) as the history records them, at most one of each kind per minute; every one is in refused_claims_since_start.';
COMMENT ON COLUMN idgen_metrics.oldest_idle_seconds IS 'Idle time of the held id seen longest ago, in seconds.';
COMMENT ON COLUMN idgen_metrics.history_events_purged IS 'Counter: history events removed by idgen_purge_history().';
COMMENT ON COLUMN idgen_metrics.restarts IS 'Counter: service nodes that claimed the id they still held (restarts without a release).';
COMMENT ON COLUMN idgen_metrics.restart_loops IS 'Service nodes in a restart loop now (idgen_restart_loops).';
COMMENT ON COLUMN idgen_metrics.flapping_ids IS 'Machine ids moving between holders now (idgen_flapping_ids).';
COMMENT ON COLUMN idgen_metrics.max_clock_offset_seconds IS 'The largest clock offset (ahead or behind, in seconds) a holder of the service reported at its last heartbeat; 0 when none reported.';
COMMENT ON COLUMN idgen_metrics.clock_backward_waits IS 'The holders'' clock steps back waited out, as their last heartbeats reported (each since its claim: a restart starts it again).';
COMMENT ON COLUMN idgen_metrics.clock_backward_refusals IS 'The holders'' clock steps back refused, as their last heartbeats reported (each since its claim).';
COMMENT ON COLUMN idgen_metrics.sequence_exhaustions IS 'The holders'' waits for the next millisecond after using up one''s sequence, as their last heartbeats reported (each since its claim).';
COMMENT ON COLUMN idgen_metrics.capacity_level IS '0 below idgen.capacity_warning, 1 above it (warning), 2 above idgen.capacity_critical (critical).';
COMMENT ON COLUMN idgen_metrics.refused_claims_since_start IS 'Counter: every claim refused since the server started, recorded in the history or not (NULL: the server could not keep the count); starts at 0 again at a restart or a failover, as Prometheus counters do.';
COMMENT ON COLUMN idgen_metrics.ownership_losses_since_start IS 'Counter: every holder told its id had moved since the server started, recorded in the history or not (NULL: the server could not keep the count); starts at 0 again at a restart or a failover.';

CREATE VIEW idgen_tombstones WITH (security_barrier) AS
SELECT t.service,
       t.machine_id,
       t.bound,
       t.bound OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS ahead,
       t.version,
       t.removed_at
  FROM idgen_private.idgen_tombstones t
 CROSS JOIN idgen_visibility v
 WHERE v.reads_all OR t.service::text OPERATOR(pg_catalog.=) ANY (v.services);
COMMENT ON VIEW idgen_tombstones IS
    'Machine ids of the services you may read whose registry rows were deleted or truncated by hand: no claim hands one out before its bound, and a row restored for it takes the bound and a newer version.';
COMMENT ON COLUMN idgen_tombstones.service IS 'The service.';
COMMENT ON COLUMN idgen_tombstones.machine_id IS 'The machine id whose row was removed.';
COMMENT ON COLUMN idgen_tombstones.bound IS 'The latest time a holder of the removed rows may stamp: claims of the id stamp after it.';
COMMENT ON COLUMN idgen_tombstones.ahead IS 'The bound is still ahead of the clock: claims skip the id until then.';
COMMENT ON COLUMN idgen_tombstones.version IS 'The highest version the removed rows had; a row restored for the id gets a newer one.';
COMMENT ON COLUMN idgen_tombstones.removed_at IS 'When the last of them was removed.';

CREATE VIEW idgen_registry_status AS
SELECT r.created_at,
       (SELECT pg_catalog.count(*) FROM idgen_tombstones t) AS tombstones,
       (SELECT pg_catalog.max(t.bound) FROM idgen_tombstones t WHERE t.ahead) AS held_back_until
  FROM idgen_private.idgen_registry r;
COMMENT ON VIEW idgen_registry_status IS 'When this registry was created, and what it keeps of rows removed by hand (idgen_tombstones) in the services you may read.';
COMMENT ON COLUMN idgen_registry_status.created_at IS 'When the registry was created (CREATE EXTENSION).';
COMMENT ON COLUMN idgen_registry_status.tombstones IS 'Machine ids whose rows were deleted or truncated by hand: claims stamp after their bound.';
COMMENT ON COLUMN idgen_registry_status.held_back_until IS 'The latest tombstone bound still ahead of the clock: until then some machine ids are skipped by claims. NULL: none.';

-- What idgen_explain reads, as its caller: the views above, reached through names in a
-- schema no lower role controls (bound when created, like every view).
CREATE VIEW idgen_private.visible_events AS SELECT * FROM idgen_events;
CREATE VIEW idgen_private.visible_nodes AS SELECT * FROM idgen_nodes;
CREATE VIEW idgen_private.visible_metrics AS SELECT * FROM idgen_metrics;
CREATE VIEW idgen_private.visible_layouts AS SELECT * FROM idgen_layouts;
COMMENT ON VIEW idgen_private.visible_events IS 'idgen_events, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_nodes IS 'idgen_nodes, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_metrics IS 'idgen_metrics, as idgen_explain reads it (bound when created).';
COMMENT ON VIEW idgen_private.visible_layouts IS 'idgen_layouts, as idgen_explain reads it (bound when created).';

-- What idgen_health() reports of the registry writers (src/diagnostics/writers.rs): preloaded
-- writers that do not run, a worker budget parallel query can use up (not preloaded), and writes
-- that found no background worker slot in the last hour. Reads shared memory and settings only.
CREATE FUNCTION idgen_private.writer_findings()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE c STABLE PARALLEL RESTRICTED ROWS 1
    AS 'MODULE_PATHNAME', 'writer_findings_wrapper';
COMMENT ON FUNCTION idgen_private.writer_findings() IS
    'The findings of idgen_health() about the registry writers: registry_writers_missing, worker_budget, worker_slots_exhausted.';
GRANT EXECUTE ON FUNCTION idgen_private.writer_findings() TO PUBLIC;

-- What idgen_health() reports of the layouts the caller may read (src/registry/layouts.rs): pairs of
-- services whose pools share no machine id at other bits, which keeps nothing apart.
CREATE FUNCTION idgen_private.layout_findings()
    RETURNS TABLE (severity text, finding text, subject text, detail text, action text)
    LANGUAGE c STABLE PARALLEL RESTRICTED ROWS 1
    AS 'MODULE_PATHNAME', 'layout_findings_wrapper';
COMMENT ON FUNCTION idgen_private.layout_findings() IS
    'The findings of idgen_health() about the services'' layouts the caller may read: pools_apart_at_other_bits.';
GRANT EXECUTE ON FUNCTION idgen_private.layout_findings() TO PUBLIC;

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
CREATE FUNCTION idgen_health()
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

GRANT SELECT ON idgen_visibility, idgen_layouts, idgen_nodes, idgen_capacity, idgen_events, idgen_metrics, idgen_tombstones,
    idgen_restart_loops, idgen_flapping_ids,
    idgen_registry_status TO PUBLIC;
GRANT SELECT ON idgen_private.visible_events, idgen_private.visible_nodes, idgen_private.visible_metrics,
    idgen_private.visible_layouts TO PUBLIC;

-- The planner's estimates: idgen_policy() returns one row (the default of 1,000 made every
-- view that joins it cost a thousand times its size, and JIT-compile), idgen_explain() one
-- per service. tests/cluster/tests/diagnostics.rs keeps every plan under jit_above_cost.
ALTER FUNCTION idgen_policy() ROWS 1;
ALTER FUNCTION idgen_explain(bigint, text) ROWS 1;

COMMENT ON FUNCTION idgen_policy() IS
    'The effective idgen settings as the claim uses them, one row: the lease, heartbeat interval, cooldown, take-back ages, the capacity levels (idgen.capacity_warning, idgen.capacity_critical), history retention, the machine ids this server hands out (idgen.machine_id_range: count, first, last; each service''s pool within it), whether claims require a synchronous standby, problem (why the settings as set are inconsistent, and what claims run by meanwhile: while they contradict each other, the last consistent ones, which this row shows; or NULL), what idgen_health() reports by: idgen.clock_skew_alert, idgen.restart_loop_window, idgen.restart_loop_claims, deprecated_capacity_alert (idgen.capacity_alert when set: it has no effect since 0.6.0), and inverted_capacity_warning (idgen.capacity_warning as set, when above idgen.capacity_critical: capacity_warning is then the critical level).';
COMMENT ON FUNCTION idgen_node_state(timestamptz, timestamptz, timestamptz, timestamptz) IS
    'The state of a registry row from its last_seen, released_at, lease_until and takeover_at, by the claim''s own rules: live, past_lease, idle_1h, idle_1d, idle_7d, cooling_down or released.';
COMMENT ON FUNCTION idgen_node_name(inet, integer, integer) IS 'How idgen names a node: host:port, or backend slot N of host:port.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer) IS
    'For a backend row of this server (host idgen.node_host, this port): the pid of the process in its slot now, whoever it is, or NULL.';
COMMENT ON FUNCTION idgen_slot_pid(inet, integer, integer, timestamptz) IS
    'For a backend row of this server (host idgen.node_host, this port) last written at last_seen: the pid of the process in its slot if it holds the row (it took up the lease its slot''s last backend left, or it started before last_seen), or NULL.';
COMMENT ON FUNCTION idgen_backend_row_here(inet, integer, integer) IS
    'Whether a registry row is a backend row of this server: a backend slot, host idgen.node_host and this server''s port, on a primary (a standby''s rows are its primary''s). idgen_nodes shows such a row inside its lease with no process in its slot as parked.';
COMMENT ON FUNCTION idgen_explain(bigint, text) IS
    'Who made an ID: decodes it and names the holder of its machine id at its timestamp, with the version then in force, from the history and the registry; one row per service you may read (or the one given). Says when the history does not reach back that far, and warns when two holders overlap.';
