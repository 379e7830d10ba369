//! Per-tenant work queues served round-robin, so one noisy tenant cannot starve the others.
//!
//! A key is queued at most once; a key being reconciled is never handed to a second worker,
//! and a key added while it is being reconciled is queued again when that reconcile ends
//! (client-go's workqueue semantics, per tenant).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use crate::metrics::{labels, Labels};

/// What a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An approved kind: the index of its entry in the policy.
    Resource(usize),
    /// A tenant namespace (its super namespace is collected when it goes away).
    Namespace,
}

/// One unit of work: an object of a tenant, named as the tenant names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The tenant.
    pub tenant: Arc<str>,
    /// The kind.
    pub kind: Kind,
    /// The tenant namespace (empty for cluster-scoped objects and namespaces).
    pub namespace: String,
    /// The tenant name.
    pub name: String,
}

#[derive(Default)]
struct TenantQueue {
    /// Changes a watch saw (and retries), in order: served first.
    ready: VecDeque<Key>,
    /// Keys a resync queued (start, patrol, leadership): served when nothing changed waits, so
    /// that a change is not queued behind every object of the tenant.
    background: VecDeque<Key>,
    /// Every waiting key: when it was first added (for the sync latency) and whether it is
    /// urgent (in `ready`). The deques may hold stale entries; this map is the truth.
    waiting: HashMap<Key, (Instant, bool)>,
    /// Keys a worker holds.
    processing: HashSet<Key>,
    /// Whether workers may take keys (the tenant's caches are listed and primed).
    open: bool,
}

impl TenantQueue {
    fn push(&mut self, key: Key, urgent: bool) {
        if urgent {
            self.ready.push_back(key);
        } else {
            self.background.push_back(key);
        }
    }

    /// The next waiting key no worker holds: changes first.
    fn pop(&mut self) -> Option<Key> {
        let usable = |q: &Self, k: &Key| q.waiting.contains_key(k) && !q.processing.contains(k);
        while let Some(key) = self.ready.pop_front() {
            if usable(self, &key) {
                return Some(key);
            }
        }
        while let Some(key) = self.background.pop_front() {
            if usable(self, &key) {
                return Some(key);
            }
        }
        None
    }
}

#[derive(Default)]
struct State {
    order: Vec<Arc<str>>,
    tenants: HashMap<Arc<str>, TenantQueue>,
    cursor: usize,
    closed: bool,
}

/// The queues of every tenant.
#[derive(Default)]
pub struct Queues {
    state: Mutex<State>,
    notify: Notify,
    /// `ferry_queue_depth{tenant}`, kept current on every change.
    depth: Option<Family<Labels, Gauge>>,
}

impl Queues {
    /// Queues that keep `depth` (by tenant) current.
    pub fn with_depth_gauge(depth: Family<Labels, Gauge>) -> Self {
        Self {
            depth: Some(depth),
            ..Self::default()
        }
    }

    fn report(&self, tenant: &str, waiting: usize) {
        if let Some(depth) = &self.depth {
            depth
                .get_or_create(&labels(&[("tenant", tenant)]))
                .set(waiting as i64);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an empty, closed queue for `tenant`.
    pub fn add_tenant(&self, tenant: Arc<str>) {
        let mut state = self.lock();
        if !state.tenants.contains_key(&tenant) {
            state.order.push(tenant.clone());
            state.tenants.insert(tenant, TenantQueue::default());
        }
    }

    /// The tenants with a queue.
    pub fn tenants(&self) -> Vec<Arc<str>> {
        self.lock().order.clone()
    }

    /// Drops `tenant`'s queue and everything in it.
    pub fn remove_tenant(&self, tenant: &str) {
        let mut state = self.lock();
        state.order.retain(|t| &**t != tenant);
        state.tenants.remove(tenant);
        self.report(tenant, 0);
    }

    /// Lets workers take `tenant`'s keys.
    pub fn open(&self, tenant: &str) {
        if let Some(q) = self.lock().tenants.get_mut(tenant) {
            q.open = true;
        }
        self.notify.notify_waiters();
    }

    /// Queues a change of `key` unless it is queued already. Keys of unknown tenants are
    /// dropped.
    pub fn add(&self, key: Key) {
        self.enqueue(key, true);
    }

    /// Queues `key` behind every change (a resync).
    pub fn add_background(&self, key: Key) {
        self.enqueue(key, false);
    }

    fn enqueue(&self, key: Key, urgent: bool) {
        let mut state = self.lock();
        let Some(q) = state.tenants.get_mut(&key.tenant) else {
            return;
        };
        let held = q.processing.contains(&key);
        match q.waiting.get_mut(&key) {
            Some((_, was_urgent)) => {
                if !urgent || *was_urgent {
                    return;
                }
                *was_urgent = true;
                if !held {
                    q.ready.push_back(key);
                }
            }
            None => {
                q.waiting.insert(key.clone(), (Instant::now(), urgent));
                let waiting = q.waiting.len();
                if !held {
                    q.push(key.clone(), urgent);
                }
                self.report(&key.tenant, waiting);
            }
        }
        drop(state);
        self.notify.notify_one();
    }

    /// The next key, taking tenants in turn, with the time it was first queued; `None` once
    /// the queues are closed.
    pub async fn next(&self) -> Option<(Key, Instant)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                let n = state.order.len();
                for i in 0..n {
                    let at = (state.cursor + i) % n;
                    let tenant = state.order[at].clone();
                    let Some(q) = state.tenants.get_mut(&tenant) else {
                        continue;
                    };
                    if !q.open {
                        continue;
                    }
                    if let Some(key) = q.pop() {
                        let since = q.waiting.remove(&key).map_or_else(Instant::now, |(t, _)| t);
                        q.processing.insert(key.clone());
                        let waiting = q.waiting.len();
                        state.cursor = (at + 1) % n;
                        self.report(&tenant, waiting);
                        return Some((key, since));
                    }
                }
            }
            notified.await;
        }
    }

    /// Ends the processing of `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &Key) {
        let mut state = self.lock();
        if let Some(q) = state.tenants.get_mut(&key.tenant) {
            q.processing.remove(key);
            if let Some(&(_, urgent)) = q.waiting.get(key) {
                q.push(key.clone(), urgent);
                drop(state);
                self.notify.notify_one();
            }
        }
    }

    /// How many keys of `tenant` wait (the gauge reports it; tests read it here).
    #[cfg(test)]
    pub fn depth(&self, tenant: &str) -> usize {
        self.lock()
            .tenants
            .get(tenant)
            .map_or(0, |q| q.waiting.len())
    }

    /// Stops handing out keys; waiting workers get `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, name: &str) -> Key {
        Key {
            tenant: tenant.into(),
            kind: Kind::Resource(0),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn tenants_are_served_in_turn() {
        let q = Queues::default();
        for t in ["a", "b"] {
            q.add_tenant(t.into());
            q.open(t);
        }
        for i in 0..5 {
            q.add(key("a", &format!("x{i}")));
        }
        q.add(key("b", "y0"));
        q.add(key("b", "y1"));
        let mut order = Vec::new();
        for _ in 0..7 {
            let (k, _) = q.next().await.unwrap();
            q.done(&k);
            order.push(format!("{}/{}", k.tenant, k.name));
        }
        assert_eq!(
            order,
            ["a/x0", "b/y0", "a/x1", "b/y1", "a/x2", "a/x3", "a/x4"]
        );
    }

    #[tokio::test]
    async fn a_key_is_queued_once_and_requeued_after_processing() {
        let q = Queues::default();
        q.add_tenant("a".into());
        q.open("a");
        q.add(key("a", "x"));
        q.add(key("a", "x"));
        assert_eq!(q.depth("a"), 1);
        let (k, _) = q.next().await.unwrap();
        // Added again while held: not handed out twice, queued again on done.
        q.add(key("a", "x"));
        assert_eq!(q.depth("a"), 1);
        q.done(&k);
        let (again, _) = q.next().await.unwrap();
        assert_eq!(again, k);
        q.done(&again);
        assert_eq!(q.depth("a"), 0);
    }

    #[tokio::test]
    async fn changes_go_before_a_resync() {
        let q = Queues::default();
        q.add_tenant("a".into());
        q.open("a");
        for i in 0..3 {
            q.add_background(key("a", &format!("old{i}")));
        }
        q.add(key("a", "new"));
        // Already queued by the resync, then changed: served with the changes.
        q.add(key("a", "old2"));
        let mut order = Vec::new();
        while q.depth("a") > 0 {
            let (k, _) = q.next().await.unwrap();
            q.done(&k);
            order.push(k.name);
        }
        assert_eq!(order, ["new", "old2", "old0", "old1"]);
    }

    #[tokio::test]
    async fn closed_tenants_wait_and_close_ends_workers() {
        let q = Arc::new(Queues::default());
        q.add_tenant("a".into());
        q.add(key("a", "x"));
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await.map(|(k, _)| k) })
        };
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(worker.await.unwrap(), None);
    }
}
