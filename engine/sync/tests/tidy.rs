//! The metrics are documented: ARCHITECTURE.md and the user guide name exactly what
//! `/metrics` serves, and the alerts and dashboard query only served metrics. (The shape
//! checks, and the guide's Event reasons, are `cargo xtask tidy`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
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

/// The user guide's page on Events and metrics names every metric `/metrics` serves (its
/// Event reasons: `cargo xtask tidy`).
#[test]
fn the_guide_names_every_metric() {
    let page = std::fs::read_to_string(root().join("docs/reference/events-and-metrics.md"))
        .expect("docs/reference/events-and-metrics.md");
    let missing: Vec<String> = served_metrics()
        .into_iter()
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
