//! `cargo xtask bench --shard`: sharding across replicas on the local control planes, with
//! many tenant names sharing two tenant API servers (each tenant name syncs that server's
//! namespaces as its own, so every tenant has copies to keep):
//!
//! - spread: the most tenants a replica owns over the mean, with 4 replicas;
//! - scale-up: tenants that moved when a fifth replica joined, over the ideal `tenants / 5`
//!   (and that every one moved to it), and the new owner's writes for objects that did not
//!   change (the super's audit log, by user agent);
//! - failover: `kill -9` of a replica until every one of its tenants is owned and syncing
//!   elsewhere, beside the lease duration;
//! - cost: Lease writes per second at rest (audit log), each replica's resident memory per
//!   owned tenant (over a sharded replica owning none), and the super API server's CPU
//!   seconds per second at rest and its watches, for 1 and for 4 replicas.
//!
//! Writes `target/bench/shard.json`. `FERRY_BENCH_SHARD_TENANTS` sets the tenants (500).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use ferry_testkit::audit;
use ferry_testkit::live::{eventually, Ferry, Identity, Settings};
use ferry_testkit::{fresh_namespace, install_crds, unique, Clusters};
use serde_json::{json, Value};

#[allow(dead_code)]
#[path = "sync/cost.rs"]
mod cost;

/// The benchmark's leaseDuration.
const LEASE_S: u64 = 10;
/// How long a window at rest is measured.
const REST: Duration = Duration::from_secs(20);

fn ferry_binary() -> PathBuf {
    env!("CARGO_BIN_EXE_ferry").into()
}

/// A fleet of replicas over `tenants`, Leases in `namespace`.
struct Fleet {
    dir: PathBuf,
    tenants: Vec<String>,
    namespace: String,
    replicas: BTreeMap<String, Ferry>,
}

impl Fleet {
    fn settings(&self, identity: &str, tenants: &[String]) -> Settings {
        let names: Vec<&str> = tenants.iter().map(String::as_str).collect();
        let mut s = Settings::new(&names, Identity::Admin);
        s.policy = ferry_testkit::root().join("policies/examples/databases.yaml");
        for (i, t) in tenants.iter().enumerate() {
            let cluster = if i % 2 == 0 { "team-a" } else { "team-b" };
            s.clusters.insert(t.clone(), cluster.into());
        }
        s.patrol = "10m".into();
        s.verbose = false;
        s.spec.insert("leaderElection".into(), Value::Null);
        s.spec.insert(
            "sharding".into(),
            json!({"enabled": true, "namespace": self.namespace, "leaseDuration": format!("{LEASE_S}s")}),
        );
        s.args = vec!["--identity".into(), identity.into()];
        s
    }

    /// Starts replicas `ids` at once (over `tenants`); returns once each answers.
    fn start(&mut self, ids: &[&str], tenants: &[String]) -> Result<()> {
        for id in ids {
            let dir = self.dir.join(id);
            std::fs::create_dir_all(&dir)?;
            let settings = self.settings(id, tenants);
            let ferry = Ferry::start(&ferry_binary(), &dir, &settings, "ferry.log")?;
            self.replicas.insert(id.to_string(), ferry);
        }
        Ok(())
    }

    fn members(&self) -> Vec<String> {
        self.replicas.keys().cloned().collect()
    }

    fn plan(&self) -> Result<BTreeMap<String, String>> {
        let config = &self.replicas.values().next().context("a replica")?.config;
        ferry_testkit::shard::plan(&ferry_binary(), config, &self.members())
    }

    /// Waits until the Leases name `plan`'s owners and every replica is ready with an empty
    /// queue; how long it took.
    async fn settled(
        &mut self,
        s: &kube::Client,
        plan: &BTreeMap<String, String>,
    ) -> Result<Duration> {
        let started = Instant::now();
        eventually(
            "the Leases hold the plan",
            Duration::from_secs(600),
            || async {
                let mut held = ferry_testkit::shard::holders(s, &self.namespace).await?;
                held.retain(|t, _| plan.contains_key(t));
                Ok((held == *plan).then_some(()))
            },
        )
        .await?;
        for ferry in self.replicas.values_mut() {
            eventually(
                "a replica ready and drained",
                Duration::from_secs(600),
                || async {
                    let (code, _) = ferry.get("/readyz").await?;
                    let depth = ferry.metric("ferry_queue_depth", &[]).await?;
                    Ok((code == 200 && depth == 0.0).then_some(()))
                },
            )
            .await?;
        }
        Ok(started.elapsed())
    }

    async fn owned(&self) -> Result<Vec<f64>> {
        let mut out = Vec::new();
        for ferry in self.replicas.values() {
            out.push(ferry.metric("ferry_tenants_owned", &[]).await?);
        }
        Ok(out)
    }
}

/// The super API server's watches in flight (its own `apiserver_longrunning_requests`).
async fn watches(s: &kube::Client) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = s.request_text(request).await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// The super API server's CPU seconds per second over a window at rest, and the Lease writes
/// per second the audit log saw in it.
async fn at_rest(super_pid: u32) -> Result<(f64, f64)> {
    let log = audit::Log::of("super")?;
    let cpu = cost::cpu_seconds(super_pid);
    tokio::time::sleep(REST).await;
    let cpu = (cost::cpu_seconds(super_pid) - cpu) / REST.as_secs_f64();
    let leases = log
        .writes()?
        .iter()
        .filter(|w| w.resource == "leases")
        .count();
    Ok((cpu, leases as f64 / REST.as_secs_f64()))
}

/// Resident memory of a sharded replica that owns no tenant.
async fn empty_rss(fleet: &mut Fleet) -> Result<f64> {
    fleet.start(&["bench-empty"], &[])?;
    let mut ferry = fleet.replicas.remove("bench-empty").context("empty")?;
    ferry.ready().await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = ferry.rss().unwrap_or(0) as f64;
    ferry.stop()?;
    Ok(rss)
}

async fn run() -> Result<Value> {
    let tenants_n: usize = std::env::var("FERRY_BENCH_SHARD_TENANTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let clusters = Clusters::connect().await?;
    let s = clusters.super_cluster.clone();
    for c in std::iter::once(&s).chain(clusters.tenants.values()) {
        install_crds(c).await?;
    }
    // One Database on each tenant API server: every tenant name keeps one copy.
    for t in ["team-a", "team-b"] {
        let client = clusters.tenant(t);
        let ns = fresh_namespace(client, "shop").await?;
        let db = json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": ns}, "spec": {"engine": "postgres", "version": "16", "tier": "small"}});
        ferry_testkit::object::create(client, db).await?;
    }
    let mut fleet = Fleet {
        dir: ferry_testkit::live::scratch("bench-shard")?,
        tenants: (0..tenants_n).map(|i| format!("t{i:04}")).collect(),
        namespace: unique("ferry-shard"),
        replicas: BTreeMap::new(),
    };
    let super_pid = ferry_testkit::faults::pid("super")?;
    let rss_empty = empty_rss(&mut fleet).await?;
    let tenants = fleet.tenants.clone();
    // One replica owns everything.
    println!("shard: 1 replica, {tenants_n} tenants");
    fleet.start(&["bench-r0"], &tenants)?;
    let plan = fleet.plan()?;
    let took = fleet.settled(&s, &plan).await?;
    println!("  settled in {:.0}s", took.as_secs_f64());
    let (cpu1, _) = at_rest(super_pid).await?;
    let watches1 = watches(&s).await?;
    for (_, f) in std::mem::take(&mut fleet.replicas) {
        f.stop()?;
    }
    // Four replicas started at once.
    println!("shard: 4 replicas");
    fleet.start(&["bench-r0", "bench-r1", "bench-r2", "bench-r3"], &tenants)?;
    let plan4 = fleet.plan()?;
    let took = fleet.settled(&s, &plan4).await?;
    println!("  settled in {:.0}s", took.as_secs_f64());
    let owned = fleet.owned().await?;
    let mean = owned.iter().sum::<f64>() / owned.len() as f64;
    let max_mean = owned.iter().cloned().fold(0.0, f64::max) / mean;
    let (cpu4, lease_writes) = at_rest(super_pid).await?;
    let watches4 = watches(&s).await?;
    let per_tenant: Vec<f64> = fleet
        .replicas
        .values()
        .zip(&owned)
        .map(|(f, o)| (f.rss().unwrap_or(0) as f64 - rss_empty) / o.max(1.0))
        .collect();
    let rss_per_tenant = per_tenant.iter().cloned().fold(0.0, f64::max);
    // A fifth replica.
    println!("shard: a fifth replica");
    let log = audit::Log::of("super")?;
    fleet.start(&["bench-r4"], &tenants)?;
    let plan5 = fleet.plan()?;
    fleet.settled(&s, &plan5).await?;
    let moved: Vec<&String> = tenants.iter().filter(|t| plan4[*t] != plan5[*t]).collect();
    ensure!(
        moved.iter().all(|t| plan5[*t] == "bench-r4"),
        "a tenant moved between old replicas"
    );
    let ideal = tenants_n as f64 / 5.0;
    let unchanged_writes = log
        .writes()?
        .iter()
        .filter(|w| w.user_agent.ends_with("(bench-r4)") && w.resource != "leases")
        .count();
    // kill -9 of the fifth.
    println!("shard: kill -9 of a replica owning {}", moved.len());
    let victim = fleet.replicas.remove("bench-r4").context("r4")?;
    let killed = Instant::now();
    ferry_testkit::faults::signal(victim.pid().context("runs")?, "KILL")?;
    drop(victim);
    let plan_after = fleet.plan()?;
    fleet.settled(&s, &plan_after).await?;
    let failover = killed.elapsed().as_secs_f64();
    for (_, f) in std::mem::take(&mut fleet.replicas) {
        f.stop()?;
    }
    Ok(json!({
        "tenants": tenants_n,
        "replicas": 4,
        "max_mean_tenants": max_mean,
        "owned": owned,
        "failover_s": failover,
        "lease_duration_s": LEASE_S,
        "handover_writes_unchanged": unchanged_writes,
        "scale_up_moved": moved.len(),
        "scale_up_moved_over_ideal": moved.len() as f64 / ideal,
        "lease_writes_per_s": lease_writes,
        "rss_bytes_per_owned_tenant": rss_per_tenant,
        "rss_bytes_empty_replica": rss_empty,
        "super_cpu_s_per_s": {"1": cpu1, "4": cpu4},
        "super_watches": {"1": watches1, "4": watches4},
    }))
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run())?;
    let path = ferry_testkit::root().join("target/bench/shard.json");
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
