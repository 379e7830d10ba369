//! `cargo xtask bench --sync`: live sync against the local control planes, as ratios measured
//! side by side in one run (interleaved rounds):
//!
//! - throughput: creates per second synced tenant → super (until every copy is visible in the
//!   super cluster) over direct creates per second into the same super API server, at the same
//!   concurrency;
//! - latency added at 100 objects/s: tenant create → super copy visible, minus direct super
//!   create → visible, p50 and p99;
//! - what the super API server pays: its requests per synced create and per synced update
//!   (from its own `apiserver_request_total`), its CPU seconds per synced create over per
//!   direct create, and ferry's CPU per synced object over the super API server's per direct
//!   create (from `/proc/<pid>/stat`);
//! - memory: growth of ferry's resident memory per synced object;
//! - restart with 10,000 more synced objects (`FERRY_BENCH_RESTART_OBJECTS`): writes and time
//!   until converged.
//!
//! Writes `target/bench/sync.json`. `cargo xtask bench --sync` starts control planes of its
//! own for it (`target/clusters-bench`): the tenants' etcd and API servers and this load
//! generator on CPU 0, the super cluster's API server, its own etcd and ferry on CPU 1, so that
//! the ratios measure what ferry costs the super side. `FERRY_BENCH_POLICY` replaces
//! `policies/` (to compare policies).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_testkit::live::{api, Ferry, Identity, Settings};
use ferry_testkit::{fresh_namespace, install_crds, Clusters};
use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::json;

const ROUNDS: usize = 3;
const PER_ROUND: usize = 300;
const CONCURRENCY: usize = 16;
const RATE_PER_SECOND: u64 = 100;
const LATENCY_OBJECTS: usize = 300;

/// When each object name was first seen by a watch.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches Databases in `namespace` of `client`, recording first sightings.
fn watch(client: &Client, namespace: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let api = api(client, "example.com/v1", "Database", namespace);
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let now = Instant::now();
            let objects = match event {
                Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => vec![o],
                _ => continue,
            };
            let mut seen = record.lock().unwrap();
            for o in objects {
                if let Some(name) = o.metadata.name {
                    seen.entry(name).or_insert(now);
                }
            }
        }
    });
    (seen, task)
}

fn database(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": name, "labels": {"app": "bench", "team": "payments"}, "annotations": {"owner": "payments@example.com"}},
        "spec": {
            "engine": "postgres", "version": "16", "tier": "medium",
            "allowedNamespaces": ["prod", "analytics"],
            "replicaSelector": {"matchLabels": {"app": "bench"}},
            "notes": "x".repeat(1200),
        },
    }))
    .expect("bench object")
}

async fn wait_all(seen: &Seen, n: usize) -> Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        {
            let seen = seen.lock().unwrap();
            if seen.len() >= n {
                return Ok(*seen.values().max().unwrap());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {n} seen",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Creates `n` Databases in `namespace` of `client` with `CONCURRENCY` in flight; returns the
/// start time.
async fn burst(client: &Client, namespace: &str, n: usize) -> Result<Instant> {
    let api = api(client, "example.com/v1", "Database", namespace);
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &database(&format!("db-{i}")))
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(start)
}

/// Objects per second from `client`'s creates to `watched`'s watch seeing them all.
async fn throughput(client: &Client, ns: &str, watched: &Client, watched_ns: &str) -> Result<f64> {
    let (seen, task) = watch(watched, watched_ns);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = burst(client, ns, PER_ROUND).await?;
    let end = wait_all(&seen, PER_ROUND).await?;
    task.abort();
    Ok(PER_ROUND as f64 / end.duration_since(start).as_secs_f64())
}

/// Create → visible latencies (ms) at `RATE_PER_SECOND`.
async fn latencies(
    client: &Client,
    ns: &str,
    watched: &Client,
    watched_ns: &str,
) -> Result<Vec<f64>> {
    let (seen, task) = watch(watched, watched_ns);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = api(client, "example.com/v1", "Database", ns);
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_SECOND));
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut inflight = Vec::new();
    for i in 0..LATENCY_OBJECTS {
        ticker.tick().await;
        let api = api.clone();
        let started = started.clone();
        inflight.push(tokio::spawn(async move {
            let name = format!("lat-{i}");
            started.lock().unwrap().insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &database(&name))
                .await
                .map(|_| ())
        }));
    }
    for f in inflight {
        f.await??;
    }
    wait_all(&seen, LATENCY_OBJECTS).await?;
    task.abort();
    let seen = seen.lock().unwrap();
    let started = started.lock().unwrap();
    Ok(started
        .iter()
        .filter_map(|(name, t0)| Some(seen.get(name)?.duration_since(*t0).as_secs_f64() * 1000.0))
        .collect())
}

/// Requests the super API server has served for Databases, watches and lists aside (one
/// watch per watcher; what each create or update costs is the rest).
async fn database_requests(client: &Client) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"databases\""))
        .filter(|l| !l.contains("verb=\"WATCH\"") && !l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// CPU seconds (user + system) process `pid` and its children (ferry's transform workers)
/// have used.
fn cpu_seconds_tree(pid: u32) -> f64 {
    let children = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| parent(*p) == Some(pid));
    cpu_seconds(pid) + children.map(cpu_seconds).sum::<f64>()
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds (user + system) process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

/// What one phase cost: super requests for Databases, the super API server's and ferry's CPU.
#[derive(Clone, Copy, Default)]
struct Cost {
    requests: f64,
    super_cpu: f64,
    ferry_cpu: f64,
}

impl Cost {
    async fn now(s: &Client, super_pids: &[u32], ferry_pid: u32) -> Result<Self> {
        Ok(Self {
            requests: database_requests(s).await?,
            super_cpu: super_pids.iter().map(|p| cpu_seconds(*p)).sum(),
            ferry_cpu: cpu_seconds_tree(ferry_pid),
        })
    }

    fn since(self, before: Self) -> Self {
        Self {
            requests: self.requests - before.requests,
            super_cpu: self.super_cpu - before.super_cpu,
            ferry_cpu: self.ferry_cpu - before.ferry_cpu,
        }
    }
}

/// Updates every Database of the tenant's `ns` and waits until each super copy has it.
async fn update_all(a: &Client, ns: &str, s: &Client, super_ns: &str) -> Result<()> {
    let tenant = api(a, "example.com/v1", "Database", ns);
    let patch = json!({"spec": {"tier": "large"}});
    futures::stream::iter(0..PER_ROUND)
        .map(|i| {
            let tenant = tenant.clone();
            let patch = &patch;
            async move {
                tenant
                    .patch(
                        &format!("db-{i}"),
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(patch),
                    )
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let copies = api(s, "example.com/v1", "Database", super_ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = copies.list(&Default::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|o| o.data["spec"]["tier"] == "large")
            .count();
        if done >= PER_ROUND {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {done} updates reached the super cluster"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() as f64 - 1.0) * p).round() as usize]
}

fn median(xs: &[f64]) -> f64 {
    percentile(xs.to_vec(), 0.5)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let clusters = Clusters::connect()
        .await
        .context("start the control planes: cargo xtask cluster up")?;
    for client in [&clusters.super_cluster, clusters.tenant("team-a")] {
        install_crds(client).await?;
    }
    let dir = ferry_testkit::live::scratch("bench-sync")?;
    let mut settings = Settings::new(&["team-a"], Identity::Admin);
    settings.patrol = "60s".into();
    if let Some(policy) = std::env::var_os("FERRY_BENCH_POLICY") {
        settings.policy = policy.into();
    }
    let mut ferry = Ferry::start(
        Path::new(env!("CARGO_BIN_EXE_ferry")),
        &dir,
        &settings,
        "ferry.log",
    )?;
    ferry.ready().await?;
    let (s, a) = (&clusters.super_cluster, clusters.tenant("team-a"));

    let rss_before = ferry.rss().unwrap_or(0);
    // The super API server, and its etcd when the tenants have one of their own (`cargo xtask
    // bench --sync` starts them so; a shared etcd would count the tenant's writes too).
    let own_etcd = ferry_testkit::faults::pid("etcd-tenants").is_ok();
    let mut super_pids = vec![ferry_testkit::faults::pid("super")?];
    if own_etcd {
        super_pids.push(ferry_testkit::faults::pid("etcd")?);
    }
    let ferry_pid = ferry.pid().context("ferry runs")?;
    let cost = || Cost::now(s, &super_pids, ferry_pid);
    let (mut direct, mut synced) = (Vec::new(), Vec::new());
    let (mut direct_cost, mut synced_cost) = (Cost::default(), Cost::default());
    let mut last_synced_ns = String::new();
    for round in 0..ROUNDS {
        let ns = fresh_namespace(s, "bench-direct").await?;
        let before = cost().await?;
        direct.push(throughput(s, &ns, s, &ns).await?);
        let spent = cost().await?.since(before);
        let ns = fresh_namespace(a, "bench-sync").await?;
        let before = cost().await?;
        synced.push(throughput(a, &ns, s, &format!("team-a-{ns}")).await?);
        let spent_synced = cost().await?.since(before);
        for (total, phase) in [(&mut direct_cost, spent), (&mut synced_cost, spent_synced)] {
            total.requests += phase.requests;
            total.super_cpu += phase.super_cpu;
            total.ferry_cpu += phase.ferry_cpu;
        }
        last_synced_ns = ns;
        println!(
            "round {}: direct {:.0}/s, synced {:.0}/s",
            round + 1,
            direct[round],
            synced[round]
        );
    }
    let objects = (ROUNDS * PER_ROUND) as f64;
    let requests_per_create = synced_cost.requests / objects;
    let super_cpu_ratio = synced_cost.super_cpu / direct_cost.super_cpu;
    let ferry_cpu_ratio = synced_cost.ferry_cpu / direct_cost.super_cpu;
    let before = cost().await?;
    let super_ns = format!("team-a-{last_synced_ns}");
    update_all(a, &last_synced_ns, s, &super_ns).await?;
    let requests_per_update = cost().await?.since(before).requests / PER_ROUND as f64;
    println!(
        "super API server: {requests_per_create:.2} requests per synced create (direct: {:.2}; target 1.0), {requests_per_update:.2} per synced update (target 1.0)",
        direct_cost.requests / objects
    );
    let measured = if own_etcd {
        "kube-apiserver + etcd"
    } else {
        "kube-apiserver (etcd shared with the tenants, left out)"
    };
    println!("CPU: super {measured} {super_cpu_ratio:.2}x per synced create over per direct create (target <= 1.1); ferry and its transform workers {ferry_cpu_ratio:.2}x of the super's per direct create (target <= 0.3)");
    let ns = fresh_namespace(s, "bench-lat").await?;
    let direct_ms = latencies(s, &ns, s, &ns).await?;
    let ns = fresh_namespace(a, "bench-lat").await?;
    let synced_ms = latencies(a, &ns, s, &format!("team-a-{ns}")).await?;
    // Every synced object is now in both of ferry's caches (tenant and super).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let synced_objects = (ROUNDS * PER_ROUND + LATENCY_OBJECTS) as f64;
    let rss_per_object = (ferry.rss().unwrap_or(0) as f64 - rss_before as f64) / synced_objects;
    let (d50, d99) = (
        percentile(direct_ms.clone(), 0.5),
        percentile(direct_ms, 0.99),
    );
    let (s50, s99) = (
        percentile(synced_ms.clone(), 0.5),
        percentile(synced_ms, 0.99),
    );
    let ratio = median(&synced) / median(&direct);

    // Restart with many synced, unchanged objects: writes and time to converge.
    let restart_objects: usize = std::env::var("FERRY_BENCH_RESTART_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let ns = fresh_namespace(a, "bench-restart").await?;
    let (seen, task) = watch(s, &format!("team-a-{ns}"));
    burst(a, &ns, restart_objects).await?;
    wait_all(&seen, restart_objects).await?;
    task.abort();
    let total = ferry
        .metric("ferry_synced_objects", &[("tenant", "team-a")])
        .await?;
    ferry.stop()?;
    let started = Instant::now();
    let mut ferry = Ferry::start(
        Path::new(env!("CARGO_BIN_EXE_ferry")),
        &dir,
        &settings,
        "ferry-restart.log",
    )?;
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
    let restart_writes = ferry.metric("ferry_writes_total", &[]).await?;
    println!(
        "restart with {total} synced objects: ready in {:.1} s, converged in {:.1} s, {restart_writes} writes (target: 0 writes, <= 10 s)",
        ready.as_secs_f64(),
        converged.as_secs_f64()
    );

    let report = json!({
        "sync_throughput_ratio": ratio,
        "direct_creates_per_second": median(&direct),
        "synced_creates_per_second": median(&synced),
        "concurrency": CONCURRENCY,
        "objects_per_round": PER_ROUND,
        "rounds": ROUNDS,
        "latency_rate_per_second": RATE_PER_SECOND,
        "direct_latency_ms": {"p50": d50, "p99": d99},
        "synced_latency_ms": {"p50": s50, "p99": s99},
        "added_latency_ms": {"p50": s50 - d50, "p99": s99 - d99},
        "rss_growth_bytes_per_synced_object": rss_per_object,
        "super_requests_per_create": requests_per_create,
        "super_requests_per_direct_create": direct_cost.requests / objects,
        "super_requests_per_update": requests_per_update,
        "super_cpu_ratio": super_cpu_ratio,
        "ferry_cpu_ratio": ferry_cpu_ratio,
        "restart": {"synced_objects": total, "ready_seconds": ready.as_secs_f64(), "converged_seconds": converged.as_secs_f64(), "writes": restart_writes},
        "targets": {"super_requests_per_create": "1.0", "super_requests_per_update": "1.0", "super_cpu_ratio": "<= 1.1", "ferry_cpu_ratio": "<= 0.3", "sync_throughput_ratio": ">= 0.9", "added_latency_p99_ms": "<= 10", "rss_growth_bytes_per_synced_object": "<= 2048", "restart_10k": "0 writes, converged <= 10 s"},
    });
    println!("sync throughput ratio {ratio:.2} (synced {:.0}/s over direct {:.0}/s, {CONCURRENCY} in flight; target >= 0.9)", median(&synced), median(&direct));
    println!("latency at {RATE_PER_SECOND}/s: direct p50 {d50:.1} ms p99 {d99:.1} ms; synced p50 {s50:.1} ms p99 {s99:.1} ms; added p99 {:.1} ms (target <= 10)", s99 - d99);
    println!(
        "memory: ferry's RSS grew {rss_per_object:.0} bytes per synced object (target <= 2048)"
    );
    let out = ferry_testkit::root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("sync.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    ferry.stop()?;
    Ok(())
}
