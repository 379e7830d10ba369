//! How watch events become keys: a tenant object's change is keyed by where it is; a super
//! object's change goes to the tenant its ownership metadata names, to every tenant for a
//! public object, to the tenant whose super namespace holds it for a produced one.
//!
//! ```text
//!  super watchers ─▶ route_super (Ownership, or every tenant for fromSuper) ─┐
//!  tenant watchers ─▶ route_tenant (tenant, kind, namespace, name) ──────────┴▶ Queues
//! ```

use std::sync::{Arc, OnceLock};

use ferry_core::policy::{Direction, Policy, Scope};
use serde_json::Value;

use crate::cache::{Cache, OnChange};
use crate::key::{Key, Kind};
use crate::object::{key_of, Ownership, OwnershipKey};
use crate::queue::Queues;

/// Queues what a change of a super object means for tenants. `namespaces` is the super's
/// cache of ferry's super namespaces (set once its watch starts).
pub fn route_super(
    queues: &Queues,
    policy: &Policy,
    namespaces: &OnceLock<Arc<Cache>>,
    kind: Kind,
    object: &Value,
) {
    let resource = match kind {
        Kind::Resource(idx) => policy.resources.get(idx.0),
        Kind::Namespace => None,
    };
    match resource {
        // Produced for a tenant's object: keyed by the tenant namespace of the super
        // namespace it is in (ferry's metadata on the namespace, never the object's own).
        Some(r) if r.direction == Direction::Produced => {
            let Some((namespace, name)) = key_of(object) else {
                return;
            };
            let owner = namespaces
                .get()
                .and_then(|n| n.get("", &namespace))
                .and_then(|n| Ownership::of(&n).key(Kind::Namespace, false));
            if let Some(owner) = owner {
                queues.add(owner.sibling(kind, &owner.name, &name));
            }
        }
        Some(r) if r.direction == Direction::FromSuper => {
            queues.context_changed();
            let Some((namespace, name)) = key_of(object) else {
                return;
            };
            for tenant in queues.tenants() {
                queues.add(Key::new(&tenant, kind, &namespace, &name));
            }
        }
        _ => {
            // A super namespace of ferry's: the guard reads which names are super namespaces.
            if kind == Kind::Namespace {
                queues.context_changed();
            }
            let namespaced = resource.is_none_or(|r| r.scope == Scope::Namespaced);
            if let Some(key) = Ownership::of(object).key(kind, namespaced) {
                queues.add(key);
            }
        }
    }
}

/// The callbacks of the super cluster's caches.
pub fn super_router(
    queues: Arc<Queues>,
    policy: Arc<Policy>,
    namespaces: Arc<OnceLock<Arc<Cache>>>,
) -> impl Fn(Kind) -> OnChange {
    move |kind| {
        let queues = queues.clone();
        let policy = policy.clone();
        let namespaces = namespaces.clone();
        Arc::new(move |object: &Value| route_super(&queues, &policy, &namespaces, kind, object))
    }
}

/// The callbacks of `tenant`'s caches: every change is the key of the object. A namespace, or
/// a tenant's copy of a public or produced object, is also read by translations (see
/// [`Queues::context`]).
pub fn tenant_router(
    queues: Arc<Queues>,
    policy: Arc<Policy>,
    tenant: Arc<str>,
) -> impl Fn(Kind) -> OnChange {
    move |kind| {
        let queues = queues.clone();
        let tenant = tenant.clone();
        let context = match kind {
            Kind::Namespace => true,
            Kind::Resource(idx) => {
                policy.resources.get(idx.0).map(|r| r.direction) != Some(Direction::ToSuper)
            }
        };
        Arc::new(move |object: &Value| {
            if context {
                queues.context_changed();
            }
            if let Some((namespace, name)) = key_of(object) {
                queues.add(Key::new(&tenant, kind, &namespace, &name));
            }
        })
    }
}
