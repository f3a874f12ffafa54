//! Every SQL statement idgen runs at run time, each written once, whole, with its own parameters
//! (`$1`, `$2`, ... in the order listed, with the type each is bound as). Plain Rust with no pgrx:
//! the tests include this file. `src/spi.rs` is the only code that runs them, and it runs nothing
//! else; it checks every call's arguments against the list. The rendering of every statement is
//! checked in as `docs/runtime_statements.sql` (`scripts/render_statements.sh` writes it again;
//! tests/cluster/tests/runtime_sql.rs compares), so a diff shows each real change of SQL.
//! Shared rules live in SQL functions of `idgen_private` (`holder_bound`), not in shared text; the
//! one rule written out in several statements, the grant, is held to one form by runtime_sql.rs.
//!
//! **The rule for SQL run with the owner's rights.** Since PostgreSQL 15 the
//! schema idgen is installed in (`public` by default) belongs to the database
//! owner, who can plant functions and operators there, rename it, and create a
//! look-alike in its place; and an exact match anywhere on the path beats a
//! pg_catalog candidate that needs an implicit cast. Therefore:
//! - no statement names anything in idgen's own schema: the registry is reached
//!   through `idgen_private.nodes`, a view bound to `system_nodes` when the
//!   extension was created, and every other object lives in `idgen_private`, a
//!   schema of the extension's owner that no lower role can rename or create in;
//! - every object of idgen is written `idgen_private.x`, and the search_path is
//!   pinned to `pg_catalog, pg_temp` around these statements as a second line;
//! - every operator is written `OPERATOR(pg_catalog.x)` (parenthesised: they
//!   all share one precedence), and every function `pg_catalog.f(...)`;
//! - nothing resolves `=` through the path either: no `IS [NOT] DISTINCT FROM`
//!   or `NULLIF`; `COALESCE`, `GREATEST` and `EXISTS` are grammar;
//! - `service` is `varchar`, and is compared as `service::pg_catalog.text`: no
//!   `=` takes varchar, and resolving `varchar = text` weighs every `=`
//!   candidate through the cast catalog, which a new backend's claim would
//!   pay cold (the expression and the index used are the same);
//! - parameters carry exact types (durations are bound as `interval`, slots as
//!   `integer`), so that every operator meets the types it is written for.
//!
//! Claims never wait on another session: node identities and new machine ids
//! are guarded by rows of `idgen_private.idgen_claim_guards` locked `FOR UPDATE
//! SKIP LOCKED` (never advisory locks, whose keys any role can hold), and rows
//! likewise.

/// One statement: its name, its parameters in order, and its text.
pub struct Statement {
    pub name: &'static str,
    /// What it does (its doc comment).
    #[allow(dead_code)] // read by the rendering, which the tests run
    pub doc: &'static str,
    /// `$1`, `$2`, ...: each parameter's name and the SQL type it is bound as.
    pub params: &'static [Param],
    pub text: &'static str,
}

/// A statement's parameter: a name for readers and the SQL type of the value bound.
pub struct Param {
    pub name: &'static str,
    pub sql_type: &'static str,
}

#[allow(dead_code)] // the rendering and the tests, which include this file
impl Statement {
    /// The text without the indentation it has in this file.
    pub fn trimmed(&self) -> String {
        let lines: Vec<&str> = self.text.lines().filter(|line| !line.trim().is_empty()).collect();
        let indent = lines.iter().map(|line| line.len() - line.trim_start().len()).min().unwrap_or(0);
        lines.iter().map(|line| &line[indent..]).collect::<Vec<_>>().join("\n")
    }
}

/// Declares each statement as a `Statement` constant, and [`ALL`] in the order written.
macro_rules! statements {
    ($($(#[doc = $doc:literal])+ $name:ident($($param:ident: $sql_type:ident),* $(,)?) = $text:literal;)+) => {
        $(
            $(#[doc = $doc])+
            pub const $name: Statement = Statement {
                name: stringify!($name),
                doc: concat!($($doc, "\n"),+),
                params: &[$(Param { name: stringify!($param), sql_type: stringify!($sql_type) }),*],
                text: $text,
            };
        )+
        /// Every statement, in the order of this file.
        #[allow(dead_code)] // the tests, which include this file
        pub const ALL: &[Statement] = &[$($name),+];
    };
}

statements! {
    /// Claim step 3: takes over one released row of the service past its cooldown, longest released
    /// first, locked without waiting, for the claimant with a new grant. Returns the row won (columns 1-6)
    /// and its previous holder's facts (7-14).
    TAKE_RELEASED(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        cooldown: interval, tolerance: interval, takeback_age: interval, window: interval,
        first_machine_id: integer, last_machine_id: integer,
    ) = r#"
        WITH victim AS (
            SELECT v.*, idgen_private.holder_bound(v, $5, $8) AS bound
            FROM idgen_private.nodes v
            WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND v.machine_id OPERATOR(pg_catalog.>=) $10
              AND v.machine_id OPERATOR(pg_catalog.<=) $11
              AND v.released_at OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $6)
              AND idgen_private.holder_bound(v, $5, $8) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $7)
            ORDER BY v.released_at, v.machine_id
            LIMIT 1 FOR UPDATE SKIP LOCKED)
        UPDATE idgen_private.nodes n
        SET host = $2,
            port = $3,
            backend_slot = $4,
            version = n.version OPERATOR(pg_catalog.+) 1,
            last_seen = t.now,
            lease_until = t.now OPERATOR(pg_catalog.+) $5,
            takeover_at = t.now OPERATOR(pg_catalog.+) $8,
            released_at = NULL,
            issued_until = GREATEST(v.bound, t.now OPERATOR(pg_catalog.+) $9)
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
            v.backend_slot
    "#;

    /// Claim steps 4 to 6: takes over one row idle longer than `min_idle`, past the take-back time
    /// its holder was granted and not cooling down, least recently seen first. Returns as [`TAKE_RELEASED`].
    TAKE_IDLE(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        min_idle: interval, cooldown: interval, tolerance: interval, takeback_age: interval,
        window: interval, first_machine_id: integer, last_machine_id: integer,
    ) = r#"
        WITH victim AS (
            SELECT v.*, idgen_private.holder_bound(v, $5, $9) AS bound
            FROM idgen_private.nodes v
            WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND v.machine_id OPERATOR(pg_catalog.>=) $11
              AND v.machine_id OPERATOR(pg_catalog.<=) $12
              AND v.last_seen OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $6)
              AND (v.takeover_at IS NULL OR v.takeover_at OPERATOR(pg_catalog.<) pg_catalog.now())
              AND (v.released_at IS NULL OR v.released_at OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $7))
              AND idgen_private.holder_bound(v, $5, $9) OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $8)
            ORDER BY v.last_seen, v.machine_id
            LIMIT 1 FOR UPDATE SKIP LOCKED)
        UPDATE idgen_private.nodes n
        SET host = $2,
            port = $3,
            backend_slot = $4,
            version = n.version OPERATOR(pg_catalog.+) 1,
            last_seen = t.now,
            lease_until = t.now OPERATOR(pg_catalog.+) $5,
            takeover_at = t.now OPERATOR(pg_catalog.+) $9,
            released_at = NULL,
            issued_until = GREATEST(v.bound, t.now OPERATOR(pg_catalog.+) $10)
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
            v.backend_slot
    "#;

    /// The registry's epoch.
    READ_REGISTRY() = r#"
        SELECT r.epoch
        FROM idgen_private.idgen_registry r
    "#;

    /// The version a row of a machine id never registered in this registry starts after (objects of
    /// 0.7.0 on; before, 0).
    READ_VERSION_BASE() = r#"
        SELECT r.version_base
        FROM idgen_private.idgen_registry r
    "#;

    /// Whether the service has its guard rows.
    GUARDS_EXIST(service: text) = r#"
        SELECT EXISTS (
            SELECT
            FROM idgen_private.idgen_claim_guards g
            WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
    "#;

    /// Creates the guard rows of the service (in a transaction of its own).
    CREATE_GUARDS(service: text, first_bucket: integer, last_bucket: integer) = r#"
        INSERT INTO idgen_private.idgen_claim_guards (service, bucket)
        SELECT $1, b
        FROM pg_catalog.generate_series($2::integer, $3::integer) AS b
        ON CONFLICT DO NOTHING
    "#;

    /// The layout and pool of a service (objects of 0.7.0 on): epoch as Unix ms, time unit, widths, field
    /// order, pool, the never-registered hint, and whether claims may start (the layout is fixed and the
    /// guard rows exist). No row: the service was never claimed nor defined.
    SERVICE_LAYOUT(service: text) = r#"
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
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
    "#;

    /// Every other service's layout and pool (`idgen_define_layout` compares them with the one defined).
    OTHER_LAYOUTS(service: text) = r#"
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
        ORDER BY l.service
    "#;

    /// The layouts and pools the caller may read (`idgen_health()`, as the caller), as [`OTHER_LAYOUTS`].
    VISIBLE_LAYOUTS() = r#"
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
        ORDER BY l.service
    "#;

    /// Records a layout for a service that has none: the default, at its first claim (in a transaction of
    /// its own).
    RECORD_LAYOUT(
        service: text, preset: text, epoch: timestamptz, time_unit_ms: integer, time_bits: integer,
        machine_bits: integer, sequence_bits: integer, field_order: text, pool_first: integer,
        pool_last: integer, defined_by: text,
    ) = r#"
        INSERT INTO idgen_private.idgen_layouts
            (service, preset, epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order, pool_first,
             pool_last, defined_by, unregistered_from)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $9)
        ON CONFLICT DO NOTHING
    "#;

    /// Fixes a service's layout at its first claim (in a transaction of its own, before the claim reads
    /// it): idgen_define_layout changes it no more.
    FIX_LAYOUT(service: text) = r#"
        UPDATE idgen_private.idgen_layouts l
        SET fixed_at = pg_catalog.clock_timestamp()
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND l.fixed_at IS NULL
    "#;

    /// Whether a layout is recorded for `service` (defined, or fixed by a claim): with
    /// `CALLER_STANDING`, how a service exists. Run with the latest snapshot.
    LAYOUT_EXISTS(service: text) = r#"
        SELECT true
        FROM idgen_private.idgen_layouts l
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
    "#;

    /// What makes `service` exist, with the transactions that wrote it (their xmin), to tell what
    /// this backend's transaction wrote and has not committed: its layout row, its grants, and
    /// whether it has registry rows.
    SERVICE_EVIDENCE(service: text) = r#"
        SELECT (SELECT l.xmin::pg_catalog.text::pg_catalog.int8
                FROM idgen_private.idgen_layouts l
                WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1),
            (SELECT pg_catalog.array_agg(m.xmin::pg_catalog.text::pg_catalog.int8)
             FROM idgen_private.idgen_service_members m
             WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1),
            EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
    "#;

    /// Whether the registry knows `service` already: rows, tombstones or history. A service with none
    /// of its layout recorded but these (restored from a dump of an earlier version) has IDs cut by
    /// the default layout.
    SERVICE_HAS_IDS(service: text) = r#"
        SELECT EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
            OR EXISTS (SELECT FROM idgen_private.idgen_tombstones t WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
            OR EXISTS (SELECT FROM idgen_private.idgen_history h WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)
    "#;

    /// Defines a service's layout, or defines it again while no claim has fixed it. Returns nothing when
    /// it is fixed.
    DEFINE_LAYOUT(
        service: text, preset: text, epoch: timestamptz, time_unit_ms: integer, time_bits: integer,
        machine_bits: integer, sequence_bits: integer, field_order: text, pool_first: integer,
        pool_last: integer, defined_by: text,
    ) = r#"
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
        RETURNING true
    "#;

    /// A service's layout row as people read it: preset, epoch, widths, order, pool, who defined it when,
    /// and when its first claim fixed it.
    LAYOUT_OF(service: text) = r#"
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
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
    "#;

    /// Moves the service's never-registered hint up to `from`: only if every machine id from the hint to
    /// `from` has a row now (a row deleted meanwhile keeps it down), and unless another transaction holds
    /// the layout's row (it is a hint: the next claim moves it).
    ADVANCE_UNREGISTERED_FROM(service: text, from: integer) = r#"
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
            WHERE x.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED)
    "#;

    /// A row removed by hand: the never-registered hint of its service goes back to its machine id, which
    /// a claim may hand out again once its tombstone has passed.
    LOWER_UNREGISTERED_FROM(service: text, machine_id: integer) = r#"
        UPDATE idgen_private.idgen_layouts l
        SET unregistered_from = $2
        WHERE l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND l.unregistered_from OPERATOR(pg_catalog.>) $2
    "#;

    /// Every row truncated: every service's never-registered hint goes back to the start of its pool.
    RESET_UNREGISTERED_FROM() = r#"
        UPDATE idgen_private.idgen_layouts l
        SET unregistered_from = l.pool_first
        WHERE l.unregistered_from OPERATOR(pg_catalog.<>) l.pool_first
    "#;

    /// Takes a guard row unless another transaction holds it (see `idgen_core::guard`).
    TAKE_GUARD(service: text, bucket: integer) = r#"
        SELECT EXISTS (
            SELECT
            FROM idgen_private.idgen_claim_guards g
            WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND g.bucket OPERATOR(pg_catalog.=) $2 FOR UPDATE SKIP LOCKED)
    "#;

    /// Whether a guard row exists (a guard not taken may be held by another transaction, or missing).
    GUARD_EXISTS(service: text, bucket: integer) = r#"
        SELECT EXISTS (
            SELECT
            FROM idgen_private.idgen_claim_guards g
            WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND g.bucket OPERATOR(pg_catalog.=) $2)
    "#;

    /// Releases the claimant's held row if its bound is further ahead of the clock than the claimant
    /// may wait, keeping the bound as the row's watermark.
    RELEASE_OWN_ROW_AHEAD(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        tolerance: interval, takeback_age: interval,
    ) = r#"
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
        RETURNING n.machine_id::pg_catalog.int4, own.bound, own.reported, own.last_seen
    "#;

    /// Releases the claimant's held row outside this server's `idgen.machine_id_range`, keeping the bound.
    RELEASE_OWN_ROW_OUTSIDE_RANGE(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        takeback_age: interval, first_machine_id: integer, last_machine_id: integer,
    ) = r#"
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
        RETURNING n.machine_id::pg_catalog.int4, n.issued_until
    "#;

    /// Claim step 1: bumps the claimant's own row (held, or else released by it) in the range, unless
    /// locked or its bound is too far ahead. The bound of a held service row is its last report plus the
    /// lease it was granted: another live process with the same identity may still be stamping, so the
    /// identity moves (see [`RELEASE_OWN_ROW_AHEAD`]) instead of sharing the id.
    REUSE_OWN_ROW(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        tolerance: interval, takeback_age: interval, window: interval, first_machine_id: integer,
        last_machine_id: integer,
    ) = r#"
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
        RETURNING n.machine_id::pg_catalog.int4, n.version, n.lease_until, n.last_seen, own.bound, n.issued_until, own.was_released
    "#;

    /// A new connection's claim: [`REUSE_OWN_ROW`] without its choice of a released row, so that a new
    /// backend plans the least (the held row is unique: `system_nodes_node_identity`).
    REUSE_OWN_HELD_ROW(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        tolerance: interval, takeback_age: interval, window: interval, first_machine_id: integer,
        last_machine_id: integer,
    ) = r#"
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
        RETURNING n.machine_id::pg_catalog.int4, n.version, n.lease_until, n.last_seen, own.bound, n.issued_until
    "#;

    /// The claimant's held row, locked or not (to tell busy from absent).
    OWN_HELD_ROW(service: text, host: inet, port: integer, backend_slot: integer) = r#"
        SELECT n.machine_id::pg_catalog.int4
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.host OPERATOR(pg_catalog.=) $2
          AND n.port OPERATOR(pg_catalog.=) $3
          AND COALESCE(n.backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)
          AND n.released_at IS NULL
    "#;

    /// Claim step 2: the machine ids of `first..=last` (a batch of the range) with no row, lowest first, and
    /// whether each has a tombstone (a row removed by hand) further ahead than the claimant may wait.
    UNREGISTERED_MACHINE_IDS(service: text, first: integer, last: integer, tolerance: interval) = r#"
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
        ORDER BY m
    "#;

    /// The tombstone of the range whose machine id has no row and which is further ahead than the
    /// claimant may wait, soonest first: what a claim that found nothing else waits for.
    SOONEST_TOMBSTONE_AHEAD(
        service: text, first_machine_id: integer, last_machine_id: integer, tolerance: interval,
    ) = r#"
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
        LIMIT 1
    "#;

    /// Claim step 2: inserts a machine id for the claimant if its guard is free, at the version after
    /// `version_base` ([`READ_VERSION_BASE`]). A machine id whose row was removed by hand continues from
    /// its tombstone: its bound and a newer version.
    INSERT_UNREGISTERED(
        service: text, host: inet, port: integer, backend_slot: integer, lease: interval,
        tolerance: interval, takeback_age: interval, window: interval, machine_id: integer,
        guard_bucket: integer, version_base: bigint,
    ) = r#"
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
        FROM inserted
    "#;

    /// The row of a machine id, as facts for messages.
    CURRENT_ROW(service: text, machine_id: integer) = r#"
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
          AND n.machine_id OPERATOR(pg_catalog.=) $2
    "#;

    /// What the holders of a machine id may have stamped (its row's bound), in Unix ms, and the server
    /// clock: why a claim of it by number must wait.
    ROW_BOUND(service: text, machine_id: integer, lease: interval, takeback_age: interval) = r#"
        SELECT pg_catalog.floor(EXTRACT(epoch FROM idgen_private.holder_bound(n, $3, $4)) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
            pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000::numeric)::bigint
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.=) $2
          AND pg_catalog.isfinite(idgen_private.holder_bound(n, $3, $4))
    "#;

    /// How many machine ids of the range are registered.
    COUNT_HELD(service: text, first_machine_id: integer, last_machine_id: integer) = r#"
        SELECT pg_catalog.count(*)
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.>=) $2
          AND n.machine_id OPERATOR(pg_catalog.<=) $3
    "#;

    /// The least recently seen row of the range, as facts for messages.
    LEAST_RECENTLY_SEEN(service: text, first_machine_id: integer, last_machine_id: integer) = r#"
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
        LIMIT 1
    "#;

    /// A version-checked heartbeat: a new grant, and the watermark raised to the report (or the server's
    /// clock). Returns the grant and the watermark the row holds now (a node's watermark never goes
    /// back: a report behind the one held before leaves that one, and is recorded). The grant never goes
    /// back either: the answer may never reach the node (lost after the commit), which then holds the
    /// grant before, so a lease shortened by a reload starts once that one has ended.
    HEARTBEAT(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, lease: interval, reported: timestamptz, takeback_age: interval, now: timestamptz,
    ) = r#"
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
        RETURNING lease_until, issued_until
    "#;

    /// [`HEARTBEAT`], keeping what the node reports at its version (objects of 0.6.0 on): its clock's
    /// offset from the server's (the reported watermark minus the server clock at the heartbeat; NULL
    /// without a report, and never the watermark held, which may be ahead of the report) and its
    /// generator's counts since the claim.
    HEARTBEAT_REPORTING(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, lease: interval, reported: timestamptz, takeback_age: interval,
        clock_backward_waits: bigint, clock_backward_refusals: bigint, sequence_exhaustions: bigint,
        now: timestamptz,
    ) = r#"
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
        RETURNING lease_until, issued_until
    "#;

    /// A version-checked release: a new version, the cooldown starts, the watermark rises to the report,
    /// which the holder makes after it stopped stamping. Without one (a release by hand, while the holder
    /// may go on until it learns of it) it rises to what the holder may still stamp as it holds the row
    /// ([`idgen_private.holder_bound`]: a node's last report plus its lease, and its take-back time; a
    /// backend's window), and at least to the clock plus `margin`. Returns the new version and watermark.
    RELEASE(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, margin: interval, reported: timestamptz, lease: interval, takeback_age: interval,
    ) = r#"
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
        RETURNING n.version, n.issued_until
    "#;

    /// A backend's version- and epoch-checked renewal that writes its next window.
    RENEW_BACKEND_LEASE(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, lease: interval, epoch: bigint, window: interval, takeback_age: interval,
    ) = r#"
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
        RETURNING n.last_seen, n.lease_until, n.issued_until
    "#;

    /// A backend's version- and epoch-checked read, for read-only transactions.
    READ_BACKEND_LEASE(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, lease: interval, epoch: bigint,
    ) = r#"
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
            WHERE r.epoch OPERATOR(pg_catalog.=) $8)
    "#;

    /// A backend's lease ends (the backend stopped, or its parked lease was closed): its last stamp (at or
    /// after its lease's not_before) in place of the window it wrote, and the row released at a new
    /// version, if it is still the lease's, so that an ended session holds no id of its service's pool:
    /// the slot's next backend takes it back, any claim after the cooldown.
    CLOSE_BACKEND_LEASE(
        service: text, machine_id: integer, host: inet, port: integer, backend_slot: integer,
        version: bigint, epoch: bigint, last_stamp: timestamptz,
    ) = r#"
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
            WHERE r.epoch OPERATOR(pg_catalog.=) $7)
    "#;

    /// An alert to the listeners of `idgen_alert`.
    NOTIFY_ALERT(channel: text, payload: text) = r#"
        SELECT pg_catalog.pg_notify($1, $2)
    "#;

    /// Who a role is, for a service: its name, superuser, extension owner, member of the service;
    /// and whether the service is granted to any role or has registry rows (with a layout, the
    /// other way a service exists: `LAYOUT_EXISTS`, for the objects of 0.7.0 on).
    /// Run with the latest snapshot (`spi::first_row_with_latest_snapshot`).
    CALLER_STANDING(role: oid, service: text) = r#"
        SELECT r.rolname::text, r.rolsuper, r.oid OPERATOR(pg_catalog.=) e.extowner, EXISTS (
            SELECT
            FROM idgen_private.idgen_service_members m
            WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2
              AND pg_catalog.pg_has_role($1, m.member::pg_catalog.oid, 'MEMBER')),
            EXISTS (SELECT FROM idgen_private.idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2)
            OR EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $2)
        FROM pg_catalog.pg_roles r, pg_catalog.pg_extension e
        WHERE r.oid OPERATOR(pg_catalog.=) $1
          AND e.extname OPERATOR(pg_catalog.=) 'idgen'::name
    "#;

    /// The role of a name (as `pg_roles` shows it), if any.
    ROLE_BY_NAME(role_name: text) = r#"
        SELECT r.oid
        FROM pg_catalog.pg_roles r
        WHERE r.rolname OPERATOR(pg_catalog.=) $1::name
    "#;

    /// Grants a service to a role; true when the grant is new.
    GRANT_SERVICE(service: text, role: oid) = r#"
        INSERT INTO idgen_private.idgen_service_members (service, member) VALUES ($1, $2::pg_catalog.regrole)
        ON CONFLICT DO NOTHING
        RETURNING true
    "#;

    /// Revokes a service from a role; true when there was a grant.
    REVOKE_SERVICE(service: text, role: oid) = r#"
        DELETE FROM idgen_private.idgen_service_members m
        WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND m.member::pg_catalog.oid OPERATOR(pg_catalog.=) $2
        RETURNING true
    "#;

    /// The oid of the grants' table, which sessions watch for changes.
    SERVICE_MEMBERS_OID() = r#"
        SELECT 'idgen_private.idgen_service_members'::pg_catalog.regclass::pg_catalog.oid
    "#;

    /// Inserts a history event (JSON whose keys are the columns; `at` missing: the clock). Nothing when
    /// its event_id is taken (the numbering went back: a restore over a live database resets the dumped
    /// sequence); see [`RESYNC_EVENT_IDS`].
    INSERT_EVENT(event: text) = r#"
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
        RETURNING 1
    "#;

    /// Inserts a refusal event unless one of its kind was recorded for its service within
    /// `refusal_interval` (or its event_id is taken, as above).
    INSERT_REFUSAL(event: text, refusal_interval: interval) = r#"
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
        RETURNING 1
    "#;

    /// Moves the events' numbering past the last event recorded, never back: an event another
    /// session is recording (not visible yet) may hold a number above the last one visible.
    RESYNC_EVENT_IDS() = r#"
        SELECT pg_catalog.setval('idgen_private.idgen_history_event_id_seq'::pg_catalog.regclass,
                                 GREATEST(m.last, s.last_value))
        FROM (
            SELECT pg_catalog.max(h.event_id) AS last
            FROM idgen_private.idgen_history h) m,
            idgen_private.idgen_history_event_id_seq s
        WHERE m.last IS NOT NULL
    "#;

    /// Whether a refusal of a kind was recorded for a service within `refusal_interval`.
    REFUSAL_RECORDED_RECENTLY(service: text, event: text, refusal_interval: interval) = r#"
        SELECT EXISTS (
            SELECT
            FROM idgen_private.idgen_history h
            WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
              AND h.event OPERATOR(pg_catalog.=) $2
              AND h.at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $3))
    "#;

    /// Whether the caller may read `service` in the idgen views (`idgen_visibility`, as the caller).
    SERVICE_VISIBLE(service: text) = r#"
        SELECT v.reads_all OR $1 OPERATOR(pg_catalog.=) ANY (v.services)
        FROM idgen_private.visibility v
    "#;

    /// The turn to record a refusal: one session at a time (the registry's row, locked until the refused
    /// call's transaction ends; a session that finds it taken records nothing), so that concurrent
    /// refusals never start workers together, nor record one kind twice.
    TAKE_REFUSAL_TURN() = r#"
        SELECT true
        FROM idgen_private.idgen_registry r FOR NO KEY
        UPDATE SKIP LOCKED
    "#;

    /// How many machine ids of the range a claim cannot get without a take-back, or before their time:
    /// held, released less than `cooldown` ago, or released with a watermark still ahead of the clock
    /// (its holders' bound, after a release by hand). "In use" as `idgen_capacity` counts it: every
    /// state of `idgen_nodes` but `released` (tests/cluster/tests/one_source.rs ties the two).
    COUNT_IN_USE(
        service: text, cooldown: interval, first_machine_id: integer, last_machine_id: integer,
    ) = r#"
        SELECT pg_catalog.count(*)
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.>=) $3
          AND n.machine_id OPERATOR(pg_catalog.<=) $4
          AND (n.released_at IS NULL
               OR n.released_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) $2)
               OR n.issued_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
    "#;

    /// The highest machine id of the range with a row: no more rows than up to it can be in use (the
    /// capacity alert counts only when that could pass a level).
    HIGHEST_REGISTERED(service: text, first_machine_id: integer, last_machine_id: integer) = r#"
        SELECT pg_catalog.max(n.machine_id)::pg_catalog.int4
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.>=) $2
          AND n.machine_id OPERATOR(pg_catalog.<=) $3
    "#;

    /// The capacity level announced last for a service: the kind of its newest capacity event (the
    /// three kinds are the parameters, `EventKind::of_capacity`), newest by the order of recording,
    /// which a clock stepped back does not change; no row: none announced since the history began
    /// or was purged.
    CAPACITY_ANNOUNCED(service: text, warning_event: text, critical_event: text, cleared_event: text) = r#"
        SELECT h.event
        FROM idgen_private.idgen_history h
        WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND h.event OPERATOR(pg_catalog.=) ANY (ARRAY[$2, $3, $4])
        ORDER BY h.event_id DESC
        LIMIT 1
    "#;

    /// Whether a synchronous standby streams from this server now.
    SYNCHRONOUS_STANDBY_STREAMING() = r#"
        SELECT EXISTS (
            SELECT
            FROM pg_catalog.pg_stat_replication r
            WHERE r.state OPERATOR(pg_catalog.=) 'streaming'::text
              AND r.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text]))
    "#;

    /// A row deleted by hand leaves its bound and version as a tombstone (`lease` and `takeback_age`
    /// stand in for a row that records no terms).
    TOMBSTONE_ROW(service: text, machine_id: integer, lease: interval, takeback_age: interval) = r#"
        INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound)
        SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, $3, $4)
        FROM idgen_private.nodes n
        WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.=) $2
        ON CONFLICT (service, machine_id) DO
        UPDATE
        SET version = GREATEST(t.version, excluded.version),
            bound = GREATEST(t.bound, excluded.bound),
            removed_at = excluded.removed_at
    "#;

    /// Every row truncated leaves its tombstone (as [`TOMBSTONE_ROW`]).
    TOMBSTONE_ALL(lease: interval, takeback_age: interval) = r#"
        INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound)
        SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, $1, $2)
        FROM idgen_private.nodes n
        ON CONFLICT (service, machine_id) DO
        UPDATE
        SET version = GREATEST(t.version, excluded.version),
            bound = GREATEST(t.bound, excluded.bound),
            removed_at = excluded.removed_at
    "#;

    /// TRUNCATE starts a new epoch: leases granted before it are dropped at their next check.
    NEW_EPOCH() = r#"
        UPDATE idgen_private.idgen_registry r
        SET epoch = r.epoch OPERATOR(pg_catalog.+) 1
    "#;

    /// A row inserted (by hand, by a restore, or by a claim) takes the tombstone of its machine id, if
    /// any: its bound as watermark and a newer version.
    MERGE_TOMBSTONE(service: text, machine_id: integer) = r#"
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
          AND n.machine_id OPERATOR(pg_catalog.=) $2
    "#;

    /// Before a DROP of the registry is checked: no claim, renewal or report may commit between the check
    /// and the DROP. Every table of idgen's, in the mode the DROP itself takes, so that the DROP never
    /// waits for a lock while it holds another (claims would queue behind it). Without waiting: any
    /// transaction that uses the registry, a read included, fails the DROP (55P03).
    LOCK_REGISTRY_FOR_DROP() = r#"
        LOCK TABLE idgen_private.nodes,
            idgen_private.idgen_tombstones,
            idgen_private.idgen_registry,
            idgen_private.idgen_claim_guards,
            idgen_private.idgen_service_members,
            idgen_private.idgen_history,
            idgen_private.idgen_history_purged IN ACCESS EXCLUSIVE MODE NOWAIT
    "#;

    /// The other sessions holding a lock on the registry's tables (what a DROP of it does not wait for):
    /// pid, role, application, state and the start of their transaction. Names resolved when it runs.
    REGISTRY_LOCK_HOLDERS() = r#"
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
        ORDER BY a.xact_start, a.pid
    "#;

    /// [`LOCK_REGISTRY_FOR_DROP`] for the layouts (objects of 0.7.0 on): a claim reads them.
    LOCK_LAYOUTS_FOR_DROP() = r#"
        LOCK TABLE idgen_private.idgen_layouts IN ACCESS EXCLUSIVE MODE NOWAIT
    "#;

    /// What a DROP of the registry would forget while it may still be stamped: every row and tombstone
    /// whose bound is ahead of the clock, latest first; a row's holder as host, port, slot.
    STILL_STAMPING(lease: interval, takeback_age: interval) = r#"
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
        ORDER BY s.bound DESC, s.service, s.machine_id
    "#;

    /// The events of a machine id the caller may read, in order (`idgen_explain`, as the caller); times
    /// as Unix ms, NULL when infinite.
    EVENTS_OF_MACHINE_ID(service: text, machine_id: integer) = r#"
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
        ORDER BY e.event_id
    "#;

    /// The services the caller may read that have (or had) a machine id (all of them, or the one
    /// named), and whether events of them were purged.
    SERVICES_OF_MACHINE_ID(machine_id: integer, service: text) = r#"
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
        ORDER BY s.service
    "#;

    /// The services the caller may read that have registry rows or events (all of them, or the one named),
    /// with their layouts as recorded (NULL: none; objects of 0.7.0 on) and whether events of them were
    /// purged: the services an ID may be of.
    SERVICES_TO_EXPLAIN(service: text) = r#"
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
        ORDER BY s.service
    "#;

    /// The registry row of a machine id, if the caller may read it: holder and version.
    NODE_OF_MACHINE_ID(service: text, machine_id: integer) = r#"
        SELECT pg_catalog.host(n.host), n.port, n.backend_slot, n.version
        FROM idgen_private.visible_nodes n
        WHERE n.service OPERATOR(pg_catalog.=) $1
          AND n.machine_id OPERATOR(pg_catalog.=) $2
    "#;
}

/// The checked-in rendering of every statement (`docs/runtime_statements.sql`).
#[allow(dead_code)] // the tests, which include this file
pub fn render() -> String {
    let mut out = String::from(
        "-- Every statement idgen runs at run time, as it runs: rendered from src/statements.rs by\n\
         -- scripts/render_statements.sh and compared by tests/cluster/tests/runtime_sql.rs. Do not edit.\n",
    );
    for statement in ALL {
        out.push_str(&format!("\n-- {}\n", statement.name));
        for line in statement.doc.lines() {
            out.push_str(&format!("--{}\n", line));
        }
        for (i, param) in statement.params.iter().enumerate() {
            out.push_str(&format!("--   ${} {} {}\n", i + 1, param.name, param.sql_type));
        }
        out.push_str(&statement.trimmed());
        out.push_str(";\n");
    }
    out
}
