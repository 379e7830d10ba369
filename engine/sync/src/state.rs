//! The engine's state: the super clusters, every running tenant (its caches, naming map,
//! placements and ledger), the queues, and resync (every key of a tenant queued again).
//!
//! ```text
//!  Shared ── supers: Super × n (caches, namespaces, Writer) ── Catalog ── placement rules
//!    └─ tenants: TenantState × n ── tenant caches ── NameMap ── Ledger ── Writer (tenant)
//! ```

mod busy;
mod resync;

pub use busy::{Busy, InFlight};

use ferry_core::keys::LABEL_FROM_SUPER;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ferry_core::config::{Config, NamespaceLabels, PlatformNamespaces};
use ferry_core::naming::{NameMap, Tenant};
use ferry_core::policy::{Direction, Policy};
use ferry_core::sandbox::Sandbox;

use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{Cache, Labels};
use crate::client::Clients;
use crate::key::{slash, Key, Kind};
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::object::deleting;
use crate::placement::{Choices, Tenancy};
use crate::public::Catalog;
use crate::queue::Queues;
use crate::routing::tenant_router;
use crate::supers::{Live, Super, Supers};
use crate::watch::watch_all;
use crate::write::{Gate, Writer};

/// What the whole engine shares.
pub struct Shared {
    /// The approved kinds.
    pub policy: Arc<Policy>,
    /// Where transforms run.
    pub sandbox: Arc<Sandbox>,
    /// The super clusters, in config order (at least one), with their live configuration.
    pub supers: Supers,
    /// What the super clusters publish, for the guard's check of references to public kinds.
    pub public: Arc<Catalog>,
    /// Running tenants.
    pub tenants: RwLock<BTreeMap<Arc<str>, Arc<TenantState>>>,
    /// Work.
    pub queues: Arc<Queues>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica leads (always true without leader election).
    pub leader: watch::Receiver<bool>,
    /// What every writer checks before a write (leadership, or a sharded replica's fence).
    pub gate: Gate,
    /// Tenants of the configuration that could not be started, and why (retried on every
    /// edit of the file).
    pub failed_tenants: Mutex<BTreeMap<String, String>>,
    /// Transform calls in flight, at most one per CPU: more only adds worker processes that
    /// compete with each other (and with the API servers on a small machine).
    pub transforms: tokio::sync::Semaphore,
    /// Super namespaces ferry never creates, labels or writes into (every super's writer is
    /// fenced by them too).
    pub platform: Arc<PlatformNamespaces>,
    /// Which tenant namespace labels super namespaces carry.
    pub namespace_labels: NamespaceLabels,
}

impl Shared {
    /// Starts the super clusters' watchers; their changes go into `queues`. `config` gives
    /// the placement rules and what ferry may write into super namespaces.
    pub fn new(
        policy: Arc<Policy>,
        sandbox: Arc<Sandbox>,
        supers: Vec<(ferry_core::config::SuperConfig, Clients)>,
        config: &Config,
        metrics: Arc<Metrics>,
        gate: Gate,
        queues: Arc<Queues>,
    ) -> Arc<Self> {
        let live = Live {
            configs: supers.iter().map(|(c, _)| c.clone()).collect(),
            rules: config.placement.clone(),
        };
        let platform = Arc::new(config.platform_namespaces.clone());
        let writes = config.super_writes;
        let supers: Vec<Super> = supers
            .into_iter()
            .map(|(config, clients)| {
                Super::start(
                    &config,
                    clients,
                    &policy,
                    metrics.clone(),
                    gate.clone(),
                    queues.clone(),
                    platform.clone(),
                )
                .paced(writes)
            })
            .collect();
        Arc::new(Self {
            public: Arc::new(Catalog::new(
                &policy,
                &supers
                    .iter()
                    .map(|s| (s.caches.as_slice(), s.namespaces.clone()))
                    .collect::<Vec<_>>(),
            )),
            supers: Supers::new(supers, live),
            policy,
            sandbox,
            tenants: RwLock::default(),
            queues,
            metrics,
            leader: gate.leader.clone(),
            gate,
            failed_tenants: Mutex::default(),
            transforms: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            platform,
            namespace_labels: config.namespace_labels.clone(),
        })
    }

    /// Applies new labels, cordons and rules (same supers, same order) and looks at every
    /// tenant namespace again: those whose super is no longer a candidate move.
    pub fn set_placement(&self, live: Live) {
        if self.supers.set_live(live) {
            tracing::info!("placement changed; looking at every namespace again");
            for tenant in self.all_tenants() {
                self.resync(&tenant);
            }
        }
    }

    /// A running tenant.
    pub fn tenant(&self, name: &str) -> Option<Arc<TenantState>> {
        self.tenants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every running tenant.
    pub fn all_tenants(&self) -> Vec<Arc<TenantState>> {
        self.tenants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Whether every super cluster's caches are listed.
    pub fn ready(&self) -> bool {
        self.supers.each().all(Super::ready)
    }

    /// Whether every super cluster's caches of copies have listed at ownership generation
    /// `generation` or later (`cache::Labels::Owned`; always, without sharding).
    pub fn listed_since(&self, generation: u64) -> bool {
        self.supers
            .each()
            .all(|s| s.listed_since(&self.policy, generation))
    }

    /// `Kind namespace/name` of a key, for logs and messages.
    pub fn describe(&self, key: &Key) -> String {
        let kind = match key.kind {
            Kind::Resource(idx) => self.policy.resources[idx].group_kind.kind.as_str(),
            Kind::Namespace => "Namespace",
        };
        format!("{kind} {}", slash(&key.namespace, &key.name))
    }
}

/// Why a configured tenant is not synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotSynced {
    /// Its kubeconfig reaches a super cluster, or (a tenant from a Secret) another running
    /// tenant's cluster: a configuration to fix. A tenant of the file holds `/readyz` until
    /// it is fixed.
    SameCluster(String),
    /// Its super namespaces are bound to another cluster (`binding.rs`): refused until an
    /// admin releases them. Never holds `/readyz`: the other tenants sync meanwhile.
    OtherCluster(String),
}

impl std::fmt::Display for NotSynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotSynced::SameCluster(why) | NotSynced::OtherCluster(why) => f.write_str(why),
        }
    }
}

/// One running tenant.
pub struct TenantState {
    /// Its name.
    pub name: Arc<str>,
    /// Where its kubeconfig comes from (a change restarts the tenant).
    pub source: crate::tenant_secrets::Source,
    /// Writes into the tenant.
    pub writer: Writer,
    /// The tenant's caches, one per policy entry: every object of toSuper kinds, ferry's
    /// copies (label `ferry.dev/from-super=true`) of fromSuper and produced kinds.
    pub caches: Vec<Arc<Cache>>,
    /// The tenant's namespaces.
    pub namespaces: Arc<Cache>,
    /// Publishes Events on tenant objects.
    pub recorder: Recorder,
    names: RwLock<NameMap>,
    ledger: Mutex<Ledger>,
    /// Supers chosen for tenant namespaces before their super namespaces exist.
    pub choices: Choices,
    /// When the tenant was primed (its queue opened).
    primed_at: std::sync::OnceLock<std::time::Instant>,
    /// The uid of the tenant cluster's kube-system namespace: which cluster it is.
    pub cluster: std::sync::OnceLock<String>,
    /// Why the tenant is not synced although configured.
    pub refused: Mutex<Option<NotSynced>>,
    /// Whether it stopped, and its reconciles in flight.
    pub busy: Busy,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for TenantState {
    fn drop(&mut self) {
        self.stop();
    }
}

impl TenantState {
    /// Starts the watchers of a tenant. Its queue stays closed until it is primed.
    pub fn start(
        shared: &Shared,
        tenant: Tenant,
        domains: &[String],
        clients: Clients,
        source: crate::tenant_secrets::Source,
        identity: &str,
    ) -> Arc<Self> {
        let name: Arc<str> = tenant.as_str().into();
        shared.queues.add_tenant(name.clone());
        // The tenant side watches the tenant's own objects of toSuper kinds, ferry's copies of
        // fromSuper kinds and every namespace; a change is keyed by where it is.
        let watched = watch_all(
            &clients.watch,
            &shared.policy,
            &name,
            |resource| match resource.direction {
                // Never ferry's own copies: for a kind approved both ways they are the
                // fromSuper entry's, and they never go down.
                Direction::ToSuper => Labels::Fixed(Some(format!("{LABEL_FROM_SUPER}!=true"))),
                Direction::FromSuper | Direction::Produced => {
                    Labels::Fixed(Some(format!("{LABEL_FROM_SUPER}=true")))
                }
            },
            // Once checked, a tenant object is held as what flows up into it.
            crate::watch::flowing_up(&shared.policy),
            None,
            tenant_router(shared.queues.clone(), shared.policy.clone(), name.clone()),
        );
        let recorder = Recorder::new(
            clients.requests.clone(),
            Reporter {
                controller: "ferry".into(),
                instance: Some(identity.to_string()),
            },
        );
        Arc::new(Self {
            writer: Writer::new(
                clients.requests,
                tenant.as_str(),
                shared.metrics.clone(),
                shared.gate.clone(),
            ),
            names: RwLock::new(
                NameMap::new(tenant)
                    .with_domains(shared.policy.domains_of(&name).iter().chain(domains))
                    .with_platform(shared.platform.patterns())
                    .with_namespace_labels(shared.namespace_labels.patterns()),
            ),
            name,
            source,
            caches: watched.caches,
            namespaces: watched.namespaces,
            recorder,
            ledger: Mutex::default(),
            choices: Choices::default(),
            primed_at: Default::default(),
            cluster: Default::default(),
            refused: Mutex::default(),
            busy: Busy::default(),
            tasks: Mutex::new(watched.tasks),
        })
    }

    /// The tenant's naming map (with the hashed names it has learnt).
    pub fn names(&self) -> NameMap {
        self.names.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Learns a tenant namespace, so that its hashed super name can be inverted.
    pub fn learn(&self, namespace: &str) {
        let known = {
            let names = self.names.read().unwrap_or_else(|e| e.into_inner());
            names.to_tenant(&names.to_super(namespace)).as_deref() == Some(namespace)
        };
        if !known {
            self.names
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .learn(namespace);
        }
    }

    /// What placement reads of the tenant.
    pub fn tenancy(&self) -> Tenancy<'_> {
        Tenancy {
            name: &self.name,
            names: &self.names,
            namespaces: &self.namespaces,
            choices: &self.choices,
        }
    }

    /// The tenant's ledger.
    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the tenant namespace exists and is not being deleted.
    pub fn namespace_alive(&self, namespace: &str) -> bool {
        self.namespaces
            .get("", namespace)
            .is_some_and(|n| !deleting(&n))
    }

    /// The tenant's live namespaces, sorted.
    pub fn live_namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .namespaces
            .keys()
            .into_iter()
            .map(|(_, name)| name)
            .filter(|n| self.namespace_alive(n))
            .collect();
        all.sort_unstable();
        all
    }

    /// Whether the tenant's caches are listed and its references recorded.
    pub fn primed(&self) -> bool {
        self.primed_at.get().is_some()
    }

    /// Marks the tenant primed.
    pub fn set_primed(&self) {
        let _ = self.primed_at.set(std::time::Instant::now());
    }

    /// How long ago the tenant was primed (`None` before).
    pub fn primed_for(&self) -> Option<std::time::Duration> {
        self.primed_at.get().map(std::time::Instant::elapsed)
    }

    /// Whether the tenant's caches are listed.
    pub fn listed(&self) -> bool {
        self.namespaces.ready() && self.caches.iter().all(|c| c.ready())
    }

    /// Stops the tenant's watchers and its priming (which holds the tenant, so dropping the
    /// last handle alone would not end it while the tenant cannot be listed).
    pub fn stop(&self) {
        self.busy.stop();
        for task in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            task.abort();
        }
    }

    /// Keeps a task of this tenant (aborted with it).
    pub fn own(&self, task: JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }
}
