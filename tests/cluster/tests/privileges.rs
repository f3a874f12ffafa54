//! Privileges: nothing for PUBLIC, EXECUTE by grant, the registry only through the functions.

use idgen_cluster_tests::*;

const SERVICE_ROLE: &str = "idgen_t_service_role";

fn as_service_role(client: &mut postgres::Client, sql: &str) -> Result<(), postgres::Error> {
    client.batch_execute(&format!("SET ROLE {SERVICE_ROLE}"))?;
    let result = client.batch_execute(sql);
    client.batch_execute("RESET ROLE").unwrap();
    result
}

#[test]
fn a_service_role_needs_a_grant_and_never_writes_the_table_directly() {
    let db = TestDb::create("privileges");
    let mut admin = db.connect();
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SERVICE_ROLE}') THEN CREATE ROLE {SERVICE_ROLE}; END IF; END $$"
        ))
        .unwrap();

    let denied = [
        "SELECT * FROM idgen_claim('svc', '10.0.0.1', 1)",
        "SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, 1)",
        "SELECT idgen_release('svc', 0::smallint, '10.0.0.1', 1, 1)",
        "SELECT * FROM system_nodes",
        "INSERT INTO system_nodes (service, machine_id, host, port, version) VALUES ('svc', 9, '10.0.0.9', 9, 1)",
        "ALTER SYSTEM SET idgen.takeover_idle_1h = '1min'",
    ];
    for sql in denied {
        let err = as_service_role(&mut admin, sql).expect_err(sql);
        assert_eq!(sqlstate(&err), "42501", "{sql}: {err:?}");
    }

    // The grant docs/security.md tells a DBA to give.
    admin.batch_execute(&format!("SELECT idgen_grant_service('svc', '{SERVICE_ROLE}')")).unwrap();
    let v1 = first_version(&mut admin);
    as_service_role(
        &mut admin,
        &format!(
            "SELECT * FROM idgen_claim('svc', '10.0.0.1', 1);
             SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, {v1});
             SELECT idgen_release('svc', 0::smallint, '10.0.0.1', 1, {v1});"
        ),
    )
    .unwrap();
    for sql in ["SELECT * FROM system_nodes", "UPDATE system_nodes SET version = 99", "DELETE FROM system_nodes"] {
        assert_eq!(sqlstate(&as_service_role(&mut admin, sql).expect_err(sql)), "42501", "{sql}");
    }
    let version: i64 = admin.query_one("SELECT version FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(version, v1 + 1, "claimed at the first version, released to the next, through the functions only");
    settings_are_for_superusers_only(&db);
    admin.batch_execute(&format!("SELECT idgen_revoke_service('svc', '{SERVICE_ROLE}'); REVOKE ALL ON FUNCTION idgen_claim(text, inet, integer), idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint), idgen_release(text, integer, inet, integer, bigint, timestamptz) FROM {SERVICE_ROLE}")).unwrap();
}

#[test]
fn a_callers_search_path_cannot_redirect_the_registry_functions() {
    let db = TestDb::create("search_path");
    let mut admin = db.connect();
    // A decoy table in a schema first on the caller's path, and one in pg_temp.
    admin
        .batch_execute(
            "CREATE SCHEMA decoy; CREATE TABLE decoy.system_nodes (LIKE public.system_nodes INCLUDING ALL);
             CREATE TEMP TABLE system_nodes (LIKE public.system_nodes INCLUDING ALL);
             SET search_path = decoy, public;",
        )
        .unwrap();
    let c = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(c.outcome, "new");
    let counts: (i64, i64, i64) = {
        let r = admin
            .query_one("SELECT (SELECT count(*) FROM public.system_nodes), (SELECT count(*) FROM decoy.system_nodes), (SELECT count(*) FROM pg_temp.system_nodes)", &[])
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(counts, (1, 0, 0));
    // The registry functions run as their caller (its role is the one checked) and switch to the
    // extension owner only inside, with the path pinned; the one SECURITY DEFINER function is
    // SQL bound at creation, so no search_path takes part in it either.
    let definers: Vec<(String, bool, bool)> = admin
        .query(
            "SELECT p.proname::text, p.prosqlbody IS NOT NULL, coalesce(p.proconfig::text LIKE '%search_path=pg_catalog, pg_temp%', false) \
               FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen' WHERE p.prosecdef ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(definers, [("idgen_purge_history".to_owned(), true, true)], "SECURITY DEFINER functions of idgen");
    let invokers: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('idgen_claim', 'idgen_heartbeat', 'idgen_release', \
             'idgen_grant_service', 'idgen_revoke_service', 'idgen_next_id', 'idgen_define_layout') AND NOT prosecdef",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        invokers, 9,
        "both idgen_claim, heartbeat, release, grant, revoke, both idgen_next_id and idgen_define_layout run as their caller"
    );
}

/// Before idgen is loaded in a session, SET of an idgen.* name only makes a
/// placeholder; Postgres drops it (with a WARNING) when idgen loads. After that
/// a non-superuser's SET is refused.
fn settings_are_for_superusers_only(db: &TestDb) {
    let mut fresh = db.connect();
    if idgen_preloaded(&mut fresh) {
        // Loaded from the start: no placeholder, the SET is refused at once.
        fresh.batch_execute(&format!("SET ROLE {SERVICE_ROLE}")).unwrap();
        refused_once_loaded(&mut fresh);
        return;
    }
    fresh.batch_execute(&format!("SET ROLE {SERVICE_ROLE}; SET idgen.takeover_idle_1h = '20min'")).unwrap();
    let lease_until: String =
        fresh.query_one("SELECT lease_until::text FROM idgen_claim('svc', '10.0.0.2', 2)", &[]).unwrap().get(0);
    // lease_until is the claim's last_seen plus the lease: compare with the row, not with a statement's start.
    let lease: String = db
        .connect()
        .query_one(
            "SELECT ($1::text::timestamptz - last_seen)::text FROM system_nodes WHERE host = '10.0.0.2'",
            &[&lease_until],
        )
        .unwrap()
        .get(0);
    assert_eq!(lease, "00:55:00", "the placeholder did not shorten the lease");
    let shown: String = fresh.query_one("SHOW idgen.takeover_idle_1h", &[]).unwrap().get(0);
    assert_eq!(shown, "1h");
    refused_once_loaded(&mut fresh);
}

/// Once idgen is loaded: thresholds cannot be set per session by anyone (55P02), the
/// superuser-only settings not by the service role (42501).
fn refused_once_loaded(session: &mut postgres::Client) {
    let err = session.batch_execute("SET idgen.takeover_idle_1h = '20min'").unwrap_err();
    assert_eq!(sqlstate(&err), "55P02", "{err:?}");
    let err = session.batch_execute("SET idgen.max_clock_backward = '10s'").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
}

/// The privileges matrix docs/security.md shows: each role against each entry point, "ok" or the SQLSTATE.
#[test]
fn privileges_matrix() {
    let db = TestDb::create("matrix");
    let mut admin = db.connect();
    let roles = ["idgen_t_m_dbowner", "idgen_t_m_granted", "idgen_t_m_ungranted", "idgen_t_m_inserter"];
    for role in roles.iter().chain(&["idgen_t_m_bystander"]) {
        admin
            .batch_execute(&format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$"
            ))
            .unwrap();
    }
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} OWNER TO idgen_t_m_dbowner;
             SELECT idgen_grant_service('svc', 'idgen_t_m_granted');
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), n int);
             GRANT INSERT ON t TO idgen_t_m_inserter, idgen_t_m_dbowner;",
            db.name
        ))
        .unwrap();
    let cells = [
        ("idgen_claim", "SELECT * FROM idgen_claim('svc', '10.1.0.1', 1)"),
        ("idgen_heartbeat", "SELECT idgen_heartbeat('svc', m, '10.1.0.1', 1, v) FROM (SELECT * FROM idgen_claim('svc', '10.1.0.1', 1)) c(m, v)"),
        ("idgen_release", "SELECT idgen_release('svc', m, '10.1.0.1', 1, v) FROM (SELECT * FROM idgen_claim('svc', '10.1.0.1', 1)) c(m, v)"),
        ("idgen_next_id()", "SELECT idgen_next_id()"),
        ("idgen_next_id('svc')", "SELECT idgen_next_id('svc')"),
        ("INSERT (DEFAULT idgen_next_id())", "INSERT INTO t (n) VALUES (1)"),
        ("idgen_grant_service", "SELECT idgen_grant_service('svc', 'idgen_t_m_bystander')"),
        ("SELECT system_nodes", "SELECT count(*) FROM system_nodes"),
    ];
    let mut matrix = Vec::new();
    for role in ["postgres"].into_iter().chain(roles) {
        let mut client = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
        let row: Vec<String> = cells
            .iter()
            .map(|(_, sql)| match client.batch_execute(sql) {
                Ok(()) => "ok".to_owned(),
                Err(err) => sqlstate(&err).to_owned(),
            })
            .collect();
        matrix.push((role, row));
    }
    let expected = [
        ("postgres", ["ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"]),
        ("idgen_t_m_dbowner", ["42501", "42501", "42501", "ok", "42501", "ok", "42501", "42501"]),
        ("idgen_t_m_granted", ["ok", "ok", "ok", "ok", "ok", "42501", "42501", "42501"]),
        ("idgen_t_m_ungranted", ["42501", "42501", "42501", "ok", "42501", "42501", "42501", "42501"]),
        ("idgen_t_m_inserter", ["42501", "42501", "42501", "ok", "42501", "ok", "42501", "42501"]),
    ];
    for ((role, row), (expected_role, expected_row)) in matrix.iter().zip(expected) {
        assert_eq!((*role, row.as_slice()), (expected_role, expected_row.map(String::from).as_slice()), "{matrix:?}");
    }
    admin.batch_execute(&format!("ALTER DATABASE {} OWNER TO postgres", db.name)).unwrap();
    for role in roles {
        admin.batch_execute(&format!("DROP OWNED BY {role}")).unwrap();
    }
}

fn next_id_for(client: &mut postgres::Client, service: &str) -> Result<i64, postgres::Error> {
    client.query_one("SELECT idgen_next_id($1)", &[&service]).map(|r| r.get(0))
}

#[test]
fn a_revocation_takes_effect_at_once_in_open_sessions() {
    let db = TestDb::create("revoke_now");
    let mut admin = db.connect();
    let role = "idgen_t_revoked";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('svc', '{role}')")).unwrap();
    let mut session = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    next_id_for(&mut session, "svc").unwrap();
    let node = claim(&mut session, "svc", "10.0.0.1", 1).unwrap();
    admin.batch_execute(&format!("SELECT idgen_revoke_service('svc', '{role}')")).unwrap();
    // The open session's lease is still inside its window: the next ID is refused all the same.
    let err = next_id_for(&mut session, "svc").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
    let err = heartbeat(&mut session, "svc", node.machine_id, "10.0.0.1", 1, node.version).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
    // A grant, however made (here straight into the table), takes effect at once too.
    admin
        .batch_execute(&format!(
            "INSERT INTO idgen_private.idgen_service_members (service, member) VALUES ('svc', '{role}')"
        ))
        .unwrap();
    next_id_for(&mut session, "svc").unwrap();
    // So does a change of role membership.
    let group = "idgen_t_revoked_group";
    ensure_login_role(&mut admin, group);
    admin
        .batch_execute(&format!(
            "SELECT idgen_revoke_service('svc', '{role}'), idgen_grant_service('svc', '{group}'); GRANT {group} TO {role}"
        ))
        .unwrap();
    next_id_for(&mut session, "svc").unwrap();
    admin.batch_execute(&format!("REVOKE {group} FROM {role}")).unwrap();
    assert_eq!(sqlstate(&next_id_for(&mut session, "svc").unwrap_err()), "42501");
    drop(session);
    admin.batch_execute(&format!("SELECT idgen_revoke_service('svc', '{group}')")).unwrap();
}

#[test]
fn the_role_acting_now_is_checked_after_set_role_and_inside_security_definer_functions() {
    let db = TestDb::create("acting_role");
    let mut admin = db.connect();
    let (granted, low) = ("idgen_t_acting_granted", "idgen_t_acting_low");
    ensure_login_role(&mut admin, granted);
    ensure_login_role(&mut admin, low);
    admin
        .batch_execute(&format!(
            "SELECT idgen_grant_service('svc', '{granted}'); GRANT CREATE ON SCHEMA public TO {granted}; GRANT {low} TO postgres"
        ))
        .unwrap();
    // A superuser's first call leases the service; after SET ROLE to a role without the grant,
    // the lease serves no more.
    next_id_for(&mut admin, "svc").unwrap();
    admin.batch_execute(&format!("SET ROLE {low}")).unwrap();
    assert_eq!(sqlstate(&next_id_for(&mut admin, "svc").unwrap_err()), "42501");
    assert_eq!(sqlstate(&claim(&mut admin, "svc", "10.0.0.1", 1).unwrap_err()), "42501");
    admin.batch_execute("RESET ROLE").unwrap();
    next_id_for(&mut admin, "svc").unwrap();
    // The granted role's SECURITY DEFINER function acts as that role, for whoever calls it...
    let mut owner = postgres::Client::connect(&format!("{} user={granted}", db.dsn()), postgres::NoTls).unwrap();
    owner
        .batch_execute(&format!(
            "CREATE FUNCTION public.svc_id() RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
                 AS $$ SELECT public.idgen_next_id('svc') $$;
             REVOKE ALL ON FUNCTION public.svc_id() FROM PUBLIC; GRANT EXECUTE ON FUNCTION public.svc_id() TO {low};
             CREATE FUNCTION public.svc_node() RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
                 AS $$ DECLARE c record; BEGIN
                     SELECT * INTO c FROM public.idgen_claim('svc', '10.0.0.9', 9);
                     PERFORM public.idgen_heartbeat('svc', c.machine_id, '10.0.0.9', 9, c.version, pg_catalog.now());
                     RETURN public.idgen_release('svc', c.machine_id, '10.0.0.9', 9, c.version);
                 END $$;
             REVOKE ALL ON FUNCTION public.svc_node() FROM PUBLIC; GRANT EXECUTE ON FUNCTION public.svc_node() TO {low};"
        ))
        .unwrap();
    let mut caller = postgres::Client::connect(&format!("{} user={low}", db.dsn()), postgres::NoTls).unwrap();
    caller.query_one("SELECT public.svc_id()", &[]).unwrap();
    // A service node's calls too (they raised XX000 inside any SECURITY DEFINER function), as the owner.
    let released: bool = caller.query_one("SELECT public.svc_node()", &[]).unwrap().get(0);
    assert!(released);
    let roles: Vec<String> = admin
        .query("SELECT DISTINCT role FROM idgen_events WHERE holder = '10.0.0.9:9'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(roles, [granted]);
    // ...and leaves the caller nothing: its own call of the service is refused, in the same session.
    assert_eq!(sqlstate(&next_id_for(&mut caller, "svc").unwrap_err()), "42501");
    caller.query_one("SELECT public.svc_id()", &[]).unwrap();
    drop((owner, caller));
    admin
        .batch_execute(&format!(
            "DROP OWNED BY {granted}; SELECT idgen_revoke_service('svc', '{granted}'); REVOKE {low} FROM postgres"
        ))
        .unwrap();
}

#[test]
fn a_grant_through_pg_database_owner_ends_with_the_ownership_in_open_sessions() {
    let db = TestDb::create("dbowner_grant");
    let mut admin = db.connect();
    let (first, second) = ("idgen_t_dbowner_first", "idgen_t_dbowner_second");
    ensure_login_role(&mut admin, first);
    ensure_login_role(&mut admin, second);
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} OWNER TO {first}; SELECT idgen_grant_service('ops', 'pg_database_owner')",
            db.name
        ))
        .unwrap();
    let mut owner = postgres::Client::connect(&format!("{} user={first}", db.dsn()), postgres::NoTls).unwrap();
    next_id_for(&mut owner, "ops").unwrap();
    admin.batch_execute(&format!("ALTER DATABASE {} OWNER TO {second}", db.name)).unwrap();
    let err = next_id_for(&mut owner, "ops").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "the former owner's open session kept the service: {err:?}");
    drop(owner);
    admin.batch_execute(&format!("ALTER DATABASE {} OWNER TO postgres", db.name)).unwrap();
}

#[test]
fn a_revocation_reaches_a_session_that_lived_across_drop_and_create_extension() {
    let db = TestDb::create("revoke_across_reinstall");
    let mut admin = db.connect();
    let role = "idgen_t_reinstall_alice";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('orders', '{role}')")).unwrap();
    let mut alice = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    next_id_for(&mut alice, "orders").unwrap();
    // Once her window has passed, the extension may be dropped; the new one has new tables.
    wait_past_backend_watermark(&mut alice, "orders");
    drop_registry(
        &mut admin,
        &format!("DROP EXTENSION idgen; CREATE EXTENSION idgen; SELECT idgen_grant_service('orders', '{role}')"),
    )
    .unwrap();
    next_id_for(&mut alice, "orders").unwrap();
    admin.batch_execute(&format!("SELECT idgen_revoke_service('orders', '{role}')")).unwrap();
    let err = next_id_for(&mut alice, "orders").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "the revocation did not reach her session: {err:?}");
}

#[test]
fn a_revocation_reaches_a_repeatable_read_transaction_that_began_before_it() {
    let db = TestDb::create("revoke_repeatable_read");
    let mut admin = db.connect();
    let role = "idgen_t_rr_alice";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('orders', '{role}')")).unwrap();
    let mut alice = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    next_id_for(&mut alice, "orders").unwrap();
    admin.batch_execute(&format!("CREATE TABLE untouched (x int); GRANT SELECT ON untouched TO {role}")).unwrap();
    // Her snapshot is taken before the revocation. The revocation reaches her session when it
    // next takes a lock (here: a table her transaction has not read yet); the grants are then
    // read as they are now, not as her snapshot shows them, and the answer is not kept.
    alice.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    admin.batch_execute(&format!("SELECT idgen_revoke_service('orders', '{role}')")).unwrap();
    alice.batch_execute("SELECT count(*) FROM untouched").unwrap();
    let err = next_id_for(&mut alice, "orders").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "an old snapshot kept the grant: {err:?}");
    alice.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&next_id_for(&mut alice, "orders").unwrap_err()), "42501");
}

#[test]
fn a_session_whose_role_was_dropped_acts_for_no_service() {
    let db = TestDb::create("dropped_role");
    let mut admin = db.connect();
    let role = "idgen_t_dropped_dave";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('dsvc', '{role}')")).unwrap();
    let mut dave = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    next_id_for(&mut dave, "dsvc").unwrap();
    admin.batch_execute(&format!("SELECT idgen_revoke_service('dsvc', '{role}'); DROP ROLE {role}")).unwrap();
    for call in ["SELECT idgen_next_id('dsvc')", "SELECT * FROM idgen_claim('dsvc', '10.0.0.4', 4)"] {
        let err = dave.batch_execute(call).unwrap_err();
        let e = db_error(&err);
        assert_eq!(e.code().code(), "42501", "{call}: {e:?}");
        assert!(e.message().contains("no longer exists"), "{call}: {e:?}");
    }
}

#[test]
fn a_database_renamed_by_its_owner_keeps_its_own_service_and_hands_its_roles_no_other() {
    let db = TestDb::create("rename_shop");
    let renamed = format!("{}_orders", db.name);
    let owner = "idgen_t_rename_owner";
    let app = "idgen_t_rename_app";
    let mut admin = connect_to(&base_dsn(), "postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {renamed} WITH (FORCE)")).unwrap();
    ensure_login_role(&mut admin, owner);
    ensure_login_role(&mut admin, app);
    admin.batch_execute(&format!("ALTER ROLE {owner} CREATEDB; ALTER DATABASE {} OWNER TO {owner}", db.name)).unwrap();
    let mut setup = db.connect();
    setup
        .batch_execute(&format!(
            "CREATE TABLE items (id bigint PRIMARY KEY DEFAULT idgen_next_id(), v int); GRANT SELECT, INSERT ON items TO {app}"
        ))
        .unwrap();
    // The service named like the database's new name has a node of its own, with its pool nearly
    // full: its roles' backends must never take from it.
    fill_registry_except(&mut setup, &renamed, &[1023]);
    drop(setup);
    let inserted_by_app = |dbname: &str| -> Result<(i64, String), postgres::Error> {
        let mut session =
            postgres::Client::connect(&format!("{} user={app}", session_dsn(&base_dsn(), dbname)), postgres::NoTls)
                .unwrap();
        let id: i64 = session.query_one("INSERT INTO items (v) VALUES (1) RETURNING id", &[])?.get(0);
        let service: String = session.query_one("SELECT service FROM idgen_backend_leases()", &[]).unwrap().get(0);
        Ok((id, service))
    };
    let (_, before) = inserted_by_app(&db.name).unwrap();
    assert_eq!(before, db.name);
    // The owner, granted nothing, renames the database.
    let mut owner_session = connect_to(&format!("{} user={owner}", base_dsn()), "postgres");
    owner_session.batch_execute(&format!("ALTER DATABASE {} RENAME TO {renamed}", db.name)).unwrap();
    let after = inserted_by_app(&renamed);
    let mut superuser = connect_to(&base_dsn(), &renamed);
    let renamed_service_rows: i64 = superuser
        .query_one("SELECT count(*) FROM system_nodes WHERE service = $1 AND released_at IS NULL", &[&renamed])
        .unwrap()
        .get(0);
    let node_claim = claim(&mut superuser, &renamed, "10.0.0.9", 9);
    // Naming the database's own service explicitly (as before 0.8.0's recipe) needs no grant either.
    admin.batch_execute(&format!("ALTER DATABASE {renamed} SET idgen.service = '{}'", db.name)).unwrap();
    let with_recipe = inserted_by_app(&renamed);
    // Asking for the service of the new name by hand is refused: the role was granted nothing.
    let mut app_session =
        postgres::Client::connect(&format!("{} user={app}", session_dsn(&base_dsn(), &renamed)), postgres::NoTls)
            .unwrap();
    let asked = app_session.query_one("SELECT idgen_next_id($1)", &[&renamed]);
    drop((app_session, superuser));
    admin.batch_execute(&format!("ALTER DATABASE {renamed} RESET idgen.service")).unwrap();
    owner_session.batch_execute(&format!("ALTER DATABASE {renamed} RENAME TO {}", db.name)).unwrap();
    assert_eq!(after.unwrap().1, db.name, "after the rename, the backends acted for another service");
    assert_eq!(renamed_service_rows, 1023, "a backend took a machine id of the service of the new name");
    assert!(node_claim.is_ok(), "the node of the service of the new name found its pool taken: {node_claim:?}");
    assert_eq!(with_recipe.unwrap().1, db.name);
    let err = asked.unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
}

/// docs/ha.md's two databases with disjoint pools, the second made as a copy of the first
/// (`CREATE DATABASE … TEMPLATE`, which the first's owner may run): the copy's backends mint for
/// the copy's own name, in its pool, not for the service recorded in the database it was copied
/// from. (They once minted for the original's service, in the original's pool: the same IDs.)
#[test]
fn a_database_copied_from_another_mints_for_its_own_name_and_repeats_none_of_its_ids() {
    let db = TestDb::create("copied_from");
    let copy = format!("{}_copy", db.name);
    let mut admin = connect_to(&base_dsn(), "postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {copy} WITH (FORCE)")).unwrap();
    let mut original = db.connect();
    original
        .batch_execute(&format!(
            "SELECT idgen_define_layout('{}', 'snowflake', pool_first => 0, pool_last => 511)",
            db.name
        ))
        .unwrap();
    drop(original);
    admin.batch_execute(&format!("CREATE DATABASE {copy} TEMPLATE {}", db.name)).unwrap();
    let mut copied = connect_to(&base_dsn(), &copy);
    copied
        .batch_execute(&format!(
            "SELECT idgen_define_layout('{copy}', 'snowflake', pool_first => 512, pool_last => 1023)"
        ))
        .unwrap();
    let mut original = db.connect();
    let mint = |client: &mut postgres::Client| -> (String, i32, Vec<i64>) {
        let ids: Vec<i64> = client
            .query("SELECT idgen_next_id() FROM generate_series(1, 20000)", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let lease = client.query_one("SELECT service, machine_id::int FROM idgen_backend_leases()", &[]).unwrap();
        (lease.get(0), lease.get(1), ids)
    };
    let (original_service, original_machine, original_ids) = mint(&mut original);
    let (copy_service, copy_machine, copy_ids) = mint(&mut copied);
    drop((original, copied));
    admin.batch_execute(&format!("DROP DATABASE {copy} WITH (FORCE)")).unwrap();
    assert_eq!(original_service, db.name);
    assert_eq!(copy_service, copy, "the copy minted for the service of the database it was copied from");
    assert!((0..=511).contains(&original_machine) && (512..=1023).contains(&copy_machine));
    let seen: std::collections::HashSet<i64> = original_ids.into_iter().collect();
    assert_eq!(copy_ids.iter().filter(|id| seen.contains(id)).count(), 0, "the copy repeated the original's IDs");
}

#[test]
fn a_role_named_beyond_ascii_mints_in_a_database_whose_encoding_is_not_utf8() {
    // Postgres stores a role's name as the bytes it was given; read in a LATIN1 database, a name
    // that is not ASCII is no UTF-8 that pgrx accepts (it panics). The caller's standing reads its
    // name as the server prints it, made valid lossily. (A superuser: granting it a service would pass
    // its name as an argument, which pgrx refuses the same way before idgen sees it.)
    let role = "idgen_t_rôle_latin1";
    let mut admin = connect_to(&base_dsn(), "postgres");
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE \"{role}\" SUPERUSER; END IF; END $$"
        ))
        .unwrap();
    let db = TestDb::empty_on(&base_dsn(), "latin1_role_name");
    admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
            db.name
        ))
        .unwrap();
    let mut client = db.connect();
    // In this database the name's UTF-8 bytes read as other letters: the role is found by its ASCII
    // part. A service that exists: the database's own would not look at the role.
    let named = r"(SELECT rolname::text FROM pg_catalog.pg_roles WHERE rolname LIKE 'idgen\_t\_r%le\_latin1')";
    client
        .batch_execute(&format!(
            "CREATE EXTENSION idgen;
             SELECT idgen_grant_service('orders', 'postgres');
             DO $$ BEGIN EXECUTE pg_catalog.format('SET ROLE %I', {named}); END $$"
        ))
        .unwrap();
    let acting: i32 = client.query_one("SELECT pg_catalog.length(current_user)", &[]).unwrap().get(0);
    assert_eq!(acting as usize, role.len(), "the session acts as {role} (its UTF-8 bytes, one LATIN1 letter each)");
    let minted = client.query_one("SELECT idgen_next_id('orders')", &[]);
    let id: i64 = minted
        .map(|row| row.get(0))
        .unwrap_or_else(|e| panic!("{role} could not mint for service orders: {}: {e}", sqlstate(&e)));
    assert!(id > 0);
}
