//! fromSuper: the read-only copy of a public super object in a tenant, created, reverted and
//! deleted with it; references waiting for a public object retried when one appears.

use ferry_core::policy::Resource;
use ferry_core::translate::{Reason, Refusal, LABEL_FROM_SUPER};
use kube::api::ApiResource;
use serde_json::Value;

use super::{rv, slash, Outcome, Reconciler, Result};
use crate::compare::{deleting, digest, label, meta_str, same_copy};
use crate::queue::Key;

impl Reconciler<'_> {
    /// Records a refusal: a metric, a log line and an Event on the tenant object, once per
    /// distinct refusal.
    /// A public object is (still) published: the tenant's objects refused for a reference
    /// that may name it are looked at again.
    pub(super) fn retry_unpublished(&self) {
        let prefix = format!("{}:", Reason::UnapprovedReference);
        let keys: Vec<Key> = self
            .tenant
            .memory()
            .refusals
            .iter()
            .filter(|(_, text)| text.starts_with(&prefix))
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.shared.queues.add(key);
        }
    }

    /// A fromSuper key: the tenant's read-only copy follows the selected super object.
    pub(super) async fn public_copy(
        &self,
        key: &Key,
        idx: usize,
        resource: &Resource,
    ) -> Result<Outcome> {
        let tenant_cache = &self.tenant.caches[idx];
        let super_cache = &self.shared.caches[idx];
        let Some(tenant_kind) = tenant_cache.served() else {
            return Ok(Outcome::default());
        };
        let source = super_cache
            .get(&key.namespace, &key.name)
            .filter(|s| !deleting(s));
        let copy = tenant_cache.get(&key.namespace, &key.name);
        if source.is_some() {
            self.retry_unpublished();
        }
        let desired = match &source {
            None => None,
            Some(s) => match self.translate(resource, (**s).clone(), false).await {
                Ok(t) => Some(t.object),
                Err(r) if r.reason == Reason::NotSelected => None,
                Err(r) => {
                    // Nothing in the tenant to hang an Event on unless a copy exists; the
                    // copy is left as it is.
                    self.refuse(key, copy.as_deref(), &r).await;
                    return Ok(Outcome::default());
                }
            },
        };
        let writer = &self.tenant.writer;
        let resource_ = &tenant_kind.resource;
        if desired.is_some()
            && !key.namespace.is_empty()
            && !self.tenant_namespace_alive(&key.namespace)
        {
            // A namespaced public object lands in the tenant namespace of the same name,
            // when the tenant has one.
            return Ok(Outcome::default());
        }
        match (desired, copy) {
            (None, None) => {
                self.set_synced(key, false);
                Ok(Outcome::default())
            }
            (None, Some(copy)) => {
                self.set_synced(key, false);
                if deleting(&copy) {
                    return Ok(Outcome::default());
                }
                writer
                    .delete(
                        resource_,
                        &key.namespace,
                        &key.name,
                        meta_str(&copy, "uid").unwrap_or(""),
                    )
                    .await?;
                tenant_cache.forget(&key.namespace, &key.name);
                tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "deleted the copy of a super object that is gone or no longer public");
                Ok(Outcome::wrote(true))
            }
            (Some(desired), None) => {
                let hash = digest(&desired);
                let out = match writer.get(resource_, &key.namespace, &key.name).await? {
                    Some(found) if label(&found, LABEL_FROM_SUPER) != Some("true") => {
                        let refusal = Refusal::new(
                            Reason::SyncConflict,
                            format!(
                                "the tenant has its own {} {}; the public super object of that name is not copied over it",
                                resource.group_kind,
                                slash(&key.namespace, &key.name)
                            ),
                        );
                        self.refuse(key, Some(&found), &refusal).await;
                        return Ok(Outcome::default());
                    }
                    Some(found) => self.replace_copy(resource_, desired, &found).await?,
                    None => writer.create(resource_, &desired).await?,
                };
                self.record_write(key, "copy", hash, &out);
                tenant_cache.remember(out);
                self.accepted(key);
                self.set_synced(key, true);
                Ok(Outcome::wrote(true))
            }
            (Some(desired), Some(copy)) => {
                self.accepted(key);
                self.set_synced(key, true);
                let hash = digest(&desired);
                if same_copy(&copy, &desired) || self.wrote_this(key, "copy", &hash, &copy) {
                    return Ok(Outcome::default());
                }
                let out = self.replace_copy(resource_, desired, &copy).await?;
                tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "reverted a tenant edit of a copy from the super cluster");
                self.record_write(key, "copy", hash, &out);
                tenant_cache.remember(out);
                Ok(Outcome::wrote(true))
            }
        }
    }

    pub(super) async fn replace_copy(
        &self,
        resource: &ApiResource,
        mut desired: Value,
        actual: &Value,
    ) -> Result<Value> {
        if let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv(actual)));
        }
        self.tenant.writer.replace(resource, &desired).await
    }
}
