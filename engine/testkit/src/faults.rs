//! Faults injected into the local control planes: a process hung and continued, an API
//! server or etcd restarted with its data kept.
//!
//! ```text
//!  target/clusters/state.json ─▶ pid of etcd / each kube-apiserver ─▶ SIGSTOP, SIGCONT
//!  target/debug/xtask cluster restart NAME ─▶ same arguments, port and data; waits for readyz
//! ```
//!
//! Only the control planes `cargo xtask cluster up` started can be faulted: with
//! `FERRY_CLUSTERS_DIR` pointing at other clusters, [`available`] is false.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{clusters_dir, root};

fn state() -> Result<Value> {
    let path = clusters_dir().join("state.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (faults need `cargo xtask cluster up`)",
            path.display()
        )
    })?;
    Ok(serde_json::from_str(&text)?)
}

/// Whether the clusters are the harness's own (so that their processes can be faulted).
pub fn available() -> bool {
    state().is_ok()
}

/// The pid of `name`: `etcd`, `controllers`, `super` or a tenant.
pub fn pid(name: &str) -> Result<u32> {
    let state = state()?;
    // etcd, etcd-tenants (the sync benchmark's) and controllers are top-level entries.
    let entry = match &state[name] {
        Value::Null => &state["clusters"][name],
        top => top,
    };
    entry["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .with_context(|| format!("state.json has no pid for {name:?}"))
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to `pid`.
pub fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {pid} failed ({status})");
    }
    Ok(())
}

/// Hangs `name` (SIGSTOP): its connections stay open and nothing answers.
pub fn pause(name: &str) -> Result<()> {
    signal(pid(name)?, "STOP")
}

/// Lets a hung `name` go on (SIGCONT).
pub fn resume(name: &str) -> Result<()> {
    signal(pid(name)?, "CONT")
}

fn xtask() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    target.join("debug/xtask")
}

/// Restarts `name` (`etcd`, `super` or a tenant) with its data kept, through `cargo xtask
/// cluster restart`; returns once it (for etcd: every API server) answers again.
pub fn restart(name: &str) -> Result<()> {
    let xtask = xtask();
    let out = if xtask.exists() {
        Command::new(&xtask)
            .args(["cluster", "restart", name])
            .output()
    } else {
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["xtask", "cluster", "restart", name])
            .current_dir(root())
            .output()
    }
    .context("running xtask cluster restart")?;
    if !out.status.success() {
        bail!(
            "cluster restart {name} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
