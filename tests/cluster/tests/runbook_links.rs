//! What idgen tells a person to read exists: every `docs/<file>.md#<section>` that an error, a
//! hint, an `idgen_health()` action or a comment of the SQL objects names is a heading of that
//! file, and none names a section by title alone ("README: freeing an id by hand" outlived the
//! section it named). Reads the sources; needs no cluster.

use idgen_cluster_tests::rust_files;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The texts that reach a user: the SQL objects (not the released update scripts, which do not
/// change) and the Rust of the extension, the core and the client.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("sql"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .filter(|path| !path.file_name().unwrap().to_string_lossy().starts_with("idgen--"))
        .collect();
    for dir in ["src", "core/src", "client/src"] {
        files.extend(rust_files(&root.join(dir)).into_iter().map(|f| root.join(dir).join(f)));
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path.strip_prefix(&root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped but `-` and `_`,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors_of(doc: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every `docs/<name>.md` or `docs/<name>.md#<anchor>` in `text`, with its line.
fn doc_links(text: &str) -> Vec<(usize, String, Option<String>)> {
    let mut links = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("docs/") {
            let tail = &rest[at + 5..];
            let name: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let after = &tail[name.len()..];
            if let Some(after_md) = after.strip_prefix(".md") {
                let section = after_md.strip_prefix('#').map(|s| {
                    s.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).collect::<String>()
                });
                links.push((number + 1, format!("{name}.md"), section));
            }
            rest = after;
        }
    }
    links
}

#[test]
fn every_section_idgen_points_to_exists() {
    let docs = root().join("docs");
    let mut checked = 0;
    let mut broken = Vec::new();
    for (file, text) in sources() {
        for (line, doc, section) in doc_links(&text) {
            let path = docs.join(&doc);
            if !path.exists() {
                broken.push(format!("{file}:{line}: docs/{doc} does not exist"));
                continue;
            }
            if let Some(section) = section {
                checked += 1;
                if !anchors_of(&path).contains(&section) {
                    broken.push(format!("{file}:{line}: docs/{doc} has no section #{section}"));
                }
            }
        }
        for (number, line) in text.lines().enumerate() {
            if line.contains("README: ") || line.contains("see the README (") {
                broken.push(format!(
                    "{file}:{}: names a section by its title: link docs/<file>.md#<section>",
                    number + 1
                ));
            }
        }
    }
    assert!(broken.is_empty(), "links to sections that do not exist:\n{}", broken.join("\n"));
    // idgen_health()'s actions link the runbook (sql/diagnostics.sql), and errors link it too.
    assert!(checked >= 6, "only {checked} links found: the scan is broken");
}

#[test]
fn the_anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor(" Freeing an id by hand, safely"), "freeing-an-id-by-hand-safely");
    assert_eq!(anchor(" Metrics for postgres_exporter"), "metrics-for-postgres_exporter");
    assert_eq!(anchor(" Scale-out: several primaries, one ID space"), "scale-out-several-primaries-one-id-space");
    assert_eq!(
        anchor(" `idgen_next_id()` and `idgen_next_id(service text)`"),
        "idgen_next_id-and-idgen_next_idservice-text"
    );
    let links = doc_links("see docs/ha.md#scale-out-x, and docs/kubernetes.md.");
    assert_eq!(
        links,
        vec![(1, "ha.md".to_owned(), Some("scale-out-x".to_owned())), (1, "kubernetes.md".to_owned(), None)]
    );
}

/// Every finding `idgen_health()` can report, with its severity: the SQL's (`SELECT '<severity>',
/// '<finding>'`, and the two whose name or severity the SQL computes) and the core's
/// (`finding: "<name>"`, with the `severity: "<...>"` before it).
fn health_findings() -> BTreeSet<(String, String)> {
    let root = root();
    let sql = std::fs::read_to_string(root.join("sql/diagnostics.sql")).unwrap();
    let mut found = BTreeSet::new();
    for (at, _) in sql.match_indices("SELECT '") {
        let quoted: Vec<&str> = sql[at + 7..].splitn(5, '\'').collect();
        // SELECT '<severity>'[::text AS severity], '<finding>'
        if let [_, severity, between, finding, _] = quoted[..] {
            let between = between.trim_start_matches("::text AS severity");
            if ["critical", "warning", "notice"].contains(&severity) && between == ", " {
                found.insert((severity.to_owned(), finding.to_owned()));
            }
        }
    }
    // The SQL's computed ones: capacity's level, and the standby pair.
    for (name, severity) in [
        ("capacity", "critical / warning"),
        ("synchronous_standby_missing", "critical"),
        ("replication_async", "warning"),
    ] {
        assert!(sql.contains(&format!("'{name}'")), "{name} is no longer in sql/diagnostics.sql");
        found.insert((severity.to_owned(), name.to_owned()));
    }
    let core = std::fs::read_to_string(root.join("core/src/messages.rs")).unwrap();
    for (at, _) in core.match_indices("finding: \"") {
        let name = core[at + 10..].split('"').next().unwrap();
        let before = &core[..at];
        let severity = before[before.rfind("severity: \"").expect("a severity before the finding") + 11..]
            .split('"')
            .next()
            .unwrap();
        found.insert((severity.to_owned(), name.to_owned()));
    }
    found
}

/// The runbook's table of findings (docs/operations.md): `| severity | `finding` | ... |`.
fn runbook_findings() -> BTreeSet<(String, String)> {
    let runbook = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    runbook
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let severity = cells.first()?.strip_prefix("| ")?;
            let finding = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            ["critical", "warning", "notice", "critical / warning"]
                .contains(&severity)
                .then(|| (severity.to_owned(), finding.to_owned()))
        })
        .collect()
}

/// The rows of `idgen_private.health_findings` as `sql/diagnostics.sql` inserts them: (severity,
/// finding), and the function that reports each.
fn health_findings_table() -> BTreeSet<((String, String), String)> {
    let sql = std::fs::read_to_string(root().join("sql/diagnostics.sql")).unwrap();
    let insert = "INSERT INTO idgen_private.health_findings (finding, severity, reported_by) VALUES";
    let values = &sql[sql.find(insert).expect("the findings' rows") + insert.len()..];
    let values = &values[..values.find(';').unwrap()];
    values
        .lines()
        .filter_map(|line| line.trim().strip_prefix("('"))
        .map(|row| {
            let cells: Vec<&str> = row.split('\'').step_by(2).take(3).collect();
            ((cells[1].to_owned(), cells[0].to_owned()), cells[2].to_owned())
        })
        .collect()
}

#[test]
fn every_health_finding_is_a_row_of_the_findings_table_with_the_function_that_reports_it() {
    let sql = std::fs::read_to_string(root().join("sql/diagnostics.sql")).unwrap();
    let table = health_findings_table();
    let listed: BTreeSet<(String, String)> = table.iter().map(|(finding, _)| finding.clone()).collect();
    assert_eq!(listed, health_findings(), "idgen_private.health_findings and the findings the SQL and the core report");
    for ((_, finding), function) in &table {
        let body = match function.as_str() {
            "writer_findings" | "layout_findings" => {
                std::fs::read_to_string(root().join("core/src/messages.rs")).unwrap()
            }
            _ => {
                let start = sql
                    .find(&format!("CREATE FUNCTION idgen_private.{function}()"))
                    .unwrap_or_else(|| panic!("no function {function}"));
                sql[start..start + sql[start..].find("\nEND;").unwrap()].to_owned()
            }
        };
        let named = body.contains(&format!("'{finding}'")) || body.contains(&format!("\"{finding}\""));
        assert!(named, "{function} does not report {finding}");
    }
    // idgen_health() calls each function of the table once, and nothing else.
    let start = sql.find("CREATE FUNCTION idgen_health()").unwrap();
    let health = &sql[start..start + sql[start..].find("\nEND;").unwrap()];
    let mut calls: Vec<&str> = health
        .match_indices("SELECT * FROM idgen_private.")
        .map(|(at, m)| health[at + m.len()..].split('(').next().unwrap())
        .collect();
    calls.sort_unstable();
    let mut reporters: Vec<&str> = table.iter().map(|(_, function)| function.as_str()).collect();
    reporters.sort_unstable();
    reporters.dedup();
    assert_eq!(calls, reporters, "idgen_health() calls each reporting function of idgen_private.health_findings once");
}

#[test]
fn every_health_finding_has_its_runbook_row_with_its_severity() {
    let findings = health_findings();
    assert!(findings.len() >= 25, "the sources' findings were not read: {findings:#?}");
    let runbook = runbook_findings();
    let missing: Vec<_> = findings.difference(&runbook).collect();
    let extra: Vec<_> = runbook.difference(&findings).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/operations.md's findings table and idgen_health() differ:\n  not in the runbook: {missing:?}\n  not reported by idgen: {extra:?}"
    );
}
