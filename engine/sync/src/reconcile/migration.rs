//! A tenant namespace's placement, carried out: `ferry.dev/super` on the tenant namespace kept
//! naming where it runs, and a migration's switch once every copy exists in the target
//! (Event `Migrated`); the old super's copies and namespace go next. Where a namespace runs
//! is decided in `placement.rs`.
//!
//! ```text
//!  Placed { active, target } ─ migrating? ─ target namespace ─ every copy there? ─ switch
//!                                                                   └ no: queue the laggards
//! ```

use ferry_core::keys::{ANN_APPLIED, ANN_MIGRATING_FROM, ANN_SUPER};
use ferry_core::policy::Scope;
use kube::runtime::events::{Event, EventType};
use serde_json::{json, Value};

use super::namespaces::namespace_resource;
use super::{Outcome, Reconciler, Result, LOOK_AGAIN};
use crate::cache::{Cache, Phase};
use crate::key::{Key, Kind};
use crate::metrics::labels;
use crate::object::{annotation, deleting, Ownership, OwnershipKey};
use crate::placement::{self, Placed};
use crate::supers::SuperId;

impl Reconciler<'_> {
    /// Keeps `ferry.dev/super` on the tenant namespace `key` naming the super it runs in (a
    /// tenant's edit is reverted), and switches it to the migration's target once every copy
    /// exists there (Event `Migrated`); the old super's copies and namespace go next.
    pub(super) async fn placed_at(&self, key: &Key, placed: Placed) -> Result<Outcome> {
        let Some(tenant_ns) = self.tenant.namespaces.get("", &key.name) else {
            return Ok(Outcome::default());
        };
        let supers = &self.shared.supers;
        let super_ns = self.tenant.names().to_super(&key.name);
        if placed.migrating() {
            // The target's super namespace, even for a namespace without objects.
            let marks = placed.annotations(placed.target, supers);
            if let Some(outcome) = self
                .ensure_namespace(placed.target, key, &tenant_ns, &super_ns, Some(marks))
                .await?
            {
                return Ok(outcome);
            }
            if !self.moved(&key.name, &super_ns, placed) {
                self.requeue_objects(key, placed, true);
                return Ok(Outcome::again(MIGRATION_CHECK));
            }
            // The switch: the target's super namespace is no longer a migration's target,
            // and its generation is the highest. The old one goes next.
            let target = &supers[placed.target];
            self.unmark(placed.target, &super_ns).await?;
            let now = placement::running(&placement::hosts(
                &self.shared.supers,
                &self.tenant.tenancy(),
                &key.name,
            ));
            if now.map(|h| h.index) != Some(placed.target) {
                tracing::warn!(tenant = %self.tenant.name, namespace = %key.name, "the migration's target does not take over (its generation is not the highest); looking again");
                return Ok(Outcome::again(MIGRATION_CHECK));
            }
            let (from, to) = (&supers[placed.active].name, &target.name);
            tracing::info!(tenant = %self.tenant.name, namespace = %key.name, from = %from, to = %to, "migrated the namespace");
            self.shared
                .metrics
                .migrations
                .get_or_create(&labels(&[("tenant", &self.tenant.name)]))
                .inc();
            let event = Event {
                type_: EventType::Normal,
                reason: "Migrated".into(),
                note: Some(format!(
                    "every copy now runs in super cluster {to:?} (was {from:?}); the old copies and super namespace are deleted"
                )),
                action: "Migrate".into(),
                secondary: None,
            };
            self.publish(&tenant_ns, &event).await;
            // The old super's copies go, the new one's status flows up, and the namespace
            // is looked at again (its annotation, the old super namespace).
            self.requeue_objects(key, placed, false);
            return Ok(Outcome {
                wrote: true,
                again: Some(LOOK_AGAIN),
            });
        }
        // A migration's target whose source went away runs the namespace now: its mark goes,
        // so that a later migration cannot take it for a target.
        if placed.marked {
            self.unmark(placed.active, &super_ns).await?;
        }
        // Where it runs, or will once something is synced; a tenant's edit is reverted.
        let wanted = Some(&*supers[placed.active].name);
        if annotation(&tenant_ns, ANN_SUPER) == wanted {
            return Ok(Outcome::default());
        }
        let patch = json!({"metadata": {"annotations": {ANN_SUPER: wanted}}});
        let patched = self
            .tenant
            .writer
            .merge_patch(&namespace_resource(), "", &key.name, &patch)
            .await?;
        self.tenant.namespaces.remember(patched);
        Ok(Outcome::wrote(true))
    }

    /// Removes the migration mark from super namespace `super_ns` in super `i`.
    async fn unmark(&self, i: SuperId, super_ns: &str) -> Result<()> {
        let target = &self.shared.supers[i];
        let unmark = json!({"metadata": {"annotations": {ANN_MIGRATING_FROM: null}}});
        let patched = target
            .writer
            .merge_patch(&namespace_resource(), "", super_ns, &unmark)
            .await?;
        target.namespaces.remember(patched);
        Ok(())
    }

    /// Whether every copy in the tenant namespace `namespace`'s active super has one in its
    /// target (see [`same_copy`]), both supers' caches listed. A refused object whose copy
    /// runs in the active super holds the switch: its copy must not go with the old super.
    fn moved(&self, namespace: &str, super_ns: &str, placed: Placed) -> bool {
        let supers = &self.shared.supers;
        let listed = |c: &Cache| matches!(c.phase(), Phase::Synced | Phase::NotServed);
        self.to_super_entries(Scope::Namespaced).all(|idx| {
            listed(&supers[placed.active].caches[idx]) && listed(&supers[placed.target].caches[idx])
        }) && !self
            .objects_in(namespace)
            .iter()
            .any(|object| self.lagging(object, super_ns, placed))
    }

    /// Whether `object` has a copy in `placed.active` that `placed.target` does not have yet.
    fn lagging(&self, object: &Key, super_ns: &str, placed: Placed) -> bool {
        let Kind::Resource(idx) = object.kind else {
            return false;
        };
        let supers = &self.shared.supers;
        // A placed kind's copy is in the operator's namespace, under its placed name.
        let resource = &self.shared.policy.resources[idx];
        let (super_ns, name) = match resource.placement {
            Some(_) => resource.super_key(&self.tenant.names(), &object.namespace, &object.name),
            None => (super_ns.to_string(), object.name.clone()),
        };
        let Some(running) = supers[placed.active].caches[idx].get(&super_ns, &name) else {
            return false;
        };
        !supers[placed.target].caches[idx]
            .get(&super_ns, &name)
            .is_some_and(|c| same_copy(object, &running, &c))
    }

    /// Queues the objects of the tenant namespace `key`: with `missing`, only those
    /// [`lagging`](Self::lagging) behind in `placed.target`, not refused (a refused one waits
    /// for its next change rather than being translated every second) and not in failure
    /// backoff (it comes back after its backoff).
    fn requeue_objects(&self, key: &Key, placed: Placed, missing: bool) {
        let super_ns = self.tenant.names().to_super(&key.name);
        for object in self.objects_in(&key.name) {
            let wanted = !missing
                || (self.lagging(&object, &super_ns, placed)
                    && !self.tenant.ledger().refusals.contains_key(&object)
                    && !self.shared.queues.failing(&object));
            if wanted {
                self.shared.queues.add(object);
            }
        }
    }
}

/// Whether `copy` (in a migration's target) stands for the running copy `running` of `key`:
/// ferry's copy of the same tenant object, with the same content applied, not being deleted.
fn same_copy(key: &Key, running: &Value, copy: &Value) -> bool {
    let (r, c) = (Ownership::of(running), Ownership::of(copy));
    !deleting(copy)
        && c.is_copy_of(key, true)
        && c.uid == r.uid
        && annotation(copy, ANN_APPLIED) == annotation(running, ANN_APPLIED)
}

/// While a namespace migrates, look again this often whether every copy exists on the target.
const MIGRATION_CHECK: std::time::Duration = std::time::Duration::from_secs(1);
