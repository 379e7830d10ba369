//! `cargo xtask cluster restart NAME`: one process of the running control planes (an API
//! server by cluster name, `etcd`, or `controllers`) stopped and started again with the same
//! arguments, port and data, for the fault tests.

use std::time::Instant;

use anyhow::{bail, Result};
use serde_json::json;

use crate::controlplane::{
    build, clusters_dir, read_state, spawn, terminate, wait_ready, write_state,
};

/// `cargo xtask cluster restart NAME`: stops one process of the running control planes (an
/// API server by cluster name, or `etcd`) and starts it again with the same arguments, port
/// and data; returns once it (for etcd: every API server) is ready again.
pub fn restart(name: &str) -> Result<()> {
    let bin = build()?;
    let dir = clusters_dir();
    let Some(mut state) = read_state() else {
        bail!("no control planes are running (cargo xtask cluster up starts them)");
    };
    let (entry, program, log) = if name == "etcd" {
        (state["etcd"].clone(), "etcd", "logs/etcd.log".to_string())
    } else if name.starts_with("controllers") {
        (
            state[name].clone(),
            "kube-controller-manager",
            format!("logs/{name}.log"),
        )
    } else {
        (
            state["clusters"][name].clone(),
            "kube-apiserver",
            format!("logs/{name}.log"),
        )
    };
    let (Some(pid), Some(args)) = (entry["pid"].as_u64(), entry["args"].as_array()) else {
        let known: Vec<&str> = state["clusters"]
            .as_object()
            .map(|c| c.keys().map(String::as_str).collect())
            .unwrap_or_default();
        bail!(
            "cluster restart: no process {name:?} (expected etcd, controllers or one of {})",
            known.join(", ")
        );
    };
    let args: Vec<String> = args
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let start = Instant::now();
    terminate(pid);
    let pid = spawn(
        &bin.join(program),
        &args,
        &dir.join(log),
        entry["cpus"].as_str(),
    )?;
    println!(
        "{name:<14} restarted (pid {pid}) after {:.1}s down",
        start.elapsed().as_secs_f64()
    );
    if name == "etcd" || name.starts_with("controllers") {
        state[name]["pid"] = json!(pid);
    } else {
        state["clusters"][name]["pid"] = json!(pid);
    }
    write_state(&state)?;
    let clusters: Vec<(String, u16)> = state["clusters"]
        .as_object()
        .map(|c| {
            c.iter()
                .filter(|(n, _)| name == "etcd" || n.as_str() == name)
                .filter_map(|(n, v)| Some((n.clone(), u16::try_from(v["port"].as_u64()?).ok()?)))
                .collect()
        })
        .unwrap_or_default();
    for (cluster, port) in clusters {
        wait_ready(&bin, &cluster, port)?;
    }
    Ok(())
}
