//! A tenant object held reduced (`cache/held.rs`): whether a reconcile may skip its
//! translation because only what flows up can have changed, and reading it whole from the
//! tenant's API server when it must be translated again.

use std::sync::Arc;

use ferry_core::translate::LABEL_FROM_SUPER;
use kube::api::ApiResource;
use serde_json::Value;

use super::{Outcome, Reconciler, Result, WAIT_FOR_DELETION};
use crate::cache::version;
use crate::compare::ANN_APPLIED;
use crate::key::Key;
use crate::object::{annotation, deleting, label, uid, Ownership};

impl Reconciler<'_> {
    /// The copy status flows up from (the first target's) when the reduced tenant object
    /// `object` needs no translation: every target holds a checked copy of it (this very
    /// tenant object, not being deleted) with the `ferry.dev/applied` its last translation
    /// had, under the same context count (`Queues::context`: nothing else a translation reads
    /// changed since); no other super holds one, no copy awaits a cleanup, and no migration is
    /// under way (a namespaced object has one target).
    pub(super) fn held_everywhere(
        &self,
        key: &Key,
        object: &Value,
        copies: &[Option<(Arc<Value>, bool)>],
        targets: &[usize],
        (namespaced, context): (bool, u64),
    ) -> Option<Arc<Value>> {
        let source = *targets.first()?;
        if namespaced && targets.len() > 1 {
            return None;
        }
        let ledger = self.tenant.ledger();
        for (i, copy) in copies.iter().enumerate() {
            match (targets.contains(&i), copy) {
                (false, None) => {}
                (true, Some((c, true)))
                    if !deleting(c)
                        && Ownership::of(c).uid == Some(uid(object))
                        && annotation(c, ANN_APPLIED)
                            .is_some_and(|a| ledger.checked(key, context, a)) => {}
                _ => return None,
            }
        }
        if targets.iter().any(|&i| ledger.cleanup_pending(key, i)) {
            return None;
        }
        drop(ledger);
        copies[source].as_ref().map(|(c, _)| c.clone())
    }

    /// The reduced tenant object `cached` of `key`, read whole from the tenant's API server:
    /// or how the reconcile ends instead. A copy being deleted is waited for first (no read).
    /// The answer must be the object the cache holds (same uid, not older, not one of ferry's
    /// copies); otherwise the watch's next event brings the key back.
    pub(super) async fn whole(
        &self,
        (key, idx, resource): (&Key, usize, &ApiResource),
        cached: &Value,
        copies: &[Option<(Arc<Value>, bool)>],
        targets: &[usize],
    ) -> Result<std::result::Result<Arc<Value>, Outcome>> {
        let going = |i: &usize| copies[*i].as_ref().is_some_and(|(c, _)| deleting(c));
        if targets.iter().any(going) {
            return Ok(Err(Outcome::again(WAIT_FOR_DELETION)));
        }
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
                Ok(Ok(Arc::new(o)))
            }
            None => Ok(Err(Outcome::default())),
        }
    }
}
