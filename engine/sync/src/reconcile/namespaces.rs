//! Super namespaces: created when the first object needs one (never annexed), their labels
//! kept in line with the tenant namespace's, deleted when it goes.

use std::sync::Arc;

use ferry_core::keys::{ANN_GENERATION, ANN_MIGRATING_FROM};
use ferry_core::policy::{Direction, Scope};
use ferry_core::translate::{Reason, Refusal};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ApiResource;
use serde_json::{json, Value};

use super::{Outcome, Reconciler, Result, LOOK_AGAIN, WAIT_FOR_DELETION};
use crate::cache::Cache;
use crate::decide::{self, NamespaceFollow, NamespaceStep};
use crate::key::{EntryId, Key, Kind};
use crate::namespace_labels;
use crate::object::{annotation, deleting};
use crate::placement;
use crate::supers::SuperId;

pub(super) fn namespace_resource() -> ApiResource {
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
            self.tenant.choices.forget(&key.name);
            // Its objects go with it, even before the namespace controller deletes them.
            for object in self.objects_in(&key.name) {
                self.shared.queues.add(object);
            }
        }
        let labels = self.namespace_labels(&key.name);
        // Its super namespace stays where the namespace runs (and where it moves to), and goes
        // from any other super.
        let placed = alive
            .then(|| placement::placed(&self.shared.supers, &self.tenant.tenancy(), &key.name))
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
                    .delete(&namespace_resource(), "", &super_ns, &doomed)
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
    /// With several supers, queues the tenant's cluster-scoped toSuper objects: they go to
    /// every super holding one of its namespaces, and that just changed.
    pub(super) fn requeue_cluster_scoped(&self) {
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
    pub(super) fn objects_in(&self, namespace: &str) -> Vec<Key> {
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
    pub(super) fn to_super_entries(&self, scope: Scope) -> impl Iterator<Item = EntryId> + '_ {
        crate::key::entries(&self.shared.policy)
            .filter(move |(_, r)| r.direction == Direction::ToSuper && r.scope == scope)
            .map(|(idx, _)| idx)
    }
}

/// The placement generation in annotations `marks`.
fn generation_of(marks: &serde_json::Map<String, Value>) -> u64 {
    marks
        .get(ANN_GENERATION)
        .and_then(Value::as_str)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}
