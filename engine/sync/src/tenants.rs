//! The tenants supervisor: starts, primes, restarts and stops tenants so that exactly the
//! configured ones run (the file's and the kubeconfig Secrets'), and follows edits of the
//! configuration file and changes of the Secrets.
//!
//! ```text
//!  SyncConfig tenants ─▶ apply ─┬─ new: connect ─▶ TenantState::start ─▶ prime ─▶ open queue
//!  tenantSecrets ───────────────┤  (merged: a Secret's tenant never displaces a static one)
//!                               ├─ kubeconfig changed (file path, Secret content): stop, start again
//!                               └─ gone: stop (its super objects stay)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::config::{Config, TenantConfig};
use ferry_core::translate::Reason;

use tokio::sync::watch;

use crate::binding;
use crate::cache::Owned;
use crate::deps;
use crate::metrics::labels;
use crate::state::{NotSynced, Shared, TenantState};
use crate::tenant_secrets::{merge, report, SecretTenants, Source, Wanted};

/// How often the configuration file is read for changes.
const CONFIG_POLL: Duration = Duration::from_secs(1);

/// Waits for the tenant's and the super cluster's caches, checks which cluster the tenant is
/// (never a super's or another tenant's, and the one its super namespaces are bound to),
/// awaits the references of the tenant's listed objects (so that no dependency is collected
/// for want of a referrer not yet reconciled), then opens the tenant's queue with every key
/// in it. `identity` names this replica in Events.
pub async fn prime(shared: Arc<Shared>, tenant: Arc<TenantState>, identity: String) {
    // A sharded replica's super caches hold the copies of the tenants it owns: they must
    // have listed with this one among them.
    let generation = shared
        .gate
        .sharded
        .as_ref()
        .map_or(0, |s| s.owned.borrow().generation);
    while !(tenant.listed() && shared.ready() && shared.listed_since(generation)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A tenant whose cluster is a super cluster, or another running tenant's, would copy
    // ferry's own copies (or fight the other over one cluster): it is never synced.
    loop {
        match same_cluster(&shared, &tenant).await {
            Ok(None) => break,
            Ok(Some(why)) => {
                tracing::error!(tenant = %tenant.name, "tenant not synced: {why}");
                *tenant.refused.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(NotSynced::SameCluster(why));
                return;
            }
            Err(e) => {
                tracing::warn!(tenant = %tenant.name, error = %e, "cannot tell which cluster the tenant is yet; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    bound_here(&shared, &tenant, &identity).await;
    deps::await_referrers(&shared, &tenant);
    tenant.set_primed();
    shared.resync(&tenant);
    shared.queues.open(&tenant.name);
    tracing::info!(tenant = %tenant.name, "tenant listed; syncing");
}

/// How often a tenant refused for names bound to another cluster looks again whether an admin
/// released them (a read of the super namespace caches).
const RELEASE_POLL: Duration = Duration::from_secs(2);

/// Returns once none of `tenant`'s super namespaces is bound to another cluster than the one
/// it runs from (`binding.rs`). Until then the tenant is refused: a log line and the refusal
/// metric once, an Event `OutsideTenant` on each such super namespace (published by the
/// leader), `/readyz` saying why.
async fn bound_here(shared: &Shared, tenant: &TenantState, identity: &str) {
    let Some(cluster) = tenant.cluster.get().cloned() else {
        return;
    };
    let mut published = BTreeSet::new();
    let mut refused = false;
    loop {
        let mut bound = Vec::new();
        for (i, s) in shared.supers.iter() {
            s.namespaces.each_metadata(|ns| {
                let found = binding::conflicts(std::iter::once(ns), &tenant.name, &cluster);
                bound.extend(found.into_iter().map(|b| (i, b)));
            });
        }
        if bound.is_empty() {
            break;
        }
        let all: Vec<binding::Bound> = bound.iter().map(|(_, b)| b.clone()).collect();
        let why = binding::refusal_message(&tenant.name, &cluster, &all);
        if !refused {
            refused = true;
            tracing::error!(tenant = %tenant.name, reason = Reason::OutsideTenant.as_str(), "tenant not synced: {why}");
            shared
                .metrics
                .refusals
                .get_or_create(&labels(&[
                    ("tenant", &tenant.name),
                    ("reason", Reason::OutsideTenant.as_str()),
                ]))
                .inc();
        }
        *tenant.refused.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(NotSynced::OtherCluster(why.clone()));
        for (i, b) in &bound {
            if published.contains(&(*i, b.name.clone())) {
                continue;
            }
            let writer = &shared.supers[*i].writer;
            let regarding = (b.name.as_str(), b.uid.as_str());
            let reason = Reason::OutsideTenant.as_str();
            match writer
                .namespace_event(identity, regarding, reason, &why)
                .await
            {
                Ok(()) => {
                    published.insert((*i, b.name.clone()));
                }
                Err(e) => {
                    tracing::debug!(tenant = %tenant.name, namespace = %b.name, error = %e, "Event not published");
                }
            }
        }
        tokio::time::sleep(RELEASE_POLL).await;
    }
    if refused {
        *tenant.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::info!(tenant = %tenant.name, cluster = %cluster, "the tenant's super namespaces were released; they are bound to this cluster as they are synced");
    }
}

/// Why `tenant`'s cluster may not be synced as a tenant: it is a super cluster, or (for a
/// tenant from a Secret) another running tenant's; by the uid of kube-system.
async fn same_cluster(
    shared: &Shared,
    tenant: &TenantState,
) -> Result<Option<String>, crate::write::Error> {
    let uid = tenant.writer.cluster_uid().await?;
    for s in shared.supers.each() {
        if s.cluster_uid().await? == uid {
            return Ok(Some(format!(
                "its kubeconfig reaches super cluster {}",
                s.name
            )));
        }
    }
    // Tenants of the configuration file may share an API server (the admin says so); one from
    // a Secret may not reach a cluster another tenant runs from.
    let from_secret = matches!(tenant.source, crate::tenant_secrets::Source::Secret { .. });
    let _ = tenant.cluster.set(uid.clone());
    if let Some(other) = shared.all_tenants().iter().find(|t| {
        from_secret && t.name != tenant.name && t.cluster.get() == Some(&uid) && t.primed()
    }) {
        return Ok(Some(format!(
            "its kubeconfig reaches the cluster of tenant {}",
            other.name
        )));
    }
    Ok(None)
}

/// The running tenants and how to change them.
pub struct Running {
    /// The engine.
    pub shared: Arc<Shared>,
    /// This replica's name (in Events).
    pub identity: String,
    /// With sharding: the tenants this replica owns, and where the configured ones are sent.
    pub shard: Option<ShardLink>,
}

/// What the supervisor of a sharded replica shares with its sharding (`shard.rs`).
pub struct ShardLink {
    /// The tenants this replica owns: only they run.
    pub owned: watch::Receiver<Owned>,
    /// The tenants configured (the file's and the Secrets').
    pub candidates: watch::Sender<Vec<String>>,
    /// The live members (this one among them once it renews).
    pub members: watch::Receiver<Vec<String>>,
}

impl Running {
    /// Starts, restarts and stops tenants so that exactly `wanted` run (with sharding, those
    /// of them this replica owns).
    pub async fn apply(&mut self, wanted: &[Wanted]) {
        let owned = self.shard.as_ref().map(|link| {
            let names: Vec<String> = wanted.iter().map(|w| w.name.as_str().to_string()).collect();
            link.candidates.send_if_modified(|c| {
                let changed = *c != names;
                *c = names;
                changed
            });
            link.owned.borrow().tenants.clone()
        });
        let wanted: Vec<Wanted> = wanted
            .iter()
            .filter(|w| owned.as_ref().is_none_or(|o| o.contains(w.name.as_str())))
            .cloned()
            .collect();
        let wanted = wanted.as_slice();
        let current: Vec<(Arc<str>, Source)> = self
            .shared
            .all_tenants()
            .iter()
            .map(|t| (t.name.clone(), t.source.clone()))
            .collect();
        for (name, source) in &current {
            let keep = wanted
                .iter()
                .any(|w| w.name.as_str() == &**name && &w.source == source);
            if !keep {
                self.stop(name);
            }
        }
        let mut failed = BTreeMap::new();
        for w in wanted {
            if self.shared.tenant(w.name.as_str()).is_some() {
                continue;
            }
            let clients = match (&w.source, &w.kubeconfig) {
                (Source::File(path), _) => crate::client::clients(path).await,
                (source, Some(kubeconfig)) => {
                    crate::client::clients_from(&source.to_string(), (**kubeconfig).clone()).await
                }
                (source, None) => Err(crate::client::Error {
                    path: source.to_string(),
                    message: "no kubeconfig".into(),
                }),
            };
            match clients {
                Ok(clients) => {
                    let tenant = TenantState::start(
                        &self.shared,
                        w.name.clone(),
                        &w.domains,
                        clients,
                        w.source.clone(),
                        &self.identity,
                    );
                    tenant.own(tokio::spawn(prime(
                        self.shared.clone(),
                        tenant.clone(),
                        self.identity.clone(),
                    )));
                    self.shared
                        .tenants
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(tenant.name.clone(), tenant);
                    tracing::info!(tenant = %w.name.as_str(), kubeconfig = %w.source, "tenant added");
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

/// Reads the configuration file every second, and looks at the tenants of the Secrets
/// (`secrets`, with the client of the cluster they are in); tenant changes take effect at
/// once, other changes need a restart (and say so).
pub async fn follow(
    path: PathBuf,
    mut config: Config,
    mut running: Running,
    secrets: Option<(Arc<SecretTenants>, kube::Client)>,
) {
    let mut last = std::fs::read(&path).unwrap_or_default();
    let mut seen = 0;
    let mut owned = running.shard.as_ref().map(|s| s.owned.clone());
    loop {
        let generation = secrets.as_ref().map_or(0, |(s, _)| s.generation());
        if generation != seen {
            seen = generation;
            apply_all(&mut running, &config, secrets.as_ref()).await;
        }
        // A change of ownership applies at once.
        if let Some(rx) = owned.as_mut() {
            tokio::select! {
                _ = tokio::time::sleep(CONFIG_POLL) => {}
                changed = rx.changed() => {
                    if changed.is_ok() {
                        apply_all(&mut running, &config, secrets.as_ref()).await;
                        continue;
                    }
                    owned = None;
                }
            }
        } else {
            tokio::time::sleep(CONFIG_POLL).await;
        }
        let Ok(now) = std::fs::read(&path) else {
            continue;
        };
        if now == last {
            continue;
        }
        last = now;
        match ferry_core::config::load(&path) {
            Ok(next) => {
                if differs_beyond_live(&config, &next) {
                    tracing::warn!(config = %path.display(), "only tenants, super labels, cordons and placement rules change while running; restart ferry to apply the other changes");
                } else {
                    running.shared.set_placement(crate::supers::Live {
                        configs: next.supers.clone(),
                        rules: next.placement.clone(),
                    });
                    config.supers = next.supers.clone();
                    config.placement = next.placement.clone();
                }
                config.tenants = next.tenants;
                apply_all(&mut running, &config, secrets.as_ref()).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not applied; the running one stays")
            }
        }
    }
}

/// Runs the static tenants of `config` and those of the Secrets; reports refused Secrets.
pub async fn apply_all(
    running: &mut Running,
    config: &Config,
    secrets: Option<&(Arc<SecretTenants>, kube::Client)>,
) {
    let policy = running.shared.policy.clone();
    let statics: Vec<TenantConfig> = config
        .tenants
        .iter()
        .filter(|t| match policy.placement_owned_by(t.name.as_str()) {
            Some(ns) => {
                tracing::error!(tenant = t.name.as_str(), namespace = %ns, "tenant not started: its namespace {:?} would map onto {ns:?}, where the policy places copies of every tenant's objects (placement.namespace); rename the tenant", &ns[t.name.as_str().len() + 1..]);
                false
            }
            None => true,
        })
        .cloned()
        .collect();
    let Some((secrets, client)) = secrets else {
        let wanted: Vec<Wanted> = statics.iter().map(Wanted::file).collect();
        running.apply(&wanted).await;
        return;
    };
    let running_now: Vec<(Arc<str>, Source)> = running
        .shared
        .all_tenants()
        .iter()
        .map(|t| (t.name.clone(), t.source.clone()))
        .collect();
    let owned: Vec<String> = config
        .own_namespaces()
        .into_iter()
        .chain(policy.placement_namespaces())
        .collect();
    let (wanted, mut refused) = merge(&statics, secrets, &running_now, &owned);
    running.apply(&wanted).await;
    // Sharded: each refused Secret is reported by one replica, its rendezvous owner.
    if let Some(link) = &running.shard {
        let members = link.members.borrow().clone();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        refused.retain(|(secret, _)| {
            let key = format!("secret/{}", secret.metadata.name.as_deref().unwrap_or(""));
            ferry_core::shard::owner(&key, &members) == Some(running.identity.as_str())
        });
    }
    report(client, &running.identity, secrets, &refused).await;
}

/// Whether `b` changes more than tenants, the supers' labels and cordons, and placement.
fn differs_beyond_live(a: &Config, b: &Config) -> bool {
    let strip = |c: &Config| Config {
        tenants: Vec::new(),
        placement: Vec::new(),
        supers: c
            .supers
            .iter()
            .map(|s| ferry_core::config::SuperConfig {
                labels: Default::default(),
                cordoned: false,
                ..s.clone()
            })
            .collect(),
        ..c.clone()
    };
    strip(a) != strip(b)
}
