//! The super clusters ferry syncs through (DESIGN.md "Multiple super clusters"), each with its
//! writer and caches: ferry's copies and namespaces there, and what it publishes. [`Supers`]
//! holds them all, by [`SuperId`], with what changes live with the configuration file (their
//! labels and cordons, the placement rules).
//!
//! ```text
//!  Supers ── Super × n (config order, SuperId) ── caches (copies, public objects) ── namespaces ── Writer
//!         └─ Live: SuperConfig × n (labels, cordons) + placement rules, swapped whole
//! ```

use ferry_core::keys::LABEL_TENANT;
use std::sync::{Arc, OnceLock};

use std::sync::RwLock;

use ferry_core::config::{PlacementRule, PlatformNamespaces, SuperConfig};
use ferry_core::policy::{Direction, Policy};

use tokio::task::JoinHandle;

use crate::cache::{Cache, Labels};
use crate::client::Clients;
use crate::key::EntryId;
pub use crate::key::SuperId;
use crate::metrics::Metrics;
use crate::queue::Queues;
use crate::routing::super_router;
use crate::watch::watch_all;
use crate::write::{Gate, Writer};

/// What of the super clusters changes live with the configuration file: their labels and
/// cordons (same supers, same order) and the placement rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    /// Each super's configuration, by [`SuperId`].
    pub configs: Vec<SuperConfig>,
    /// Which supers a tenant namespace may run in; the first rule that applies decides.
    pub rules: Vec<PlacementRule>,
}

/// The super clusters, in config order (at least one): each one's fixed part ([`Super`]) and
/// the live part ([`Live`]).
pub struct Supers {
    all: Vec<Super>,
    live: RwLock<Arc<Live>>,
}

impl Supers {
    /// The running `all` (config order) and their live part.
    pub fn new(all: Vec<Super>, live: Live) -> Self {
        Self {
            all,
            live: RwLock::new(Arc::new(live)),
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether there is none (never, once running).
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Each super with its id, in config order.
    pub fn iter(&self) -> impl Iterator<Item = (SuperId, &Super)> {
        self.all.iter().enumerate().map(|(i, s)| (SuperId(i), s))
    }

    /// Each super, in config order.
    pub fn each(&self) -> impl Iterator<Item = &Super> {
        self.all.iter()
    }

    /// The super called `name`.
    pub fn named(&self, name: &str) -> Option<SuperId> {
        self.all.iter().position(|s| &*s.name == name).map(SuperId)
    }

    /// The live part now.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the live part; whether it changed.
    pub fn set_live(&self, live: Live) -> bool {
        let mut now = self.live.write().unwrap_or_else(|e| e.into_inner());
        let changed = **now != live;
        *now = Arc::new(live);
        changed
    }
}

impl std::ops::Index<SuperId> for Supers {
    type Output = Super;

    fn index(&self, id: SuperId) -> &Super {
        &self.all[id.0]
    }
}

/// One super cluster.
pub struct Super {
    /// Its name (metrics label `cluster`, `ferry.dev/super` on tenant namespaces).
    pub name: Arc<str>,
    /// Writes into it.
    pub writer: Writer,
    /// Its caches, one per policy entry: ferry's copies (label `ferry.dev/tenant`) for
    /// toSuper kinds, the selected objects for fromSuper kinds, every object but ferry's
    /// copies for produced kinds.
    pub caches: Vec<Arc<Cache>>,
    /// The super namespaces ferry owns there.
    pub namespaces: Arc<Cache>,
    /// Which cluster it is (kube-system's uid), read once.
    uid: tokio::sync::OnceCell<String>,
    watchers: Vec<JoinHandle<()>>,
}

impl Drop for Super {
    fn drop(&mut self) {
        for task in &self.watchers {
            task.abort();
        }
    }
}

impl Super {
    /// Starts the watchers of the super cluster `config`; their changes go into `queues`. Its
    /// writer never writes into `platform`'s namespaces.
    pub fn start(
        config: &SuperConfig,
        clients: Clients,
        policy: &Arc<Policy>,
        metrics: Arc<Metrics>,
        gate: Gate,
        queues: Arc<Queues>,
        platform: Arc<PlatformNamespaces>,
    ) -> Self {
        // The super side watches ferry's copies (toSuper), the selected objects (fromSuper) and
        // ferry's namespaces; a change is routed by the ownership metadata it carries.
        // Produced objects are routed by the super namespace they are in, read from the
        // namespace cache made below.
        let namespaces = Arc::new(OnceLock::new());
        let watched = watch_all(
            &clients.watch,
            policy,
            &config.name,
            |resource| match (resource.direction, &gate.sharded) {
                // A sharded replica holds the copies of the tenants it owns, not every copy.
                (Direction::ToSuper, Some(sharded)) => Labels::Owned {
                    key: LABEL_TENANT.to_string(),
                    owned: sharded.owned.clone(),
                },
                (Direction::ToSuper, None) => Labels::Fixed(Some(LABEL_TENANT.to_string())),
                (Direction::FromSuper, _) => Labels::Fixed(Some(crate::public::selector(resource))),
                // Never ferry's own copies.
                (Direction::Produced, _) => Labels::Fixed(Some(format!("!{LABEL_TENANT}"))),
            },
            // ferry's copies, once checked, are held as what flows up.
            crate::watch::flowing_up(policy),
            Some(LABEL_TENANT.to_string()),
            super_router(queues, policy.clone(), namespaces.clone()),
        );
        let _ = namespaces.set(watched.namespaces.clone());
        Self {
            name: config.name.as_str().into(),
            writer: Writer::new(clients.requests, &config.name, metrics, gate)
                .fenced(platform)
                .placing(policy),
            caches: watched.caches,
            namespaces: watched.namespaces,
            uid: tokio::sync::OnceCell::new(),
            watchers: watched.tasks,
        }
    }

    /// The same super with its writes paced as `writes` says (`write/pace.rs`).
    pub fn paced(mut self, writes: ferry_core::config::SuperWrites) -> Self {
        self.writer = self.writer.clone().paced(writes);
        self
    }

    /// Which cluster it is: the uid of its kube-system namespace (read once).
    pub async fn cluster_uid(&self) -> Result<String, crate::write::Error> {
        self.uid
            .get_or_try_init(|| self.writer.cluster_uid())
            .await
            .cloned()
    }

    /// Whether its caches of copies (toSuper kinds of `policy`) have listed at ownership
    /// generation `generation` or later (always, without sharding).
    pub fn listed_since(&self, policy: &Policy, generation: u64) -> bool {
        policy
            .resources
            .iter()
            .zip(&self.caches)
            .filter(|(r, _)| r.direction == Direction::ToSuper)
            .all(|(_, c)| c.listed_at() >= generation)
    }

    /// Whether its caches are listed.
    pub fn ready(&self) -> bool {
        self.namespaces.ready() && self.caches.iter().all(|c| c.ready())
    }
}

/// The super among `supers` (config order) whose public object `namespace`/`name` of policy
/// entry `idx` is the source (the first holding one that is not being deleted), and how many
/// supers hold one.
pub fn source(
    supers: &Supers,
    idx: EntryId,
    namespace: &str,
    name: &str,
) -> (Option<Arc<serde_json::Value>>, usize) {
    let live: Vec<Arc<serde_json::Value>> = supers
        .each()
        .filter_map(|s| s.caches[idx].get(namespace, name))
        .filter(|o| !crate::object::deleting(o))
        .collect();
    let count = live.len();
    (live.into_iter().next(), count)
}
