//! What a tenant remembers between reconciles. Lost on restart by design: everything here can
//! be recomputed from the clusters.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::key::Key;
use crate::object::rv;
use crate::refs::RefIndex;

/// Which of ferry's writes for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The super copy of a tenant object in one super (its index).
    Down(usize),
    /// The status written up into the tenant object.
    Status,
    /// The super-owned fields written up into the tenant object.
    Object,
    /// A tenant's copy of a public super object.
    Copy,
}

/// What one reconcile of a toSuper key saw, to skip the next when nothing changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The tenant object's resourceVersion (empty when there is none).
    pub object: String,
    /// The super copy's resourceVersion (empty when there is none).
    pub copy: String,
    /// Whether the object was wanted in the super cluster.
    pub wanted: bool,
}

/// A write ferry made: the digest of what it wanted and the resourceVersion the write made.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    digest: Box<str>,
    version: Box<str>,
}

/// What is remembered of one key: held once per key, since a tenant's memory grows with its
/// objects (DESIGN.md "Performance targets": memory).
#[derive(Debug, Default)]
struct Entry {
    /// Whether ferry keeps it in sync.
    synced: bool,
    /// What the last reconcile that found nothing to do saw.
    settled: Option<Seen>,
    /// ferry's last write of each part.
    written: Vec<(Part, Written)>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        !self.synced && self.settled.is_none() && self.written.is_empty()
    }
}

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
    pub stale: HashMap<(Key, usize), u32>,
    entries: HashMap<Key, Entry>,
}

impl Ledger {
    /// Whether ferry's last write of `part` for `key` produced `object` (same digest, same
    /// resourceVersion). When it did, `object` holds what ferry wrote even if the API server
    /// normalised it (pruned unknown fields, defaulted others), so no write loop can start.
    pub fn wrote(&self, key: &Key, part: Part, digest: &str, object: &Value) -> bool {
        self.entries.get(key).is_some_and(|e| {
            e.written
                .iter()
                .any(|(p, w)| *p == part && &*w.digest == digest && &*w.version == rv(object))
        })
    }

    /// Records that writing `digest` as `part` of `key` produced `object`.
    pub fn record_write(&mut self, key: &Key, part: Part, digest: String, object: &Value) {
        let written = Written {
            digest: digest.into(),
            version: rv(object).into(),
        };
        let entry = self.entry(key);
        match entry.written.iter_mut().find(|(p, _)| *p == part) {
            Some((_, w)) => *w = written,
            None => {
                entry.written.push((part, written));
                entry.written.shrink_to_fit();
            }
        }
    }

    /// What the last reconcile of `key` that found nothing to do saw.
    pub fn settled(&self, key: &Key) -> Option<&Seen> {
        self.entries.get(key)?.settled.as_ref()
    }

    /// Records that a reconcile of `key` that saw `seen` left nothing to do.
    pub fn settle(&mut self, key: &Key, seen: Seen) {
        self.entry(key).settled = Some(seen);
    }

    /// Forgets that `key` was settled.
    pub fn unsettle(&mut self, key: &Key) {
        self.update(key, |e| e.settled = None);
    }

    /// Whether ferry keeps `key` in sync.
    pub fn synced(&self, key: &Key) -> bool {
        self.entries.get(key).is_some_and(|e| e.synced)
    }

    /// Records whether ferry keeps `key` in sync; whether that changed.
    pub fn set_synced(&mut self, key: &Key, synced: bool) -> bool {
        if self.synced(key) == synced {
            return false;
        }
        self.update(key, |e| e.synced = synced);
        true
    }

    /// Forgets everything about `key` but its refusal and references (its object and every
    /// copy of it are gone).
    pub fn forget(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    fn entry(&mut self, key: &Key) -> &mut Entry {
        // Looked up first: most keys have an entry, and `entry()` would clone the key.
        if !self.entries.contains_key(key) {
            self.entries.insert(key.clone(), Entry::default());
        }
        self.entries.get_mut(key).expect("inserted above")
    }

    /// Changes `key`'s entry (made if missing), dropped once it remembers nothing.
    fn update(&mut self, key: &Key, change: impl FnOnce(&mut Entry)) {
        match self.entries.get_mut(key) {
            Some(entry) => {
                change(entry);
                if entry.is_empty() {
                    self.entries.remove(key);
                }
            }
            None => {
                let mut entry = Entry::default();
                change(&mut entry);
                if !entry.is_empty() {
                    self.entries.insert(key.clone(), entry);
                }
            }
        }
    }
}
