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

use crate::leader::Elector;
use crate::metrics::{Metrics, Readiness};
use crate::queue::Queues;
use crate::state::{NotSynced, Shared};
use crate::tenant_secrets::SecretTenants;
use crate::tenants::{follow, Running};
use crate::workers::{work, PER_TENANT, SHARING, WORKERS};

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
    /// Where transforms run.
    pub sandbox: Sandbox,
}

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

/// Runs until SIGTERM or Ctrl-C.
pub async fn run(options: Options) -> Result<()> {
    let config = ferry_core::config::load(&options.config)?;
    let policy = Arc::new(ferry_core::policy::load(&config.policy)?);
    let own: Vec<&str> = std::iter::once(config.leader_election.namespace.as_str())
        .chain(config.tenant_secrets.as_ref().map(|t| t.namespace.as_str()))
        .collect();
    if let Some(ns) = policy
        .placement_namespaces()
        .into_iter()
        .find(|ns| own.contains(&ns.as_str()))
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
    let mut supers = Vec::new();
    for s in &config.supers {
        supers.push((
            s.clone(),
            crate::client::super_clients(s.kubeconfig.as_deref()).await?,
        ));
    }
    same_clusters(&options.config, &supers).await?;
    // The Lease lives in the first super cluster.
    let super_clients = supers[0].1.clone();
    let identity = identity();
    let metrics = Arc::new(Metrics::default());
    let (leader_tx, leader_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let elect = options.leader_elect || config.leader_election.enabled;
    let queues =
        Arc::new(Queues::new(PER_TENANT, Some(metrics.queue_depth.clone())).sharing(SHARING));
    let shared = Shared::new(
        policy.clone(),
        Arc::new(options.sandbox),
        supers,
        &config,
        metrics.clone(),
        leader_rx.clone(),
        queues,
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
            super_clients.requests.clone(),
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
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|_| tokio::spawn(work(shared.clone())))
        .collect();
    let patrol = tokio::spawn(patrol(shared.clone(), config.patrol_interval));
    let follower = tokio::spawn(follow(
        options.config.clone(),
        config,
        running,
        follow_secrets,
    ));
    wait_for_signal().await?;
    tracing::info!("shutting down: finishing the reconciles in flight");
    patrol.abort();
    follower.abort();
    if let Some((_, _, task)) = &secrets {
        task.abort();
    }
    shared.queues.close();
    // Together: a standby replica's workers wait for leadership and end only when aborted.
    let finishing = futures::future::join_all(workers.iter_mut());
    if tokio::time::timeout(Duration::from_secs(10), finishing)
        .await
        .is_err()
    {
        for w in &workers {
            w.abort();
        }
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
    for s in &shared.supers {
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
