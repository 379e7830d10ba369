//! A tenant object held reduced (`cache/held.rs`), read whole from the tenant's API server
//! when it must be translated again (whether it must is `to_super/plan.rs`'s `start`).

use ferry_core::keys::LABEL_FROM_SUPER;
use std::sync::Arc;

use kube::api::ApiResource;
use serde_json::Value;

use super::{Reconciler, Result};
use crate::cache::version;
use crate::key::{EntryId, Key};
use crate::object::{deleting, label, uid};

impl Reconciler<'_> {
    /// The reduced tenant object `cached` of `key`, read whole from the tenant's API server.
    /// The answer must be the object the cache holds (same uid, not older, not one of ferry's
    /// copies); otherwise `None`, and the watch's next event brings the key back.
    pub(super) async fn whole(
        &self,
        (key, idx, resource): (&Key, EntryId, &ApiResource),
        cached: &Value,
    ) -> Result<Option<Arc<Value>>> {
        let found = self
            .tenant
            .writer
            .get(resource, &key.namespace, &key.name)
            .await?;
        let same = |o: &Value| {
            crate::object::key_of(o)
                .is_some_and(|(ns, name)| ns == key.namespace && name == key.name)
                && uid(o) == uid(cached)
                && version(o) >= version(cached)
                && label(o, LABEL_FROM_SUPER) != Some("true")
                && !deleting(o)
        };
        match found.filter(same) {
            Some(o) => {
                // Held in full from now on when it is newer: a version checked earlier never
                // stands for what this one asks.
                self.tenant.caches[idx].remember(o.clone());
                Ok(Some(Arc::new(o)))
            }
            None => Ok(None),
        }
    }
}
