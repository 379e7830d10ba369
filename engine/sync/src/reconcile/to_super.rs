//! toSuper: the super copy follows the tenant object (created, applied, recreated for a new
//! tenant object of the same name, deleted with it); then status flows up (`up`).
//!
//! ```text
//!  read: caches + ledger ─▶ Snapshot ─plan::start─▶ settled / up only / wait / go on
//!  translate (ferry-core) ─▶ desired copy ─plan::plan─▶ Plan ─apply─▶ namespaces, writes,
//!                                                                     then deletes
//! ```
//!
//! Everything decided is decided in `plan.rs`, without an API server; this file reads and
//! writes. A create that finds the name taken reads what holds it and plans that write again
//! (`plan::after_conflict`).

use ferry_core::keys::ANN_APPLIED;
use std::sync::Arc;

use ferry_core::policy::{Resource, Scope};
use ferry_core::translate::{Reason, Translated};
use kube::api::ApiResource;
use serde_json::Value;

use super::produced::ProducedNamespaces;
use super::{Outcome, Reconciler, Result, LOOK_AGAIN, WAIT_FOR_DELETION};
use crate::cache::Served;

use crate::decide::{self, CopyWrite};
use crate::deps;
use crate::key::{EntryId, Key};
use crate::ledger::Seen;
use crate::object::{annotation, deleting, meta_str, rv, Ownership, OwnershipKey};
use crate::placement::{self, Placed};
use crate::supers::SuperId;
use crate::write::Precondition;

mod plan;

use plan::{Delete, Desired, Held, Placing, Plan, Snapshot, Start, Write};

/// Where a key's copies are in every super.
struct Place {
    namespace: String,
    name: String,
}

/// What a toSuper reconcile read at its start.
struct Read {
    snapshot: Snapshot,
    /// The tenant object (not being deleted), as the cache holds it.
    object: Option<Arc<Value>>,
    tenant_kind: Served,
    place: Place,
    placed: Option<Placed>,
    /// The versions acted on, settled if nothing is left to do.
    seen: Seen,
    /// `Queues::context` before anything a translation reads.
    context: u64,
}

/// What the tenant object translates to going down.
enum Down {
    /// A copy is wanted: the object (read whole if it was held reduced) and its translation.
    Copy(Arc<Value>, Translated),
    /// No copy is wanted; `gone`: the tenant object itself is gone.
    Absent { gone: bool },
    /// Refused: the copies stay as they are.
    Refused,
}

/// What the writes of one plan share.
struct Writing<'a> {
    key: &'a Key,
    /// The policy entry (the index of its caches).
    idx: EntryId,
    /// The tenant object.
    object: &'a Value,
    snapshot: &'a Snapshot,
    desired: Desired<'a>,
    place: &'a Place,
    /// Where the tenant namespace runs (namespaced kinds).
    placed: Option<Placed>,
}

/// How one write of a plan ended.
enum Done {
    /// The copy as it is now, and whether this write made it.
    Held { current: Arc<Value>, wrote: bool },
    /// The super no longer serves the kind: no copy there (yet).
    Unserved,
    /// The reconcile ends so (a copy being deleted or replaced, a namespace being deleted, a
    /// refusal).
    Stop(Outcome),
}

/// How applying a plan ended.
enum Finish {
    /// Every step ran.
    Applied(Applied),
    /// A step ended the reconcile so.
    Stop(Outcome),
}

impl Reconciler<'_> {
    /// A toSuper key.
    pub(super) async fn to_super(
        &self,
        key: &Key,
        idx: EntryId,
        resource: &Resource,
    ) -> Result<Outcome> {
        let Some(read) = self.read_down(key, idx, resource).await else {
            return Ok(Outcome::default());
        };
        let start = plan::start(&read.snapshot);
        if start == Start::Settled {
            // The patrol queues every key; this keeps it cheap.
            return Ok(Outcome::default());
        }
        self.tenant.ledger().unsettle(key);
        let object = match (start, &read.object) {
            (Start::UpOnly(at), Some(object)) => {
                let Some(current) = read.snapshot.held(at).and_then(|h| h.copy.clone()) else {
                    return Ok(Outcome::default());
                };
                let (kind, seen) = (&read.tenant_kind, Some(read.seen));
                let up = self
                    .flow_up(key, resource, (object, &current), seen, kind)
                    .await?;
                return Ok(Outcome::wrote(up));
            }
            (Start::AwaitDeletion, _) => return Ok(Outcome::again(WAIT_FOR_DELETION)),
            (Start::Plan { read_whole: true }, Some(cached)) => {
                let api = &read.tenant_kind.resource;
                match self.whole((key, idx, api), cached).await? {
                    Some(whole) => Some(whole),
                    // Not the object the cache holds: the watch's next event brings it back.
                    None => return Ok(Outcome::default()),
                }
            }
            _ => read.object.clone(),
        };
        match self.translate_down(key, idx, resource, &read, object).await {
            Down::Copy(object, translated) => {
                self.place(key, idx, resource, read, (&object, translated))
                    .await
            }
            Down::Absent { gone } => {
                self.set_synced(key, false);
                let deletes = plan::remove(&read.snapshot);
                let deleted = self.delete_copies(key, idx, &read.place, &deletes).await?;
                // Nothing is left to remember of an object that is gone with its copies.
                if gone {
                    self.tenant.ledger().forget(key);
                }
                Ok(Outcome::wrote(!deleted.is_empty()))
            }
            Down::Refused => Ok(Outcome::default()),
        }
    }

    /// Reads what a toSuper reconcile of `key` acts on; `None` when there is nothing to do
    /// (the kind not served, the namespace the platform's, a dependency waiting for the
    /// objects listed at start).
    async fn read_down(&self, key: &Key, idx: EntryId, resource: &Resource) -> Option<Read> {
        // Read before anything a translation reads: a change after this is seen next time.
        let context = self.shared.queues.context();
        let tenant_cache = &self.tenant.caches[idx];
        let tenant_kind = tenant_cache.served()?;
        let namespaced = resource.scope == Scope::Namespaced;
        if namespaced {
            self.tenant.learn(&key.namespace);
        }
        let (namespace, name) = resource.super_key(&self.tenant.names(), &key.namespace, &key.name);
        // Any copy in a platform namespace is left alone (a placed kind's go to the
        // operator's namespace the policy names).
        let placed_kind = resource.placement.is_some();
        if namespaced && !placed_kind && self.outside_tenant(key, tenant_cache, &namespace).await {
            return None;
        }
        let referenced = self.referenced(key, idx, resource)?;
        let place = Place { namespace, name };
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
            .then(|| placement::placed(&self.shared.supers, &self.tenant.tenancy(), &key.namespace))
            .flatten();
        let targets = match (wanted, namespaced) {
            (false, _) => Vec::new(),
            (true, true) => placed.map(|p| p.supers()).unwrap_or_default(),
            (true, false) => placement::hosting(&self.shared.supers, &self.tenant.name),
        };
        let supers = self.held(key, idx, &place, (namespaced, reduced), context);
        let seen = Seen {
            object: object.as_deref().map(rv).unwrap_or("").to_string(),
            copy: versions(supers.iter().map(|h| h.copy.as_deref().map(rv)), &targets),
            wanted,
        };
        let settled = self.tenant.ledger().settled(key, &seen);
        let snapshot = Snapshot {
            namespaced,
            object_uid: object.as_deref().map(|o| crate::object::uid(o).to_string()),
            reduced,
            wanted,
            supers,
            targets,
            settled,
        };
        Some(Read {
            snapshot,
            object,
            tenant_kind,
            place,
            placed,
            seen,
            context,
        })
    }

    /// Whether a dependency is referenced: unknown while objects listed at start are still
    /// to be reconciled. One nothing references yet may be theirs, so it waits (`None`: queued
    /// again once they are), its copies not even read; gone from the tenant, its copies go.
    fn referenced(&self, key: &Key, idx: EntryId, resource: &Resource) -> Option<bool> {
        if !resource.dependency {
            return Some(false);
        }
        match deps::referenced(self.tenant, key) {
            Some(referenced) => Some(referenced),
            None if self.tenant.caches[idx].contains(&key.namespace, &key.name) => None,
            None => Some(false),
        }
    }

    /// ferry's copy of `key` in each super (at `place`), as the caches and the ledger hold
    /// it. A checked copy is reduced to what flows up: it held what ferry applies, and
    /// nothing but what flows up has changed since.
    fn held(
        &self,
        key: &Key,
        idx: EntryId,
        place: &Place,
        (namespaced, reduced): (bool, bool),
        context: u64,
    ) -> Vec<Held> {
        let ledger = self.tenant.ledger();
        let mut held = Vec::with_capacity(self.shared.supers.len());
        for (i, s) in self.shared.supers.iter() {
            let cache = &s.caches[idx];
            let found = cache
                .get_checked(&place.namespace, &place.name)
                .filter(|(c, _)| Ownership::of(c).is_copy_of(key, namespaced));
            let (copy, checked) = match found {
                Some((copy, checked)) => (Some(copy), checked),
                None => (None, false),
            };
            // Only a reduced object may skip its translation: nothing else asks.
            let applied_current = reduced
                && copy
                    .as_deref()
                    .and_then(|c| annotation(c, ANN_APPLIED))
                    .is_some_and(|a| ledger.checked(key, context, a));
            held.push(Held {
                served: cache.served().is_some(),
                copy,
                checked,
                applied_current,
                stale: ledger.cleanup_pending(key, i),
            });
        }
        held
    }

    /// Translates the tenant object `object` of `key` for the super cluster, when a copy is
    /// wanted; a refusal is reported here.
    async fn translate_down(
        &self,
        key: &Key,
        idx: EntryId,
        resource: &Resource,
        read: &Read,
        object: Option<Arc<Value>>,
    ) -> Down {
        let gone = object.is_none();
        let Some(object) = object.filter(|_| read.snapshot.wanted) else {
            if !resource.dependency {
                deps::clear(self.shared, self.tenant, key);
            }
            self.accepted(key);
            return Down::Absent { gone };
        };
        let refusal = match self.translate(resource, (*object).clone(), true).await {
            Ok(translated) => return Down::Copy(object, translated),
            Err(refusal) => refusal,
        };
        self.refuse(key, Some(&object), &refusal).await;
        // Out of the selection: its copy goes. Other refusals leave the copy (and its
        // dependencies), but nothing it names flows up any more.
        if refusal.reason == Reason::NotSelected {
            return Down::Absent { gone: false };
        }
        if !resource.dependency {
            // Listed at start with a copy, its references are recorded from the schema
            // rules first: the dependencies its copy names stay.
            if read.snapshot.supers.iter().any(|h| h.copy.is_some()) {
                deps::ensure_recorded(self.shared, self.tenant, key, idx);
            }
            deps::clear_produced(self.shared, self.tenant, key);
        }
        Down::Refused
    }

    /// Plans and applies the copies of `object`, translated to `translated`; then status
    /// flows up.
    async fn place(
        &self,
        key: &Key,
        idx: EntryId,
        resource: &Resource,
        mut read: Read,
        (object, translated): (&Arc<Value>, Translated),
    ) -> Result<Outcome> {
        if !resource.dependency {
            deps::set(self.shared, self.tenant, key, &translated.references);
        }
        let snapshot = &mut read.snapshot;
        // A cluster-scoped object's produced references name tenant namespaces where a
        // super-side controller will write (a composite's connection Secret): their super
        // namespaces must exist there.
        let produced_ready = match snapshot.namespaced {
            true => true,
            false => match self
                .ensure_produced_namespaces(key, object, &translated.references)
                .await?
            {
                ProducedNamespaces::Ready => true,
                // Not settled: the patrol looks again once the namespace is known.
                ProducedNamespaces::Pending => false,
                ProducedNamespaces::Stop(outcome) => return Ok(outcome),
            },
        };
        if snapshot.targets.is_empty() && !snapshot.namespaced {
            snapshot.targets = placement::hosting(&self.shared.supers, &self.tenant.name);
        }
        let (desired, hash) = decide::stamped(translated.object);
        let desired = Desired {
            body: &desired,
            hash: &hash,
        };
        let placing = match plan::plan(&read.snapshot, Some(desired)) {
            Plan::Place(placing) => placing,
            Plan::Unplaced => {
                // No super may take the namespace (every candidate cordoned, or a super not
                // listed yet that might hold it): it waits.
                tracing::warn!(tenant = %self.tenant.name, object = %self.shared.describe(key), "the namespace cannot be placed yet (no super cluster is a candidate, or one is not listed yet); waiting");
                return Ok(Outcome::again(NO_SUPER));
            }
            // A cluster-scoped object goes where the tenant's namespaces are, and no super
            // holds one yet: the first super namespace queues it again. Copies elsewhere go.
            Plan::Homeless(deletes) | Plan::Remove(deletes) => {
                let deleted = self.delete_copies(key, idx, &read.place, &deletes).await?;
                return Ok(Outcome::wrote(!deleted.is_empty()));
            }
        };
        let writing = Writing {
            key,
            idx,
            object,
            snapshot: &read.snapshot,
            desired,
            place: &read.place,
            placed: read.placed,
        };
        let applied = match self.apply(&writing, placing).await? {
            Finish::Applied(applied) => applied,
            Finish::Stop(outcome) => return Ok(outcome),
        };
        let Some(current) = applied.status_from else {
            return Ok(Outcome::wrote(applied.wrote));
        };
        // Every copy holds what the object asks for: the cache keeps it reduced from now on.
        if applied.complete && self.tenant.caches[idx].check(object) {
            self.tenant.ledger().check(key, read.context, &hash);
        }
        let copy = versions(
            applied.left.iter().map(Option::as_deref),
            &read.snapshot.targets,
        );
        // A target that does not serve the kind yet has no copy: not settled, so that the
        // patrol looks again (its first list, empty, reports nothing that would).
        let settle = (applied.complete && produced_ready).then_some(Seen { copy, ..read.seen });
        let up = self
            .flow_up(key, resource, (object, &current), settle, &read.tenant_kind)
            .await?;
        Ok(Outcome::wrote(applied.wrote || up))
    }
}

/// What applying a [`Placing`] left.
struct Applied {
    /// It wrote something.
    wrote: bool,
    /// Every target holds a copy.
    complete: bool,
    /// The copy status flows up from, once written or found current.
    status_from: Option<Arc<Value>>,
    /// The copies' versions as it leaves them: what it found, its writes' answers, none where
    /// it deleted one (what is settled if nothing flows up).
    left: Vec<Option<String>>,
}

impl Reconciler<'_> {
    /// Carries `placing` out: in each target, the tenant's super namespace, then the copy; a
    /// super that fails does not stop the others (the first failure is returned at the end,
    /// and the key retried). Copies elsewhere go once every target holds one.
    async fn apply(&self, w: &Writing<'_>, placing: Placing) -> Result<Finish> {
        let mut applied = Applied {
            wrote: false,
            complete: placing.complete,
            status_from: None,
            left: w
                .snapshot
                .supers
                .iter()
                .map(|h| h.copy.as_deref().map(|c| rv(c).to_string()))
                .collect(),
        };
        let mut failed = None;
        for write in placing.writes {
            let at = write.at;
            match self.write_at(w, write).await {
                Ok(Done::Held { current, wrote }) => {
                    applied.wrote |= wrote;
                    applied.left[at.0] = Some(rv(&current).to_string());
                    if at == placing.source {
                        applied.status_from = Some(current);
                    }
                }
                Ok(Done::Stop(outcome)) => return Ok(Finish::Stop(outcome)),
                Ok(Done::Unserved) => applied.complete = false,
                Err(e) => {
                    failed.get_or_insert(e);
                    applied.complete = false;
                }
            }
        }
        // Copies where they are no longer wanted go (a migration's old super is left to the
        // namespace's reconcile until the switch), once every target holds one: the only
        // copy of an object never goes because its new super refused it.
        if applied.complete {
            match self
                .delete_copies(w.key, w.idx, w.place, &placing.deletes)
                .await
            {
                Ok(deleted) => {
                    applied.wrote |= !deleted.is_empty();
                    for at in deleted {
                        applied.left[at.0] = None;
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Finish::Applied(applied)),
        }
    }

    /// One write of a plan in super `write.at`: the tenant's super namespace there first (for
    /// a namespaced kind; a placed kind's too, as it records which super runs the tenant
    /// namespace), then the copy.
    async fn write_at(&self, w: &Writing<'_>, write: Write) -> Result<Done> {
        let at = write.at;
        let Some(kind) = self.shared.supers[at].caches[w.idx].served() else {
            return Ok(Done::Unserved);
        };
        if w.snapshot.namespaced {
            let marks = w.placed.map(|p| p.annotations(at, &self.shared.supers));
            let super_ns = self.tenant.names().to_super(&w.key.namespace);
            if let Some(outcome) = self
                .ensure_namespace(at, w.key, w.object, &super_ns, marks)
                .await?
            {
                return Ok(Done::Stop(outcome));
            }
        }
        self.write_one(w, (at, &kind.resource), write.step).await
    }

    /// Carries out `step` for ferry's copy in super `at` (served as `api`). A create that
    /// finds the name taken reads what holds it, once, and plans again.
    async fn write_one(
        &self,
        w: &Writing<'_>,
        (at, api): (SuperId, &ApiResource),
        mut step: CopyWrite,
    ) -> Result<Done> {
        let target = &self.shared.supers[at];
        let Some(held) = w.snapshot.held(at) else {
            return Ok(Done::Unserved);
        };
        let mut read = false;
        loop {
            step = match step {
                CopyWrite::Nothing => {
                    let Some(current) = held.copy.clone() else {
                        return Ok(Done::Stop(Outcome::default()));
                    };
                    if !held.checked {
                        target.caches[w.idx].check(&current);
                    }
                    return Ok(Done::Held {
                        current,
                        wrote: false,
                    });
                }
                CopyWrite::Create(body) => match self.write_copy(w, (at, api), &body).await {
                    Ok(current) => {
                        return Ok(Done::Held {
                            current,
                            wrote: true,
                        })
                    }
                    // Something holds the name: ferry's copy the cache has not seen yet, or
                    // someone else's object. Only now is it read, once.
                    Err(e) if e.code() == Some(409) && !read => {
                        read = true;
                        let (namespace, name) = (&w.place.namespace, &w.place.name);
                        let found = target.writer.get(api, namespace, name).await?;
                        plan::after_conflict(found.as_ref(), w.key, w.snapshot, w.desired)
                    }
                    Err(e) => return Err(e),
                },
                CopyWrite::Apply(body) => {
                    tracing::debug!(tenant = %self.tenant.name, object = %self.shared.describe(w.key), cluster = %target.name, "the super copy differs; applying");
                    let current = self.write_copy(w, (at, api), &body).await?;
                    return Ok(Done::Held {
                        current,
                        wrote: true,
                    });
                }
                CopyWrite::Recreate(doomed) => {
                    tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(w.key), cluster = %target.name, "tenant uid changed; replacing the super copy");
                    let delete = Delete { at, doomed };
                    let wrote = self.delete_copy(w.key, w.idx, w.place, &delete).await?;
                    return Ok(Done::Stop(Outcome {
                        wrote,
                        again: Some(LOOK_AGAIN),
                    }));
                }
                CopyWrite::Wait => return Ok(Done::Stop(Outcome::again(WAIT_FOR_DELETION))),
                CopyWrite::Refuse(refusal) => {
                    self.refuse(w.key, Some(w.object), &refusal).await;
                    return Ok(Done::Stop(Outcome::default()));
                }
            }
        }
    }

    /// Writes the super copy `body` in super `at` (served as `api`): a create (nothing may
    /// hold the name), or an apply to the copy whose uid the body names.
    async fn write_copy(
        &self,
        w: &Writing<'_>,
        (at, api): (SuperId, &ApiResource),
        body: &Value,
    ) -> Result<Arc<Value>> {
        // A create is a POST, the super API server's cheapest write: 1.16x the super's CPU of
        // a direct create, 1.43x with a server-side apply (`cargo xtask bench --sync`).
        let target = &self.shared.supers[at];
        let written = match meta_str(body, "uid") {
            Some(uid) => {
                target
                    .writer
                    .apply_copy(api, body, Precondition::Uid(uid))
                    .await
            }
            None => target.writer.create(api, body).await,
        };
        let stale = (w.key.clone(), at);
        let out = match written {
            Ok(out) => {
                let mut ledger = self.tenant.ledger();
                if !ledger.stale.is_empty() {
                    ledger.stale.remove(&stale);
                }
                out
            }
            Err(e) => {
                if matches!(e, crate::write::Error::Cleanup(_)) {
                    let failed = {
                        let mut ledger = self.tenant.ledger();
                        let failed = ledger.stale.entry(stale).or_default();
                        *failed += 1;
                        *failed
                    };
                    if failed == crate::ledger::CLEANUP_TRIES {
                        tracing::warn!(tenant = %self.tenant.name, object = %self.shared.describe(w.key), cluster = %target.name, error = %e, "gave up removing the fields an apply dropped from the super copy");
                    }
                }
                return Err(e);
            }
        };
        // Held checked: whatever the API server made of the body (defaults, pruning), it is
        // what ferry applied, so no write loop can start.
        target.caches[w.idx].remember_applied(out.clone());
        Ok(Arc::new(out))
    }

    /// Carries out `deletes` of ferry's copies of `key` (at `place`): the supers whose copy
    /// was deleted.
    async fn delete_copies(
        &self,
        key: &Key,
        idx: EntryId,
        place: &Place,
        deletes: &[Delete],
    ) -> Result<Vec<SuperId>> {
        let mut deleted = Vec::new();
        for delete in deletes {
            if self.delete_copy(key, idx, place, delete).await? {
                deleted.push(delete.at);
            }
        }
        Ok(deleted)
    }

    /// Deletes ferry's copy `delete.doomed` of `key` (at `place`) in super `delete.at`, if
    /// that super still serves the kind.
    async fn delete_copy(
        &self,
        key: &Key,
        idx: EntryId,
        place: &Place,
        delete: &Delete,
    ) -> Result<bool> {
        let target = &self.shared.supers[delete.at];
        let Some(kind) = target.caches[idx].served() else {
            return Ok(false);
        };
        target
            .writer
            .delete(
                &kind.resource,
                &place.namespace,
                &place.name,
                &delete.doomed,
            )
            .await?;
        target.caches[idx].forget(&place.namespace, &place.name);
        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), cluster = %target.name, "deleted the super copy");
        Ok(true)
    }
}

/// While no super may take a namespace, look again this often.
const NO_SUPER: std::time::Duration = std::time::Duration::from_secs(10);

/// The resourceVersions of a key's copies in every super (`None` where there is none) and
/// where they are to be, for [`Seen::copy`]: a change anywhere is a reason to look again.
pub(super) fn versions<'a>(
    copies: impl Iterator<Item = Option<&'a str>>,
    targets: &[SuperId],
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (i, copy) in copies.enumerate() {
        if let Some(version) = copy {
            let _ = write!(out, "{i}:{version} ");
        }
    }
    out.push('[');
    for (n, t) in targets.iter().enumerate() {
        let _ = write!(out, "{}{}", if n == 0 { "" } else { ", " }, t.0);
    }
    out.push(']');
    out
}
