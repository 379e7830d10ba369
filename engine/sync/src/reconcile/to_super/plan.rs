//! toSuper, decided: from a [`Snapshot`] of one key (its tenant object, ferry's copy in each
//! super, where copies belong, what the ledger remembers) and what the tenant object
//! translates to, the steps that bring the copies in line. Pure: no API server, cache, ledger
//! or clock; `to_super.rs` reads the snapshot, translates, and applies the plan.
//!
//! ```text
//!  Snapshot ─start─▶ Settled | UpOnly(super) | AwaitDeletion | Plan { read_whole }
//!  Snapshot + desired copy ─plan─▶ Remove | Homeless | Unplaced | Place { writes, deletes }
//! ```
//!
//! The migration invariant is decided here: a copy outside the targets is deleted only in a
//! plan where every target serves the kind, and the applier deletes only once every write of
//! the plan succeeded. The only copy of an object never goes because its new super refused it.

use std::sync::Arc;

use serde_json::Value;

use crate::decide::{self, CopyWrite, Doomed};
use crate::key::Key;
use crate::object::{deleting, Ownership};
use crate::supers::SuperId;

/// What one super holds of a key.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// The super serves the kind.
    pub served: bool,
    /// ferry's copy of this key there, as the cache holds it.
    pub copy: Option<Arc<Value>>,
    /// The copy is known to hold what ferry applied (its last write produced it, or the cache
    /// checked it): it is reduced to what flows up.
    pub checked: bool,
    /// The copy's `ferry.dev/applied` is the digest the tenant object was last checked
    /// against, under the current context count (nothing a translation reads changed since).
    /// Only asked of a reduced tenant object's copies (false otherwise).
    pub applied_current: bool,
    /// The last apply there left fields it dropped: apply again.
    pub stale: bool,
}

/// One key of a toSuper kind at the start of its reconcile.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The kind is namespaced.
    pub namespaced: bool,
    /// The tenant object's uid, when it exists and is not being deleted.
    pub object_uid: Option<String>,
    /// The cache holds the tenant object reduced (`cache/held.rs`).
    pub reduced: bool,
    /// A copy is wanted (the object exists, its namespace lives, a dependency is referenced).
    pub wanted: bool,
    /// Per super, in config order (by [`SuperId`]).
    pub supers: Vec<Held>,
    /// Where copies belong, the super status flows up from first (a migration's target after
    /// it).
    pub targets: Vec<SuperId>,
    /// A reconcile that saw these very versions found nothing to do.
    pub settled: bool,
}

impl Snapshot {
    /// What super `at` holds.
    pub fn held(&self, at: SuperId) -> Option<&Held> {
        self.supers.get(at.0)
    }

    /// What each super holds, with its id.
    pub fn each(&self) -> impl Iterator<Item = (SuperId, &Held)> {
        self.supers.iter().enumerate().map(|(i, h)| (SuperId(i), h))
    }
}

/// How a reconcile starts, before anything is translated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Nothing changed since a reconcile that found nothing to do.
    Settled,
    /// Only what flows up can have changed since every copy was found holding what the
    /// reduced tenant object asks for: no translation; status flows up from this super.
    UpOnly(SuperId),
    /// A target's copy is being deleted: look again later (nothing is read meanwhile).
    AwaitDeletion,
    /// Translate and plan; a reduced tenant object is read whole first (`read_whole`).
    Plan {
        /// Read the tenant object from its API server first.
        read_whole: bool,
    },
}

/// How `snapshot`'s reconcile starts.
pub fn start(snapshot: &Snapshot) -> Start {
    if snapshot.settled {
        return Start::Settled;
    }
    if !(snapshot.reduced && snapshot.wanted && snapshot.object_uid.is_some()) {
        return Start::Plan { read_whole: false };
    }
    if let Some(source) = held_everywhere(snapshot) {
        return Start::UpOnly(source);
    }
    let going = |i: &SuperId| {
        let held = snapshot.held(*i);
        held.and_then(|h| h.copy.as_deref()).is_some_and(deleting)
    };
    if snapshot.targets.iter().any(going) {
        return Start::AwaitDeletion;
    }
    Start::Plan { read_whole: true }
}

/// The super status flows up from when the reduced tenant object needs no translation: every
/// target holds a checked copy of it (this very tenant object, not being deleted) with the
/// digest its last translation had; no other super holds one, no copy awaits a cleanup, and
/// no migration is under way (a namespaced object has one target).
fn held_everywhere(snapshot: &Snapshot) -> Option<SuperId> {
    let source = *snapshot.targets.first()?;
    if snapshot.namespaced && snapshot.targets.len() > 1 {
        return None;
    }
    let object_uid = snapshot.object_uid.as_deref()?;
    for (i, held) in snapshot.each() {
        match (snapshot.targets.contains(&i), held.copy.as_deref()) {
            (false, None) => {}
            (true, Some(c))
                if held.checked
                    && held.applied_current
                    && !held.stale
                    && !deleting(c)
                    && Ownership::of(c).uid == Some(object_uid) => {}
            _ => return None,
        }
    }
    Some(source)
}

/// The super copy a tenant object asks for: its body and digest (`decide::stamped`).
#[derive(Clone, Copy, Debug)]
pub struct Desired<'a> {
    /// The copy to write.
    pub body: &'a Value,
    /// Its `ferry.dev/applied` digest.
    pub hash: &'a str,
}

/// A copy to delete in one super.
#[derive(Clone, Debug, PartialEq)]
pub struct Delete {
    /// The super.
    pub at: SuperId,
    /// The copy, as decided on.
    pub doomed: Doomed,
}

/// A write of ferry's copy in one super (its namespace made sure of first, when namespaced).
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// The super.
    pub at: SuperId,
    /// What the copy there needs.
    pub step: CopyWrite,
}

/// Copies written where they belong, then the others deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct Placing {
    /// The super status flows up from (the first target).
    pub source: SuperId,
    /// Per target, a migration's target first: the new copies do not wait for the old super.
    /// A target that does not serve the kind when the write comes is skipped.
    pub writes: Vec<Write>,
    /// Copies outside the targets, deleted only once every write succeeded; none unless
    /// every target serves the kind.
    pub deletes: Vec<Delete>,
    /// Every target serves the kind: once the writes succeed, every target holds a copy.
    pub complete: bool,
}

/// What a reconcile does with ferry's copies of a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// No copy is wanted (the object is gone or going, its namespace going, a dependency
    /// unreferenced, the object out of the selection): every copy goes.
    Remove(Vec<Delete>),
    /// A cluster-scoped object, and no super holds one of the tenant's namespaces yet: copies
    /// elsewhere go; the first super namespace queues it again.
    Homeless(Vec<Delete>),
    /// A namespaced object whose namespace no super may take yet: it waits.
    Unplaced,
    /// Copies where they belong.
    Place(Placing),
}

/// The plan for `snapshot` when its tenant object asks for `desired` (none: no copy is
/// wanted).
pub fn plan(snapshot: &Snapshot, desired: Option<Desired<'_>>) -> Plan {
    let Some(desired) = desired else {
        return Plan::Remove(remove(snapshot));
    };
    let Some(&source) = snapshot.targets.first() else {
        return match snapshot.namespaced {
            true => Plan::Unplaced,
            false => Plan::Homeless(deletes(snapshot, &[])),
        };
    };
    let object_uid = snapshot.object_uid.as_deref().unwrap_or("");
    let mut complete = true;
    let mut writes = Vec::new();
    for &at in snapshot.targets.iter().rev() {
        let unserved = Held::default();
        let held = snapshot.held(at).unwrap_or(&unserved);
        // A target that did not serve the kind when the snapshot was read may serve it by the
        // time of the write (the applier looks again); nothing elsewhere goes in this plan.
        complete &= held.served;
        writes.push(Write {
            at,
            step: copy_write(held, desired, object_uid),
        });
    }
    let deletes = match complete {
        true => deletes(snapshot, &snapshot.targets),
        false => Vec::new(),
    };
    Plan::Place(Placing {
        source,
        writes,
        deletes,
        complete,
    })
}

/// The deletes of [`Plan::Remove`]: no copy is wanted, every copy goes.
pub fn remove(snapshot: &Snapshot) -> Vec<Delete> {
    deletes(snapshot, &[])
}

/// What ferry's copy `held` needs to hold `desired` (tenant object uid `object_uid`); a copy
/// whose last apply left fields it dropped is applied again.
fn copy_write(held: &Held, desired: Desired<'_>, object_uid: &str) -> CopyWrite {
    let copy = held.copy.as_deref();
    let step = decide::to_super(desired.body, desired.hash, copy, object_uid, held.checked);
    match (held.stale, step, copy) {
        (true, CopyWrite::Nothing, Some(copy)) => decide::reapply(desired.body, copy),
        (_, step, _) => step,
    }
}

/// A create failed because something holds the name in a super, and `found` is what does
/// (read once): the write to make instead. ferry's own copy is judged as a cached one is;
/// someone else's object is refused; a name free again is created.
pub fn after_conflict(
    found: Option<&Value>,
    key: &Key,
    snapshot: &Snapshot,
    desired: Desired<'_>,
) -> CopyWrite {
    let object_uid = snapshot.object_uid.as_deref().unwrap_or("");
    decide::checked(found, key, snapshot.namespaced, desired.body, object_uid)
}

/// Deletes of ferry's copies in every super that serves the kind but `keep`; copies already
/// being deleted are left to their finalizers.
fn deletes(snapshot: &Snapshot, keep: &[SuperId]) -> Vec<Delete> {
    snapshot
        .each()
        .filter(|(at, held)| held.served && !keep.contains(at))
        .filter_map(|(at, held)| {
            let doomed = decide::remove(held.copy.as_deref())?;
            Some(Delete { at, doomed })
        })
        .collect()
}

#[cfg(test)]
mod tests;
