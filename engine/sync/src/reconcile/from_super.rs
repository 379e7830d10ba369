//! fromSuper: the read-only copy of a public super object in a tenant, created, reverted and
//! deleted with it (a public CRD's copy only while the tenant holds no instance of it);
//! references waiting for a public object retried when one appears.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::policy::{Direction, Resource};
use ferry_core::translate::{Reason, Refusal};
use kube::discovery::ApiResource;
use serde_json::Value;

use super::read_only::{Copying, EventOn, Plan, Source, Target};
use super::{Outcome, Reconciler, Result};
use crate::cache::Cache;
use crate::decide::InPlace;
use crate::key::{EntryId, Key};
use crate::metrics::labels;

impl Reconciler<'_> {
    /// A fromSuper key: the tenant's copy follows the selected super object.
    pub(super) async fn public_copy(
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
        let target = Target::new(key, tenant_cache, &tenant_kind, resource);
        let copying = Copying {
            source: Source::Public,
            gone: "a super object that is gone or no longer public",
            replaced: "reverted a tenant edit of a copy from the super cluster",
            refuse_on: EventOn::Found,
            in_place: InPlace::Keep,
        };
        let copy = copy.as_deref();
        let planned = self
            .plan_read_only(&target, desired.as_ref(), copy, &copying)
            .await?;
        if let Plan::Delete(_) = planned.plan {
            if let Some(in_use) = self.crd_in_use(resource, copy).await? {
                self.refuse(key, copy, &in_use).await;
                return Ok(Outcome::again(CRD_IN_USE_RECHECK));
            }
        }
        self.apply_read_only(&target, planned, copy, &copying).await
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
        let caches: Vec<&Arc<Cache>> = crate::key::entries(&self.shared.policy)
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
