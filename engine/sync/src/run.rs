//! `ferry run`: load the configuration, start the super cluster's watchers and every tenant,
//! serve metrics, elect a leader, work the queues, patrol, follow edits of the configuration,
//! and shut down cleanly on SIGTERM or Ctrl-C.
//!
//! ```text
//!  SyncConfig ─▶ Shared (super caches) ─┬─ TenantState × n (tenant caches) ─▶ prime ─▶ open queue
//!                                       ├─ workers × WORKERS ◀─ Queues (round-robin)
//!                                       ├─ patrol (every patrolInterval: resync every tenant)
//!                                       ├─ config follower (tenants added/removed live)
//!                                       └─ leader election ─▶ watch<bool> gates every write
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::config::{Config, TenantConfig};
use ferry_core::sandbox::Sandbox;
use tokio::sync::watch;

use crate::engine::{prime, Shared, TenantState};
use crate::leader::Elector;
use crate::metrics::{labels, Metrics, Readiness};
use crate::queue::Key;
use crate::reconcile::Reconciler;
use crate::write;

/// Why `ferry run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file is invalid.
    #[error("{0}")]
    Config(#[from] ferry_core::config::Error),
    /// The policy could not be loaded.
    #[error("{0}")]
    Policy(#[from] ferry_core::policy::Error),
    /// A kubeconfig could not be used.
    #[error("{0}")]
    Connect(#[from] crate::against::Error),
    /// The metrics address could not be bound.
    #[error("metrics address {address}: {source}")]
    Metrics {
        /// The address.
        address: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Signal handling could not be set up.
    #[error("signals: {0}")]
    Signals(std::io::Error),
}

impl Error {
    /// The short name used in reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Config(_) => "ConfigInvalid",
            Error::Policy(e) => e.reason(),
            Error::Connect(e) => e.reason(),
            Error::Metrics { .. } => "MetricsAddressInvalid",
            Error::Signals(_) => "SignalsUnavailable",
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How `ferry run` was asked to run.
pub struct Options {
    /// The SyncConfig file.
    pub config: PathBuf,
    /// Elect a leader even if the file does not ask for it.
    pub leader_elect: bool,
    /// Where transforms run.
    pub sandbox: Sandbox,
}

/// How many keys are reconciled at once.
const WORKERS: usize = 16;
/// How often the configuration file is read for changes.
const CONFIG_POLL: Duration = Duration::from_secs(1);
/// Retry backoff bounds for failed reconciles.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// This replica's name in the Lease and in Events.
fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ferry".into());
    format!("{host}-{}", std::process::id())
}

/// Runs until SIGTERM or Ctrl-C.
pub async fn run(options: Options) -> Result<()> {
    let config = ferry_core::config::load(&options.config)?;
    let policy = Arc::new(ferry_core::policy::load(&config.policy)?);
    let super_client = crate::against::connect(&config.super_kubeconfig).await?;
    let identity = identity();
    let metrics = Arc::new(Metrics::default());
    let (leader_tx, leader_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let elect = options.leader_elect || config.leader_election.enabled;
    let shared = Shared::new(
        policy.clone(),
        Arc::new(options.sandbox),
        super_client.clone(),
        metrics.clone(),
        leader_rx.clone(),
    );
    let readiness: Readiness = {
        let shared = Arc::downgrade(&shared);
        Arc::new(move || match shared.upgrade() {
            Some(shared) => readiness(&shared),
            None => (false, "shutting down".into()),
        })
    };
    let (address, server) =
        crate::metrics::serve(config.metrics_address, metrics.clone(), readiness)
            .await
            .map_err(|source| Error::Metrics {
                address: config.metrics_address,
                source,
            })?;
    tracing::info!(
        config = %options.config.display(),
        policy = %config.policy.display(),
        kinds = policy.resources.len(),
        tenants = config.tenants.len(),
        metrics = %format!("http://{address}/metrics"),
        identity = %identity,
        "ferry running"
    );
    let elector = if elect {
        let elector = Elector::new(
            super_client.clone(),
            &config.leader_election.namespace,
            &config.leader_election.lease,
            identity.clone(),
        );
        Some(tokio::spawn(
            elector.run(leader_tx.clone(), stop_rx.clone()),
        ))
    } else {
        leader_tx.send_replace(true);
        None
    };
    // Leadership gained: look at everything again (another replica may have left work).
    let on_leader = {
        let shared = shared.clone();
        let mut leader = leader_rx.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            loop {
                let is_leader = *leader.borrow_and_update();
                metrics.leader.set(i64::from(is_leader));
                if is_leader {
                    for tenant in shared.all_tenants() {
                        if tenant.primed() {
                            shared.resync(&tenant);
                        }
                    }
                }
                if leader.changed().await.is_err() {
                    break;
                }
            }
        })
    };
    let mut running = Running {
        shared: shared.clone(),
        identity: identity.clone(),
    };
    running.apply(&config.tenants).await;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| tokio::spawn(work(shared.clone())))
        .collect();
    let patrol = tokio::spawn(patrol(shared.clone(), config.patrol_interval));
    let follower = tokio::spawn(follow(options.config.clone(), config, running));
    wait_for_signal().await?;
    tracing::info!("shutting down: finishing the reconciles in flight");
    patrol.abort();
    follower.abort();
    shared.queues.close();
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
    }
    stop_tx.send_replace(true);
    if let Some(elector) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
    }
    on_leader.abort();
    server.abort();
    for tenant in shared.all_tenants() {
        tenant.stop();
        shared.queues.remove_tenant(&tenant.name);
    }
    shared
        .tenants
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signals)?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.map_err(Error::Signals)?,
    }
    Ok(())
}

/// Ready when the super cluster's and every tenant's caches are listed.
fn readiness(shared: &Shared) -> (bool, String) {
    let mut lines = Vec::new();
    let mut ready = shared.ready();
    if !shared.ready() {
        lines.push("super: listing".to_string());
    }
    for cache in shared.caches.iter() {
        if cache.phase() == crate::cache::Phase::NotServed {
            lines.push(format!("{}: not served (retrying)", cache.what));
        }
    }
    for tenant in shared.all_tenants() {
        if tenant.primed() {
            lines.push(format!("{}: syncing", tenant.name));
        } else {
            ready = false;
            lines.push(format!("{}: listing", tenant.name));
        }
        for cache in &tenant.caches {
            if cache.phase() == crate::cache::Phase::NotServed {
                lines.push(format!("{}: not served (retrying)", cache.what));
            }
        }
    }
    for (tenant, why) in shared
        .failed_tenants
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        lines.push(format!(
            "{tenant}: not started ({why}); fix the configuration file"
        ));
    }
    lines.push(String::new());
    (ready, lines.join("\n"))
}

/// The running tenants and how to change them.
struct Running {
    shared: Arc<Shared>,
    identity: String,
}

impl Running {
    /// Starts, restarts and stops tenants so that exactly `wanted` run.
    async fn apply(&mut self, wanted: &[TenantConfig]) {
        let current: Vec<(Arc<str>, PathBuf)> = self
            .shared
            .all_tenants()
            .iter()
            .map(|t| (t.name.clone(), t.kubeconfig.clone()))
            .collect();
        for (name, kubeconfig) in &current {
            let keep = wanted
                .iter()
                .any(|w| w.name.as_str() == &**name && &w.kubeconfig == kubeconfig);
            if !keep {
                self.stop(name);
            }
        }
        let mut failed = BTreeMap::new();
        for w in wanted {
            if self.shared.tenant(w.name.as_str()).is_some() {
                continue;
            }
            match crate::against::connect(&w.kubeconfig).await {
                Ok(client) => {
                    let tenant = TenantState::start(
                        &self.shared,
                        w.name.clone(),
                        client,
                        w.kubeconfig.clone(),
                        &self.identity,
                    );
                    tenant.own(tokio::spawn(prime(self.shared.clone(), tenant.clone())));
                    self.shared
                        .tenants
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(tenant.name.clone(), tenant);
                    tracing::info!(tenant = %w.name.as_str(), kubeconfig = %w.kubeconfig.display(), "tenant added");
                }
                Err(e) => {
                    tracing::error!(tenant = %w.name.as_str(), error = %e, "tenant not started");
                    failed.insert(w.name.as_str().to_string(), e.to_string());
                }
            }
        }
        *self
            .shared
            .failed_tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = failed;
    }

    fn stop(&self, name: &str) {
        self.shared.queues.remove_tenant(name);
        let removed = self
            .shared
            .tenants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(tenant) = &removed {
            tenant.stop();
            // Its copies in the super cluster stay: removing a tenant from the file stops
            // syncing it, it does not delete its workloads.
            tracing::info!(tenant = %name, "tenant removed; its super objects are left in place");
        }
    }
}

/// Reads the configuration file every second; tenant changes take effect at once, other
/// changes need a restart (and say so).
async fn follow(path: PathBuf, mut config: Config, mut running: Running) {
    let mut last = std::fs::read(&path).unwrap_or_default();
    loop {
        tokio::time::sleep(CONFIG_POLL).await;
        let Ok(now) = std::fs::read(&path) else {
            continue;
        };
        if now == last {
            continue;
        }
        last = now;
        match ferry_core::config::load(&path) {
            Ok(next) => {
                if differs_beyond_tenants(&config, &next) {
                    tracing::warn!(config = %path.display(), "only tenant changes apply while running; restart ferry to apply the other changes");
                }
                running.apply(&next.tenants).await;
                config.tenants = next.tenants;
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not applied; the running one stays")
            }
        }
    }
}

fn differs_beyond_tenants(a: &Config, b: &Config) -> bool {
    let strip = |c: &Config| Config {
        tenants: Vec::new(),
        ..c.clone()
    };
    strip(a) != strip(b)
}

/// Resyncs every primed tenant every `interval`.
async fn patrol(shared: Arc<Shared>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if !*shared.leader.borrow() {
            continue;
        }
        for tenant in shared.all_tenants() {
            if tenant.primed() {
                shared.resync(&tenant);
            }
        }
        tracing::debug!("patrol queued every key");
    }
}

/// One worker: takes keys in turn and reconciles them; failures are retried with backoff.
async fn work(shared: Arc<Shared>) {
    let mut leader = shared.leader.clone();
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        let Some((key, since)) = shared.queues.next().await else {
            return;
        };
        if let Some(tenant) = shared.tenant(&key.tenant) {
            let result = Reconciler::new(&shared, &tenant).reconcile(&key).await;
            finish(&shared, &key, since, result);
        }
        shared.queues.done(&key);
    }
}

fn finish(
    shared: &Arc<Shared>,
    key: &Key,
    since: std::time::Instant,
    result: std::result::Result<crate::reconcile::Outcome, write::Error>,
) {
    match result {
        Ok(outcome) => {
            shared
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
            if outcome.wrote {
                shared
                    .metrics
                    .sync_latency
                    .observe(since.elapsed().as_secs_f64());
            }
            if let Some(after) = outcome.again {
                later(shared, key.clone(), after);
            }
        }
        // Leadership moved: the new leader resyncs everything.
        Err(write::Error::NotLeader) => {}
        Err(e) => {
            let attempt = {
                let mut failures = shared.failures.lock().unwrap_or_else(|e| e.into_inner());
                let n = failures.entry(key.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let delay = BACKOFF_MIN
                .saturating_mul(1 << attempt.min(8))
                .min(BACKOFF_MAX);
            shared
                .metrics
                .errors
                .get_or_create(&labels(&[("tenant", &key.tenant)]))
                .inc();
            tracing::warn!(
                tenant = %key.tenant,
                key = %format!("{:?} {}/{}", key.kind, key.namespace, key.name),
                attempt,
                retry_in = ?delay,
                error = %e,
                "sync failed; retrying"
            );
            later(shared, key.clone(), delay);
        }
    }
}

fn later(shared: &Arc<Shared>, key: Key, after: Duration) {
    let queues = shared.queues.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        queues.add(key);
    });
}
