//! Super namespaces: created when the first object needs one (never annexed), their labels
//! kept in line with the tenant namespace's, deleted when it goes.

use std::sync::Arc;

use ferry_core::policy::{Direction, Scope};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ApiResource;
use serde_json::Value;

use super::{Outcome, Reconciler, Result, LOOK_AGAIN, WAIT_FOR_DELETION};
use crate::decide::{self, Action};
use crate::key::{Key, Kind};
use crate::namespace_labels;
use crate::object::meta_str;

fn namespace_resource() -> ApiResource {
    ApiResource::erase::<Namespace>(&())
}

impl Reconciler<'_> {
    /// Makes sure the super namespace of `key`'s tenant namespace exists and is this tenant's;
    /// `Some` ends the reconcile.
    pub(super) async fn ensure_namespace(
        &self,
        key: &Key,
        object: &Value,
        super_ns: &str,
    ) -> Result<Option<Outcome>> {
        let writer = &self.shared.writer;
        let found = match self.shared.namespaces.get("", super_ns) {
            Some(ns) => Some(ns),
            None => writer
                .get(&namespace_resource(), "", super_ns)
                .await?
                .map(Arc::new),
        };
        let labels = self.namespace_labels(&key.namespace);
        let action = decide::super_namespace(
            found.as_deref(),
            &self.tenant.name,
            &key.namespace,
            super_ns,
            &labels,
        );
        match action {
            Action::Nothing => Ok(None),
            Action::Patch(patch) => {
                let patched = writer
                    .merge_patch(&namespace_resource(), "", super_ns, &patch)
                    .await?;
                self.shared.namespaces.remember(patched);
                Ok(None)
            }
            Action::Create(namespace) => {
                match writer.create(&namespace_resource(), &namespace).await {
                    Ok(created) => {
                        self.shared.namespaces.remember(created);
                        tracing::info!(tenant = %self.tenant.name, namespace = %key.namespace, super_namespace = %super_ns, "created the super namespace");
                        Ok(None)
                    }
                    // Created meanwhile (by another reconcile): look again.
                    Err(e) if e.code() == Some(409) => Ok(Some(Outcome::again(LOOK_AGAIN))),
                    Err(e) => Err(e),
                }
            }
            Action::Wait => Ok(Some(Outcome::again(WAIT_FOR_DELETION))),
            Action::Refuse(refusal) => {
                self.refuse(key, Some(object), &refusal).await;
                Ok(Some(Outcome::default()))
            }
            _ => Ok(Some(Outcome::default())),
        }
    }

    /// The labels the super namespace of `tenant_ns` copies.
    fn namespace_labels(&self, tenant_ns: &str) -> serde_json::Map<String, Value> {
        namespace_labels::desired(self.tenant.namespaces.get("", tenant_ns).as_deref())
    }

    /// A tenant namespace: its super namespace follows its labels, and goes (with every copy
    /// in it) when it goes.
    pub(super) async fn namespace(&self, key: &Key) -> Result<Outcome> {
        let alive = self.tenant.namespace_alive(&key.name);
        if !alive {
            // Its objects go with it, even before the namespace controller deletes them.
            for (idx, resource) in self.shared.policy.resources.iter().enumerate() {
                if resource.direction != Direction::ToSuper || resource.scope != Scope::Namespaced {
                    continue;
                }
                for object in self.tenant.caches[idx].values() {
                    if meta_str(&object, "namespace") == Some(key.name.as_str()) {
                        let name = meta_str(&object, "name").unwrap_or("");
                        self.shared
                            .queues
                            .add(key.sibling(Kind::Resource(idx), &key.name, name));
                    }
                }
            }
        }
        let super_ns = self.tenant.names().to_super(&key.name);
        let found = self.shared.namespaces.get("", &super_ns);
        let labels = self.namespace_labels(&key.name);
        let action = decide::tenant_namespace(
            alive,
            found.as_deref(),
            &self.tenant.name,
            &key.name,
            &labels,
        );
        let writer = &self.shared.writer;
        match action {
            Action::Patch(patch) => {
                let patched = writer
                    .merge_patch(&namespace_resource(), "", &super_ns, &patch)
                    .await?;
                self.shared.namespaces.remember(patched);
                Ok(Outcome::wrote(true))
            }
            Action::Delete { uid } => {
                writer
                    .delete(&namespace_resource(), "", &super_ns, &uid)
                    .await?;
                tracing::info!(tenant = %self.tenant.name, namespace = %key.name, super_namespace = %super_ns, "tenant namespace gone; deleted its super namespace");
                Ok(Outcome::wrote(true))
            }
            _ => Ok(Outcome::default()),
        }
    }
}
