//! Every reconcile decision, as pure functions of what should exist, what does, and what
//! ferry remembers writing: they return an [`Action`] and never touch an API server. The
//! executors in `reconcile` read the caches, translate, call these, and carry the action out.
//!
//! Invariants decided here, once: ferry never writes over a super object or namespace that
//! lacks its ownership metadata for the key's tenant, never over a tenant object it did not
//! copy from the super cluster, and writes nothing when the object already holds what it
//! would write.

use ferry_core::translate::{Reason, Refusal};
use serde_json::{json, Map, Value};

use crate::binding::{bind, binding, release_command, Binding};
use crate::compare::{digest, holds, same_copy, ANN_APPLIED};
use crate::key::{slash, Key};
use crate::ledger::Part;
use crate::object::{annotation, deleting, meta_str, rv, uid, Ownership};

/// What to do about one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// It is as it should be.
    Nothing,
    /// It is being deleted (finalizers): look again later.
    Wait,
    /// Create it (a super copy: server-side applied on condition that nothing holds the name).
    Create(Value),
    /// Server-side apply it (to the object whose uid the body names).
    Apply(Value),
    /// Replace it (the body carries the resourceVersion that guards the write).
    Replace(Value),
    /// Merge-patch it.
    Patch(Value),
    /// Delete the object with this uid.
    Delete {
        /// Its uid (the delete's precondition).
        uid: String,
        /// Its resourceVersion as decided on (the other precondition: a changed object is
        /// decided again).
        version: String,
    },
    /// Delete the copy (this uid) of an earlier tenant object of the same name; the next
    /// reconcile writes the new one.
    Recreate {
        /// The old copy's uid.
        uid: String,
        /// Its resourceVersion.
        version: String,
    },
    /// The cache cannot tell whether someone else's object holds the name: read it from the
    /// API server and decide again (`public_checked`) with this desired object.
    Check(Value),
    /// Write nothing and report why.
    Refuse(Refusal),
}

/// Whether a toSuper object should have a super copy: it exists, its namespace is alive, and a
/// dependency is referenced by a synced object.
pub fn wanted(exists: bool, namespace_alive: bool, dependency: bool, referenced: bool) -> bool {
    exists && namespace_alive && (!dependency || referenced)
}

/// The super copy to write: the translation with the digest ferry compares by.
pub fn stamped(mut translated: Value) -> (Value, String) {
    let hash = digest(&translated);
    crate::object::set_annotation(&mut translated, ANN_APPLIED, hash.clone());
    (translated, hash)
}

/// A wanted tenant object (uid `tenant_uid`) whose super copy should be `desired` (digest
/// `hash`); `actual` is ferry's copy in the cache, and `holding` whether it is known to hold
/// what ferry applied: ferry's last write produced it, or the cache checked it (a checked
/// copy is reduced to what flows up, so only its digest annotation can be compared). A copy is
/// created only where nothing holds the name (`Create` is a create, see [`checked`] when it
/// fails) and applied only to the copy ferry looked at (`Apply` carries its uid).
pub fn to_super(
    desired: &Value,
    hash: &str,
    actual: Option<&Value>,
    tenant_uid: &str,
    holding: bool,
) -> Action {
    match actual {
        None => Action::Create(desired.clone()),
        Some(s) => going_or_earlier(s, tenant_uid).unwrap_or_else(|| {
            if annotation(s, ANN_APPLIED) == Some(hash) && (holding || holds(s, desired)) {
                Action::Nothing
            } else {
                Action::Apply(with_uid(desired, uid(s)))
            }
        }),
    }
}

/// `desired` applied to the copy `actual` whatever it holds.
pub fn reapply(desired: &Value, actual: &Value) -> Action {
    Action::Apply(with_uid(desired, uid(actual)))
}

/// What an existing copy needs before it can be applied to: `Wait` while it is being
/// deleted, `Recreate` when it is the copy of an earlier tenant object of the same name.
fn going_or_earlier(copy: &Value, tenant_uid: &str) -> Option<Action> {
    if deleting(copy) {
        Some(Action::Wait)
    } else if Ownership::of(copy).uid != Some(tenant_uid) {
        Some(Action::Recreate {
            uid: uid(copy).to_string(),
            version: rv(copy).to_string(),
        })
    } else {
        None
    }
}

/// After a `Create` of a super copy failed because something holds the name: `found` is
/// what does. ferry's own copy (the cache had not seen it yet) is judged as [`to_super`] judges
/// a cached one (a copy of an earlier tenant object is recreated, not adopted); someone else's
/// object is refused, never written.
pub fn checked(
    found: Option<&Value>,
    key: &Key,
    namespaced: bool,
    desired: &Value,
    tenant_uid: &str,
) -> Action {
    match found {
        Some(f) if !Ownership::of(f).is_copy_of(key, namespaced) => {
            let at = slash(
                meta_str(f, "namespace").unwrap_or(""),
                meta_str(f, "name").unwrap_or(""),
            );
            Action::Refuse(Refusal::new(
                Reason::SyncConflict,
                format!(
                    "super object {at} already exists and {}; it is left untouched",
                    Ownership::of(f).owner()
                ),
            ))
        }
        Some(f) => going_or_earlier(f, tenant_uid)
            .unwrap_or_else(|| Action::Apply(with_uid(desired, uid(f)))),
        // Gone again meanwhile: create it.
        None => Action::Create(desired.clone()),
    }
}

/// `desired` naming the uid of the object it may be applied to.
fn with_uid(desired: &Value, uid: &str) -> Value {
    let mut body = desired.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), Value::String(uid.into()));
    }
    body
}

/// An object that should not exist (any more): delete it unless it is gone or going.
pub fn remove(actual: Option<&Value>) -> Action {
    match actual {
        Some(a) if !deleting(a) => Action::Delete {
            uid: uid(a).to_string(),
            version: rv(a).to_string(),
        },
        _ => Action::Nothing,
    }
}

/// The super namespace `name` that a tenant object in `tenant_ns` needs: `found` is what
/// holds the name, `labels` what it should copy from the tenant namespace, `cluster` the
/// tenant cluster it is bound to (recorded at creation, or later if it records none). `Nothing`
/// and `Patch` let the object go on; `Create` too, once made. Never a namespace ferry does not
/// own, or one bound to another cluster.
pub fn super_namespace(
    found: Option<&Value>,
    tenant: &str,
    tenant_ns: &str,
    name: &str,
    labels: &Map<String, Value>,
    cluster: Option<&str>,
) -> Action {
    use ferry_core::translate::{
        ANN_TENANT_CLUSTER, ANN_TENANT_LABELS, ANN_TENANT_NAMESPACE, LABEL_TENANT,
    };
    match found {
        Some(ns) if Ownership::of(ns).is_namespace_of(tenant, tenant_ns) => {
            if deleting(ns) {
                return Action::Wait;
            }
            if binding(ns, cluster) == Binding::Other {
                return Action::Refuse(Refusal::new(
                    Reason::OutsideTenant,
                    format!(
                        "super namespace {name:?} is bound to another cluster of tenant {tenant:?}; nothing is written into it until an admin releases it: {}",
                        release_command(tenant)
                    ),
                ));
            }
            let patch = crate::namespace_labels::patch(ns, labels);
            bind(patch, ns, cluster).map_or(Action::Nothing, Action::Patch)
        }
        Some(ns) => Action::Refuse(Refusal::new(
            Reason::SyncConflict,
            format!(
                "super namespace {name:?} exists and {}; nothing is written into it",
                Ownership::of(ns).owner()
            ),
        )),
        None => {
            let mut all = labels.clone();
            let copied = crate::namespace_labels::recorded(labels);
            all.insert(LABEL_TENANT.into(), json!(tenant));
            let mut annotations =
                json!({ANN_TENANT_NAMESPACE: tenant_ns, ANN_TENANT_LABELS: copied});
            if let Some(cluster) = cluster {
                annotations[ANN_TENANT_CLUSTER] = json!(cluster);
            }
            Action::Create(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": all, "annotations": annotations},
            }))
        }
    }
}

/// A tenant namespace (`alive` or gone) and its super namespace `found`: labels follow while
/// it lives (and the tenant cluster `cluster` is recorded if it records none); it is deleted
/// when the tenant namespace goes. Never a namespace ferry does not own, nor one bound to
/// another cluster.
pub fn tenant_namespace(
    alive: bool,
    found: Option<&Value>,
    tenant: &str,
    tenant_ns: &str,
    labels: &Map<String, Value>,
    cluster: Option<&str>,
) -> Action {
    let Some(ns) = found else {
        return Action::Nothing;
    };
    if !Ownership::of(ns).is_namespace_of(tenant, tenant_ns)
        || deleting(ns)
        || binding(ns, cluster) == Binding::Other
    {
        return Action::Nothing;
    }
    if alive {
        let patch = crate::namespace_labels::patch(ns, labels);
        bind(patch, ns, cluster).map_or(Action::Nothing, Action::Patch)
    } else {
        remove(Some(ns))
    }
}

/// A tenant's copy of a public super object: `desired` (none when the object is gone or not
/// selected), `copy` the tenant's copy in the cache, `wrote` whether ferry's last write
/// produced it. A tenant's edit of the copy is reverted.
pub fn public_copy(desired: Option<&Value>, copy: Option<&Value>, wrote: bool) -> Action {
    match (desired, copy) {
        (None, copy) => remove(copy),
        (Some(d), None) => Action::Check(d.clone()),
        (Some(d), Some(c)) if same_copy(c, d) || wrote => Action::Nothing,
        (Some(d), Some(c)) => Action::Replace(guarded(d, c)),
    }
}

/// After [`Action::Check`] of a read-only copy (public, or produced): `found` holds the name
/// in the tenant. The tenant's own object is never overwritten; `source` says what the copy
/// would have been of (for the refusal).
pub fn public_checked(found: Option<&Value>, desired: &Value, what: &str, source: &str) -> Action {
    match found {
        Some(f) if !Ownership::of(f).from_super => Action::Refuse(Refusal::new(
            Reason::SyncConflict,
            format!("the tenant has its own {what}; {source} is not copied over it"),
        )),
        Some(f) => Action::Replace(guarded(desired, f)),
        None => Action::Create(desired.clone()),
    }
}

/// `desired` with the resourceVersion of `actual`, so that a replace fails if it changed.
fn guarded(desired: &Value, actual: &Value) -> Value {
    let mut body = desired.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv(actual).into()));
    }
    body
}

/// What flows up into the tenant object `object`: `fragment` is the translated super copy
/// (type, metadata, status and super-owned fields). Status goes through the status
/// subresource when the kind has one (`has_status`), with the object otherwise. `wrote(part,
/// digest)` says whether ferry's last write of that part produced `object`.
pub fn up(
    fragment: Value,
    object: &Value,
    has_status: bool,
    wrote: impl Fn(Part, &str) -> bool,
) -> Vec<(Part, String, Value)> {
    let Value::Object(mut fragment) = fragment else {
        return Vec::new();
    };
    let mut head = Map::new();
    for k in ["apiVersion", "kind", "metadata"] {
        if let Some(v) = fragment.remove(k) {
            head.insert(k.into(), v);
        }
    }
    let status = fragment.remove("status");
    let mut owned = fragment;
    let mut writes = Vec::new();
    match status {
        Some(status) if has_status => {
            let hash = digest(&status);
            if object.get("status") != Some(&status) && !wrote(Part::Status, &hash) {
                let mut body = head.clone();
                body.insert("status".into(), status);
                writes.push((Part::Status, hash, Value::Object(body)));
            }
        }
        Some(status) => {
            owned.insert("status".into(), status);
        }
        None => {}
    }
    if !owned.is_empty() {
        let want = Value::Object(owned.clone());
        let hash = digest(&want);
        if !holds(object, &want) && !wrote(Part::Object, &hash) {
            let mut body = head;
            body.extend(owned);
            writes.push((Part::Object, hash, Value::Object(body)));
        }
    }
    writes
}

#[cfg(test)]
#[path = "decide/tests.rs"]
mod tests;
