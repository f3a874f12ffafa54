//! No role below superuser can make idgen run its objects with the extension
//! owner's rights, or stop claims by holding locks.
//!
//! - A meta-test reads the SQL that runs with the owner's rights and fails on
//!   any operator or function not resolved in pg_catalog by name (the rule at
//!   the top of src/statements.rs).
//! - An attack suite: the database owner (who owns `public` since PostgreSQL 15)
//!   and a role with CREATE on the extension's schema plant look-alikes of every
//!   operator and function the SQL uses, types, casts, and decoys in `pg_temp`,
//!   then call every idgen entry point. Nothing planted may run.
//! - Advisory locks held on every key idgen ever used delay no claim.

use idgen_cluster_tests::*;
use postgres::Client;

// ---------------------------------------------------------------------------
// Meta-test: the privileged SQL qualifies every operator and function.

/// Every statement idgen runs (src/statements.rs, plain Rust).
#[path = "../../../src/statements.rs"]
#[allow(dead_code)]
mod statements;

/// SQL words written like function calls that are grammar, not functions looked up on the path,
/// and the extension's own relations (an INSERT's column list) and functions (`idgen_*`).
const NOT_LOOKED_UP: [&str; 23] = [
    "EXISTS",
    "COALESCE",
    "GREATEST",
    "LEAST",
    "EXTRACT",
    "AS",
    "IN",
    "FROM",
    "AND",
    "OR",
    "NOT",
    "ON",
    "VALUES",
    "ANY",
    "WITH",
    "SELECT",
    "WHERE",
    "LATERAL",
    "JOIN",
    "OPERATOR",
    "RETURNING",
    "CONFLICT",
    "system_nodes",
];

/// The statement with quoted literals blanked, and each `column = value` of an UPDATE's SET list
/// (an assignment, not an operator) blanked too.
fn without_literals_and_assignments(sql: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(sql.len());
    let mut in_quote = false;
    for c in sql.chars() {
        if c == '\'' {
            in_quote = !in_quote;
            out.push(' ');
        } else {
            out.push(if in_quote { ' ' } else { c });
        }
    }
    let text: String = out.iter().collect();
    let Some(set_at) = text.find(" SET ") else { return text };
    let (mut depth, mut item_start, mut k) = (0i32, true, set_at + 5);
    let chars: Vec<char> = text.chars().collect();
    let mut result = chars.clone();
    while k < chars.len() {
        let rest: String = chars[k..chars.len().min(k + 11)].iter().collect();
        match chars[k] {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            '=' if depth == 0 && item_start => {
                result[k] = ' ';
                item_start = false;
            }
            _ if depth == 0
                && (rest.starts_with(" FROM ") || rest.starts_with(" WHERE ") || rest.starts_with(" RETURNING ")) =>
            {
                break
            }
            _ => {}
        }
        k += 1;
    }
    result.iter().collect()
}

/// What in one statement would be resolved through the search path.
fn unqualified(sql: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let upper = sql.to_uppercase();
    if upper.contains("DISTINCT FROM") || upper.contains("NULLIF") {
        problems.push("resolves = through the path (IS DISTINCT FROM, NULLIF)".to_owned());
    }
    let text = without_literals_and_assignments(sql);
    let mut cleaned = text.clone();
    while let Some(at) = cleaned.find("OPERATOR(pg_catalog.") {
        let end = cleaned[at..].find(')').map(|e| at + e + 1).unwrap_or(cleaned.len());
        cleaned.replace_range(at..end, " ");
    }
    for allowed in ["::", ".*", "(*)", " RETURNING *"] {
        cleaned = cleaned.replace(allowed, " ");
    }
    let chars: Vec<char> = cleaned.chars().collect();
    for (k, &c) in chars.iter().enumerate() {
        let negative_number = c == '-' && chars.get(k + 1).is_some_and(|d| d.is_ascii_digit());
        if "=<>+-*/|!~@#%^&?".contains(c) && !negative_number {
            let around: String = chars[k.saturating_sub(30)..chars.len().min(k + 30)].iter().collect();
            problems.push(format!("operator '{c}' not written OPERATOR(pg_catalog.{c}): ...{around}..."));
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut k = 0;
    while k < chars.len() {
        if chars[k].is_ascii_alphabetic() || chars[k] == '_' {
            let start = k;
            while k < chars.len() && (chars[k].is_ascii_alphanumeric() || chars[k] == '_' || chars[k] == '.') {
                k += 1;
            }
            let word: String = chars[start..k].iter().collect();
            let mut next = k;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            // `AS t (a, b)`: an alias with its column names.
            let alias = chars[..start].iter().collect::<String>().trim_end().to_uppercase().ends_with(" AS");
            let allowed = alias
                || word.starts_with("pg_catalog.")
                || word.starts_with("idgen_")
                || NOT_LOOKED_UP.iter().any(|w| w.eq_ignore_ascii_case(&word));
            if chars.get(next) == Some(&'(') && !allowed {
                problems.push(format!("function {word}() not written pg_catalog.{word}()"));
            }
        } else {
            k += 1;
        }
    }
    problems
}

#[test]
fn the_checker_catches_what_the_rule_forbids() {
    for bad in [
        "SELECT 1 FROM system_nodes WHERE service = $1",
        "SELECT last_seen + $5 * interval '1 second' FROM system_nodes",
        "SELECT pg_try_advisory_xact_lock(hashtext(concat_ws('/', 'idgen/node', $1)), $3)",
        "SELECT 1 FROM system_nodes WHERE backend_slot IS NOT DISTINCT FROM $4",
        "SELECT NULLIF(r.floor, '-infinity') FROM idgen_registry r",
        "SELECT clock_timestamp()",
        "UPDATE system_nodes SET version = version + 1 WHERE port = $3",
        "UPDATE system_nodes SET last_seen = now() RETURNING last_seen",
    ] {
        assert!(!unqualified(bad).is_empty(), "not caught: {bad}");
    }
    for good in [
        "UPDATE system_nodes n SET host = $2, version = n.version OPERATOR(pg_catalog.+) 1, released_at = NULL \
         FROM own WHERE n.service OPERATOR(pg_catalog.=) own.service RETURNING n.machine_id",
        "SELECT pg_catalog.clock_timestamp(), COALESCE(backend_slot, -1), 'a = b(' FROM system_nodes \
         WHERE EXISTS (SELECT FROM idgen_claim_guards g WHERE g.bucket OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED)",
    ] {
        assert_eq!(unqualified(good), Vec::<String>::new(), "{good}");
    }
}

#[test]
fn privileged_sql_resolves_every_operator_and_function_in_pg_catalog() {
    // Every statement is in `ALL` by construction (the `statements!` macro declares both), and
    // tests/cluster/tests/runtime_sql.rs checks that no other code runs SQL.
    let problems: Vec<String> = statements::ALL
        .iter()
        .flat_map(|s| unqualified(s.text).into_iter().map(move |p| format!("{}: {p}", s.name)))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------
// The attack suite.

/// Operators the registry's SQL uses, with the argument types it meets them at (and some it
/// would meet if a parameter lost its exact type), each planted with a body that records it ran.
const PLANTED_OPERATORS: [(&str, &str, &str, &str, &str); 28] = [
    ("=", "varchar", "text", "boolean", "$1::text OPERATOR(pg_catalog.=) $2"),
    ("=", "text", "text", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "smallint", "smallint", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "smallint", "integer", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "integer", "integer", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "bigint", "bigint", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "inet", "inet", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "name", "name", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "oid", "oid", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("=", "timestamptz", "timestamptz", "boolean", "$1 OPERATOR(pg_catalog.=) $2"),
    ("<", "timestamptz", "timestamptz", "boolean", "$1 OPERATOR(pg_catalog.<) $2"),
    ("<=", "timestamptz", "timestamptz", "boolean", "$1 OPERATOR(pg_catalog.<=) $2"),
    (">", "timestamptz", "timestamptz", "boolean", "$1 OPERATOR(pg_catalog.>) $2"),
    ("+", "timestamptz", "interval", "timestamptz", "$1 OPERATOR(pg_catalog.+) $2"),
    ("-", "timestamptz", "interval", "timestamptz", "$1 OPERATOR(pg_catalog.-) $2"),
    ("-", "timestamptz", "timestamptz", "interval", "$1 OPERATOR(pg_catalog.-) $2"),
    ("*", "bigint", "interval", "interval", "$1::float8 OPERATOR(pg_catalog.*) $2"),
    ("*", "float8", "interval", "interval", "$1 OPERATOR(pg_catalog.*) $2"),
    ("*", "integer", "interval", "interval", "$1::float8 OPERATOR(pg_catalog.*) $2"),
    ("+", "integer", "integer", "integer", "$1 OPERATOR(pg_catalog.+) $2"),
    ("+", "bigint", "bigint", "bigint", "$1 OPERATOR(pg_catalog.+) $2"),
    ("||", "text", "text", "text", "$1 OPERATOR(pg_catalog.||) $2"),
    // And those the diagnostics' views meet.
    ("<>", "text", "text", "boolean", "$1 OPERATOR(pg_catalog.<>) $2"),
    ("=", "varchar", "varchar", "boolean", "$1::text OPERATOR(pg_catalog.=) $2::text"),
    ("/", "numeric", "numeric", "numeric", "$1 OPERATOR(pg_catalog./) $2"),
    ("/", "float8", "float8", "float8", "$1 OPERATOR(pg_catalog./) $2"),
    (">", "float8", "float8", "boolean", "$1 OPERATOR(pg_catalog.>) $2"),
    ("-", "integer", "bigint", "bigint", "$1 OPERATOR(pg_catalog.-) $2"),
];

/// Functions the SQL calls (and called before it was qualified), planted with exact signatures.
const PLANTED_FUNCTIONS: [(&str, &str, &str, &str); 20] = [
    ("now", "", "timestamptz", "pg_catalog.now()"),
    ("clock_timestamp", "", "timestamptz", "pg_catalog.clock_timestamp()"),
    ("host", "inet", "text", "pg_catalog.host($1)"),
    ("to_char", "timestamp, text", "text", "pg_catalog.to_char($1, $2)"),
    ("floor", "numeric", "numeric", "pg_catalog.floor($1)"),
    ("quote_ident", "text", "text", "pg_catalog.quote_ident($1)"),
    ("pg_notify", "text, text", "void", "pg_catalog.pg_notify($1, $2)"),
    ("current_setting", "text, boolean", "text", "pg_catalog.current_setting($1, $2)"),
    ("random", "", "float8", "pg_catalog.random()"),
    ("hashtext", "text", "integer", "pg_catalog.hashtext($1)"),
    ("concat_ws", "text, text, text, text, integer", "text", "pg_catalog.concat_ws($1, $2, $3, $4, $5)"),
    ("pg_try_advisory_xact_lock", "integer, integer", "boolean", "pg_catalog.pg_try_advisory_xact_lock($1, $2)"),
    ("pg_try_advisory_xact_lock", "bigint", "boolean", "pg_catalog.pg_try_advisory_xact_lock($1)"),
    ("generate_series", "integer, integer", "SETOF integer", "pg_catalog.generate_series($1, $2)"),
    ("date_trunc", "text, interval", "interval", "pg_catalog.date_trunc($1, $2)"),
    ("pg_has_role", "name, name, text", "boolean", "pg_catalog.pg_has_role($1, $2, $3)"),
    ("pg_has_role", "name, oid, text", "boolean", "pg_catalog.pg_has_role($1, $2, $3)"),
    ("round", "numeric, integer", "numeric", "pg_catalog.round($1, $2)"),
    ("isfinite", "timestamptz", "boolean", "pg_catalog.isfinite($1)"),
    ("set_config", "text, text, boolean", "text", "pg_catalog.set_config($1, $2, $3)"),
];

fn ensure_role(admin: &mut Client, role: &str) {
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$; \
             ALTER ROLE {role} NOSUPERUSER"
        ))
        .unwrap();
}

/// Plants, as the connected role, a look-alike of every operator and function the SQL uses in
/// `schema`, each recording that it ran (as whom) and trying to make its planter a superuser.
fn plant(client: &mut Client, planter: &str, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE FUNCTION {schema}.idgen_trap(what text) RETURNS boolean LANGUAGE plpgsql AS $$
             BEGIN
                 -- A sequence is never rolled back: a trap that ran inside a failing claim still counts.
                 PERFORM nextval('public.hijack_calls');
                 INSERT INTO public.hijack_log VALUES (current_user, what);
                 BEGIN EXECUTE 'ALTER ROLE {planter} SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
                 RETURN true;
             END $$"
        ))
        .unwrap();
    for (k, (op, left, right, result, body)) in PLANTED_OPERATORS.iter().enumerate() {
        client
            .batch_execute(&format!(
                "CREATE FUNCTION {schema}.trap_op_{k}({left}, {right}) RETURNS {result} LANGUAGE sql AS
                     $$ SELECT CASE WHEN {schema}.idgen_trap('operator {op}({left}, {right})') THEN {body} END $$;
                 CREATE OPERATOR {schema}.{op} (FUNCTION = {schema}.trap_op_{k}, LEFTARG = {left}, RIGHTARG = {right})"
            ))
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "CREATE FUNCTION {schema}.trap_greater(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE sql AS
                 $$ SELECT CASE WHEN {schema}.idgen_trap('max(timestamptz)') THEN GREATEST($1, $2) END $$;
             CREATE AGGREGATE {schema}.max(timestamptz) (SFUNC = {schema}.trap_greater, STYPE = timestamptz)"
        ))
        .unwrap();
    for (name, args, result, body) in PLANTED_FUNCTIONS {
        let select = if result.starts_with("SETOF") {
            format!("SELECT {body} WHERE {schema}.idgen_trap('{name}({args})')")
        } else {
            format!("SELECT CASE WHEN {schema}.idgen_trap('{name}({args})') THEN {body} END")
        };
        let sql = format!("CREATE FUNCTION {schema}.{name}({args}) RETURNS {result} LANGUAGE sql AS $$ {select} $$");
        client.batch_execute(&sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    // Types named like the ones the SQL casts to, in the planter's schema: pg_catalog is searched first.
    client
        .batch_execute(&format!(
            "CREATE DOMAIN {schema}.interval AS text; CREATE DOMAIN {schema}.float8 AS numeric; \
             CREATE DOMAIN {schema}.inet AS text; CREATE TYPE {schema}.timestamptz AS (x int)"
        ))
        .unwrap();
}

/// Decoys in the calling session's `pg_temp`: tables and functions named like idgen's.
fn plant_temp(client: &mut Client) {
    client
        .batch_execute(
            "CREATE TEMP TABLE system_nodes (LIKE public.hijack_log); CREATE TEMP TABLE idgen_registry (LIKE public.hijack_log);
             CREATE TEMP TABLE idgen_claim_guards (bucket int);
             CREATE TEMP TABLE idgen_history (LIKE public.hijack_log);
             CREATE TEMP TABLE idgen_service_members (LIKE public.hijack_log);
             CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql AS
                 $$ SELECT CASE WHEN public.idgen_trap('pg_temp.now') THEN pg_catalog.now() END $$;
             CREATE TEMP TABLE nodes (LIKE public.hijack_log);
             CREATE TEMP TABLE idgen_tombstones (LIKE public.hijack_log);
             CREATE FUNCTION pg_temp.idgen_holder_bound(system_nodes, interval, interval) RETURNS timestamptz LANGUAGE sql AS
                 $$ SELECT CASE WHEN public.idgen_trap('pg_temp.idgen_holder_bound') THEN pg_catalog.now() END $$;
             CREATE FUNCTION pg_temp.holder_bound(nodes, interval, interval) RETURNS timestamptz LANGUAGE sql AS
                 $$ SELECT CASE WHEN public.idgen_trap('pg_temp.holder_bound') THEN pg_catalog.now() END $$",
        )
        .unwrap();
}

/// Calls every idgen entry point as the connected (attacking) role, through every path of the
/// claim, heartbeat, release, lease check and alert SQL; then, as a superuser, every trigger
/// and every function for superusers. `ext` is the schema idgen is installed in; `observer` (a
/// superuser's session with only pg_catalog on its path) sets the scene and waits.
fn call_everything(attacker: &mut Client, admin: &mut Client, observer: &mut Client, ext: &str, service: &str) {
    // Services: new, heartbeat (with and without a watermark), release, the same node back
    // (reused), a twin (its row set aside), released, idle_1h (its alert NOTIFYs), exhaustion.
    let claim = |c: &mut Client, host: &str| -> Result<(i32, i64, String), postgres::Error> {
        c.query_one(&format!("SELECT machine_id, version, outcome FROM {ext}.idgen_claim('svc', '{host}', 1)"), &[])
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    };
    let v1 = first_version(observer);
    assert_eq!(claim(attacker, "10.0.0.1").unwrap(), (0, v1, "new".to_owned()));
    attacker.query_one(&format!("SELECT {ext}.idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, {v1})"), &[]).unwrap();
    attacker
        .query_one(
            &format!("SELECT {ext}.idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, {v1}, pg_catalog.now())"),
            &[],
        )
        .unwrap();
    attacker
        .query_one(
            &format!("SELECT {ext}.idgen_release('svc', 0::smallint, '10.0.0.1', 1, {v1}, pg_catalog.now())"),
            &[],
        )
        .unwrap();
    let stale = attacker
        .query_one(&format!("SELECT {ext}.idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, {v1})"), &[])
        .unwrap_err();
    assert_eq!(sqlstate(&stale), "55000");
    assert_eq!(claim(attacker, "10.0.0.1").unwrap(), (0, v1 + 2, "reused".to_owned()));
    let twin = claim(attacker, "10.0.0.1").unwrap();
    assert_eq!((twin.0, twin.2.as_str()), (1, "new"), "the twin takes another id");
    observer
        .batch_execute(&format!(
            "INSERT INTO {ext}.system_nodes (service, machine_id, host, port, version) \
                 SELECT 'svc', m, ('192.0.2.' OPERATOR(pg_catalog.||) (m OPERATOR(pg_catalog.%) 250))::inet, 10000 OPERATOR(pg_catalog.+) m, 1 \
                   FROM pg_catalog.generate_series(2, 1023) m;
             UPDATE {ext}.system_nodes SET released_at = pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours',
                                           issued_until = pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours' \
                 WHERE service OPERATOR(pg_catalog.=) 'svc' AND machine_id OPERATOR(pg_catalog.=) 0;
             UPDATE {ext}.system_nodes SET last_seen = pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours' \
                 WHERE service OPERATOR(pg_catalog.=) 'svc' AND machine_id OPERATOR(pg_catalog.=) 5"
        ))
        .unwrap();
    let outcomes: Vec<String> = (2..4).map(|k| claim(attacker, &format!("10.0.0.{k}")).unwrap().2).collect();
    assert_eq!(outcomes, ["released", "idle_1h"]);
    assert_eq!(sqlstate(&claim(attacker, "10.0.0.9").unwrap_err()), "53000");
    // Refused calls (recorded once, by the registry writer).
    for _ in 0..2 {
        attacker.query_one(&format!("SELECT {ext}.idgen_release('svc', 7::smallint, '10.0.0.1', 1, 1)"), &[]).unwrap();
    }

    // Backends: the column default, a lease check once the window has passed, a lost lease, a
    // window renewed inside a rolled-back savepoint, another service, the exit record.
    attacker
        .batch_execute(&format!("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT {ext}.idgen_next_id(), n int)"))
        .unwrap();
    attacker.batch_execute("INSERT INTO t (n) SELECT pg_catalog.generate_series(1, 100)").unwrap();
    // (Waited for on the observer's connection: the others have traps planted on their path.)
    let until = leased_until(attacker, ext, service);
    wait_until_server_clock_passes(observer, &until);
    attacker.batch_execute("INSERT INTO t (n) VALUES (101)").unwrap();
    observer
        .execute(
            &format!("UPDATE {ext}.system_nodes SET version = version OPERATOR(pg_catalog.+) 1 WHERE service OPERATOR(pg_catalog.=) $1"),
            &[&service],
        )
        .unwrap();
    let until = leased_until(attacker, ext, service);
    wait_until_server_clock_passes(observer, &until);
    attacker.batch_execute("INSERT INTO t (n) VALUES (102)").unwrap(); // lost: warns, claims anew
    let until = leased_until(attacker, ext, service);
    wait_until_server_clock_passes(observer, &until);
    attacker
        .batch_execute("BEGIN; SAVEPOINT s; INSERT INTO t (n) VALUES (103); ROLLBACK TO SAVEPOINT s; COMMIT")
        .unwrap();
    attacker.batch_execute(&format!("BEGIN READ ONLY; SELECT {ext}.idgen_next_id(); ROLLBACK")).ok();
    attacker.batch_execute("ROLLBACK").ok();
    attacker.query_one(&format!("SELECT {ext}.idgen_next_id('another')"), &[]).unwrap();
    attacker
        .query_one(
            &format!("SELECT d.*, {ext}.idgen_min_id(d.ts), {ext}.idgen_max_id(d.ts) FROM t, {ext}.idgen_decode(t.id) d ORDER BY t.id LIMIT 1"),
            &[],
        )
        .unwrap();
    attacker.query(&format!("SELECT * FROM {ext}.idgen_backend_leases()"), &[]).unwrap();
    read_diagnostics(attacker, ext);

    // As a superuser, on the path the attacker chose: the grants, the triggers of system_nodes
    // (a hand DELETE, a restore, TRUNCATE), the refused DROP, the history purge.
    admin
        .batch_execute(&format!(
            "SELECT {ext}.idgen_grant_service('svc', 'pg_monitor'), {ext}.idgen_revoke_service('svc', 'pg_monitor');
             CREATE TEMP TABLE saved AS SELECT * FROM {ext}.system_nodes WHERE machine_id OPERATOR(pg_catalog.<) 10;
             DELETE FROM {ext}.system_nodes WHERE machine_id OPERATOR(pg_catalog.<) 10;
             INSERT INTO {ext}.system_nodes SELECT * FROM saved;
             TRUNCATE {ext}.system_nodes;
             INSERT INTO {ext}.system_nodes SELECT * FROM saved;"
        ))
        .unwrap();
    read_diagnostics(admin, ext);
    let refused = drop_registry(admin, "DROP EXTENSION idgen").unwrap_err();
    assert_eq!(sqlstate(&refused), "55006", "{refused:?}");
    admin.query_one(&format!("SELECT {ext}.idgen_purge_history('1 microsecond')"), &[]).unwrap();
}

/// The end of the window the connected session's lease for `service` issues in.
fn leased_until(client: &mut Client, ext: &str, service: &str) -> String {
    client
        .query_one(
            &format!("SELECT issued_until::text FROM {ext}.idgen_backend_leases() l WHERE l.service OPERATOR(pg_catalog.=) $1"),
            &[&service],
        )
        .unwrap()
        .get(0)
}

/// Every diagnostic view and function, read as the connected role.
fn read_diagnostics(client: &mut Client, ext: &str) {
    for view in [
        "idgen_nodes",
        "idgen_capacity",
        "idgen_events",
        "idgen_metrics",
        "idgen_visibility",
        "idgen_registry_status",
        "idgen_tombstones",
    ] {
        client.query(&format!("SELECT * FROM {ext}.{view}"), &[]).unwrap();
    }
    client.query(&format!("SELECT * FROM {ext}.idgen_health()"), &[]).unwrap();
    client.query(&format!("SELECT * FROM {ext}.idgen_policy()"), &[]).unwrap();
    let ids: Vec<i64> = client
        .query(&format!("SELECT {ext}.idgen_min_id(at) FROM {ext}.idgen_events"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for id in ids {
        client.query(&format!("SELECT * FROM {ext}.idgen_explain($1)"), &[&id]).unwrap();
    }
}

/// How the attacker gets its objects where a careless statement would find them.
#[derive(Clone, Copy, PartialEq)]
enum Attack {
    /// The database owner plants in `public`, which it owns, idgen's schema.
    DatabaseOwner,
    /// A role granted CREATE on `public` plants there.
    SchemaCreator,
    /// The database owner renames `public` (idgen's schema) to `public_old`, creates a new `public`
    /// holding look-alikes of idgen's objects (its private tables, views, functions, and
    /// `system_nodes` itself) besides the operator and function traps, and makes it the
    /// database's default search_path, ahead of pg_catalog.
    SchemaRenamer,
}

fn attack(name: &str, planter: &str, how: Attack) {
    let mut superuser = connect_to(&base_dsn(), "postgres");
    ensure_role(&mut superuser, planter);
    let db = TestDb::empty_on(&base_dsn(), name);
    let owner = if how == Attack::SchemaCreator { "postgres" } else { planter };
    superuser.batch_execute(&format!("ALTER DATABASE {} OWNER TO {owner}", db.name)).unwrap();
    let mut admin = db.connect();
    // The test's own superuser statements must not fall for the traps either: nothing writable on its path.
    admin
        .batch_execute(&format!(
            "SET search_path = pg_catalog;
             CREATE EXTENSION idgen SCHEMA public;
             SELECT public.idgen_grant_service('svc', '{planter}'), public.idgen_grant_service('another', '{planter}');
             GRANT CREATE ON SCHEMA public TO {planter};"
        ))
        .unwrap();
    let dsn = format!("{} user={planter}", db.dsn());
    let mut attacker = Client::connect(&dsn, postgres::NoTls).unwrap();
    let ext = if how == Attack::SchemaRenamer {
        attacker
            .batch_execute(&format!(
                "ALTER SCHEMA public RENAME TO public_old; CREATE SCHEMA public;
                 ALTER DATABASE {} SET search_path = public, pg_catalog, public_old;",
                db.name
            ))
            .unwrap();
        "public_old"
    } else {
        "public"
    };
    attacker
        .batch_execute(
            "CREATE TABLE public.hijack_log (who text, what text); GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
             CREATE SEQUENCE public.hijack_calls; GRANT USAGE, SELECT ON SEQUENCE public.hijack_calls TO PUBLIC;",
        )
        .unwrap();
    plant(&mut attacker, planter, "public");
    if how == Attack::SchemaRenamer {
        plant_look_alikes(&mut attacker);
    }
    plant_temp(&mut attacker);
    // The traps work: called directly, they record.
    attacker.query_one("SELECT 'x'::varchar = 'x'::text", &[]).unwrap();
    let armed: i64 = admin.query_one("SELECT count(*) FROM public.hijack_log", &[]).unwrap().get(0);
    assert!(armed > 0, "the planted operator did not run when called directly");
    admin.batch_execute("DELETE FROM public.hijack_log; ALTER SEQUENCE public.hijack_calls RESTART").unwrap();
    // A planted cast between built-in types is refused outright.
    let cast = attacker.batch_execute("CREATE CAST (varchar AS inet) WITH INOUT").unwrap_err();
    assert_eq!(sqlstate(&cast), "42501", "{cast:?}");

    // Every session from now on starts with the attacker's path (ALTER DATABASE ... SET), the
    // test's superuser included.
    let mut attacker = Client::connect(&dsn, postgres::NoTls).unwrap();
    let mut admin = db.connect();
    if how != Attack::SchemaRenamer {
        admin.batch_execute("SET search_path = public, pg_catalog").unwrap();
    }
    let mut observer = db.connect();
    observer.batch_execute("SET search_path = pg_catalog").unwrap();
    call_everything(&mut attacker, &mut admin, &mut observer, ext, &db.name);
    // A backend's exit record runs as it disconnects.
    let pid: i32 = attacker.query_one("SELECT pg_catalog.pg_backend_pid()", &[]).unwrap().get(0);
    drop(attacker);
    wait_for_exit(&mut observer, pid);

    assert_no_trap_ran(&mut observer, planter);
    drop(admin);
    drop(observer);
    superuser.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
}

/// Look-alikes of idgen's own objects in the new `public`, each a trap: its private tables and
/// views (as named before 0.4.0 and now), its functions, and `system_nodes` itself.
fn plant_look_alikes(client: &mut Client) {
    for relation in [
        "system_nodes",
        "nodes",
        "idgen_registry",
        "idgen_tombstones",
        "idgen_claim_guards",
        "idgen_service_members",
        "idgen_history",
        "idgen_history_purged",
        "idgen_events",
        "idgen_nodes",
        "idgen_visibility",
        "visible_events",
        "visible_nodes",
        "visible_metrics",
    ] {
        client
            .batch_execute(&format!(
                "CREATE VIEW public.{relation} AS SELECT * FROM pg_catalog.pg_class WHERE public.idgen_trap('view {relation}')"
            ))
            .unwrap();
    }
    for (function, args, result) in [
        ("idgen_holder_bound", "anyelement, interval, interval", "timestamptz"),
        ("holder_bound", "anyelement, interval, interval", "timestamptz"),
        ("idgen_node_state", "timestamptz, timestamptz, timestamptz, timestamptz", "text"),
        ("idgen_node_name", "inet, integer, integer", "text"),
        ("idgen_slot_pid", "inet, integer, integer", "integer"),
        ("idgen_next_id", "", "bigint"),
        ("idgen_decode", "bigint", "record"),
    ] {
        client
            .batch_execute(&format!(
                "CREATE FUNCTION public.{function}({args}) RETURNS {result} LANGUAGE plpgsql AS
                     $$ BEGIN PERFORM public.idgen_trap('function {function}'); RETURN NULL; END $$"
            ))
            .unwrap();
    }
    client
        .batch_execute(
            "CREATE FUNCTION public.idgen_policy() RETURNS TABLE (lease interval) LANGUAGE sql AS
                 $$ SELECT interval '1 hour' WHERE public.idgen_trap('function idgen_policy') $$",
        )
        .unwrap();
}

/// No planted object ran (the log, and the sequence that survives rollbacks), and the planter is no superuser.
fn assert_no_trap_ran(admin: &mut Client, planter: &str) {
    let ran: Vec<String> = admin
        .query("SELECT who OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) what FROM public.hijack_log", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let calls: bool = admin.query_one("SELECT is_called FROM public.hijack_calls", &[]).unwrap().get(0);
    assert!(ran.is_empty() && !calls, "planted objects ran inside idgen: {ran:?} (a trap ran: {calls})");
    let superuser_now: bool = admin
        .query_one("SELECT rolsuper FROM pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1", &[&planter])
        .unwrap()
        .get(0);
    assert!(!superuser_now, "{planter} became a superuser");
}
#[test]
fn objects_planted_before_create_extension_never_run_in_idgen() {
    // The database owner plants first; a superuser then installs idgen and reads every diagnostic:
    // views and SQL-standard bodies are bound at CREATE EXTENSION, so they must name pg_catalog's.
    let planter = "idgen_t_early_planter";
    let mut superuser = connect_to(&base_dsn(), "postgres");
    ensure_role(&mut superuser, planter);
    let db = TestDb::empty_on(&base_dsn(), "hijack_early");
    superuser.batch_execute(&format!("ALTER DATABASE {} OWNER TO {planter}", db.name)).unwrap();
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE public.hijack_log (who text, what text); GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
             CREATE SEQUENCE public.hijack_calls; GRANT USAGE, SELECT ON SEQUENCE public.hijack_calls TO PUBLIC;",
        )
        .unwrap();
    let mut attacker = Client::connect(&format!("{} user={planter}", db.dsn()), postgres::NoTls).unwrap();
    plant(&mut attacker, planter, "public");
    attacker.query_one("SELECT 'x'::varchar = 'x'::text", &[]).unwrap();
    admin.batch_execute("DELETE FROM public.hijack_log; ALTER SEQUENCE public.hijack_calls RESTART").unwrap();

    drop(attacker);
    // The superuser's session has the default search_path: public is on it.
    admin.batch_execute("CREATE EXTENSION idgen").unwrap();
    for k in 1..=3 {
        admin.query_one(&format!("SELECT * FROM idgen_claim('svc', '10.0.0.{k}', 1)"), &[]).unwrap();
    }
    admin.query_one("SELECT idgen_next_id('svc')", &[]).unwrap();
    admin.query_one("SELECT idgen_release('svc', 2::smallint, '10.0.0.3', 1, 1)", &[]).unwrap();
    admin
        .batch_execute(
            "SELECT set_config('search_path', 'pg_catalog', true);
             INSERT INTO public.system_nodes (service, machine_id, host, port, version, last_seen)
             SELECT 'svc', m, '192.0.2.1', 1000 + m, 1, now() - interval '9 days' FROM generate_series(4, 1023) m;",
        )
        .unwrap();
    admin.query_one("SELECT * FROM idgen_claim('svc', '10.0.0.9', 1)", &[]).unwrap();
    read_diagnostics(&mut admin, "public");
    admin.query_one("SELECT idgen_purge_history()", &[]).unwrap();

    assert_no_trap_ran(&mut admin, planter);
    drop(admin);
    superuser.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
}

#[test]
fn the_database_owner_cannot_hijack_any_entry_point() {
    attack("hijack_owner", "idgen_t_db_owner", Attack::DatabaseOwner);
}

#[test]
fn a_role_with_create_on_the_schema_cannot_hijack_any_entry_point() {
    attack("hijack_creator", "idgen_t_schema_creator", Attack::SchemaCreator);
}

#[test]
fn the_database_owner_cannot_hijack_idgen_by_renaming_its_schema() {
    attack("hijack_rename", "idgen_t_renamer", Attack::SchemaRenamer);
}

#[test]
fn a_schema_planted_as_idgen_private_makes_create_extension_fail() {
    let planter = "idgen_t_private_planter";
    let mut superuser = connect_to(&base_dsn(), "postgres");
    ensure_role(&mut superuser, planter);
    let db = TestDb::empty_on(&base_dsn(), "hijack_private");
    superuser.batch_execute(&format!("ALTER DATABASE {} OWNER TO {planter}", db.name)).unwrap();
    let mut attacker = Client::connect(&format!("{} user={planter}", db.dsn()), postgres::NoTls).unwrap();
    attacker.batch_execute("CREATE SCHEMA idgen_private").unwrap();
    let err = db.connect().batch_execute("CREATE EXTENSION idgen").unwrap_err();
    assert_eq!(sqlstate(&err), "42P06", "{err:?}");
    // Once installed, the schema is out of the database owner's reach.
    attacker.batch_execute("DROP SCHEMA idgen_private").unwrap();
    db.connect().batch_execute("CREATE EXTENSION idgen").unwrap();
    for sql in [
        "ALTER SCHEMA idgen_private RENAME TO elsewhere",
        "CREATE VIEW idgen_private.x AS SELECT 1",
        "DROP VIEW idgen_private.nodes",
        "ALTER SCHEMA idgen_private OWNER TO idgen_t_private_planter",
    ] {
        let err = attacker.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&err), "42501", "{sql}: {err:?}");
    }
    drop(attacker);
    superuser.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
}

// ---------------------------------------------------------------------------
// The lock space.

#[test]
fn advisory_locks_on_every_key_idgen_used_delay_no_claim() {
    let db = TestDb::create("advisory_dos");
    let mut holder = db.connect();
    // Every key the claims of 0.1.0 took (per identity and per new machine id), and a broad range.
    holder
        .batch_execute(
            "SELECT pg_advisory_lock(hashtext(concat_ws('/', 'idgen/node', 'svc', '10.0.0.1', NULL)), 1);
             SELECT pg_advisory_lock(hashtext('idgen/machine_id/svc'), m) FROM generate_series(0, 1023) m;
             SELECT pg_advisory_lock(hashtext('idgen/machine_id/' || current_database()), m) FROM generate_series(0, 1023) m;
             SELECT pg_advisory_lock(k) FROM generate_series(0, 4095) k;",
        )
        .unwrap();
    let mut claimant = db.connect();
    // Any wait on the holder would last until it disconnects: this timeout would end it with 55P03.
    claimant.batch_execute("SET lock_timeout = '5s'").unwrap();
    let c = claim(&mut claimant, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!((c.machine_id, c.outcome.as_str()), (0, "new"));
    claimant.query_one("SELECT idgen_next_id()", &[]).unwrap();
    // And the guards idgen uses instead cannot be taken by anyone but the extension owner.
    holder.batch_execute("CREATE ROLE idgen_t_guard_taker").ok();
    let err = holder
        .batch_execute("SET ROLE idgen_t_guard_taker; SELECT FROM idgen_private.idgen_claim_guards FOR UPDATE")
        .unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
}
