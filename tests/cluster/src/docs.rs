//! The SQL examples of README.md and docs/*.md, as the tests that keep them true read them.
//!
//! Every ```` ```sql ```` block of those pages has a marker, an HTML comment on the line right before
//! its fence, that names what keeps it true:
//!
//! - `<!-- example -->`: `tests/cluster/tests/docs_examples.rs` runs it and compares what it prints
//!   with the output the block shows in its comments;
//! - `<!-- recipe NAME -->`: a test of `tests/cluster/tests/recipes.rs` runs it (it reads the block
//!   by that marker) and checks what the recipe promises;
//! - `<!-- alter-system -->`: `tests/cluster/tests/settings.rs` runs it as written in a fresh
//!   session (every block that sets idgen's settings with `ALTER SYSTEM`);
//! - `<!-- pg_regress CASE -->`: its statements are taken from `tests/pg_regress/sql/CASE.sql`, and
//!   the output it shows from the case's expected output.
//!
//! `docs_examples.rs` fails on a block without a marker, and on a marker none of these know.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One page of documentation: README.md or a page of docs/, by its path from the root.
pub struct Page {
    pub path: String,
    pub text: String,
}

/// README.md, then docs/*.md in name order.
pub fn pages() -> Vec<Page> {
    let root = repository_root();
    let mut paths = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            Page { path, text }
        })
        .collect()
}

/// A ```` ```sql ```` block of a page.
#[derive(Clone, Debug)]
pub struct SqlBlock {
    /// The page's path and the line of the fence, for messages: `docs/operations.md:42`.
    pub place: String,
    /// The marker's text without `<!--` and `-->` (`example`, `recipe busy-install`, ...), or
    /// `None` when the line before the fence is no HTML comment.
    pub marker: Option<String>,
    /// The block's text, without its fences.
    pub sql: String,
}

/// The ```` ```sql ```` blocks of `page`, in order.
pub fn sql_blocks(page: &Page) -> Vec<SqlBlock> {
    let lines: Vec<&str> = page.text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - fence.len();
        let is_sql = fence == "```sql";
        let start = i;
        i += 1;
        let mut body = String::new();
        while i < lines.len() && lines[i].trim() != "```" {
            body.push_str(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
            body.push('\n');
            i += 1;
        }
        assert!(i < lines.len(), "{}:{}: a fence that is never closed", page.path, start + 1);
        i += 1;
        if !is_sql {
            continue;
        }
        let marker = start
            .checked_sub(1)
            .map(|j| lines[j].trim())
            .and_then(|l| l.strip_prefix("<!--"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|m| m.trim().to_owned());
        blocks.push(SqlBlock { place: format!("{}:{}", page.path, start + 1), marker, sql: body });
    }
    blocks
}

/// The SQL of the one block of README.md and docs/ whose marker is `marker`.
pub fn doc_block(marker: &str) -> String {
    let found: Vec<SqlBlock> =
        pages().iter().flat_map(sql_blocks).filter(|b| b.marker.as_deref() == Some(marker)).collect();
    match found.as_slice() {
        [block] => block.sql.clone(),
        [] => panic!("no ```sql block of README.md or docs/*.md is marked <!-- {marker} -->"),
        _ => panic!(
            "several blocks are marked <!-- {marker} -->: {:?}",
            found.iter().map(|b| &b.place).collect::<Vec<_>>()
        ),
    }
}

/// `text` with the docs' database name, `shop` (as a whole word), replaced by `database`.
pub fn with_database(text: &str, database: &str) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("shop") {
        let before = rest[..at].chars().next_back();
        let after = rest[at + 4..].chars().next();
        out.push_str(&rest[..at]);
        out.push_str(if before.is_some_and(is_word) || after.is_some_and(is_word) { "shop" } else { database });
        rest = &rest[at + 4..];
    }
    out.push_str(rest);
    out
}

/// The statements of a block, one by one, as psql sends them: a statement ends with a line ending
/// in `;` or in `\gset [prefix]` (comments aside) outside a `$$` body; a line starting with `\` is a
/// meta-command of its own. Each statement comes with the comment lines that follow it up to the
/// next statement.
pub fn statements(block: &str) -> Vec<String> {
    let (mut statements, mut current, mut in_body) = (Vec::new(), String::new(), false);
    for line in block.lines() {
        if !in_body && line.trim_start().starts_with('\\') {
            if !current.trim().is_empty() && !is_comment_only(&current) {
                panic!("a meta-command inside a statement: {current:?}");
            }
            attach_comments(&mut statements, &mut current);
            statements.push(format!("{line}\n"));
            continue;
        }
        let code = if in_body { line } else { line.split_once("--").map_or(line, |(code, _)| code) };
        if !in_body && code.trim().is_empty() {
            // A comment or an empty line: it belongs to the statement before it.
            current.push_str(line);
            current.push('\n');
            continue;
        }
        if !current.is_empty() && is_comment_only(&current) {
            attach_comments(&mut statements, &mut current);
        }
        current.push_str(line);
        current.push('\n');
        in_body ^= line.matches("$$").count() % 2 == 1;
        if !in_body && (code.trim_end().ends_with(';') || gset(code).is_some()) {
            statements.push(std::mem::take(&mut current));
        }
    }
    assert!(is_comment_only(&current), "the block ends inside a statement: {current:?}");
    attach_comments(&mut statements, &mut current);
    statements
}

/// A statement line's query and the prefix of its `\gset` (psql: the row's columns become
/// variables `prefix` + column name), or None when it does not end with `\gset`.
pub fn gset(code: &str) -> Option<(&str, &str)> {
    let (query, meta) = code.trim_end().rsplit_once('\\')?;
    let mut words = meta.split_whitespace();
    (words.next() == Some("gset")).then(|| (query, words.next().unwrap_or("")))
}

/// `sql` with psql's variables put in: `:'name'` as a quoted literal and `:name` as it is, for the
/// variables set (`::` casts and names not set stay as they are, as in psql).
pub fn interpolate(sql: &str, variables: &std::collections::BTreeMap<String, String>) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut out, mut rest) = (String::new(), sql);
    while let Some(at) = rest.find(':') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(cast) = after.strip_prefix(':') {
            out.push_str("::");
            rest = cast;
            continue;
        }
        let quoted = after.starts_with('\'');
        let name_start = if quoted { &after[1..] } else { after };
        let name: String = name_start.chars().take_while(|c| is_word(*c)).collect();
        let closed = !quoted || name_start[name.len()..].starts_with('\'');
        match variables.get(&name).filter(|_| !name.is_empty() && closed) {
            Some(value) if quoted => {
                out.push_str(&format!("'{}'", value.replace('\'', "''")));
                rest = &name_start[name.len() + 1..];
            }
            Some(value) => {
                out.push_str(value);
                rest = &name_start[name.len()..];
            }
            None => {
                out.push(':');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_comment_only(text: &str) -> bool {
    text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with("--"))
}

/// Comment lines after a statement belong to it (they show what it printed).
fn attach_comments(statements: &mut [String], comments: &mut String) {
    if let Some(last) = statements.last_mut() {
        last.push_str(comments);
    }
    comments.clear();
}
