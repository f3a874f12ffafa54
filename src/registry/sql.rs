//! Every SQL statement that idgen runs with the extension owner's rights, as
//! complete constants. Plain Rust with no pgrx, so that the meta-test in
//! tests/cluster/tests/hijack.rs can include this file and check each statement;
//! the edge modules hold no SQL of their own.
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
//! - parameters carry exact types (`$n::float8` durations, `integer` slots), and
//!   durations are `float8 * interval`, pg_catalog's own operator.
//!
//! Claims never wait on another session: node identities and new machine ids
//! are guarded by rows of `idgen_private.idgen_claim_guards` locked `FOR UPDATE
//! SKIP LOCKED` (never advisory locks, whose keys any role can hold), and rows
//! likewise.

/// `$n` seconds as an interval (`float8 * interval`, matched exactly in pg_catalog).
#[rustfmt::skip]
macro_rules! secs {
    ($n:literal) => {
        concat!("(", $n, "::float8 OPERATOR(pg_catalog.*) interval '1 second')")
    };
}

/// `$n` milliseconds as an interval.
#[rustfmt::skip]
macro_rules! millis {
    ($n:literal) => {
        concat!("(", $n, "::float8 OPERATOR(pg_catalog.*) interval '1 millisecond')")
    };
}

/// The columns of `RowFacts`, for a table or alias `$t`, times as UTC ISO-8601.
#[rustfmt::skip]
macro_rules! facts_columns {
    ($t:literal) => {
        concat!(
            $t, ".machine_id, pg_catalog.host(", $t, ".host), ", $t, ".port, ", $t, ".version, ",
            "pg_catalog.to_char(", $t, ".last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), ",
            "GREATEST(0, pg_catalog.floor(EXTRACT(epoch FROM (pg_catalog.now() OPERATOR(pg_catalog.-) ", $t, ".last_seen))))::bigint, ",
            "pg_catalog.to_char(", $t, ".released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), ",
            $t, ".backend_slot"
        )
    };
}

/// The columns of `Won` after an UPDATE or INSERT of `$t`; `$bound` is the earlier holders' bound.
#[rustfmt::skip]
macro_rules! won_columns {
    ($t:literal, $bound:literal) => {
        concat!($t, ".machine_id, ", $t, ".version, ", $t, ".lease_until, ", $t, ".last_seen, ", $bound, ", ", $t, ".issued_until")
    };
}

/// The holder bound of row `$t` of `idgen_private.nodes`, with today's lease in `$5` and
/// take-back age in `$9` (seconds) standing in for rows that record no terms.
#[rustfmt::skip]
macro_rules! holder_bound {
    ($t:literal) => {
        concat!("idgen_private.holder_bound(", $t, ", ", secs!("$5"), ", ", secs!("$9"), ")")
    };
}

/// A claim's grant, written with the moment `t.now`: the row is seen now, its lease runs
/// `$5` seconds and no take-back comes before `$9` seconds, as today's settings grant them.
#[rustfmt::skip]
macro_rules! grant_terms {
    () => {
        concat!(
            "last_seen = t.now, lease_until = t.now OPERATOR(pg_catalog.+) ", secs!("$5"),
            ", takeover_at = t.now OPERATOR(pg_catalog.+) ", secs!("$9")
        )
    };
}

/// The moment of a write, read once, as `t.now`.
#[rustfmt::skip]
macro_rules! write_moment {
    () => {
        "(SELECT pg_catalog.clock_timestamp() AS now) t"
    };
}

/// The server's clock plus `$n` milliseconds.
#[rustfmt::skip]
macro_rules! clock_plus_millis {
    ($n:literal) => {
        concat!("(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ", millis!($n), ")")
    };
}

/// Rows `$t` and `n` are the same row.
#[rustfmt::skip]
macro_rules! same_row {
    ($t:literal) => {
        concat!(
            "n.service::pg_catalog.text OPERATOR(pg_catalog.=) ", $t, ".service::pg_catalog.text AND n.machine_id OPERATOR(pg_catalog.=) ",
            $t, ".machine_id"
        )
    };
}

/// Row `$t`'s machine id is in this server's `idgen.machine_id_range`, `$11..=$12`.
#[rustfmt::skip]
macro_rules! in_range {
    ($t:literal) => {
        concat!(
            $t, ".machine_id OPERATOR(pg_catalog.>=) $11 AND ", $t, ".machine_id OPERATOR(pg_catalog.<=) $12"
        )
    };
}

/// A take-over: lock one victim row without waiting, hand it to the claimant with a new grant.
/// Returns the won row (columns 1-6) and the previous holder's facts (7-14).
/// Parameters: $1-$4 the claimant, $5 lease (s), $6 minimum idle age (s), $7 cooldown (s),
/// $8 tolerance (ms), $9 take-back age (s), $10 window (ms), $11-$12 the machine-id range.
#[rustfmt::skip]
macro_rules! take_over_sql {
    ($order:literal; $($filter:expr),+) => {
        concat!(
            "WITH victim AS (SELECT v.*, ", holder_bound!("v"), " AS bound FROM idgen_private.nodes v ",
            "WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND ", in_range!("v"), " AND ", $($filter),+,
            " AND ", holder_bound!("v"), " OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"),
            " ORDER BY ", $order, ", v.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
            "UPDATE idgen_private.nodes n SET host = $2, port = $3, backend_slot = $4, ",
            "version = n.version OPERATOR(pg_catalog.+) 1, ", grant_terms!(), ", released_at = NULL, ",
            "issued_until = GREATEST(v.bound, t.now OPERATOR(pg_catalog.+) ", millis!("$10"), ") ",
            "FROM victim v, ", write_moment!(), " WHERE ", same_row!("v"),
            " RETURNING ", won_columns!("n", "v.bound"), ", ", facts_columns!("v")
        )
    };
}

/// `pg_catalog.now()` less `$n` seconds.
#[rustfmt::skip]
macro_rules! ago {
    ($n:literal) => {
        concat!("(pg_catalog.now() OPERATOR(pg_catalog.-) ", secs!($n), ")")
    };
}

/// The caller's own rows: `$1..$4` are service, host, port and backend_slot (slots are never negative).
#[rustfmt::skip]
macro_rules! own_identity {
    ($t:literal) => {
        concat!(
            $t, ".service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND ", $t, ".host OPERATOR(pg_catalog.=) $2 AND ",
            $t, ".port OPERATOR(pg_catalog.=) $3 AND COALESCE(", $t, ".backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($4, -1)"
        )
    };
}

/// The row a holding names, still held: `$1..$6` are service, machine_id,
/// host, port, backend_slot and version.
#[rustfmt::skip]
macro_rules! holding_matches {
    () => {
        "service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND machine_id OPERATOR(pg_catalog.=) $2 AND host OPERATOR(pg_catalog.=) $3 \
         AND port OPERATOR(pg_catalog.=) $4 AND COALESCE(backend_slot, -1) OPERATOR(pg_catalog.=) COALESCE($5, -1) \
         AND version OPERATOR(pg_catalog.=) $6 AND released_at IS NULL"
    };
}

/// Locks guard `($s, $b)` of `idgen_private.idgen_claim_guards` unless another transaction holds it
/// (see `idgen_core::guard`).
#[rustfmt::skip]
macro_rules! guard_taken {
    ($s:literal, $b:literal) => {
        concat!(
            "EXISTS (SELECT FROM idgen_private.idgen_claim_guards g WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) ", $s,
            " AND g.bucket OPERATOR(pg_catalog.=) ", $b, " FOR UPDATE SKIP LOCKED)"
        )
    };
}

/// Step 3: a released row past its cooldown.
pub const TAKE_RELEASED: &str = take_over_sql!("v.released_at"; "v.released_at OPERATOR(pg_catalog.<=) ", ago!("$7"));
/// Steps 4 to 6: a row idle past the step's age, and past the take-back time its holder was granted.
pub const TAKE_IDLE: &str = take_over_sql!(
    "v.last_seen";
    "v.last_seen OPERATOR(pg_catalog.<) ", ago!("$6"),
    " AND (v.takeover_at IS NULL OR v.takeover_at OPERATOR(pg_catalog.<) pg_catalog.now())",
    " AND (v.released_at IS NULL OR v.released_at OPERATOR(pg_catalog.<=) ", ago!("$7"), ")"
);

/// The registry's epoch.
pub const READ_REGISTRY: &str = "SELECT r.epoch FROM idgen_private.idgen_registry r";

/// Whether service $1 has its guard rows.
pub const GUARDS_EXIST: &str = "SELECT EXISTS (SELECT FROM idgen_private.idgen_claim_guards g \
     WHERE g.service::pg_catalog.text OPERATOR(pg_catalog.=) $1)";

/// Creates the guard rows $2..=$3 of service $1 (in a transaction of their own).
pub const CREATE_GUARDS: &str = "INSERT INTO idgen_private.idgen_claim_guards (service, bucket) \
     SELECT $1, b FROM pg_catalog.generate_series($2::integer, $3::integer) AS b ON CONFLICT DO NOTHING";

/// Takes guard ($1, $2) unless another transaction holds it.
#[rustfmt::skip]
pub const TAKE_GUARD: &str = concat!("SELECT ", guard_taken!("$1", "$2"));

/// Releases the claimant's held row if its bound is further ahead than $8 ms, keeping the bound.
#[rustfmt::skip]
pub const RELEASE_OWN_ROW_AHEAD: &str = concat!(
    "WITH own AS (SELECT o.service, o.machine_id, ", holder_bound!("o"), " AS bound, o.issued_until AS reported, o.last_seen ",
    "FROM idgen_private.nodes o WHERE ",
    own_identity!("o"), " AND o.released_at IS NULL AND ", holder_bound!("o"), " OPERATOR(pg_catalog.>) ",
    clock_plus_millis!("$8"), " FOR UPDATE SKIP LOCKED) ",
    "UPDATE idgen_private.nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, released_at = pg_catalog.clock_timestamp(), ",
    "issued_until = GREATEST(n.issued_until, own.bound) FROM own WHERE ", same_row!("own"),
    " RETURNING n.machine_id, own.bound, own.reported, own.last_seen"
);

/// Releases the claimant's held row outside the machine-id range ($11-$12), keeping the bound.
#[rustfmt::skip]
pub const RELEASE_OWN_ROW_OUTSIDE_RANGE: &str = concat!(
    "WITH own AS (SELECT o.service, o.machine_id, ", holder_bound!("o"), " AS bound FROM idgen_private.nodes o WHERE ",
    own_identity!("o"), " AND o.released_at IS NULL AND NOT (", in_range!("o"), ") FOR UPDATE SKIP LOCKED) ",
    "UPDATE idgen_private.nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, released_at = pg_catalog.clock_timestamp(), ",
    "issued_until = GREATEST(n.issued_until, own.bound) FROM own WHERE ", same_row!("own"),
    " RETURNING n.machine_id, n.issued_until"
);

/// Step 1: bumps the claimant's own row (held, or else released by it) in the range ($11-$12)
/// unless locked or its bound is too far ahead. The bound of a held service row is its last
/// report plus the lease it was granted: another live process with the same identity may still
/// be stamping, so the identity moves (see RELEASE_OWN_ROW_AHEAD) instead of sharing the id.
#[rustfmt::skip]
pub const REUSE_OWN_ROW: &str = concat!(
    "WITH own AS (SELECT o.service, o.machine_id, ", holder_bound!("o"), " AS bound, o.released_at IS NOT NULL AS was_released ",
    "FROM idgen_private.nodes o WHERE ", own_identity!("o"), " AND ", in_range!("o"),
    " AND ", holder_bound!("o"), " OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"),
    " AND (o.released_at IS NULL OR NOT EXISTS (SELECT FROM idgen_private.nodes h WHERE ", own_identity!("h"),
    " AND h.released_at IS NULL)) ",
    "ORDER BY o.released_at IS NOT NULL, o.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
    "UPDATE idgen_private.nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, ", grant_terms!(), ", ",
    "released_at = NULL, issued_until = GREATEST(n.issued_until, own.bound, t.now OPERATOR(pg_catalog.+) ", millis!("$10"), ") ",
    "FROM own, ", write_moment!(), " WHERE ", same_row!("own"), " RETURNING ", won_columns!("n", "own.bound"), ", own.was_released"
);

/// A new connection's claim: bumps the claimant's row if it still holds it, in the range ($11-$12),
/// unlocked and its bound not too far ahead. [`REUSE_OWN_ROW`] without its choice of a released
/// row, so that a new backend plans the least: the held row is unique (`system_nodes_node_identity`).
#[rustfmt::skip]
pub const REUSE_OWN_HELD_ROW: &str = concat!(
    "WITH own AS (SELECT o.service, o.machine_id, ", holder_bound!("o"), " AS bound FROM idgen_private.nodes o WHERE ",
    own_identity!("o"), " AND o.released_at IS NULL AND ", in_range!("o"),
    " AND ", holder_bound!("o"), " OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"), " FOR UPDATE SKIP LOCKED) ",
    "UPDATE idgen_private.nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, ", grant_terms!(), ", ",
    "issued_until = GREATEST(n.issued_until, own.bound, t.now OPERATOR(pg_catalog.+) ", millis!("$10"), ") ",
    "FROM own, ", write_moment!(), " WHERE ", same_row!("own"), " RETURNING ", won_columns!("n", "own.bound")
);

/// The claimant's held row, locked or not (to tell busy from absent).
#[rustfmt::skip]
pub const OWN_HELD_ROW: &str = concat!(
    "SELECT n.machine_id FROM idgen_private.nodes n WHERE ",
    own_identity!("n"),
    " AND n.released_at IS NULL"
);

/// Step 2: machine ids of $1 in $2..=$3 with no row, lowest first, leaving out those whose
/// tombstone (a row removed by hand) is further ahead than $4 ms.
pub const UNREGISTERED_MACHINE_IDS: &str = "SELECT m::smallint FROM pg_catalog.generate_series($2::integer, $3::integer) AS m \
     WHERE NOT EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
                       AND n.machine_id OPERATOR(pg_catalog.=) m) \
       AND NOT EXISTS (SELECT FROM idgen_private.idgen_tombstones t WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
                       AND t.machine_id OPERATOR(pg_catalog.=) m \
                       AND t.bound OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) \
                           ($4::float8 OPERATOR(pg_catalog.*) interval '1 millisecond'))) \
     ORDER BY m";

/// The tombstone of service $1 in $2..=$3 whose machine id has no row and which is further
/// ahead than $4 ms, soonest first: what a claim that found nothing else waits for.
pub const SOONEST_TOMBSTONE_AHEAD: &str = "SELECT t.machine_id, t.bound FROM idgen_private.idgen_tombstones t \
     WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
       AND t.machine_id OPERATOR(pg_catalog.>=) $2 AND t.machine_id OPERATOR(pg_catalog.<=) $3 \
       AND t.bound OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) \
           ($4::float8 OPERATOR(pg_catalog.*) interval '1 millisecond')) \
       AND NOT EXISTS (SELECT FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
                       AND n.machine_id OPERATOR(pg_catalog.=) t.machine_id) \
     ORDER BY t.bound, t.machine_id LIMIT 1";

/// Step 2: inserts machine id $11 for the claimant if its guard ($1, $12) is free. A machine id
/// whose row was removed by hand continues from its tombstone: its bound and a newer version.
#[rustfmt::skip]
pub const INSERT_UNREGISTERED: &str = concat!(
    "WITH tomb AS (SELECT t.version, t.bound FROM idgen_private.idgen_tombstones t ",
    "WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND t.machine_id OPERATOR(pg_catalog.=) $11), ",
    "inserted AS (INSERT INTO idgen_private.nodes ",
    "(service, machine_id, host, port, backend_slot, version, last_seen, lease_until, takeover_at, issued_until) ",
    "SELECT $1, $11, $2, $3, $4, COALESCE((SELECT tomb.version FROM tomb), 0) OPERATOR(pg_catalog.+) 1, t.now, ",
    "t.now OPERATOR(pg_catalog.+) ", secs!("$5"), ", t.now OPERATOR(pg_catalog.+) ", secs!("$9"), ", ",
    "GREATEST((SELECT tomb.bound FROM tomb), t.now OPERATOR(pg_catalog.+) ", millis!("$10"), ") FROM ", write_moment!(),
    " WHERE ", guard_taken!("$1", "$12"),
    " AND NOT EXISTS (SELECT FROM tomb WHERE tomb.bound OPERATOR(pg_catalog.>) (t.now OPERATOR(pg_catalog.+) ", millis!("$8"), "))",
    " ON CONFLICT DO NOTHING RETURNING *) ",
    "SELECT ", won_columns!("inserted", "(SELECT tomb.bound FROM tomb)"), " FROM inserted"
);

/// The row of machine id $2 of service $1, as facts for messages.
#[rustfmt::skip]
pub const CURRENT_ROW: &str = concat!(
    "SELECT ",
    facts_columns!("n"),
    " FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2"
);

/// How many ids of service $1 in the range $2-$3 are registered.
pub const COUNT_HELD: &str =
    "SELECT pg_catalog.count(*) FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
     AND n.machine_id OPERATOR(pg_catalog.>=) $2 AND n.machine_id OPERATOR(pg_catalog.<=) $3";

/// The least recently seen row of service $1 in the range $2-$3, as facts for messages.
#[rustfmt::skip]
pub const LEAST_RECENTLY_SEEN: &str = concat!(
    "SELECT ",
    facts_columns!("n"),
    " FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.>=) $2",
    " AND n.machine_id OPERATOR(pg_catalog.<=) $3 ORDER BY n.last_seen, n.machine_id LIMIT 1"
);

/// The watermark the registry held for machine id ($1, $2) before the statement: what a
/// report is compared with (a node's watermark never goes back).
#[rustfmt::skip]
macro_rules! watermark_held {
    () => {
        "(SELECT o.issued_until AS held FROM idgen_private.nodes o \
          WHERE o.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND o.machine_id OPERATOR(pg_catalog.=) $2) held_before"
    };
}

/// A version-checked heartbeat ($1-$6 the holding, $7 lease s, $8 reported watermark, $9 take-back age s):
/// a new grant, and the watermark raised to the report (or the server's clock). Returns the
/// grant and the watermark held before.
#[rustfmt::skip]
pub const HEARTBEAT: &str = concat!(
    "UPDATE idgen_private.nodes SET last_seen = t.now, lease_until = t.now OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    ", takeover_at = t.now OPERATOR(pg_catalog.+) ",
    secs!("$9"),
    ", issued_until = GREATEST(issued_until, COALESCE($8, t.now)) FROM ",
    write_moment!(),
    ", ",
    watermark_held!(),
    " WHERE ",
    holding_matches!(),
    " RETURNING lease_until, held_before.held"
);

/// A version-checked release ($1-$6 the holding, $7 margin s, $8 reported watermark). Returns
/// the new version and watermark, and the watermark held before.
#[rustfmt::skip]
pub const RELEASE: &str = concat!(
    "UPDATE idgen_private.nodes SET version = version OPERATOR(pg_catalog.+) 1, released_at = t.now, ",
    "issued_until = GREATEST(issued_until, COALESCE($8, (t.now OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    "))) FROM ",
    write_moment!(),
    ", ",
    watermark_held!(),
    " WHERE ",
    holding_matches!(),
    " RETURNING version, issued_until, held_before.held"
);

/// A backend's version- and epoch-checked renewal that writes its next window ($7 lease s,
/// $8 epoch, $9 window ms, $10 take-back age s).
#[rustfmt::skip]
pub const RENEW_BACKEND_LEASE: &str = concat!(
    "WITH own AS (SELECT service, machine_id FROM idgen_private.nodes WHERE ",
    holding_matches!(),
    " AND EXISTS (SELECT FROM idgen_private.idgen_registry r WHERE r.epoch OPERATOR(pg_catalog.=) $8) FOR UPDATE SKIP LOCKED) ",
    "UPDATE idgen_private.nodes n SET last_seen = t.now, lease_until = t.now OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    ", takeover_at = t.now OPERATOR(pg_catalog.+) ",
    secs!("$10"),
    ", issued_until = GREATEST(n.issued_until, t.now OPERATOR(pg_catalog.+) ",
    millis!("$9"),
    ") FROM own, ",
    write_moment!(),
    " WHERE ",
    same_row!("own"),
    " RETURNING n.last_seen, n.lease_until, n.issued_until"
);

/// A backend's version- and epoch-checked read, for read-only transactions ($7 lease s, $8 epoch).
#[rustfmt::skip]
pub const READ_BACKEND_LEASE: &str = concat!(
    "SELECT pg_catalog.clock_timestamp(), COALESCE(lease_until, last_seen OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    "), issued_until FROM idgen_private.nodes WHERE ",
    holding_matches!(),
    " AND EXISTS (SELECT FROM idgen_private.idgen_registry r WHERE r.epoch OPERATOR(pg_catalog.=) $8)"
);

/// A backend that stops records its last stamp ($8, a timestamptz at or after its lease's
/// not_before) in place of the window it wrote, if the row is still its own ($1-$6, epoch $7).
#[rustfmt::skip]
pub const CLOSE_BACKEND_LEASE: &str = concat!(
    "UPDATE idgen_private.nodes SET issued_until = $8 WHERE ",
    holding_matches!(),
    " AND issued_until OPERATOR(pg_catalog.>) $8",
    " AND EXISTS (SELECT FROM idgen_private.idgen_registry r WHERE r.epoch OPERATOR(pg_catalog.=) $7)"
);

/// An alert to listeners of `idgen_alert` ($1 the channel, $2 the payload).
pub const NOTIFY_ALERT: &str = "SELECT pg_catalog.pg_notify($1, $2)";

/// Who the role $1 is, for service $2: its name, superuser, extension owner, member of the service.
pub const CALLER_STANDING: &str = "SELECT r.rolname::text, r.rolsuper, r.oid OPERATOR(pg_catalog.=) e.extowner, \
     EXISTS (SELECT FROM idgen_private.idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2 \
             AND pg_catalog.pg_has_role($1, m.member::pg_catalog.oid, 'MEMBER')) \
     FROM pg_catalog.pg_roles r, pg_catalog.pg_extension e \
     WHERE r.oid OPERATOR(pg_catalog.=) $1 AND e.extname OPERATOR(pg_catalog.=) 'idgen'::name";

/// The role named $1 (as `pg_roles` shows it), if any.
pub const ROLE_BY_NAME: &str =
    "SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) $1::name";

/// Grants service $1 to role $2; true when the grant is new.
pub const GRANT_SERVICE: &str =
    "INSERT INTO idgen_private.idgen_service_members (service, member) VALUES ($1, $2::pg_catalog.regrole) \
     ON CONFLICT DO NOTHING RETURNING true";

/// Revokes service $1 from role $2; true when there was a grant.
pub const REVOKE_SERVICE: &str =
    "DELETE FROM idgen_private.idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
     AND m.member::pg_catalog.oid OPERATOR(pg_catalog.=) $2 RETURNING true";

/// The oid of the grants' table, which sessions watch for changes.
pub const SERVICE_MEMBERS_OID: &str =
    "SELECT 'idgen_private.idgen_service_members'::pg_catalog.regclass::pg_catalog.oid";

/// The columns an event sets, from history event $1 (JSON whose keys are the columns; `at` missing: the clock).
#[rustfmt::skip]
macro_rules! event_values {
    () => {
        "SELECT COALESCE(e.at, pg_catalog.clock_timestamp()), e.event, e.service, e.machine_id, e.version, e.outcome, e.host, \
         e.port, e.backend_slot, e.role, e.pid, e.not_before, e.issued_until, e.previous_host, e.previous_port, \
         e.previous_backend_slot, e.previous_version, e.previous_idle_seconds, e.previous_bound, e.detail \
         FROM pg_catalog.json_populate_record(NULL::idgen_private.idgen_history, $1::pg_catalog.json) e"
    };
}

/// The history's columns, in the order `event_values!` gives them.
#[rustfmt::skip]
macro_rules! event_columns {
    () => {
        "INSERT INTO idgen_private.idgen_history (at, event, service, machine_id, version, outcome, host, port, \
         backend_slot, role, pid, not_before, issued_until, previous_host, previous_port, previous_backend_slot, \
         previous_version, previous_idle_seconds, previous_bound, detail) "
    };
}

/// Inserts history event $1. Nothing when its event_id is taken (the numbering went back: a
/// restore over a live database resets the dumped sequence); see [`RESYNC_EVENT_IDS`].
pub const INSERT_EVENT: &str =
    concat!(event_columns!(), event_values!(), " ON CONFLICT (event_id) DO NOTHING RETURNING 1");

/// Inserts refusal event $1 unless one of its kind was recorded for its service within $2 seconds
/// (or its event_id is taken, as above).
#[rustfmt::skip]
pub const INSERT_REFUSAL: &str = concat!(
    event_columns!(),
    event_values!(),
    " WHERE NOT EXISTS (SELECT FROM idgen_private.idgen_history h WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) e.service::pg_catalog.text",
    " AND h.event OPERATOR(pg_catalog.=) e.event AND h.at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) ",
    secs!("$2"),
    ")) ON CONFLICT (event_id) DO NOTHING RETURNING 1"
);

/// Moves the events' numbering past the last event recorded.
pub const RESYNC_EVENT_IDS: &str = "SELECT pg_catalog.setval('idgen_private.idgen_history_event_id_seq'::pg_catalog.regclass, \
     m.last) FROM (SELECT pg_catalog.max(h.event_id) AS last FROM idgen_private.idgen_history h) m WHERE m.last IS NOT NULL";

/// The turn to record a refusal: one session at a time (the registry's row, locked until the
/// refused call's transaction ends; a session that finds it taken records nothing), so that
/// concurrent refusals never start workers together, nor record one kind twice.
pub const TAKE_REFUSAL_TURN: &str = "SELECT true FROM idgen_private.idgen_registry r FOR NO KEY UPDATE SKIP LOCKED";

/// Whether a refusal of kind $2 was recorded for service $1 within $3 seconds.
#[rustfmt::skip]
pub const REFUSAL_RECORDED_RECENTLY: &str = concat!(
    "SELECT EXISTS (SELECT FROM idgen_private.idgen_history h WHERE h.service::pg_catalog.text OPERATOR(pg_catalog.=) $1",
    " AND h.event OPERATOR(pg_catalog.=) $2 AND h.at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) ",
    secs!("$3"),
    "))"
);

/// How many machine ids of service $1 in the range $3-$4 a claim cannot get without a take-back:
/// held, or released less than $2 seconds (the cooldown) ago: every state but `NodeState::Released`.
#[rustfmt::skip]
pub const COUNT_IN_USE: &str = concat!(
    "SELECT pg_catalog.count(*) FROM idgen_private.nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 ",
    "AND n.machine_id OPERATOR(pg_catalog.>=) $3 AND n.machine_id OPERATOR(pg_catalog.<=) $4 ",
    "AND (n.released_at IS NULL OR n.released_at OPERATOR(pg_catalog.>) ",
    ago!("$2"),
    ")"
);

/// Whether a synchronous standby streams from this server now.
pub const SYNCHRONOUS_STANDBY_STREAMING: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_replication r \
     WHERE r.state OPERATOR(pg_catalog.=) 'streaming'::text \
     AND r.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text]))";

/// A row deleted by hand ($1 service, $2 machine id) leaves its bound and version as a tombstone
/// ($3 lease s and $4 take-back age s stand in for a row that records no terms).
pub const TOMBSTONE_ROW: &str = "INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound) \
     SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, \
            ($3::float8 OPERATOR(pg_catalog.*) interval '1 second'), ($4::float8 OPERATOR(pg_catalog.*) interval '1 second')) \
       FROM idgen_private.nodes n \
      WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2 \
     ON CONFLICT (service, machine_id) DO UPDATE SET version = GREATEST(t.version, excluded.version), \
            bound = GREATEST(t.bound, excluded.bound), removed_at = excluded.removed_at";

/// Every row truncated leaves its tombstone ($1 lease s, $2 take-back age s as above).
pub const TOMBSTONE_ALL: &str = "INSERT INTO idgen_private.idgen_tombstones AS t (service, machine_id, version, bound) \
     SELECT n.service, n.machine_id, n.version, idgen_private.holder_bound(n, \
            ($1::float8 OPERATOR(pg_catalog.*) interval '1 second'), ($2::float8 OPERATOR(pg_catalog.*) interval '1 second')) \
       FROM idgen_private.nodes n \
     ON CONFLICT (service, machine_id) DO UPDATE SET version = GREATEST(t.version, excluded.version), \
            bound = GREATEST(t.bound, excluded.bound), removed_at = excluded.removed_at";

/// TRUNCATE starts a new epoch: leases granted before it are dropped at their next check.
pub const NEW_EPOCH: &str = "UPDATE idgen_private.idgen_registry r SET epoch = r.epoch OPERATOR(pg_catalog.+) 1";

/// A row inserted for service $1, machine id $2 (by hand, by a restore, or by a claim) takes the
/// tombstone of its machine id, if any: its bound as watermark and a newer version.
pub const MERGE_TOMBSTONE: &str = "WITH tomb AS (DELETE FROM idgen_private.idgen_tombstones t \
       WHERE t.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND t.machine_id OPERATOR(pg_catalog.=) $2 \
       RETURNING t.version, t.bound) \
     UPDATE idgen_private.nodes n SET issued_until = GREATEST(n.issued_until, tomb.bound), \
            version = GREATEST(n.version, tomb.version OPERATOR(pg_catalog.+) 1) \
       FROM tomb WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2";

/// Before a DROP of the registry is checked: no claim, renewal or report may commit between the
/// check and the DROP. Every table of idgen's, in the mode the DROP itself takes, so that the DROP
/// never waits for a lock while it holds another (claims would queue behind it). Without waiting:
/// any transaction that uses the registry, a read included, fails the DROP (55P03).
pub const LOCK_REGISTRY_FOR_DROP: &str = "LOCK TABLE idgen_private.nodes, idgen_private.idgen_tombstones, \
     idgen_private.idgen_registry, idgen_private.idgen_claim_guards, idgen_private.idgen_service_members, \
     idgen_private.idgen_history, idgen_private.idgen_history_purged IN ACCESS EXCLUSIVE MODE NOWAIT";

/// What a DROP of the registry would forget while it may still be stamped: every row and
/// tombstone whose bound is ahead of the clock, latest first ($1 lease s, $2 take-back age s
/// as above); the rows' holders as service, machine id, host, port, slot, bound.
pub const STILL_STAMPING: &str =
    "SELECT s.service, s.machine_id, pg_catalog.host(s.host), s.port, s.backend_slot, s.bound \
     FROM (SELECT n.service::pg_catalog.text AS service, n.machine_id, n.host, n.port, n.backend_slot, \
                  idgen_private.holder_bound(n, ($1::float8 OPERATOR(pg_catalog.*) interval '1 second'), \
                                             ($2::float8 OPERATOR(pg_catalog.*) interval '1 second')) AS bound \
             FROM idgen_private.nodes n \
           UNION ALL \
           SELECT t.service::pg_catalog.text, t.machine_id, NULL::inet, NULL::integer, NULL::integer, t.bound \
             FROM idgen_private.idgen_tombstones t) s \
     WHERE s.bound OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() ORDER BY s.bound DESC, s.service, s.machine_id";

/// Unix ms of timestamptz `$t`, NULL when infinite.
#[rustfmt::skip]
macro_rules! epoch_ms {
    ($t:literal) => {
        concat!(
            "CASE WHEN pg_catalog.isfinite(", $t, ") THEN pg_catalog.floor(EXTRACT(epoch FROM ", $t,
            ") OPERATOR(pg_catalog.*) 1000::numeric)::bigint END"
        )
    };
}

/// The events of machine id $2 of service $1 the caller may read, in order (`idgen_explain`, as the caller).
#[rustfmt::skip]
pub const EVENTS_OF_MACHINE_ID: &str = concat!(
    "SELECT ",
    epoch_ms!("e.at"),
    ", e.event, pg_catalog.host(e.host), e.port, e.backend_slot, e.role, e.pid, e.version, ",
    epoch_ms!("e.not_before"),
    ", ",
    epoch_ms!("e.issued_until"),
    ", pg_catalog.host(e.previous_host), e.previous_port, ",
    "e.previous_backend_slot, ",
    epoch_ms!("e.previous_bound"),
    ", e.outcome",
    " FROM idgen_private.visible_events e WHERE e.service OPERATOR(pg_catalog.=) $1 AND e.machine_id OPERATOR(pg_catalog.=) $2",
    " ORDER BY e.event_id"
);

/// Services the caller may read that have (or had) machine id $1, and whether events of them were purged.
pub const SERVICES_OF_MACHINE_ID: &str = "SELECT s.service, EXISTS (SELECT FROM idgen_private.visible_metrics m \
     WHERE m.service OPERATOR(pg_catalog.=) s.service AND m.history_events_purged OPERATOR(pg_catalog.>) 0) \
     FROM (SELECT n.service::text AS service FROM idgen_private.visible_nodes n WHERE n.machine_id OPERATOR(pg_catalog.=) $1 \
     UNION SELECT e.service::text FROM idgen_private.visible_events e WHERE e.machine_id OPERATOR(pg_catalog.=) $1) s \
     WHERE $2::text IS NULL OR s.service OPERATOR(pg_catalog.=) $2::text ORDER BY s.service";

/// The registry row of machine id $2 of service $1, if the caller may read it: holder, version.
pub const NODE_OF_MACHINE_ID: &str = "SELECT pg_catalog.host(n.host), n.port, n.backend_slot, n.version \
     FROM idgen_private.visible_nodes n WHERE n.service OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2";

/// Every statement, by name, for the meta-test (tests/cluster/tests/hijack.rs includes this file).
#[allow(dead_code)]
pub const ALL: [(&str, &str); 44] = [
    ("TAKE_RELEASED", TAKE_RELEASED),
    ("TAKE_IDLE", TAKE_IDLE),
    ("READ_REGISTRY", READ_REGISTRY),
    ("GUARDS_EXIST", GUARDS_EXIST),
    ("CREATE_GUARDS", CREATE_GUARDS),
    ("TAKE_GUARD", TAKE_GUARD),
    ("RELEASE_OWN_ROW_AHEAD", RELEASE_OWN_ROW_AHEAD),
    ("RELEASE_OWN_ROW_OUTSIDE_RANGE", RELEASE_OWN_ROW_OUTSIDE_RANGE),
    ("REUSE_OWN_ROW", REUSE_OWN_ROW),
    ("REUSE_OWN_HELD_ROW", REUSE_OWN_HELD_ROW),
    ("OWN_HELD_ROW", OWN_HELD_ROW),
    ("UNREGISTERED_MACHINE_IDS", UNREGISTERED_MACHINE_IDS),
    ("SOONEST_TOMBSTONE_AHEAD", SOONEST_TOMBSTONE_AHEAD),
    ("INSERT_UNREGISTERED", INSERT_UNREGISTERED),
    ("CURRENT_ROW", CURRENT_ROW),
    ("COUNT_HELD", COUNT_HELD),
    ("LEAST_RECENTLY_SEEN", LEAST_RECENTLY_SEEN),
    ("HEARTBEAT", HEARTBEAT),
    ("RELEASE", RELEASE),
    ("RENEW_BACKEND_LEASE", RENEW_BACKEND_LEASE),
    ("READ_BACKEND_LEASE", READ_BACKEND_LEASE),
    ("CLOSE_BACKEND_LEASE", CLOSE_BACKEND_LEASE),
    ("NOTIFY_ALERT", NOTIFY_ALERT),
    ("CALLER_STANDING", CALLER_STANDING),
    ("ROLE_BY_NAME", ROLE_BY_NAME),
    ("GRANT_SERVICE", GRANT_SERVICE),
    ("REVOKE_SERVICE", REVOKE_SERVICE),
    ("SERVICE_MEMBERS_OID", SERVICE_MEMBERS_OID),
    ("INSERT_EVENT", INSERT_EVENT),
    ("INSERT_REFUSAL", INSERT_REFUSAL),
    ("RESYNC_EVENT_IDS", RESYNC_EVENT_IDS),
    ("REFUSAL_RECORDED_RECENTLY", REFUSAL_RECORDED_RECENTLY),
    ("TAKE_REFUSAL_TURN", TAKE_REFUSAL_TURN),
    ("COUNT_IN_USE", COUNT_IN_USE),
    ("SYNCHRONOUS_STANDBY_STREAMING", SYNCHRONOUS_STANDBY_STREAMING),
    ("TOMBSTONE_ROW", TOMBSTONE_ROW),
    ("TOMBSTONE_ALL", TOMBSTONE_ALL),
    ("NEW_EPOCH", NEW_EPOCH),
    ("MERGE_TOMBSTONE", MERGE_TOMBSTONE),
    ("LOCK_REGISTRY_FOR_DROP", LOCK_REGISTRY_FOR_DROP),
    ("STILL_STAMPING", STILL_STAMPING),
    ("EVENTS_OF_MACHINE_ID", EVENTS_OF_MACHINE_ID),
    ("SERVICES_OF_MACHINE_ID", SERVICES_OF_MACHINE_ID),
    ("NODE_OF_MACHINE_ID", NODE_OF_MACHINE_ID),
];
