//! Where the installed SQL restates a value or a list of the Rust, a test here reads the SQL
//! text and compares the two, so that changing one without the other fails, naming both
//! places. Only the fresh-install pieces are read (sql/bootstrap.sql ... sql/generator.sql):
//! the upgrade scripts are compared with a fresh install by tests/cluster/tests/upgrade.rs.
//!
//! The SQL is parsed narrowly: each test finds a named object (a constraint, a view, a
//! comment), then the one list or number in it. A test that cannot find its object fails and
//! says what it looked for: renaming the object means updating the test.
//!
//! What text cannot show (what a view computes from the settings) is compared against a
//! database in tests/cluster/tests/one_source.rs.

use idgen_core::format::iso_utc;
use idgen_core::guard::{self, IDENTITY_BUCKETS, MACHINE_ID_BUCKETS};
use idgen_core::history::{Event, EventKind, HISTORY_RETENTION_DEFAULT_SECS, REFUSAL_INTERVAL_SECS};
use idgen_core::input;
use idgen_core::layout::{FieldOrder, Layout, Preset, ServiceLayout, MAX_LAYOUT_BITS, MAX_MACHINE_BITS};
use idgen_core::policy::{ClaimPolicy, NodeState, Outcome, DAY, MINUTE};
use std::collections::BTreeSet;

/// One file of the installed SQL.
struct Sql {
    path: &'static str,
    text: &'static str,
}

const REGISTRY: Sql = Sql { path: "sql/registry.sql", text: include_str!("../../sql/registry.sql") };
const REGISTRY_API: Sql = Sql { path: "sql/registry_api.sql", text: include_str!("../../sql/registry_api.sql") };
const HISTORY: Sql = Sql { path: "sql/history.sql", text: include_str!("../../sql/history.sql") };
const DIAGNOSTICS: Sql = Sql { path: "sql/diagnostics.sql", text: include_str!("../../sql/diagnostics.sql") };
const GENERATOR: Sql = Sql { path: "sql/generator.sql", text: include_str!("../../sql/generator.sql") };
const BOOTSTRAP: Sql = Sql { path: "sql/bootstrap.sql", text: include_str!("../../sql/bootstrap.sql") };

const FRESH_INSTALL: [&Sql; 6] = [&BOOTSTRAP, &REGISTRY, &REGISTRY_API, &HISTORY, &DIAGNOSTICS, &GENERATOR];

// ---------------------------------------------------------------------------------------------
// The history's lists

#[test]
fn the_history_event_check_lists_every_event_kind() {
    let sql = array_literals(check_clause(&HISTORY, "idgen_history_event_known"));
    let rust: Vec<&str> = EventKind::ALL.iter().map(|k| k.label()).collect();
    assert_same_labels(
        "sql/history.sql, CHECK idgen_history_event_known",
        &sql,
        "core/src/history.rs, EventKind::ALL",
        &rust,
    );
}

#[test]
fn the_history_outcome_check_lists_every_claim_outcome() {
    let sql = array_literals(check_clause(&HISTORY, "idgen_history_outcome_known"));
    let rust: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
    assert_same_labels(
        "sql/history.sql, CHECK idgen_history_outcome_known",
        &sql,
        "core/src/policy.rs, Outcome::ALL",
        &rust,
    );
}

#[test]
fn every_field_of_a_history_event_is_a_column_of_idgen_history() {
    // The edge inserts an Event with json_populate_record, which ignores keys that are no
    // column: a field renamed on one side only would be lost without an error.
    let event = Event { at: Some(iso_utc(0)), ..Event::new(EventKind::Claim, "orders") };
    let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
    let fields: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    let mut columns = table_columns(&HISTORY, "idgen_private.idgen_history");
    // Numbered by its sequence at the insert, never by the Rust.
    columns.retain(|c| c != "event_id");
    assert_same_labels(
        "sql/history.sql, the columns of idgen_private.idgen_history but event_id",
        &columns,
        "core/src/history.rs, the fields of Event",
        &fields.iter().map(String::as_str).collect::<Vec<_>>(),
    );
}

#[test]
fn the_purge_keeps_the_newest_event_of_every_capacity_announcement_kind() {
    let purge = from(&HISTORY, "CREATE FUNCTION idgen_purge_history(");
    let purge = &purge[..purge.find("END;").expect("the purge's body ends")];
    let rust: Vec<&str> =
        EventKind::ALL.iter().filter(|k| k.capacity_announced().is_some()).map(|k| k.label()).collect();
    assert_eq!(rust.len(), 3, "EventKind::capacity_announced: warning, critical, cleared");
    for column in ["h.event", "k.event"] {
        let sql = compared_with(purge, column);
        assert_same_labels(
            &format!("sql/history.sql, idgen_purge_history's {column} ARRAY"),
            &sql,
            "core/src/history.rs, EventKind::capacity_announced",
            &rust,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The diagnostics' lists

#[test]
fn the_metrics_refused_claims_are_the_refused_claim_events() {
    let metrics = view(&DIAGNOSTICS, "idgen_metrics");
    let sum = clause_ending_at(metrics, "pg_catalog.sum(", ") AS refused_claims")
        .unwrap_or_else(|| panic!("sql/diagnostics.sql: idgen_metrics has no `pg_catalog.sum(...) AS refused_claims`"));
    let sql = array_literals(sum);
    let rust: Vec<&str> = EventKind::ALL.iter().filter(|k| k.is_refused_claim()).map(|k| k.label()).collect();
    assert_same_labels(
        "sql/diagnostics.sql, idgen_metrics.refused_claims' ARRAY",
        &sql,
        "core/src/history.rs, EventKind::is_refused_claim",
        &rust,
    );
}

#[test]
fn the_metrics_count_take_backs_for_each_outcome_that_takes_back() {
    let sql = compared_with(view(&DIAGNOSTICS, "idgen_metrics"), "k.outcome");
    let rust: Vec<&str> =
        Outcome::ALL.iter().filter(|o| EventKind::of_claim(**o) == EventKind::TakeBack).map(|o| o.label()).collect();
    assert_same_labels(
        "sql/diagnostics.sql, the outcomes idgen_metrics counts take_backs_* by",
        &sql,
        "core/src/history.rs, the outcomes EventKind::of_claim makes a TakeBack",
        &rust,
    );
}

#[test]
fn a_restart_loop_counts_every_event_by_which_a_node_gets_an_id() {
    let sql = compared_with(view(&DIAGNOSTICS, "idgen_restart_loops"), "e.event");
    let rust: Vec<&str> = EventKind::ALL.iter().filter(|k| k.is_gain()).map(|k| k.label()).collect();
    assert_same_labels(
        "sql/diagnostics.sql, the events idgen_restart_loops counts",
        &sql,
        "core/src/history.rs, EventKind::is_gain",
        &rust,
    );
}

#[test]
fn the_metrics_count_restarts_by_the_restart_event() {
    let metrics = view(&DIAGNOSTICS, "idgen_metrics");
    let sum = clause_ending_at(metrics, "pg_catalog.sum(", ") AS restarts")
        .unwrap_or_else(|| panic!("sql/diagnostics.sql: idgen_metrics has no `pg_catalog.sum(...) AS restarts`"));
    assert_eq!(compared_with(sum, "k.event"), [EventKind::Restart.label()]);
}

#[test]
fn idgen_capacity_counts_every_node_state() {
    let sql = compared_with(view(&DIAGNOSTICS, "idgen_capacity"), "n.state");
    let rust: Vec<&str> = NodeState::ALL.iter().map(|s| s.label()).collect();
    assert_same_labels(
        "sql/diagnostics.sql, the states idgen_capacity counts",
        &sql,
        "core/src/policy.rs, NodeState::ALL",
        &rust,
    );
}

#[test]
fn the_diagnostics_compare_states_events_and_outcomes_only_with_labels_the_rust_writes() {
    let states: Vec<&str> = NodeState::ALL.iter().map(|s| s.label()).collect();
    let events: Vec<&str> = EventKind::ALL.iter().map(|k| k.label()).collect();
    let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
    let checks = [
        ("n.state", "core/src/policy.rs, NodeState::label", &states),
        ("k.event", "core/src/history.rs, EventKind::label", &events),
        ("e.event", "core/src/history.rs, EventKind::label", &events),
        ("k.outcome", "core/src/policy.rs, Outcome::label", &outcomes),
    ];
    for (column, rust_place, labels) in checks {
        let compared = compared_with(DIAGNOSTICS.text, column);
        assert!(!compared.is_empty(), "sql/diagnostics.sql compares {column} with no label any more: update this test");
        let unknown: Vec<&String> = compared.iter().filter(|l| !labels.contains(&l.as_str())).collect();
        assert!(
            unknown.is_empty(),
            "sql/diagnostics.sql compares {column} with {unknown:?}, which {rust_place} never returns (it has {labels:?})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The registry's checks and the input checks

#[test]
fn the_claim_guard_check_admits_exactly_the_buckets_guard_rs_creates() {
    let (first, last) = between(check_clause(&REGISTRY, "idgen_claim_guards_bucket_in_range"), "bucket");
    let buckets = guard::buckets();
    assert_eq!(
        (first, last),
        (i64::from(buckets.start), i64::from(buckets.end - 1)),
        "sql/registry.sql, CHECK idgen_claim_guards_bucket_in_range (bucket BETWEEN {first} AND {last}), and \
         core/src/guard.rs, buckets() ({buckets:?}), differ"
    );
    let comment = comment_on(&REGISTRY, "COLUMN idgen_private.idgen_claim_guards.bucket");
    let stated = format!(
        "Buckets 0 to {}: one per never-registered machine id; {} to {}: service node identities",
        MACHINE_ID_BUCKETS - 1,
        MACHINE_ID_BUCKETS,
        MACHINE_ID_BUCKETS + IDENTITY_BUCKETS - 1
    );
    assert!(
        comment.contains(&stated),
        "sql/registry.sql, COMMENT ON COLUMN idgen_private.idgen_claim_guards.bucket ({comment:?}), no longer \
         says {stated:?} as core/src/guard.rs' MACHINE_ID_BUCKETS and IDENTITY_BUCKETS have it"
    );
}

#[test]
fn the_port_check_admits_exactly_the_ports_the_input_check_accepts() {
    let (first, last) = between(check_clause(&REGISTRY, "system_nodes_port_in_range"), "port");
    let place = format!(
        "sql/registry.sql, CHECK system_nodes_port_in_range (port BETWEEN {first} AND {last}), and \
         core/src/input.rs, port_number"
    );
    let accepts = |port: i64| input::port_number("idgen_claim", Some(port as i32)).is_ok();
    assert!(accepts(first) && accepts(last), "{place}: port_number refuses a port the CHECK admits");
    assert!(!accepts(first - 1) && !accepts(last + 1), "{place}: port_number accepts a port the CHECK refuses");
    let comment = comment_on(&REGISTRY, "COLUMN system_nodes.port");
    assert!(
        comment.contains(&format!("{first} to {last}")),
        "sql/registry.sql, COMMENT ON COLUMN system_nodes.port ({comment:?}), does not say {first} to {last} as {place} have it"
    );
}

#[test]
fn the_version_check_admits_exactly_the_versions_the_input_check_accepts() {
    let least = at_least(check_clause(&REGISTRY, "system_nodes_version_positive"), "version");
    let place = format!(
        "sql/registry.sql, CHECK system_nodes_version_positive (version >= {least}), and core/src/input.rs, positive_version"
    );
    let accepts = |version: i64| input::positive_version("idgen_heartbeat", Some(version)).is_ok();
    assert!(accepts(least) && !accepts(least - 1), "{place} differ");
}

#[test]
fn the_machine_id_check_admits_exactly_the_machine_ids_the_input_check_accepts() {
    let (first, last) = between(check_clause(&REGISTRY, "system_nodes_machine_id_in_range"), "machine_id");
    let widest = Layout::new(0, 1, 1, MAX_MACHINE_BITS, 1, FieldOrder::TimeMachineSequence).unwrap();
    assert_eq!(
        (first, last),
        (0, i64::from(widest.max_machine_id())),
        "sql/registry.sql, CHECK system_nodes_machine_id_in_range (machine_id BETWEEN {first} AND {last}), and \
         core/src/layout.rs, MAX_MACHINE_BITS ({MAX_MACHINE_BITS}), differ"
    );
    let accepts = |id: i64| input::machine_id_argument("idgen_heartbeat", "machine_id", Some(id as i32)).is_ok();
    assert!(
        accepts(first) && !accepts(first - 1) && accepts(last) && !accepts(last + 1),
        "sql/registry.sql, CHECK system_nodes_machine_id_in_range, and core/src/input.rs, machine_id_argument, differ"
    );
}

#[test]
fn the_layout_checks_are_the_cores_bounds() {
    let widths = check_clause(&REGISTRY, "idgen_layouts_widths");
    let stated = format!(
        "time_bits >= 1 AND machine_bits BETWEEN 1 AND {MAX_MACHINE_BITS} AND sequence_bits >= 1\n{}AND time_bits + machine_bits + sequence_bits <= {MAX_LAYOUT_BITS}",
        " ".repeat(43)
    );
    assert_eq!(
        widths.trim(),
        stated,
        "sql/registry.sql, CHECK idgen_layouts_widths, and core/src/layout.rs, Layout::new (MAX_MACHINE_BITS, MAX_LAYOUT_BITS), differ"
    );
    let presets: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).chain([Preset::CUSTOM]).collect();
    assert_same_labels(
        "sql/registry.sql, CHECK idgen_layouts_preset_known",
        &array_literals(check_clause(&REGISTRY, "idgen_layouts_preset_known")),
        "core/src/layout.rs, Preset::ALL and Preset::CUSTOM",
        &presets,
    );
    let orders: Vec<&str> = FieldOrder::ALL.iter().map(|o| o.label()).collect();
    assert_same_labels(
        "sql/registry.sql, CHECK idgen_layouts_field_order_known",
        &array_literals(check_clause(&REGISTRY, "idgen_layouts_field_order_known")),
        "core/src/layout.rs, FieldOrder::ALL",
        &orders,
    );
}

#[test]
fn every_service_column_holds_the_longest_service_name_the_input_check_accepts() {
    let mut found = 0;
    for sql in FRESH_INSTALL {
        for (line_number, line) in sql.text.lines().enumerate() {
            let mut words = line.split_whitespace();
            if words.next() != Some("service") {
                continue;
            }
            let Some(width) = words.next().and_then(|t| t.strip_prefix("VARCHAR(")?.split(')').next()) else {
                continue;
            };
            found += 1;
            let width: usize = width.parse().unwrap();
            let place = format!(
                "{}:{}, service VARCHAR({width}), and core/src/input.rs, SERVICE_MAX_CHARS ({})",
                sql.path,
                line_number + 1,
                input::SERVICE_MAX_CHARS
            );
            assert_eq!(width, input::SERVICE_MAX_CHARS, "{place} differ");
            let accepts = |chars: usize| input::service_name("idgen_claim", Some(&"s".repeat(chars))).is_ok();
            assert!(accepts(width) && !accepts(width + 1), "{place}: service_name does not accept exactly {width}");
        }
    }
    // system_nodes, the tombstones, the guards, the grants, the history and its purged counts.
    assert!(found >= 6, "found only {found} `service VARCHAR(n)` columns in the installed SQL: update this test");
}

// ---------------------------------------------------------------------------------------------
// The lease and the settings: one reader, idgen_policy()

#[test]
fn the_installed_sql_reads_no_idgen_setting_but_through_idgen_policy() {
    // A `current_setting('idgen....')` in SQL would restate a default (its COALESCE) and read
    // the setting as the library may not have it (a refused value, a RESET): the SQL of idgen
    // 0.1.0 computed the lease that way. idgen_policy() (src/diagnostics/nodes.rs) is the one reader.
    for sql in FRESH_INSTALL {
        for (line_number, line) in sql.text.lines().enumerate() {
            assert!(
                !line.contains("current_setting('idgen."),
                "{}:{} reads an idgen setting itself; read it through idgen_policy(), which computes it as \
                 core/src/policy.rs' ClaimPolicy does: {line}",
                sql.path,
                line_number + 1
            );
        }
    }
}

#[test]
fn every_lease_the_views_use_is_idgen_policys() {
    let nodes = view(&DIAGNOSTICS, "idgen_nodes");
    // A row that records no lease gets the lease of today's settings, as ClaimPolicy::node_state does.
    for expected in [
        "COALESCE(n.lease_until, n.last_seen OPERATOR(pg_catalog.+) p.lease) AS lease_until",
        "idgen_private.holder_bound(n, p.lease, p.takeover_idle_1h) AS bound",
        "CROSS JOIN idgen_policy() p",
    ] {
        assert!(
            nodes.contains(expected),
            "sql/diagnostics.sql, the view idgen_nodes, no longer has {expected:?}: its lease must be idgen_policy()'s \
             (ClaimPolicy::lease_secs, core/src/policy.rs), the one ClaimPolicy::node_state computes its state by"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Values the comments state

#[test]
fn idgen_heartbeat_states_the_default_heartbeat_interval() {
    let comment = comment_on(
        &REGISTRY_API,
        "FUNCTION idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint)",
    );
    let minutes = number_before(&comment, " minutes by default").unwrap_or_else(|| {
        panic!("sql/registry_api.sql, COMMENT ON FUNCTION idgen_heartbeat, no longer says \"N minutes by default\": {comment:?}")
    });
    assert_eq!(
        minutes * MINUTE,
        ClaimPolicy::DEFAULT.heartbeat_interval_secs,
        "sql/registry_api.sql, COMMENT ON FUNCTION idgen_heartbeat ({minutes} minutes by default), and \
         core/src/policy.rs, ClaimPolicy::DEFAULT.heartbeat_interval_secs, differ"
    );
}

#[test]
fn idgen_purge_history_states_the_default_retention() {
    let comment = comment_on(&HISTORY, "FUNCTION idgen_purge_history(interval)");
    let days = number_before(&comment, " days)").unwrap_or_else(|| {
        panic!("sql/history.sql, COMMENT ON FUNCTION idgen_purge_history, no longer says \"(... N days)\": {comment:?}")
    });
    assert_eq!(
        days * DAY,
        HISTORY_RETENTION_DEFAULT_SECS,
        "sql/history.sql, COMMENT ON FUNCTION idgen_purge_history ({days} days), and core/src/history.rs, \
         HISTORY_RETENTION_DEFAULT_SECS (the default of idgen.history_retention), differ"
    );
}

#[test]
fn refusals_are_recorded_once_a_minute_as_the_comments_say() {
    let comments = [
        (&HISTORY, "TABLE idgen_private.idgen_history"),
        (&HISTORY, "COLUMN idgen_private.idgen_history.event"),
        (&HISTORY, "INDEX idgen_private.idgen_history_refusals"),
        (&DIAGNOSTICS, "COLUMN idgen_metrics.ownership_losses"),
        (&DIAGNOSTICS, "COLUMN idgen_metrics.refused_claims"),
    ];
    for (sql, object) in comments {
        let comment = comment_on(sql, object);
        assert!(
            REFUSAL_INTERVAL_SECS == MINUTE && comment.contains("minute"),
            "{}, COMMENT ON {object} ({comment:?}), and core/src/history.rs, REFUSAL_INTERVAL_SECS \
             ({REFUSAL_INTERVAL_SECS} s), no longer agree on one refusal of a kind a minute",
            sql.path
        );
    }
}

#[test]
fn the_comments_state_the_default_layout() {
    let layout = Layout::DEFAULT;
    assert_eq!(layout.time_unit_ms, 1, "the comments below speak of milliseconds");
    let epoch_day = &iso_utc(layout.epoch_unix_ms)[..10];
    let comment = comment_on(&GENERATOR, "FUNCTION idgen_next_id()");
    let stated = format!(
        "{} bits of milliseconds since {epoch_day} | {}-bit machine id | {}-bit sequence",
        layout.time_bits, layout.machine_bits, layout.sequence_bits
    );
    assert!(
        comment.contains(&stated),
        "sql/generator.sql, COMMENT ON FUNCTION idgen_next_id() ({comment:?}), no longer says {stated:?} as \
         core/src/layout.rs, Layout::DEFAULT, has it"
    );
    let ids = layout.machine_id_range();
    let count = usize::from(*ids.end()) + 1 - usize::from(*ids.start());
    let stated_range = format!("{} to {} by default", ids.start(), ids.end());
    let stated_count = format!("{},{:03}", count / 1000, count % 1000);
    for (sql, object, stated) in [
        (&REGISTRY, "COLUMN system_nodes.machine_id", &stated_range),
        (&DIAGNOSTICS, "COLUMN idgen_capacity.capacity", &stated_count),
    ] {
        let comment = comment_on(sql, object);
        assert!(
            comment.contains(stated.as_str()),
            "{}, COMMENT ON {object} ({comment:?}), no longer says {stated:?} as core/src/layout.rs, \
             Layout::DEFAULT.machine_id_range(), has it",
            sql.path
        );
    }
}

#[test]
fn the_views_give_a_service_without_a_recorded_layout_the_default_pool() {
    // idgen_nodes and idgen_capacity read each service's pool from idgen_layouts, and for a service
    // with no row there (its row deleted by hand) the default layout's.
    let pool = ServiceLayout::DEFAULT.pool;
    let stated = [format!("COALESCE(l.pool_first, {})", pool.first), format!("COALESCE(l.pool_last, {})", pool.last)];
    for name in ["idgen_nodes", "idgen_capacity"] {
        let text = view(&DIAGNOSTICS, name);
        for s in &stated {
            assert!(
                text.contains(s.as_str()),
                "sql/diagnostics.sql, VIEW {name}, no longer says {s:?} as core/src/layout.rs, ServiceLayout::DEFAULT, has it"
            );
        }
    }
}

#[test]
fn the_comments_that_list_events_outcomes_and_states_name_every_one() {
    let events: Vec<&str> = EventKind::ALL.iter().map(|k| k.label()).collect();
    let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
    let states: Vec<&str> = NodeState::ALL.iter().map(|s| s.label()).collect();
    let claim_states: Vec<&str> = NodeState::OF_CLAIM.iter().map(|s| s.label()).collect();
    let lists = [
        (&HISTORY, "COLUMN idgen_private.idgen_history.event", "EventKind::ALL", &events),
        (&DIAGNOSTICS, "COLUMN idgen_events.event", "EventKind::ALL", &events),
        (&HISTORY, "COLUMN idgen_private.idgen_history.outcome", "Outcome::ALL", &outcomes),
        (&DIAGNOSTICS, "COLUMN idgen_events.outcome", "Outcome::ALL", &outcomes),
        (&REGISTRY_API, "FUNCTION idgen_claim(text, inet, integer)", "Outcome::ALL", &outcomes),
        (&DIAGNOSTICS, "COLUMN idgen_nodes.state", "NodeState::ALL", &states),
        (
            &DIAGNOSTICS,
            "FUNCTION idgen_node_state(timestamptz, timestamptz, timestamptz, timestamptz)",
            "NodeState::OF_CLAIM",
            &claim_states,
        ),
    ];
    for (sql, object, rust_place, labels) in lists {
        let comment = comment_on(sql, object);
        let missing: Vec<&&str> = labels.iter().filter(|l| !names_word(&comment, l)).collect();
        assert!(
            missing.is_empty(),
            "{}, COMMENT ON {object}, does not name {missing:?} of {rust_place}: {comment:?}",
            sql.path
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the SQL

/// Asserts that two lists of labels hold the same labels (in any order), naming both places.
fn assert_same_labels<S: AsRef<str>>(sql_place: &str, sql: &[S], rust_place: &str, rust: &[&str]) {
    let sql: BTreeSet<&str> = sql.iter().map(AsRef::as_ref).collect();
    let rust: BTreeSet<&str> = rust.iter().copied().collect();
    let only_sql: Vec<&&str> = sql.difference(&rust).collect();
    let only_rust: Vec<&&str> = rust.difference(&sql).collect();
    assert!(
        only_sql.is_empty() && only_rust.is_empty(),
        "{sql_place} and {rust_place} differ: only in the SQL {only_sql:?}, only in the Rust {only_rust:?}"
    );
}

/// The text of `sql` from the first `marker` on.
fn from(sql: &Sql, marker: &str) -> &'static str {
    let at = sql.text.find(marker).unwrap_or_else(|| panic!("{} has no `{marker}`: update this test", sql.path));
    &sql.text[at..]
}

/// The condition of `CONSTRAINT name CHECK (...)`, without its outer parentheses.
fn check_clause(sql: &Sql, name: &str) -> &'static str {
    let clause = from(sql, &format!("CONSTRAINT {name} CHECK"));
    let open = clause.find('(').expect("a CHECK has a condition");
    let close = closing(clause, open, '(', ')').unwrap_or_else(|| panic!("{}: CHECK {name} is not closed", sql.path));
    &clause[open + 1..close]
}

/// A view's definition: from `CREATE VIEW name` to the end of its statement.
fn view(sql: &Sql, name: &str) -> &'static str {
    let text = from(sql, &format!("CREATE VIEW {name} "));
    let end = outside_literals(text).find(|&(_, c)| c == ';').map(|(at, _)| at).expect("a view ends with ;");
    &text[..end]
}

/// The columns of `CREATE TABLE name (...)`: the first word of each line up to its constraints.
fn table_columns(sql: &Sql, name: &str) -> Vec<String> {
    let text = from(sql, &format!("CREATE TABLE {name} ("));
    let open = text.find('(').unwrap();
    let body = &text[open + 1..closing(text, open, '(', ')').expect("a table is closed")];
    body.lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("CONSTRAINT") && !line.starts_with("PRIMARY KEY"))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The text of `COMMENT ON object IS '...'`, unquoted.
fn comment_on(sql: &Sql, object: &str) -> String {
    let text = from(sql, &format!("COMMENT ON {object} IS"));
    literals(text).into_iter().next().unwrap_or_else(|| panic!("{}: COMMENT ON {object} has no text", sql.path))
}

/// The part of `text` that starts at the last `start` before the first `end`, through `end`.
fn clause_ending_at<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let end_at = text.find(end)?;
    let start_at = text[..end_at].rfind(start)?;
    Some(&text[start_at..end_at + end.len()])
}

/// The labels `column` is compared with in `text`: `column OPERATOR(pg_catalog.=) 'label'` (or
/// `<>`), and `column OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'b'])` (or `<> ALL`). Comparisons with anything
/// but literals are left out.
fn compared_with(text: &str, column: &str) -> Vec<String> {
    let pattern = format!("{column} OPERATOR(pg_catalog.");
    let mut labels = Vec::new();
    for (at, _) in text.match_indices(&pattern) {
        // `n.state` must not be the tail of another name (`an.state`).
        if text[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + pattern.len()..];
        let rest = rest[rest.find(") ").expect("an operator is closed") + 2..].trim_start();
        if rest.starts_with("ANY (ARRAY[") || rest.starts_with("ALL (ARRAY[") {
            labels.extend(array_literals(rest));
        } else if rest.starts_with('\'') {
            labels.extend(literals(rest).into_iter().next());
        }
    }
    labels
}

/// `column BETWEEN a AND b`: (a, b).
fn between(condition: &str, column: &str) -> (i64, i64) {
    let rest = condition
        .trim()
        .strip_prefix(&format!("{column} BETWEEN "))
        .unwrap_or_else(|| panic!("not `{column} BETWEEN a AND b`: {condition:?}"));
    let (a, b) = rest.split_once(" AND ").unwrap_or_else(|| panic!("not `{column} BETWEEN a AND b`: {condition:?}"));
    (a.trim().parse().unwrap(), b.trim().parse().unwrap())
}

/// `column >= n`: n.
fn at_least(condition: &str, column: &str) -> i64 {
    let rest = condition
        .trim()
        .strip_prefix(&format!("{column} >= "))
        .unwrap_or_else(|| panic!("not `{column} >= n`: {condition:?}"));
    rest.trim().parse().unwrap_or_else(|_| panic!("not `{column} >= n`: {condition:?}"))
}

/// The quoted literals of the first `ARRAY[...]` in `text`.
fn array_literals(text: &str) -> Vec<String> {
    let open = text.find("ARRAY[").unwrap_or_else(|| panic!("no ARRAY[...] in {text:?}")) + "ARRAY".len();
    let close = closing(text, open, '[', ']').unwrap_or_else(|| panic!("ARRAY[ not closed in {text:?}"));
    literals(&text[open..close])
}

/// Every quoted literal of `text`, unquoted (`''` read as `'`).
fn literals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut literal = String::new();
        loop {
            match chars.next() {
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    literal.push('\'');
                }
                Some('\'') | None => break,
                Some(other) => literal.push(other),
            }
        }
        out.push(literal);
    }
    out
}

/// The characters of `text` that are not inside a quoted literal, with their byte offsets.
fn outside_literals(text: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let mut quoted = false;
    text.char_indices().filter(move |&(_, c)| {
        if c == '\'' {
            // A doubled quote inside a literal toggles twice: it stays inside.
            quoted = !quoted;
            return false;
        }
        !quoted
    })
}

/// The offset of the `close` that matches the `open` at `at`, outside quoted literals.
fn closing(text: &str, at: usize, open: char, close: char) -> Option<usize> {
    let mut depth = 0;
    for (offset, c) in outside_literals(&text[at..]) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(at + offset);
            }
        }
    }
    None
}

/// The whole number just before `suffix` in `text`.
fn number_before(text: &str, suffix: &str) -> Option<i64> {
    let head = &text[..text.find(suffix)?];
    let digits: String = head.chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

/// Whether `word` stands in `text` as a word of its own (not inside `released` for `release`).
fn names_word(text: &str, word: &str) -> bool {
    let part_of_name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).any(|(at, _)| {
        !part_of_name(text[..at].chars().next_back()) && !part_of_name(text[at + word.len()..].chars().next())
    })
}
