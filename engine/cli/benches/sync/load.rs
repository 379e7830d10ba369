//! The load the sync benchmark makes and how it times it: bursts, paced creates, watches that
//! note when each object appears, updates, the LIST measurement (fairness: `fairness.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_testkit::fresh_namespace;
use ferry_testkit::live::{api, Ferry};
use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::json;

pub const ROUNDS: usize = 3;
pub const PER_ROUND: usize = 1000;
pub const CONCURRENCY: usize = 16;
pub const RATE_PER_SECOND: u64 = 100;
pub const LATENCY_OBJECTS: usize = 300;

/// When each object name was first seen by a watch.
pub type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches Databases in `namespace` of `client`, recording first sightings.
pub fn watch(client: &Client, namespace: &str) -> (Seen, tokio::task::JoinHandle<()>) {
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

pub fn database(name: &str) -> DynamicObject {
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

/// ferry's copy of a synced Database, as ferry wrote it to the super API server (server-set
/// metadata removed), with the `ferry.dev/tenant` label renamed to a key of the same length so
/// that ferry's watch does not see it: the same bytes for the super to store and send, without
/// ferry.
pub async fn exact_copy_template(a: &Client, s: &Client) -> Result<DynamicObject> {
    let ns = fresh_namespace(a, "bench-template").await?;
    let super_ns = format!("team-a-{ns}");
    let (seen, task) = watch(s, &super_ns);
    api(a, "example.com/v1", "Database", &ns)
        .create(&PostParams::default(), &database("template"))
        .await?;
    wait_all(&seen, 1).await?;
    task.abort();
    let mut copy = api(s, "example.com/v1", "Database", &super_ns)
        .get("template")
        .await?;
    let meta = &mut copy.metadata;
    (meta.uid, meta.resource_version, meta.creation_timestamp) = (None, None, None);
    (meta.managed_fields, meta.generation, meta.namespace) = (None, None, None);
    let labels = meta.labels.get_or_insert_with(Default::default);
    let tenant = labels
        .remove("ferry.dev/tenant")
        .context("ferry's copy has its tenant label")?;
    labels.insert("ferry.dev/tenanx".into(), tenant);
    Ok(copy)
}

/// `template` named `name`.
pub fn exact_copy(template: &DynamicObject, name: &str) -> DynamicObject {
    let mut copy = template.clone();
    copy.metadata.name = Some(name.into());
    copy
}

pub async fn wait_all(seen: &Seen, n: usize) -> Result<Instant> {
    // At least 50 objects a second, and two minutes.
    let deadline = Instant::now() + Duration::from_secs((n as u64 / 50).max(120));
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
pub async fn burst(client: &Client, namespace: &str, n: usize) -> Result<Instant> {
    burst_of(client, namespace, (n, CONCURRENCY), database).await
}

/// Creates `n` objects made by `object` (from a name) with `concurrency` in flight; returns
/// the start time.
pub async fn burst_of(
    client: &Client,
    namespace: &str,
    (n, concurrency): (usize, usize),
    object: impl Fn(&str) -> DynamicObject,
) -> Result<Instant> {
    let api = api(client, "example.com/v1", "Database", namespace);
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let made = object(&format!("db-{i}"));
            async move { api.create(&PostParams::default(), &made).await }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(start)
}

/// Objects per second from `client`'s creates of `object`s to `watched`'s watch seeing them
/// all.
pub async fn throughput(
    from: (&Client, &str),
    watched: (&Client, &str),
    object: impl Fn(&str) -> DynamicObject,
) -> Result<f64> {
    Ok(throughput_and_busy(from, watched, object, &[]).await?.0)
}

/// The same, and the CPU seconds processes `pids` used per second meanwhile (from the first
/// create to the last one seen): how busy they kept their core.
pub async fn throughput_and_busy(
    (client, ns): (&Client, &str),
    (watched, watched_ns): (&Client, &str),
    object: impl Fn(&str) -> DynamicObject,
    pids: &[u32],
) -> Result<(f64, f64)> {
    let (seen, task) = watch(watched, watched_ns);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = crate::cost::cpu_of(pids);
    let start = burst_of(client, ns, (PER_ROUND, CONCURRENCY), object).await?;
    let end = wait_all(&seen, PER_ROUND).await?;
    let seconds = end.duration_since(start).as_secs_f64();
    let busy = (crate::cost::cpu_of(pids) - before) / seconds;
    task.abort();
    Ok((PER_ROUND as f64 / seconds, busy))
}

/// Create → visible latencies (ms) of `LATENCY_OBJECTS` created at `RATE_PER_SECOND`.
pub async fn latencies(
    client: &Client,
    ns: &str,
    watched: &Client,
    watched_ns: &str,
) -> Result<Vec<f64>> {
    latencies_of(
        client,
        ns,
        watched,
        watched_ns,
        (LATENCY_OBJECTS, RATE_PER_SECOND),
        Since::Request,
    )
    .await
}

/// The latency series at `RATE_PER_SECOND` (ms): create → visible of direct creates into the
/// super cluster, and of creates in a tenant synced there; and, for each synced create, when a
/// watch of the tenant's own API server saw it (the earliest any syncer can act on it).
pub struct Latencies {
    pub direct: Vec<f64>,
    pub synced: Synced,
}

/// [`Latencies`] of direct creates into the super cluster `s` and of creates in tenant team-a
/// (`a`) synced there.
pub async fn direct_and_synced_latencies(s: &Client, a: &Client) -> Result<Latencies> {
    let ns = fresh_namespace(s, "bench-lat").await?;
    let direct = latencies(s, &ns, s, &ns).await?;
    let ns = fresh_namespace(a, "bench-lat").await?;
    let (super_ns, paced) = (format!("team-a-{ns}"), (LATENCY_OBJECTS, RATE_PER_SECOND));
    let synced = synced_latencies((a, &ns), (s, &super_ns), paced, Since::Request).await?;
    Ok(Latencies { direct, synced })
}

/// Synced creates' latencies (ms), each split where a watch of the tenant's own API server saw
/// it.
pub struct Synced {
    /// From `since` to visible in the super cluster.
    pub total: Vec<f64>,
    /// From `since` to seen by a watch of the tenant's API server.
    pub tenant_visible: Vec<f64>,
    /// Seen in the tenant → seen in the super cluster.
    pub hop: Vec<f64>,
}

impl Synced {
    /// The p99 of each: total, tenant side, hop.
    pub fn p99(&self) -> [f64; 3] {
        [&self.total, &self.tenant_visible, &self.hop].map(|ms| percentile(ms.clone(), 0.99))
    }
}

/// [`Synced`] latencies of `paced` creates in `tenant`'s namespace `ns`, seen in `super_ns`
/// of `s`.
pub async fn synced_latencies(
    (tenant, ns): (&Client, &str),
    (s, super_ns): (&Client, &str),
    paced: (usize, u64),
    since: Since,
) -> Result<Synced> {
    // The tenant's watch sees each object as ferry's does; the bench's watches and creates
    // share the tenant's core, as the synced creates alone do.
    let (tenant_seen, tenant_task) = watch(tenant, ns);
    let timed = latencies_from(tenant, ns, s, super_ns, paced, since).await;
    tenant_task.abort();
    let timed = timed?;
    let tenant_seen = tenant_seen.lock().unwrap();
    let (mut total, mut tenant_visible, mut hop) = (Vec::new(), Vec::new(), Vec::new());
    for (name, (started, visible)) in &timed {
        total.push(ms(*visible - *started));
        if let Some(in_tenant) = tenant_seen.get(name) {
            tenant_visible.push(ms(in_tenant.saturating_duration_since(*started)));
            hop.push(ms(visible.saturating_duration_since(*in_tenant)));
        }
    }
    Ok(Synced {
        total,
        tenant_visible,
        hop,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The p99 (ms) of `a` and `b` added, every sample of one with every sample of the other: the
/// create-to-super latency of a syncer that took no time at all, were the tenant's create and
/// watch (`a`) and the super's create and watch (`b`) independent of each other.
pub fn p99_of_sum(a: &[f64], b: &[f64]) -> f64 {
    let sums: Vec<f64> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| x + y))
        .collect();
    percentile(sums, 0.99)
}

/// Create → visible latencies (ms) of `count` objects created at `rate` per second.
/// Where a latency starts: when the create is sent, or when the tenant API server answered it
/// (the object exists; what follows is ferry's, whatever load the tenant's server is under).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Since {
    Request,
    Created,
}

pub async fn latencies_of(
    client: &Client,
    ns: &str,
    watched: &Client,
    watched_ns: &str,
    paced: (usize, u64),
    since: Since,
) -> Result<Vec<f64>> {
    let timed = latencies_from(client, ns, watched, watched_ns, paced, since).await?;
    Ok(timed.values().map(|(t0, seen)| ms(*seen - *t0)).collect())
}

/// Per object name: when its latency started and when `watched` saw it.
async fn latencies_from(
    client: &Client,
    ns: &str,
    watched: &Client,
    watched_ns: &str,
    (count, rate): (usize, u64),
    since: Since,
) -> Result<HashMap<String, (Instant, Instant)>> {
    let (seen, task) = watch(watched, watched_ns);
    let api = api(client, "example.com/v1", "Database", ns);
    // One object first, timed by nobody: the watch is listening, the connections are open and
    // (synced) the super namespace exists before the first timed create, as they are for a
    // direct create into an existing namespace.
    api.create(&PostParams::default(), &database("warm-up"))
        .await?;
    wait_all(&seen, 1).await?;
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut inflight = Vec::new();
    for i in 0..count {
        ticker.tick().await;
        let api = api.clone();
        let started = started.clone();
        inflight.push(tokio::spawn(async move {
            let name = format!("lat-{i}");
            started.lock().unwrap().insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &database(&name)).await?;
            if since == Since::Created {
                started.lock().unwrap().insert(name, Instant::now());
            }
            anyhow::Ok(())
        }));
    }
    for f in inflight {
        f.await??;
    }
    wait_all(&seen, count + 1).await?;
    task.abort();
    let seen = seen.lock().unwrap();
    let started = started.lock().unwrap();
    Ok(started
        .iter()
        .filter_map(|(name, t0)| Some((name.clone(), (*t0, *seen.get(name)?))))
        .collect())
}

/// Updates every Database of the tenant's `ns` and waits until each super copy has it.
pub async fn update_all(a: &Client, ns: &str, s: &Client, super_ns: &str) -> Result<()> {
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

/// Seconds a plain client takes to LIST every Database of `client`'s cluster, 500 a page (as
/// client-go's informers do).
pub async fn list_seconds(client: &Client) -> Result<f64> {
    let all = api(client, "example.com/v1", "Database", "");
    let started = Instant::now();
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        let page = all.list(&params).await?;
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(started.elapsed().as_secs_f64()),
        }
    }
}

pub fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() as f64 - 1.0) * p).round() as usize]
}

pub fn median(xs: &[f64]) -> f64 {
    percentile(xs.to_vec(), 0.5)
}

/// Tenants in the many-tenant measurement (`tenants_500`).
pub const TENANTS: usize = 500;

/// Waits until `ferry`'s queues stay empty for a second.
pub async fn settle(ferry: &Ferry) -> Result<()> {
    let mut calm = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while calm < 10 {
        calm = if ferry.metric("ferry_queue_depth", &[]).await? == 0.0 {
            calm + 1
        } else {
            0
        };
        anyhow::ensure!(Instant::now() < deadline, "the queues did not drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
