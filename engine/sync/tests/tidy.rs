//! Tidy checks over the whole workspace: every Rust source file starts with a `//!` doc, is
//! named in ARCHITECTURE.md's code map and stays under 800 lines (STYLE.md: a file holding one
//! concept may grow so far; functions are what is measured); no two modules of a crate
//! import each other, directly or in a loop; the metrics ARCHITECTURE.md lists are exactly
//! those `/metrics` serves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: &[&str] = &[
    "engine/core",
    "engine/sync",
    "engine/cli",
    "engine/testkit",
    "xtask",
];
const MAX_LINES: usize = 800;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The code map's section of `krate` (from its `### ` heading to the next heading).
fn section<'a>(text: &'a str, krate: &str) -> &'a str {
    let heading = format!("### `{krate}");
    let start = text
        .find(&heading)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no code map section {heading}`"));
    let rest = &text[start + heading.len()..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    &rest[..end]
}

/// Whether the code map section names `file`: by its path in the crate, or by the path
/// below `src/` (`translate/guard.rs`), or, for a file directly in `src/`, by its name.
fn named(section: &str, file: &str) -> bool {
    let below_src = file.strip_prefix("src/").unwrap_or(file);
    let mut candidates = vec![file.to_string(), below_src.to_string()];
    let parts: Vec<&str> = below_src.split('/').collect();
    // `live/faults.rs` for `tests/live/faults.rs`, `guard/tests.rs` for `translate/guard/tests.rs`.
    for i in 1..parts.len().saturating_sub(1) {
        candidates.push(parts[i..].join("/"));
    }
    candidates.iter().any(|c| {
        section.match_indices(c.as_str()).any(|(at, _)| {
            let before = section[..at].chars().next_back();
            before.is_none_or(|b| !(b.is_alphanumeric() || b == '_' || b == '/' || b == '-'))
        })
    })
}

#[test]
fn every_source_file_is_documented_mapped_and_short() {
    let text = architecture();
    let mut problems = Vec::new();
    for krate in CRATES {
        let map = section(&text, krate);
        for file in files(krate) {
            let path = root().join(krate).join(&file);
            let source = std::fs::read_to_string(&path).unwrap_or_default();
            let at = format!("{krate}/{file}");
            if !source.trim_start().starts_with("//!") {
                problems.push(format!("{at}: does not start with a //! doc comment"));
            }
            if !named(map, &file) {
                problems.push(format!(
                    "{at}: not named in ARCHITECTURE.md's code map for {krate}"
                ));
            }
            let lines = source.lines().count();
            if lines > MAX_LINES {
                problems.push(format!("{at}: {lines} lines (at most {MAX_LINES})"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
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
        for line in source.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split([',', '}'])
                        .map(|n| n.trim().split("::").next().unwrap_or(""))
                        .collect(),
                    None => vec![rest
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or("")],
                };
                for name in names.into_iter().filter(|n| !n.is_empty() && *n != module) {
                    graph
                        .entry(module.clone())
                        .or_default()
                        .insert(name.to_string());
                }
            }
        }
    }
    graph
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

#[test]
fn modules_import_only_downward() {
    for krate in CRATES {
        if let Some(found) = cycle(&imports(krate)) {
            panic!("{krate}: modules import each other: {}", found.join(" → "));
        }
    }
    // The check itself finds a loop.
    let looped: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert!(cycle(&looped).is_some());
}

/// The names a Prometheus scrape uses, from the exposition's `# TYPE` lines (counters with
/// their `_total`). A family shows only once it has a sample, so every family gets one.
fn served_metrics() -> BTreeSet<String> {
    let metrics = ferry_sync::metrics::Metrics::default();
    for counters in [
        &metrics.writes,
        &metrics.refusals,
        &metrics.errors,
        &metrics.migrations,
        &metrics.public_conflicts,
        &metrics.shard.moves,
    ] {
        counters.get_or_create(&Vec::new()).inc();
    }
    for gauges in [&metrics.synced, &metrics.queue_depth, &metrics.reachable] {
        gauges.get_or_create(&Vec::new()).set(1);
    }
    metrics.requests.get_or_create(&Vec::new()).observe(0.001);
    metrics
        .render()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some(if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            })
        })
        .collect()
}

#[test]
fn documented_metrics_are_served() {
    let text = architecture();
    let start = text
        .find("**Metrics**")
        .expect("ARCHITECTURE.md has a **Metrics** entry");
    let entry = &text[start..];
    let entry = &entry[..entry.find("\n- ").unwrap_or(entry.len())];
    let documented: BTreeSet<String> = entry
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split('{').next())
        .filter(|name| name.starts_with("ferry_"))
        .map(str::to_string)
        .collect();
    assert_eq!(documented, served_metrics());
}

/// The user guide's page on Events and metrics names every metric `/metrics` serves and every
/// reason ferry gives Events.
#[test]
fn the_guide_names_every_metric_and_reason() {
    let page = std::fs::read_to_string(root().join("docs/reference/events-and-metrics.md"))
        .expect("docs/reference/events-and-metrics.md");
    let outcome = std::fs::read_to_string(root().join("engine/core/src/translate/outcome.rs"))
        .expect("outcome.rs");
    // `Reason::X => "Reason",` in `as_str`, and the reasons the live engine writes itself.
    let mut reasons: Vec<String> = outcome
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Reason::"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect();
    for file in files("engine/sync") {
        let text = std::fs::read_to_string(root().join("engine/sync").join(&file)).unwrap();
        for part in text.split("reason: \"").skip(1) {
            reasons.extend(part.split('"').next().map(str::to_string));
        }
    }
    assert!(reasons.len() >= 8, "{reasons:?}");
    let missing: Vec<String> = served_metrics()
        .into_iter()
        .chain(reasons)
        .filter(|name| !page.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "not in the guide: {missing:?}");
}

/// Every query of the alerts and the dashboard `ferry manifests` prints names metrics ferry
/// serves (histograms by their series: `_bucket`, `_sum`, `_count`).
#[test]
fn alerts_and_dashboard_query_served_metrics() {
    let served = served_metrics();
    let mut unknown = Vec::new();
    for query in ferry_core::manifests::queries() {
        for token in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !token.starts_with("ferry_") {
                continue;
            }
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| token.strip_suffix(s))
                .unwrap_or(token);
            if !served.contains(token) && !served.contains(base) {
                unknown.push(format!("{token} in {query}"));
            }
        }
    }
    assert!(unknown.is_empty(), "not served: {unknown:?}");
    assert!(ferry_core::manifests::queries().len() >= 10);
}
