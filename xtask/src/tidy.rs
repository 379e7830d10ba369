//! `cargo xtask tidy`: the shape checks over the whole workspace that clippy does not make.
//! Every Rust file starts with a `//!` doc and stays under 800 lines (STYLE.md: a file holding
//! one concept may grow so far; functions are what is measured, by clippy's
//! `too_many_lines` and `too_many_arguments` in `cargo xtask test`); nothing allows those two
//! lints; no two modules of a crate import each other, directly or in a loop; and the modules
//! of `engine/sync` import only from their own layer or those below, as its `lib.rs` declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const CRATES: &[&str] = &[
    "engine/core",
    "engine/sync",
    "engine/cli",
    "engine/testkit",
    "xtask",
];
const MAX_LINES: usize = 800;
/// The crate whose `lib.rs` declares its layers.
const LAYERED: &str = "engine/sync";

/// Runs every check; fails with every problem found.
pub fn run() -> Result<()> {
    let mut problems = files_problems();
    problems.extend(reason_problems());
    for krate in CRATES {
        let graph = imports(krate);
        if let Some(found) = cycle(&graph) {
            problems.push(format!(
                "{krate}: modules import each other: {}",
                found.join(" → ")
            ));
        }
        if *krate == LAYERED {
            problems.extend(layer_problems(krate, &graph));
        }
    }
    if !problems.is_empty() {
        bail!(
            "tidy: {} problem(s)\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    println!(
        "tidy: every file documented and under {MAX_LINES} lines, no size allows, modules layered"
    );
    Ok(())
}

/// Every file: a `//!` doc, at most [`MAX_LINES`] lines, no allow of clippy's size lints.
fn files_problems() -> Vec<String> {
    let mut problems = Vec::new();
    for krate in CRATES {
        for file in files(krate) {
            let source =
                std::fs::read_to_string(root().join(krate).join(&file)).unwrap_or_default();
            let at = format!("{krate}/{file}");
            if !source.trim_start().starts_with("//!") {
                problems.push(format!("{at}: does not start with a //! doc comment"));
            }
            let lines = source.lines().count();
            if lines > MAX_LINES {
                problems.push(format!(
                    "{at}: {lines} lines (at most {MAX_LINES}: one concept a file)"
                ));
            }
            for (n, line) in source.lines().enumerate() {
                let allowed = ["too_many_lines", "too_many_arguments"].iter().any(|lint| {
                    line.contains("allow(") && line.contains(&format!("clippy::{lint}"))
                });
                if allowed {
                    problems.push(format!(
                        "{at}:{}: allows a clippy size lint (a function over ~100 lines or 7 parameters wants a type or a split)",
                        n + 1
                    ));
                }
            }
        }
    }
    problems
}

/// Every reason ferry gives Events is named in the user guide's page on Events and metrics:
/// `Reason::X => "Reason"` in `translate/outcome.rs`, and the reasons `engine/sync` writes
/// itself (`reason: "…"`).
fn reason_problems() -> Vec<String> {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).unwrap_or_default();
    let page = read("docs/reference/events-and-metrics.md");
    let mut reasons: Vec<String> = read("engine/core/src/translate/outcome.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Reason::"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect();
    for file in files("engine/sync") {
        let text = read(&format!("engine/sync/{file}"));
        for part in text.split("reason: \"").skip(1) {
            reasons.extend(part.split('"').next().map(str::to_string));
        }
    }
    if reasons.len() < 8 {
        return vec![format!(
            "tidy: found only {} Event reasons: {reasons:?}",
            reasons.len()
        )];
    }
    reasons
        .into_iter()
        .filter(|r| !page.contains(&format!("`{r}`")))
        .map(|r| format!("docs/reference/events-and-metrics.md: Event reason `{r}` is not named"))
        .collect()
}

fn root() -> PathBuf {
    crate::controlplane::root()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust file of `krate`, relative to the crate (`src/queue.rs`, `tests/live/main.rs`).
fn files(krate: &str) -> Vec<String> {
    let base = root().join(krate);
    let mut out = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&base.join(dir), &mut out);
    }
    let mut names: Vec<String> = out
        .iter()
        .filter_map(|p| p.strip_prefix(&base).ok())
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .collect();
    names.sort();
    names
}

/// The modules of `krate` that each top-level module refers to through `crate::`.
fn imports(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files(krate) {
        let Some(below) = file.strip_prefix("src/") else {
            continue;
        };
        let module = below
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if matches!(module.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let source = std::fs::read_to_string(root().join(krate).join(&file)).unwrap_or_default();
        let targets = graph.entry(module.clone()).or_default();
        for name in crate_paths(&source) {
            if name != module {
                targets.insert(name);
            }
        }
    }
    graph
}

/// The top-level modules `source` names through `crate::` (comments left out).
fn crate_paths(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|n| n.trim().split("::").next().unwrap_or(""))
                    .collect(),
                None => vec![rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")],
            };
            out.extend(
                names
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            );
        }
    }
    out
}

/// A loop in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

/// The layers `lib.rs` of `krate` declares, lowest first: its doc lines
/// `//! N. name: module, module, …`.
fn layers(krate: &str) -> Vec<(String, Vec<String>)> {
    let lib = std::fs::read_to_string(root().join(krate).join("src/lib.rs")).unwrap_or_default();
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter_map(|l| {
            let (number, rest) = l.split_once(". ")?;
            number.parse::<usize>().ok()?;
            let (name, modules) = rest.split_once(": ")?;
            let modules = modules
                .trim_end_matches('.')
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .collect();
            Some((name.to_string(), modules))
        })
        .collect()
}

/// Where the modules of `krate` (imports `graph`) break its declared layers: a module in
/// no layer or in two, an import from a higher layer.
fn layer_problems(krate: &str, graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    check_layers(krate, &layers(krate), graph)
}

/// [`layer_problems`] against `layers`.
fn check_layers(
    krate: &str,
    layers: &[(String, Vec<String>)],
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    if layers.is_empty() {
        return vec![format!(
            "{krate}/src/lib.rs declares no layers (`//! 1. name: a, b`)"
        )];
    }
    let mut level: BTreeMap<&str, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, (_, modules)) in layers.iter().enumerate() {
        for m in modules {
            if level.insert(m, i).is_some() {
                problems.push(format!("{krate}: module {m} is in two layers"));
            }
        }
    }
    for module in graph.keys() {
        if !level.contains_key(module.as_str()) {
            problems.push(format!(
                "{krate}: module {module} is in no layer of src/lib.rs"
            ));
        }
    }
    for (module, targets) in graph {
        let Some(&at) = level.get(module.as_str()) else {
            continue;
        };
        for target in targets {
            if let Some(&to) = level.get(target.as_str()).filter(|&&to| to > at) {
                problems.push(format!(
                    "{krate}: {module} ({}) imports {target} ({}), a layer above it",
                    layers[at].0, layers[to].0
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_found() {
        let looped: BTreeMap<String, BTreeSet<String>> = [
            ("a".to_string(), ["b".to_string()].into()),
            ("b".to_string(), ["a".to_string()].into()),
        ]
        .into();
        assert!(cycle(&looped).is_some());
    }

    #[test]
    fn an_import_from_a_higher_layer_or_an_unlayered_module_is_found() {
        let layers = vec![
            ("vocabulary".to_string(), vec!["key".to_string()]),
            ("engine".to_string(), vec!["run".to_string()]),
        ];
        let graph = |edges: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, to) in edges {
                g.entry(from.to_string())
                    .or_default()
                    .insert(to.to_string());
            }
            g
        };
        assert!(check_layers("c", &layers, &graph(&[("run", "key")])).is_empty());
        let up = check_layers("c", &layers, &graph(&[("key", "run")]));
        assert_eq!(up.len(), 1, "{up:?}");
        assert!(up[0].contains("a layer above"), "{up:?}");
        let stray = check_layers("c", &layers, &graph(&[("stray", "key")]));
        assert!(stray[0].contains("in no layer"), "{stray:?}");
    }

    #[test]
    fn crate_paths_are_read_from_code_only() {
        let source = "use crate::{a::X, b};\nlet c = crate::c::f(); // crate::d\n";
        let found: Vec<String> = crate_paths(source).into_iter().collect();
        assert_eq!(found, ["a", "b", "c"]);
    }
}
