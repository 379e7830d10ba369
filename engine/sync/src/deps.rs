//! Dependencies: which of a tenant's objects of `dependency: true` kinds its other objects
//! reference, and which produced objects they name. A dependency goes down while referenced
//! and is collected when no longer, a produced object's copy comes up while named; a change
//! of who references it queues it.

use ferry_core::policy::{Direction, Scope};
use ferry_core::translate::{Reference, Translator};
use serde_json::Value;

use crate::key::{Key, Kind};
use crate::state::{Shared, TenantState};

/// Records which dependencies `object` (of a non-dependency toSuper kind) references. They
/// are found by the schema rules alone (transforms run after them), so no transform runs.
pub fn record(shared: &Shared, tenant: &TenantState, key: &Key, object: &Value) {
    let translator = Translator::new(&shared.policy, None);
    if let Ok(mut references) = translator.references(object.clone(), &tenant.names()) {
        // What an object names as produced counts only once it translated whole (guard
        // included): a refused object must not make anything flow up.
        references.retain(|r| !r.produced);
        set(shared, tenant, key, &references);
    }
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
            let idx = policy.resources.iter().position(|p| {
                let wanted = match r.produced {
                    true => p.direction == Direction::Produced,
                    false => p.dependency,
                };
                wanted && p.group_kind.group == r.group && p.group_kind.kind == r.kind
            })?;
            // What is produced for an object is in its own (super) namespace.
            let namespace = if r.produced {
                &key.namespace
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

/// Whether a synced object references the dependency `key`.
pub fn referenced(tenant: &TenantState, key: &Key) -> bool {
    tenant.ledger().refs.is_referenced(key)
}

fn update(shared: &Shared, tenant: &TenantState, key: &Key, targets: Vec<Key>) {
    let changed = tenant.ledger().refs.set(key, targets);
    for target in changed {
        shared.queues.add(target);
    }
}
