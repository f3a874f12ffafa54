//! Every SQL statement that idgen runs with the extension owner's rights, as
//! complete constants. Plain Rust with no pgrx, so that the meta-test in
//! tests/cluster/tests/hijack.rs can include this file and check each statement;
//! the edge modules (store, privilege, diagnostics) hold no SQL of their own.
//!
//! **The rule for SQL run with the owner's rights.** Since PostgreSQL 15 the
//! extension's schema (`public`) belongs to the database owner, who can plant
//! functions and operators there, and an exact match anywhere on the path beats
//! a pg_catalog candidate that needs an implicit cast, so a pinned path alone is
//! no defence. Therefore:
//! - every operator is written `OPERATOR(pg_catalog.x)` (parenthesised: they
//!   all share one precedence), and every function `pg_catalog.f(...)`;
//! - nothing resolves `=` through the path either: no `IS [NOT] DISTINCT FROM`
//!   or `NULLIF`; `COALESCE`, `GREATEST` and `EXISTS` are grammar;
//! - `service` is `varchar`, and is compared as `service::pg_catalog.text`: no
//!   `=` takes varchar, and resolving `varchar = text` weighs every `=`
//!   candidate through the cast catalog, which a new backend's claim would
//!   pay cold (the expression and the index used are the same);
//! - parameters carry exact types (`$n::float8` durations, `integer` slots), and
//!   durations are `float8 * interval`, pg_catalog's own operator;
//! - relations and types are found through the pinned path
//!   (`pg_catalog, <extension schema>, pg_temp`): pg_catalog comes first, and no
//!   lower role can replace the extension's own tables;
//! - the one unqualified call is the extension's own `idgen_holder_bound`, owned
//!   by the extension owner, with exact argument types.
//!
//! Claims never wait on another session: node identities and new machine ids
//! are guarded by rows of `idgen_claim_guards` locked `FOR UPDATE SKIP LOCKED`
//! (never advisory locks, whose keys any role can hold), and rows likewise.

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

/// The columns of `Won` after an UPDATE or INSERT of `$t`; `$lease` is the
/// parameter holding the lease in seconds, `$bound` the earlier holders' bound.
#[rustfmt::skip]
macro_rules! won_columns {
    ($t:literal, $lease:literal, $bound:literal) => {
        concat!(
            $t, ".machine_id, ", $t, ".version, (", $t, ".last_seen OPERATOR(pg_catalog.+) ", secs!($lease), "), ",
            $t, ".last_seen, ", $bound, ", ", $t, ".issued_until"
        )
    };
}

/// `idgen_holder_bound` of row `$t`, with the lease in `$5` and the take-back age in `$9` (seconds).
/// The one unqualified call: the extension's own function, owned by its owner, with exact argument
/// types, on a path where only pg_catalog comes before the extension's schema.
#[rustfmt::skip]
macro_rules! holder_bound {
    ($t:literal) => {
        concat!("idgen_holder_bound(", $t, ", ", secs!("$5"), ", ", secs!("$9"), ")")
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

/// A take-over: lock one victim row without waiting, hand it to the claimant.
/// Returns the won row (columns 1-6) and the previous holder's facts (7-14).
/// Parameters: $1-$4 the claimant, $5 lease (s), $6 minimum idle age (s), $7
/// cooldown (s), $8 tolerance (ms), $9 take-back age (s), $10 window (ms),
/// $11-$12 the machine-id range.
#[rustfmt::skip]
macro_rules! take_over_sql {
    ($order:literal; $($filter:expr),+) => {
        concat!(
            "WITH victim AS (SELECT v.*, ", holder_bound!("v"), " AS bound FROM system_nodes v ",
            "WHERE v.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND ", in_range!("v"), " AND ", $($filter),+,
            " AND ", holder_bound!("v"), " OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"),
            " ORDER BY ", $order, ", v.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
            "UPDATE system_nodes n SET host = $2, port = $3, backend_slot = $4, ",
            "version = n.version OPERATOR(pg_catalog.+) 1, last_seen = pg_catalog.clock_timestamp(), released_at = NULL, ",
            "issued_until = GREATEST(v.bound, ", clock_plus_millis!("$10"), ") ",
            "FROM victim v WHERE ", same_row!("v"), " RETURNING ", won_columns!("n", "$5", "v.bound"), ", ", facts_columns!("v")
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

/// Locks guard row `$n` of `idgen_claim_guards` unless another transaction holds it (see `idgen_core::guard`).
#[rustfmt::skip]
macro_rules! guard_taken {
    ($n:literal) => {
        concat!(
            "EXISTS (SELECT FROM idgen_claim_guards g WHERE g.bucket OPERATOR(pg_catalog.=) ", $n,
            " FOR UPDATE SKIP LOCKED)"
        )
    };
}

/// Step 3: a released row past its cooldown.
pub const TAKE_RELEASED: &str = take_over_sql!("v.released_at"; "v.released_at OPERATOR(pg_catalog.<=) ", ago!("$7"));
/// Steps 4 to 6: a row idle past the step's age.
pub const TAKE_IDLE: &str = take_over_sql!(
    "v.last_seen";
    "v.last_seen OPERATOR(pg_catalog.<) ", ago!("$6"),
    " AND (v.released_at IS NULL OR v.released_at OPERATOR(pg_catalog.<=) ", ago!("$7"), ")"
);

/// The registry's epoch and floor.
pub const READ_REGISTRY: &str = "SELECT r.epoch, r.floor FROM idgen_registry r";

/// Takes guard $1 unless another transaction holds it.
pub const TAKE_GUARD: &str = concat!("SELECT ", guard_taken!("$1"));

/// Releases the claimant's held row if its watermark is further ahead than $8 ms, keeping the bound.
pub const RELEASE_OWN_ROW_AHEAD: &str = concat!(
        "WITH own AS (SELECT o.service, o.machine_id, o.issued_until FROM system_nodes o WHERE ", own_identity!("o"),
        " AND o.released_at IS NULL AND o.issued_until OPERATOR(pg_catalog.>) ", clock_plus_millis!("$8"),
        " FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, released_at = pg_catalog.clock_timestamp(), ",
        "issued_until = GREATEST(n.issued_until, ", holder_bound!("n"), ") FROM own WHERE ", same_row!("own"),
        " RETURNING n.machine_id, own.issued_until"
    );

/// Releases the claimant's held row outside the machine-id range ($11-$12), keeping the bound.
pub const RELEASE_OWN_ROW_OUTSIDE_RANGE: &str = concat!(
        "WITH own AS (SELECT o.service, o.machine_id FROM system_nodes o WHERE ", own_identity!("o"),
        " AND o.released_at IS NULL AND NOT (", in_range!("o"), ") FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, released_at = pg_catalog.clock_timestamp(), ",
        "issued_until = GREATEST(n.issued_until, ", holder_bound!("n"), ") FROM own WHERE ", same_row!("own"),
        " RETURNING n.machine_id, n.issued_until"
    );

/// Step 1: bumps the claimant's own row (held, or else released by it) in the range ($11-$12) unless
/// locked or too far ahead.
pub const REUSE_OWN_ROW: &str = concat!(
        "WITH own AS (SELECT o.service, o.machine_id, o.issued_until AS bound, o.released_at IS NOT NULL AS was_released ",
        "FROM system_nodes o WHERE ", own_identity!("o"), " AND ", in_range!("o"),
        " AND o.issued_until OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"),
        " AND (o.released_at IS NULL OR NOT EXISTS (SELECT FROM system_nodes h WHERE ", own_identity!("h"),
        " AND h.released_at IS NULL)) ",
        "ORDER BY o.released_at IS NOT NULL, o.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, last_seen = pg_catalog.clock_timestamp(), ",
        "released_at = NULL, issued_until = GREATEST(n.issued_until, ", clock_plus_millis!("$10"), ") ",
        "FROM own WHERE ", same_row!("own"), " RETURNING ", won_columns!("n", "$5", "own.bound"), ", own.was_released"
    );

/// A new connection's claim: bumps the claimant's row if it still holds it, in the range ($11-$12),
/// unlocked and not too far ahead. [`REUSE_OWN_ROW`] without its choice of a released row, so that
/// a new backend plans the least: the held row is unique (`system_nodes_node_identity`).
pub const REUSE_OWN_HELD_ROW: &str = concat!(
        "WITH own AS (SELECT o.service, o.machine_id, o.issued_until AS bound FROM system_nodes o WHERE ",
        own_identity!("o"), " AND o.released_at IS NULL AND ", in_range!("o"),
        " AND o.issued_until OPERATOR(pg_catalog.<=) ", clock_plus_millis!("$8"), " FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version OPERATOR(pg_catalog.+) 1, last_seen = pg_catalog.clock_timestamp(), ",
        "issued_until = GREATEST(n.issued_until, ", clock_plus_millis!("$10"), ") ",
        "FROM own WHERE ", same_row!("own"), " RETURNING ", won_columns!("n", "$5", "own.bound")
    );

/// The claimant's held row, locked or not (to tell busy from absent).
pub const OWN_HELD_ROW: &str =
    concat!("SELECT n.machine_id FROM system_nodes n WHERE ", own_identity!("n"), " AND n.released_at IS NULL");

/// Step 2: machine ids of $1 in $2..=$3 with no row, lowest first.
pub const UNREGISTERED_MACHINE_IDS: &str =
    "SELECT m::smallint FROM pg_catalog.generate_series($2::integer, $3::integer) AS m \
               WHERE NOT EXISTS (SELECT FROM system_nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
                                 AND n.machine_id OPERATOR(pg_catalog.=) m) \
               ORDER BY m";

/// Step 2: inserts machine id $11 for the claimant if its guard $12 is free.
pub const INSERT_UNREGISTERED: &str = concat!(
    "INSERT INTO system_nodes (service, machine_id, host, port, backend_slot, version, last_seen, issued_until) ",
    "SELECT $1, $11, $2, $3, $4, 1, pg_catalog.clock_timestamp(), ",
    clock_plus_millis!("$10"),
    " WHERE ",
    guard_taken!("$12"),
    " ON CONFLICT DO NOTHING RETURNING ",
    won_columns!("system_nodes", "$5", "NULL::timestamptz")
);

/// The row of machine id $2 of service $1, as facts for messages.
pub const CURRENT_ROW: &str = concat!(
    "SELECT ",
    facts_columns!("n"),
    " FROM system_nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2"
);

/// How many ids of service $1 in the range $2-$3 are registered.
pub const COUNT_HELD: &str =
    "SELECT pg_catalog.count(*) FROM system_nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
     AND n.machine_id OPERATOR(pg_catalog.>=) $2 AND n.machine_id OPERATOR(pg_catalog.<=) $3";

/// The least recently seen row of service $1 in the range $2-$3, as facts for messages.
pub const LEAST_RECENTLY_SEEN: &str = concat!(
    "SELECT ",
    facts_columns!("n"),
    " FROM system_nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.>=) $2",
    " AND n.machine_id OPERATOR(pg_catalog.<=) $3 ORDER BY n.last_seen, n.machine_id LIMIT 1"
);

/// A version-checked heartbeat ($1-$6 the holding, $7 lease s, $8 reported watermark).
pub const HEARTBEAT: &str = concat!(
    "UPDATE system_nodes SET last_seen = pg_catalog.clock_timestamp(), ",
    "issued_until = GREATEST(issued_until, COALESCE($8, pg_catalog.clock_timestamp())) WHERE ",
    holding_matches!(),
    " RETURNING (last_seen OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    ")"
);

/// A version-checked release ($1-$6 the holding, $7 margin s, $8 reported watermark).
pub const RELEASE: &str = concat!(
    "UPDATE system_nodes SET version = version OPERATOR(pg_catalog.+) 1, released_at = t.now, ",
    "issued_until = GREATEST(issued_until, COALESCE($8, (t.now OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    "))) ",
    "FROM (SELECT pg_catalog.clock_timestamp() AS now) t WHERE ",
    holding_matches!(),
    " RETURNING version, issued_until"
);

/// A backend's version- and epoch-checked heartbeat that writes its next window ($7 lease s, $8 epoch, $9 window ms).
pub const RENEW_BACKEND_LEASE: &str = concat!(
    "WITH own AS (SELECT service, machine_id FROM system_nodes WHERE ",
    holding_matches!(),
    " AND EXISTS (SELECT FROM idgen_registry r WHERE r.epoch OPERATOR(pg_catalog.=) $8) FOR UPDATE SKIP LOCKED) ",
    "UPDATE system_nodes n SET last_seen = pg_catalog.clock_timestamp(), ",
    "issued_until = GREATEST(n.issued_until, ",
    clock_plus_millis!("$9"),
    ") ",
    "FROM own WHERE ",
    same_row!("own"),
    " RETURNING n.last_seen, (n.last_seen OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    "), n.issued_until"
);

/// A backend's version- and epoch-checked read, for read-only transactions ($7 lease s, $8 epoch).
pub const READ_BACKEND_LEASE: &str = concat!(
    "SELECT pg_catalog.clock_timestamp(), (last_seen OPERATOR(pg_catalog.+) ",
    secs!("$7"),
    "), issued_until ",
    "FROM system_nodes WHERE ",
    holding_matches!(),
    " AND EXISTS (SELECT FROM idgen_registry r WHERE r.epoch OPERATOR(pg_catalog.=) $8)"
);

/// An alert to listeners of `idgen_alert` ($1 the channel, $2 the payload).
pub const NOTIFY_ALERT: &str = "SELECT pg_catalog.pg_notify($1, $2)";

/// Who the calling role $1 is, for service $2: its name, superuser, extension owner, member of the service.
pub const CALLER_STANDING: &str = "SELECT r.rolname::text, r.rolsuper, r.oid OPERATOR(pg_catalog.=) e.extowner, \
     EXISTS (SELECT FROM idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $2 \
             AND pg_catalog.pg_has_role($1, m.member::pg_catalog.oid, 'MEMBER')) \
     FROM pg_catalog.pg_roles r, pg_catalog.pg_extension e \
     WHERE r.oid OPERATOR(pg_catalog.=) $1 AND e.extname OPERATOR(pg_catalog.=) 'idgen'::name";

/// The role named $1 (as `pg_roles` shows it), if any.
pub const ROLE_BY_NAME: &str =
    "SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) $1::name";

/// Grants service $1 to role $2; true when the grant is new.
pub const GRANT_SERVICE: &str =
    "INSERT INTO idgen_service_members (service, member) VALUES ($1, $2::pg_catalog.regrole) \
     ON CONFLICT DO NOTHING RETURNING true";

/// The statement that lets role $1 call the three registry functions (quoted from the catalog).
pub const GRANT_EXECUTE_STATEMENT: &str = "SELECT pg_catalog.format('GRANT EXECUTE ON FUNCTION %s, %s, %s TO %I', \
     'idgen_claim(text,inet,integer)'::pg_catalog.regprocedure, \
     'idgen_heartbeat(text,smallint,inet,integer,bigint,timestamptz)'::pg_catalog.regprocedure, \
     'idgen_release(text,smallint,inet,integer,bigint,timestamptz)'::pg_catalog.regprocedure, r.rolname) \
     FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) $1";

/// Revokes service $1 from role $2; true when there was a grant.
pub const REVOKE_SERVICE: &str =
    "DELETE FROM idgen_service_members m WHERE m.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 \
     AND m.member::pg_catalog.oid OPERATOR(pg_catalog.=) $2 RETURNING true";

/// Inserts history event $1 (JSON whose keys are the columns; `at` missing: the clock).
pub const INSERT_EVENT: &str = "INSERT INTO idgen_history (at, event, service, machine_id, version, outcome, host, port, \
     backend_slot, role, pid, not_before, issued_until, previous_host, previous_port, previous_backend_slot, \
     previous_version, previous_idle_seconds, previous_bound, detail) \
     SELECT COALESCE(e.at, pg_catalog.clock_timestamp()), e.event, e.service, e.machine_id, e.version, e.outcome, e.host, \
     e.port, e.backend_slot, e.role, e.pid, e.not_before, e.issued_until, e.previous_host, e.previous_port, \
     e.previous_backend_slot, e.previous_version, e.previous_idle_seconds, e.previous_bound, e.detail \
     FROM pg_catalog.json_populate_record(NULL::idgen_history, $1::pg_catalog.json) e";

/// Whether this installation has the history table (0.3.0 on), in the extension's own schema.
pub const HISTORY_INSTALLED: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_extension e \
     ON c.relnamespace OPERATOR(pg_catalog.=) e.extnamespace \
     WHERE e.extname OPERATOR(pg_catalog.=) 'idgen'::name AND c.relname OPERATOR(pg_catalog.=) 'idgen_history'::name)";

/// Sets search_path to $1 for the rest of the transaction (the history recorder's worker).
pub const PIN_SEARCH_PATH: &str = "SELECT pg_catalog.set_config('search_path', $1, true)";

/// How many machine ids of service $1 in the range $3-$4 a claim cannot get without a take-back:
/// held, or released less than $2 seconds (the cooldown) ago: every state but `NodeState::Released`.
pub const COUNT_IN_USE: &str = concat!(
    "SELECT pg_catalog.count(*) FROM system_nodes n WHERE n.service::pg_catalog.text OPERATOR(pg_catalog.=) $1 ",
    "AND n.machine_id OPERATOR(pg_catalog.>=) $3 AND n.machine_id OPERATOR(pg_catalog.<=) $4 ",
    "AND (n.released_at IS NULL OR n.released_at OPERATOR(pg_catalog.>) ",
    ago!("$2"),
    ")"
);

/// Whether a synchronous standby streams from this server now.
pub const SYNCHRONOUS_STANDBY_STREAMING: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_replication r \
     WHERE r.state OPERATOR(pg_catalog.=) 'streaming'::text \
     AND r.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync'::text, 'quorum'::text]))";

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
    " FROM idgen_events e WHERE e.service OPERATOR(pg_catalog.=) $1 AND e.machine_id OPERATOR(pg_catalog.=) $2",
    " ORDER BY e.event_id"
);

/// Services the caller may read that have (or had) machine id $1, and whether events of them were purged.
pub const SERVICES_OF_MACHINE_ID: &str = "SELECT s.service, EXISTS (SELECT FROM idgen_metrics m \
     WHERE m.service OPERATOR(pg_catalog.=) s.service AND m.history_events_purged OPERATOR(pg_catalog.>) 0) \
     FROM (SELECT n.service::text AS service FROM idgen_nodes n WHERE n.machine_id OPERATOR(pg_catalog.=) $1 \
     UNION SELECT e.service::text FROM idgen_events e WHERE e.machine_id OPERATOR(pg_catalog.=) $1) s \
     WHERE $2::text IS NULL OR s.service OPERATOR(pg_catalog.=) $2::text ORDER BY s.service";

/// The registry row of machine id $2 of service $1, if the caller may read it: holder, version.
pub const NODE_OF_MACHINE_ID: &str = "SELECT pg_catalog.host(n.host), n.port, n.backend_slot, n.version \
     FROM idgen_nodes n WHERE n.service OPERATOR(pg_catalog.=) $1 AND n.machine_id OPERATOR(pg_catalog.=) $2";

/// Every statement, by name, for the meta-test (tests/cluster/tests/hijack.rs includes this file).
#[allow(dead_code)]
pub const ALL: [(&str, &str); 32] = [
    ("TAKE_RELEASED", TAKE_RELEASED),
    ("TAKE_IDLE", TAKE_IDLE),
    ("READ_REGISTRY", READ_REGISTRY),
    ("TAKE_GUARD", TAKE_GUARD),
    ("RELEASE_OWN_ROW_AHEAD", RELEASE_OWN_ROW_AHEAD),
    ("REUSE_OWN_ROW", REUSE_OWN_ROW),
    ("REUSE_OWN_HELD_ROW", REUSE_OWN_HELD_ROW),
    ("OWN_HELD_ROW", OWN_HELD_ROW),
    ("UNREGISTERED_MACHINE_IDS", UNREGISTERED_MACHINE_IDS),
    ("INSERT_UNREGISTERED", INSERT_UNREGISTERED),
    ("CURRENT_ROW", CURRENT_ROW),
    ("COUNT_HELD", COUNT_HELD),
    ("LEAST_RECENTLY_SEEN", LEAST_RECENTLY_SEEN),
    ("HEARTBEAT", HEARTBEAT),
    ("RELEASE", RELEASE),
    ("RENEW_BACKEND_LEASE", RENEW_BACKEND_LEASE),
    ("READ_BACKEND_LEASE", READ_BACKEND_LEASE),
    ("NOTIFY_ALERT", NOTIFY_ALERT),
    ("CALLER_STANDING", CALLER_STANDING),
    ("ROLE_BY_NAME", ROLE_BY_NAME),
    ("GRANT_SERVICE", GRANT_SERVICE),
    ("GRANT_EXECUTE_STATEMENT", GRANT_EXECUTE_STATEMENT),
    ("REVOKE_SERVICE", REVOKE_SERVICE),
    ("INSERT_EVENT", INSERT_EVENT),
    ("PIN_SEARCH_PATH", PIN_SEARCH_PATH),
    ("HISTORY_INSTALLED", HISTORY_INSTALLED),
    ("RELEASE_OWN_ROW_OUTSIDE_RANGE", RELEASE_OWN_ROW_OUTSIDE_RANGE),
    ("SYNCHRONOUS_STANDBY_STREAMING", SYNCHRONOUS_STANDBY_STREAMING),
    ("COUNT_IN_USE", COUNT_IN_USE),
    ("EVENTS_OF_MACHINE_ID", EVENTS_OF_MACHINE_ID),
    ("SERVICES_OF_MACHINE_ID", SERVICES_OF_MACHINE_ID),
    ("NODE_OF_MACHINE_ID", NODE_OF_MACHINE_ID),
];
