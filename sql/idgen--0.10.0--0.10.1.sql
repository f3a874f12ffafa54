-- idgen 0.10.0 -> 0.10.1: every refusal counted.
-- - idgen_metrics.refused_claims_since_start and ownership_losses_since_start: every refused claim
--   and every ownership loss since the server started, recorded in the history or not (it records
--   one of each kind per service and minute, which refused_claims and ownership_losses count), from
--   the server's shared memory (idgen_private.refusals_since_start()).
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
