//! What flows up: a super copy's status and super-owned fields into the tenant object.

use ferry_core::policy::Resource;
use serde_json::{Map, Value};

use super::{Reconciler, Result};
use crate::cache::Served;
use crate::compare::digest;
use crate::compare::holds;
use crate::queue::{Key, Kind};

impl Reconciler<'_> {
    /// Status and super-owned fields of the super copy flow up into the tenant object.
    pub(super) async fn up(
        &self,
        key: &Key,
        resource: &Resource,
        object: &Value,
        current: &Value,
        tenant_kind: &Served,
    ) -> Result<bool> {
        // Nothing flows up until the super side writes status or a super-owned field.
        if current.get("status").is_none() && !carries_owned(&resource.plan.root, current) {
            return Ok(false);
        }
        let fragment = match self.translate(resource, current.clone(), false).await {
            Ok(t) => t.object,
            Err(refusal) => {
                self.refuse(key, Some(object), &refusal).await;
                return Ok(false);
            }
        };
        let Value::Object(mut fragment) = fragment else {
            return Ok(false);
        };
        let mut head = Map::new();
        for k in ["apiVersion", "kind", "metadata"] {
            if let Some(v) = fragment.remove(k) {
                head.insert(k.into(), v);
            }
        }
        let status = fragment.remove("status");
        let mut owned = fragment;
        let mut wrote = false;
        let writer = &self.tenant.writer;
        let cache = match key.kind {
            Kind::Resource(idx) => &self.tenant.caches[idx],
            Kind::Namespace => return Ok(false),
        };
        if let Some(status) = status {
            if tenant_kind.has_status {
                let hash = digest(&status);
                if object.get("status") != Some(&status)
                    && !self.wrote_this(key, "status", &hash, object)
                {
                    let mut body = head.clone();
                    body.insert("status".into(), status);
                    let out = writer
                        .apply_status(&tenant_kind.resource, &Value::Object(body))
                        .await?;
                    self.record_write(key, "status", hash, &out);
                    cache.remember(out);
                    wrote = true;
                }
            } else {
                owned.insert("status".into(), status);
            }
        }
        if !owned.is_empty() {
            let want = Value::Object(owned.clone());
            let hash = digest(&want);
            if !holds(object, &want) && !self.wrote_this(key, "object", &hash, object) {
                let mut body = head;
                body.extend(owned);
                let out = writer
                    .apply(&tenant_kind.resource, &Value::Object(body))
                    .await?;
                self.record_write(key, "object", hash, &out);
                cache.remember(out);
                wrote = true;
            }
        }
        Ok(wrote)
    }
}

/// Whether `value` holds a field marked `x-ferry-owner: super` (looked up as ferry-core copies
/// them up: through objects, not into arrays).
pub(super) fn carries_owned(node: &ferry_core::schema::Node, value: &Value) -> bool {
    node.fields.iter().any(|(key, child)| match value.get(key) {
        None => false,
        Some(_) if child.has(|r| matches!(r, ferry_core::schema::Rule::OwnerSuper)) => true,
        Some(inner) => inner.is_object() && carries_owned(child, inner),
    })
}
