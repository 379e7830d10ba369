//! Produced objects: what a super-side controller makes in a tenant's super namespace for one
//! of its synced objects (named by a `produced: true` reference of the object, or owned by its
//! copy through a controller ownerReference) is copied up into the tenant namespace,
//! read-only, and collected when the super object or the reason goes. Where a cluster-scoped
//! object names the tenant namespace something is produced in, its super namespace is made
//! first (`ensure_produced_namespaces`, called by toSuper).
//!
//! ```text
//!  super object in the namespace's running super ─ producer (reference | owner) ─▶ to_tenant
//!      ─▶ decide::read_only_copy ─▶ create (never over the tenant's own object) / revert / delete
//! ```

use ferry_core::keys::ANN_PRODUCED_FOR;
use std::sync::Arc;

use ferry_core::policy::{Direction, Resource, Scope};
use ferry_core::schema::load::split_api_version;
use ferry_core::translate::Reason;
use serde_json::Value;

use super::read_only::{Copying, EventOn, Source, Target};
use super::{Outcome, Reconciler, Result};
use crate::decide::InPlace;
use crate::key::{EntryId, Key, Kind};
use crate::object::{deleting, uid, Ownership, OwnershipKey};
use crate::placement;

/// While a copy waits for what it was produced for to be reconciled, look again this often.
const AWAIT_PRODUCER: std::time::Duration = std::time::Duration::from_secs(1);

/// How long after a tenant starts a copy may wait for its referrer's first reconcile.
const AWAIT_PRODUCER_AT_START: std::time::Duration = std::time::Duration::from_secs(60);

/// The tenant object a super object was produced for.
struct Producer {
    /// Its key.
    key: Key,
    /// `<group>/<Kind>/<name>`, the copy's `ferry.dev/produced-for`.
    label: String,
}

impl Reconciler<'_> {
    /// A produced kind's key: the tenant's copy follows the super object while something of
    /// the tenant's names or owns it.
    pub(super) async fn produced(
        &self,
        key: &Key,
        idx: EntryId,
        resource: &Resource,
    ) -> Result<Outcome> {
        let tenant_cache = &self.tenant.caches[idx];
        let Some(tenant_kind) = tenant_cache.served() else {
            return Ok(Outcome::default());
        };
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        // A hashed super namespace name is read back (going up) only once learnt.
        self.tenant.learn(namespace);
        let super_ns = self.tenant.names().to_super(namespace);
        // Only the super the namespace runs in (not a migration's other one) produces.
        let hosts = placement::hosts(&self.shared.supers, &self.tenant.tenancy(), namespace);
        let source = placement::running(&hosts)
            .and_then(|h| {
                let object = self.shared.supers[h.index].caches[idx].get(&super_ns, name)?;
                Some((h.index, object))
            })
            .filter(|(_, o)| !deleting(o));
        let producer = source
            .as_ref()
            .and_then(|(i, object)| self.producer(key, *i, &super_ns, object));
        let copy = tenant_cache.get(namespace, name);
        let referrer = producer.as_ref().and_then(|p| self.tenant_object(&p.key));
        let desired = match (&source, &producer) {
            (Some((_, object)), Some(p)) if self.tenant.namespace_alive(namespace) => {
                let translated = self
                    .translate_for(resource, (**object).clone(), false, Some(p.label.clone()))
                    .await;
                match translated {
                    Ok(t) => Some(t.object),
                    Err(r) if r.reason == Reason::NotSelected => None,
                    Err(r) => {
                        self.refuse(key, referrer.as_deref(), &r).await;
                        return Ok(Outcome::default());
                    }
                }
            }
            _ => None,
        };
        // After a restart, what a copy says it was produced for may not have been reconciled
        // yet (and so not named it again): wait for that rather than delete the copy.
        if desired.is_none() && self.awaits_producer(key, copy.as_deref()) {
            return Ok(Outcome::again(AWAIT_PRODUCER));
        }
        let target = Target::new(key, tenant_cache, &tenant_kind, resource);
        let copying = Copying {
            source: Source::Produced {
                kind: &resource.group_kind,
                producer: producer.as_ref().map(|p| p.label.as_str()),
            },
            gone: "a produced object that is gone or no longer named or owned",
            replaced:
                "updated a produced copy (the super object changed, or a tenant edit is reverted)",
            // On the object it was produced for: the tenant's own object stays untouched.
            refuse_on: EventOn::Object(referrer.as_deref()),
            in_place: InPlace::Remake,
        };
        let copy = copy.as_deref();
        let planned = self
            .plan_read_only(&target, desired.as_ref(), copy, &copying)
            .await?;
        self.apply_read_only(&target, planned, copy, &copying).await
    }

    /// What the super object `object` (in super `i`'s namespace `super_ns`) was produced for:
    /// a synced object of the tenant that names it (`produced: true` references), else the
    /// tenant object whose copy is its controller owner. Never its labels or annotations.
    fn producer(
        &self,
        key: &Key,
        i: crate::supers::SuperId,
        super_ns: &str,
        object: &Value,
    ) -> Option<Producer> {
        let policy = &self.shared.policy;
        let label = |k: &Key| {
            let Kind::Resource(idx) = k.kind else {
                return None;
            };
            let gk = &policy.resources[idx].group_kind;
            Some(format!("{}/{}/{}", gk.group, gk.kind, k.name))
        };
        let referrers = self.tenant.ledger().refs.referrers(key);
        if let Some(referrer) = referrers
            .into_iter()
            .find(|r| self.tenant_object(r).is_some())
        {
            return Some(Producer {
                label: label(&referrer)?,
                key: referrer,
            });
        }
        let owners = object.pointer("/metadata/ownerReferences")?.as_array()?;
        let owner = owners
            .iter()
            .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
        let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or("");
        let (group, _) = split_api_version(text("apiVersion"));
        let owner_idx = policy
            .resources
            .iter()
            .position(|r| {
                r.direction == Direction::ToSuper
                    && r.scope == Scope::Namespaced
                    && r.group_kind.group == group
                    && r.group_kind.kind == text("kind")
            })
            .map(EntryId)?;
        let copy = self.shared.supers[i].caches[owner_idx].get(super_ns, text("name"))?;
        let ownership = Ownership::of(&copy);
        let tenant_name = ownership.name?;
        let referrer = key.sibling(Kind::Resource(owner_idx), &key.namespace, tenant_name);
        let owns = uid(&copy) == text("uid")
            && !text("uid").is_empty()
            && ownership.is_copy_of(&referrer, true);
        if !owns || self.tenant_object(&referrer).is_none() {
            return None;
        }
        Some(Producer {
            label: label(&referrer)?,
            key: referrer,
        })
    }

    /// Whether the copy `copy` of `key` says it was produced for a tenant object that exists
    /// and has not been reconciled since ferry started.
    fn awaits_producer(&self, key: &Key, copy: Option<&Value>) -> bool {
        let Some(label) = copy.and_then(|c| crate::object::annotation(c, ANN_PRODUCED_FOR)) else {
            return false;
        };
        let mut parts = label.splitn(3, '/');
        let (Some(group), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let policy = &self.shared.policy;
        let Some(idx) = policy
            .resources
            .iter()
            .position(|r| {
                r.direction == Direction::ToSuper
                    && r.group_kind.group == group
                    && r.group_kind.kind == kind
            })
            .map(EntryId)
        else {
            return false;
        };
        let referrer = key.sibling(Kind::Resource(idx), &key.namespace, name);
        // Only while the tenant's first reconciles run: the annotation is the tenant's to edit.
        let starting = self
            .tenant
            .primed_for()
            .is_none_or(|d| d < AWAIT_PRODUCER_AT_START);
        if !starting || self.tenant_object(&referrer).is_none() {
            return false;
        }
        let ledger = self.tenant.ledger();
        !ledger.synced(&referrer) && !ledger.refusals.contains_key(&referrer)
    }

    /// The tenant object `key` names, from the caches, unless it is being deleted.
    fn tenant_object(&self, key: &Key) -> Option<Arc<Value>> {
        let Kind::Resource(idx) = key.kind else {
            return None;
        };
        self.tenant.caches[idx]
            .get(&key.namespace, &key.name)
            .filter(|o| !deleting(o))
    }
}

impl Reconciler<'_> {
    /// Creates the super namespaces of the tenant namespaces that `references` name as
    /// where something is produced (a cluster-scoped referrer's `namespaceField`), where each
    /// is placed; namespaces gone or going are left alone.
    pub(super) async fn ensure_produced_namespaces(
        &self,
        key: &Key,
        object: &Value,
        references: &[ferry_core::translate::Reference],
    ) -> Result<ProducedNamespaces> {
        let names = self.tenant.names();
        let mut ready = ProducedNamespaces::Ready;
        for r in references
            .iter()
            .filter(|r| r.produced && !r.namespace.is_empty())
        {
            let placed = self
                .tenant
                .namespace_alive(&r.namespace)
                .then(|| {
                    placement::placed(&self.shared.supers, &self.tenant.tenancy(), &r.namespace)
                })
                .flatten();
            let Some(placed) = placed else {
                ready = ProducedNamespaces::Pending;
                continue;
            };
            let at = key.sibling(key.kind, &r.namespace, &key.name);
            let super_ns = names.to_super(&r.namespace);
            for i in placed.supers() {
                let marks = Some(placed.annotations(i, &self.shared.supers));
                if let Some(outcome) = self
                    .ensure_namespace(i, &at, object, &super_ns, marks)
                    .await?
                {
                    return Ok(ProducedNamespaces::Stop(outcome));
                }
            }
        }
        Ok(ready)
    }
}

/// Whether the super namespaces a cluster-scoped object's produced references need exist.
pub(super) enum ProducedNamespaces {
    /// Each exists (or was created).
    Ready,
    /// A tenant namespace named is not known (yet): looked at again by the patrol.
    Pending,
    /// A namespace is being deleted or was refused: this reconcile ends so.
    Stop(Outcome),
}
