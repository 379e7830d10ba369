//! Prometheus metrics and the small HTTP endpoint that serves them with `/healthz` and
//! `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Label pairs.
pub type Labels = Vec<(String, String)>;

/// Labels from `(name, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The buckets of `ferry_sync_latency_seconds` and `ferry_request_seconds`: 1 ms to 32 s,
/// doubling.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric ferry exports.
pub struct Metrics {
    registry: Registry,
    /// Writes ferry made, by cluster (`super` or the tenant) and verb.
    pub writes: Family<Labels, Counter>,
    /// Objects ferry keeps in sync, by tenant and kind.
    pub synced: Family<Labels, Gauge>,
    /// Keys waiting, by tenant.
    pub queue_depth: Family<Labels, Gauge>,
    /// From a change being noticed to the write that follows it, in seconds.
    pub sync_latency: Histogram,
    /// How long each cluster took to answer ferry's requests through its writer (writes,
    /// and the reads made there), by cluster, in seconds.
    pub requests: Family<Labels, Histogram, fn() -> Histogram>,
    /// ferry's own time per change: from the change being queued to its first write sent
    /// (the super's answer not counted), in seconds.
    pub own: Histogram,
    /// The adaptive limit on writes in flight, by cluster (`write/pace.rs`).
    pub write_limit: Family<Labels, Gauge>,
    /// Refused objects, by tenant and reason.
    pub refusals: Family<Labels, Counter>,
    /// Time spent translating objects of kinds with transforms, in seconds.
    pub transform_time: Histogram,
    /// Reconciles that failed and will be retried, by tenant.
    pub errors: Family<Labels, Counter>,
    /// 1 while this replica holds the lease (or leader election is off).
    pub leader: Gauge,
    /// Tenant namespaces moved to another super cluster, by tenant.
    pub migrations: Family<Labels, Counter>,
    /// Public objects of the same name in several super clusters (the first in config order
    /// is copied), by kind.
    pub public_conflicts: Family<Labels, Counter>,
    /// Whether each cluster answered ferry's last request through its writer (1) or not (0).
    pub reachable: Family<Labels, Gauge>,
    /// Sharding: what this replica owns, what nobody owns, moves and hand-overs.
    pub shard: ShardMetrics,
}

/// The metrics of a sharded replica (DESIGN.md "Sharding across replicas").
pub struct ShardMetrics {
    /// 1 while this replica's membership renewal is fresh (it may write), else 0.
    pub member: Gauge,
    /// Tenants whose Lease this replica holds.
    pub owned: Gauge,
    /// Tenants of this replica's configuration whose Lease has been free or stale for over
    /// two lease durations.
    pub unowned: Gauge,
    /// Tenants this replica took from another, by reason (`scale`, `failover`, `release`,
    /// `fallback`).
    pub moves: Family<Labels, Counter>,
    /// From taking a tenant's Lease to its caches listed and its queue open, in seconds.
    pub handover: Histogram,
}

impl ShardMetrics {
    fn new() -> Self {
        Self {
            member: Gauge::default(),
            owned: Gauge::default(),
            unowned: Gauge::default(),
            moves: Family::default(),
            handover: Histogram::new(exponential_buckets(0.05, 2.0, 14)),
        }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "shard_member",
            "1 while this replica's membership renewal is fresh (it may write)",
            self.member.clone(),
        );
        registry.register(
            "tenants_owned",
            "Tenants whose Lease this replica holds",
            self.owned.clone(),
        );
        registry.register(
            "tenants_unowned",
            "Tenants whose Lease has been free or stale for over two lease durations",
            self.unowned.clone(),
        );
        registry.register(
            "shard_moves",
            "Tenants taken from another replica, by reason",
            self.moves.clone(),
        );
        registry.register(
            "tenant_handover_seconds",
            "From taking a tenant's Lease to its caches listed and its queue open",
            self.handover.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ferry");
        let writes = Family::<Labels, Counter>::default();
        let synced = Family::<Labels, Gauge>::default();
        let queue_depth = Family::<Labels, Gauge>::default();
        let sync_latency = latency_buckets();
        let requests =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_buckets);
        let refusals = Family::<Labels, Counter>::default();
        // 100 µs to 3.3 s, by factors of √2: a p99 of a few milliseconds is read to within
        // one bucket of 40%.
        let own = Histogram::new(exponential_buckets(0.0001, std::f64::consts::SQRT_2, 31));
        let write_limit = Family::<Labels, Gauge>::default();
        let transform_time = Histogram::new(exponential_buckets(0.00002, 2.0, 16));
        let errors = Family::<Labels, Counter>::default();
        let leader = Gauge::default();
        let migrations = Family::<Labels, Counter>::default();
        let public_conflicts = Family::<Labels, Counter>::default();
        registry.register("writes", "Writes made, by cluster and verb", writes.clone());
        registry.register(
            "synced_objects",
            "Objects kept in sync, by tenant and kind",
            synced.clone(),
        );
        registry.register(
            "queue_depth",
            "Keys waiting, by tenant",
            queue_depth.clone(),
        );
        registry.register(
            "sync_latency_seconds",
            "From a change being noticed to the write that follows it",
            sync_latency.clone(),
        );
        registry.register(
            "request_seconds",
            "How long a cluster took to answer a write (or a read made with the writes), by cluster",
            requests.clone(),
        );
        registry.register(
            "own_seconds",
            "From a change being queued to its first write sent (ferry's own time)",
            own.clone(),
        );
        registry.register(
            "write_limit",
            "The adaptive limit on writes in flight, by cluster",
            write_limit.clone(),
        );
        registry.register(
            "refusals",
            "Objects refused, by tenant and reason",
            refusals.clone(),
        );
        registry.register(
            "transform_seconds",
            "Time translating objects of kinds with transforms",
            transform_time.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed and are retried, by tenant",
            errors.clone(),
        );
        registry.register("leader", "1 while this replica may write", leader.clone());
        registry.register(
            "migrations",
            "Tenant namespaces moved to another super cluster, by tenant",
            migrations.clone(),
        );
        registry.register(
            "public_conflicts",
            "Public objects of one name in several super clusters, by kind",
            public_conflicts.clone(),
        );
        let shard = ShardMetrics::new();
        shard.register(&mut registry);
        let reachable = Family::<Labels, Gauge>::default();
        registry.register(
            "cluster_reachable",
            "1 when a cluster answered ferry's last request, 0 when it did not, by cluster",
            reachable.clone(),
        );
        Self {
            registry,
            shard,
            reachable,
            writes,
            synced,
            queue_depth,
            sync_latency,
            requests,
            own,
            write_limit,
            refusals,
            transform_time,
            errors,
            leader,
            migrations,
            public_conflicts,
        }
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// What `/readyz` reports: ready or not, and why.
pub type Readiness = Arc<dyn Fn() -> (bool, String) + Send + Sync>;

/// Binds `address` and serves `/metrics`, `/healthz` (`health`) and `/readyz` (`readiness`)
/// until the task is aborted.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    health: Readiness,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            let readiness = readiness.clone();
            let health = health.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut len = 0;
                // The request line is all that matters; read until the end of the headers.
                while len < buf.len() {
                    match tokio::time::timeout(
                        std::time::Duration::from_secs(5),
                        stream.read(&mut buf[len..]),
                    )
                    .await
                    {
                        Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                        Ok(Ok(n)) => len += n,
                    }
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let request = String::from_utf8_lossy(&buf[..len]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let path = path.split('?').next().unwrap_or(path);
                let probe = |(ok, why): (bool, String), failing: &str| match ok {
                    true => ("200 OK", "text/plain", format!("ok\n{why}")),
                    false => (
                        "503 Service Unavailable",
                        "text/plain",
                        format!("{failing}\n{why}"),
                    ),
                };
                let (status, content_type, body) = match path {
                    "/metrics" => (
                        "200 OK",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        metrics.render(),
                    ),
                    "/healthz" | "/livez" => probe(health(), "unhealthy"),
                    "/readyz" => probe(readiness(), "not ready"),
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok((bound, task))
}
