//! How watch events become keys: a tenant object's change is keyed by where it is; a super
//! object's change goes to the tenant its ownership metadata names, or to every tenant for a
//! public object.
//!
//! ```text
//!  super watchers ─▶ route_super (Ownership, or every tenant for fromSuper) ─┐
//!  tenant watchers ─▶ route_tenant (tenant, kind, namespace, name) ──────────┴▶ Queues
//! ```

use std::sync::Arc;

use ferry_core::policy::{Direction, Policy, Scope};
use serde_json::Value;

use crate::cache::OnChange;
use crate::key::{Key, Kind};
use crate::object::{key_of, Ownership};
use crate::queue::Queues;

/// Queues what a change of a super object means for tenants.
pub fn route_super(queues: &Queues, policy: &Policy, kind: Kind, object: &Value) {
    let resource = match kind {
        Kind::Resource(idx) => policy.resources.get(idx),
        Kind::Namespace => None,
    };
    match resource {
        Some(r) if r.direction == Direction::FromSuper => {
            let Some((namespace, name)) = key_of(object) else {
                return;
            };
            for tenant in queues.tenants() {
                queues.add(Key::new(&tenant, kind, &namespace, &name));
            }
        }
        _ => {
            let namespaced = resource.is_none_or(|r| r.scope == Scope::Namespaced);
            if let Some(key) = Ownership::of(object).key(kind, namespaced) {
                queues.add(key);
            }
        }
    }
}

/// The callbacks of the super cluster's caches.
pub fn super_router(queues: Arc<Queues>, policy: Arc<Policy>) -> impl Fn(Kind) -> OnChange {
    move |kind| {
        let queues = queues.clone();
        let policy = policy.clone();
        Arc::new(move |object: &Value| route_super(&queues, &policy, kind, object))
    }
}

/// The callbacks of `tenant`'s caches: every change is the key of the object.
pub fn tenant_router(queues: Arc<Queues>, tenant: Arc<str>) -> impl Fn(Kind) -> OnChange {
    move |kind| {
        let queues = queues.clone();
        let tenant = tenant.clone();
        Arc::new(move |object: &Value| {
            if let Some((namespace, name)) = key_of(object) {
                queues.add(Key::new(&tenant, kind, &namespace, &name));
            }
        })
    }
}
