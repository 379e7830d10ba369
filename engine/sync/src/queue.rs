//! Per-tenant work queues served round-robin, so one noisy tenant cannot starve the others.
//!
//! A key is queued at most once; a key being reconciled is never handed to a second worker,
//! and a key added while it is being reconciled is queued again when that reconcile ends
//! (client-go's workqueue semantics, per tenant). A failed key comes back after an
//! exponential backoff of its own (client-go's rate-limited queue): the queue holds delayed
//! keys itself, deduplicated, with no task per retry. A tenant holds at most `per_tenant`
//! workers at once, so a tenant whose API server hangs cannot take every worker, and at most
//! `sharing` while another tenant has work, so that one tenant's burst does not fill the super
//! API server with its writes ahead of another tenant's.
//!
//! ```text
//!  add ─▶ ready ─┐                      ┌─▶ worker ─▶ done (requeued if added meanwhile)
//!  resync ─▶ background ─┴─ round-robin ┤
//!  retry / add_after ─▶ delayed ─(due)─▶ ready
//! ```

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use crate::key::Key;
use crate::metrics::{labels, Labels};

/// The clock of delayed keys (tokio's, so that tests can pause it).
type Due = tokio::time::Instant;

/// Retry backoff bounds for failed keys.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

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
    /// Consecutive failures per key.
    failures: HashMap<Key, u32>,
    /// When a worker last took one of its keys.
    taken: Option<Due>,
}

/// How many slots a drained tenant queue keeps (see `TenantQueue::drained`), and so its
/// failures once none is left, and the times of delayed keys once none waits.
const DRAINED_KEPT: usize = 1024;

/// Gives back the memory of `map` once it is empty and holds over [`DRAINED_KEPT`] slots.
fn give_back<K, V>(map: &mut HashMap<K, V>) {
    if map.is_empty() && map.capacity() > DRAINED_KEPT {
        *map = HashMap::new();
    }
}

/// How long a tenant that had a key taken counts as having work: a tenant creating now and
/// then (one object every 100 ms) is not left alone with one that holds every share.
pub const SHARING_WINDOW: Duration = Duration::from_secs(1);

impl TenantQueue {
    /// Whether it has work: a change (not a resync, not a retry) taken within
    /// [`SHARING_WINDOW`].
    fn busy(&self, now: Due) -> bool {
        self.taken
            .is_some_and(|t| now.duration_since(t) < SHARING_WINDOW)
    }

    fn push(&mut self, key: Key, urgent: bool) {
        if urgent {
            self.ready.push_back(key);
        } else {
            self.background.push_back(key);
        }
    }

    /// Gives back the memory of a drained queue: a patrol queues every object of the tenant at
    /// once, and the deques and the map would otherwise keep that size for good. When nothing
    /// waits, whatever the deques still hold is stale.
    fn drained(&mut self) {
        if self.waiting.is_empty()
            && self.waiting.capacity() + self.ready.capacity() + self.background.capacity()
                > DRAINED_KEPT
        {
            self.ready = VecDeque::new();
            self.background = VecDeque::new();
            self.waiting = HashMap::new();
        }
    }

    /// The next waiting key no worker holds, and whether it is a change: changes first.
    fn pop(&mut self) -> Option<(Key, bool)> {
        let usable = |q: &Self, k: &Key| q.waiting.contains_key(k) && !q.processing.contains(k);
        while let Some(key) = self.ready.pop_front() {
            if usable(self, &key) {
                return Some((key, true));
            }
        }
        while let Some(key) = self.background.pop_front() {
            if usable(self, &key) {
                return Some((key, false));
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
    /// Keys to add when their time comes, in time order (the number breaks ties).
    delayed: BTreeMap<(Due, u64), Key>,
    /// When each delayed key is due (a key is delayed once, at its earliest time).
    due: HashMap<Key, (Due, u64)>,
    sequence: u64,
    /// Keys that workers still hold for tenants removed meanwhile.
    held: HashMap<Arc<str>, HashSet<Key>>,
}

/// The queues of every tenant.
pub struct Queues {
    state: Mutex<State>,
    notify: Notify,
    /// At most this many keys of one tenant are processed at once.
    per_tenant: usize,
    /// ... and at most this many while another tenant has work (see [`Queues::sharing`]).
    sharing: usize,
    /// `ferry_queue_depth{tenant}`, kept current on every change.
    depth: Option<Family<Labels, Gauge>>,
    /// Counts changes of what a translation reads besides the object (see [`Queues::context`]).
    context: AtomicU64,
}

impl Default for Queues {
    fn default() -> Self {
        Self::new(usize::MAX, None)
    }
}

impl Queues {
    /// Queues that hand a tenant at most `per_tenant` keys at once and keep `depth` (by
    /// tenant) current.
    pub fn new(per_tenant: usize, depth: Option<Family<Labels, Gauge>>) -> Self {
        Self {
            state: Mutex::default(),
            notify: Notify::new(),
            per_tenant: per_tenant.max(1),
            sharing: per_tenant.max(1),
            depth,
            context: AtomicU64::new(0),
        }
    }

    /// How many times something a translation reads besides the object itself may have
    /// changed: a public object, a namespace, a tenant's copy of a public or produced object.
    /// A reduced tenant object checked under another count is translated again at its next
    /// reconcile (the routers count; keys are queued as before).
    pub fn context(&self) -> u64 {
        self.context.load(Ordering::Acquire)
    }

    /// Counts a change of [`Queues::context`].
    pub fn context_changed(&self) {
        self.context.fetch_add(1, Ordering::AcqRel);
    }

    /// Queues that hand a tenant at most `sharing` keys at once while another tenant has
    /// work (a change taken in the last [`SHARING_WINDOW`]). The super API
    /// server serves every tenant's writes: a tenant creating as fast as it can with many
    /// writes in flight there makes another tenant's single write wait behind them all.
    pub fn sharing(mut self, sharing: usize) -> Self {
        self.sharing = sharing.clamp(1, self.per_tenant);
        self
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
            // Keys a removed instance of the tenant still holds stay held (and counted).
            let processing = state.held.remove(&tenant).unwrap_or_default();
            state.order.push(tenant.clone());
            let queue = TenantQueue {
                processing,
                ..TenantQueue::default()
            };
            state.tenants.insert(tenant, queue);
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
        if let Some((name, q)) = state.tenants.remove_entry(tenant) {
            if !q.processing.is_empty() {
                state.held.insert(name, q.processing);
            }
        }
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
        if self.push(&mut state, key, urgent) {
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Queues `key` in `state`; whether a worker should be woken.
    fn push(&self, state: &mut State, key: Key, urgent: bool) -> bool {
        let Some(q) = state.tenants.get_mut(&key.tenant) else {
            return false;
        };
        let held = q.processing.contains(&key);
        match q.waiting.get_mut(&key) {
            Some((_, was_urgent)) => {
                if !urgent || *was_urgent {
                    return false;
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
        true
    }

    /// Queues `key` (as a change) once `after` has passed, unless it is due sooner already.
    pub fn add_after(&self, key: Key, after: Duration) {
        let at = Due::now() + after;
        let mut state = self.lock();
        if let Some(&(due, _)) = state.due.get(&key) {
            if due <= at {
                return;
            }
            let old = state.due.remove(&key);
            if let Some(old) = old {
                state.delayed.remove(&old);
            }
        }
        state.sequence += 1;
        let slot = (at, state.sequence);
        state.due.insert(key.clone(), slot);
        state.delayed.insert(slot, key);
        drop(state);
        // A worker waiting for the earliest delayed key may need to wake sooner.
        self.notify.notify_one();
    }

    /// Records a failure of `key` and queues it again after its backoff (200 ms, doubling per
    /// consecutive failure, at most 30 s); returns the attempt number and the delay.
    pub fn retry(&self, key: &Key) -> (u32, Duration) {
        let attempt = {
            let mut state = self.lock();
            let Some(q) = state.tenants.get_mut(&key.tenant) else {
                return (0, Duration::ZERO);
            };
            let n = q.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let delay = BACKOFF_MIN
            .saturating_mul(1 << attempt.min(8))
            .min(BACKOFF_MAX);
        self.add_after(key.clone(), delay);
        (attempt, delay)
    }

    /// Whether `key` failed last time (it comes back after its backoff).
    pub fn failing(&self, key: &Key) -> bool {
        self.lock()
            .tenants
            .get(&key.tenant)
            .is_some_and(|q| q.failures.contains_key(key))
    }

    /// Forgets the failures of `key` (it succeeded).
    pub fn forget(&self, key: &Key) {
        if let Some(q) = self.lock().tenants.get_mut(&key.tenant) {
            q.failures.remove(key);
            // A patrol while the tenant's API server was down failed every key.
            give_back(&mut q.failures);
        }
    }

    /// Moves the delayed keys that are due into their queues: when the next one is due, and
    /// how many were queued (each needs a worker woken).
    fn promote(&self, state: &mut State) -> (Option<Due>, usize) {
        let now = Due::now();
        let mut queued = 0;
        while let Some(entry) = state.delayed.first_entry() {
            if entry.key().0 > now {
                return (Some(entry.key().0), queued);
            }
            let key = entry.remove();
            state.due.remove(&key);
            give_back(&mut state.due);
            if self.push(state, key, true) {
                queued += 1;
            }
        }
        (None, queued)
    }

    /// The next key, taking tenants in turn, with the time it was first queued; `None` once
    /// the queues are closed.
    pub async fn next(&self) -> Option<(Key, Instant)> {
        loop {
            let notified = self.notify.notified();
            let wake = {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                let (wake, queued) = self.promote(&mut state);
                // This worker takes one; the others are for workers asleep.
                for _ in 1..queued {
                    self.notify.notify_one();
                }
                let now = Due::now();
                let busy = state
                    .tenants
                    .values()
                    .filter(|q| q.open && q.busy(now))
                    .count();
                let share = if busy > 1 {
                    self.sharing
                } else {
                    self.per_tenant
                };
                let n = state.order.len();
                // A tenant held back only by sharing may take more once the others have had
                // nothing for a while: look again then, even if nothing else happens.
                let mut wake = wake;
                for i in 0..n {
                    let at = (state.cursor + i) % n;
                    let tenant = state.order[at].clone();
                    let Some(q) = state.tenants.get_mut(&tenant) else {
                        continue;
                    };
                    if !q.open || q.processing.len() >= share {
                        if q.open && q.processing.len() < self.per_tenant && !q.waiting.is_empty() {
                            let again = now + SHARING_WINDOW;
                            wake = Some(wake.map_or(again, |w| w.min(again)));
                        }
                        continue;
                    }
                    if let Some((key, change)) = q.pop() {
                        // Only a change counts as work here: not a resync (the patrol), not a
                        // retry (a tenant whose API server is down).
                        if change && !q.failures.contains_key(&key) {
                            q.taken = Some(now);
                        }
                        let since = q.waiting.remove(&key).map_or_else(Instant::now, |(t, _)| t);
                        q.drained();
                        q.processing.insert(key.clone());
                        let waiting = q.waiting.len();
                        state.cursor = (at + 1) % n;
                        self.report(&tenant, waiting);
                        return Some((key, since));
                    }
                }
                wake
            };
            match wake {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at, notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// Ends the processing of `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &Key) {
        let mut state = self.lock();
        if let Some(q) = state.tenants.get_mut(&key.tenant) {
            q.processing.remove(key);
            if let Some(&(_, urgent)) = q.waiting.get(key) {
                q.push(key.clone(), urgent);
            }
        } else if let Some(held) = state.held.get_mut(&key.tenant) {
            held.remove(key);
            if held.is_empty() {
                state.held.remove(&key.tenant);
            }
        }
        drop(state);
        // A key came back, or the tenant is below its share of workers again.
        self.notify.notify_one();
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
#[path = "queue/tests.rs"]
mod tests;
