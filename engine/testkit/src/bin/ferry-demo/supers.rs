//! The demo's second super cluster: a GPU namespace of team-a runs in super cluster `gpu`
//! (placement rule on the namespace's labels), and moves to `super` when relabelled.

use std::time::Instant;

use anyhow::Result;
use ferry_testkit::live::{eventually, Settings};
use kube::Client;
use serde_json::{json, Value};

use super::report::{item, ms, Row};
use super::{appears, apply, get, WAIT};

/// The demo's supers: `super` for every namespace, `gpu` for namespaces labelled
/// `accelerator: gpu`.
pub fn two_supers(settings: &mut Settings) {
    settings.supers = vec![
        json!({"name": "super", "kubeconfig": "super", "labels": {"pool": "general"}}),
        json!({"name": "gpu", "kubeconfig": "gpu", "labels": {"gpu": "true"}}),
    ];
    settings.placement = vec![
        json!({"namespaceSelector": {"matchLabels": {"accelerator": "gpu"}}, "supers": {"matchLabels": {"gpu": "true"}}}),
        json!({"supers": {"matchLabels": {"pool": "general"}}}),
    ];
}

const DB: &str = "example.com/v1";

/// Namespace `train` of team-a (`a`) with Database `model`: placed on `gpu`, then moved to
/// `super` (`s`) by removing its label.
pub async fn gpu_namespace(
    a: &Client,
    s: &Client,
    gpu: &Client,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let namespace = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train", "labels": labels}});
    apply(a, "ferry-demo", namespace(json!({"accelerator": "gpu"}))).await?;
    let t0 = Instant::now();
    apply(a, "ferry-demo", json!({"apiVersion": DB, "kind": "Database", "metadata": {"name": "model", "namespace": "train"}, "spec": {"engine": "postgres", "version": "16", "tier": "large"}})).await?;
    println!("    team-a: namespace train (accelerator=gpu), Database train/model");
    let (_, d) = appears(gpu, DB, "Database", "team-a-train", "model", t0, |_| true).await?;
    item(&format!(
        "placed on super cluster gpu: team-a-train/model in {}",
        ms(d)
    ));
    let runs_in = || async {
        let ns = get(a, "v1", "Namespace", "", "train").await?;
        Ok(ns.and_then(|n| {
            n["metadata"]["annotations"]["ferry.dev/super"]
                .as_str()
                .map(str::to_string)
        }))
    };
    let there = eventually("ferry.dev/super on namespace train", WAIT, runs_in).await?;
    item(&format!(
        "team-a's namespace train says ferry.dev/super={there}"
    ));
    rows.push(Row {
        tenant: "team-a",
        object: "Database train/model".into(),
        super_object: "gpu: team-a-train/model".into(),
        outcome: "placed".into(),
        latency: Some(d),
    });
    let t0 = Instant::now();
    apply(a, "ferry-demo", namespace(json!({}))).await?;
    println!("    team-a: label accelerator removed from namespace train");
    appears(s, DB, "Database", "team-a-train", "model", t0, |_| true).await?;
    eventually("the copy in gpu deleted", WAIT, || async {
        Ok(get(gpu, DB, "Database", "team-a-train", "model")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let d = t0.elapsed();
    item(&format!(
        "migrated to super in {}: the copy is there, the one in gpu is gone",
        ms(d)
    ));
    rows.push(Row {
        tenant: "team-a",
        object: "namespace train relabelled".into(),
        super_object: "super: team-a-train/model".into(),
        outcome: "migrated".into(),
        latency: Some(d),
    });
    Ok(())
}
