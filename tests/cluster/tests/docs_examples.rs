//! The SQL examples of README.md and docs/*.md print what they show.
//!
//! Every ```` ```sql ```` block of those pages carries a marker on the line before its fence (see
//! `tests/cluster/src/docs.rs`): `<!-- example -->` blocks are run here, the others by the test the
//! marker names. A block without a marker fails [`every_sql_block_of_the_docs_is_kept_true_by_a_test`].
//!
//! How an example runs: the examples of a page run in order, as a reader follows the page in one
//! psql session, in a database of the page's own that stands for `shop` (the word `shop` in the
//! SQL and in the output shown is replaced by that database's name), with idgen installed; a page
//! whose first example starts with `CREATE DATABASE shop;` starts from the cluster's `postgres`
//! database instead and creates it. Statements run one at a time, as psql sends them; `\c NAME`
//! connects to NAME; a query ending in `\gset [prefix]` prints nothing and sets a variable per
//! column of its one row, which `:name` and `:'name'` put into later statements (a node keeps the
//! version its claim returned: each registry draws its own). The output shown is the comment lines right after a statement, as psql prints
//! it: a table (header, separator, rows, and optionally `(N rows)`), and the messages
//! (`ERROR:  …`, `WARNING:  …`, `NOTICE:  …`, with their `DETAIL:` and `HINT:` if shown). A
//! statement that fails must show its `ERROR:`; every WARNING and NOTICE must be shown. In a
//! shown value, a placeholder stands for what differs from run to run: `<id>` (an ID), `<n>` (a
//! whole number), `<time>` (a time, as psql prints a timestamptz in UTC or as idgen writes one in a message), `<interval>`, `<text>` (any text). Every other
//! character must be what psql prints (cells compare trimmed).

use idgen_cluster_tests::docs::{
    doc_block, gset, interpolate, pages, repository_root, sql_blocks, statements, with_database, Page, SqlBlock,
};
use idgen_cluster_tests::*;
use postgres::error::DbError;
use postgres::{Client, Config, NoTls, SimpleQueryMessage};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The markers a block may carry; `example` blocks are run here.
const MARKERS: [&str; 4] = ["example", "recipe", "alter-system", "pg_regress"];

fn marker_kind(marker: &str) -> &str {
    marker.split_whitespace().next().unwrap_or("")
}

// ---- what a block shows

/// A message psql prints: `ERROR:  text`, with its DETAIL and HINT if the docs show them.
#[derive(Debug, Clone, Default)]
struct Message {
    severity: String,
    text: String,
    detail: Option<String>,
    hint: Option<String>,
}

/// A psql table: header and rows, cells trimmed, and the `(N rows)` line if shown.
#[derive(Debug, Clone)]
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    count: Option<usize>,
}

/// What the docs show under one statement.
#[derive(Debug, Default)]
struct Shown {
    messages: Vec<Message>,
    table: Option<Table>,
}

fn cells(line: &str) -> Vec<String> {
    line.split('|').map(|c| c.trim().to_owned()).collect()
}

fn is_separator(line: &str) -> bool {
    let line = line.trim();
    !line.is_empty() && line.chars().all(|c| c == '-' || c == '+') && line.contains("--")
}

fn row_count(line: &str) -> Option<usize> {
    let inner = line.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (n, word) = inner.split_once(' ')?;
    matches!(word, "row" | "rows").then(|| n.parse().ok())?
}

const SEVERITIES: [&str; 4] = ["ERROR", "WARNING", "NOTICE", "INFO"];

/// A statement's code (its lines up to the one that ends it) and what the comments after it show.
fn code_and_shown(statement: &str) -> (String, Shown) {
    let lines: Vec<&str> = statement.lines().collect();
    let mut end = 0;
    let mut in_body = false;
    for (i, line) in lines.iter().enumerate() {
        let code = if in_body { *line } else { line.split_once("--").map_or(*line, |(code, _)| code) };
        in_body ^= line.matches("$$").count() % 2 == 1;
        if !code.trim().is_empty() {
            end = i;
        }
        if !in_body && (code.trim_end().ends_with(';') || gset(code).is_some() || line.trim_start().starts_with('\\')) {
            break;
        }
    }
    let code = lines[..=end].join("\n");
    let comments: Vec<&str> = lines[end + 1..].iter().map_while(|l| l.trim_start().strip_prefix("--")).collect();
    let mut shown = Shown::default();
    let mut i = 0;
    while i < comments.len() {
        let line = comments[i].trim();
        if let Some((word, text)) = line.split_once(':').filter(|(w, _)| SEVERITIES.contains(w)) {
            shown.messages.push(Message {
                severity: word.to_owned(),
                text: text.trim().to_owned(),
                ..Message::default()
            });
            i += 1;
        } else if let Some(text) = line.strip_prefix("DETAIL:") {
            shown.messages.last_mut().expect("a DETAIL after its message").detail = Some(text.trim().to_owned());
            i += 1;
        } else if let Some(text) = line.strip_prefix("HINT:") {
            shown.messages.last_mut().expect("a HINT after its message").hint = Some(text.trim().to_owned());
            i += 1;
        } else if shown.table.is_none() && comments.get(i + 1).is_some_and(|s| is_separator(s)) {
            let header = cells(comments[i]);
            let mut rows = Vec::new();
            i += 2;
            while i < comments.len() && comments[i].contains('|') && !is_separator(comments[i]) {
                rows.push(cells(comments[i]));
                i += 1;
            }
            // A table of one column has no `|`: its rows run to the `(N rows)` line.
            if header.len() == 1 {
                while i < comments.len() && row_count(comments[i]).is_none() && !comments[i].trim().is_empty() {
                    rows.push(cells(comments[i]));
                    i += 1;
                }
            }
            let count = comments.get(i).and_then(|l| row_count(l));
            if count.is_some() {
                i += 1;
            }
            shown.table = Some(Table { header, rows, count });
        } else {
            break;
        }
    }
    (code, shown)
}

// ---- placeholders

/// The characters a placeholder stands for.
fn placeholder_class(name: &str) -> Option<fn(char) -> bool> {
    Some(match name {
        "id" => |c: char| c.is_ascii_digit(),
        "n" => |c: char| c.is_ascii_digit() || c == '-',
        "time" => |c: char| c.is_ascii_digit() || " :.+-TZ".contains(c),
        "interval" => |c: char| c.is_ascii_alphanumeric() || " :.-".contains(c),
        "text" => |_| true,
        _ => return None,
    })
}

enum Piece {
    Literal(String),
    Placeholder(fn(char) -> bool),
}

/// A shown value as literal text and placeholders; an unknown `<name>` is an error.
fn pattern(shown: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = shown;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').map(|c| open + c);
        let class = close.and_then(|c| placeholder_class(&rest[open + 1..c]));
        match (close, class) {
            (Some(close), Some(class)) => {
                pieces.push(Piece::Literal(rest[..open].to_owned()));
                pieces.push(Piece::Placeholder(class));
                rest = &rest[close + 1..];
            }
            (Some(close), None) if rest[open + 1..close].chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
                return Err(format!("unknown placeholder {} in {shown:?}", &rest[open..=close]));
            }
            _ => {
                pieces.push(Piece::Literal(rest[..=open].to_owned()));
                rest = &rest[open + 1..];
            }
        }
    }
    pieces.push(Piece::Literal(rest.to_owned()));
    Ok(pieces)
}

/// Whether `value` matches `pieces`: literals as written, each placeholder at least one character
/// of its class.
fn matches(pieces: &[Piece], value: &str) -> bool {
    match pieces.split_first() {
        None => value.is_empty(),
        Some((Piece::Literal(text), rest)) => value.strip_prefix(text.as_str()).is_some_and(|v| matches(rest, v)),
        Some((Piece::Placeholder(class), rest)) => {
            let run = value.char_indices().take_while(|(_, c)| class(*c)).map(|(i, c)| i + c.len_utf8());
            run.collect::<Vec<_>>().into_iter().rev().any(|end| matches(rest, &value[end..]))
        }
    }
}

fn matches_shown(shown: &str, value: &str) -> Result<bool, String> {
    Ok(matches(&pattern(shown)?, value))
}

// ---- running a page

/// A session as a reader's psql: statements bounded, times in UTC, notices kept.
struct Session {
    client: Client,
    notices: Arc<Mutex<Vec<DbError>>>,
}

impl Session {
    fn connect(database: &str) -> Session {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let dsn = format!(
            "{} dbname={database} connect_timeout=120 options='-c statement_timeout=300s -c TimeZone=UTC'",
            base_dsn()
        );
        let client = dsn
            .parse::<Config>()
            .unwrap()
            .notice_callback(move |n: DbError| sink.lock().unwrap().push(n))
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to {database}: {e}"));
        Session { client, notices }
    }
}

/// Runs the statement; its rows as text (NULL as psql prints it: empty) and the notices it raised.
fn run_statement(session: &mut Session, code: &str) -> (Result<Table, DbError>, Vec<DbError>) {
    session.notices.lock().unwrap().clear();
    let result = session.client.simple_query(code);
    let notices = std::mem::take(&mut *session.notices.lock().unwrap());
    let result = match result {
        Ok(messages) => {
            let mut header = Vec::new();
            let mut rows = Vec::new();
            for message in messages {
                match message {
                    SimpleQueryMessage::RowDescription(columns) => {
                        header = columns.iter().map(|c| c.name().to_owned()).collect();
                        rows.clear();
                    }
                    SimpleQueryMessage::Row(row) => {
                        rows.push((0..row.len()).map(|i| row.get(i).unwrap_or("").to_owned()).collect())
                    }
                    _ => {}
                }
            }
            let count = Some(rows.len());
            Ok(Table { header, rows, count })
        }
        Err(e) => Err(e.as_db_error().cloned().unwrap_or_else(|| panic!("{code}: {e}"))),
    };
    (result, notices)
}

fn compare_message(shown: &Message, got: &DbError, problems: &mut Vec<String>) {
    let mut check = |what: &str, shown: &Option<String>, got: Option<&str>| {
        if let Some(shown) = shown {
            match matches_shown(shown, got.unwrap_or("")) {
                Ok(true) => {}
                Ok(false) => problems.push(format!("its {what} is {got:?}, the docs show {shown:?}")),
                Err(e) => problems.push(e),
            }
        }
    };
    check("message", &Some(shown.text.clone()), Some(got.message()));
    check("DETAIL", &shown.detail, got.detail());
    check("HINT", &shown.hint, got.hint());
}

fn compare_table(shown: &Table, got: &Table, problems: &mut Vec<String>) {
    if shown.header != got.header {
        problems.push(format!("it prints the columns {:?}, the docs show {:?}", got.header, shown.header));
        return;
    }
    if shown.rows.len() != got.rows.len() || shown.count.is_some_and(|n| n != got.rows.len()) {
        problems.push(format!("it prints {} rows {:?}, the docs show {:?}", got.rows.len(), got.rows, shown.rows));
        return;
    }
    for (shown_row, row) in shown.rows.iter().zip(&got.rows) {
        for ((column, shown_cell), cell) in shown.header.iter().zip(shown_row).zip(row) {
            match matches_shown(shown_cell, cell) {
                Ok(true) => {}
                Ok(false) => {
                    problems.push(format!("column {column}: it prints {cell:?}, the docs show {shown_cell:?}"))
                }
                Err(e) => problems.push(e),
            }
        }
    }
}

/// Runs one statement of an example and compares what it printed with what the docs show.
fn check_statement(session: &mut Session, code: &str, shown: &Shown) -> Vec<String> {
    let mut problems = Vec::new();
    let (result, notices) = run_statement(session, code);
    let shown_notices: Vec<&Message> = shown.messages.iter().filter(|m| m.severity != "ERROR").collect();
    let shown_error = shown.messages.iter().find(|m| m.severity == "ERROR");
    if shown_notices.len() != notices.len() {
        let got: Vec<String> = notices.iter().map(|n| format!("{}:  {}", n.severity(), n.message())).collect();
        problems.push(format!("it raises {got:?}, the docs show {:?}", shown_notices));
    } else {
        for (shown, got) in shown_notices.iter().zip(&notices) {
            if shown.severity != got.severity() {
                problems.push(format!("it raises a {}, the docs show a {}", got.severity(), shown.severity));
            }
            compare_message(shown, got, &mut problems);
        }
    }
    match (result, shown_error) {
        (Ok(table), None) => {
            if let Some(shown) = &shown.table {
                compare_table(shown, &table, &mut problems);
            }
        }
        (Ok(_), Some(error)) => problems.push(format!("it succeeds, the docs show ERROR:  {}", error.text)),
        (Err(e), None) => problems.push(format!("it fails: {}: {} ({:?})", e.code().code(), e.message(), e.detail())),
        (Err(e), Some(error)) => compare_message(error, &e, &mut problems),
    }
    problems
}

/// The database a page's examples run in.
fn page_database(page: &Page) -> String {
    let stem = page.path.trim_end_matches(".md").rsplit('/').next().unwrap().to_ascii_lowercase();
    format!("docs_{stem}")
}

/// The roles a page's examples create (`CREATE ROLE name`): roles belong to the cluster, so the test
/// drops them before the page runs (a run that was killed left them) and after.
fn created_roles(examples: &[SqlBlock]) -> Vec<String> {
    let sql: String = examples.iter().map(|b| b.sql.as_str()).collect();
    sql.split("CREATE ROLE ").skip(1).filter_map(|rest| rest.split([' ', ';']).next()).map(str::to_owned).collect()
}

fn drop_roles(roles: &[String]) {
    let mut admin = connect_to(&base_dsn(), "postgres");
    for role in roles {
        admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).unwrap();
    }
}

/// Runs the examples of `page` in order; returns what differs from what it shows.
fn run_page(page: &Page, examples: &[SqlBlock]) -> Vec<String> {
    let roles = created_roles(examples);
    drop_roles(&roles);
    let starts_fresh = examples[0].sql.trim_start().starts_with("CREATE DATABASE shop;");
    let db = if starts_fresh {
        TestDb::empty_on(&base_dsn(), &page_database(page))
    } else {
        TestDb::create(&page_database(page))
    };
    let mut session = if starts_fresh {
        connect_to(&base_dsn(), "postgres").batch_execute(&format!("DROP DATABASE {}", db.name)).unwrap();
        Session::connect("postgres")
    } else {
        Session::connect(&db.name)
    };
    let mut problems = Vec::new();
    let mut variables = std::collections::BTreeMap::new();
    for block in examples {
        for statement in statements(&with_database(&block.sql, &db.name)) {
            let (code, shown) = code_and_shown(&statement);
            let code = interpolate(&code, &variables);
            if let Some((query, prefix)) = gset(&code) {
                // psql prints nothing: the one row's columns become variables.
                match run_statement(&mut session, query) {
                    (Ok(table), _) if table.rows.len() == 1 => {
                        for (column, value) in table.header.iter().zip(&table.rows[0]) {
                            variables.insert(format!("{prefix}{column}"), value.clone());
                        }
                    }
                    (result, _) => problems.push(format!("{}: {query} \\gset: {result:?}", block.place)),
                }
                continue;
            }
            if let Some(command) = code.trim().strip_prefix('\\') {
                match command.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["c", database] => session = Session::connect(database),
                    _ => problems.push(format!("{}: a meta-command the test does not run: {code}", block.place)),
                }
                continue;
            }
            for problem in check_statement(&mut session, &code, &shown) {
                problems.push(format!("{}: {}\n    {problem}", block.place, code.trim()));
            }
        }
    }
    drop(session);
    connect_to(&base_dsn(), "postgres")
        .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", db.name))
        .unwrap();
    drop_roles(&roles);
    problems
}

#[test]
fn every_example_of_the_docs_prints_what_it_shows() {
    let mut problems = Vec::new();
    let mut run = 0;
    for page in pages() {
        let examples: Vec<SqlBlock> =
            sql_blocks(&page).into_iter().filter(|b| b.marker.as_deref() == Some("example")).collect();
        if examples.is_empty() {
            continue;
        }
        run += examples.len();
        problems.extend(run_page(&page, &examples));
    }
    assert!(run >= 10, "only {run} examples found: are the markers read?");
    assert!(
        problems.is_empty(),
        "{} examples print other than the docs show:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_readme_runs_in_psql_as_pasted_from_a_fresh_cluster() {
    // The README's examples, pasted one after another into psql on a new cluster: no error, and no
    // message a reader would have to make sense of.
    let readme = pages().into_iter().next().unwrap();
    assert_eq!(readme.path, "README.md");
    let examples: Vec<SqlBlock> =
        sql_blocks(&readme).into_iter().filter(|b| b.marker.as_deref() == Some("example")).collect();
    assert!(examples[0].sql.starts_with("CREATE DATABASE shop;\n\\c shop\n"), "the quick start creates its database");
    let database = TestDb::empty_on(&base_dsn(), "docs_readme_psql").name;
    connect_to(&base_dsn(), "postgres").batch_execute(&format!("DROP DATABASE {database}")).unwrap();
    let script: String = examples.iter().map(|b| with_database(&b.sql, &database)).collect();
    let file = std::env::temp_dir().join(format!("idgen-docs-readme-{}.sql", std::process::id()));
    std::fs::write(&file, &script).unwrap();
    let output = output_within(
        Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &session_dsn(&base_dsn(), "postgres"), "-f"])
            .arg(&file)
            .env("PGOPTIONS", "-c statement_timeout=300s"),
        PATIENCE,
        "psql running the README's examples (is $PG_BIN on PATH?)",
    );
    std::fs::remove_file(&file).ok();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "psql: {}\n{stderr}\n{}", output.status, String::from_utf8_lossy(&output.stdout));
    assert_eq!(stderr, "", "the README's examples print no NOTICE, WARNING or error");
    connect_to(&base_dsn(), "postgres").batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)")).unwrap();
}

// ---- blocks kept true elsewhere

/// Text with comments removed and white space collapsed: how a statement is found in a file.
fn normalized(sql: &str) -> String {
    let code: Vec<&str> = sql.lines().map(|l| l.split_once("--").map_or(l, |(code, _)| code)).collect();
    code.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The names of a pg_regress case's expected outputs: `CASE.out` and its variants `CASE_N.out`.
fn regress_files(case: &str) -> Vec<String> {
    let dir = repository_root().join("tests/pg_regress/expected");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n == &format!("{case}.out") || (n.starts_with(&format!("{case}_")) && n.ends_with(".out")))
        .collect();
    files.sort();
    files
}

/// The texts of a pg_regress case's expected outputs.
fn regress_outputs(case: &str) -> Vec<String> {
    let dir = repository_root().join("tests/pg_regress/expected");
    regress_files(case).iter().map(|name| std::fs::read_to_string(dir.join(name)).unwrap()).collect()
}

/// The tables an expected pg_regress output prints after the statement `code`, in each of the
/// case's expected files that has the statement.
fn regress_tables(case: &str, code: &str) -> Vec<(String, Table)> {
    let dir = repository_root().join("tests/pg_regress/expected");
    let mut found = Vec::new();
    let last_line = code.lines().last().unwrap().trim();
    for name in regress_files(case) {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let start = i + 1 - code.lines().count().min(i + 1);
            if line.trim() != last_line || normalized(&lines[start..=i].join("\n")) != normalized(code) {
                continue;
            }
            // The psql table right after the echoed statement, as docs would show it.
            let mut table_text = String::from(code);
            for line in lines[i + 1..].iter().take_while(|l| !l.trim().is_empty()) {
                table_text.push_str(&format!("\n--{line}"));
            }
            if let (_, Shown { table: Some(table), .. }) = code_and_shown(&table_text) {
                found.push((name.clone(), table));
            }
        }
    }
    found
}

/// What is wrong with a block marked `<!-- pg_regress CASE -->`.
fn check_regress_block(block: &SqlBlock, case: &str) -> Vec<String> {
    let root = repository_root();
    let Ok(source) = std::fs::read_to_string(root.join(format!("tests/pg_regress/sql/{case}.sql"))) else {
        return vec![format!("{}: no pg_regress case {case}", block.place)];
    };
    let source = normalized(&source);
    let mut problems = Vec::new();
    for statement in statements(&block.sql) {
        let (code, shown) = code_and_shown(&statement);
        if !source.contains(&normalized(&code)) {
            problems.push(format!("{}: not a statement of tests/pg_regress/sql/{case}.sql: {code}", block.place));
            continue;
        }
        for message in &shown.messages {
            let lines = [
                Some(format!("{}:  {}", message.severity, message.text)),
                message.detail.as_ref().map(|d| format!("DETAIL:  {d}")),
                message.hint.as_ref().map(|h| format!("HINT:  {h}")),
            ];
            for line in lines.into_iter().flatten() {
                if !regress_outputs(case).iter().any(|out| out.lines().any(|l| l.trim_end() == line)) {
                    problems.push(format!("{}: {code}\n    no expected output of {case} prints {line:?}", block.place));
                }
            }
        }
        if let Some(shown) = &shown.table {
            let tables = regress_tables(case, &code);
            let agrees = |t: &Table| {
                let mut p = Vec::new();
                compare_table(shown, t, &mut p);
                p.is_empty()
            };
            if !tables.iter().any(|(_, t)| agrees(t)) {
                problems.push(format!(
                    "{}: {code}\n    shows {shown:?}; the expected outputs of {case} print {tables:?}",
                    block.place
                ));
            }
        }
    }
    problems
}

#[test]
fn every_sql_block_of_the_docs_is_kept_true_by_a_test() {
    let root = repository_root();
    let recipes = std::fs::read_to_string(root.join("tests/cluster/tests/recipes.rs")).unwrap();
    let mut problems = Vec::new();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for page in pages() {
        for block in sql_blocks(&page) {
            let Some(marker) = block.marker.clone() else {
                problems.push(format!(
                    "{}: a ```sql block with no marker: say which test keeps it true (<!-- example -->, \
                     <!-- recipe NAME -->, <!-- alter-system -->, <!-- pg_regress CASE -->)",
                    block.place
                ));
                continue;
            };
            let kind = marker_kind(&marker).to_owned();
            *kinds.entry(kind.clone()).or_default() += 1;
            let sets_settings = block.sql.contains("ALTER SYSTEM");
            if sets_settings != (kind == "alter-system") {
                problems.push(format!(
                    "{}: blocks with ALTER SYSTEM, and only those, are marked <!-- alter-system --> \
                     (tests/cluster/tests/settings.rs runs them on a cluster of their own)",
                    block.place
                ));
            }
            match kind.as_str() {
                "example" => {
                    for statement in statements(&block.sql) {
                        let (_, shown) = code_and_shown(&statement);
                        let values = shown.table.iter().flat_map(|t| t.rows.iter().flatten().chain(&t.header));
                        let texts =
                            shown.messages.iter().flat_map(|m| [Some(&m.text), m.detail.as_ref(), m.hint.as_ref()]);
                        for value in values.chain(texts.flatten()) {
                            if let Err(e) = pattern(value) {
                                problems.push(format!("{}: {e}", block.place));
                            }
                        }
                    }
                }
                "recipe" => {
                    if !recipes.contains(&format!("doc_block(\"{marker}\")")) {
                        problems.push(format!("{}: no test of recipes.rs reads <!-- {marker} -->", block.place));
                    }
                }
                "alter-system" => {}
                "pg_regress" => match marker.split_whitespace().collect::<Vec<_>>().as_slice() {
                    [_, case] => problems.extend(check_regress_block(&block, case)),
                    _ => problems.push(format!("{}: <!-- pg_regress CASE --> names one case", block.place)),
                },
                _ => problems.push(format!("{}: unknown marker <!-- {marker} -->: one of {MARKERS:?}", block.place)),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for kind in MARKERS {
        assert!(kinds.get(kind).is_some_and(|n| *n > 0), "no block is marked {kind}: {kinds:?}");
    }
    // The recipes named exist once (doc_block panics otherwise).
    for marker in recipes.split("doc_block(\"").skip(1).filter_map(|r| r.split_once('"')).map(|(m, _)| m) {
        doc_block(marker);
    }
}

// ---- the checker itself

#[test]
fn the_checker_tells_a_drifted_example_from_a_true_one() {
    // Shown output, parsed as the docs write it.
    let statement = "SELECT machine_id, outcome, not_before FROM idgen_claim('orders', '10.0.0.5', 8080);\n\
                     --  machine_id | outcome |   not_before\n\
                     -- ------------+---------+---------------\n\
                     --           0 | new     | <time>\n\
                     -- (1 row)\n\
                     -- A prose comment after the output.\n";
    let (code, shown) = code_and_shown(statement);
    assert_eq!(code, "SELECT machine_id, outcome, not_before FROM idgen_claim('orders', '10.0.0.5', 8080);");
    let table = shown.table.expect("a table");
    assert_eq!(table.header, ["machine_id", "outcome", "not_before"]);
    assert_eq!(table.rows, [["0", "new", "<time>"]]);
    assert_eq!(table.count, Some(1));
    let printed = |rows: &[[&str; 3]]| Table {
        header: table.header.clone(),
        rows: rows.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect(),
        count: Some(rows.len()),
    };
    let problems = |got: &Table| {
        let mut p = Vec::new();
        compare_table(&table, got, &mut p);
        p
    };
    assert!(problems(&printed(&[["0", "new", "2026-12-02 04:05:06.789+00"]])).is_empty());
    // Another value, another row count, a time where an ID stands: each one is drift.
    assert_eq!(problems(&printed(&[["1", "new", "2026-12-02 04:05:06.789+00"]])).len(), 1);
    assert_eq!(problems(&printed(&[["0", "reused", "2026-12-02 04:05:06+00"]])).len(), 1);
    assert_eq!(problems(&printed(&[["0", "new", "later"]])).len(), 1);
    assert_eq!(problems(&printed(&[])).len(), 1);
    // Placeholders: known ones only.
    assert!(matches_shown("backend slot <n> of 127.0.0.1:<n>", "backend slot 3 of 127.0.0.1:28855").unwrap());
    assert!(!matches_shown("backend slot <n> of 127.0.0.1:<n>", "backend slot 3 of 10.0.0.1:28855").unwrap());
    assert!(matches_shown("<id>", "253732921960038400").unwrap());
    assert!(!matches_shown("<id>", "").unwrap());
    assert!(matches_shown("a < b", "a < b").unwrap());
    assert!(matches_shown("<ids>", "1").is_err());
    // Messages.
    let (_, shown) = code_and_shown(
        "SET idgen.takeover_idle_1h = '2h';\n-- ERROR:  parameter \"idgen.takeover_idle_1h\" cannot be changed now\n",
    );
    assert_eq!(shown.messages.len(), 1);
    assert_eq!(shown.messages[0].severity, "ERROR");
    // psql's statement splitting: a $$ body is one statement, a meta-command is one of its own.
    let split = statements("\\c shop\nDO $$\nBEGIN\n  PERFORM 1;\nEND\n$$;\nSELECT 1;  -- one\n");
    assert_eq!(split.len(), 3, "{split:?}");
    // \gset ends a query and sets variables, which later statements use as psql does.
    let split = statements("SELECT 1 AS version \\gset node_\nSELECT :node_version::int, :'node_version';\n");
    assert_eq!(split.len(), 2, "{split:?}");
    assert_eq!(gset(split[0].trim()), Some(("SELECT 1 AS version ", "node_")));
    assert_eq!(gset("SELECT 1;"), None);
    let variables = [("node_version".to_owned(), "4'2".to_owned())].into_iter().collect();
    assert_eq!(
        interpolate("SELECT :node_version::int, :'node_version', :unset, a::text;", &variables),
        "SELECT 4'2::int, '4''2', :unset, a::text;"
    );
}
