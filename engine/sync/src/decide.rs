//! Every reconcile decision, as pure functions of what should exist, what does, and what
//! ferry remembers writing: they return what to do (each its own type) and never touch an API server. The
//! executors in `reconcile` read the caches, translate, call these, and carry the action out.
//!
//! Invariants decided here, once: ferry never writes over a super object or namespace that
//! lacks its ownership metadata for the key's tenant, never over a tenant object it did not
//! copy from the super cluster, and writes nothing when the object already holds what it
//! would write.

use ferry_core::keys::{
    ANN_APPLIED, ANN_TENANT_CLUSTER, ANN_TENANT_LABELS, ANN_TENANT_NAMESPACE, LABEL_TENANT,
};
use ferry_core::translate::{Reason, Refusal};
use serde_json::{json, Map, Value};

use crate::binding::{bind, binding, release_command, Binding};
use crate::compare::{digest, holds, same_copy};
use crate::key::{slash, Key};
use crate::ledger::Part;
pub use crate::object::Doomed;
use crate::object::{annotation, deleting, meta_str, rv, uid, Ownership, OwnershipKey};

/// What ferry's copy of a tenant object in one super needs ([`to_super`], [`checked`]).
#[derive(Clone, Debug, PartialEq)]
pub enum CopyWrite {
    /// It holds what ferry would write.
    Nothing,
    /// It is being deleted (finalizers): look again later.
    Wait,
    /// Create it, on condition that nothing holds the name.
    Create(Value),
    /// Server-side apply it to the copy whose uid the body names.
    Apply(Value),
    /// Delete this copy of an earlier tenant object of the same name; the next reconcile
    /// writes the new one.
    Recreate(Doomed),
    /// Someone else's object holds the name: write nothing and report why.
    Refuse(Refusal),
}

/// What a super namespace needs before an object goes into it ([`super_namespace`]).
#[derive(Clone, Debug, PartialEq)]
pub enum NamespaceStep {
    /// It is this tenant's, as it should be.
    Ready,
    /// It is being deleted: look again later.
    Wait,
    /// Create it.
    Create(Value),
    /// Merge-patch it (labels, the tenant cluster it records).
    Patch(Value),
    /// It is not this tenant's, or bound to another cluster: nothing goes into it.
    Refuse(Refusal),
}

/// What a tenant namespace's super namespace needs ([`tenant_namespace`]).
#[derive(Clone, Debug, PartialEq)]
pub enum NamespaceFollow {
    /// Nothing (as it should be, or not ferry's to touch).
    Nothing,
    /// Merge-patch its labels (and the tenant cluster it records).
    Patch(Value),
    /// The tenant namespace is gone: delete it.
    Delete(Doomed),
}

/// What a tenant's read-only copy of a super object (public or produced) needs
/// ([`read_only_copy`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ReadOnly {
    /// It is as it should be (or ferry's last write made it).
    Nothing,
    /// None in the cache: whether someone else's object holds the name is read from the API
    /// server, then decided again ([`read_only_checked`]) with this desired copy.
    Check(Value),
    /// Replace it (the body carries the resourceVersion that guards the write).
    Replace(Value),
    /// Its source is gone or no longer selected: delete it.
    Delete(Doomed),
}

/// A read-only copy's name, read from the tenant's API server ([`read_only_checked`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Checked {
    /// Free: create the copy.
    Create(Value),
    /// An earlier copy of ferry's: replace it (guarded by its resourceVersion).
    Replace(Value),
    /// The tenant's own object: never overwritten.
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
) -> CopyWrite {
    match actual {
        None => CopyWrite::Create(desired.clone()),
        Some(s) => going_or_earlier(s, tenant_uid).unwrap_or_else(|| {
            if annotation(s, ANN_APPLIED) == Some(hash) && (holding || holds(s, desired)) {
                CopyWrite::Nothing
            } else {
                CopyWrite::Apply(with_uid(desired, uid(s)))
            }
        }),
    }
}

/// `desired` applied to the copy `actual` whatever it holds.
pub fn reapply(desired: &Value, actual: &Value) -> CopyWrite {
    CopyWrite::Apply(with_uid(desired, uid(actual)))
}

/// What an existing copy needs before it can be applied to: `Wait` while it is being
/// deleted, `Recreate` when it is the copy of an earlier tenant object of the same name.
fn going_or_earlier(copy: &Value, tenant_uid: &str) -> Option<CopyWrite> {
    if deleting(copy) {
        Some(CopyWrite::Wait)
    } else if Ownership::of(copy).uid != Some(tenant_uid) {
        Some(CopyWrite::Recreate(Doomed::of(copy)))
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
) -> CopyWrite {
    match found {
        Some(f) if !Ownership::of(f).is_copy_of(key, namespaced) => {
            let at = slash(
                meta_str(f, "namespace").unwrap_or(""),
                meta_str(f, "name").unwrap_or(""),
            );
            CopyWrite::Refuse(Refusal::new(
                Reason::SyncConflict,
                format!(
                    "super object {at} already exists and {}; it is left untouched",
                    Ownership::of(f).owner()
                ),
            ))
        }
        Some(f) => going_or_earlier(f, tenant_uid)
            .unwrap_or_else(|| CopyWrite::Apply(with_uid(desired, uid(f)))),
        // Gone again meanwhile: create it.
        None => CopyWrite::Create(desired.clone()),
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
pub fn remove(actual: Option<&Value>) -> Option<Doomed> {
    actual.filter(|a| !deleting(a)).map(Doomed::of)
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
) -> NamespaceStep {
    match found {
        Some(ns) if Ownership::of(ns).is_namespace_of(tenant, tenant_ns) => {
            if deleting(ns) {
                return NamespaceStep::Wait;
            }
            if binding(ns, cluster) == Binding::Other {
                return NamespaceStep::Refuse(Refusal::new(
                    Reason::OutsideTenant,
                    format!(
                        "super namespace {name:?} is bound to another cluster of tenant {tenant:?}; nothing is written into it until an admin releases it: {}",
                        release_command(tenant)
                    ),
                ));
            }
            let patch = crate::namespace_labels::patch(ns, labels);
            bind(patch, ns, cluster).map_or(NamespaceStep::Ready, NamespaceStep::Patch)
        }
        Some(ns) => NamespaceStep::Refuse(Refusal::new(
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
            NamespaceStep::Create(json!({
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
) -> NamespaceFollow {
    let Some(ns) = found else {
        return NamespaceFollow::Nothing;
    };
    if !Ownership::of(ns).is_namespace_of(tenant, tenant_ns)
        || deleting(ns)
        || binding(ns, cluster) == Binding::Other
    {
        return NamespaceFollow::Nothing;
    }
    if alive {
        let patch = crate::namespace_labels::patch(ns, labels);
        bind(patch, ns, cluster).map_or(NamespaceFollow::Nothing, NamespaceFollow::Patch)
    } else {
        remove(Some(ns)).map_or(NamespaceFollow::Nothing, NamespaceFollow::Delete)
    }
}

/// A tenant's read-only copy of a super object (public, or produced): `desired` (none when
/// the object is gone or not selected), `copy` the tenant's copy in the cache, `wrote` whether
/// ferry's last write produced it. A tenant's edit of the copy is reverted.
pub fn read_only_copy(desired: Option<&Value>, copy: Option<&Value>, wrote: bool) -> ReadOnly {
    match (desired, copy) {
        (None, copy) => remove(copy).map_or(ReadOnly::Nothing, ReadOnly::Delete),
        (Some(d), None) => ReadOnly::Check(d.clone()),
        (Some(d), Some(c)) if same_copy(c, d) || wrote => ReadOnly::Nothing,
        (Some(d), Some(c)) => ReadOnly::Replace(guarded(d, c)),
    }
}

/// After [`ReadOnly::Check`]: `found` holds the name in the tenant. The tenant's own object is
/// never overwritten; `source` says what the copy would have been of (for the refusal).
pub fn read_only_checked(
    found: Option<&Value>,
    desired: &Value,
    what: &str,
    source: &str,
) -> Checked {
    match found {
        Some(f) if !Ownership::of(f).from_super => Checked::Refuse(Refusal::new(
            Reason::SyncConflict,
            format!("the tenant has its own {what}; {source} is not copied over it"),
        )),
        Some(f) => Checked::Replace(guarded(desired, f)),
        None => Checked::Create(desired.clone()),
    }
}

/// What becomes of a read-only copy that cannot change in place (the API server answered a
/// replace with 422).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// Kept as it is, reported: a public copy (a CustomResourceDefinition's instances would
    /// go with it; a StorageClass's provisioner when another super's object became the source).
    Keep,
    /// Deleted and made anew: a produced copy (a tenant made it immutable, or the super
    /// object's type changed), nothing is lost.
    Remake,
}

/// [`unchangeable`]'s answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Unchangeable {
    /// Left as it is, with this refusal reported.
    Keep(Refusal),
    /// Delete it; the next reconcile makes it anew.
    Remake(Doomed),
    /// Nothing to remake (no copy was looked at): the write's error stands.
    Fail,
}

/// The read-only copy `copy` could not be replaced (422, `error`): what `in_place` makes of it.
pub fn unchangeable(in_place: InPlace, copy: Option<&Value>, error: &str) -> Unchangeable {
    match (in_place, copy) {
        (InPlace::Keep, _) => Unchangeable::Keep(Refusal::new(
            Reason::Invalid,
            format!("the copy cannot change in place ({error}); it is left as it is"),
        )),
        (InPlace::Remake, Some(copy)) => Unchangeable::Remake(Doomed::of(copy)),
        (InPlace::Remake, None) => Unchangeable::Fail,
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
