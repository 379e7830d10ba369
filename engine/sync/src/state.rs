//! The engine's state: the super cluster's caches, every running tenant (its caches, naming
//! map and ledger), the queues, and resync (every key of a tenant queued again).
//!
//! ```text
//!  Shared ── super caches (copies, public objects, namespaces) ── Catalog ── Writer (super)
//!    └─ tenants: TenantState × n ── tenant caches ── NameMap ── Ledger ── Writer (tenant)
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ferry_core::naming::{NameMap, Tenant};
use ferry_core::policy::{Direction, Policy, Scope};
use ferry_core::sandbox::Sandbox;
use ferry_core::translate::{LABEL_FROM_SUPER, LABEL_TENANT};
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{Cache, Reduce};
use crate::client::Clients;
use crate::key::{slash, Key, Kind};
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::object::{deleting, Ownership};
use crate::public::Catalog;
use crate::queue::Queues;
use crate::routing::{super_router, tenant_router};
use crate::watch::watch_all;
use crate::write::Writer;

/// What the whole engine shares.
pub struct Shared {
    /// The approved kinds.
    pub policy: Arc<Policy>,
    /// Where transforms run.
    pub sandbox: Arc<Sandbox>,
    /// Writes into the super cluster.
    pub writer: Writer,
    /// The super cluster's caches, one per policy entry: ferry's copies (label
    /// `ferry.dev/tenant`) for toSuper kinds, the selected objects for fromSuper kinds.
    pub caches: Vec<Arc<Cache>>,
    /// The super namespaces ferry owns.
    pub namespaces: Arc<Cache>,
    /// What the super cluster publishes, for the guard's check of references to public kinds.
    pub public: Arc<Catalog>,
    /// Running tenants.
    pub tenants: RwLock<BTreeMap<Arc<str>, Arc<TenantState>>>,
    /// Work.
    pub queues: Arc<Queues>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write.
    pub leader: watch::Receiver<bool>,
    /// Tenants of the configuration that could not be started, and why (retried on every
    /// edit of the file).
    pub failed_tenants: Mutex<BTreeMap<String, String>>,
    /// Transform calls in flight, at most one per CPU: more only adds worker processes that
    /// compete with each other (and with the API servers on a small machine).
    pub transforms: tokio::sync::Semaphore,
    watchers: Vec<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for task in &self.watchers {
            task.abort();
        }
    }
}

impl Shared {
    /// Starts the super cluster's watchers; their changes go into `queues`.
    pub fn new(
        policy: Arc<Policy>,
        sandbox: Arc<Sandbox>,
        clients: Clients,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
        queues: Arc<Queues>,
    ) -> Arc<Self> {
        // The super side watches ferry's copies (toSuper), the selected objects (fromSuper) and
        // ferry's namespaces; a change is routed by the ownership metadata it carries.
        let watched = watch_all(
            &clients.watch,
            &policy,
            "super",
            |resource| match resource.direction {
                Direction::ToSuper => Some(LABEL_TENANT.to_string()),
                Direction::FromSuper => Some(crate::public::selector(resource)),
            },
            // ferry's copies, once checked, are held as what flows up.
            |idx| {
                let policy = policy.clone();
                (policy.resources[idx].direction == Direction::ToSuper).then(|| {
                    let reduce: Reduce = Arc::new(move |fields| {
                        ferry_core::translate::flowing_up(&policy.resources[idx], fields)
                    });
                    reduce
                })
            },
            Some(LABEL_TENANT.to_string()),
            super_router(queues.clone(), policy.clone()),
        );
        Arc::new(Self {
            writer: Writer::new(clients.requests, "super", metrics.clone(), leader.clone()),
            public: Arc::new(Catalog::new(
                &policy,
                &watched.caches,
                watched.namespaces.clone(),
            )),
            policy,
            sandbox,
            caches: watched.caches,
            namespaces: watched.namespaces,
            tenants: RwLock::default(),
            queues,
            metrics,
            leader,
            failed_tenants: Mutex::default(),
            transforms: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            watchers: watched.tasks,
        })
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

    /// Whether the super cluster's caches are listed.
    pub fn ready(&self) -> bool {
        self.namespaces.ready() && self.caches.iter().all(|c| c.ready())
    }

    /// `Kind namespace/name` of a key, for logs and messages.
    pub fn describe(&self, key: &Key) -> String {
        let kind = match key.kind {
            Kind::Resource(idx) => self.policy.resources[idx].group_kind.kind.as_str(),
            Kind::Namespace => "Namespace",
        };
        format!("{kind} {}", slash(&key.namespace, &key.name))
    }

    /// Queues every key of `tenant`: its objects, ferry's copies of them, the public super
    /// objects, its namespaces and their super namespaces. The patrol and leadership changes
    /// call this; the reconciler then finds drift and orphans.
    pub fn resync(&self, tenant: &TenantState) {
        let name = &tenant.name;
        for (idx, resource) in self.policy.resources.iter().enumerate() {
            let kind = Kind::Resource(idx);
            for (ns, n) in tenant.caches[idx].keys() {
                self.queues.add_background(Key::new(name, kind, &ns, &n));
            }
            match resource.direction {
                Direction::FromSuper => {
                    for (ns, n) in self.caches[idx].keys() {
                        self.queues.add_background(Key::new(name, kind, &ns, &n));
                    }
                }
                Direction::ToSuper => {
                    // Copies name their tenant object in their metadata; only this tenant's.
                    let namespaced = resource.scope == Scope::Namespaced;
                    self.resync_owned(name, &self.caches[idx], kind, namespaced);
                }
            }
        }
        for (_, n) in tenant.namespaces.keys() {
            self.queues
                .add_background(Key::new(name, Kind::Namespace, "", &n));
        }
        self.resync_owned(name, &self.namespaces, Kind::Namespace, false);
    }

    fn resync_owned(&self, tenant: &str, cache: &Cache, kind: Kind, namespaced: bool) {
        for object in cache.values() {
            let key = Ownership::of(&object).key(kind, namespaced);
            if let Some(key) = key.filter(|k| &*k.tenant == tenant) {
                self.queues.add_background(key);
            }
        }
    }
}

/// One running tenant.
pub struct TenantState {
    /// Its name.
    pub name: Arc<str>,
    /// Its kubeconfig (a change restarts the tenant).
    pub kubeconfig: PathBuf,
    /// Writes into the tenant.
    pub writer: Writer,
    /// The tenant's caches, one per policy entry: every object of toSuper kinds, ferry's
    /// copies (label `ferry.dev/from-super=true`) of fromSuper kinds.
    pub caches: Vec<Arc<Cache>>,
    /// The tenant's namespaces.
    pub namespaces: Arc<Cache>,
    /// Publishes Events on tenant objects.
    pub recorder: Recorder,
    names: RwLock<NameMap>,
    ledger: Mutex<Ledger>,
    primed: AtomicBool,
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
        clients: Clients,
        kubeconfig: PathBuf,
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
                Direction::ToSuper => Some(format!("{LABEL_FROM_SUPER}!=true")),
                Direction::FromSuper => Some(format!("{LABEL_FROM_SUPER}=true")),
            },
            |_| None,
            None,
            tenant_router(shared.queues.clone(), name.clone()),
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
                shared.leader.clone(),
            ),
            names: RwLock::new(NameMap::new(tenant)),
            name,
            kubeconfig,
            caches: watched.caches,
            namespaces: watched.namespaces,
            recorder,
            ledger: Mutex::default(),
            primed: AtomicBool::new(false),
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
        self.primed.load(Ordering::Acquire)
    }

    /// Marks the tenant primed.
    pub fn set_primed(&self) {
        self.primed.store(true, Ordering::Release);
    }

    /// Whether the tenant's caches are listed.
    pub fn listed(&self) -> bool {
        self.namespaces.ready() && self.caches.iter().all(|c| c.ready())
    }

    /// Stops the tenant's watchers and its priming (which holds the tenant, so dropping the
    /// last handle alone would not end it while the tenant cannot be listed).
    pub fn stop(&self) {
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
