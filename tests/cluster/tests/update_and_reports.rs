//! What a review found in 0.6.0's server side, each test failing before its fix: hostile
//! generator counts that broke `idgen_metrics` for every reader; the update from 0.5.1 dropping
//! objects outside the extension (a user's view, a row security policy) with `idgen_policy()`,
//! silently, or stopping at another role's temporary view with PostgreSQL's own error; and the
//! update resetting the privileges set on the objects it creates again.

use idgen_cluster_tests::*;
use postgres::Client;

fn service_role(admin: &mut Client, role: &str, service: &str) {
    ensure_login_role(admin, role);
    admin.query_one("SELECT idgen_grant_service($1, $2)", &[&service, &role]).unwrap();
}

/// A service role reports the largest counts it may (each one valid on its own: not negative) for
/// two of its nodes. idgen_metrics sums them as numeric and casts the sum to bigint: the view then
/// fails with 22003 for every reader of that service, the superuser and pg_monitor (the Prometheus
/// exporter) included, until the nodes heartbeat again or release.
#[test]
fn hostile_generator_counts_of_one_service_break_idgen_metrics_for_every_reader() {
    let db = TestDb::create("attack_metrics_counts");
    let mut admin = db.connect();
    service_role(&mut admin, "attack_counts_svc", "svc");
    admin.batch_execute("SET ROLE attack_counts_svc").unwrap();
    for host in ["10.0.0.1", "10.0.0.2"] {
        let held = claim(&mut admin, "svc", host, 1).unwrap();
        admin
            .query_one(
                "SELECT idgen_heartbeat('svc', $1, $2::text::inet, 1, $3, NULL, $4, 0, 0)",
                &[&held.machine_id, &host, &held.version, &i64::MAX],
            )
            .unwrap();
    }
    admin.batch_execute("RESET ROLE").unwrap();
    // A second service, healthy, read by the same monitoring query.
    claim(&mut admin, "other", "10.0.0.9", 1).unwrap();
    let metrics = admin.query("SELECT service, clock_backward_waits FROM idgen_metrics ORDER BY service", &[]);
    assert!(
        metrics.is_ok(),
        "idgen_metrics fails for the superuser: {:?}",
        metrics.err().map(|e| db_error(&e).message().to_owned())
    );
}

/// ALTER EXTENSION idgen UPDATE from 0.5.1 runs `DROP FUNCTION idgen_policy() CASCADE`: every
/// object outside the extension that depended on idgen_nodes, idgen_capacity, idgen_metrics (views
/// over them, SQL functions, row-level security policies) was dropped, silently (an extension
/// script runs with client_min_messages = warning): a RESTRICTIVE policy that referred to
/// idgen_nodes disappeared and the rows it hid became visible. Now the update refuses, naming
/// them, and changes nothing.
#[test]
fn an_update_from_0_5_1_drops_no_object_outside_the_extension() {
    let db = TestDb::empty_on(&base_dsn(), "attack_update_cascade");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION idgen VERSION '0.5.1';
             CREATE VIEW my_monitor AS SELECT service, held FROM idgen_capacity;
             CREATE TABLE secrets (service text, v text);
             INSERT INTO secrets VALUES ('svc', 'hidden while svc holds ids');
             ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;
             CREATE POLICY readable ON secrets USING (true);
             CREATE POLICY only_unheld ON secrets AS RESTRICTIVE
                 USING (NOT EXISTS (SELECT FROM idgen_nodes n WHERE n.service = secrets.service));",
        )
        .unwrap();
    let before: i64 = admin.query_one("SELECT count(*) FROM pg_policy", &[]).unwrap().get(0);
    let updated = admin.batch_execute("ALTER EXTENSION idgen UPDATE TO '0.6.0'");
    let refusal = updated.as_ref().err().map(db_error).expect("the update went ahead over outside dependents");
    assert_eq!(refusal.code().code(), "2BP01", "{refusal:?}");
    let detail = refusal.detail().unwrap_or_default();
    assert!(
        detail.contains("view my_monitor (owner postgres)") && detail.contains("policy only_unheld on table secrets"),
        "{detail}"
    );
    let version: String =
        admin.query_one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(version, "0.5.1");
    let policies: i64 = admin.query_one("SELECT count(*) FROM pg_policy", &[]).unwrap().get(0);
    let view: Option<String> = admin.query_one("SELECT to_regclass('my_monitor')::text", &[]).unwrap().get(0);
    assert_eq!(
        (policies, view.as_deref()),
        (before, Some("my_monitor")),
        "the update (result {:?}) dropped objects outside the extension",
        updated.map_err(|e| e.to_string())
    );
}

/// The same update drops and recreates idgen_purge_history, idgen_events, idgen_nodes,
/// idgen_metrics, ...: the privileges a superuser set on them are lost. A purge role's EXECUTE
/// grant is gone (its daily purge fails with 42501 from then on), and a REVOKE SELECT ... FROM
/// PUBLIC on the views is undone (every role can read them again).
#[test]
fn an_update_from_0_5_1_keeps_the_privileges_set_on_the_extensions_objects() {
    let db = TestDb::empty_on(&base_dsn(), "attack_update_acls");
    let mut admin = db.connect();
    ensure_login_role(&mut admin, "attack_purger");
    admin
        .batch_execute(
            "CREATE EXTENSION idgen VERSION '0.5.1';
             GRANT EXECUTE ON FUNCTION idgen_purge_history(interval) TO attack_purger;
             REVOKE SELECT ON idgen_events, idgen_nodes, idgen_metrics FROM PUBLIC;",
        )
        .unwrap();
    let privileges = |admin: &mut Client| -> (bool, bool, bool) {
        let row = admin
            .query_one(
                "SELECT has_function_privilege('attack_purger', 'idgen_purge_history(interval)', 'EXECUTE'),
                        has_table_privilege('attack_purger', 'idgen_events', 'SELECT'),
                        has_table_privilege('attack_purger', 'idgen_nodes', 'SELECT')",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let before = privileges(&mut admin);
    assert_eq!(before, (true, false, false));
    admin.batch_execute("ALTER EXTENSION idgen UPDATE TO '0.6.0'").unwrap();
    assert_eq!(privileges(&mut admin), before, "the update changed the privileges set on idgen's objects");
}

/// Any role may read idgen_events (SELECT is granted to PUBLIC): a view of its own over it, even a
/// temporary one, stops the update for as long as the role keeps it. The update cannot drop what
/// is not idgen's; it says who holds it up, and how to end that.
#[test]
fn an_update_held_up_by_another_roles_view_names_it_and_how_to_end_it() {
    let db = TestDb::empty_on(&base_dsn(), "attack_update_blocked");
    let mut admin = db.connect();
    ensure_login_role(&mut admin, "attack_nobody");
    admin.batch_execute("CREATE EXTENSION idgen VERSION '0.5.1'").unwrap();
    let mut nobody = postgres::Client::connect(&format!("{} user=attack_nobody", db.dsn()), postgres::NoTls).unwrap();
    nobody.batch_execute("CREATE TEMP VIEW mine AS SELECT * FROM idgen_events").unwrap();
    let updated = admin.batch_execute("ALTER EXTENSION idgen UPDATE TO '0.6.0'");
    let refusal = updated.as_ref().err().map(db_error).expect("the update dropped another role's view");
    assert_eq!(refusal.code().code(), "2BP01", "{refusal:?}");
    assert!(refusal.detail().unwrap_or_default().contains(".mine (owner attack_nobody)"), "{refusal:?}");
    assert!(refusal.hint().unwrap_or_default().contains("pg_terminate_backend"), "{refusal:?}");
    // Its session gone, the update goes ahead.
    drop(nobody);
    wait_for("the temporary view to go with its session", PATIENCE, || {
        admin.query_one("SELECT count(*) FROM pg_class WHERE relname = 'mine'", &[]).unwrap().get::<_, i64>(0) == 0
    });
    admin.batch_execute("ALTER EXTENSION idgen UPDATE TO '0.6.0'").unwrap();
}
