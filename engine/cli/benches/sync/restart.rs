//! The restart measurement of the sync benchmark: many synced, unchanged objects, then a new
//! ferry: the writes it makes and the time until it has converged, over the time a plain client
//! takes to LIST both sides (the mean of a LIST just before the start and one just after).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry_testkit::fresh_namespace;
use ferry_testkit::live::{Ferry, Settings};
use kube::Client;
use serde_json::{json, Value};

use crate::load::{burst, list_seconds, wait_all, watch};

/// How many objects the restart adds: `FERRY_BENCH_RESTART_OBJECTS`, 100,000 unless set.
pub fn objects() -> usize {
    std::env::var("FERRY_BENCH_RESTART_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

/// With `ferry` running, tenant `a` creates `objects` more and each reaches the super cluster
/// `s`; then ferry is stopped and started again with the same settings. Returns the report.
pub async fn restart(
    ferry: Ferry,
    (dir, settings, binary): (&Path, &Settings, &Path),
    (a, s): (&Client, &Client),
    objects: usize,
) -> Result<Value> {
    let total = fill(ferry, (a, s), objects).await?;
    restarted((dir, settings, binary), (a, s), total).await
}

/// With `ferry` running, tenant `a` creates `objects` more and each reaches the super cluster
/// `s`; ferry is stopped. How many objects ferry had synced for team-a.
pub async fn fill(ferry: Ferry, (a, s): (&Client, &Client), objects: usize) -> Result<f64> {
    let ns = fresh_namespace(a, "bench-restart").await?;
    let (seen, task) = watch(s, &format!("team-a-{ns}"));
    burst(a, &ns, objects).await?;
    wait_all(&seen, objects).await?;
    task.abort();
    let total = ferry
        .metric("ferry_synced_objects", &[("tenant", "team-a")])
        .await?;
    ferry.stop()?;
    Ok(total)
}

/// `binary` started on the `total` objects synced: the report of how it converged.
pub async fn restarted(
    (dir, settings, binary): (&Path, &Settings, &Path),
    (a, s): (&Client, &Client),
    total: f64,
) -> Result<Value> {
    // What a plain client pays to read the same objects from both sides, just before and
    // just after (the machine is shared: one reading alone can be off by 2x).
    let listed_before = list_seconds(a).await? + list_seconds(s).await?;
    let started = Instant::now();
    let mut ferry = Ferry::start(binary, dir, settings, "ferry-restart.log")?;
    ferry.ready().await?;
    let ready = started.elapsed();
    let mut calm = 0;
    while calm < 5 {
        let synced = ferry
            .metric("ferry_synced_objects", &[("tenant", "team-a")])
            .await?;
        let depth = ferry.metric("ferry_queue_depth", &[]).await?;
        calm = if synced >= total && depth == 0.0 {
            calm + 1
        } else {
            0
        };
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "no convergence after restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converged = started.elapsed().saturating_sub(Duration::from_millis(80));
    let writes = ferry.metric("ferry_writes_total", &[]).await?;
    ferry.stop()?;
    let listed_after = list_seconds(a).await? + list_seconds(s).await?;
    let listed = (listed_before + listed_after) / 2.0;
    let list_ratio = converged.as_secs_f64() / listed;
    println!(
        "restart with {total} synced objects: ready in {:.1} s, converged in {:.1} s, {writes} writes; LIST of both sides {listed:.1} s (before {listed_before:.1}, after {listed_after:.1}), ratio {list_ratio:.2} (target: 0 writes, ratio <= 1.5)",
        ready.as_secs_f64(),
        converged.as_secs_f64()
    );
    Ok(json!({
        "synced_objects": total,
        "ready_seconds": ready.as_secs_f64(),
        "converged_seconds": converged.as_secs_f64(),
        "writes": writes,
        "list_seconds": listed,
        "list_seconds_before": listed_before,
        "list_seconds_after": listed_after,
        "list_ratio": list_ratio,
    }))
}
