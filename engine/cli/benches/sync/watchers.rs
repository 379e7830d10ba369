//! `FERRY_BENCH_ONLY=watchers`: what one more watcher of every Database costs the super API
//! server (and its etcd) per direct create: interleaved direct rounds with no extra watcher,
//! with one watching whole objects (as ferry watches its copies), and with one watching their
//! metadata only (`as=PartialObjectMetadata`). Tells how much of the super's CPU beyond a
//! direct create of ferry's exact copy a watcher of a kind costs, and whether a metadata-only
//! watch would cost it less.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry_testkit::fresh_namespace;
use ferry_testkit::live::api;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, Event};
use kube::Client;

use crate::cost::cpu_of;
use crate::load::{database, throughput, PER_ROUND, ROUNDS};

/// The extra watcher of a round.
#[derive(Clone, Copy)]
pub enum Extra {
    None,
    Whole,
    Metadata,
}

impl Extra {
    fn name(self) -> &'static str {
        match self {
            Extra::None => "no extra watcher",
            Extra::Whole => "one more watcher of whole objects",
            Extra::Metadata => "one more watcher of metadata only",
        }
    }

    /// Starts the watcher over every namespace, counting the objects it is told of in `ns`.
    fn start(
        self,
        s: &Client,
        ns: &str,
    ) -> (Arc<AtomicUsize>, Option<tokio::task::JoinHandle<()>>) {
        let count = Arc::new(AtomicUsize::new(0));
        let (api, s) = (api(s, "example.com/v1", "Database", ""), s.clone());
        let (counter, ns) = (count.clone(), ns.to_string());
        // Once its list is done, the count starts at 1 (the list of every Database is not
        // what is measured); then one more for each object of `ns` it is told of.
        let seen = move |listed: bool, namespace: Option<&str>| {
            if listed || namespace == Some(ns.as_str()) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        };
        let task = match self {
            Extra::None => None,
            Extra::Whole => Some(tokio::spawn(count_events(api, seen))),
            Extra::Metadata => {
                let gvk = GroupVersionKind::gvk("example.com", "v1", "Database");
                let resource = ApiResource::from_gvk_with_plural(&gvk, "databases");
                let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(s, &resource);
                Some(tokio::spawn(count_events(api, seen)))
            }
        };
        (count, task)
    }
}

/// Watches `api` until aborted, telling `seen` when its list is done and the namespace of
/// every object it is told of.
async fn count_events<K>(api: Api<K>, seen: impl Fn(bool, Option<&str>))
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::InitDone) => seen(true, None),
            Ok(Event::Apply(o)) => seen(false, o.meta().namespace.as_deref()),
            _ => {}
        }
    }
}

/// One round of direct creates with `extra` watching every Database: creates per second,
/// and the super's CPU seconds until the extra watcher was told of every object.
pub async fn direct_round(s: &Client, super_pids: &[u32], extra: Extra) -> Result<(f64, f64)> {
    let ns = fresh_namespace(s, "bench-watchers").await?;
    let (count, task) = extra.start(s, &ns);
    let listed = Instant::now() + Duration::from_secs(120);
    while task.is_some() && count.load(Ordering::Relaxed) == 0 && Instant::now() < listed {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_of(super_pids);
    let rate = throughput((s, &ns), (s, &ns), database).await?;
    // The extra watcher is told of every object before the CPU is read.
    let deadline = Instant::now() + Duration::from_secs(30);
    while task.is_some()
        && count.load(Ordering::Relaxed) < PER_ROUND + 1
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let used = cpu_of(super_pids) - before;
    if let Some(task) = task {
        task.abort();
    }
    Ok((rate, used))
}

/// Prints the super's CPU per direct create with each extra watcher over that with none.
pub async fn watchers(s: &Client, super_pids: &[u32]) -> Result<()> {
    let kinds = [Extra::None, Extra::Whole, Extra::Metadata];
    let mut cpu = [0.0f64; 3];
    // More rounds than the others take: the effect is a few percent, the noise between
    // rounds more. `FERRY_BENCH_ROUNDS` sets how many.
    let rounds = std::env::var("FERRY_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3 * ROUNDS);
    for round in 0..rounds {
        // Each round starts with another variant, so that none always follows another.
        for i in (0..kinds.len()).map(|k| (k + round) % kinds.len()) {
            let extra = kinds[i];
            let (rate, used) = direct_round(s, super_pids, extra).await?;
            cpu[i] += used;
            println!(
                "round {}: {}: {rate:.0} creates/s, the super's CPU {:.2} ms per create",
                round + 1,
                extra.name(),
                1e3 * used / PER_ROUND as f64
            );
        }
    }
    for (i, extra) in kinds.into_iter().enumerate().skip(1) {
        println!(
            "watchers: {}: {:.3}x the super's CPU per direct create with none",
            extra.name(),
            cpu[i] / cpu[0]
        );
    }
    Ok(())
}
