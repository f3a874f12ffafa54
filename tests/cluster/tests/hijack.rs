//! No role below superuser can make idgen run its objects with the extension
//! owner's rights, or stop claims by holding locks.
//!
//! - A meta-test reads the SQL that runs with the owner's rights and fails on
//!   any operator or function not resolved in pg_catalog by name (the rule at
//!   the top of src/registry/store.rs).
//! - An attack suite: the database owner (who owns `public` since PostgreSQL 15)
//!   and a role with CREATE on the extension's schema plant look-alikes of every
//!   operator and function the SQL uses, types, casts, and decoys in `pg_temp`,
//!   then call every idgen entry point. Nothing planted may run.
//! - Advisory locks held on every key idgen ever used delay no claim.

use idgen_cluster_tests::*;
use postgres::Client;
use std::path::Path;

// ---------------------------------------------------------------------------
// Meta-test: the privileged SQL qualifies every operator and function.

/// Every statement idgen runs with the extension owner's rights (src/registry/sql.rs, plain Rust).
#[path = "../../../src/registry/sql.rs"]
#[allow(dead_code)]
mod sql;

/// SQL words written like function calls that are grammar, not functions looked up on the path,
/// and the extension's own relations (an INSERT's column list) and functions (`idgen_*`).
const NOT_LOOKED_UP: [&str; 21] = [
    "EXISTS",
    "COALESCE",
    "GREATEST",
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
    for allowed in ["::", ".*", "(*)"] {
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
            let allowed = word.starts_with("pg_catalog.")
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
    let problems: Vec<String> = sql::ALL
        .iter()
        .flat_map(|(name, statement)| unqualified(statement).into_iter().map(move |p| format!("{name}: {p}")))
        .collect();
    assert!(sql::ALL.len() >= 17, "statements went missing from sql::ALL");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_edge_runs_no_sql_of_its_own() {
    // Statements outside src/registry/sql.rs would escape the check above.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in [
        "src/registry/store.rs",
        "src/registry/claim.rs",
        "src/registry/api.rs",
        "src/privilege.rs",
        "src/durability.rs",
        "src/diagnostics/alerts.rs",
        "src/diagnostics/history.rs",
        "src/diagnostics/recorder.rs",
        "src/diagnostics/explain.rs",
        "src/diagnostics/nodes.rs",
        "src/backend.rs",
        "src/ids.rs",
    ] {
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        for keyword in ["\"SELECT ", "\"UPDATE ", "\"INSERT ", "\"WITH ", "\"DELETE "] {
            assert!(!source.contains(keyword), "{file} holds SQL ({keyword}...): move it to src/registry/sql.rs");
        }
    }
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
             CREATE FUNCTION pg_temp.idgen_holder_bound(system_nodes, interval, interval) RETURNS timestamptz LANGUAGE sql AS
                 $$ SELECT CASE WHEN public.idgen_trap('pg_temp.idgen_holder_bound') THEN pg_catalog.now() END $$",
        )
        .unwrap();
}

/// Calls every idgen entry point as the connected (attacking) role, through every path of the
/// claim, heartbeat, release, lease check and alert SQL.
fn call_everything(attacker: &mut Client, admin: &mut Client, service: &str) {
    // Services: new, reuse, heartbeat (with and without a watermark), release, released, idle_1h
    // (its alert NOTIFYs), and exhaustion.
    attacker.query_one("SELECT * FROM idgen_claim('svc', '10.0.0.1', 1)", &[]).unwrap();
    attacker.query_one("SELECT * FROM idgen_claim('svc', '10.0.0.1', 1)", &[]).unwrap();
    attacker.query_one("SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, 2)", &[]).unwrap();
    attacker.query_one("SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, 2, now())", &[]).unwrap();
    attacker.query_one("SELECT idgen_release('svc', 0::smallint, '10.0.0.1', 1, 2, now())", &[]).unwrap();
    let stale = attacker.query_one("SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, 2)", &[]).unwrap_err();
    assert_eq!(sqlstate(&stale), "55000");
    admin
        .batch_execute(
            "INSERT INTO public.system_nodes (service, machine_id, host, port, version) \
                 SELECT 'svc', m, ('192.0.2.' || (m % 250))::inet, 10000 + m, 1 FROM generate_series(1, 1023) m;
             UPDATE public.system_nodes SET released_at = now() - interval '2 hours', issued_until = now() - interval '2 hours' \
                 WHERE service = 'svc' AND machine_id = 0;
             UPDATE public.system_nodes SET last_seen = now() - interval '2 hours' WHERE service = 'svc' AND machine_id = 5",
        )
        .unwrap();
    let outcomes: Vec<String> = (2..4)
        .map(|k| {
            attacker.query_one(&format!("SELECT outcome FROM idgen_claim('svc', '10.0.0.{k}', 1)"), &[]).unwrap().get(0)
        })
        .collect();
    assert_eq!(outcomes, ["released", "idle_1h"]);
    let full = attacker.query_one("SELECT * FROM idgen_claim('svc', '10.0.0.9', 1)", &[]).unwrap_err();
    assert_eq!(sqlstate(&full), "53000");

    // Backends: the column default, a lease check once the window has passed, a lost lease.
    attacker.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), n int)").unwrap();
    attacker.batch_execute("INSERT INTO t (n) SELECT generate_series(1, 100)").unwrap();
    // (Waited for on the admin's connection: the attacker's has traps planted on its path.)
    let until = backend_watermark(attacker, service);
    wait_until_server_clock_passes(admin, &until);
    attacker.batch_execute("INSERT INTO t (n) VALUES (101)").unwrap();
    admin.execute("UPDATE public.system_nodes SET version = version + 1 WHERE service = $1", &[&service]).unwrap();
    let until = backend_watermark(attacker, service);
    wait_until_server_clock_passes(admin, &until);
    attacker.batch_execute("INSERT INTO t (n) VALUES (102)").unwrap(); // lost: warns, claims anew
    attacker.batch_execute("BEGIN READ ONLY; SELECT idgen_next_id(); ROLLBACK").ok();
    attacker.batch_execute("ROLLBACK").ok();
    attacker.query_one("SELECT idgen_next_id('another')", &[]).unwrap();
    attacker
        .query_one(
            "SELECT d.*, idgen_min_id(d.ts), idgen_max_id(d.ts) FROM t, idgen_decode(t.id) d ORDER BY t.id LIMIT 1",
            &[],
        )
        .unwrap();
    attacker.query("SELECT * FROM idgen_backend_leases()", &[]).unwrap();
    read_diagnostics(attacker);
}

/// Every diagnostic view and function, read as the connected role.
fn read_diagnostics(client: &mut Client) {
    for view in
        ["idgen_nodes", "idgen_capacity", "idgen_events", "idgen_metrics", "idgen_visibility", "idgen_registry_status"]
    {
        client.query(&format!("SELECT * FROM public.{view}"), &[]).unwrap();
    }
    client.query("SELECT * FROM public.idgen_health()", &[]).unwrap();
    client.query("SELECT * FROM public.idgen_policy()", &[]).unwrap();
    let ids: Vec<i64> = client
        .query("SELECT public.idgen_min_id(at) FROM public.idgen_events", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for id in ids {
        client.query("SELECT * FROM public.idgen_explain($1)", &[&id]).ok();
    }
}

fn attack(name: &str, planter: &str, grant_create: bool) {
    let mut superuser = Client::connect(&format!("{} dbname=postgres", base_dsn()), postgres::NoTls).unwrap();
    ensure_role(&mut superuser, planter);
    let db = TestDb::empty_on(&base_dsn(), name);
    superuser
        .batch_execute(&format!(
            "ALTER DATABASE {} OWNER TO {}",
            db.name,
            if grant_create { "postgres" } else { planter }
        ))
        .unwrap();
    let mut admin = db.connect();
    // The test's own superuser statements must not fall for the traps either: nothing writable on its path.
    admin
        .batch_execute(&format!(
            "SET search_path = pg_catalog;
             CREATE EXTENSION idgen SCHEMA public;
             CREATE TABLE public.hijack_log (who text, what text);
             GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
             CREATE SEQUENCE public.hijack_calls;
             GRANT USAGE, SELECT ON SEQUENCE public.hijack_calls TO PUBLIC;
             SELECT public.idgen_grant_service('svc', '{planter}'), public.idgen_grant_service('another', '{planter}');
             GRANT CREATE ON SCHEMA public TO {planter};"
        ))
        .unwrap();
    let dsn = format!("{} user={planter}", db.dsn());
    let mut attacker = Client::connect(&dsn, postgres::NoTls).unwrap();
    plant(&mut attacker, planter, "public");
    plant_temp(&mut attacker);
    // The traps work: called directly, they record.
    attacker.query_one("SELECT 'x'::varchar = 'x'::text", &[]).unwrap();
    let armed: i64 = admin.query_one("SELECT count(*) FROM public.hijack_log", &[]).unwrap().get(0);
    assert!(armed > 0, "the planted operator did not run when called directly");
    admin.batch_execute("DELETE FROM public.hijack_log; ALTER SEQUENCE public.hijack_calls RESTART").unwrap();
    // A planted cast between built-in types is refused outright.
    let cast = attacker.batch_execute("CREATE CAST (varchar AS inet) WITH INOUT").unwrap_err();
    assert_eq!(sqlstate(&cast), "42501", "{cast:?}");

    call_everything(&mut attacker, &mut admin, &db.name);

    assert_no_trap_ran(&mut admin, planter);
    drop(attacker);
    drop(admin);
    superuser.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
}

/// No planted object ran (the log, and the sequence that survives rollbacks), and the planter is no superuser.
fn assert_no_trap_ran(admin: &mut Client, planter: &str) {
    let ran: Vec<String> = admin
        .query("SELECT who || ': ' || what FROM public.hijack_log", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let calls: bool = admin.query_one("SELECT is_called FROM public.hijack_calls", &[]).unwrap().get(0);
    assert!(ran.is_empty() && !calls, "planted objects ran inside idgen: {ran:?} (a trap ran: {calls})");
    let superuser_now: bool =
        admin.query_one("SELECT rolsuper FROM pg_roles WHERE rolname = $1", &[&planter]).unwrap().get(0);
    assert!(!superuser_now, "{planter} became a superuser");
}

#[test]
fn objects_planted_before_create_extension_never_run_in_idgen() {
    // The database owner plants first; a superuser then installs idgen and reads every diagnostic:
    // views and SQL-standard bodies are bound at CREATE EXTENSION, so they must name pg_catalog's.
    let planter = "idgen_t_early_planter";
    let mut superuser = Client::connect(&format!("{} dbname=postgres", base_dsn()), postgres::NoTls).unwrap();
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

    // (With no other session connected, CREATE EXTENSION sets no floor that would hold the claims back.)
    drop(attacker);
    while admin
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", &[&planter])
        .unwrap()
        .get::<_, i64>(0)
        > 0
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
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
    read_diagnostics(&mut admin);
    admin.query_one("SELECT idgen_purge_history()", &[]).unwrap();

    assert_no_trap_ran(&mut admin, planter);
    drop(admin);
    superuser.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
}

#[test]
fn the_database_owner_cannot_hijack_any_entry_point() {
    attack("hijack_owner", "idgen_t_db_owner", false);
}

#[test]
fn a_role_with_create_on_the_schema_cannot_hijack_any_entry_point() {
    attack("hijack_creator", "idgen_t_schema_creator", true);
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
    let err =
        holder.batch_execute("SET ROLE idgen_t_guard_taker; SELECT FROM idgen_claim_guards FOR UPDATE").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
}
