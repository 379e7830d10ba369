//! The engine's state: the super cluster's caches, every running tenant, the queues, and how
//! watch events become keys.
//!
//! ```text
//!  super watchers ─▶ route_super (label ferry.dev/tenant, or every tenant for fromSuper) ─┐
//!  tenant watchers ─▶ key (tenant, kind, namespace, name) ────────────────────────────────┴▶ Queues
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use ferry_core::naming::{NameMap, Tenant};
use ferry_core::policy::{Direction, Policy, Scope};
use ferry_core::sandbox::Sandbox;
use ferry_core::translate::{LABEL_FROM_SUPER, LABEL_TENANT};
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{key_of, Cache};
use crate::compare::deleting;
use crate::metrics::Metrics;
use crate::queue::{Key, Kind, Queues};
use crate::refs::RefIndex;
use crate::write::Writer;

mod routing;

pub use routing::{gvk_of, selector_string};
use routing::{owned_key, route_super, watch_all};

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
    pub public: Arc<crate::public::Catalog>,
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
    /// Consecutive failures per key, for the retry backoff.
    pub failures: Mutex<HashMap<Key, u32>>,
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
    /// Starts the super cluster's watchers.
    pub fn new(
        policy: Arc<Policy>,
        sandbox: Arc<Sandbox>,
        client: Client,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let queues = Arc::new(Queues::with_depth_gauge(metrics.queue_depth.clone()));
        // The super side watches ferry's copies (toSuper), the selected objects (fromSuper) and
        // ferry's namespaces; a change is routed by the ownership metadata it carries.
        let (caches, namespaces, watchers) = watch_all(
            &client,
            &policy,
            "super",
            |resource| match resource.direction {
                Direction::ToSuper => Some(LABEL_TENANT.to_string()),
                Direction::FromSuper => Some(crate::public::selector(resource)),
            },
            Some(LABEL_TENANT.to_string()),
            |kind| {
                let queues = queues.clone();
                let policy = policy.clone();
                Arc::new(move |object: &Value| {
                    let resource = match kind {
                        Kind::Resource(idx) => policy.resources.get(idx),
                        Kind::Namespace => None,
                    };
                    route_super(&queues, kind, resource, object)
                })
            },
        );
        Arc::new(Self {
            writer: Writer::new(client, "super", metrics.clone(), leader.clone()),
            public: Arc::new(crate::public::Catalog::new(
                &policy,
                &caches,
                namespaces.clone(),
            )),
            policy,
            sandbox,
            caches,
            namespaces,
            tenants: RwLock::default(),
            queues,
            metrics,
            leader,
            failures: Mutex::default(),
            failed_tenants: Mutex::default(),
            transforms: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            watchers,
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

    /// Queues every key of `tenant`: its objects, ferry's copies of them, the public super
    /// objects, its namespaces and their super namespaces. The patrol and leadership changes
    /// call this; the reconciler then finds drift and orphans.
    pub fn resync(&self, tenant: &TenantState) {
        let name = tenant.name.clone();
        let queue = |kind: Kind, namespace: String, name_: String| {
            self.queues.add_background(Key {
                tenant: name.clone(),
                kind,
                namespace,
                name: name_,
            })
        };
        for (idx, resource) in self.policy.resources.iter().enumerate() {
            let kind = Kind::Resource(idx);
            for (ns, n) in tenant.caches[idx].keys() {
                queue(kind, ns, n);
            }
            match resource.direction {
                Direction::FromSuper => {
                    for (ns, n) in self.caches[idx].keys() {
                        queue(kind, ns, n);
                    }
                }
                Direction::ToSuper => {
                    // Copies name their tenant object in their metadata; only this tenant's.
                    let namespaced = resource.scope == Scope::Namespaced;
                    for object in self.caches[idx].values() {
                        if let Some(key) = owned_key(kind, namespaced, &object) {
                            if key.tenant == name {
                                self.queues.add_background(key);
                            }
                        }
                    }
                }
            }
        }
        for (_, n) in tenant.namespaces.keys() {
            queue(Kind::Namespace, String::new(), n);
        }
        for object in self.namespaces.values() {
            if let Some(key) = owned_key(Kind::Namespace, false, &object) {
                if key.tenant == name {
                    self.queues.add_background(key);
                }
            }
        }
    }
}

/// What a tenant remembers between reconciles. Lost on restart by design: everything here can
/// be recomputed from the clusters.
#[derive(Default)]
pub struct Memory {
    /// The last refusal of each key (an Event is published only when it changes).
    pub refusals: HashMap<Key, String>,
    /// What ferry last wrote for a key, per part (`down`, `status`, `object`, `copy`): the
    /// digest of the desired state and the resourceVersion the write produced. When the object
    /// is still at that version, it holds what ferry wrote even if the API server normalised
    /// it (pruned unknown fields, defaulted others), so no write loop can start.
    pub written: HashMap<(Key, &'static str), (String, String)>,
    /// References to dependencies.
    pub refs: RefIndex,
    /// Keys ferry keeps in sync.
    pub synced: HashSet<Key>,
    /// Keys whose last reconcile found nothing to do, with what it saw: the resourceVersions
    /// of the tenant object and of the super copy, and whether the object was wanted.
    pub settled: HashMap<Key, (String, String, bool)>,
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
    memory: Mutex<Memory>,
    primed: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for TenantState {
    fn drop(&mut self) {
        self.stop();
    }
}

impl TenantState {
    /// Starts the watchers of a tenant. Its queue stays closed until [`prime`] opens it.
    pub fn start(
        shared: &Shared,
        tenant: Tenant,
        client: Client,
        kubeconfig: PathBuf,
        identity: &str,
    ) -> Arc<Self> {
        let name: Arc<str> = tenant.as_str().into();
        shared.queues.add_tenant(name.clone());
        // The tenant side watches the tenant's own objects of toSuper kinds, ferry's copies of
        // fromSuper kinds and every namespace; a change is keyed by where it is.
        let (caches, namespaces, tasks) = watch_all(
            &client,
            &shared.policy,
            &name,
            |resource| match resource.direction {
                // Never ferry's own copies: for a kind approved both ways they are the
                // fromSuper entry's, and they never go down.
                Direction::ToSuper => Some(format!("{LABEL_FROM_SUPER}!=true")),
                Direction::FromSuper => Some(format!("{LABEL_FROM_SUPER}=true")),
            },
            None,
            |kind| {
                let queues = shared.queues.clone();
                let name = name.clone();
                Arc::new(move |object: &Value| {
                    if let Some((namespace, n)) = key_of(object) {
                        queues.add(Key {
                            tenant: name.clone(),
                            kind,
                            namespace,
                            name: n,
                        });
                    }
                })
            },
        );
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "ferry".into(),
                instance: Some(identity.to_string()),
            },
        );
        Arc::new(Self {
            writer: Writer::new(
                client,
                tenant.as_str(),
                shared.metrics.clone(),
                shared.leader.clone(),
            ),
            names: RwLock::new(NameMap::new(tenant)),
            name,
            kubeconfig,
            caches,
            namespaces,
            recorder,
            memory: Mutex::default(),
            primed: AtomicBool::new(false),
            tasks: Mutex::new(tasks),
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

    /// The tenant's memory.
    pub fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the tenant's caches are listed and its references recorded.
    pub fn primed(&self) -> bool {
        self.primed.load(Ordering::Acquire)
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

/// Waits for the tenant's and the super cluster's caches, records which dependencies the
/// tenant's objects reference (so that no dependency is collected for want of a referrer
/// not yet seen), then opens the tenant's queue with every key in it.
pub async fn prime(shared: Arc<Shared>, tenant: Arc<TenantState>) {
    while !(tenant.listed() && shared.ready()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let has_dependencies = shared.policy.resources.iter().any(|r| r.dependency);
    if has_dependencies {
        for (idx, resource) in shared.policy.resources.iter().enumerate() {
            if resource.direction != Direction::ToSuper || resource.dependency {
                continue;
            }
            for object in tenant.caches[idx].values() {
                if deleting(&object) {
                    continue;
                }
                let Some((namespace, name)) = key_of(&object) else {
                    continue;
                };
                let key = Key {
                    tenant: tenant.name.clone(),
                    kind: Kind::Resource(idx),
                    namespace,
                    name,
                };
                crate::reconcile::Reconciler::new(&shared, &tenant)
                    .record_references(&key, &object);
            }
        }
    }
    tenant.primed.store(true, Ordering::Release);
    shared.resync(&tenant);
    shared.queues.open(&tenant.name);
    tracing::info!(tenant = %tenant.name, "tenant listed; syncing");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::policy::{LabelSelector, SelectorRequirement};
    use serde_json::json;

    #[test]
    fn selectors_use_the_api_syntax() {
        let selector = LabelSelector {
            match_labels: [("tier".to_string(), "gold".to_string())].into(),
            match_expressions: vec![
                SelectorRequirement {
                    key: "zone".into(),
                    operator: "In".into(),
                    values: vec!["a".into(), "b".into()],
                },
                SelectorRequirement {
                    key: "legacy".into(),
                    operator: "DoesNotExist".into(),
                    values: Vec::new(),
                },
            ],
        };
        assert_eq!(
            selector_string(&selector),
            "tier=gold,zone in (a,b),!legacy"
        );
    }

    #[test]
    fn super_objects_name_their_tenant_object() {
        let copy = json!({"metadata": {
            "name": "orders", "namespace": "team-a-shop",
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {"ferry.dev/tenant-namespace": "shop", "ferry.dev/tenant-name": "orders"},
        }});
        let key = owned_key(Kind::Resource(3), true, &copy).unwrap();
        assert_eq!(
            (&*key.tenant, key.namespace.as_str(), key.name.as_str()),
            ("team-a", "shop", "orders")
        );
        let namespace = json!({"metadata": {
            "name": "team-a-shop",
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {"ferry.dev/tenant-namespace": "shop"},
        }});
        let key = owned_key(Kind::Namespace, false, &namespace).unwrap();
        assert_eq!((key.namespace.as_str(), key.name.as_str()), ("", "shop"));
        // Not ferry's: no key, so nothing is ever queued for it.
        assert!(owned_key(Kind::Resource(3), true, &json!({"metadata": {"name": "x"}})).is_none());
    }
}
