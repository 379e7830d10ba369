//! What flows up: a super copy's status and super-owned fields into the tenant object.

use ferry_core::policy::Resource;
use ferry_core::schema::{Node, Rule};
use serde_json::Value;

use super::{Reconciler, Result};
use crate::cache::Served;
use crate::decide;
use crate::key::{Key, Kind};
use crate::ledger::{Part, Seen};
use crate::object::{rv, uid};
use crate::write::Precondition;

impl Reconciler<'_> {
    /// Status and super-owned fields of `current` (the copy in the first target) flow up into
    /// `object`; with nothing to write, `seen` (if any) is recorded as settled. `seen` names the
    /// copies' versions this reconcile acted on (the answers of its own writes, else the
    /// versions it read at its start), never the caches' versions now: a super controller's
    /// status that reached the cache meanwhile was not looked at, and must bring the key
    /// back. Whether anything was written.
    pub(super) async fn flow_up(
        &self,
        key: &Key,
        resource: &Resource,
        (object, current): (&Value, &Value),
        seen: Option<Seen>,
        tenant_kind: &Served,
    ) -> Result<bool> {
        if !matches!(key.kind, Kind::Resource(_)) {
            return Ok(false);
        }
        self.accepted(key);
        self.set_synced(key, true);
        let up = self.up(key, resource, object, current, tenant_kind).await?;
        if let (false, Some(seen)) = (up, seen) {
            self.tenant.ledger().settle(key, seen);
        }
        Ok(up)
    }

    /// Status and super-owned fields of the super copy `current` flow up into the tenant
    /// object; whether anything was written.
    pub(super) async fn up(
        &self,
        key: &Key,
        resource: &Resource,
        object: &Value,
        current: &Value,
        tenant_kind: &Served,
    ) -> Result<bool> {
        let Kind::Resource(idx) = key.kind else {
            return Ok(false);
        };
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
        let writes = {
            let ledger = self.tenant.ledger();
            decide::up(fragment, object, tenant_kind.has_status, |part, hash| {
                ledger.wrote(key, part, hash, object)
            })
        };
        let wrote = !writes.is_empty();
        for (part, hash, body) in writes {
            let writer = &self.tenant.writer;
            let out = match part {
                // The tenant object ferry read, never one made anew by this write.
                // Status first, on the version ferry read (status subresources of custom
                // resources check the resourceVersion, not the uid).
                Part::Status => {
                    let precondition = Precondition::Exact {
                        uid: uid(object),
                        version: rv(object),
                    };
                    writer
                        .apply_status(&tenant_kind.resource, &body, precondition)
                        .await?
                }
                _ => {
                    let precondition = Precondition::Uid(uid(object));
                    writer
                        .apply(&tenant_kind.resource, &body, precondition)
                        .await?
                }
            };
            self.tenant.ledger().record_write(key, part, &hash, &out);
            self.tenant.caches[idx].remember(out);
        }
        Ok(wrote)
    }
}

/// Whether `value` holds a field marked `x-ferry-owner: super` (looked up as ferry-core copies
/// them up: through objects, not into arrays).
fn carries_owned(node: &Node, value: &Value) -> bool {
    node.fields.iter().any(|(key, child)| match value.get(key) {
        None => false,
        Some(_) if child.has(|r| matches!(r, Rule::OwnerSuper)) => true,
        Some(inner) => inner.is_object() && carries_owned(child, inner),
    })
}
