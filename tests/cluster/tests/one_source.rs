//! The SQL and the Rust agree where the text cannot show it (core/tests/sql_restates.rs compares
//! the texts): what the settings default to, the lease the views get from idgen_policy(), and
//! the lease and take-back time idgen_nodes shows for a row that records none (the view's
//! COALESCE and `idgen_private.holder_bound` in sql/registry.sql), against `ClaimPolicy` in
//! core/src/policy.rs, by the settings the cluster runs by.

use idgen_cluster_tests::*;
use idgen_core::fleet;
use idgen_core::history::HISTORY_RETENTION_DEFAULT_SECS;
use idgen_core::layout::{Layout, Preset, ServiceLayout};
use idgen_core::policy::{ClaimPolicy, NodeState, RowAges};
use postgres::Client;

/// The settings of the `ClaimPolicy` fields, with their values in it.
fn policy_settings(p: &ClaimPolicy) -> [(&'static str, i64); 6] {
    [
        ("idgen.takeover_idle_7d", p.takeover_idle_7d_secs),
        ("idgen.takeover_idle_1d", p.takeover_idle_1d_secs),
        ("idgen.takeover_idle_1h", p.takeover_idle_1h_secs),
        ("idgen.release_cooldown", p.release_cooldown_secs),
        ("idgen.heartbeat_interval", p.heartbeat_interval_secs),
        ("idgen.lease_safety_margin", p.lease_safety_margin_secs),
    ]
}

/// A setting's value in `column` of pg_settings (`setting` or `boot_val`), in seconds.
fn setting_secs(client: &mut Client, name: &str, column: &str) -> i64 {
    client.batch_execute("LOAD 'idgen'").unwrap();
    let row = client
        .query_one(&format!("SELECT {column}::bigint, unit FROM pg_settings WHERE name = $1"), &[&name])
        .unwrap_or_else(|e| panic!("{name} is not a setting: {e}"));
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("s"), "{name} is set in seconds");
    row.get(0)
}

/// The policy the cluster runs by now, as the claim reads it.
fn policy_now(client: &mut Client) -> ClaimPolicy {
    let mut read = |name| setting_secs(client, name, "setting");
    ClaimPolicy {
        takeover_idle_7d_secs: read("idgen.takeover_idle_7d"),
        takeover_idle_1d_secs: read("idgen.takeover_idle_1d"),
        takeover_idle_1h_secs: read("idgen.takeover_idle_1h"),
        release_cooldown_secs: read("idgen.release_cooldown"),
        heartbeat_interval_secs: read("idgen.heartbeat_interval"),
        lease_safety_margin_secs: read("idgen.lease_safety_margin"),
    }
}

#[test]
fn the_settings_default_to_claim_policy_default_and_the_history_retention_default() {
    let db = TestDb::create("one_source_defaults");
    let mut client = db.connect();
    let mut defaults = policy_settings(&ClaimPolicy::DEFAULT).to_vec();
    defaults.push(("idgen.history_retention", HISTORY_RETENTION_DEFAULT_SECS));
    for (name, rust) in defaults {
        let sql = setting_secs(&mut client, name, "boot_val");
        assert_eq!(
            sql, rust,
            "{name} defaults to {sql} s (src/settings.rs, as pg_settings.boot_val shows it), and \
             core/src/policy.rs' ClaimPolicy::DEFAULT (or core/src/history.rs' HISTORY_RETENTION_DEFAULT_SECS) \
             has {rust} s"
        );
    }
}

#[test]
fn idgen_policy_gives_the_views_the_lease_claim_policy_computes() {
    let db = TestDb::create("one_source_policy");
    let mut client = db.connect();
    let policy = policy_now(&mut client);
    let row = client
        .query_one(
            "SELECT extract(epoch FROM lease)::bigint, extract(epoch FROM takeover_idle_1h)::bigint,
                    extract(epoch FROM takeover_idle_1d)::bigint, extract(epoch FROM takeover_idle_7d)::bigint,
                    extract(epoch FROM release_cooldown)::bigint, extract(epoch FROM heartbeat_interval)::bigint,
                    extract(epoch FROM lease_safety_margin)::bigint
               FROM idgen_policy()",
            &[],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        policy.lease_secs(),
        "idgen_policy().lease, which the views of sql/diagnostics.sql use, is not ClaimPolicy::lease_secs() \
         (core/src/policy.rs: idgen.takeover_idle_1h minus idgen.lease_safety_margin) of the settings {policy:?}"
    );
    let columns = [
        ("takeover_idle_1h", policy.takeover_idle_1h_secs),
        ("takeover_idle_1d", policy.takeover_idle_1d_secs),
        ("takeover_idle_7d", policy.takeover_idle_7d_secs),
        ("release_cooldown", policy.release_cooldown_secs),
        ("heartbeat_interval", policy.heartbeat_interval_secs),
        ("lease_safety_margin", policy.lease_safety_margin_secs),
    ];
    for (i, (column, rust)) in columns.into_iter().enumerate() {
        assert_eq!(row.get::<_, i64>(i + 1), rust, "idgen_policy().{column} is not the setting the claim reads");
    }
}

#[test]
fn a_row_that_records_no_lease_is_shown_with_the_lease_and_take_back_time_claim_policy_gives_it() {
    let db = TestDb::create("one_source_unrecorded");
    let mut client = db.connect();
    let policy = policy_now(&mut client);
    let (lease, takeover) = (policy.lease_secs(), policy.takeover_idle_1h_secs);
    assert!(
        lease >= 120 && takeover - lease >= 120,
        "this test needs a lease of minutes and a margin of minutes (the defaults): {policy:?}"
    );
    // Silent for: inside the lease, past it but not takeable yet, and past the 1-hour tier.
    let idle = [lease - 60, (lease + takeover) / 2, takeover + 60];
    for (machine_id, secs) in idle.iter().enumerate() {
        // Written by hand: no lease_until, no takeover_at, no watermark (issued_until -infinity).
        client
            .execute(
                "INSERT INTO system_nodes (service, machine_id, host, port, version, last_seen)
                 VALUES ('unrecorded', $1, '192.0.2.1', $2, 1, now() - make_interval(secs => $3))",
                &[&(machine_id as i32), &(1000 + machine_id as i32), &(*secs as f64)],
            )
            .unwrap();
    }
    let rows = client
        .query(
            "SELECT machine_id, state, extract(epoch FROM now() - last_seen)::float8,
                    extract(epoch FROM lease_until - last_seen)::bigint, lease_until > now(),
                    extract(epoch FROM bound - last_seen)::bigint, bound <= now()
               FROM idgen_nodes WHERE service = 'unrecorded' ORDER BY machine_id",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), idle.len());
    for row in rows {
        let machine_id: i32 = row.get(0);
        let state: String = row.get(1);
        let ages =
            RowAges { idle_secs: row.get(2), released_secs: None, lease_left_secs: None, takeover_left_secs: None };
        let rust = policy.node_state(ages);
        let place = format!("machine id {machine_id}, silent {:.0} s, state {state}", ages.idle_secs);
        assert_eq!(state, rust.label(), "{place}: idgen_node_state and ClaimPolicy::node_state differ");
        // The view's lease_until: COALESCE(n.lease_until, n.last_seen + p.lease) in sql/diagnostics.sql.
        assert_eq!(
            row.get::<_, i64>(3),
            lease,
            "{place}: idgen_nodes.lease_until of a row that records none is not last_seen plus \
             ClaimPolicy::lease_secs() (core/src/policy.rs), which ClaimPolicy::node_state stands in with"
        );
        assert_eq!(
            row.get::<_, bool>(4),
            rust == NodeState::Live,
            "{place}: idgen_nodes.lease_until and ClaimPolicy::node_state disagree on whether the lease runs"
        );
        // The bound: idgen_private.holder_bound(n, lease, takeover_age) in sql/registry.sql.
        assert_eq!(
            row.get::<_, i64>(5),
            takeover,
            "{place}: idgen_private.holder_bound (sql/registry.sql) of a row that records no terms is not \
             last_seen plus idgen.takeover_idle_1h, the age at which ClaimPolicy::node_state makes it takeable"
        );
        let takeable = matches!(rust, NodeState::Idle1h | NodeState::Idle1d | NodeState::Idle7d);
        assert_eq!(
            row.get::<_, bool>(6),
            takeable,
            "{place}: idgen_nodes.bound (idgen_private.holder_bound, sql/registry.sql) and \
             ClaimPolicy::node_state disagree on whether a claim may take the id back"
        );
    }
}

/// The statements the library runs (src/statements.rs).
#[path = "../../../src/statements.rs"]
#[allow(dead_code)]
mod statements;

/// `statement`'s text with its parameters replaced by SQL literals, one per parameter in order.
fn with_literals(statement: &statements::Statement, literals: &[&str]) -> String {
    assert_eq!(
        literals.len(),
        statement.params.len(),
        "{} takes {} parameters",
        statement.name,
        statement.params.len()
    );
    // From the last: `$1` is a prefix of `$10`.
    (1..=literals.len())
        .rev()
        .fold(statement.text.to_owned(), |text, n| text.replace(&format!("${n}"), literals[n - 1]))
}

#[test]
fn a_claim_counts_in_use_what_idgen_capacity_counts_in_use() {
    // The capacity alert of a claim counts with COUNT_IN_USE (src/statements.rs); idgen_capacity
    // counts the rows whose idgen_nodes state is not `released`. Rows in every state: held and
    // fresh, held past its lease, idle for each tier, released and cooling down, released past
    // the cooldown by hand (fenced: its holder's bound ahead) and by its holder (with its watermark).
    let db = TestDb::create("one_source_in_use");
    let mut client = db.connect();
    let policy = policy_now(&mut client);
    let (lease, cooldown) = (policy.lease_secs(), policy.release_cooldown_secs);
    let held_idle = [
        0,
        lease + 1,
        policy.takeover_idle_1h_secs + 1,
        policy.takeover_idle_1d_secs + 1,
        policy.takeover_idle_7d_secs + 1,
    ];
    // (seconds ago, released with the holder's watermark)
    let released_ago = [(cooldown / 2, false), (cooldown + 1, false), (cooldown + 1, true)];
    for (i, secs) in held_idle.iter().enumerate() {
        client.query_one("SELECT idgen_claim('in_use', '192.0.2.1', $1)", &[&(2000 + i as i32)]).unwrap();
        client
            .execute(
                "UPDATE system_nodes SET last_seen = now() - make_interval(secs => $2),
                        lease_until = now() - make_interval(secs => $2) + make_interval(secs => $3),
                        takeover_at = now() - make_interval(secs => $2) + make_interval(secs => $4)
                  WHERE service = 'in_use' AND port = $1",
                &[&(2000 + i as i32), &(*secs as f64), &(lease as f64), &(policy.takeover_idle_1h_secs as f64)],
            )
            .unwrap();
    }
    for (i, (secs, with_watermark)) in released_ago.iter().enumerate() {
        let port = 3000 + i as i32;
        let row = client
            .query_one("SELECT machine_id, version FROM idgen_claim('in_use', '192.0.2.2', $1)", &[&port])
            .unwrap();
        let (machine_id, version): (i32, i64) = (row.get(0), row.get(1));
        let watermark = if *with_watermark { "now()" } else { "NULL" };
        client
            .query_one(
                &format!("SELECT idgen_release('in_use', $1, '192.0.2.2', $2, $3, {watermark})"),
                &[&machine_id, &port, &version],
            )
            .unwrap();
        client
            .execute(
                "UPDATE system_nodes SET released_at = now() - make_interval(secs => $2)
                  WHERE service = 'in_use' AND machine_id = $1",
                &[&machine_id, &(*secs as f64)],
            )
            .unwrap();
    }
    let states: Vec<String> = client
        .query("SELECT DISTINCT state FROM idgen_nodes WHERE service = 'in_use' ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(states.len() >= 8, "the rows do not reach every state: {states:?}");
    assert!(states.contains(&"fenced".to_owned()) && states.contains(&"released".to_owned()), "{states:?}");
    let capacity: i64 =
        client.query_one("SELECT in_use FROM idgen_capacity WHERE service = 'in_use'", &[]).unwrap().get(0);
    let cooldown_literal = format!("'{cooldown} seconds'::interval");
    let claim_counts =
        with_literals(&statements::COUNT_IN_USE, &["'in_use'", &cooldown_literal, "0::smallint", "1023::smallint"]);
    let claim: i64 = client.query_one(claim_counts.as_str(), &[]).unwrap().get(0);
    assert_eq!(
        claim, capacity,
        "COUNT_IN_USE (src/statements.rs, the claim's capacity alert) counts {claim} in use, idgen_capacity.in_use \
         (idgen_node_state, sql/diagnostics.sql) {capacity}, of rows in the states {states:?}"
    );
    assert_eq!(capacity, held_idle.len() as i64 + 2, "in use: every held row, the one cooling down and the fenced one");
}

#[test]
fn the_fleet_settings_default_to_the_cores_values() {
    let db = TestDb::create("one_source_fleet_defaults");
    let mut client = db.connect();
    client.batch_execute("LOAD 'idgen'").unwrap();
    let boot = |client: &mut Client, name: &str| -> String {
        client.query_one("SELECT boot_val FROM pg_settings WHERE name = $1", &[&name]).unwrap().get(0)
    };
    let expected = [
        ("idgen.capacity_warning", fleet::CAPACITY_WARNING_DEFAULT.to_string()),
        ("idgen.capacity_critical", fleet::CAPACITY_CRITICAL_DEFAULT.to_string()),
        ("idgen.capacity_alert", fleet::CAPACITY_ALERT_UNSET.to_string()),
        ("idgen.clock_skew_alert", fleet::CLOCK_SKEW_ALERT_DEFAULT_MS.to_string()),
        ("idgen.restart_loop_window", fleet::RESTART_LOOP_WINDOW_DEFAULT_SECS.to_string()),
        ("idgen.restart_loop_claims", fleet::RESTART_LOOP_CLAIMS_DEFAULT.to_string()),
    ];
    for (name, rust) in expected {
        let sql = boot(&mut client, name);
        let same = sql == rust || sql.parse::<f64>().ok() == rust.parse::<f64>().ok();
        assert!(same, "{name} defaults to {sql} (src/settings.rs), and core/src/fleet.rs has {rust}");
    }
}

#[test]
fn idgen_capacity_gives_the_level_the_claims_alert_computes() {
    // idgen_capacity.level restates fleet::capacity_level (strictly above each threshold) in SQL:
    // the counts of rows in use near each threshold, against the levels the cluster runs by.
    let db = TestDb::create("one_source_capacity_level");
    let mut client = db.connect();
    let row = client.query_one("SELECT capacity_warning, capacity_critical FROM idgen_policy()", &[]).unwrap();
    let (warning, critical): (f64, f64) = (row.get(0), row.get(1));
    // The service's pool: the default layout's every machine id (this server hands out all).
    let capacity = i32::from(ServiceLayout::DEFAULT.pool.last) + 1;
    for in_use in 0..=1024i64 {
        if in_use > 0 {
            client
                .execute(
                    "INSERT INTO system_nodes (service, machine_id, host, port, version) VALUES ('cap', $1, '192.0.2.1', $2, 1)",
                    &[&((in_use - 1) as i32), &(1000 + in_use as i32)],
                )
                .unwrap();
        }
        // Every count near a threshold, and a few others.
        let used = in_use as f64 / f64::from(capacity);
        if !((used - warning).abs() < 0.01 || (used - critical).abs() < 0.01 || in_use % 200 == 1) {
            continue;
        }
        let row = client.query_opt("SELECT level, capacity FROM idgen_capacity WHERE service = 'cap'", &[]).unwrap();
        if let Some(row) = &row {
            assert_eq!(row.get::<_, i32>(1), capacity, "idgen_capacity.capacity: the default pool");
        }
        let sql: Option<String> = row.and_then(|r| r.get(0));
        let rust = fleet::capacity_level(in_use, i64::from(capacity), warning, critical).map(|l| l.label().to_owned());
        assert_eq!(
            sql, rust,
            "{in_use} of {capacity} in use: idgen_capacity.level (sql/diagnostics.sql) and core/src/fleet.rs' capacity_level differ"
        );
    }
}

#[test]
fn idgen_layouts_gives_each_layout_the_rate_and_end_the_core_computes() {
    // The view restates Layout::ids_per_second and Layout::last_unix_ms in SQL.
    let db = TestDb::create("one_source_layouts");
    let mut client = db.connect();
    let custom =
        "idgen_define_layout('custom', 'snowflake', epoch => '2020-02-03 04:05:06.789+00', time_unit_ms => 7, \
                  time_bits => 40, machine_bits => 12, sequence_bits => 5, field_order => 'time_sequence_machine')";
    client.batch_execute(&format!("SELECT {custom}")).unwrap();
    let mut layouts: Vec<(String, Layout)> = Preset::ALL.iter().map(|p| (p.name().to_owned(), p.layout())).collect();
    for (name, _) in &layouts {
        client.batch_execute(&format!("SELECT idgen_define_layout('{name}', '{name}')")).unwrap();
    }
    layouts.push(("custom".to_owned(), service_layout(&mut client, "custom").unwrap()));
    assert_eq!(layouts[3].1.epoch_unix_ms, 1_580_702_706_789);
    for (service, layout) in layouts {
        let row = client
            .query_one(
                "SELECT ids_per_second, (extract(epoch FROM ends_at) * 1000)::bigint FROM idgen_layouts WHERE service = $1",
                &[&service],
            )
            .unwrap();
        let sql: (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(
            sql,
            (layout.ids_per_second() as i64, layout.last_unix_ms()),
            "{service}: idgen_layouts (sql/diagnostics.sql) and core/src/layout.rs' ids_per_second and last_unix_ms differ"
        );
    }
}

/// The name the server gives a type the statements declare (`postgres::types::Type::name`).
fn server_type_name(declared: &str) -> &str {
    match declared {
        "smallint" => "int2",
        "integer" => "int4",
        "bigint" => "int8",
        "boolean" => "bool",
        "bigint_array" => "_int8",
        other => other,
    }
}

#[test]
fn every_statement_returns_the_row_it_declares_for_the_parameters_it_declares() {
    // src/spi.rs binds each argument as the type its statement declares and reads each column as
    // the type the statement's row declares (src/statements.rs): here the server plans every
    // statement with those parameter types and says what its rows hold.
    let db = TestDb::create("one_source_statement_types");
    let mut client = db.connect();
    let mut problems = Vec::new();
    let mut rows_declared = 0;
    for statement in statements::ALL {
        let types: Vec<postgres::types::Type> = statement
            .params
            .iter()
            .map(|p| {
                postgres::types::Type::from_oid(match server_type_name(p.sql_type) {
                    "text" => 25,
                    "inet" => 869,
                    "int2" => 21,
                    "int4" => 23,
                    "int8" => 20,
                    "float8" => 701,
                    "oid" => 26,
                    "interval" => 1186,
                    "timestamptz" => 1184,
                    other => panic!("{}: parameter type {other} unknown to this test", statement.name),
                })
                .expect("a built-in type")
            })
            .collect();
        let planned = match client.prepare_typed(statement.text, &types) {
            Ok(planned) => planned,
            Err(e) => {
                problems.push(format!("{}: the server does not plan it: {e}", statement.name));
                continue;
            }
        };
        let Some(columns) = statement.columns else { continue };
        rows_declared += 1;
        let returned: Vec<&str> = planned.columns().iter().map(|c| c.type_().name()).collect();
        let declared: Vec<&str> = columns.iter().map(|c| server_type_name(c.sql_type)).collect();
        if returned != declared {
            problems.push(format!(
                "{}: returns ({}), declares ({})",
                statement.name,
                returned.join(", "),
                declared.join(", ")
            ));
        }
    }
    assert!(rows_declared >= 50, "only {rows_declared} statements declare their rows");
    assert!(problems.is_empty(), "statements whose declarations the server contradicts:\n{}", problems.join("\n"));
}
