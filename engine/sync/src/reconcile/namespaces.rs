//! Super namespaces: created when the first object needs one (never annexed), their labels
//! kept in line with the tenant namespace's, deleted when it goes.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::policy::{Direction, Scope};
use ferry_core::translate::{
    Reason, Refusal, ANN_TENANT_LABELS, ANN_TENANT_NAMESPACE, LABEL_TENANT,
};
use serde_json::{json, Value};

use super::{namespace_resource, Outcome, Reconciler, Result, WAIT_FOR_DELETION};
use crate::compare::{annotation, deleting, label, meta_str};
use crate::namespace_labels;
use crate::queue::{Key, Kind};

impl Reconciler<'_> {
    /// Makes sure the super namespace exists and is this tenant's; `Some` ends the reconcile.
    pub(super) async fn ensure_namespace(
        &self,
        key: &Key,
        object: &Value,
        super_ns: &str,
    ) -> Result<Option<Outcome>> {
        let found = match self.shared.namespaces.get("", super_ns) {
            Some(ns) => Some(ns),
            None => self
                .shared
                .writer
                .get(&namespace_resource(), "", super_ns)
                .await?
                .map(Arc::new),
        };
        match found {
            Some(ns) if self.owns_super_namespace(&ns, &key.namespace) => {
                if deleting(&ns) {
                    return Ok(Some(Outcome::again(WAIT_FOR_DELETION)));
                }
                self.sync_namespace_labels(&key.namespace, &ns).await?;
                Ok(None)
            }
            Some(ns) => {
                let owner = match (
                    label(&ns, LABEL_TENANT),
                    annotation(&ns, ANN_TENANT_NAMESPACE),
                ) {
                    (Some(t), n) => format!(
                        "it belongs to tenant {t:?} (namespace {:?})",
                        n.unwrap_or("")
                    ),
                    (None, _) => {
                        format!("it has no {LABEL_TENANT} label, so ferry does not own it")
                    }
                };
                let refusal = Refusal::new(
                    Reason::SyncConflict,
                    format!("super namespace {super_ns:?} exists and {owner}; nothing is written into it"),
                );
                self.refuse(key, Some(object), &refusal).await;
                Ok(Some(Outcome::default()))
            }
            None => {
                let mut labels = namespace_labels::desired(
                    self.tenant.namespaces.get("", &key.namespace).as_deref(),
                );
                let copied = namespace_labels::recorded(&labels);
                labels.insert(LABEL_TENANT.into(), json!(&*self.tenant.name));
                let namespace = json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": super_ns,
                        "labels": labels,
                        "annotations": {ANN_TENANT_NAMESPACE: key.namespace, ANN_TENANT_LABELS: copied},
                    },
                });
                match self
                    .shared
                    .writer
                    .create(&namespace_resource(), &namespace)
                    .await
                {
                    Ok(created) => {
                        self.shared.namespaces.remember(created);
                        tracing::info!(tenant = %self.tenant.name, namespace = %key.namespace, super_namespace = %super_ns, "created the super namespace");
                        Ok(None)
                    }
                    // Created meanwhile (by another reconcile): look again.
                    Err(e) if e.code() == Some(409) => {
                        Ok(Some(Outcome::again(Duration::from_millis(100))))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// A tenant namespace: when it is gone, its super namespace (and so every copy in it) goes.
    /// Whether super namespace `ns` is this tenant's, made for its namespace `tenant_ns`.
    pub(super) fn owns_super_namespace(&self, ns: &Value, tenant_ns: &str) -> bool {
        label(ns, LABEL_TENANT) == Some(&*self.tenant.name)
            && annotation(ns, ANN_TENANT_NAMESPACE) == Some(tenant_ns)
    }

    /// Brings the labels a super namespace copies from its tenant namespace up to date.
    pub(super) async fn sync_namespace_labels(
        &self,
        tenant_ns: &str,
        super_ns: &Value,
    ) -> Result<bool> {
        let desired =
            namespace_labels::desired(self.tenant.namespaces.get("", tenant_ns).as_deref());
        let Some(patch) = namespace_labels::patch(super_ns, &desired) else {
            return Ok(false);
        };
        let name = meta_str(super_ns, "name").unwrap_or("");
        let patched = self
            .shared
            .writer
            .merge_patch(&namespace_resource(), "", name, &patch)
            .await?;
        self.shared.namespaces.remember(patched);
        Ok(true)
    }

    pub(super) async fn namespace(&self, key: &Key) -> Result<Outcome> {
        let alive = self.tenant_namespace_alive(&key.name);
        if !alive {
            // Its objects go with it, even before the namespace controller deletes them.
            for (idx, resource) in self.shared.policy.resources.iter().enumerate() {
                if resource.direction != Direction::ToSuper || resource.scope != Scope::Namespaced {
                    continue;
                }
                for object in self.tenant.caches[idx].values() {
                    if meta_str(&object, "namespace") == Some(key.name.as_str()) {
                        self.shared.queues.add(Key {
                            tenant: self.tenant.name.clone(),
                            kind: Kind::Resource(idx),
                            namespace: key.name.clone(),
                            name: meta_str(&object, "name").unwrap_or("").to_string(),
                        });
                    }
                }
            }
        }
        let super_ns = self.tenant.names().to_super(&key.name);
        let Some(found) = self.shared.namespaces.get("", &super_ns) else {
            return Ok(Outcome::default());
        };
        if !self.owns_super_namespace(&found, &key.name) || deleting(&found) {
            return Ok(Outcome::default());
        }
        if alive {
            // Alive: its super namespace follows its labels.
            return Ok(Outcome::wrote(
                self.sync_namespace_labels(&key.name, &found).await?,
            ));
        }
        self.shared
            .writer
            .delete(
                &namespace_resource(),
                "",
                &super_ns,
                meta_str(&found, "uid").unwrap_or(""),
            )
            .await?;
        tracing::info!(tenant = %self.tenant.name, namespace = %key.name, super_namespace = %super_ns, "tenant namespace gone; deleted its super namespace");
        Ok(Outcome::wrote(true))
    }
}
