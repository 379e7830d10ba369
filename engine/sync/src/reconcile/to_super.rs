//! toSuper: the super copy follows the tenant object (created, applied, recreated for a new
//! tenant object of the same name, deleted with it); then status flows up (`up`).

use std::sync::Arc;

use ferry_core::policy::{Resource, Scope};
use ferry_core::translate::Reason;
use kube::api::ApiResource;
use serde_json::Value;

use super::{Outcome, Reconciler, Result, LOOK_AGAIN, WAIT_FOR_DELETION};
use crate::decide::{self, Action};
use crate::deps;
use crate::key::Key;
use crate::ledger::Seen;
use crate::object::{deleting, meta_str, rv, uid, Ownership};
use crate::placement;
use crate::write::Precondition;

impl Reconciler<'_> {
    /// A toSuper key.
    pub(super) async fn to_super(
        &self,
        key: &Key,
        idx: usize,
        resource: &Resource,
    ) -> Result<Outcome> {
        // Read before anything a translation reads: a change after this is seen next time.
        let context = self.shared.queues.context();
        let tenant_cache = &self.tenant.caches[idx];
        let Some(tenant_kind) = tenant_cache.served() else {
            return Ok(Outcome::default());
        };
        let namespaced = resource.scope == Scope::Namespaced;
        let names = self.tenant.names();
        if namespaced {
            self.tenant.learn(&key.namespace);
        }
        let (super_ns, super_name) = resource.super_key(&names, &key.namespace, &key.name);
        // Any copy in a platform namespace is left alone (a placed kind's go to the
        // operator's namespace the policy names).
        let placed_kind = resource.placement.is_some();
        if namespaced && !placed_kind && self.outside_tenant(key, tenant_cache, &super_ns).await {
            return Ok(Outcome::default());
        }
        // Whether a dependency is referenced: unknown while objects listed at start are still
        // to be reconciled. One nothing references yet may be theirs, so it waits (queued
        // again once they are), its copies not even read; gone from the tenant, its copies go.
        let referenced = if resource.dependency {
            deps::referenced(self.tenant, key)
        } else {
            Some(false)
        };
        let referenced = match referenced {
            Some(referenced) => referenced,
            None if tenant_cache.contains(&key.namespace, &key.name) => {
                return Ok(Outcome::default());
            }
            None => false,
        };
        // ferry's copy in each super, if any. A checked copy is reduced to what flows up: it
        // held what ferry applies, and nothing but what flows up has changed since.
        let copies: Vec<Option<(Arc<Value>, bool)>> = self
            .shared
            .supers
            .iter()
            .map(|s| {
                s.caches[idx]
                    .get_checked(&super_ns, &super_name)
                    .filter(|(c, _)| Ownership::of(c).is_copy_of(key, namespaced))
            })
            .collect();
        // A reduced tenant object was checked to ask for what every copy holds; only its
        // status and super-owned fields are held (`cache/held.rs`).
        let (object, reduced) = match tenant_cache
            .get_checked(&key.namespace, &key.name)
            .filter(|(o, _)| !deleting(o))
        {
            Some((o, reduced)) => (Some(o), reduced),
            None => (None, false),
        };
        // Everything in a namespace being deleted goes with it.
        let wanted = decide::wanted(
            object.is_some(),
            !namespaced || self.tenant.namespace_alive(&key.namespace),
            resource.dependency,
            referenced,
        );
        let placed = (wanted && namespaced)
            .then(|| placement::placed(self.shared, self.tenant, &key.namespace))
            .flatten();
        let targets = match (wanted, namespaced) {
            (false, _) => Vec::new(),
            (true, true) => placed.map(|p| p.supers()).unwrap_or_default(),
            (true, false) => placement::hosting(self.shared, self.tenant),
        };
        let seen = Seen {
            object: object.as_deref().map(rv).unwrap_or("").to_string(),
            copy: versions(
                copies.iter().map(|c| c.as_ref().map(|(c, _)| rv(c))),
                &targets,
            ),
            wanted,
        };
        // Nothing changed since a reconcile that found nothing to do: skip the translation.
        // (The patrol queues every key; this keeps it cheap.)
        if self.tenant.ledger().settled(key, &seen) {
            return Ok(Outcome::default());
        }
        self.tenant.ledger().unsettle(key);
        // Only what flows up can have changed since every copy was found holding what this
        // object asks for: no translation.
        if let (Some(object), true) = (&object, reduced && wanted) {
            if let Some(current) =
                self.held_everywhere(key, object, &copies, &targets, (namespaced, context))
            {
                let up = self
                    .flow_up(key, resource, (object, &current), Some(seen), &tenant_kind)
                    .await?;
                return Ok(Outcome::wrote(up));
            }
        }
        // A reduced object is read whole from the tenant's API server to be translated.
        let object = match object {
            Some(cached) if reduced && wanted => {
                let read = (key, idx, &tenant_kind.resource);
                match self.whole(read, &cached, &copies, &targets).await? {
                    Ok(whole) => Some(whole),
                    Err(outcome) => return Ok(outcome),
                }
            }
            o => o,
        };
        let gone = object.is_none();
        let translated = match object.filter(|_| wanted) {
            None => {
                if !resource.dependency {
                    deps::clear(self.shared, self.tenant, key);
                }
                self.accepted(key);
                None
            }
            Some(object) => match self.translate(resource, (*object).clone(), true).await {
                Ok(translated) => Some((object, translated)),
                Err(refusal) => {
                    self.refuse(key, Some(&object), &refusal).await;
                    // Out of the selection: its copy goes. Other refusals leave the copy (and
                    // its dependencies), but nothing it names flows up any more.
                    if refusal.reason != Reason::NotSelected {
                        if !resource.dependency {
                            // Listed at start with a copy, its references are recorded from
                            // the schema rules first: the dependencies its copy names stay.
                            if copies.iter().any(Option::is_some) {
                                deps::ensure_recorded(self.shared, self.tenant, key, idx);
                            }
                            deps::clear_produced(self.shared, self.tenant, key);
                        }
                        return Ok(Outcome::default());
                    }
                    None
                }
            },
        };
        let Some((object, translated)) = translated else {
            self.set_synced(key, false);
            let deleted = self
                .delete_copies(key, idx, (&super_ns, &super_name), &copies, &[])
                .await?;
            // Nothing is left to remember of an object that is gone with its copies.
            if gone {
                self.tenant.ledger().forget(key);
            }
            return Ok(deleted);
        };
        if !resource.dependency {
            deps::set(self.shared, self.tenant, key, &translated.references);
        }
        // A cluster-scoped object's produced references name tenant namespaces where a
        // super-side controller will write (a composite's connection Secret): their super
        // namespaces must exist there.
        let produced_ready = match namespaced {
            true => true,
            false => match self
                .ensure_produced_namespaces(key, &object, &translated.references)
                .await?
            {
                ProducedNamespaces::Ready => true,
                // Not settled: the patrol looks again once the namespace is known.
                ProducedNamespaces::Pending => false,
                ProducedNamespaces::Stop(outcome) => return Ok(outcome),
            },
        };
        let targets = match (targets.is_empty(), namespaced, wanted) {
            (true, false, true) => placement::hosting(self.shared, self.tenant),
            _ => targets,
        };
        let Some(&source) = targets.first() else {
            if namespaced {
                // No super may take the namespace (every candidate cordoned, or a super not
                // listed yet that might hold it): it waits.
                tracing::warn!(tenant = %self.tenant.name, object = %self.shared.describe(key), "the namespace cannot be placed yet (no super cluster is a candidate, or one is not listed yet); waiting");
                return Ok(Outcome::again(NO_SUPER));
            }
            // A cluster-scoped object goes where the tenant's namespaces are, and no super
            // holds one yet: the first super namespace queues it again. Copies elsewhere go.
            return self
                .delete_copies(key, idx, (&super_ns, &super_name), &copies, &[])
                .await;
        };
        let (desired, hash) = decide::stamped(translated.object);
        let mut status_from = None;
        let mut applied = false;
        // The copies' versions as this reconcile leaves them: what it found, its writes'
        // answers, none where it deleted one (what is settled if nothing flows up).
        let mut left: Vec<Option<String>> = copies
            .iter()
            .map(|c| c.as_ref().map(|(c, _)| rv(c).to_string()))
            .collect();
        // A super that fails does not stop the others; the first failure is returned at the
        // end, and the key retried.
        let mut failed = None;
        // Whether every target holds a copy now; until then no copy elsewhere goes.
        let mut complete = true;
        // A migration's target first: the new copies do not wait for the old super.
        for &i in targets.iter().rev() {
            let Some(super_kind) = self.shared.supers[i].caches[idx].served() else {
                complete = false;
                continue;
            };
            if namespaced {
                let marks = placed.map(|p| p.annotations(i, &self.shared.supers));
                // The tenant's super namespace, also for a placed kind (it records which
                // super runs the tenant namespace); the operator's namespace is never ferry's.
                let tenant_super_ns = names.to_super(&key.namespace);
                match self
                    .ensure_namespace(i, key, &object, &tenant_super_ns, marks)
                    .await
                {
                    Ok(None) => {}
                    Ok(Some(outcome)) => return Ok(outcome),
                    Err(e) => {
                        failed.get_or_insert(e);
                        complete = false;
                        continue;
                    }
                }
            }
            let place = (&super_kind.resource, super_ns.as_str(), super_name.as_str());
            let copy = Copy {
                super_index: i,
                entry: idx,
                found: copies[i].clone(),
            };
            let target = (&desired, hash.as_str());
            match self
                .copy_in(key, place, copy, target, &object, namespaced)
                .await
            {
                Ok(Ok((current, wrote))) => {
                    applied |= wrote;
                    left[i] = Some(rv(&current).to_string());
                    if i == source {
                        status_from = Some(current);
                    }
                }
                Ok(Err(outcome)) => return Ok(outcome),
                Err(e) => {
                    failed.get_or_insert(e);
                    complete = false;
                }
            }
        }
        // Copies where they are no longer wanted go (a migration's old super is left to the
        // namespace's reconcile until the switch), once every target holds one: the only
        // copy of an object never goes because its new super refused it.
        if complete {
            match self
                .delete_copies(key, idx, (&super_ns, &super_name), &copies, &targets)
                .await
            {
                Ok(deleted) => {
                    applied |= deleted.wrote;
                    // Gone where it was deleted; a copy already being deleted (a finalizer
                    // holds it) is left as it was, and stays in `left` as found.
                    for (i, version) in left.iter_mut().enumerate() {
                        let found = copies[i].as_ref().map(|(c, _)| c.as_ref());
                        if !targets.contains(&i)
                            && matches!(decide::remove(found), Action::Delete { .. })
                        {
                            *version = None;
                        }
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let Some(current) = status_from else {
            return Ok(Outcome::wrote(applied));
        };
        // Every copy holds what the object asks for: the cache keeps it reduced from now on.
        if complete && tenant_cache.check(&object) {
            self.tenant.ledger().check(key, context, &hash);
        }
        let copy = versions(left.iter().map(Option::as_deref), &targets);
        // A target that does not serve the kind yet has no copy: not settled, so that the
        // patrol looks again (its first list, empty, reports nothing that would).
        let settle = (complete && produced_ready).then_some(Seen { copy, ..seen });
        let up = self
            .flow_up(key, resource, (&object, &current), settle, &tenant_kind)
            .await?;
        Ok(Outcome::wrote(applied || up))
    }

    /// Brings ferry's copy in one super (`copy`) in line with `desired` (digest `hash`):
    /// the copy as it is then and whether it was written, or how the reconcile ends.
    async fn copy_in(
        &self,
        key: &Key,
        place: (&ApiResource, &str, &str),
        copy: Copy,
        (desired, hash): (&Value, &str),
        object: &Value,
        namespaced: bool,
    ) -> Result<std::result::Result<(Arc<Value>, bool), Outcome>> {
        let (i, idx) = (copy.super_index, copy.entry);
        let (actual, checked) = match copy.found {
            Some((c, checked)) => (Some(c), checked),
            None => (None, false),
        };
        let stale = self.tenant.ledger().cleanup_pending(key, i);
        // A copy ferry wrote or found holding what it applies is held checked.
        let mut action = decide::to_super(desired, hash, actual.as_deref(), uid(object), checked);
        // The last apply left fields it dropped: apply again.
        if let (true, Action::Nothing, Some(copy)) = (stale, &action, actual.as_deref()) {
            action = decide::reapply(desired, copy);
        }
        let supers = &self.shared.supers;
        let mut read = false;
        loop {
            match action {
                Action::Nothing => {
                    return Ok(match actual {
                        Some(current) => {
                            if !checked {
                                supers[i].caches[idx].check(&current);
                            }
                            Ok((current, false))
                        }
                        None => Err(Outcome::default()),
                    })
                }
                Action::Create(body) => {
                    match self.write_copy(key, (i, idx), place, &body).await {
                        Ok(out) => return Ok(Ok((out, true))),
                        // Something holds the name: ferry's copy the cache has not seen yet, or
                        // someone else's object. Only now is it read, once.
                        Err(e) if e.code() == Some(409) && !read => {
                            read = true;
                            let found = supers[i].writer.get(place.0, place.1, place.2).await?;
                            action = decide::checked(
                                found.as_ref(),
                                key,
                                namespaced,
                                &body,
                                uid(object),
                            );
                        }
                        Err(e) => return Err(e),
                    }
                }
                Action::Apply(body) => {
                    tracing::debug!(tenant = %self.tenant.name, object = %self.shared.describe(key), cluster = %supers[i].name, "the super copy differs; applying");
                    let out = self.write_copy(key, (i, idx), place, &body).await?;
                    return Ok(Ok((out, true)));
                }
                Action::Recreate { .. } => {
                    tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), cluster = %supers[i].name, "tenant uid changed; replacing the super copy");
                    let deleted = self.delete_copy(key, (i, idx), place, action).await?;
                    return Ok(Err(Outcome {
                        again: Some(LOOK_AGAIN),
                        ..deleted
                    }));
                }
                Action::Wait => return Ok(Err(Outcome::again(WAIT_FOR_DELETION))),
                Action::Refuse(refusal) => {
                    self.refuse(key, Some(object), &refusal).await;
                    return Ok(Err(Outcome::default()));
                }
                _ => return Ok(Err(Outcome::default())),
            }
        }
    }

    /// Deletes ferry's copies (`copies`, one per super) in every super but `keep`.
    async fn delete_copies(
        &self,
        key: &Key,
        idx: usize,
        (namespace, name): (&str, &str),
        copies: &[Option<(Arc<Value>, bool)>],
        keep: &[usize],
    ) -> Result<Outcome> {
        let mut wrote = false;
        for (i, copy) in copies.iter().enumerate() {
            if keep.contains(&i) {
                continue;
            }
            let Some(resource) = self.shared.supers[i].caches[idx].served() else {
                continue;
            };
            let action = decide::remove(copy.as_ref().map(|(c, _)| c.as_ref()));
            let place = (&resource.resource, namespace, name);
            wrote |= self.delete_copy(key, (i, idx), place, action).await?.wrote;
        }
        Ok(Outcome::wrote(wrote))
    }

    /// Writes the super copy `body` at `place` in super `i` (policy entry `idx`): a create
    /// (nothing may hold the name), or an apply to the copy whose uid the body names.
    async fn write_copy(
        &self,
        key: &Key,
        (i, idx): (usize, usize),
        place: (&ApiResource, &str, &str),
        body: &Value,
    ) -> Result<Arc<Value>> {
        // A create is a POST, the super API server's cheapest write: 1.16x the super's CPU of
        // a direct create, 1.43x with a server-side apply (`cargo xtask bench --sync`).
        let target = &self.shared.supers[i];
        let written = match meta_str(body, "uid") {
            Some(uid) => {
                target
                    .writer
                    .apply_copy(place.0, body, Precondition::Uid(uid))
                    .await
            }
            None => target.writer.create(place.0, body).await,
        };
        let out = match written {
            Ok(out) => {
                let mut ledger = self.tenant.ledger();
                if !ledger.stale.is_empty() {
                    ledger.stale.remove(&(key.clone(), i));
                }
                drop(ledger);
                out
            }
            Err(e) => {
                if matches!(e, crate::write::Error::Cleanup(_)) {
                    let failed = {
                        let mut ledger = self.tenant.ledger();
                        let failed = ledger.stale.entry((key.clone(), i)).or_default();
                        *failed += 1;
                        *failed
                    };
                    if failed == crate::ledger::CLEANUP_TRIES {
                        tracing::warn!(tenant = %self.tenant.name, object = %self.shared.describe(key), cluster = %target.name, error = %e, "gave up removing the fields an apply dropped from the super copy");
                    }
                }
                return Err(e);
            }
        };
        // Held checked: whatever the API server made of the body (defaults, pruning), it is
        // what ferry applied, so no write loop can start.
        target.caches[idx].remember_applied(out.clone());
        Ok(Arc::new(out))
    }

    /// Deletes ferry's copy at `(resource, namespace, name)` in super `i` when `action` says
    /// so.
    async fn delete_copy(
        &self,
        key: &Key,
        (i, idx): (usize, usize),
        (resource, namespace, name): (&ApiResource, &str, &str),
        action: Action,
    ) -> Result<Outcome> {
        let (Action::Delete { uid, version } | Action::Recreate { uid, version }) = action else {
            return Ok(Outcome::default());
        };
        let target = &self.shared.supers[i];
        target
            .writer
            .delete(resource, namespace, name, (&uid, &version))
            .await?;
        target.caches[idx].forget(namespace, name);
        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), cluster = %target.name, "deleted the super copy");
        Ok(Outcome::wrote(true))
    }
}

/// ferry's copy of a key in one super, as the cache holds it (and whether it is checked).
struct Copy {
    super_index: usize,
    /// The policy entry (the index of its caches).
    entry: usize,
    found: Option<(Arc<Value>, bool)>,
}

/// While no super may take a namespace, look again this often.
const NO_SUPER: std::time::Duration = std::time::Duration::from_secs(10);

/// The resourceVersions of a key's copies in every super (`None` where there is none) and
/// where they are to be, for [`Seen::copy`]: a change anywhere is a reason to look again.
pub(super) fn versions<'a>(
    copies: impl Iterator<Item = Option<&'a str>>,
    targets: &[usize],
) -> String {
    let mut out = String::new();
    for (i, copy) in copies.enumerate() {
        if let Some(version) = copy {
            out.push_str(&format!("{i}:{version} "));
        }
    }
    out.push_str(&format!("{targets:?}"));
    out
}

impl Reconciler<'_> {
    /// Creates the super namespaces of the tenant namespaces that `references` name as
    /// where something is produced (a cluster-scoped referrer's `namespaceField`), where each
    /// is placed; namespaces gone or going are left alone.
    async fn ensure_produced_namespaces(
        &self,
        key: &Key,
        object: &Value,
        references: &[ferry_core::translate::Reference],
    ) -> Result<ProducedNamespaces> {
        let names = self.tenant.names();
        let mut ready = ProducedNamespaces::Ready;
        for r in references
            .iter()
            .filter(|r| r.produced && !r.namespace.is_empty())
        {
            let placed = self
                .tenant
                .namespace_alive(&r.namespace)
                .then(|| placement::placed(self.shared, self.tenant, &r.namespace))
                .flatten();
            let Some(placed) = placed else {
                ready = ProducedNamespaces::Pending;
                continue;
            };
            let at = key.sibling(key.kind, &r.namespace, &key.name);
            let super_ns = names.to_super(&r.namespace);
            for i in placed.supers() {
                let marks = Some(placed.annotations(i, &self.shared.supers));
                if let Some(outcome) = self
                    .ensure_namespace(i, &at, object, &super_ns, marks)
                    .await?
                {
                    return Ok(ProducedNamespaces::Stop(outcome));
                }
            }
        }
        Ok(ready)
    }
}

/// Whether the super namespaces a cluster-scoped object's produced references need exist.
enum ProducedNamespaces {
    /// Each exists (or was created).
    Ready,
    /// A tenant namespace named is not known (yet): looked at again by the patrol.
    Pending,
    /// A namespace is being deleted or was refused: this reconcile ends so.
    Stop(Outcome),
}
