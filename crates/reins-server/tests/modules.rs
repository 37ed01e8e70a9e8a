//! The server is a composition: its top-level modules (`sessions`, `approvals`,
//! `state`, `hub`, ...) form no import cycle. Read from the sources: every `crate::x`
//! path (and `crate::{x, y}` group) outside a comment is an edge from the file's
//! top-level module to `x`.

#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level module a source file belongs to (`approvals/email.rs` → `approvals`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The modules a line names through `crate::`.
fn named(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        // `reins_server::crate::` cannot occur; `$crate::` (macros) is not ours.
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if matches!(before, Some(c) if c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with(|c: char| c.is_lowercase()) {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_lowercase()) {
                out.push(name);
            }
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("reading the sources")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A cycle through `from`, when there is one (depth-first search).
/// `done`: the modules already searched whole, with no cycle through them.
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in graph.get(from).into_iter().flatten() {
        if let Some(i) = path.iter().position(|m| m == next) {
            let mut cycle = path[i..].to_vec();
            cycle.push(next.clone());
            return Some(cycle);
        }
        if done.contains(next) {
            continue;
        }
        path.push(next.clone());
        if let Some(c) = cycle_from(graph, next, path, done) {
            return Some(c);
        }
        path.pop();
    }
    done.insert(from.to_owned());
    None
}

#[test]
fn the_top_level_modules_form_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = top_module(&src, file);
        if module == "lib" {
            continue; // the composition root names every module
        }
        let text = std::fs::read_to_string(file).expect("reading a source file");
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for to in named(line) {
                if to != module {
                    graph.entry(module.clone()).or_default().insert(to);
                }
            }
        }
    }
    assert!(
        graph.len() > 10,
        "the sources were not read: {} modules with imports",
        graph.len()
    );
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        let mut path = vec![module.clone()];
        if let Some(cycle) = cycle_from(&graph, module, &mut path, &mut done) {
            panic!("an import cycle: {}", cycle.join(" → "));
        }
    }
}

#[test]
fn the_reader_sees_paths_and_groups_and_skips_other_crates() {
    assert_eq!(named("use crate::state::AppState;"), ["state"]);
    assert_eq!(
        named("use crate::{auth::Auth, hub::Hub, Server};"),
        ["auth", "hub"]
    );
    assert_eq!(
        named("let x = crate::view::load(a, crate::types::X);"),
        ["view", "types"]
    );
    assert!(named("$crate::foo!(); reins_crate::x").is_empty());
}
