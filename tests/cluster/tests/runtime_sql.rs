//! The SQL idgen runs, as a reviewer reads it: every statement is written once, whole, in
//! src/statements.rs; its rendering is checked in (docs/runtime_statements.sql); each statement
//! takes exactly the parameters it lists, and a call that gives it others does not compile; and no
//! other code under src/ runs SQL of its own.
//! (Pure checks: no database needed.)

use idgen_cluster_tests::rust_files;
use std::path::{Path, PathBuf};

#[path = "../../../src/statements.rs"]
#[allow(dead_code)]
mod statements;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const RENDERING: &str = "docs/runtime_statements.sql";

#[test]
fn the_checked_in_rendering_shows_every_statement_as_it_runs() {
    let path = repository().join(RENDERING);
    let rendered = statements::render();
    if std::env::var_os("IDGEN_BLESS").is_some() {
        std::fs::write(&path, &rendered).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != rendered {
        let first = checked_in.lines().zip(rendered.lines()).position(|(a, b)| a != b);
        panic!(
            "{RENDERING} is not the rendering of src/statements.rs (first difference at line {}): \
             run scripts/render_statements.sh and review the diff",
            first.map_or_else(|| "the end".to_owned(), |i| (i + 1).to_string())
        );
    }
    for statement in statements::ALL {
        assert!(rendered.contains(&statement.trimmed()), "{} is missing from the rendering", statement.name);
    }
}

/// The numbers of the `$n` placeholders of `text` (outside quoted literals), in order of appearance.
fn placeholders(text: &str) -> Vec<usize> {
    let (mut found, mut in_quote, mut chars) = (Vec::new(), false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '\'' => in_quote = !in_quote,
            '$' if !in_quote => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if let Ok(n) = digits.parse() {
                    found.push(n);
                }
            }
            _ => {}
        }
    }
    found
}

#[test]
fn each_statement_takes_exactly_the_parameters_it_lists() {
    assert_eq!(placeholders("SELECT $1, '$9', $10 WHERE x = $2"), vec![1, 10, 2], "the scanner itself");
    let mut problems = Vec::new();
    for statement in statements::ALL {
        let used = placeholders(statement.text);
        for n in 1..=statement.params.len() {
            if !used.contains(&n) {
                problems.push(format!(
                    "{}: ${n} ({}) is listed but unused",
                    statement.name,
                    statement.params[n - 1].name
                ));
            }
        }
        for n in used.iter().filter(|n| **n == 0 || **n > statement.params.len()) {
            problems.push(format!("{}: ${n} is used but not listed", statement.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn statement_names_are_unique_and_every_parameter_type_is_one_the_runner_binds() {
    let mut names: Vec<&str> = statements::ALL.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), statements::ALL.len(), "two statements share a name");
    // src/spi.rs prepares each statement with the type oids declared: every declared type must be
    // one it knows (an unknown one would fail only when the statement first runs).
    let runner = std::fs::read_to_string(repository().join("src/spi.rs")).expect("src/spi.rs");
    for statement in statements::ALL {
        for param in statement.params {
            assert!(
                runner.contains(&format!("\"{}\" => pg_sys::", param.sql_type)),
                "{}: parameter {} is of type {}, which src/spi.rs does not bind",
                statement.name,
                param.name,
                param.sql_type
            );
        }
    }
}

/// What in `source` looks like SQL of its own: a string literal that starts with an SQL
/// command word, or a call that runs SQL text (which only src/spi.rs may make).
fn sql_of_its_own(source: &str) -> Vec<String> {
    const COMMANDS: [&str; 22] = [
        "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "MERGE", "LOCK", "TRUNCATE", "GRANT", "REVOKE", "CREATE",
        "ALTER", "DROP", "SET", "RESET", "NOTIFY", "LISTEN", "COPY", "CALL", "DO", "PREPARE", "EXECUTE",
    ];
    const RUNS_SQL: [&str; 10] = [
        ".update(",
        ".select(",
        "Spi::run",
        "Spi::get_",
        "Spi::explain",
        "SPI_exec",
        "SPI_prepare",
        "SPI_cursor",
        "SPI_execute",
        "run_with_args",
    ];
    let mut found: Vec<String> = RUNS_SQL.iter().filter(|call| source.contains(*call)).map(|c| c.to_string()).collect();
    for (i, _) in source.match_indices('"') {
        let rest = source[i + 1..].trim_start_matches([' ', '\n']);
        for command in COMMANDS {
            if rest.starts_with(command) && rest[command.len()..].starts_with([' ', '\n', ';']) {
                found.push(format!("a string starting {command}"));
            }
        }
    }
    found
}

#[test]
fn no_code_under_src_runs_sql_of_its_own() {
    assert!(!sql_of_its_own(r#"let q = "SELECT 1";"#).is_empty(), "the scanner misses a literal");
    assert!(!sql_of_its_own("client.update(text, None, &[])").is_empty(), "the scanner misses a call");
    assert!(sql_of_its_own(r#"format!("{function}: could not SELECT")"#).is_empty(), "the scanner sees prose");
    let src = repository().join("src");
    let files = rust_files(&src);
    let mut problems = Vec::new();
    for file in &files {
        let name = file.to_string_lossy();
        // The statements themselves; the one runner; the #[pg_test]s, which run only in the test
        // build (their SQL is a client's, as a user would type it).
        if ["statements.rs", "spi.rs", "tests.rs"].contains(&name.as_ref()) {
            continue;
        }
        let source = std::fs::read_to_string(src.join(file)).unwrap();
        problems.extend(sql_of_its_own(&source).into_iter().map(|what| format!("src/{name}: {what}")));
    }
    assert!(files.len() >= 25, "only {} source files found under {}", files.len(), src.display());
    assert!(problems.is_empty(), "SQL outside src/statements.rs (move it there):\n{}", problems.join("\n"));
}

/// The placeholder of `statement`'s parameter `name`.
fn placeholder(statement: &statements::Statement, name: &str) -> String {
    let at = statement.params.iter().position(|p| p.name == name);
    format!("${}", at.unwrap_or_else(|| panic!("{} takes no parameter {name}", statement.name)) + 1)
}

#[test]
fn every_grant_is_written_one_way() {
    // A grant is written whole in each statement that makes one (claims, heartbeats, renewals):
    // seen at the write, its lease running `lease` from it, no take-back before `takeback_age`
    // from it. A heartbeat keeps the grant it replaces when that one is longer (its answer may
    // never reach the node, which then holds the grant before). This test holds those copies to
    // that one rule.
    let mut grants = 0;
    for statement in statements::ALL {
        let text = statement.trimmed();
        if !text.contains("lease_until =") && !text.contains("lease_until, takeover_at") {
            continue;
        }
        grants += 1;
        let (lease, takeback) = (placeholder(statement, "lease"), placeholder(statement, "takeback_age"));
        // The write's moment: the server's clock read in the statement (`t.now`), or, for a heartbeat,
        // read by the caller just before and passed in (`now`), which spares the statement a join.
        let given_now = statement.params.iter().any(|p| p.name == "now");
        let now = if given_now { placeholder(statement, "now") } else { "t.now".to_owned() };
        if text.contains("INSERT INTO idgen_private.nodes") {
            // The insert's values, in its column order: last_seen, lease_until, takeover_at.
            let written = format!("t.now,\n        t.now OPERATOR(pg_catalog.+) {lease},\n        t.now OPERATOR(pg_catalog.+) {takeback},");
            assert!(text.contains(&written), "{} grants otherwise than `{written}`:\n{text}", statement.name);
            continue;
        }
        let kept = |column: &str, from_now: &str| {
            if statement.name.starts_with("HEARTBEAT") {
                format!("{column} = GREATEST({column}, {now} OPERATOR(pg_catalog.+) {from_now}),")
            } else {
                format!("{column} = {now} OPERATOR(pg_catalog.+) {from_now},")
            }
        };
        for written in [format!("last_seen = {now},"), kept("lease_until", &lease), kept("takeover_at", &takeback)] {
            assert!(text.contains(&written), "{} grants otherwise than `{written}`:\n{text}", statement.name);
        }
        assert!(
            given_now || text.contains("(SELECT pg_catalog.clock_timestamp() AS now) t"),
            "{}: t.now is the write's moment",
            statement.name
        );
    }
    assert_eq!(
        grants, 8,
        "the statements that grant: the two take-overs, the two reuses, the insert, the two heartbeats (with and \
         without reports), the renewal"
    );
}

/// Compiles `call` (a `main` body) against src/statements.rs with rustc: its errors, or `None`
/// when it compiles.
fn compile_errors(call: &str) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("idgen-typed-statements-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let source = dir.join("call.rs");
    let statements = repository().join("src/statements.rs").canonicalize().expect("src/statements.rs");
    let program = format!(
        "#[path = {statements:?}]\n#[allow(dead_code)]\nmod statements;\n\
         #[allow(unused_variables)]\nfn main() {{\n    use statements::value::Interval;\n    {call}\n}}\n"
    );
    std::fs::write(&source, program).expect("the call's source");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = std::process::Command::new(rustc)
        .args(["--edition", "2021", "--crate-type", "bin", "--emit", "metadata", "--out-dir"])
        .arg(&dir)
        .arg(&source)
        .output()
        .expect("rustc runs");
    let _ = std::fs::remove_dir_all(&dir);
    (!output.status.success()).then(|| String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_statement_given_a_missing_extra_or_mistyped_argument_does_not_compile() {
    // Each statement's arguments are a struct of its parameters, typed by their SQL types
    // (src/statements.rs, `statements!`): src/spi.rs runs nothing else.
    let right = "let args = statements::ROW_BOUND { service: \"orders\".into(), machine_id: 7, \
                 lease: Interval::seconds(60), takeback_age: Interval::seconds(3600) };";
    assert_eq!(compile_errors(right), None, "the arguments as declared do not compile");
    let wrong = [
        // takeback_age left out
        (
            "a missing argument",
            "statements::ROW_BOUND { service: \"orders\".into(), machine_id: 7, \
          lease: Interval::seconds(60) };",
            "E0063",
        ),
        // an integer where an interval is declared: lease and machine_id swapped
        (
            "a swapped argument",
            "statements::ROW_BOUND { service: \"orders\".into(), machine_id: Interval::seconds(60), \
          lease: 7, takeback_age: Interval::seconds(3600) };",
            "E0308",
        ),
        (
            "an argument the statement does not take",
            "statements::CURRENT_ROW { service: \"orders\".into(), \
          machine_id: 7, lease: Interval::seconds(60) };",
            "E0560",
        ),
        ("NULL where the statement takes none", "statements::CURRENT_ROW { service: None, machine_id: 7 };", "E0308"),
    ];
    for (what, call, code) in wrong {
        let errors = compile_errors(call).unwrap_or_else(|| panic!("{what} compiles: {call}"));
        assert!(errors.contains(code), "{what} fails otherwise than with {code}:\n{errors}");
    }
}
