//! idgen behind PgBouncer in transaction mode, the pooler docs/install.md recommends for
//! connection-per-request applications (scripts/clusters.sh's `start_pooler`, `IDGEN_POOLER_DSN`):
//! clients share the pool's server backends, and with them each backend's lease and settings.
//! PgBouncer 1.18 keeps no prepared statement across transactions, so every statement through it
//! goes by the simple protocol; checks on the cluster itself go direct, with parameters.

use idgen_cluster_tests::*;
use postgres::{Client, NoTls, SimpleQueryMessage, SimpleQueryRow};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

/// The pooler the test command starts in front of the scratch cluster.
fn pooler_dsn() -> String {
    std::env::var("IDGEN_POOLER_DSN").unwrap_or_else(|_| {
        panic!(
            "IDGEN_POOLER_DSN is not set: run the pooler suite through scripts/test.sh, which starts pgbouncer \
             in front of the scratch cluster (scripts/clusters.sh, start_pooler)"
        )
    })
}

/// A client of the pooler, as `user`, for `database`. (PgBouncer bounds the login after the connection
/// attempt by its client_login_timeout, and statements by query_timeout and the database's statement_timeout.)
fn pooled(database: &str, user: &str) -> Client {
    let dsn = format!("{} dbname={database} user={user} connect_timeout=120", pooler_dsn());
    Client::connect(&dsn, NoTls).unwrap_or_else(|e| panic!("connect through the pooler ({dsn}): {e}"))
}

/// The rows a statement returns, by the simple protocol.
fn rows(client: &mut Client, sql: &str) -> Vec<SimpleQueryRow> {
    let messages = client.simple_query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

/// The one value a statement returns, as text.
fn value(client: &mut Client, sql: &str) -> String {
    let rows = rows(client, sql);
    assert_eq!(rows.len(), 1, "{sql}: one row expected");
    rows[0].get(0).unwrap_or_else(|| panic!("{sql}: NULL")).to_owned()
}

fn column<T: std::str::FromStr>(row: &SimpleQueryRow, name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    row.get(name).unwrap_or_else(|| panic!("{name} is NULL")).parse().unwrap()
}

/// PgBouncer's console: the settings the suite relies on, read from the pooler itself.
fn console() -> Client {
    pooled("pgbouncer", "postgres")
}

fn pooler_setting(name: &str) -> String {
    let config = rows(&mut console(), "SHOW CONFIG");
    let row = config.iter().find(|r| r.get("key") == Some(name)).unwrap_or_else(|| panic!("no {name} in SHOW CONFIG"));
    row.get("value").unwrap().to_owned()
}

/// The most server connections the pooler opens per user for `database` (it must have had a client).
fn pool_size(database: &str) -> usize {
    let databases = rows(&mut console(), "SHOW DATABASES");
    let row = databases
        .iter()
        .find(|r| r.get("name") == Some(database))
        .unwrap_or_else(|| panic!("the pooler does not list database {database}"));
    column(row, "pool_size")
}

/// A database of the test's own, whose server connections the pooler opens with a statement_timeout
/// (the DSN's `options` cannot pass through PgBouncer).
fn pooled_test_db(name: &str) -> TestDb {
    assert_eq!(pooler_setting("pool_mode"), "transaction", "the suite is about PgBouncer's transaction mode");
    let db = TestDb::create(name);
    db.connect().batch_execute(&format!("ALTER DATABASE {} SET statement_timeout = '300s'", db.name)).unwrap();
    db
}

/// The database the pooler gives a pool of one server connection per user (scripts/clusters.sh), so that
/// one user's consecutive clients share a backend. Tests use it as different users: pools of their own.
fn one_backend_db() -> &'static TestDb {
    static DB: OnceLock<TestDb> = OnceLock::new();
    DB.get_or_init(|| {
        let db = pooled_test_db("pooler_one_backend");
        value(&mut pooled(&db.name, "postgres"), "SELECT 1");
        assert_eq!(pool_size(&db.name), 1, "the pooler must give {} a pool of one (scripts/clusters.sh)", db.name);
        db
    })
}

/// A login role of the scratch cluster (PgBouncer looks it up through its auth_query).
fn login_role(admin: &mut Client, role: &str) {
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$"
        ))
        .unwrap();
}

/// One row of `idgen_backend_leases()`, as a pooled client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    machine_id: i32,
    version: i64,
    backend_slot: i32,
    claimed_at: String,
    ids_issued: i64,
}

/// The leases of the server backend that runs the statement, by service.
fn leases(client: &mut Client) -> BTreeMap<String, Lease> {
    rows(
        client,
        "SELECT service, machine_id, version, backend_slot, claimed_at, ids_issued FROM idgen_backend_leases()",
    )
    .iter()
    .map(|r| {
        let lease = Lease {
            machine_id: column(r, "machine_id"),
            version: column(r, "version"),
            backend_slot: column(r, "backend_slot"),
            claimed_at: column(r, "claimed_at"),
            ids_issued: column(r, "ids_issued"),
        };
        (column(r, "service"), lease)
    })
    .collect()
}

/// What a client's transaction got: one ID, from the lease of which service, on which server backend.
#[derive(Debug)]
struct Turn {
    id: i64,
    /// The service whose lease counted the ID (and whose machine id the ID carries).
    service: String,
    /// `idgen.service` as the transaction saw it.
    setting: String,
    backend_pid: i32,
    leases: BTreeMap<String, Lease>,
}

/// One transaction through the pooler: `setup` (e.g. a SET LOCAL), then `SELECT {mint}`, with the
/// backend's leases read before and after it to tell which service's lease issued the ID.
fn turn(client: &mut Client, setup: &[&str], mint: &str) -> Turn {
    turn_holding(client, setup, mint, || {})
}

/// A [`turn`] that calls `inside` in its transaction, before the ID: while the client holds its server backend.
fn turn_holding(client: &mut Client, setup: &[&str], mint: &str, inside: impl FnOnce()) -> Turn {
    rows(client, "BEGIN");
    for statement in setup {
        rows(client, statement);
    }
    inside();
    let before = leases(client);
    let id: i64 = value(client, &format!("SELECT {mint}")).parse().unwrap();
    let after = leases(client);
    let machine_id: i32 = value(client, &format!("SELECT machine_id FROM idgen_decode({id})")).parse().unwrap();
    let setting = value(client, "SELECT coalesce(current_setting('idgen.service', true), '')");
    let backend_pid: i32 = value(client, "SELECT pg_backend_pid()").parse().unwrap();
    rows(client, "COMMIT");
    let issuers: Vec<(&String, &Lease)> = after
        .iter()
        .filter(|(service, lease)| {
            before.get(*service).is_none_or(|b| b.version != lease.version || b.ids_issued < lease.ids_issued)
        })
        .collect();
    assert_eq!(issuers.len(), 1, "one lease issued {mint}'s ID: before {before:?}, after {after:?}");
    let (service, lease) = issuers[0];
    assert_eq!(lease.machine_id, machine_id, "ID {id} carries the machine id of the lease that issued it ({service})");
    Turn { id, service: service.clone(), setting, backend_pid, leases: after }
}

#[test]
fn short_client_connections_share_the_pools_backends_and_their_machine_ids() {
    const CHURN_THREADS: usize = 8;
    const CONNECTIONS_PER_THREAD: usize = 40;
    const IDS_PER_CONNECTION: usize = 3;
    let db = pooled_test_db("pooler_churn");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE minted (id bigint NOT NULL DEFAULT idgen_next_id(), client integer NOT NULL, \
                                  backend integer NOT NULL)",
        )
        .unwrap();
    // The pooler lists a database once a client has used it.
    value(&mut pooled(&db.name, "postgres"), "SELECT 1");
    let pool = pool_size(&db.name);
    assert!(pool > 1, "the suite needs a pool of several backends for {} (scripts/clusters.sh)", db.name);
    fn insert(client: &mut Client, number: usize) {
        rows(
            client,
            &format!(
                "INSERT INTO minted (client, backend) SELECT {number}, pg_backend_pid() FROM generate_series(1, {IDS_PER_CONNECTION})"
            ),
        );
    }

    // A whole pool of clients inside their transactions at once: each holds a server backend of its own.
    let inside = Arc::new(Barrier::new(pool));
    let holders = (0..pool)
        .map(|number| {
            let (database, barrier) = (db.name.clone(), inside.clone());
            spawn_party(format!("client {number} holding a backend"), &inside, move || {
                let mut client = pooled(&database, "postgres");
                rows(&mut client, "BEGIN");
                insert(&mut client, number);
                barrier.wait();
                rows(&mut client, "COMMIT");
            })
        })
        .collect();
    join_all(holders, WORK_PATIENCE, "a pool of clients inside their transactions");
    // Then hundreds of short connections, more at once than the pool has backends.
    let churners = (0..CHURN_THREADS)
        .map(|thread| {
            let database = db.name.clone();
            spawn_named(format!("churn thread {thread}"), move || {
                for connection in 0..CONNECTIONS_PER_THREAD {
                    insert(&mut pooled(&database, "postgres"), pool + thread * CONNECTIONS_PER_THREAD + connection);
                }
            })
        })
        .collect();
    join_all(churners, WORK_PATIENCE, "the threads of short connections");

    let clients = pool + CHURN_THREADS * CONNECTIONS_PER_THREAD;
    let row = admin
        .query_one(
            "SELECT count(*), count(DISTINCT id), count(DISTINCT client), count(DISTINCT backend), \
                    count(DISTINCT (idgen_decode(id)).machine_id) \
               FROM minted",
            &[],
        )
        .unwrap();
    let (ids, distinct_ids, distinct_clients, backends, machine_ids) =
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2), row.get::<_, i64>(3), row.get::<_, i64>(4));
    assert_eq!((ids, distinct_clients), ((clients * IDS_PER_CONNECTION) as i64, clients as i64));
    assert_eq!(distinct_ids, ids, "{} of {ids} IDs were issued twice", ids - distinct_ids);
    assert_eq!(backends, pool as i64, "{clients} clients ran on the pool's {pool} server backends");
    let backends_with_several_machine_ids: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT backend FROM minted GROUP BY backend \
                                    HAVING count(DISTINCT (idgen_decode(id)).machine_id) <> 1) several",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(backends_with_several_machine_ids, 0, "a pooled backend keeps its lease from client to client");
    assert_eq!(machine_ids, pool as i64, "one machine id per server backend, however many clients");
    assert_eq!(
        backend_rows(&mut admin, &db.name),
        pool as i64,
        "the registry holds one backend row per server backend"
    );
    let registered_are_the_used: bool = admin
        .query_one(
            "SELECT (SELECT array_agg(machine_id ORDER BY machine_id) FROM system_nodes \
                      WHERE service = $1 AND backend_slot IS NOT NULL) \
                  = (SELECT array_agg(DISTINCT (idgen_decode(id)).machine_id ORDER BY (idgen_decode(id)).machine_id) FROM minted)",
            &[&db.name],
        )
        .unwrap()
        .get(0);
    assert!(registered_are_the_used, "the IDs carry the machine ids of the registry's backend rows");
}

#[test]
fn set_local_and_the_explicit_argument_choose_a_service_for_one_client_only() {
    let db = one_backend_db();
    let database = db.name.as_str();
    let next_client = || pooled(database, "postgres");

    let set_local = turn(&mut next_client(), &["SET LOCAL idgen.service = 'orders'"], "idgen_next_id()");
    assert_eq!((set_local.service.as_str(), set_local.setting.as_str()), ("orders", "orders"));
    let after_set_local = turn(&mut next_client(), &[], "idgen_next_id()");
    assert_eq!(
        (after_set_local.service.as_str(), after_set_local.setting.as_str()),
        (database, ""),
        "SET LOCAL ended with its transaction: the next client on the backend uses the database's service"
    );
    let explicit = turn(&mut next_client(), &[], "idgen_next_id('orders')");
    assert_eq!((explicit.service.as_str(), explicit.setting.as_str()), ("orders", ""));
    let after_explicit = turn(&mut next_client(), &[], "idgen_next_id()");
    assert_eq!(after_explicit.service, database, "the explicit argument changes nothing for the next client");

    let turns = [&set_local, &after_set_local, &explicit, &after_explicit];
    let pids: BTreeSet<i32> = turns.iter().map(|t| t.backend_pid).collect();
    assert_eq!(pids.len(), 1, "consecutive clients of a pool of one share its backend: {turns:#?}");
    // One backend, two leases: the ones the four IDs were counted under.
    let issued: BTreeMap<&str, i64> =
        after_explicit.leases.iter().map(|(service, lease)| (service.as_str(), lease.ids_issued)).collect();
    assert_eq!(issued, BTreeMap::from([("orders", 2), (database, 2)]));
    assert!(turns.windows(2).all(|w| w[0].id < w[1].id), "{turns:#?}");
}

#[test]
fn a_plain_set_of_idgen_service_leaks_to_the_next_client_on_the_backend() {
    const ROLE: &str = "idgen_t_pooler_session_setter";
    let db = one_backend_db();
    let database = db.name.as_str();
    let mut admin = db.connect();
    login_role(&mut admin, ROLE);
    admin.query_one("SELECT idgen_grant_service('orders', $1)", &[&ROLE]).unwrap();

    // The pitfall the README and docs/install.md warn of: a session-level SET stays with the server backend, and
    // PgBouncer's transaction mode resets nothing between clients.
    let mut setter = pooled(database, ROLE);
    rows(&mut setter, "SET idgen.service = 'orders'");
    let setters = turn(&mut setter, &[], "idgen_next_id()");
    assert_eq!(setters.service, "orders");
    drop(setter);
    let mut next = pooled(database, ROLE);
    let nexts = turn(&mut next, &[], "idgen_next_id()");
    assert_eq!(nexts.backend_pid, setters.backend_pid, "a pool of one: the next client gets the same backend");
    assert_eq!(
        (nexts.service.as_str(), nexts.setting.as_str()),
        ("orders", "orders"),
        "the next client, which set nothing, got the previous client's service"
    );
    rows(&mut next, "RESET idgen.service");
    let after_reset = turn(&mut next, &[], "idgen_next_id()");
    assert_eq!((after_reset.backend_pid, after_reset.service.as_str()), (setters.backend_pid, database));
}

#[test]
fn a_role_setting_reaches_every_server_connection_of_that_role_and_no_other() {
    const ORDERS_APP: &str = "idgen_t_pooler_orders_app";
    const OTHER_APP: &str = "idgen_t_pooler_other_app";
    const ORDERS_BACKENDS: usize = 3;
    let db = pooled_test_db("pooler_roles");
    let database = db.name.as_str();
    let mut admin = db.connect();
    login_role(&mut admin, ORDERS_APP);
    login_role(&mut admin, OTHER_APP);
    admin.query_one("SELECT idgen_grant_service('orders', $1)", &[&ORDERS_APP]).unwrap();

    // A backend the pooler opened before the setting keeps the settings it started with.
    let before = turn(&mut pooled(database, ORDERS_APP), &[], "idgen_next_id()");
    assert_eq!(before.service, database);
    admin
        .batch_execute(&format!("ALTER ROLE {ORDERS_APP} IN DATABASE {database} SET idgen.service = 'orders'"))
        .unwrap();
    let pooled_since = turn(&mut pooled(database, ORDERS_APP), &[], "idgen_next_id()");
    assert_eq!(pooled_since.backend_pid, before.backend_pid, "the pool's idle backend serves the next client");
    assert_eq!(
        (pooled_since.service.as_str(), pooled_since.setting.as_str()),
        (database, ""),
        "ALTER ROLE … SET reaches new server connections only"
    );
    // RECONNECT on the console closes the pool's server connections as they come free.
    rows(&mut console(), &format!("RECONNECT {database}"));
    wait_for_exit(&mut admin, before.backend_pid);

    // Now every server connection of the role starts with it: several at once, each in a transaction.
    let inside = Arc::new(Barrier::new(ORDERS_BACKENDS));
    let clients = (0..ORDERS_BACKENDS)
        .map(|number| {
            let (database, barrier) = (database.to_owned(), inside.clone());
            spawn_party(format!("{ORDERS_APP} client {number}"), &inside, move || {
                turn_holding(&mut pooled(&database, ORDERS_APP), &[], "idgen_next_id()", || barrier.wait())
            })
        })
        .collect();
    let orders_turns = join_all(clients, WORK_PATIENCE, "the role's clients inside their transactions");
    let orders_pids: BTreeSet<i32> = orders_turns.iter().map(|t| t.backend_pid).collect();
    assert_eq!(orders_pids.len(), ORDERS_BACKENDS, "clients inside transactions at once hold backends of their own");
    for t in &orders_turns {
        assert_eq!((t.service.as_str(), t.setting.as_str()), ("orders", "orders"), "{t:?}");
    }
    // The pooler pools per user and database: another role's clients never get it.
    for _ in 0..3 {
        let other = turn(&mut pooled(database, OTHER_APP), &[], "idgen_next_id()");
        assert_eq!((other.service.as_str(), other.setting.as_str()), (database, ""));
        assert!(!other.leases.contains_key("orders"), "another role's backend never used the role's service");
        assert!(!orders_pids.contains(&other.backend_pid));
        let orders = turn(&mut pooled(database, ORDERS_APP), &[], "idgen_next_id()");
        assert_eq!(orders.service, "orders");
        assert!(orders_pids.contains(&orders.backend_pid), "{orders:?}");
    }
}

#[test]
fn clients_sharing_a_pooled_backend_share_its_lease() {
    const ROLE: &str = "idgen_t_pooler_neighbour";
    let db = one_backend_db();
    let database = db.name.as_str();
    let mut admin = db.connect();
    login_role(&mut admin, ROLE);

    // Two clients connected at once, one server backend between them (a pool of one).
    let mut first = pooled(database, ROLE);
    let mut second = pooled(database, ROLE);
    let firsts = turn(&mut first, &[], "idgen_next_id()");
    let seconds = turn(&mut second, &[], "idgen_next_id()");
    let again = turn(&mut first, &[], "idgen_next_id()");
    assert_eq!((seconds.backend_pid, again.backend_pid), (firsts.backend_pid, firsts.backend_pid));
    let lease = |t: &Turn| t.leases.get(database).cloned().unwrap_or_else(|| panic!("no lease of {database}: {t:?}"));
    let (lease_1, lease_2, lease_3) = (lease(&firsts), lease(&seconds), lease(&again));
    // The same lease (machine id, version, slot, claim), counting every client's IDs.
    let without_count = |l: &Lease| Lease { ids_issued: 0, ..l.clone() };
    assert_eq!(without_count(&lease_2), without_count(&lease_1));
    assert_eq!(without_count(&lease_3), without_count(&lease_1));
    assert_eq!((lease_1.ids_issued, lease_2.ids_issued, lease_3.ids_issued), (1, 2, 3));
    let machine_ids: BTreeSet<i32> =
        [firsts.id, seconds.id, again.id].iter().map(|&id| machine_id_of(&mut admin, id)).collect();
    assert_eq!(machine_ids, BTreeSet::from([lease_1.machine_id]));

    // A direct connection of the same role is a backend of its own, with a lease of its own.
    let mut direct =
        Client::connect(&format!("{} user={ROLE}", db.dsn()), NoTls).expect("connect directly to the scratch cluster");
    let direct_id: i64 = direct.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    let direct_lease = backend_lease(&mut direct, database).expect("the direct connection's lease");
    assert_ne!(direct_lease.backend_slot, lease_1.backend_slot);
    assert_ne!(machine_id_of(&mut admin, direct_id), lease_1.machine_id, "two live backends never share a machine id");
}
