-- Every statement idgen runs at run time, as it runs: rendered from src/statements.rs by
-- scripts/render_statements.sh and compared by tests/cluster/tests/runtime_sql.rs. Do not edit.

-- TAKE_RELEASED
-- Claim step 3: takes over one released row of the service past its cooldown, longest released
-- first, locked without waiting, for the claimant with a new grant. Returns the row won (columns 1-6)
-- and its previous holder's facts (7-14). It and its twin [`TAKE_IDLE`] differ only in the rows
-- their tier takes and their order: the rest is `take_over_victims!` and `take_over_victim!`.
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 takeback_age interval
--   $7 window interval
--   $8 tolerance interval
--   $9 first_machine_id integer
--   $10 last_machine_id integer
--   $11 cooldown interval
--   returns machine_id integer
--   returns version bigint
--   returns lease_until timestamptz
--   returns claimed_at timestamptz
--   returns bound timestamptz (may be NULL)
--   returns issued_until timestamptz
--   returns previous_machine_id integer
--   returns previous_host text
--   returns previous_port integer
--   returns previous_version bigint
--   returns previous_last_seen text
--   returns previous_idle_secs bigint
--   returns previous_released_at text (may be NULL)
--   returns previous_backend_slot integer (may be NULL)
WITH victim AS (
    SELECT v.*, idgen_private.holder_bound(v, $5, $6) AS bound
    FROM idgen_private.nodes v
    WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND v.machine_id OPERATOR(pg_catalog.>=) $9
      AND v.machine_id OPERATOR(pg_catalog.<=) $10
      AND idgen_private.holder_bound(v, $5, $6) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $8)
      AND v.released_at OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $11)
    ORDER BY v.released_at, v.machine_id
    LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET host = $2,
    port = $3,
    backend_slot = $4,
    version = n.version OPERATOR(pg_catalog.+) 1,
    last_seen = t.now,
    lease_until = t.now OPERATOR(pg_catalog.+) $5,
    takeover_at = t.now OPERATOR(pg_catalog.+) $6,
    released_at = NULL,
    issued_until = GREATEST(v.bound, t.now OPERATOR(pg_catalog.+) $7)
FROM victim v, (SELECT pg_catalog.clock_timestamp() AS now) t
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) v.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) v.machine_id
RETURNING n.machine_id::pg_catalog.int4,
    n.version,
    n.lease_until,
    n.last_seen,
    v.bound,
    n.issued_until,
    v.machine_id::pg_catalog.int4,
    pg_catalog.host(v.host),
    v.port,
    v.version,
    pg_catalog.to_char(v.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    GREATEST(0, pg_catalog.floor(EXTRACT(epoch FROM (pg_catalog.now() OPERATOR(pg_catalog.-) v.last_seen))))::bigint,
    pg_catalog.to_char(v.released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    v.backend_slot;

-- TAKE_IDLE
-- Claim steps 4 to 6: takes over one row idle longer than `min_idle`, past the take-back time
-- its holder was granted and not cooling down, least recently seen first. Returns as [`TAKE_RELEASED`].
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 takeback_age interval
--   $7 window interval
--   $8 tolerance interval
--   $9 first_machine_id integer
--   $10 last_machine_id integer
--   $11 cooldown interval
--   $12 min_idle interval
--   returns machine_id integer
--   returns version bigint
--   returns lease_until timestamptz
--   returns claimed_at timestamptz
--   returns bound timestamptz (may be NULL)
--   returns issued_until timestamptz
--   returns previous_machine_id integer
--   returns previous_host text
--   returns previous_port integer
--   returns previous_version bigint
--   returns previous_last_seen text
--   returns previous_idle_secs bigint
--   returns previous_released_at text (may be NULL)
--   returns previous_backend_slot integer (may be NULL)
WITH victim AS (
    SELECT v.*, idgen_private.holder_bound(v, $5, $6) AS bound
    FROM idgen_private.nodes v
    WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND v.machine_id OPERATOR(pg_catalog.>=) $9
      AND v.machine_id OPERATOR(pg_catalog.<=) $10
      AND idgen_private.holder_bound(v, $5, $6) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $8)
      AND v.last_seen OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $12)
      AND (v.takeover_at IS NULL OR v.takeover_at OPERATOR(pg_catalog.<) pg_catalog.now())
      AND (v.released_at IS NULL OR v.released_at OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $11))
    ORDER BY v.last_seen, v.machine_id
    LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET host = $2,
    port = $3,
    backend_slot = $4,
    version = n.version OPERATOR(pg_catalog.+) 1,
    last_seen = t.now,
    lease_until = t.now OPERATOR(pg_catalog.+) $5,
    takeover_at = t.now OPERATOR(pg_catalog.+) $6,
    released_at = NULL,
    issued_until = GREATEST(v.bound, t.now OPERATOR(pg_catalog.+) $7)
FROM victim v, (SELECT pg_catalog.clock_timestamp() AS now) t
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) v.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) v.machine_id
RETURNING n.machine_id::pg_catalog.int4,
    n.version,
    n.lease_until,
    n.last_seen,
    v.bound,
    n.issued_until,
    v.machine_id::pg_catalog.int4,
    pg_catalog.host(v.host),
    v.port,
    v.version,
    pg_catalog.to_char(v.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    GREATEST(0, pg_catalog.floor(EXTRACT(epoch FROM (pg_catalog.now() OPERATOR(pg_catalog.-) v.last_seen))))::bigint,
    pg_catalog.to_char(v.released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    v.backend_slot;

-- READ_REGISTRY
-- The registry's epoch.
--   returns epoch bigint
SELECT r.epoch
FROM idgen_private.idgen_registry r;

-- READ_VERSION_BASE
-- The version a row of a machine id never registered in this registry starts after (objects of
-- 0.7.0 on; before, 0).
--   returns version_base bigint
SELECT r.version_base
FROM idgen_private.idgen_registry r;

-- GUARDS_EXIST
-- Whether the service has its guard rows.
--   $1 service text
--   returns exist boolean
SELECT EXISTS (
    SELECT
    FROM idgen_private.idgen_claim_guards g
    WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1);

-- CREATE_GUARDS
-- Creates the guard rows of the service (in a transaction of its own).
--   $1 service text
--   $2 first_bucket integer
--   $3 last_bucket integer
INSERT INTO idgen_private.idgen_claim_guards (service, bucket)
SELECT $1, b
FROM pg_catalog.generate_series($2::integer, $3::integer) AS b
ON CONFLICT DO NOTHING;

-- SERVICE_LAYOUT
-- The layout and pool of a service (objects of 0.7.0 on): epoch as Unix ms, time unit, widths, field
-- order, pool, the never-registered hint, and whether claims may start (the layout is fixed and the
-- guard rows exist). No row: the service was never claimed nor defined.
--   $1 service text
--   returns epoch_unix_ms bigint
--   returns time_unit_ms integer (may be NULL)
--   returns time_bits integer (may be NULL)
--   returns machine_bits integer (may be NULL)
--   returns sequence_bits integer (may be NULL)
--   returns field_order text
--   returns pool_first integer (may be NULL)
--   returns pool_last integer (may be NULL)
--   returns unregistered_from integer (may be NULL)
--   returns ready boolean (may be NULL)
SELECT pg_catalog.floor(EXTRACT(epoch FROM l.epoch) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
    l.time_unit_ms,
    l.time_bits,
    l.machine_bits,
    l.sequence_bits,
    l.field_order,
    l.pool_first,
    l.pool_last,
    l.unregistered_from,
    l.fixed_at IS NOT NULL AND EXISTS (
        SELECT
        FROM idgen_private.idgen_claim_guards g
        WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
FROM idgen_private.idgen_layouts l
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1;

-- OTHER_LAYOUTS
-- Every other service's layout and pool (`idgen_define_layout` compares them with the one defined).
--   $1 service text
--   returns service text (may be NULL)
--   returns epoch_unix_ms bigint (may be NULL)
--   returns time_unit_ms integer (may be NULL)
--   returns time_bits integer (may be NULL)
--   returns machine_bits integer (may be NULL)
--   returns sequence_bits integer (may be NULL)
--   returns field_order text (may be NULL)
--   returns pool_first integer (may be NULL)
--   returns pool_last integer (may be NULL)
SELECT l.service::pg_catalog.text,
    pg_catalog.floor(EXTRACT(epoch FROM l.epoch) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
    l.time_unit_ms,
    l.time_bits,
    l.machine_bits,
    l.sequence_bits,
    l.field_order,
    l.pool_first,
    l.pool_last
FROM idgen_private.idgen_layouts l
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.<>) $1
ORDER BY l.service;

-- VISIBLE_LAYOUTS
-- The layouts and pools the caller may read (`idgen_health()`, as the caller), as [`OTHER_LAYOUTS`].
--   returns service text (may be NULL)
--   returns epoch_unix_ms bigint (may be NULL)
--   returns time_unit_ms integer (may be NULL)
--   returns time_bits integer (may be NULL)
--   returns machine_bits integer (may be NULL)
--   returns sequence_bits integer (may be NULL)
--   returns field_order text (may be NULL)
--   returns pool_first integer (may be NULL)
--   returns pool_last integer (may be NULL)
SELECT l.service::pg_catalog.text,
    pg_catalog.floor(EXTRACT(epoch FROM l.epoch) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
    l.time_unit_ms,
    l.time_bits,
    l.machine_bits,
    l.sequence_bits,
    l.field_order,
    l.pool_first,
    l.pool_last
FROM idgen_private.visible_layouts l
ORDER BY l.service;

-- RECORD_LAYOUT
-- Records a layout for a service that has none: the default, at its first claim (in a transaction of
-- its own).
--   $1 service text
--   $2 preset text
--   $3 epoch timestamptz
--   $4 time_unit_ms integer
--   $5 time_bits integer
--   $6 machine_bits integer
--   $7 sequence_bits integer
--   $8 field_order text
--   $9 pool_first integer
--   $10 pool_last integer
--   $11 defined_by text
INSERT INTO idgen_private.idgen_layouts
    (service, preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order, pool_first,
     pool_last, defined_by, unregistered_from)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $9)
ON CONFLICT DO NOTHING;

-- FIX_LAYOUT
-- Fixes a service's layout at its first claim (in a transaction of its own, before the claim reads
-- it): idgen_define_layout changes it no more.
--   $1 service text
UPDATE idgen_private.idgen_layouts l
SET fixed_at = pg_catalog.clock_timestamp()
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND l.fixed_at IS NULL;

-- LAYOUT_EXISTS
-- Whether a layout is recorded for `service` (defined, or fixed by a claim): with
-- `CALLER_STANDING`, how a service exists. Run with the latest snapshot.
--   $1 service text
--   returns exists boolean
SELECT true
FROM idgen_private.idgen_layouts l
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1;

-- SERVICE_EVIDENCE
-- What makes `service` exist, with the transactions that wrote it (their xmin), to tell what
-- this backend's transaction wrote and has not committed: its layout row, its grants, and
-- whether it has registry rows.
--   $1 service text
--   returns layout_xmin bigint (may be NULL)
--   returns grant_xmins bigint_array (may be NULL)
--   returns has_rows boolean (may be NULL)
SELECT (SELECT l.xmin::pg_catalog.text::pg_catalog.int8
        FROM idgen_private.idgen_layouts l
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1),
    (SELECT pg_catalog.array_agg(m.xmin::pg_catalog.text::pg_catalog.int8)
     FROM idgen_private.idgen_service_members m
     WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1),
    EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1);

-- SERVICE_HAS_IDS
-- Whether the registry knows `service` already: rows, tombstones or history. A service with none
-- of its layout recorded but these (restored from a dump of an earlier version) has IDs cut by
-- the default layout.
--   $1 service text
--   returns has_ids boolean (may be NULL)
SELECT EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
    OR EXISTS (SELECT FROM idgen_private.idgen_tombstones t WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
    OR EXISTS (SELECT FROM idgen_private.idgen_history h WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1);

-- DEFINE_LAYOUT
-- Defines a service's layout, or defines it again while no claim has fixed it. Returns nothing when
-- it is fixed.
--   $1 service text
--   $2 preset text
--   $3 epoch timestamptz
--   $4 time_unit_ms integer
--   $5 time_bits integer
--   $6 machine_bits integer
--   $7 sequence_bits integer
--   $8 field_order text
--   $9 pool_first integer
--   $10 pool_last integer
--   $11 defined_by text
--   returns wrote boolean
INSERT INTO idgen_private.idgen_layouts AS l
    (service, preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order, pool_first,
     pool_last, defined_by, unregistered_from)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $9)
ON CONFLICT (service) DO
UPDATE
SET preset = excluded.preset,
    epoch = excluded.epoch,
    time_unit_ms = excluded.time_unit_ms,
    time_bits = excluded.time_bits,
    machine_bits = excluded.machine_bits,
    sequence_bits = excluded.sequence_bits,
    field_order = excluded.field_order,
    pool_first = excluded.pool_first,
    pool_last = excluded.pool_last,
    defined_at = excluded.defined_at,
    defined_by = excluded.defined_by,
    unregistered_from = excluded.unregistered_from
WHERE l.fixed_at IS NULL
RETURNING true;

-- LAYOUT_OF
-- A service's layout row as people read it: preset, epoch, widths, order, pool, who defined it when,
-- and when its first claim fixed it.
--   $1 service text
--   returns preset text
--   returns epoch timestamptz
--   returns time_unit_ms integer
--   returns time_bits integer
--   returns machine_bits integer
--   returns sequence_bits integer
--   returns field_order text
--   returns pool_first integer
--   returns pool_last integer
--   returns defined_at timestamptz
--   returns defined_by text
--   returns fixed_at timestamptz (may be NULL)
SELECT l.preset,
    l.epoch,
    l.time_unit_ms,
    l.time_bits,
    l.machine_bits,
    l.sequence_bits,
    l.field_order,
    l.pool_first,
    l.pool_last,
    l.defined_at,
    l.defined_by,
    l.fixed_at
FROM idgen_private.idgen_layouts l
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1;

-- ADVANCE_UNREGISTERED_FROM
-- Moves the service's never-registered hint up to `from`: only if every machine id from the hint to
-- `from` has a row now (a row deleted meanwhile keeps it down), and unless another transaction holds
-- the layout's row (it is a hint: the next claim moves it).
--   $1 service text
--   $2 from integer
UPDATE idgen_private.idgen_layouts l
SET unregistered_from = $2
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND l.unregistered_from OPERATOR(pg_catalog.<) $2
  AND (
    SELECT pg_catalog.count(*)
    FROM idgen_private.nodes n
    WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND n.machine_id OPERATOR(pg_catalog.>=) l.unregistered_from
      AND n.machine_id OPERATOR(pg_catalog.<) $2) OPERATOR(pg_catalog.=) ($2 OPERATOR(pg_catalog.-) l.unregistered_from)::pg_catalog.int8
  AND EXISTS (
    SELECT
    FROM idgen_private.idgen_layouts x
    WHERE x.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED);

-- LOWER_UNREGISTERED_FROM
-- A row removed by hand: the never-registered hint of its service goes back to its machine id, which
-- a claim may hand out again once its tombstone has passed.
--   $1 service text
--   $2 machine_id integer
UPDATE idgen_private.idgen_layouts l
SET unregistered_from = $2
WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND l.unregistered_from OPERATOR(pg_catalog.>) $2;

-- RESET_UNREGISTERED_FROM
-- Every row truncated: every service's never-registered hint goes back to the start of its pool.
UPDATE idgen_private.idgen_layouts l
SET unregistered_from = l.pool_first
WHERE l.unregistered_from OPERATOR(pg_catalog.<>) l.pool_first;

-- TAKE_GUARD
-- Takes a guard row unless another transaction holds it (see `idgen_core::guard`).
--   $1 service text
--   $2 bucket integer
--   returns taken boolean (may be NULL)
SELECT EXISTS (
    SELECT
    FROM idgen_private.idgen_claim_guards g
    WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND g.bucket OPERATOR(pg_catalog.=) $2 FOR UPDATE SKIP LOCKED);

-- GUARD_EXISTS
-- Whether a guard row exists (a guard not taken may be held by another transaction, or missing).
--   $1 service text
--   $2 bucket integer
--   returns exists boolean (may be NULL)
SELECT EXISTS (
    SELECT
    FROM idgen_private.idgen_claim_guards g
    WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND g.bucket OPERATOR(pg_catalog.=) $2);

-- RELEASE_OWN_ROW_AHEAD
-- Releases the claimant's held row if its bound is further ahead of the clock than the claimant
-- may wait, keeping the bound as the row's watermark.
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 tolerance interval
--   $7 takeback_age interval
--   returns machine_id integer
--   returns bound timestamptz
--   returns reported timestamptz
--   returns last_seen timestamptz
WITH own AS (
    SELECT o.service,
        o.machine_id,
        idgen_private.holder_bound(o, $5, $7) AS bound,
        o.issued_until AS reported,
        o.last_seen
    FROM idgen_private.nodes o
    WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND o.host OPERATOR(pg_catalog.=) $2
      AND o.port OPERATOR(pg_catalog.=) $3
      AND COALESCE(o.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
      AND o.released_at IS NULL
      AND idgen_private.holder_bound(o, $5, $7) OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $6) FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET version = n.version OPERATOR(pg_catalog.+) 1,
    released_at = pg_catalog.clock_timestamp(),
    issued_until = GREATEST(n.issued_until, own.bound)
FROM own
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) own.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) own.machine_id
RETURNING n.machine_id::pg_catalog.int4, own.bound, own.reported, own.last_seen;

-- RELEASE_OWN_ROW_OUTSIDE_RANGE
-- Releases the claimant's held row outside this server's `idgen.machine_id_range`, keeping the bound.
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 takeback_age interval
--   $7 first_machine_id integer
--   $8 last_machine_id integer
--   returns machine_id integer
--   returns issued_until timestamptz
WITH own AS (
    SELECT o.service, o.machine_id, idgen_private.holder_bound(o, $5, $6) AS bound
    FROM idgen_private.nodes o
    WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND o.host OPERATOR(pg_catalog.=) $2
      AND o.port OPERATOR(pg_catalog.=) $3
      AND COALESCE(o.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
      AND o.released_at IS NULL
      AND NOT (o.machine_id OPERATOR(pg_catalog.>=) $7
          AND o.machine_id OPERATOR(pg_catalog.<=) $8) FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET version = n.version OPERATOR(pg_catalog.+) 1,
    released_at = pg_catalog.clock_timestamp(),
    issued_until = GREATEST(n.issued_until, own.bound)
FROM own
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) own.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) own.machine_id
RETURNING n.machine_id::pg_catalog.int4, n.issued_until;

-- REUSE_OWN_ROW
-- Claim step 1: bumps the claimant's own row (held, or else released by it) in the range, unless
-- locked or its bound is too far ahead. The bound of a held service row is its last report plus the
-- lease it was granted: another live process with the same identity may still be stamping, so the
-- identity moves (see [`RELEASE_OWN_ROW_AHEAD`]) instead of sharing the id.
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 tolerance interval
--   $7 takeback_age interval
--   $8 window interval
--   $9 first_machine_id integer
--   $10 last_machine_id integer
--   returns machine_id integer
--   returns version bigint
--   returns lease_until timestamptz
--   returns claimed_at timestamptz
--   returns bound timestamptz (may be NULL)
--   returns issued_until timestamptz
--   returns was_released boolean
WITH own AS (
    SELECT o.service,
        o.machine_id,
        idgen_private.holder_bound(o, $5, $7) AS bound,
        o.released_at IS NOT NULL AS was_released
    FROM idgen_private.nodes o
    WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND o.host OPERATOR(pg_catalog.=) $2
      AND o.port OPERATOR(pg_catalog.=) $3
      AND COALESCE(o.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
      AND o.machine_id OPERATOR(pg_catalog.>=) $9
      AND o.machine_id OPERATOR(pg_catalog.<=) $10
      AND idgen_private.holder_bound(o, $5, $7) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $6)
      AND (o.released_at IS NULL OR NOT EXISTS (
            SELECT
            FROM idgen_private.nodes h
            WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND h.host OPERATOR(pg_catalog.=) $2
              AND h.port OPERATOR(pg_catalog.=) $3
              AND COALESCE(h.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
              AND h.released_at IS NULL))
    ORDER BY o.released_at IS NOT NULL, o.machine_id
    LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET version = n.version OPERATOR(pg_catalog.+) 1,
    last_seen = t.now,
    lease_until = t.now OPERATOR(pg_catalog.+) $5,
    takeover_at = t.now OPERATOR(pg_catalog.+) $7,
    released_at = NULL,
    issued_until = GREATEST(n.issued_until, own.bound, t.now OPERATOR(pg_catalog.+) $8)
FROM own, (SELECT pg_catalog.clock_timestamp() AS now) t
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) own.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) own.machine_id
RETURNING n.machine_id::pg_catalog.int4, n.version, n.lease_until, n.last_seen, own.bound, n.issued_until, own.was_released;

-- REUSE_OWN_HELD_ROW
-- A new connection's claim: [`REUSE_OWN_ROW`] without its choice of a released row, so that a new
-- backend plans the least (the held row is unique: `system_nodes_node_identity`).
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 tolerance interval
--   $7 takeback_age interval
--   $8 window interval
--   $9 first_machine_id integer
--   $10 last_machine_id integer
--   returns machine_id integer
--   returns version bigint
--   returns lease_until timestamptz
--   returns claimed_at timestamptz
--   returns bound timestamptz (may be NULL)
--   returns issued_until timestamptz
WITH own AS (
    SELECT o.service, o.machine_id, idgen_private.holder_bound(o, $5, $7) AS bound
    FROM idgen_private.nodes o
    WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND o.host OPERATOR(pg_catalog.=) $2
      AND o.port OPERATOR(pg_catalog.=) $3
      AND COALESCE(o.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
      AND o.released_at IS NULL
      AND o.machine_id OPERATOR(pg_catalog.>=) $9
      AND o.machine_id OPERATOR(pg_catalog.<=) $10
      AND idgen_private.holder_bound(o, $5, $7) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $6) FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET version = n.version OPERATOR(pg_catalog.+) 1,
    last_seen = t.now,
    lease_until = t.now OPERATOR(pg_catalog.+) $5,
    takeover_at = t.now OPERATOR(pg_catalog.+) $7,
    issued_until = GREATEST(n.issued_until, own.bound, t.now OPERATOR(pg_catalog.+) $8)
FROM own, (SELECT pg_catalog.clock_timestamp() AS now) t
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) own.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) own.machine_id
RETURNING n.machine_id::pg_catalog.int4, n.version, n.lease_until, n.last_seen, own.bound, n.issued_until;

-- OWN_HELD_ROW
-- The claimant's held row, locked or not (to tell busy from absent).
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   returns machine_id integer (may be NULL)
SELECT n.machine_id::pg_catalog.int4
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.host OPERATOR(pg_catalog.=) $2
  AND n.port OPERATOR(pg_catalog.=) $3
  AND COALESCE(n.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
  AND n.released_at IS NULL;

-- UNREGISTERED_MACHINE_IDS
-- Claim step 2: the machine ids of `first..=last` (a batch of the range) with no row, lowest first, and
-- whether each has a tombstone (a row removed by hand) further ahead than the claimant may wait.
--   $1 service text
--   $2 first integer
--   $3 last integer
--   $4 tolerance interval
--   returns machine_id integer
--   returns tombstone_ahead boolean
SELECT m, EXISTS (
    SELECT
    FROM idgen_private.idgen_tombstones t
    WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND t.machine_id OPERATOR(pg_catalog.=) m
      AND t.bound OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4))
FROM pg_catalog.generate_series($2::integer, $3::integer) AS m
WHERE NOT EXISTS (
    SELECT
    FROM idgen_private.nodes n
    WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND n.machine_id OPERATOR(pg_catalog.=) m)
ORDER BY m;

-- SOONEST_TOMBSTONE_AHEAD
-- The tombstone of the range whose machine id has no row and which is further ahead than the
-- claimant may wait, soonest first: what a claim that found nothing else waits for.
--   $1 service text
--   $2 first_machine_id integer
--   $3 last_machine_id integer
--   $4 tolerance interval
--   returns machine_id integer
--   returns bound timestamptz
SELECT t.machine_id::pg_catalog.int4, t.bound
FROM idgen_private.idgen_tombstones t
WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND t.machine_id OPERATOR(pg_catalog.>=) $2
  AND t.machine_id OPERATOR(pg_catalog.<=) $3
  AND t.bound OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4)
  AND NOT EXISTS (
    SELECT
    FROM idgen_private.nodes n
    WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND n.machine_id OPERATOR(pg_catalog.=) t.machine_id)
ORDER BY t.bound, t.machine_id
LIMIT 1;

-- INSERT_UNREGISTERED
-- Claim step 2: inserts a machine id for the claimant if its guard is free, at the version after
-- `version_base` ([`READ_VERSION_BASE`]). A machine id whose row was removed by hand continues from
-- its tombstone: its bound and a newer version.
--   $1 service text
--   $2 host inet
--   $3 port integer
--   $4 backend_slot integer (may be NULL)
--   $5 lease interval
--   $6 tolerance interval
--   $7 takeback_age interval
--   $8 window interval
--   $9 machine_id integer
--   $10 guard_bucket integer
--   $11 version_base bigint
--   returns machine_id integer
--   returns version bigint
--   returns lease_until timestamptz
--   returns claimed_at timestamptz
--   returns bound timestamptz (may be NULL)
--   returns issued_until timestamptz
WITH tomb AS (
    SELECT t.version, t.bound
    FROM idgen_private.idgen_tombstones t
    WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND t.machine_id OPERATOR(pg_catalog.=) $9),
inserted AS (
    INSERT INTO idgen_private.nodes
        (service, machine_id, host, port, backend_slot, version, last_seen, lease_until, takeover_at, issued_until)
    SELECT $1, $9, $2, $3, $4,
        COALESCE((SELECT tomb.version FROM tomb), $11) OPERATOR(pg_catalog.+) 1,
        t.now,
        t.now OPERATOR(pg_catalog.+) $5,
        t.now OPERATOR(pg_catalog.+) $7,
        GREATEST((SELECT tomb.bound FROM tomb), t.now OPERATOR(pg_catalog.+) $8)
    FROM (SELECT pg_catalog.clock_timestamp() AS now) t
    WHERE EXISTS (
        SELECT
        FROM idgen_private.idgen_claim_guards g
        WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND g.bucket OPERATOR(pg_catalog.=) $10 FOR UPDATE SKIP LOCKED)
      AND NOT EXISTS (
        SELECT
        FROM tomb
        WHERE tomb.bound OPERATOR(pg_catalog.>) (t.now OPERATOR(pg_catalog.+) $6))
    ON CONFLICT DO NOTHING
    RETURNING *)
SELECT inserted.machine_id::pg_catalog.int4, inserted.version, inserted.lease_until, inserted.last_seen,
    (SELECT tomb.bound FROM tomb), inserted.issued_until
FROM inserted;

-- CURRENT_ROW
-- The row of a machine id, as facts for messages.
--   $1 service text
--   $2 machine_id integer
--   returns machine_id integer
--   returns host text
--   returns port integer
--   returns version bigint
--   returns last_seen text
--   returns idle_secs bigint
--   returns released_at text (may be NULL)
--   returns backend_slot integer (may be NULL)
SELECT n.machine_id::pg_catalog.int4,
    pg_catalog.host(n.host),
    n.port,
    n.version,
    pg_catalog.to_char(n.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    GREATEST(0, pg_catalog.floor(EXTRACT(epoch FROM (pg_catalog.now() OPERATOR(pg_catalog.-) n.last_seen))))::bigint,
    pg_catalog.to_char(n.released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    n.backend_slot
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2;

-- ROW_BOUND
-- What the holders of a machine id may have stamped (its row's bound), in Unix ms, and the server
-- clock: why a claim of it by number must wait.
--   $1 service text
--   $2 machine_id integer
--   $3 lease interval
--   $4 takeback_age interval
--   returns bound_unix_ms bigint
--   returns now_unix_ms bigint
SELECT pg_catalog.floor(EXTRACT(epoch FROM idgen_private.holder_bound(n, $3, $4)) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
    pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000::numeric)::bigint
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2
  AND pg_catalog.isfinite(idgen_private.holder_bound(n, $3, $4));

-- COUNT_HELD
-- How many machine ids of the range are registered.
--   $1 service text
--   $2 first_machine_id integer
--   $3 last_machine_id integer
--   returns held bigint (may be NULL)
SELECT pg_catalog.count(*)
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.>=) $2
  AND n.machine_id OPERATOR(pg_catalog.<=) $3;

-- LEAST_RECENTLY_SEEN
-- The least recently seen row of the range, as facts for messages.
--   $1 service text
--   $2 first_machine_id integer
--   $3 last_machine_id integer
--   returns machine_id integer
--   returns host text
--   returns port integer
--   returns version bigint
--   returns last_seen text
--   returns idle_secs bigint
--   returns released_at text (may be NULL)
--   returns backend_slot integer (may be NULL)
SELECT n.machine_id::pg_catalog.int4,
    pg_catalog.host(n.host),
    n.port,
    n.version,
    pg_catalog.to_char(n.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    GREATEST(0, pg_catalog.floor(EXTRACT(epoch FROM (pg_catalog.now() OPERATOR(pg_catalog.-) n.last_seen))))::bigint,
    pg_catalog.to_char(n.released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    n.backend_slot
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.>=) $2
  AND n.machine_id OPERATOR(pg_catalog.<=) $3
ORDER BY n.last_seen, n.machine_id
LIMIT 1;

-- HEARTBEAT
-- A version-checked heartbeat: a new grant, and the watermark raised to the report (or the server's
-- clock). Returns the grant and the watermark the row holds now (a node's watermark never goes
-- back: a report behind the one held before leaves that one, and is recorded). The grant never goes
-- back either: the answer may never reach the node (lost after the commit), which then holds the
-- grant before, so a lease shortened by a reload starts once that one has ended.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 lease interval
--   $8 reported timestamptz (may be NULL)
--   $9 takeback_age interval
--   $10 now timestamptz
--   returns lease_until timestamptz
--   returns watermark timestamptz
UPDATE idgen_private.nodes
SET last_seen = $10,
    lease_until = GREATEST(lease_until, $10 OPERATOR(pg_catalog.+) $7),
    takeover_at = GREATEST(takeover_at, $10 OPERATOR(pg_catalog.+) $9),
    issued_until = GREATEST(issued_until, COALESCE($8, $10))
WHERE service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND machine_id OPERATOR(pg_catalog.=) $2
  AND host OPERATOR(pg_catalog.=) $3
  AND port OPERATOR(pg_catalog.=) $4
  AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
  AND version OPERATOR(pg_catalog.=) $6
  AND released_at IS NULL
RETURNING lease_until, issued_until;

-- HEARTBEAT_REPORTING
-- [`HEARTBEAT`], keeping what the node reports at its version (objects of 0.6.0 on): its clock's
-- offset from the server's (the reported watermark minus the server clock at the heartbeat; NULL
-- without a report, and never the watermark held, which may be ahead of the report) and its
-- generator's counts since the claim.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 lease interval
--   $8 reported timestamptz (may be NULL)
--   $9 takeback_age interval
--   $10 clock_backward_waits bigint (may be NULL)
--   $11 clock_backward_refusals bigint (may be NULL)
--   $12 sequence_exhaustions bigint (may be NULL)
--   $13 now timestamptz
--   returns lease_until timestamptz
--   returns watermark timestamptz
UPDATE idgen_private.nodes
SET last_seen = $13,
    lease_until = GREATEST(lease_until, $13 OPERATOR(pg_catalog.+) $7),
    takeover_at = GREATEST(takeover_at, $13 OPERATOR(pg_catalog.+) $9),
    issued_until = GREATEST(issued_until, COALESCE($8, $13)),
    reports_version = $6,
    clock_offset = $8 OPERATOR(pg_catalog.-) $13,
    clock_backward_waits = $10,
    clock_backward_refusals = $11,
    sequence_exhaustions = $12
WHERE service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND machine_id OPERATOR(pg_catalog.=) $2
  AND host OPERATOR(pg_catalog.=) $3
  AND port OPERATOR(pg_catalog.=) $4
  AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
  AND version OPERATOR(pg_catalog.=) $6
  AND released_at IS NULL
RETURNING lease_until, issued_until;

-- RELEASE
-- A version-checked release: a new version, the cooldown starts, the watermark rises to the report,
-- which the holder makes after it stopped stamping. Without one (a release by hand, while the holder
-- may go on until it learns of it) it rises to what the holder may still stamp as it holds the row
-- ([`idgen_private.holder_bound`]: a node's last report plus its lease, and its take-back time; a
-- backend's window), and at least to the clock plus `margin`. Returns the new version and watermark.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 margin interval
--   $8 reported timestamptz (may be NULL)
--   $9 lease interval
--   $10 takeback_age interval
--   returns version bigint
--   returns issued_until timestamptz
UPDATE idgen_private.nodes n
SET version = n.version OPERATOR(pg_catalog.+) 1,
    released_at = t.now,
    issued_until = GREATEST(n.issued_until, COALESCE($8, GREATEST(held.bound, t.now OPERATOR(pg_catalog.+) $7)))
FROM (SELECT pg_catalog.clock_timestamp() AS now) t, (
    SELECT idgen_private.holder_bound(o, $9, $10) AS bound
    FROM idgen_private.nodes o
    WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND o.machine_id OPERATOR(pg_catalog.=) $2) held
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2
  AND n.host OPERATOR(pg_catalog.=) $3
  AND n.port OPERATOR(pg_catalog.=) $4
  AND COALESCE(n.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
  AND n.version OPERATOR(pg_catalog.=) $6
  AND n.released_at IS NULL
RETURNING n.version, n.issued_until;

-- RENEW_BACKEND_LEASE
-- A backend's version- and epoch-checked renewal that writes its next window.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 lease interval
--   $8 epoch bigint
--   $9 window interval
--   $10 takeback_age interval
--   returns verified_at timestamptz
--   returns lease_until timestamptz
--   returns issued_until timestamptz
WITH own AS (
    SELECT service, machine_id
    FROM idgen_private.nodes
    WHERE service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND machine_id OPERATOR(pg_catalog.=) $2
      AND host OPERATOR(pg_catalog.=) $3
      AND port OPERATOR(pg_catalog.=) $4
      AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
      AND version OPERATOR(pg_catalog.=) $6
      AND released_at IS NULL
      AND EXISTS (
        SELECT
        FROM idgen_private.idgen_registry r
        WHERE r.epoch OPERATOR(pg_catalog.=) $8) FOR UPDATE SKIP LOCKED)
UPDATE idgen_private.nodes n
SET last_seen = t.now,
    lease_until = t.now OPERATOR(pg_catalog.+) $7,
    takeover_at = t.now OPERATOR(pg_catalog.+) $10,
    issued_until = GREATEST(n.issued_until, t.now OPERATOR(pg_catalog.+) $9)
FROM own, (SELECT pg_catalog.clock_timestamp() AS now) t
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) own.service::pg_catalog.text
  AND n.machine_id OPERATOR(pg_catalog.=) own.machine_id
RETURNING n.last_seen, n.lease_until, n.issued_until;

-- READ_BACKEND_LEASE
-- A backend's version- and epoch-checked read, for read-only transactions.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 lease interval
--   $8 epoch bigint
--   returns verified_at timestamptz
--   returns lease_until timestamptz
--   returns issued_until timestamptz
SELECT pg_catalog.clock_timestamp(), COALESCE(lease_until, last_seen OPERATOR(pg_catalog.+) $7), issued_until
FROM idgen_private.nodes
WHERE service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND machine_id OPERATOR(pg_catalog.=) $2
  AND host OPERATOR(pg_catalog.=) $3
  AND port OPERATOR(pg_catalog.=) $4
  AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
  AND version OPERATOR(pg_catalog.=) $6
  AND released_at IS NULL
  AND EXISTS (
    SELECT
    FROM idgen_private.idgen_registry r
    WHERE r.epoch OPERATOR(pg_catalog.=) $8);

-- CLOSE_BACKEND_LEASE
-- A backend's lease ends (the backend stopped, or its parked lease was closed): its last stamp (at or
-- after its lease's not_before) in place of the window it wrote, and the row released at a new
-- version, if it is still the lease's, so that an ended session holds no id of its service's pool:
-- the slot's next backend takes it back, any claim after the cooldown.
--   $1 service text
--   $2 machine_id integer
--   $3 host inet
--   $4 port integer
--   $5 backend_slot integer (may be NULL)
--   $6 version bigint
--   $7 epoch bigint
--   $8 last_stamp timestamptz
UPDATE idgen_private.nodes
SET issued_until = LEAST(issued_until, $8),
    released_at = pg_catalog.clock_timestamp(),
    version = version OPERATOR(pg_catalog.+) 1
WHERE service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND machine_id OPERATOR(pg_catalog.=) $2
  AND host OPERATOR(pg_catalog.=) $3
  AND port OPERATOR(pg_catalog.=) $4
  AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1)
  AND version OPERATOR(pg_catalog.=) $6
  AND released_at IS NULL
  AND EXISTS (
    SELECT
    FROM idgen_private.idgen_registry r
    WHERE r.epoch OPERATOR(pg_catalog.=) $7);

-- NOTIFY_ALERT
-- An alert to the listeners of `idgen_alert`.
--   $1 channel text
--   $2 payload text
SELECT pg_catalog.pg_notify($1, $2);

-- CALLER_STANDING
-- Who a role is, for a service: its name, superuser, extension owner, member of the service;
-- and whether the service is granted to any role or has registry rows (with a layout, the
-- other way a service exists: `LAYOUT_EXISTS`, for the objects of 0.7.0 on).
-- Run with the latest snapshot (`spi::first_row_with_latest_snapshot`).
--   $1 role oid
--   $2 service text
--   returns role text (may be NULL)
--   returns superuser boolean (may be NULL)
--   returns extension_owner boolean (may be NULL)
--   returns member boolean (may be NULL)
--   returns service_known boolean (may be NULL)
SELECT r.rolname::text, r.rolsuper, r.oid OPERATOR(pg_catalog.=) e.extowner, EXISTS (
    SELECT
    FROM idgen_private.idgen_service_members m
    WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2
      AND pg_catalog.pg_has_role($1, m.member::pg_catalog.oid, 'MEMBER')),
    EXISTS (SELECT FROM idgen_private.idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2)
    OR EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $2)
FROM pg_catalog.pg_roles r, pg_catalog.pg_extension e
WHERE r.oid OPERATOR(pg_catalog.=) $1
  AND e.extname OPERATOR(pg_catalog.=) 'idgen'::name;

-- ROLE_BY_NAME
-- The role of a name (as `pg_roles` shows it), if any.
--   $1 role_name text
--   returns role oid (may be NULL)
SELECT r.oid
FROM pg_catalog.pg_roles r
WHERE r.rolname OPERATOR(pg_catalog.=) $1::name;

-- GRANT_SERVICE
-- Grants a service to a role; true when the grant is new.
--   $1 service text
--   $2 role oid
--   returns granted boolean
INSERT INTO idgen_private.idgen_service_members (service, member) VALUES ($1, $2::pg_catalog.regrole)
ON CONFLICT DO NOTHING
RETURNING true;

-- REVOKE_SERVICE
-- Revokes a service from a role; true when there was a grant.
--   $1 service text
--   $2 role oid
--   returns revoked boolean
DELETE FROM idgen_private.idgen_service_members m
WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND m.member::pg_catalog.oid OPERATOR(pg_catalog.=) $2
RETURNING true;

-- SERVICE_MEMBERS_OID
-- The oid of the grants' table, which sessions watch for changes.
--   returns relation oid (may be NULL)
SELECT 'idgen_private.idgen_service_members'::pg_catalog.regclass::pg_catalog.oid;

-- INSERT_EVENT
-- Inserts a history event (JSON whose keys are the columns; `at` missing: the clock). Nothing when
-- its event_id is taken (the numbering went back: a restore over a live database resets the dumped
-- sequence); see [`RESYNC_EVENT_IDS`].
--   $1 event text
--   returns inserted integer
INSERT INTO idgen_private.idgen_history
    (at, event, service, machine_id, version, outcome, host, port, backend_slot, role, pid, not_before,
     issued_until, previous_host, previous_port, previous_backend_slot, previous_version,
     previous_idle_seconds, previous_bound, detail)
SELECT COALESCE(e.at, pg_catalog.clock_timestamp()),
    e.event,
    e.service,
    e.machine_id,
    e.version,
    e.outcome,
    e.host,
    e.port,
    e.backend_slot,
    e.role,
    e.pid,
    e.not_before,
    e.issued_until,
    e.previous_host,
    e.previous_port,
    e.previous_backend_slot,
    e.previous_version,
    e.previous_idle_seconds,
    e.previous_bound,
    e.detail
FROM pg_catalog.json_populate_record(NULL::idgen_private.idgen_history, $1::pg_catalog.json) e
ON CONFLICT (event_id) DO NOTHING
RETURNING 1;

-- INSERT_REFUSAL
-- Inserts a refusal event unless one of its kind was recorded for its service within
-- `refusal_interval` (or its event_id is taken, as above).
--   $1 event text
--   $2 refusal_interval interval
INSERT INTO idgen_private.idgen_history
    (at, event, service, machine_id, version, outcome, host, port, backend_slot, role, pid, not_before,
     issued_until, previous_host, previous_port, previous_backend_slot, previous_version,
     previous_idle_seconds, previous_bound, detail)
SELECT COALESCE(e.at, pg_catalog.clock_timestamp()),
    e.event,
    e.service,
    e.machine_id,
    e.version,
    e.outcome,
    e.host,
    e.port,
    e.backend_slot,
    e.role,
    e.pid,
    e.not_before,
    e.issued_until,
    e.previous_host,
    e.previous_port,
    e.previous_backend_slot,
    e.previous_version,
    e.previous_idle_seconds,
    e.previous_bound,
    e.detail
FROM pg_catalog.json_populate_record(NULL::idgen_private.idgen_history, $1::pg_catalog.json) e
WHERE NOT EXISTS (
    SELECT
    FROM idgen_private.idgen_history h
    WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) e.service::pg_catalog.text
      AND h.event OPERATOR(pg_catalog.=) e.event
      AND h.at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $2))
ON CONFLICT (event_id) DO NOTHING
RETURNING 1;

-- RESYNC_EVENT_IDS
-- Moves the events' numbering past the last event recorded, never back: an event another
-- session is recording (not visible yet) may hold a number above the last one visible.
SELECT pg_catalog.setval('idgen_private.idgen_history_event_id_seq'::pg_catalog.regclass,
                         GREATEST(m.last, s.last_value))
FROM (
    SELECT pg_catalog.max(h.event_id) AS last
    FROM idgen_private.idgen_history h) m,
    idgen_private.idgen_history_event_id_seq s
WHERE m.last IS NOT NULL;

-- REFUSAL_RECORDED_RECENTLY
-- Whether a refusal of a kind was recorded for a service within `refusal_interval`.
--   $1 service text
--   $2 event text
--   $3 refusal_interval interval
--   returns recorded boolean (may be NULL)
SELECT EXISTS (
    SELECT
    FROM idgen_private.idgen_history h
    WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND h.event OPERATOR(pg_catalog.=) $2
      AND h.at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $3));

-- SERVICE_VISIBLE
-- Whether the caller may read `service` in the idgen views (`idgen_visibility`, as the caller).
--   $1 service text
--   returns visible boolean (may be NULL)
SELECT v.reads_all OR $1 OPERATOR(pg_catalog.=) ANY (v.services)
FROM idgen_private.visibility v;

-- TAKE_REFUSAL_TURN
-- The turn to record a refusal: one session at a time (the registry's row, locked until the refused
-- call's transaction ends; a session that finds it taken records nothing), so that concurrent
-- refusals never start workers together, nor record one kind twice.
--   returns taken boolean (may be NULL)
SELECT true
FROM idgen_private.idgen_registry r FOR NO KEY
UPDATE SKIP LOCKED;

-- COUNT_IN_USE
-- How many machine ids of the range a claim cannot get without a take-back, or before their time:
-- held, released less than `cooldown` ago, or released with a watermark still ahead of the clock
-- (its holders' bound, after a release by hand). "In use" as `idgen_capacity` counts it: every
-- state of `idgen_nodes` but `released` (tests/cluster/tests/one_source.rs ties the two).
--   $1 service text
--   $2 cooldown interval
--   $3 first_machine_id integer
--   $4 last_machine_id integer
--   returns in_use bigint (may be NULL)
SELECT pg_catalog.count(*)
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.>=) $3
  AND n.machine_id OPERATOR(pg_catalog.<=) $4
  AND (n.released_at IS NULL
       OR n.released_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) $2)
       OR n.issued_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp());

-- HIGHEST_REGISTERED
-- The highest machine id of the range with a row: no more rows than up to it can be in use (the
-- capacity alert counts only when that could pass a level).
--   $1 service text
--   $2 first_machine_id integer
--   $3 last_machine_id integer
--   returns machine_id integer (may be NULL)
SELECT pg_catalog.max(n.machine_id)::pg_catalog.int4
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.>=) $2
  AND n.machine_id OPERATOR(pg_catalog.<=) $3;

-- CAPACITY_ANNOUNCED
-- The capacity level announced last for a service: the kind of its newest capacity event (the
-- three kinds are the parameters, `EventKind::of_capacity`), newest by the order of recording,
-- which a clock stepped back does not change; no row: none announced since the history began
-- or was purged.
--   $1 service text
--   $2 warning_event text
--   $3 critical_event text
--   $4 cleared_event text
--   returns event text (may be NULL)
SELECT h.event
FROM idgen_private.idgen_history h
WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND h.event OPERATOR(pg_catalog.=) ANY (ARRAY[$2, $3, $4])
ORDER BY h.event_id DESC
LIMIT 1;

-- SYNCHRONOUS_STANDBY_STREAMING
-- Whether a synchronous standby streams from this server now.
--   returns streaming boolean (may be NULL)
SELECT EXISTS (
    SELECT
    FROM pg_catalog.pg_stat_replication r
    WHERE r.state OPERATOR(pg_catalog.=) 'streaming'::text
      AND r.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text]));

-- TOMBSTONE_ROW
-- A row deleted by hand leaves its bound and version as a tombstone (`lease` and `takeback_age`
-- stand in for a row that records no terms).
--   $1 service text
--   $2 machine_id integer
--   $3 lease interval
--   $4 takeback_age interval
INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound)
SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, $3, $4)
FROM idgen_private.nodes n
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2
ON CONFLICT (service, machine_id) DO
UPDATE
SET version = GREATEST(t.version, excluded.version),
    bound = GREATEST(t.bound, excluded.bound),
    removed_at = excluded.removed_at;

-- TOMBSTONE_ALL
-- Every row truncated leaves its tombstone (as [`TOMBSTONE_ROW`]).
--   $1 lease interval
--   $2 takeback_age interval
INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound)
SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, $1, $2)
FROM idgen_private.nodes n
ON CONFLICT (service, machine_id) DO
UPDATE
SET version = GREATEST(t.version, excluded.version),
    bound = GREATEST(t.bound, excluded.bound),
    removed_at = excluded.removed_at;

-- NEW_EPOCH
-- TRUNCATE starts a new epoch: leases granted before it are dropped at their next check.
UPDATE idgen_private.idgen_registry r
SET epoch = r.epoch OPERATOR(pg_catalog.+) 1;

-- MERGE_TOMBSTONE
-- A row inserted (by hand, by a restore, or by a claim) takes the tombstone of its machine id, if
-- any: its bound as watermark and a newer version.
--   $1 service text
--   $2 machine_id integer
WITH tomb AS (
    DELETE FROM idgen_private.idgen_tombstones t
    WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
      AND t.machine_id OPERATOR(pg_catalog.=) $2
    RETURNING t.version, t.bound)
UPDATE idgen_private.nodes n
SET issued_until = GREATEST(n.issued_until, tomb.bound),
    version = GREATEST(n.version, tomb.version OPERATOR(pg_catalog.+) 1)
FROM tomb
WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2;

-- LOCK_REGISTRY_FOR_DROP
-- Before a DROP of the registry is checked: no claim, renewal or report may commit between the check
-- and the DROP. Every table of idgen's, in the mode the DROP itself takes, so that the DROP never
-- waits for a lock while it holds another (claims would queue behind it). Without waiting: any
-- transaction that uses the registry, a read included, fails the DROP (55P03).
LOCK TABLE idgen_private.nodes,
    idgen_private.idgen_tombstones,
    idgen_private.idgen_registry,
    idgen_private.idgen_claim_guards,
    idgen_private.idgen_service_members,
    idgen_private.idgen_history,
    idgen_private.idgen_history_purged IN ACCESS EXCLUSIVE MODE NOWAIT;

-- REGISTRY_LOCK_HOLDERS
-- The other sessions holding a lock on the registry's tables (what a DROP of it does not wait for):
-- pid, role, application, state and the start of their transaction. Names resolved when it runs.
--   returns pid integer
--   returns role text
--   returns application text
--   returns state text
--   returns since text (may be NULL)
SELECT a.pid,
    COALESCE(a.usename::pg_catalog.text, ''),
    COALESCE(a.application_name, ''),
    COALESCE(a.state, ''),
    pg_catalog.to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
FROM pg_catalog.pg_stat_activity a
WHERE a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
  AND EXISTS (
    SELECT
    FROM pg_catalog.pg_locks l
    WHERE l.pid OPERATOR(pg_catalog.=) a.pid
      AND l.granted
      AND l.locktype OPERATOR(pg_catalog.=) 'relation'
      AND l.relation OPERATOR(pg_catalog.=) ANY (ARRAY[
        pg_catalog.to_regclass('idgen_private.nodes'),
        pg_catalog.to_regclass('idgen_private.idgen_tombstones'),
        pg_catalog.to_regclass('idgen_private.idgen_registry'),
        pg_catalog.to_regclass('idgen_private.idgen_claim_guards'),
        pg_catalog.to_regclass('idgen_private.idgen_service_members'),
        pg_catalog.to_regclass('idgen_private.idgen_history'),
        pg_catalog.to_regclass('idgen_private.idgen_history_purged'),
        pg_catalog.to_regclass('idgen_private.idgen_layouts')]::pg_catalog.oid[]))
ORDER BY a.xact_start, a.pid;

-- LOCK_LAYOUTS_FOR_DROP
-- [`LOCK_REGISTRY_FOR_DROP`] for the layouts (objects of 0.7.0 on): a claim reads them.
LOCK TABLE idgen_private.idgen_layouts IN ACCESS EXCLUSIVE MODE NOWAIT;

-- STILL_STAMPING
-- What a DROP of the registry would forget while it may still be stamped: every row and tombstone
-- whose bound is ahead of the clock, latest first; a row's holder as host, port, slot.
--   $1 lease interval
--   $2 takeback_age interval
--   returns service text
--   returns machine_id integer
--   returns host text (may be NULL)
--   returns port integer (may be NULL)
--   returns backend_slot integer (may be NULL)
--   returns bound timestamptz
SELECT s.service, s.machine_id::pg_catalog.int4, pg_catalog.host(s.host), s.port, s.backend_slot, s.bound
FROM (
    SELECT n.service::pg_catalog.text AS service,
        n.machine_id,
        n.host,
        n.port,
        n.backend_slot,
        idgen_private.holder_bound(n, $1, $2) AS bound
    FROM idgen_private.nodes n
    UNION ALL
    SELECT t.service::pg_catalog.text, t.machine_id, NULL::inet, NULL::integer, NULL::integer, t.bound
    FROM idgen_private.idgen_tombstones t) s
WHERE s.bound OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
ORDER BY s.bound DESC, s.service, s.machine_id;

-- EVENTS_OF_MACHINE_ID
-- The events of a machine id the caller may read, in order (`idgen_explain`, as the caller); times
-- as Unix ms, NULL when infinite.
--   $1 service text
--   $2 machine_id integer
--   returns at_unix_ms bigint (may be NULL)
--   returns event text (may be NULL)
--   returns host text (may be NULL)
--   returns port integer (may be NULL)
--   returns backend_slot integer (may be NULL)
--   returns role text (may be NULL)
--   returns pid integer (may be NULL)
--   returns version bigint (may be NULL)
--   returns not_before_unix_ms bigint (may be NULL)
--   returns issued_until_unix_ms bigint (may be NULL)
--   returns previous_host text (may be NULL)
--   returns previous_port integer (may be NULL)
--   returns previous_backend_slot integer (may be NULL)
--   returns previous_bound_unix_ms bigint (may be NULL)
--   returns outcome text (may be NULL)
SELECT CASE WHEN pg_catalog.isfinite(e.at) THEN pg_catalog.floor(EXTRACT(epoch FROM e.at) OPERATOR(pg_catalog.*) 1000::numeric)::bigint END,
    e.event,
    pg_catalog.host(e.host),
    e.port,
    e.backend_slot,
    e.role,
    e.pid,
    e.version,
    CASE WHEN pg_catalog.isfinite(e.not_before) THEN pg_catalog.floor(EXTRACT(epoch FROM e.not_before) OPERATOR(pg_catalog.*) 1000::numeric)::bigint END,
    CASE WHEN pg_catalog.isfinite(e.issued_until) THEN pg_catalog.floor(EXTRACT(epoch FROM e.issued_until) OPERATOR(pg_catalog.*) 1000::numeric)::bigint END,
    pg_catalog.host(e.previous_host),
    e.previous_port,
    e.previous_backend_slot,
    CASE WHEN pg_catalog.isfinite(e.previous_bound) THEN pg_catalog.floor(EXTRACT(epoch FROM e.previous_bound) OPERATOR(pg_catalog.*) 1000::numeric)::bigint END,
    e.outcome
FROM idgen_private.visible_events e
WHERE e.service OPERATOR(pg_catalog.=) $1
  AND e.machine_id OPERATOR(pg_catalog.=) $2
ORDER BY e.event_id;

-- SERVICES_OF_MACHINE_ID
-- The services the caller may read that have (or had) a machine id (all of them, or the one
-- named), and whether events of them were purged.
--   $1 machine_id integer
--   $2 service text (may be NULL)
--   returns service text (may be NULL)
--   returns history_purged boolean (may be NULL)
SELECT s.service, EXISTS (
    SELECT
    FROM idgen_private.visible_metrics m
    WHERE m.service OPERATOR(pg_catalog.=) s.service
      AND m.history_events_purged OPERATOR(pg_catalog.>) 0)
FROM (
    SELECT n.service::text AS service
    FROM idgen_private.visible_nodes n
    WHERE n.machine_id OPERATOR(pg_catalog.=) $1
    UNION
    SELECT e.service::text
    FROM idgen_private.visible_events e
    WHERE e.machine_id OPERATOR(pg_catalog.=) $1) s
WHERE $2::text IS NULL OR s.service OPERATOR(pg_catalog.=) $2::text
ORDER BY s.service;

-- SERVICES_TO_EXPLAIN
-- The services the caller may read that have registry rows or events (all of them, or the one named),
-- with their layouts as recorded (NULL: none; objects of 0.7.0 on) and whether events of them were
-- purged: the services an ID may be of.
--   $1 service text (may be NULL)
--   returns service text (may be NULL)
--   returns history_purged boolean (may be NULL)
--   returns epoch_unix_ms bigint (may be NULL)
--   returns time_unit_ms integer (may be NULL)
--   returns time_bits integer (may be NULL)
--   returns machine_bits integer (may be NULL)
--   returns sequence_bits integer (may be NULL)
--   returns field_order text (may be NULL)
SELECT s.service,
    EXISTS (
        SELECT
        FROM idgen_private.visible_metrics m
        WHERE m.service OPERATOR(pg_catalog.=) s.service
          AND m.history_events_purged OPERATOR(pg_catalog.>) 0),
    pg_catalog.floor(EXTRACT(epoch FROM l.epoch) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
    l.time_unit_ms,
    l.time_bits,
    l.machine_bits,
    l.sequence_bits,
    l.field_order
FROM (
    SELECT n.service::text AS service
    FROM idgen_private.visible_nodes n
    UNION
    SELECT e.service::text
    FROM idgen_private.visible_events e) s
    LEFT JOIN idgen_private.visible_layouts l ON l.service::pg_catalog.text OPERATOR(pg_catalog.=) s.service
WHERE $1::text IS NULL OR s.service OPERATOR(pg_catalog.=) $1::text
ORDER BY s.service;

-- NODE_OF_MACHINE_ID
-- The registry row of a machine id, if the caller may read it: holder and version.
--   $1 service text
--   $2 machine_id integer
--   returns host text (may be NULL)
--   returns port integer (may be NULL)
--   returns backend_slot integer (may be NULL)
--   returns version bigint (may be NULL)
SELECT pg_catalog.host(n.host), n.port, n.backend_slot, n.version
FROM idgen_private.visible_nodes n
WHERE n.service OPERATOR(pg_catalog.=) $1
  AND n.machine_id OPERATOR(pg_catalog.=) $2;
