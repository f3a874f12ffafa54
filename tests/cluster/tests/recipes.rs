//! The docs' recipes, run as the docs write them (each block is read from README.md or docs/*.md by
//! its marker, `<!-- recipe NAME -->` on the line before its fence, so the docs cannot drift from
//! what is tested): installing into a busy database, reinstalling beside connected sessions, a
//! schema of its own beside a table named `system_nodes`, switching `serial`, identity and
//! Sonyflake columns to `idgen_next_id()`, defining layouts, a trigger on a logical-replication
//! subscriber, and the SQL of the main job's demo through psql.

use idgen_cluster_tests::docs::{doc_block, with_database};
use idgen_cluster_tests::*;
use postgres::{Client, NoTls, SimpleQueryMessage};
use std::process::Command;

/// A recipe's two parts: what comes before `\nBEGIN;\n`, and the transaction from `BEGIN;` on.
fn split_at_transaction(name: &str, block: &str) -> (String, String) {
    let (before, transaction) =
        block.split_once("\nBEGIN;\n").unwrap_or_else(|| panic!("the recipe {name} has no BEGIN;"));
    (before.to_owned(), format!("BEGIN;\n{transaction}"))
}

/// The statements of a block, one by one, as psql sends them: a statement ends with a line ending
/// in `;` outside a `$$` body.
fn statements(block: &str) -> Vec<String> {
    let (mut statements, mut current, mut in_body) = (Vec::new(), String::new(), false);
    for line in block.lines() {
        current.push_str(line);
        current.push('\n');
        in_body ^= line.matches("$$").count() % 2 == 1;
        let code = line.split_once("--").map_or(line, |(code, _)| code).trim_end();
        if !in_body && code.ends_with(';') {
            statements.push(std::mem::take(&mut current));
        }
    }
    let is_comment = |l: &str| l.trim().is_empty() || l.trim_start().starts_with("--");
    assert!(current.lines().all(is_comment), "the block ends inside a statement: {current:?}");
    statements
}

/// Runs a recipe's statements one at a time, as psql does, stopping at the first error;
/// returns the rows of the last statement, as text. (One simple query holding several statements
/// would make them one transaction, which psql does not.)
fn run_block(client: &mut Client, block: &str) -> Result<Vec<Vec<Option<String>>>, postgres::Error> {
    let mut rows = Vec::new();
    for statement in statements(block) {
        rows.clear();
        for message in client.simple_query(&statement)? {
            if let SimpleQueryMessage::Row(row) = message {
                rows.push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect());
            }
        }
    }
    Ok(rows)
}

/// `idgen_health()`'s findings as text: none when healthy.
fn health(client: &mut Client) -> Vec<String> {
    client
        .query("SELECT format('%s %s (%s): %s', severity, finding, subject, detail) FROM idgen_health()", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn insert_order(client: &mut Client, item: &str) -> i64 {
    client
        .query_one("INSERT INTO orders (item) VALUES ($1) RETURNING id", &[&item])
        .unwrap_or_else(|e| panic!("inserting {item:?} into orders: {e:?}"))
        .get(0)
}

fn pid(client: &mut Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

#[test]
fn installing_into_a_busy_database_takes_no_outage_and_every_session_mints_at_once() {
    let db = TestDb::empty_on(&base_dsn(), "recipe_busy");
    let mut setup = db.connect();
    setup.batch_execute("CREATE TABLE unrelated (k int PRIMARY KEY); INSERT INTO unrelated VALUES (1)").unwrap();
    // The sessions a production database always has: an idle one, one idle in a transaction that
    // has read a table, one running a long query (bounded by the DSN's statement_timeout).
    let mut idle = db.connect();
    idle.batch_execute("SELECT 1").unwrap();
    let mut in_transaction = db.connect();
    in_transaction.batch_execute("BEGIN; SELECT count(*) FROM unrelated").unwrap();
    let mut sleeper = db.connect();
    let sleeper_pid = pid(&mut sleeper);
    let sleeping = spawn_named("the long query", move || sleeper.batch_execute("SELECT pg_sleep(600)"));
    let mut observer = db.connect();
    let is_sleeping = |observer: &mut Client| -> bool {
        observer
            .query_one(
                "SELECT coalesce(wait_event = 'PgSleep', false) FROM pg_stat_activity WHERE pid = $1",
                &[&sleeper_pid],
            )
            .unwrap()
            .get(0)
    };
    wait_for("the long query to run", PATIENCE, || is_sleeping(&mut observer));

    // The recipe, in a session of its own: the install, a table, and a first ID at once
    // (no 55000), then a healthy registry.
    let mut dba = db.connect();
    let findings = run_block(&mut dba, &doc_block("recipe busy-install")).unwrap();
    assert!(findings.is_empty(), "idgen_health() right after the install: {findings:?}");
    // Every session mints at once: a new one, and those connected before, the one inside its
    // transaction included. Connected at once, each holds its own machine id.
    let mut fresh = db.connect();
    for (client, item) in [(&mut fresh, "fresh"), (&mut idle, "idle"), (&mut in_transaction, "in transaction")] {
        insert_order(client, item);
    }
    in_transaction.batch_execute("COMMIT").unwrap();
    let (rows, machine_ids): (i64, i64) = dba
        .query_one("SELECT count(*), count(DISTINCT (idgen_decode(id)).machine_id) FROM orders", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((rows, machine_ids), (4, 4), "four sessions, four IDs, four machine ids");
    assert_eq!(health(&mut dba), Vec::<String>::new());
    // The long query ran through it all.
    assert!(is_sleeping(&mut observer), "the long query was disturbed by the install");
    observer.query_one("SELECT pg_cancel_backend($1)", &[&sleeper_pid]).unwrap();
    let cancelled = join_within(sleeping, PATIENCE, "the long query").unwrap_err();
    assert_eq!(sqlstate(&cancelled), "57014", "{cancelled:?}");
}

#[test]
fn the_first_id_needs_the_install_committed() {
    let db = TestDb::empty_on(&base_dsn(), "recipe_uncommitted_install");
    let mut dba = db.connect();
    // The recipe as one transaction, as a migration tool runs a migration.
    let block = doc_block("recipe busy-install");
    let (install, _) = block.split_once("SELECT * FROM idgen_health()").unwrap();
    dba.batch_execute("BEGIN").unwrap();
    let err = run_block(&mut dba, install).unwrap_err();
    dba.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    let e = err.as_db_error().unwrap();
    assert!(e.message().contains("created or updated in this transaction"), "{e:?}");
    assert!(e.hint().is_some_and(|h| h.contains("Commit the CREATE EXTENSION first")), "{e:?}");
    // Committed first, the same statements mint.
    run_block(&mut dba, install).unwrap();
    // A reinstall in one transaction is refused as clearly, at once (it waited for its own locks
    // and failed with a lock timeout).
    wait_past_backend_watermark(&mut dba, &db.name);
    let mut reinstall = db.connect();
    reinstall.batch_execute("SET lock_timeout = '10min'; BEGIN").unwrap();
    let err = reinstall
        .batch_execute("DROP EXTENSION idgen CASCADE; CREATE EXTENSION idgen; SELECT idgen_next_id()")
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    reinstall.batch_execute("ROLLBACK").unwrap();
    // A refused heartbeat there records its refusal in no worker of its own, which would wait for
    // this transaction's locks until its lock timeout (10 s), past this statement's.
    reinstall.batch_execute("SET statement_timeout = '5s'; BEGIN").unwrap();
    let err = reinstall
        .batch_execute(
            "DROP EXTENSION idgen CASCADE; CREATE EXTENSION idgen;
             SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 5000, 1)",
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    reinstall.batch_execute("ROLLBACK").unwrap();
}

#[test]
fn a_reinstall_beside_connected_sessions_changes_nothing_when_refused_and_mints_at_once_when_done() {
    let db = TestDb::create("recipe_reinstall");
    let service = db.name.clone();
    let (mut admin, admin_notices) = db.connect_recording();
    admin.batch_execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id(), item text)").unwrap();
    // The default depends on idgen: with nothing stamped yet, a plain DROP is refused for it, and
    // the recipe's listing names it.
    let err = admin.batch_execute("DROP EXTENSION idgen").unwrap_err();
    assert_eq!(sqlstate(&err), "2BP01", "{err:?}");
    let (listing, reinstall) = split_at_transaction("reinstall", &doc_block("recipe reinstall"));
    let listed = run_block(&mut admin, &listing).unwrap();
    let expected = vec![Some("orders".to_owned()), Some("id".to_owned()), Some("idgen_next_id()".to_owned())];
    assert_eq!(listed, vec![expected]);

    // An application session that mints under the registry to be dropped, and one that never minted.
    let (mut old, old_notices) = db.connect_recording();
    insert_order(&mut old, "before");
    let mut bystander = db.connect();
    bystander.batch_execute("SELECT 1").unwrap();

    // A service node inside its lease: the reinstall is refused, naming it, and changes nothing.
    let mut node = TestNode::claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    let err = run_block(&mut admin, &reinstall).unwrap_err();
    admin.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "55006", "{err:?}");
    let detail = db_error(&err).detail().unwrap_or_default().to_owned();
    assert!(detail.contains("service \"svc\" machine id 0 (10.0.0.1:1)"), "{detail}");
    let default: String = admin
        .query_one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass", &[])
        .unwrap()
        .get(0);
    assert_eq!(default, "idgen_next_id()", "the refused reinstall dropped the default");
    node.heartbeat(&mut admin).unwrap();
    insert_order(&mut old, "after the refusal");

    // Released, and the old session's window over: nothing may be stamped under the old registry.
    assert!(node.release(&mut admin).unwrap());
    wait_past_backend_watermark(&mut old, &service);
    admin_notices.take();
    run_block(&mut admin, &reinstall).unwrap();
    let notices: Vec<String> = admin_notices.take().iter().map(|n| n.message().to_owned()).collect();
    assert!(
        notices.iter().any(|n| n == "drop cascades to default value for column id of table orders"),
        "the CASCADE names the default it drops: {notices:?}"
    );

    // Every session mints at once: a new one, the bystander, and the old one, which learns at its
    // next ID that its lease is gone and claims in the new registry.
    insert_order(&mut db.connect(), "fresh");
    insert_order(&mut bystander, "bystander");
    old_notices.take();
    insert_order(&mut old, "old session");
    let warnings: Vec<String> =
        old_notices.take().iter().filter(|n| n.severity() == "WARNING").map(|n| n.message().to_owned()).collect();
    assert!(
        warnings.len() == 1
            && warnings[0].contains("the registry that granted machine id")
            && warnings[0].ends_with("is gone"),
        "the old session is told its lease is gone: {warnings:?}"
    );
    let lease = backend_lease(&mut old, &service).unwrap();
    let in_new_registry: i64 = admin
        .query_one(
            "SELECT count(*) FROM system_nodes WHERE service = $1 AND machine_id = $2 AND version = $3
                AND backend_slot = $4 AND released_at IS NULL",
            &[&service, &lease.machine_id, &lease.version, &lease.backend_slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_new_registry, 1, "the old session's lease {lease:?} is not a row of the new registry");
    let (rows, ids): (i64, i64) =
        admin.query_one("SELECT count(*), count(DISTINCT id) FROM orders", &[]).map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!((rows, ids), (5, 5));
    assert_eq!(health(&mut admin), Vec::<String>::new());
    // No other holder took its id: no ownership loss is counted (an alert on any increase would
    // ring after every reinstall).
    let losses: i64 =
        admin.query_one("SELECT ownership_losses FROM idgen_metrics WHERE service = $1", &[&service]).unwrap().get(0);
    assert_eq!(losses, 0);
}

#[test]
fn beside_a_table_named_system_nodes_idgen_installs_in_a_schema_of_its_own() {
    let db = TestDb::empty_on(&base_dsn(), "recipe_own_schema");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE system_nodes (hostname text PRIMARY KEY, rack int);
             INSERT INTO system_nodes VALUES ('db1', 1), ('db2', 2);",
        )
        .unwrap();
    let users_table = |client: &mut Client| -> String {
        client
            .query_one(
                "SELECT (SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
                           FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'system_nodes')
                        || ' / ' || (SELECT string_agg(hostname || '=' || rack, ', ' ORDER BY hostname) FROM public.system_nodes)",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let before = users_table(&mut admin);
    assert_eq!(before, "hostname text, rack integer / db1=1, db2=2");

    // Into public, idgen's own system_nodes collides: refused, and nothing is installed.
    let err = admin.batch_execute("CREATE EXTENSION idgen").unwrap_err();
    assert_eq!(sqlstate(&err), "42P07", "{err:?}");
    assert_eq!(db_error(&err).message(), "relation \"system_nodes\" already exists");
    let leftovers: i64 = admin
        .query_one(
            "SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'idgen')
                  + (SELECT count(*) FROM pg_namespace WHERE nspname = 'idgen_private')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(leftovers, 0);

    run_block(&mut admin, &with_database(&doc_block("recipe own-schema"), &db.name)).unwrap();
    assert_eq!(users_table(&mut admin), before);

    // New sessions reach idgen through the database's search_path, a role below superuser too
    // (the recipe grants USAGE on the schema); unqualified, system_nodes is still the user's.
    let app = "idgen_t_recipe_app";
    ensure_login_role(&mut admin, app);
    admin.batch_execute(&format!("GRANT INSERT, SELECT ON orders, system_nodes TO {app}")).unwrap();
    let app_dsn = format!("{} user={app}", db.dsn());
    for dsn in [db.dsn(), app_dsn.clone()] {
        let mut session = Client::connect(&dsn, NoTls).unwrap();
        insert_order(&mut session, "through the default");
        let id: i64 = session.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
        let machine_id: i32 = session.query_one("SELECT machine_id FROM idgen_decode($1)", &[&id]).unwrap().get(0);
        let lease = backend_lease(&mut session, &db.name).unwrap();
        assert_eq!(machine_id, lease.machine_id);
        let registered: i64 = admin
            .query_one(
                "SELECT count(*) FROM idgen.system_nodes
                  WHERE service = current_database() AND machine_id = $1 AND version = $2 AND backend_slot = $3",
                &[&lease.machine_id, &lease.version, &lease.backend_slot],
            )
            .unwrap()
            .get(0);
        assert_eq!(registered, 1, "the lease {lease:?} is a row of idgen.system_nodes");
        // Healthy; the role below superuser is told that it does not see the database's service.
        let findings = health(&mut session);
        let hidden = usize::from(dsn == app_dsn);
        assert_eq!(findings.len(), hidden, "{findings:?}");
        assert!(findings.iter().all(|f| f.starts_with(&format!("warning services_hidden ({app})"))), "{findings:?}");
        let hosts: i64 = session.query_one("SELECT count(hostname) FROM system_nodes", &[]).unwrap().get(0);
        assert_eq!(hosts, 2, "unqualified system_nodes is the user's table");
    }
    // The default needs no right on the schema; a call by name does.
    admin.batch_execute("REVOKE USAGE ON SCHEMA idgen FROM PUBLIC").unwrap();
    let mut app_session = Client::connect(&app_dsn, NoTls).unwrap();
    insert_order(&mut app_session, "without USAGE");
    let err = app_session.query_one("SELECT idgen.idgen_next_id()", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
    assert_eq!(users_table(&mut admin), before, "public.system_nodes was touched");
}

/// A table's `id` column: its type, its default, and the sequence attached to it.
fn id_column(client: &mut Client, table: &str) -> (String, Option<String>, Option<String>) {
    let row = client
        .query_one(
            "SELECT format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid),
                    pg_get_serial_sequence($1, 'id')
               FROM pg_attribute a LEFT JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum)
              WHERE a.attrelid = $1::regclass AND a.attname = 'id'",
            &[&table],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn sorted_ids(client: &mut Client, table: &str) -> Vec<i64> {
    client
        .query(&format!("SELECT id::bigint FROM {table} ORDER BY id"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Old rows keep their ids; new rows get the generator's, above every old one, distinct.
fn assert_new_ids_follow_old(client: &mut Client, table: &str, insert_new: &str, old: &[i64]) {
    let floor: i64 = client.query_one("SELECT idgen_min_id(now())", &[]).unwrap().get(0);
    client.batch_execute(insert_new).unwrap();
    let all = sorted_ids(client, table);
    assert_eq!(&all[..old.len()], old, "old rows kept their ids, and sort first");
    let new = &all[old.len()..];
    assert_eq!(new.len(), 1000);
    assert!(new[0] > *old.last().unwrap() && new[0] >= floor, "new IDs {} start above {floor}", new[0]);
    let distinct: i64 = client.query_one(&format!("SELECT count(DISTINCT id) FROM {table}"), &[]).unwrap().get(0);
    assert_eq!(distinct as usize, all.len());
    let leased: i32 = client.query_one("SELECT machine_id FROM idgen_backend_leases()", &[]).unwrap().get(0);
    for &id in new {
        assert_eq!(machine_id_of(client, id), leased, "{id} is not this backend's Snowflake ID");
    }
}

#[test]
fn a_serial_column_switches_to_idgen_in_one_transaction_that_gives_way_to_traffic() {
    let db = TestDb::create("recipe_serial");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE accounts (id serial PRIMARY KEY, name text);
             CREATE TABLE invoices (id serial PRIMARY KEY, account_id int NOT NULL REFERENCES accounts);
             INSERT INTO accounts (name) SELECT 'old ' || g FROM generate_series(1, 1000) g;
             INSERT INTO invoices (account_id) SELECT id FROM accounts;",
        )
        .unwrap();
    let old = sorted_ids(&mut admin, "accounts");
    let (lookup, switch) = split_at_transaction("serial", &doc_block("recipe serial"));
    let sequence = run_block(&mut admin, &lookup).unwrap();
    assert_eq!(sequence, vec![vec![Some("public.accounts_id_seq".to_owned())]]);

    // During traffic (a transaction that has read accounts), the recipe gives up instead of
    // queueing every query on the table behind it, and changes nothing.
    let mut reader = db.connect();
    reader.batch_execute("BEGIN; SELECT count(*) FROM accounts").unwrap();
    let err = run_block(&mut admin, &switch).unwrap_err();
    admin.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "55P03", "{err:?}");
    let unchanged = (
        "integer".to_owned(),
        Some("nextval('accounts_id_seq'::regclass)".to_owned()),
        Some("public.accounts_id_seq".to_owned()),
    );
    assert_eq!(id_column(&mut admin, "accounts"), unchanged);
    reader.batch_execute("COMMIT").unwrap();

    run_block(&mut admin, &switch).unwrap();
    assert_eq!(id_column(&mut admin, "accounts"), ("bigint".to_owned(), Some("idgen_next_id()".to_owned()), None));
    let sequence_left: Option<String> =
        admin.query_one("SELECT to_regclass('public.accounts_id_seq')::text", &[]).unwrap().get(0);
    assert_eq!(sequence_left, None, "the sequence is gone");
    assert_new_ids_follow_old(
        &mut admin,
        "accounts",
        "INSERT INTO accounts (name) SELECT 'new ' || g FROM generate_series(1, 1000) g",
        &old,
    );
    // The referencing column follows: invoices can point at the new accounts.
    admin.batch_execute("INSERT INTO invoices (account_id) SELECT id FROM accounts WHERE name LIKE 'new %'").unwrap();
    let invoices: i64 = admin.query_one("SELECT count(*) FROM invoices", &[]).unwrap().get(0);
    assert_eq!(invoices, 2000);
}

#[test]
fn a_bigserial_already_at_idgen_s_ids_is_refused_by_the_recipe() {
    let db = TestDb::create("recipe_bigserial_high");
    let mut admin = db.connect();
    // A sequence someone set to where idgen's IDs of tomorrow begin.
    admin
        .batch_execute(
            "CREATE TABLE accounts (id bigserial PRIMARY KEY, name text);
             CREATE TABLE invoices (id bigserial PRIMARY KEY, account_id bigint NOT NULL REFERENCES accounts);
             SELECT setval('accounts_id_seq', idgen_min_id(now() + interval '1 day'));
             INSERT INTO accounts (name) VALUES ('high');",
        )
        .unwrap();
    let (_, switch) = split_at_transaction("serial", &doc_block("recipe serial"));
    let err = run_block(&mut admin, &switch).unwrap_err();
    admin.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "P0001", "{err:?}");
    assert!(db_error(&err).message().contains("could collide"), "{err:?}");
    let unchanged = (
        "bigint".to_owned(),
        Some("nextval('accounts_id_seq'::regclass)".to_owned()),
        Some("public.accounts_id_seq".to_owned()),
    );
    assert_eq!(id_column(&mut admin, "accounts"), unchanged);
}

#[test]
fn an_identity_column_switches_to_idgen_and_its_sequence_goes() {
    let db = TestDb::create("recipe_identity");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE events (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
             INSERT INTO events (v) SELECT g FROM generate_series(1, 1000) g;",
        )
        .unwrap();
    let old = sorted_ids(&mut admin, "events");
    let sequences = |client: &mut Client| -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relnamespace = 'public'::regnamespace",
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(sequences(&mut admin), 1);
    run_block(&mut admin, &doc_block("recipe identity")).unwrap();
    assert_eq!(id_column(&mut admin, "events"), ("bigint".to_owned(), Some("idgen_next_id()".to_owned()), None));
    assert_eq!(sequences(&mut admin), 0, "the identity's sequence is gone");
    assert_new_ids_follow_old(
        &mut admin,
        "events",
        "INSERT INTO events (v) SELECT g FROM generate_series(1001, 2000) g",
        &old,
    );
}

#[test]
fn the_layouts_block_defines_the_layouts_it_says() {
    let db = TestDb::create("recipe_layouts");
    let mut admin = db.connect();
    let block = doc_block("recipe layouts");
    let mut results = Vec::new();
    for statement in statements(&block) {
        results.push(run_block(&mut admin, &statement).unwrap());
    }
    let cell = |r: &Vec<Vec<Option<String>>>, c: usize| r[0][c].clone().unwrap_or_default();
    assert_eq!(
        (cell(&results[0], 0), cell(&results[0], 1), cell(&results[0], 2), cell(&results[0], 3)),
        ("orders".to_owned(), "sonyflake".to_owned(), "256".to_owned(), "25600".to_owned())
    );
    assert!(cell(&results[0], 4).starts_with("2188-11-16 03:28:58.879"), "{:?}", results[0]);
    assert_eq!((cell(&results[1], 0), cell(&results[1], 1)), ("js_safe".to_owned(), "256".to_owned()));
    assert_eq!(cell(&results[2], 0), "custom");
    let listed: Vec<(String, String, String)> =
        results[3].iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap(), r[3].clone().unwrap())).collect();
    assert_eq!(
        listed,
        [
            ("metrics".to_owned(), "custom".to_owned(), "4095".to_owned()),
            ("orders".to_owned(), "sonyflake".to_owned(), "255".to_owned()),
            ("web".to_owned(), "js_safe".to_owned(), "255".to_owned())
        ]
    );
    assert!(results[3].iter().all(|r| r[4].is_none()), "not fixed before the first claim");
}

/// A Sonyflake fleet's table: keys its nodes minted an hour ago, with the machine ids they compute.
fn sonyflake_fleet_table(admin: &mut Client, machine_ids: &[u16]) -> Vec<i64> {
    use idgen_core::layout::{IdParts, Preset};
    let sony = Preset::Sonyflake.layout();
    let hour_ago =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 3_600_000;
    let keys: Vec<i64> = machine_ids
        .iter()
        .flat_map(|&m| {
            (0..100u32).map(move |s| {
                let ticks = sony.ticks_at(hour_ago).unwrap() + i64::from(s);
                sony.compose(IdParts { ticks, machine_id: m, sequence: s % 256 }).unwrap()
            })
        })
        .collect();
    admin.batch_execute("CREATE TABLE events (id bigint PRIMARY KEY, v int)").unwrap();
    admin.execute("INSERT INTO events (id, v) SELECT unnest($1::bigint[]), 0", &[&keys]).unwrap();
    let mut sorted = keys;
    sorted.sort_unstable();
    sorted
}

#[test]
fn a_sonyflake_fleets_column_takes_the_default_once_its_ids_are_adopted() {
    let db = TestDb::create("recipe_sonyflake_column");
    let mut admin = db.connect();
    let old = sonyflake_fleet_table(&mut admin, &[3]);
    run_block(&mut admin, &doc_block("recipe sonyflake-column")).unwrap();
    assert_eq!(
        id_column(&mut admin, "events"),
        ("bigint".to_owned(), Some("idgen_next_id('events'::text)".to_owned()), None)
    );
    let mut backend = db.connect();
    backend.batch_execute("INSERT INTO events (v) SELECT g FROM generate_series(1, 1000) g").unwrap();
    let all = sorted_ids(&mut admin, "events");
    assert_eq!(&all[..old.len()], old, "old keys kept, and sort first");
    assert_eq!(all.len(), old.len() + 1000);
    // New keys are the service's (decoded by its layout), from a machine id the fleet does not use.
    let machine_ids: Vec<i32> = admin
        .query("SELECT DISTINCT d.machine_id FROM events, idgen_decode(events.id, 'events') d WHERE v > 0", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(machine_ids.len(), 1);
    assert_ne!(machine_ids[0], 3, "the database's backend took no machine id the fleet uses");
}

#[test]
fn the_sonyflake_column_recipe_refuses_keys_ahead_of_the_service() {
    let db = TestDb::create("recipe_sonyflake_ahead");
    let mut admin = db.connect();
    sonyflake_fleet_table(&mut admin, &[3]);
    // A node whose clock ran a day ahead minted this one.
    admin
        .execute(
            "INSERT INTO events (id, v) VALUES ($1, 0)",
            &[&idgen_core::layout::Preset::Sonyflake
                .layout()
                .compose(idgen_core::layout::IdParts {
                    ticks: idgen_core::layout::Preset::Sonyflake
                        .layout()
                        .ticks_at(
                            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
                                as i64
                                + 86_400_000,
                        )
                        .unwrap(),
                    machine_id: 3,
                    sequence: 0,
                })
                .unwrap()],
        )
        .unwrap();
    let err = run_block(&mut admin, &doc_block("recipe sonyflake-column")).unwrap_err();
    admin.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "P0001", "{err:?}");
    assert!(db_error(&err).message().contains("could collide"), "{err:?}");
    assert_eq!(id_column(&mut admin, "events").1, None, "the default was not set");
}

const SUBSCRIPTION: &str = "idgen_t_recipe_sub";
const SLOT: &str = "idgen_t_recipe_trigger";

#[test]
fn a_subscriber_s_trigger_mints_once_its_search_path_is_pinned_and_fails_in_the_apply_worker_without() {
    let subscriber_database = "idgen_t_recipe_trigger_sub";
    drop_subscription_and_slot(subscriber_database, SUBSCRIPTION, SLOT);
    let publisher = TestDb::empty_on(&base_dsn(), "recipe_trigger_pub");
    let subscriber = TestDb::create("recipe_trigger_sub");
    assert_eq!(subscriber.name, subscriber_database);
    let recipe = doc_block("recipe subscriber-trigger");
    // The same function without its SET clause: what the docs warn of.
    let unpinned: String =
        recipe.lines().filter(|l| !l.trim_start().starts_with("SET search_path")).map(|l| format!("{l}\n")).collect();
    assert_eq!(unpinned.lines().count() + 1, recipe.lines().count(), "the recipe has one SET search_path line");

    let mut publishing = publisher.connect();
    publishing
        .batch_execute(
            "CREATE TABLE orders (k int PRIMARY KEY, item text);
             CREATE PUBLICATION idgen_t_recipe_pub FOR TABLE orders;",
        )
        .unwrap();
    // (Not in a transaction that writes.)
    publishing.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&SLOT]).unwrap();
    let mut subscribing = subscriber.connect();
    subscribing.batch_execute("CREATE TABLE orders (k int PRIMARY KEY, item text, id bigint UNIQUE)").unwrap();
    run_block(&mut subscribing, &unpinned).unwrap();
    // Unpinned, the trigger resolves its names in the caller's path: with the apply worker's
    // empty one, the function is not found.
    subscribing.batch_execute("BEGIN; SET LOCAL search_path = ''").unwrap();
    let err = subscribing.batch_execute("INSERT INTO public.orders (k, item) VALUES (0, 'local')").unwrap_err();
    subscribing.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "42883", "{err:?}");

    let log_offset: i64 =
        subscribing.query_one("SELECT size FROM pg_stat_file(pg_current_logfile())", &[]).unwrap().get(0);
    // (The slot exists already: a subscription creating one in its own cluster would wait for itself.)
    subscribing
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{}' PUBLICATION idgen_t_recipe_pub
                 WITH (create_slot = false, slot_name = '{SLOT}', copy_data = false)",
            publisher.dsn().replace('\'', "''")
        ))
        .unwrap();
    let published_at: std::time::SystemTime = publishing.query_one("SELECT clock_timestamp()", &[]).unwrap().get(0);
    publishing.batch_execute("INSERT INTO orders VALUES (1, 'book'), (2, 'pen')").unwrap();
    wait_for("the apply worker to fail on the unpinned trigger", PATIENCE, || {
        let (errors, logged): (i64, bool) = subscribing
            .query_one(
                "SELECT (SELECT apply_error_count FROM pg_stat_subscription_stats WHERE subname = $1),
                        position('function idgen_next_id() does not exist' IN
                                 pg_read_file(pg_current_logfile(), $2, 10000000)) > 0",
                &[&SUBSCRIPTION, &log_offset],
            )
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        errors > 0 && logged
    });
    let arrived: i64 = subscribing.query_one("SELECT count(*) FROM orders", &[]).unwrap().get(0);
    assert_eq!(arrived, 0, "rows arrived through a failing trigger");

    // The recipe: the worker's next attempt applies the same transaction.
    run_block(&mut subscribing, &recipe).unwrap();
    wait_for("the rows to arrive through the pinned trigger", PATIENCE, || {
        subscribing.query_one("SELECT count(*) FROM orders", &[]).unwrap().get::<_, i64>(0) == 2
    });
    // The subscription's walsender streams from this server: a database's, not a standby's.
    // (idgen_health() reported it as an asynchronous standby, in every database of the cluster.)
    let streaming: i64 = subscribing
        .query_one("SELECT count(*) FROM pg_stat_replication WHERE application_name = $1", &[&SUBSCRIPTION])
        .unwrap()
        .get(0);
    assert_eq!(streaming, 1, "the subscription streams");
    assert!(health(&mut subscribing).iter().all(|f| !f.contains("replication")), "{:?}", health(&mut subscribing));
    let rows = subscribing
        .query(
            "SELECT o.k, o.id, d.ts, count(n.*) AS held_by_a_lease
               FROM orders o CROSS JOIN idgen_decode(o.id) d
               LEFT JOIN system_nodes n ON n.service = current_database() AND n.machine_id = d.machine_id
                                       AND n.released_at IS NULL AND n.backend_slot IS NOT NULL
              GROUP BY o.k, o.id, d.ts ORDER BY o.k",
            &[],
        )
        .unwrap();
    for row in &rows {
        let (k, id, ts, held): (i32, i64, std::time::SystemTime, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert!(
            ts >= published_at - std::time::Duration::from_millis(1),
            "row {k}: ID {id} stamped before it was published"
        );
        assert_eq!(held, 1, "row {k}: ID {id} is not under a backend lease of the subscriber's registry");
    }
    assert_ne!(rows[0].get::<_, i64>(1), rows[1].get::<_, i64>(1));

    drop_subscription_and_slot(subscriber_database, SUBSCRIPTION, SLOT);
}

/// Runs `script` through psql on `dsn`, as a file (psql reads it as it would a paste), within
/// [`PATIENCE`]: status, stdout, stderr.
fn run_psql(dsn: &str, script: &str) -> (std::process::ExitStatus, String, String) {
    let file = std::env::temp_dir().join(format!("idgen-recipes-{}.sql", std::process::id()));
    std::fs::write(&file, script).unwrap();
    let output = output_within(
        Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f"])
            .arg(&file)
            .env("PGOPTIONS", "-c statement_timeout=300s"),
        PATIENCE,
        "psql running a script (is $PG_BIN on PATH?)",
    );
    std::fs::remove_file(&file).ok();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status, text(output.stdout), text(output.stderr))
}

#[test]
fn the_demo_of_the_main_job_runs_through_psql_as_written() {
    // scripts/demo.sh feeds this heredoc to psql with ON_ERROR_STOP: a statement that fails stops
    // the main job (a heartbeat at a version the re-claim did not give once did).
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/demo.sh")).unwrap();
    let start = demo.find("<<'SQL'\n").expect("scripts/demo.sh has its SQL heredoc") + "<<'SQL'\n".len();
    let script = &demo[start..start + demo[start..].find("\nSQL\n").expect("the heredoc ends")];
    // (Its role orders_svc is created only if missing: a second run, or another test's, is fine.)
    let db = TestDb::empty_on(&base_dsn(), "demo");
    let (status, stdout, stderr) = run_psql(&session_dsn(&base_dsn(), &db.name), script);
    assert!(status.success(), "the demo failed:\n{stderr}\n{stdout}");
    assert!(stdout.contains("book") && stdout.contains("(0 rows)"), "the demo mints and ends healthy:\n{stdout}");
}

/// A PostgreSQL of one test, with pg_cron preloaded (Debian's postgresql-15-cron): initdb into a
/// directory of its own, started on a free port, stopped and removed when dropped. As root, its
/// files and processes belong to the postgres user (initdb refuses root).
struct CronCluster {
    dir: std::path::PathBuf,
    port: u16,
}

/// `program args` as the user that runs the clusters; its output when it fails.
fn as_cluster_user(program: &str, args: &[&str]) {
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false);
    let mut command = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", program]);
        c
    } else {
        Command::new(program)
    };
    let done = command.args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        done.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}

impl CronCluster {
    fn start() -> CronCluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("idgen-test-pg-cron-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir_s = dir.to_str().unwrap().to_owned();
        as_cluster_user("true", &[]);
        if Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false) {
            assert!(Command::new("chown").args(["postgres:", &dir_s]).status().unwrap().success());
        }
        let data = format!("{dir_s}/data");
        as_cluster_user("initdb", &["-D", &data, "-U", "postgres", "-A", "trust", "--no-sync"]);
        let options = format!(
            "-p {port} -k {dir_s} -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_cron \
             -c cron.database_name=postgres -c fsync=off"
        );
        let log = format!("{dir_s}/log");
        as_cluster_user("pg_ctl", &["-D", &data, "-o", &options, "-l", &log, "-w", "-t", "120", "start"]);
        CronCluster { dir, port }
    }

    fn connect(&self, database: &str) -> Client {
        Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={database}", self.port), NoTls).unwrap()
    }
}

impl Drop for CronCluster {
    fn drop(&mut self) {
        let data = format!("{}/data", self.dir.display());
        let _ = std::panic::catch_unwind(|| as_cluster_user("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_pg_cron_purge_job_of_the_runbook_runs_and_purges() {
    let cluster = CronCluster::start();
    let mut cron = cluster.connect("postgres");
    cron.batch_execute("CREATE EXTENSION pg_cron").unwrap();
    cron.batch_execute("CREATE DATABASE shop_cron").unwrap();
    let mut shop = cluster.connect("shop_cron");
    shop.batch_execute(
        "CREATE EXTENSION idgen;
         INSERT INTO idgen_private.idgen_history (at, event, service, machine_id, outcome)
         VALUES (now() - interval '100 days', 'take_back', 'svc', 0, 'idle_1d'),
                (now() - interval '1 day', 'take_back', 'svc', 0, 'idle_1h')",
    )
    .unwrap();
    let events = |shop: &mut Client| -> i64 {
        shop.query_one("SELECT count(*) FROM idgen_private.idgen_history WHERE event = 'take_back'", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(events(&mut shop), 2);

    // The job as the runbook schedules it, in its database.
    let block = with_database(&doc_block("recipe pg-cron-purge"), "shop_cron");
    cron.batch_execute(&block).unwrap();
    let (job, schedule, command, database): (i64, String, String, String) = cron
        .query_one("SELECT jobid, schedule, command, database FROM cron.job", &[])
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .unwrap();
    assert_eq!(
        (schedule.as_str(), command.as_str(), database.as_str()),
        ("17 3 * * *", "SELECT idgen_purge_history()", "shop_cron")
    );
    // Every minute instead of every night: it runs within two.
    cron.execute("SELECT cron.alter_job($1, schedule => '* * * * *')", &[&job]).unwrap();
    let mut outcome = (String::new(), String::new());
    wait_for("the purge job's first run", PATIENCE, || {
        let row = cron
            .query_opt(
                "SELECT status, coalesce(return_message, '') FROM cron.job_run_details
                  WHERE jobid = $1 AND status IN ('succeeded', 'failed') ORDER BY runid LIMIT 1",
                &[&job],
            )
            .unwrap();
        match row {
            Some(r) => {
                outcome = (r.get(0), r.get(1));
                true
            }
            None => {
                std::thread::sleep(std::time::Duration::from_millis(500));
                false
            }
        }
    });
    assert_eq!(outcome.0, "succeeded", "the purge job failed: {}", outcome.1);
    // The event older than the retention (90 days) is gone; the other one is kept.
    assert_eq!(events(&mut shop), 1);
}
