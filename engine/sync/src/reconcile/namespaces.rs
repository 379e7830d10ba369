//! Super namespaces: created when the first object needs one (never annexed), their labels
//! kept in line with the tenant namespace's, deleted when it goes.

use ferry_core::keys::{ANN_APPLIED, ANN_GENERATION, ANN_MIGRATING_FROM, ANN_SUPER};
use std::sync::Arc;

use ferry_core::policy::{Direction, Scope};
use ferry_core::translate::{Reason, Refusal};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ApiResource;
use kube::runtime::events::{Event, EventType};
use serde_json::{json, Value};

use super::{Outcome, Reconciler, Result, LOOK_AGAIN, WAIT_FOR_DELETION};
use crate::cache::{Cache, Phase};

use crate::decide::{self, NamespaceFollow, NamespaceStep};
use crate::key::{EntryId, Key, Kind};
use crate::metrics::labels;
use crate::namespace_labels;
use crate::object::{annotation, deleting, Ownership};
use crate::placement::{self, Placed};
use crate::supers::SuperId;

fn namespace_resource() -> ApiResource {
    ApiResource::erase::<Namespace>(&())
}

impl Reconciler<'_> {
    /// Makes sure the super namespace of `key`'s tenant namespace exists in super `i` and is
    /// this tenant's; `Some` ends the reconcile.
    pub(super) async fn ensure_namespace(
        &self,
        i: SuperId,
        key: &Key,
        object: &Value,
        super_ns: &str,
        marks: Option<Value>,
    ) -> Result<Option<Outcome>> {
        let target = &self.shared.supers[i];
        let writer = &target.writer;
        let found = match target.namespaces.get("", super_ns) {
            Some(ns) => Some(ns),
            None => writer
                .get(&namespace_resource(), "", super_ns)
                .await?
                .map(Arc::new),
        };
        // The tenant namespace: the key's, or the key's own name for a namespace key.
        let tenant_ns = match key.kind {
            Kind::Namespace => key.name.as_str(),
            Kind::Resource(_) => key.namespace.as_str(),
        };
        let labels = self.namespace_labels(tenant_ns);
        let action = decide::super_namespace(
            found.as_deref(),
            &self.tenant.name,
            tenant_ns,
            super_ns,
            &labels,
            self.tenant.cluster.get().map(String::as_str),
        );
        // A migration's target that exists already (left from an earlier placement) gets its
        // marks, or the switch would find nothing to switch.
        let action = match (&action, &marks, found.as_deref()) {
            (NamespaceStep::Ready | NamespaceStep::Patch(_), Some(Value::Object(m)), Some(ns))
                if m.contains_key(ANN_MIGRATING_FROM)
                    && m.iter().any(|(k, v)| annotation(ns, k) != v.as_str())
                    // A placement decided before a switch it did not see never marks the
                    // namespace that now runs it.
                    && placement::generation(ns) < generation_of(m) =>
            {
                let mut patch = match action {
                    NamespaceStep::Patch(p) => p,
                    _ => json!({}),
                };
                match patch.pointer_mut("/metadata/annotations") {
                    Some(Value::Object(annotations)) => annotations.extend(m.clone()),
                    _ => patch["metadata"]["annotations"] = Value::Object(m.clone()),
                }
                NamespaceStep::Patch(patch)
            }
            _ => action,
        };
        match action {
            NamespaceStep::Ready => Ok(None),
            NamespaceStep::Patch(patch) => {
                let patched = writer
                    .merge_patch(&namespace_resource(), "", super_ns, &patch)
                    .await?;
                target.namespaces.remember(patched);
                Ok(None)
            }
            NamespaceStep::Create(mut namespace) => {
                // Its placement generation, and the mark of a migration's target.
                if let (Some(Value::Object(marks)), Some(Value::Object(annotations))) =
                    (marks, namespace.pointer_mut("/metadata/annotations"))
                {
                    annotations.extend(marks);
                }
                match writer.create(&namespace_resource(), &namespace).await {
                    Ok(created) => {
                        target.namespaces.remember(created);
                        self.requeue_cluster_scoped();
                        tracing::info!(tenant = %self.tenant.name, namespace = %tenant_ns, super_namespace = %super_ns, cluster = %target.name, "created the super namespace");
                        Ok(None)
                    }
                    // Created meanwhile (by another reconcile): look again.
                    Err(e) if e.code() == Some(409) => Ok(Some(Outcome::again(LOOK_AGAIN))),
                    Err(e) => Err(e),
                }
            }
            NamespaceStep::Wait => Ok(Some(Outcome::again(WAIT_FOR_DELETION))),
            NamespaceStep::Refuse(refusal) => {
                self.refuse(key, Some(object), &refusal).await;
                Ok(Some(Outcome::default()))
            }
        }
    }

    /// Whether a super namespace of the tenant namespace `key` would be deleted were it gone.
    fn would_delete(&self, key: &Key, super_ns: &str) -> bool {
        let cluster = self.tenant.cluster.get().map(String::as_str);
        self.shared.supers.each().any(|target| {
            let found = target.namespaces.get("", super_ns);
            let follow = decide::tenant_namespace(
                false,
                found.as_deref(),
                &self.tenant.name,
                &key.name,
                &serde_json::Map::new(),
                cluster,
            );
            matches!(follow, NamespaceFollow::Delete(_))
        })
    }

    /// Whether the tenant namespace `key` is gone (or going), read from the tenant's API
    /// server.
    async fn gone_from_tenant(&self, key: &Key) -> Result<bool> {
        let found = self
            .tenant
            .writer
            .get(&namespace_resource(), "", &key.name)
            .await?;
        Ok(found.as_ref().is_none_or(deleting))
    }

    /// The labels the super namespace of `tenant_ns` copies.
    fn namespace_labels(&self, tenant_ns: &str) -> serde_json::Map<String, Value> {
        namespace_labels::desired(
            self.tenant.namespaces.get("", tenant_ns).as_deref(),
            &self.shared.namespace_labels,
        )
    }

    /// Refuses `key` when its tenant namespace maps onto a platform namespace
    /// (`platformNamespaces`): `super_ns`, its super name, matches one. Asked wherever a
    /// tenant namespace is mapped for a write, before anything is read or translated; the
    /// Event goes on the key's object in `cache` (the namespace itself for a namespace key).
    /// The super writers' fence (`write/fence.rs`) stops whatever would still get through.
    pub(super) async fn outside_tenant(&self, key: &Key, cache: &Cache, super_ns: &str) -> bool {
        let Some(pattern) = self.shared.platform.matching(super_ns) else {
            return false;
        };
        let tenant_ns = match key.kind {
            Kind::Namespace => key.name.as_str(),
            Kind::Resource(_) => key.namespace.as_str(),
        };
        let refusal = Refusal::new(
            Reason::OutsideTenant,
            format!(
                "tenant namespace {tenant_ns:?} maps to super namespace {super_ns:?}, which is the platform's (platformNamespaces: {:?}); nothing of it is synced",
                pattern.as_str()
            ),
        );
        match cache.get(&key.namespace, &key.name) {
            Some(object) => self.refuse(key, Some(&object), &refusal).await,
            // Gone: nothing to refuse any more.
            None => self.accepted(key),
        }
        true
    }

    /// A tenant namespace: its super namespace follows its labels, and goes (with every copy
    /// in it) when it goes.
    pub(super) async fn namespace(&self, key: &Key) -> Result<Outcome> {
        let super_ns = self.tenant.names().to_super(&key.name);
        if self
            .outside_tenant(key, &self.tenant.namespaces, &super_ns)
            .await
        {
            return Ok(Outcome::default());
        }
        let alive = self.tenant.namespace_alive(&key.name);
        // A super namespace (and all in it) goes only once the tenant's API server, not just
        // its watch, says the tenant namespace is gone: a super namespace's event can arrive
        // before the tenant namespace's.
        if !alive && self.would_delete(key, &super_ns) && !self.gone_from_tenant(key).await? {
            return Ok(Outcome::again(LOOK_AGAIN));
        }
        if !alive {
            self.tenant.forget_choice(&key.name);
            // Its objects go with it, even before the namespace controller deletes them.
            for object in self.objects_in(&key.name) {
                self.shared.queues.add(object);
            }
        }
        let labels = self.namespace_labels(&key.name);
        // Its super namespace stays where the namespace runs (and where it moves to), and goes
        // from any other super.
        let placed = alive
            .then(|| placement::placed(self.shared, self.tenant, &key.name))
            .flatten();
        let keep = placed.map(|p| p.supers()).unwrap_or_default();
        let mut wrote = false;
        // A super that fails does not stop the others (nor a migration's switch).
        let mut failed = None;
        for (i, target) in self.shared.supers.iter() {
            let found = target.namespaces.get("", &super_ns);
            let action = decide::tenant_namespace(
                keep.contains(&i),
                found.as_deref(),
                &self.tenant.name,
                &key.name,
                &labels,
                self.tenant.cluster.get().map(String::as_str),
            );
            let writer = &target.writer;
            let done = match action {
                NamespaceFollow::Patch(patch) => writer
                    .merge_patch(&namespace_resource(), "", &super_ns, &patch)
                    .await
                    .map(|patched| target.namespaces.remember(patched)),
                NamespaceFollow::Delete(doomed) => writer
                    .delete(
                        &namespace_resource(),
                        "",
                        &super_ns,
                        (&doomed.uid, &doomed.version),
                    )
                    .await
                    .map(|()| {
                        tracing::info!(tenant = %self.tenant.name, namespace = %key.name, super_namespace = %super_ns, cluster = %target.name, "deleted the super namespace");
                        self.requeue_cluster_scoped();
                    }),
                NamespaceFollow::Nothing => continue,
            };
            match done {
                Ok(()) => wrote = true,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        let outcome = match placed {
            Some(placed) => self.placed_at(key, placed).await?,
            None => Outcome::default(),
        };
        match failed {
            Some(e) => Err(e),
            None => Ok(Outcome {
                wrote: wrote || outcome.wrote,
                ..outcome
            }),
        }
    }
}

impl Reconciler<'_> {
    /// Keeps `ferry.dev/super` on the tenant namespace `key` naming the super it runs in (a
    /// tenant's edit is reverted), and switches it to the migration's target once every copy
    /// exists there (Event `Migrated`); the old super's copies and namespace go next.
    async fn placed_at(&self, key: &Key, placed: Placed) -> Result<Outcome> {
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
            let now = placement::running(&placement::hosts(self.shared, self.tenant, &key.name));
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

    /// With several supers, queues the tenant's cluster-scoped toSuper objects: they go to
    /// every super holding one of its namespaces, and that just changed.
    fn requeue_cluster_scoped(&self) {
        if self.shared.supers.len() == 1 {
            return;
        }
        for idx in self.to_super_entries(Scope::Cluster) {
            for (ns, name) in self.tenant.caches[idx].keys() {
                let key = Key::new(&self.tenant.name, Kind::Resource(idx), &ns, &name);
                self.shared.queues.add(key);
            }
        }
    }

    /// The keys of the tenant's objects of namespaced toSuper kinds in `namespace`.
    fn objects_in(&self, namespace: &str) -> Vec<Key> {
        self.to_super_entries(Scope::Namespaced)
            .flat_map(|idx| {
                self.tenant.caches[idx]
                    .keys()
                    .into_iter()
                    .filter(|(ns, _)| ns == namespace)
                    .map(move |(ns, name)| {
                        Key::new(&self.tenant.name, Kind::Resource(idx), &ns, &name)
                    })
            })
            .collect()
    }

    /// The policy entries of toSuper kinds of `scope`.
    fn to_super_entries(&self, scope: Scope) -> impl Iterator<Item = EntryId> + '_ {
        crate::key::entries(&self.shared.policy)
            .filter(move |(_, r)| r.direction == Direction::ToSuper && r.scope == scope)
            .map(|(idx, _)| idx)
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

/// The placement generation in annotations `marks`.
fn generation_of(marks: &serde_json::Map<String, Value>) -> u64 {
    marks
        .get(ANN_GENERATION)
        .and_then(Value::as_str)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}
