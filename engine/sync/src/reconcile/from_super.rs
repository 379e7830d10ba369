//! fromSuper: the read-only copy of a public super object in a tenant, created, reverted and
//! deleted with it (a public CRD's copy only while the tenant holds no instance of it);
//! references waiting for a public object retried when one appears.

use std::time::Duration;

use ferry_core::policy::{Direction, Resource};
use ferry_core::translate::{Reason, Refusal};
use std::sync::Arc;

use kube::discovery::ApiResource;
use serde_json::Value;

use super::{Outcome, Reconciler, Result};
use crate::cache::Cache;
use crate::compare::digest;
use crate::decide::{self, Action};
use crate::key::{slash, Key};
use crate::ledger::Part;
use crate::metrics::labels;

impl Reconciler<'_> {
    /// A fromSuper key: the tenant's copy follows the selected super object.
    pub(super) async fn public_copy(
        &self,
        key: &Key,
        idx: usize,
        resource: &Resource,
    ) -> Result<Outcome> {
        let tenant_cache = &self.tenant.caches[idx];
        let Some(tenant_kind) = tenant_cache.served() else {
            return Ok(Outcome::default());
        };
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        // The first super in config order holding the name is the source.
        let supers = &self.shared.supers;
        let (source, holding) = crate::supers::source(supers, idx, namespace, name);
        self.public_conflict(key, resource, holding > 1);
        let copy = tenant_cache.get(namespace, name);
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
        // A namespaced public object lands in the tenant namespace of the same name, when
        // the tenant has one.
        if desired.is_some() && !namespace.is_empty() && !self.tenant.namespace_alive(namespace) {
            return Ok(Outcome::default());
        }
        let writer = &self.tenant.writer;
        let api = &tenant_kind.resource;
        let source = "the public super object of that name";
        let (action, found, hash) = self
            .copy_action(
                key,
                resource,
                api,
                desired.as_ref(),
                copy.as_deref(),
                source,
            )
            .await?;
        let out = match action {
            Action::Delete { uid, version } => {
                if let Some(in_use) = self.crd_in_use(resource, copy.as_deref()).await? {
                    self.refuse(key, copy.as_deref(), &in_use).await;
                    return Ok(Outcome::again(CRD_IN_USE_RECHECK));
                }
                let why = "a super object that is gone or no longer public";
                return self
                    .copy_deleted(key, tenant_cache, api, (&uid, &version), why)
                    .await;
            }
            Action::Refuse(refusal) => {
                self.refuse(key, found.as_ref(), &refusal).await;
                return Ok(Outcome::default());
            }
            Action::Create(body) => writer.create(api, &body).await?,
            Action::Replace(body) => match writer.replace(api, &body).await {
                Ok(out) => {
                    if copy.is_some() {
                        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), "reverted a tenant edit of a copy from the super cluster");
                    }
                    out
                }
                // A field that cannot change (a StorageClass's provisioner, when another
                // super's object became the source): the copy stays as it is, reported. It is
                // never deleted to be made anew (a CustomResourceDefinition's instances would
                // go with it).
                Err(e) if e.code() == Some(422) => {
                    let refusal = Refusal::new(
                        Reason::Invalid,
                        format!("the copy cannot change in place ({e}); it is left as it is"),
                    );
                    self.refuse(key, copy.as_deref(), &refusal).await;
                    return Ok(Outcome::default());
                }
                Err(e) => return Err(e),
            },
            _ => return Ok(self.copy_unchanged(key, desired.is_some())),
        };
        Ok(self.copy_written(key, tenant_cache, hash, out))
    }

    /// What to do with the tenant's read-only copy `copy` of `key` (of `resource`, served as
    /// `api`) to make it `desired`: from the caches and ferry's last write, and, where the
    /// name may be free, from the tenant API server (the object found is returned too; a
    /// tenant object of that name is refused as not a copy of `source`). Also `desired`'s
    /// digest, for the ledger.
    pub(super) async fn copy_action(
        &self,
        key: &Key,
        resource: &Resource,
        api: &ApiResource,
        desired: Option<&Value>,
        copy: Option<&Value>,
        source: &str,
    ) -> Result<(Action, Option<Value>, String)> {
        let hash = desired.map(digest).unwrap_or_default();
        let wrote = copy.is_some_and(|c| self.tenant.ledger().wrote(key, Part::Copy, &hash, c));
        let action = decide::public_copy(desired, copy, wrote);
        let Action::Check(desired) = &action else {
            return Ok((action, None, hash));
        };
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        let found = self.tenant.writer.get(api, namespace, name).await?;
        let what = format!("{} {}", resource.group_kind, slash(namespace, name));
        let action = decide::public_checked(found.as_ref(), desired, &what, source);
        Ok((action, found, hash))
    }

    /// A read-only copy ferry just wrote (`out`, of digest `hash`): remembered, in sync.
    pub(super) fn copy_written(
        &self,
        key: &Key,
        cache: &Cache,
        hash: String,
        out: Value,
    ) -> Outcome {
        self.tenant
            .ledger()
            .record_write(key, Part::Copy, &hash, &out);
        cache.remember(out);
        self.accepted(key);
        self.set_synced(key, true);
        Outcome::wrote(true)
    }

    /// Deletes the tenant's read-only copy of `key` (uid `uid`, in `cache`, served as `api`),
    /// the copy of `why`: out of sync, and nothing is remembered of it.
    pub(super) async fn copy_deleted(
        &self,
        key: &Key,
        cache: &Cache,
        api: &ApiResource,
        target: (&str, &str),
        why: &str,
    ) -> Result<Outcome> {
        self.set_synced(key, false);
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        self.tenant
            .writer
            .delete(api, namespace, name, target)
            .await?;
        cache.forget(namespace, name);
        self.tenant.ledger().forget(key);
        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), "deleted the copy of {why}");
        Ok(Outcome::wrote(true))
    }

    /// A read-only copy left as it is: in sync if one is wanted.
    pub(super) fn copy_unchanged(&self, key: &Key, wanted: bool) -> Outcome {
        self.set_synced(key, wanted);
        if wanted {
            self.accepted(key);
        } else {
            // Nothing on either side: nothing to remember.
            self.tenant.ledger().forget(key);
        }
        Outcome::default()
    }
}

/// While a public CRD's copy stays for its instances, look again this often.
const CRD_IN_USE_RECHECK: Duration = Duration::from_secs(10);

impl Reconciler<'_> {
    /// Why the copy `copy` of a public CustomResourceDefinition must stay: the tenant holds
    /// instances of it (deleting a CRD deletes them all), or ferry cannot tell. `None` for
    /// any other kind, or when nothing is in the way.
    async fn crd_in_use(
        &self,
        resource: &Resource,
        copy: Option<&Value>,
    ) -> Result<Option<Refusal>> {
        let gk = &resource.group_kind;
        let (true, Some(copy)) = (
            gk.group == "apiextensions.k8s.io" && gk.kind == "CustomResourceDefinition",
            copy,
        ) else {
            return Ok(None);
        };
        let text = |p: &str| copy.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (group, kind, plural) = (
            text("/spec/group"),
            text("/spec/names/kind"),
            text("/spec/names/plural"),
        );
        // A served version (the storage one when served).
        let versions: Vec<&Value> = copy
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| v["served"] == true)
            .collect();
        let version = versions
            .iter()
            .find(|v| v["storage"] == true)
            .or(versions.first())
            .and_then(|v| v["name"].as_str())
            .unwrap_or("");
        let established = copy
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        // Instances of a kind the policy syncs down are in the caches (with ferry's own
        // copies, if the kind also comes from the super cluster); any other is listed.
        let caches: Vec<&Arc<Cache>> = self
            .shared
            .policy
            .resources
            .iter()
            .enumerate()
            .filter(|(_, r)| r.group_kind.group == group && r.group_kind.kind == kind)
            .map(|(i, _)| &self.tenant.caches[i])
            .collect();
        let synced_down = self.shared.policy.resources.iter().any(|r| {
            r.direction == Direction::ToSuper
                && r.group_kind.group == group
                && r.group_kind.kind == kind
        });
        let held = match synced_down && caches.iter().all(|c| c.ready()) {
            true => Ok(caches.iter().any(|c| !c.is_empty())),
            false => {
                let api = ApiResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version: format!("{group}/{version}"),
                    kind: kind.to_string(),
                    plural: plural.to_string(),
                };
                self.tenant.writer.holds_any(&api).await
            }
        };
        let name = text("/metadata/name");
        // The kind not served by an established CRD: something is off, so nothing is lost by
        // waiting; not established yet: it can hold nothing.
        let held = match held {
            Err(e) if e.code() == Some(404) && !established => Ok(false),
            Err(e) if e.code() == Some(404) => Ok(true),
            other => other,
        };
        let message = match held {
            Ok(false) => return Ok(None),
            Ok(true) => format!("the super cluster no longer publishes CustomResourceDefinition {name}, but the tenant holds {kind} objects: the copy stays until they are gone (deleting it would delete them)"),
            Err(e) if e.code() == Some(403) || e.code() == Some(401) => format!("the super cluster no longer publishes CustomResourceDefinition {name}; ferry may not list {plural}.{group} here ({e}), so the copy stays (deleting it would delete every {kind})"),
            Err(e) => return Err(e),
        };
        Ok(Some(Refusal::new(Reason::CrdInUse, message)))
    }

    /// Logs and counts (once while it lasts) a public object whose name several supers hold.
    fn public_conflict(&self, key: &Key, resource: &Resource, conflict: bool) {
        let first = {
            let mut ledger = self.tenant.ledger();
            if conflict {
                ledger.conflicts.insert(key.clone())
            } else {
                ledger.conflicts.remove(key);
                false
            }
        };
        if first {
            tracing::warn!(tenant = %self.tenant.name, object = %self.shared.describe(key), "several super clusters publish this name; the first in config order is copied");
            self.shared
                .metrics
                .public_conflicts
                .get_or_create(&labels(&[("kind", &resource.group_kind.to_string())]))
                .inc();
        }
    }
}
