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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::sandbox::Sandbox;
use tokio::sync::watch;

use ferry_core::config::Config;
use ferry_core::policy::Policy;

use crate::leader::Elector;
use crate::metrics::{Metrics, Readiness};
use crate::queue::Queues;
use crate::state::{NotSynced, Shared};
use crate::tenant_secrets::SecretTenants;
use crate::tenants::{follow, Running, ShardLink};
use crate::workers::{work, PER_TENANT, SHARING, WORKERS};
use crate::write::{Gate, Sharded};

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
    Connect(#[from] crate::client::Error),
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
    /// This replica's identity cannot name a Lease.
    #[error("identity {identity:?}: {why} (give --identity)")]
    Identity {
        /// The identity.
        identity: String,
        /// Why not.
        why: String,
    },
    /// `--leader-elect` with sharding.
    #[error("{0}: --leader-elect and sharding are exclusive: with sharding every replica writes for its own tenants")]
    LeaderAndSharding(String),
    /// Sharding stopped this replica.
    #[error("{0}")]
    Shard(#[from] crate::shard::Error),
    /// A tenant (or ferry itself) could own the operator namespace a placed kind's copies go
    /// to.
    #[error("{config}: {tenant:?} could own {namespace:?}, where the policy places copies of every tenant's objects (placement.namespace): ferry's own namespaces and every tenant's are never an operator's")]
    PlacementOwned {
        /// The configuration file.
        config: String,
        /// The tenant.
        tenant: String,
        /// The operator's namespace.
        namespace: String,
    },
    /// Two entries of `supers` reach the same cluster.
    #[error("{config}: supers {a:?} and {b:?} are the same cluster (their kube-system namespaces have one uid); each super cluster is listed once")]
    SameCluster {
        /// The configuration file.
        config: String,
        /// One name.
        a: String,
        /// The other.
        b: String,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How `ferry run` was asked to run.
pub struct Options {
    /// The SyncConfig file.
    pub config: PathBuf,
    /// Elect a leader even if the file does not ask for it.
    pub leader_elect: bool,
    /// This replica's name (else the pod's, else hostname-pid).
    pub identity: Option<String>,
    /// Where transforms run.
    pub sandbox: Sandbox,
}

/// Raises the soft limit of open files to the hard one (as Go programs do at start): every
/// watch is a connection of its own, so a process syncing many tenants of many kinds holds
/// tens of thousands.
fn raise_open_files() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "the open files limit stays where it was");
        }
    }
}

/// This replica's name in the Leases, Events and every request's User-Agent: `--identity`,
/// else the pod name (`POD_NAME`, or the host name inside a pod), else hostname-pid.
fn identity(given: Option<&str>) -> Result<String> {
    let host = || {
        std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .filter(|h| !h.is_empty())
    };
    let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let identity = match given {
        Some(given) => given.to_string(),
        None => match std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
            Some(pod) => pod,
            None => match host() {
                Some(host) if in_pod => sanitized(&host),
                host => format!(
                    "{}-{}",
                    sanitized(&host.unwrap_or_else(|| "ferry".into())),
                    std::process::id()
                ),
            },
        },
    };
    match ferry_core::shard::identity_problem(&identity) {
        Some(why) => Err(Error::Identity { identity, why }),
        None => Ok(identity),
    }
}

/// A host name as a Lease name part: lowercase, other characters `-`.
fn sanitized(host: &str) -> String {
    let text: String = host
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let text = text.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if text.is_empty() {
        "ferry".into()
    } else {
        text.chars().take(200).collect()
    }
}

/// Refuses two entries of `supers` that reach one cluster (by the uid of its kube-system
/// namespace): each would delete the other's super namespaces as a copy in a super that no
/// longer hosts them. A super that cannot be asked now is not checked.
async fn same_clusters(
    config: &std::path::Path,
    supers: &[(ferry_core::config::SuperConfig, crate::client::Clients)],
) -> Result<()> {
    if supers.len() < 2 {
        return Ok(());
    }
    let mut seen: Vec<(String, String)> = Vec::new();
    for (s, clients) in supers {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(clients.requests.clone());
        let uid = match api.get("kube-system").await {
            Ok(ns) => ns.metadata.uid.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(cluster = %s.name, error = %e, "could not tell which cluster this super is");
                continue;
            }
        };
        if let Some((other, _)) = seen.iter().find(|(_, u)| *u == uid && !uid.is_empty()) {
            return Err(Error::SameCluster {
                config: config.display().to_string(),
                a: other.clone(),
                b: s.name.clone(),
            });
        }
        seen.push((s.name.clone(), uid));
    }
    Ok(())
}

/// Refuses a policy that places copies into ferry's own namespaces or into one a tenant could
/// own.
fn placement_checks(options: &Options, config: &Config, policy: &Policy) -> Result<()> {
    let own = config.own_namespaces();
    if let Some(ns) = policy
        .placement_namespaces()
        .into_iter()
        .find(|ns| own.contains(ns))
    {
        return Err(Error::PlacementOwned {
            config: options.config.display().to_string(),
            tenant: "ferry".into(),
            namespace: ns,
        });
    }
    if let Some((tenant, ns)) = config.tenants.iter().find_map(|t| {
        policy
            .placement_owned_by(t.name.as_str())
            .map(|ns| (t.name.as_str(), ns))
    }) {
        return Err(Error::PlacementOwned {
            config: options.config.display().to_string(),
            tenant: tenant.to_string(),
            namespace: ns,
        });
    }
    Ok(())
}

/// How this replica may write: leader election, sharding, or alone.
struct Writing {
    gate: Gate,
    leader_tx: watch::Sender<bool>,
    elect: bool,
    channels: Option<crate::shard::Channels>,
}

impl Writing {
    fn new(options: &Options, config: &Config) -> Result<Self> {
        let (leader_tx, leader_rx) = watch::channel(false);
        let elect = options.leader_elect || config.leader_election.enabled;
        let channels = match &config.sharding {
            Some(_) if elect => {
                return Err(Error::LeaderAndSharding(
                    options.config.display().to_string(),
                ))
            }
            Some(sh) => Some(crate::shard::Channels::new(sh.lease_duration)),
            None => None,
        };
        if !elect {
            leader_tx.send_replace(true);
        }
        let gate = Gate {
            leader: leader_rx,
            sharded: channels.as_ref().map(|c| Sharded {
                fence: c.fence.clone(),
                owned: c.owned.clone(),
            }),
        };
        Ok(Self {
            gate,
            leader_tx,
            elect,
            channels,
        })
    }
}

/// Clients of every super cluster in `config`, checked to reach distinct clusters.
async fn connect(
    options: &Options,
    config: &Config,
) -> Result<Vec<(ferry_core::config::SuperConfig, crate::client::Clients)>> {
    let mut supers = Vec::new();
    for s in &config.supers {
        supers.push((
            s.clone(),
            crate::client::super_clients(s.kubeconfig.as_deref()).await?,
        ));
    }
    same_clusters(&options.config, &supers).await?;
    Ok(supers)
}

/// This replica's sharding, when `config` shards: Leases in the first super cluster
/// (`clients`).
fn sharding(
    config: &Config,
    writing: &Writing,
    clients: &crate::client::Clients,
    identity: &str,
    shared: &Arc<Shared>,
) -> Option<crate::shard::Shard> {
    let (sh, channels) = config.sharding.as_ref().zip(writing.channels.as_ref())?;
    let leases = crate::shard::Leases::new(
        clients.requests.clone(),
        &sh.namespace,
        i32::try_from(sh.lease_duration.as_secs()).unwrap_or(i32::MAX),
    );
    Some(crate::shard::Shard::new(
        leases,
        identity.to_string(),
        sh.lease_duration,
        channels,
        shared.clone(),
    ))
}

/// Sharded: the fence shut, the membership released, every tenant drained and released;
/// the drain is bounded by a third of the `lease`, and releases take a request each.
async fn release_shard(
    task: Option<tokio::task::JoinHandle<Result<(), crate::shard::Error>>>,
    lease: Option<Duration>,
    stop_tx: &watch::Sender<bool>,
) {
    if let Some(task) = task.filter(|t| !t.is_finished()) {
        stop_tx.send_replace(true);
        let lease = lease.unwrap_or_default();
        let _ = tokio::time::timeout(lease / 3 + Duration::from_secs(20), task).await;
    }
}

/// Runs until SIGTERM or Ctrl-C.
pub async fn run(options: Options) -> Result<()> {
    raise_open_files();
    let config = ferry_core::config::load(&options.config)?;
    let policy = Arc::new(ferry_core::policy::load(&config.policy)?);
    placement_checks(&options, &config, &policy)?;
    let identity = identity(options.identity.as_deref())?;
    let writing = Writing::new(&options, &config)?;
    // A sharded replica's writes time out before its membership can expire.
    let timeout = config
        .sharding
        .as_ref()
        .map_or(crate::client::REQUEST_TIMEOUT, |s| s.lease_duration / 3);
    crate::client::identify(&identity, timeout);
    let supers = connect(&options, &config).await?;
    // The Leases live in the first super cluster.
    let super_clients = supers[0].1.clone();
    let metrics = Arc::new(Metrics::default());
    let queues =
        Arc::new(Queues::new(PER_TENANT, Some(metrics.queue_depth.clone())).sharing(SHARING));
    let shared = Shared::new(
        policy.clone(),
        Arc::new(options.sandbox),
        supers,
        &config,
        metrics.clone(),
        writing.gate.clone(),
        queues,
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let config_lease = config.sharding.as_ref().map(|s| s.lease_duration);
    let shard = sharding(&config, &writing, &super_clients, &identity, &shared);
    let probes = Probes {
        shared: Arc::downgrade(&shared),
        identity: identity.clone(),
        shard: shard.as_ref().map(|s| s.status.clone()),
    };
    let (address, server) = probes
        .serve(config.metrics_address, metrics.clone())
        .await?;
    tracing::info!(
        config = %options.config.display(),
        policy = %config.policy.display(),
        kinds = policy.resources.len(),
        tenants = config.tenants.len(),
        metrics = %format!("http://{address}/metrics"),
        identity = %identity,
        sharded = shard.is_some(),
        "ferry running"
    );
    let elector = writing.elect.then(|| {
        let elector = Elector::new(
            super_clients.requests.clone(),
            &config.leader_election.namespace,
            &config.leader_election.lease,
            identity.clone(),
        );
        tokio::spawn(elector.run(writing.leader_tx.clone(), stop_rx.clone()))
    });
    let on_leader = tokio::spawn(on_leadership(shared.clone()));
    let running = Running {
        shared: shared.clone(),
        identity: identity.clone(),
        shard: writing.channels.as_ref().map(|c| ShardLink {
            owned: c.owned.clone(),
            candidates: c.candidates.clone(),
            members: c.members.clone(),
        }),
    };
    let mut shard_task = shard.map(|s| tokio::spawn(s.run(stop_rx.clone())));
    let engine = Engine::start(
        shared.clone(),
        options.config.clone(),
        config,
        running,
        &super_clients,
    )
    .await;
    let stopped = wait(shard_task.as_mut()).await;
    engine.stop_outer();
    release_shard(shard_task, config_lease, &stop_tx).await;
    engine.finish(elector, &stop_tx).await;
    on_leader.abort();
    server.abort();
    stopped
}

/// Waits for SIGTERM or Ctrl-C, or for sharding to stop this replica (an error).
async fn wait(
    shard: Option<&mut tokio::task::JoinHandle<Result<(), crate::shard::Error>>>,
) -> Result<()> {
    let Some(shard) = shard else {
        return wait_for_signal().await;
    };
    tokio::select! {
        signal = wait_for_signal() => signal,
        ended = shard => match ended {
            Ok(Err(e)) => {
                tracing::error!(error = %e, "sharding stopped this replica");
                Err(e.into())
            }
            _ => Ok(()),
        },
    }
}

/// Leadership gained: looks at everything again (another replica may have left work).
async fn on_leadership(shared: Arc<Shared>) {
    let mut leader = shared.leader.clone();
    loop {
        let is_leader = *leader.borrow_and_update();
        shared.metrics.leader.set(i64::from(is_leader));
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
}

/// The tasks that work: tenants from Secrets, workers, the patrol, the configuration
/// follower.
struct Engine {
    shared: Arc<Shared>,
    secrets: Option<tokio::task::JoinHandle<()>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    patrol: tokio::task::JoinHandle<()>,
    follower: tokio::task::JoinHandle<()>,
}

impl Engine {
    async fn start(
        shared: Arc<Shared>,
        path: PathBuf,
        config: Config,
        mut running: Running,
        super_clients: &crate::client::Clients,
    ) -> Self {
        // Tenants from kubeconfig Secrets in the first super cluster.
        let secrets = config.tenant_secrets.clone().map(|ts| {
            let tenants = Arc::new(SecretTenants::default());
            let task = tokio::spawn(crate::tenant_secrets::watch(
                super_clients.watch.clone(),
                ts,
                tenants.clone(),
            ));
            (tenants, super_clients.requests.clone(), task)
        });
        let follow_secrets = secrets.as_ref().map(|(t, c, _)| (t.clone(), c.clone()));
        crate::tenants::apply_all(&mut running, &config, follow_secrets.as_ref()).await;
        let workers = (0..WORKERS)
            .map(|_| tokio::spawn(work(shared.clone())))
            .collect();
        let patrol = tokio::spawn(patrol(shared.clone(), config.patrol_interval));
        let follower = tokio::spawn(follow(path, config, running, follow_secrets));
        Self {
            shared,
            secrets: secrets.map(|(_, _, task)| task),
            workers,
            patrol,
            follower,
        }
    }

    /// Stops what starts new work: the patrol, the follower, the Secrets' watch.
    fn stop_outer(&self) {
        tracing::info!("shutting down: finishing the reconciles in flight");
        self.patrol.abort();
        self.follower.abort();
        if let Some(task) = &self.secrets {
            task.abort();
        }
    }

    /// Finishes the reconciles in flight (10 s at most), releases the lease (`stop`), stops
    /// every tenant.
    async fn finish(
        mut self,
        elector: Option<tokio::task::JoinHandle<()>>,
        stop: &watch::Sender<bool>,
    ) {
        let shared = &self.shared;
        shared.queues.close();
        // Together: a standby replica's workers wait for leadership and end only when aborted.
        let finishing = futures::future::join_all(self.workers.iter_mut());
        if tokio::time::timeout(Duration::from_secs(10), finishing)
            .await
            .is_err()
        {
            for w in &self.workers {
                w.abort();
            }
        }
        stop.send_replace(true);
        if let Some(elector) = elector {
            let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
        }
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
    }
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

/// `/readyz` and `/healthz`.
struct Probes {
    shared: std::sync::Weak<Shared>,
    identity: String,
    shard: Option<Arc<crate::shard::Status>>,
}

impl Probes {
    /// Serves them with `/metrics` at `address`.
    async fn serve(
        self,
        address: std::net::SocketAddr,
        metrics: Arc<Metrics>,
    ) -> Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
        let this = Arc::new(self);
        let ready: Readiness = {
            let this = this.clone();
            Arc::new(move || this.ready())
        };
        let health: Readiness = {
            let this = this.clone();
            Arc::new(move || match &this.shard {
                Some(status) => status.health(),
                None => (true, String::new()),
            })
        };
        crate::metrics::serve(address, metrics, ready, health)
            .await
            .map_err(|source| Error::Metrics { address, source })
    }

    fn ready(&self) -> (bool, String) {
        let Some(shared) = self.shared.upgrade() else {
            return (false, "shutting down".into());
        };
        let (ready, lines) = readiness(&shared);
        match &self.shard {
            // Not ready before the membership is held (another process may hold this identity).
            Some(status) => {
                let line = status.describe(&self.identity, shared.all_tenants().len());
                (ready && status.member(), format!("{line}\n{lines}"))
            }
            None => (ready, lines),
        }
    }
}

/// Ready when the super cluster's and every tenant's caches are listed.
fn readiness(shared: &Shared) -> (bool, String) {
    let mut lines = Vec::new();
    let mut ready = shared.ready();
    for s in shared.supers.each() {
        let state = if s.ready() { "watching" } else { "listing" };
        lines.push(format!("{} (super cluster): {state}", s.name));
        for cache in &s.caches {
            if cache.phase() == crate::cache::Phase::NotServed {
                lines.push(format!("{}: not served (retrying)", cache.what));
            }
        }
    }
    for tenant in shared.all_tenants() {
        let refused = tenant
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // A tenant from a Secret (which anyone with that Secret could point anywhere) never
        // holds the whole engine unready.
        let from_file = matches!(tenant.source, crate::tenant_secrets::Source::File(_));
        if let Some(why) = refused {
            // Names bound to another cluster are the tenant's own refusal, not the engine's.
            ready &= !from_file || matches!(why, NotSynced::OtherCluster(_));
            lines.push(format!("{}: not synced ({why})", tenant.name));
        } else if tenant.primed() {
            lines.push(format!("{}: syncing", tenant.name));
        } else {
            ready &= !from_file;
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
