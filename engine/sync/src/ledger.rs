//! What a tenant remembers between reconciles. Lost on restart by design: everything here can
//! be recomputed from the clusters.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use serde_json::Value;

use crate::key::{Key, SuperId};
use crate::object::rv;
use crate::refs::RefIndex;

/// Which of ferry's writes for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The status written up into the tenant object.
    Status,
    /// The super-owned fields written up into the tenant object.
    Object,
    /// A tenant's copy of a public super object.
    Copy,
}

/// What one reconcile of a toSuper key saw, to skip the next when nothing changed (held as a
/// keyed digest).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seen {
    /// The tenant object's resourceVersion (empty when there is none).
    pub object: String,
    /// The super copy's resourceVersion (empty when there is none).
    pub copy: String,
    /// Whether the object was wanted in the super cluster.
    pub wanted: bool,
}

/// A write ferry made: the keyed digests of the digest of what it wanted and of the
/// resourceVersion the write made. A later object is taken for ferry's write only if both
/// match: where one of them is the same, by a chance of 2^-64 for the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Written {
    digest: u64,
    version: u64,
}

/// What is remembered of one key: held once per key, since a tenant's memory grows with its
/// objects (DESIGN.md "Performance targets": memory).
#[derive(Debug, Default)]
struct Entry {
    /// Whether ferry keeps it in sync.
    synced: bool,
    /// The digest of what the last reconcile that found nothing to do saw.
    settled: Option<u64>,
    /// ferry's last write of each part.
    written: Vec<(Part, Written)>,
    /// When the tenant object was last held reduced: the count of `Queues::context` then, and
    /// the keyed digest of the `ferry.dev/applied` its translation had.
    checked: Option<(u64, u64)>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        !self.synced && self.settled.is_none() && self.written.is_empty() && self.checked.is_none()
    }
}

/// Hashes an entry's id, already a keyed digest, as itself.
#[derive(Default)]
struct Id(u64);

impl Hasher for Id {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u128(&mut self, id: u128) {
        self.0 ^= id as u64;
    }
}

/// How many times a copy is applied again after the patch removing dropped fields failed.
pub const CLEANUP_TRIES: u32 = 3;

/// One tenant's memory.
#[derive(Default)]
pub struct Ledger {
    /// The last refusal of each key (an Event is published only when it changes).
    pub refusals: HashMap<Key, String>,
    /// References to dependencies.
    pub refs: RefIndex,
    /// Public objects whose name several supers hold (logged and counted once).
    pub conflicts: HashSet<Key>,
    /// Copies (key, super) that may still hold fields an apply dropped, and how many times
    /// the patch removing them failed: applied again whatever the copy looks like, a few
    /// times.
    pub stale: HashMap<(Key, SuperId), u32>,
    /// Entries by the keyed 128-bit digest of their key ([`Ledger::id`]): a key's two strings
    /// are not held once more per object.
    entries: HashMap<u128, Entry, BuildHasherDefault<Id>>,
    /// The key of every digest here.
    keys: RandomState,
}

impl Ledger {
    /// Whether ferry's last write of `part` for `key` produced `object` (same digest, same
    /// resourceVersion). When it did, `object` holds what ferry wrote even if the API server
    /// normalised it (pruned unknown fields, defaulted others), so no write loop can start.
    pub fn wrote(&self, key: &Key, part: Part, digest: &str, object: &Value) -> bool {
        let wanted = self.written(digest, object);
        self.entry(key)
            .is_some_and(|e| e.written.iter().any(|(p, w)| *p == part && *w == wanted))
    }

    /// What is remembered of a write of `digest` that produced `object`.
    fn written(&self, digest: &str, object: &Value) -> Written {
        Written {
            digest: self.keys.hash_one(digest),
            version: self.keys.hash_one(rv(object)),
        }
    }

    /// The id of `key`'s entry: two keyed digests of it, each with its own prefix (a
    /// collision among n keys has a chance of about n² / 2^129, and a tenant cannot aim for
    /// one without the process's key). The ledger is one tenant's: a collision could only mix
    /// two of its own keys.
    fn id(&self, key: &Key) -> u128 {
        let half = |prefix: u8| self.keys.hash_one((prefix, key));
        u128::from(half(1)) << 64 | u128::from(half(2))
    }

    fn entry(&self, key: &Key) -> Option<&Entry> {
        self.entries.get(&self.id(key))
    }

    /// Records that writing `digest` as `part` of `key` produced `object`.
    pub fn record_write(&mut self, key: &Key, part: Part, digest: &str, object: &Value) {
        let written = self.written(digest, object);
        self.update(key, |entry| {
            match entry.written.iter_mut().find(|(p, _)| *p == part) {
                Some((_, w)) => *w = written,
                None => {
                    entry.written.push((part, written));
                    entry.written.shrink_to_fit();
                }
            }
        });
    }

    /// Whether a reconcile of `key` that sees `seen` can be skipped: the object is wanted (a
    /// delete is never skipped) and the last reconcile that found nothing to do saw the same.
    pub fn settled(&self, key: &Key, seen: &Seen) -> bool {
        seen.wanted && self.entry(key).and_then(|e| e.settled) == Some(self.keys.hash_one(seen))
    }

    /// Records that a reconcile of `key` that saw `seen` left nothing to do.
    pub fn settle(&mut self, key: &Key, seen: Seen) {
        let digest = self.keys.hash_one(&seen);
        self.update(key, |e| e.settled = Some(digest));
    }

    /// Forgets that `key` was settled.
    pub fn unsettle(&mut self, key: &Key) {
        self.update(key, |e| e.settled = None);
    }

    /// Whether the copy of `key` in super `i` may still hold fields an apply dropped, and is
    /// to be applied again (fewer than [`CLEANUP_TRIES`] patches removing them failed).
    pub fn cleanup_pending(&self, key: &Key, i: SuperId) -> bool {
        // Almost always empty: no key is cloned for the lookup then.
        !self.stale.is_empty()
            && self
                .stale
                .get(&(key.clone(), i))
                .is_some_and(|failed| *failed < CLEANUP_TRIES)
    }

    /// Whether ferry keeps `key` in sync.
    pub fn synced(&self, key: &Key) -> bool {
        self.entry(key).is_some_and(|e| e.synced)
    }

    /// Records whether ferry keeps `key` in sync; whether that changed.
    pub fn set_synced(&mut self, key: &Key, synced: bool) -> bool {
        if self.synced(key) == synced {
            return false;
        }
        self.update(key, |e| e.synced = synced);
        true
    }

    /// Records that `key`'s tenant object, translated under context count `context` to a copy
    /// whose `ferry.dev/applied` is `applied`, is held reduced.
    pub fn check(&mut self, key: &Key, context: u64, applied: &str) {
        let digest = self.keys.hash_one(applied);
        self.update(key, |e| e.checked = Some((context, digest)));
    }

    /// Whether `key`'s tenant object was held reduced under context count `context` with a
    /// translation whose `ferry.dev/applied` is `applied`.
    pub fn checked(&self, key: &Key, context: u64, applied: &str) -> bool {
        self.entry(key).and_then(|e| e.checked) == Some((context, self.keys.hash_one(applied)))
    }

    /// Forgets everything about `key` but its refusal and references (its object and every
    /// copy of it are gone).
    pub fn forget(&mut self, key: &Key) {
        self.entries.remove(&self.id(key));
        if !self.stale.is_empty() {
            self.stale.retain(|(k, _), _| k != key);
        }
    }

    /// Changes `key`'s entry (made only if the change leaves something to remember), dropped
    /// once it remembers nothing.
    fn update(&mut self, key: &Key, change: impl FnOnce(&mut Entry)) {
        let id = self.id(key);
        match self.entries.get_mut(&id) {
            Some(entry) => {
                change(entry);
                if entry.is_empty() {
                    self.entries.remove(&id);
                }
            }
            None => {
                let mut entry = Entry::default();
                change(&mut entry);
                if !entry.is_empty() {
                    self.entries.insert(id, entry);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    #[test]
    fn a_key_is_settled_by_what_it_saw_and_forgotten_with_its_object() {
        let mut ledger = Ledger::default();
        let key = Key::new(
            &"t".into(),
            Kind::Resource(crate::key::EntryId(0)),
            "ns",
            "a",
        );
        let seen = Seen {
            object: "1".into(),
            copy: "0:2 [0]".into(),
            wanted: true,
        };
        assert!(!ledger.settled(&key, &seen));
        ledger.settle(&key, seen.clone());
        assert!(ledger.settled(&key, &seen));
        let changed = Seen {
            copy: "0:3 [0]".into(),
            ..seen.clone()
        };
        assert!(!ledger.settled(&key, &changed));
        let unwanted = Seen {
            wanted: false,
            ..seen.clone()
        };
        ledger.settle(&key, unwanted.clone());
        assert!(
            !ledger.settled(&key, &unwanted),
            "deletes are never skipped"
        );
        ledger.unsettle(&key);
        assert!(ledger.entries.is_empty(), "nothing else was remembered");
        assert!(ledger.set_synced(&key, true) && !ledger.set_synced(&key, true));
        ledger.check(&key, 3, "d1");
        assert!(ledger.checked(&key, 3, "d1"));
        assert!(!ledger.checked(&key, 4, "d1") && !ledger.checked(&key, 3, "d2"));
        ledger.forget(&key);
        assert!(!ledger.synced(&key) && ledger.entries.is_empty());
    }

    #[test]
    fn a_write_is_known_by_its_digest_and_version_and_its_key_alone() {
        let mut ledger = Ledger::default();
        let key = Key::new(
            &"t".into(),
            Kind::Resource(crate::key::EntryId(0)),
            "ns",
            "a",
        );
        let other = key.sibling(Kind::Resource(crate::key::EntryId(0)), "ns", "b");
        let out = serde_json::json!({"metadata": {"resourceVersion": "7"}});
        ledger.record_write(&key, Part::Status, "d1", &out);
        assert!(ledger.wrote(&key, Part::Status, "d1", &out));
        let later = serde_json::json!({"metadata": {"resourceVersion": "8"}});
        assert!(!ledger.wrote(&key, Part::Status, "d1", &later));
        assert!(!ledger.wrote(&key, Part::Status, "d2", &out));
        assert!(!ledger.wrote(&key, Part::Object, "d1", &out));
        assert!(!ledger.wrote(&other, Part::Status, "d1", &out));
        ledger.record_write(&key, Part::Status, "d2", &later);
        assert!(ledger.wrote(&key, Part::Status, "d2", &later));
        assert!(!ledger.wrote(&key, Part::Status, "d1", &out));
        ledger.forget(&key);
        assert!(!ledger.wrote(&key, Part::Status, "d2", &later));
    }
}
