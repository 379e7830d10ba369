//! Dependencies: which of a tenant's objects of `dependency: true` kinds its other objects
//! reference, and which produced objects they name. A dependency goes down while referenced
//! and is collected when no longer, a produced object's copy comes up while named; a change
//! of who references it queues it.

use ferry_core::policy::{Direction, Scope};
use ferry_core::translate::{Reference, Translator};

use crate::key::{EntryId, Key, Kind};
use crate::object::deleting;
use crate::state::{Shared, TenantState};

/// Awaits the references of every object of the tenant's non-dependency toSuper kinds, as
/// listed at start: until each has been reconciled once, a dependency nothing references yet
/// may be one of theirs, and keeps its copy (no object is read whole for this: the first
/// reconcile records what its translation names).
pub fn await_referrers(shared: &Shared, tenant: &TenantState) {
    if !shared.policy.resources.iter().any(|r| r.dependency) {
        return;
    }
    for (idx, resource) in crate::key::entries(&shared.policy) {
        if resource.direction == Direction::ToSuper && !resource.dependency {
            let listed = tenant.caches[idx].keys();
            // Each key hashed as it is made: only the digests are kept.
            let referrers = listed
                .iter()
                .map(|(ns, name)| Key::new(&tenant.name, Kind::Resource(idx), ns, name));
            tenant.ledger().refs.await_referrers(referrers);
        }
    }
}

/// After a reconcile of `key` (of a non-dependency toSuper kind, cache `idx`) that did not
/// record its references (refused, failed, ended early) while they were awaited: records what
/// the schema rules find in the cached object (transforms run after them, so none runs).
pub fn ensure_recorded(shared: &Shared, tenant: &TenantState, key: &Key, idx: EntryId) {
    if !tenant.ledger().refs.awaits(key) {
        return;
    }
    let object = tenant.caches[idx]
        .get(&key.namespace, &key.name)
        .filter(|o| !deleting(o));
    let translator = Translator::new(&shared.policy, None);
    let mut references = object
        .and_then(|o| translator.references((*o).clone(), &tenant.names()).ok())
        .unwrap_or_default();
    // What an object names as produced counts only once it translated whole (guard
    // included): a refused object must not make anything flow up.
    references.retain(|r| !r.produced);
    set(shared, tenant, key, &references);
}

/// Forgets what `key` names as produced (it is refused): its dependencies stay, as its copy
/// does.
pub fn clear_produced(shared: &Shared, tenant: &TenantState, key: &Key) {
    let kept: Vec<Key> = tenant
        .ledger()
        .refs
        .targets(key)
        .into_iter()
        .filter(|t| match t.kind {
            Kind::Resource(idx) => shared.policy.resources[idx].direction != Direction::Produced,
            Kind::Namespace => true,
        })
        .collect();
    update(shared, tenant, key, kept);
}

/// Records that `key` references exactly the dependencies among `references`.
pub fn set(shared: &Shared, tenant: &TenantState, key: &Key, references: &[Reference]) {
    let policy = &shared.policy;
    let targets = references
        .iter()
        .filter_map(|r| {
            let idx = crate::key::entries(policy)
                .position(|(_, p)| {
                    let wanted = match r.produced {
                        true => p.direction == Direction::Produced,
                        false => p.dependency,
                    };
                    wanted && p.group_kind.group == r.group && p.group_kind.kind == r.kind
                })
                .map(EntryId)?;
            // What is produced for an object is in its own (super) namespace, or in the one
            // its reference names (a cluster-scoped referrer's namespaceField).
            let namespace = if r.produced && r.namespace.is_empty() {
                &key.namespace
            } else if r.produced {
                &r.namespace
            } else if policy.resources[idx].scope == Scope::Cluster {
                ""
            } else if r.namespace.is_empty() {
                &key.namespace
            } else {
                &r.namespace
            };
            Some(key.sibling(Kind::Resource(idx), namespace, &r.name))
        })
        .collect();
    update(shared, tenant, key, targets);
}

/// Records that `key` references nothing (it is gone or no longer synced).
pub fn clear(shared: &Shared, tenant: &TenantState, key: &Key) {
    update(shared, tenant, key, Vec::new());
}

/// Whether a synced object references the dependency `key`: `None` while objects listed at
/// start may still (see [`await_referrers`]).
pub fn referenced(tenant: &TenantState, key: &Key) -> Option<bool> {
    let ledger = tenant.ledger();
    match ledger.refs.is_referenced(key) {
        true => Some(true),
        false => ledger.refs.complete().then_some(false),
    }
}

fn update(shared: &Shared, tenant: &TenantState, key: &Key, targets: Vec<Key>) {
    let (changed, complete) = {
        let mut ledger = tenant.ledger();
        let changed = ledger.refs.set(key, targets);
        (changed, ledger.refs.recorded(key))
    };
    for target in changed {
        shared.queues.add(target);
    }
    // The last awaited referrer is recorded: the dependencies that waited are decided now.
    if complete {
        for (idx, resource) in crate::key::entries(&shared.policy) {
            if resource.dependency {
                for (ns, name) in tenant.caches[idx].keys() {
                    let key = Key::new(&tenant.name, Kind::Resource(idx), &ns, &name);
                    shared.queues.add_background(key);
                }
            }
        }
    }
}
