//! A released version's SQL never changes: a database updated through it must end up as one
//! updated later. The upgrade scripts into each version the CHANGELOG dates, and the frozen install
//! scripts of earlier versions (tests/upgrade), are pinned by their SHA-256 in `released.sha256`
//! beside them; `upgrade.rs` checks that an updated install equals a fresh one. (A pure check: no
//! database needed.)
//!
//! Releasing a version adds its line: `cd sql && sha256sum idgen--A--B.sql >> released.sha256`.
//! A fix to a released script is a new version with a script of its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The versions the CHANGELOG gives a date (`## [x.y.z] - date`), that is, released.
fn released_versions(changelog: &str) -> BTreeSet<String> {
    changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## ["))
        .filter_map(|rest| rest.split_once("] - "))
        .map(|(version, _)| version.to_owned())
        .collect()
}

/// The files `released.sha256` in `dir` pins.
fn pinned(dir: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(dir.join("released.sha256"))
        .unwrap()
        .lines()
        .map(|line| line.split_whitespace().nth(1).expect("a sha256sum line: HASH  FILE").to_owned())
        .collect()
}

/// The files of `dir` whose names match `idgen--…sql` and that `of_released` keeps.
fn scripts(dir: &Path, of_released: impl Fn(&str) -> bool) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("idgen--") && name.ends_with(".sql"))
        .filter(|name| of_released(name))
        .collect()
}

/// `sha256sum -c released.sha256` in `dir`: the failures it names.
fn changed(dir: &Path) -> Vec<String> {
    let out = Command::new("sha256sum").args(["--quiet", "-c", "released.sha256"]).current_dir(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// The version an upgrade script leads to (`idgen--A--B.sql`: B), or an install script installs.
fn target_version(name: &str) -> &str {
    let stem = name.trim_end_matches(".sql");
    stem.rsplit("--").next().unwrap()
}

#[test]
fn the_changelog_dates_the_versions_this_check_knows() {
    let released = released_versions(&std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap());
    assert!(released.contains("0.1.0") && released.contains("0.10.0"), "{released:?}");
    assert!(!released.iter().any(|v| v == "Unreleased"));
}

#[test]
fn no_released_upgrade_script_changed_and_each_is_pinned() {
    let released = released_versions(&std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap());
    let sql = root().join("sql");
    let of_released = scripts(&sql, |name| name.matches("--").count() == 2 && released.contains(target_version(name)));
    assert_eq!(
        pinned(&sql),
        of_released,
        "sql/released.sha256 must pin exactly the upgrade scripts into released versions: add a released version's \
         line (cd sql && sha256sum idgen--A--B.sql >> released.sha256)"
    );
    assert_eq!(changed(&sql), Vec::<String>::new(), "a released upgrade script changed: make the fix a new version");
}

#[test]
fn no_frozen_install_script_changed() {
    let frozen = root().join("tests/upgrade");
    assert_eq!(
        pinned(&frozen),
        scripts(&frozen, |_| true),
        "tests/upgrade/released.sha256 must pin every script there"
    );
    assert_eq!(changed(&frozen), Vec::<String>::new(), "a frozen install script of an earlier version changed");
}

#[test]
fn the_check_sees_a_changed_script() {
    let dir = std::env::temp_dir().join(format!("idgen-released-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("idgen--0.1.0--0.2.0.sql"), "SELECT 1;\n").unwrap();
    let line = Command::new("sha256sum").arg("idgen--0.1.0--0.2.0.sql").current_dir(&dir).output().unwrap().stdout;
    std::fs::write(dir.join("released.sha256"), line).unwrap();
    assert!(changed(&dir).is_empty());
    std::fs::write(dir.join("idgen--0.1.0--0.2.0.sql"), "SELECT 2;\n").unwrap();
    assert_eq!(changed(&dir), ["idgen--0.1.0--0.2.0.sql: FAILED"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
