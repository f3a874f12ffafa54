//! The layout docs/development.md draws holds: no module of the extension (src/) or of the pure
//! core (core/src/) reaches, through `crate::` or `super::` paths, a module that reaches it back.
//! (A pure check: no database needed.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module of the crate rooted at `src` (named `a::b`, the root `lib`), with the modules its
/// source names through `crate::` or `super::` paths.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut sources = BTreeMap::new();
    for relative in idgen_cluster_tests::rust_files(src) {
        let name = relative.with_extension("").to_string_lossy().replace("/mod", "").replace('/', "::");
        sources.insert(name, std::fs::read_to_string(src.join(&relative)).unwrap());
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(module, source)| {
            let parent = module.rsplit_once("::").map_or("", |(parent, _)| parent);
            let mut reached = BTreeSet::new();
            for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_owned())] {
                for (at, _) in source.match_indices(prefix) {
                    let rest = &source[at + prefix.len()..];
                    let idents: Vec<&str> = path_segments(rest);
                    // `super::{a, b}` names sibling modules a and b.
                    let names: Vec<Vec<&str>> = if rest.starts_with('{') {
                        rest[1..rest.find('}').unwrap_or(1)].split(',').map(|n| path_segments(n.trim())).collect()
                    } else {
                        vec![idents]
                    };
                    for segments in names {
                        let joined = |n: usize| {
                            let tail = segments[..n].join("::");
                            if base.is_empty() {
                                tail
                            } else {
                                format!("{base}::{tail}")
                            }
                        };
                        if let Some(target) =
                            (1..=segments.len()).rev().map(joined).find(|candidate| modules.contains(candidate))
                        {
                            if &target != module {
                                reached.insert(target);
                            }
                        }
                    }
                }
            }
            (module.clone(), reached)
        })
        .collect()
}

/// The leading `a::b::c` of `text`, as segments (lower-case identifiers: modules, functions).
fn path_segments(text: &str) -> Vec<&str> {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let end =
            rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segments.push(&rest[..end]);
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    segments
}

/// A cycle through `start`, if there is one: the modules in order.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((module, path)) = stack.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if next == start {
                return Some(path.iter().cloned().chain([start.to_owned()]).collect());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), path.iter().cloned().chain([next.clone()]).collect()));
            }
        }
    }
    None
}

fn assert_no_cycles(crate_src: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(crate_src);
    let graph = dependencies(&src);
    assert!(graph.len() >= 10, "only {} modules found under {}", graph.len(), src.display());
    let cycles: Vec<String> =
        graph.keys().filter_map(|m| cycle_through(&graph, m)).map(|cycle| cycle.join(" -> ")).collect();
    assert!(cycles.is_empty(), "modules of {crate_src} that reach each other:\n{}", cycles.join("\n"));
}

#[test]
fn the_checker_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]
    .into();
    assert_eq!(cycle_through(&graph, "a"), Some(vec!["a".to_owned(), "b".to_owned(), "a".to_owned()]));
    assert_eq!(cycle_through(&graph, "c"), None);
    assert_eq!(path_segments("registry::store::{self, X}"), vec!["registry", "store"]);
}

#[test]
fn no_two_modules_of_the_extension_reach_each_other() {
    assert_no_cycles("src");
}

#[test]
fn no_two_modules_of_the_core_reach_each_other() {
    assert_no_cycles("core/src");
}
