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
    digest: String,
    version: String,
}

/// One tenant's memory.
#[derive(Default)]
pub struct Ledger {
    /// The last refusal of each key (an Event is published only when it changes).
    pub refusals: HashMap<Key, String>,
    /// References to dependencies.
    pub refs: RefIndex,
    /// Keys ferry keeps in sync.
    pub synced: HashSet<Key>,
    /// Public objects whose name several supers hold (logged and counted once).
    pub conflicts: HashSet<Key>,
    /// Copies (key, super) that may still hold fields an apply dropped, and how many times
    /// the patch removing them failed: applied again whatever the copy looks like, a few
    /// times.
    pub stale: HashMap<(Key, usize), u32>,
    written: HashMap<(Key, Part), Written>,
    settled: HashMap<Key, Seen>,
}

impl Ledger {
    /// Whether ferry's last write of `part` for `key` produced `object` (same digest, same
    /// resourceVersion). When it did, `object` holds what ferry wrote even if the API server
    /// normalised it (pruned unknown fields, defaulted others), so no write loop can start.
    pub fn wrote(&self, key: &Key, part: Part, digest: &str, object: &Value) -> bool {
        self.written
            .get(&(key.clone(), part))
            .is_some_and(|w| w.digest == digest && w.version == rv(object))
    }

    /// Records that writing `digest` as `part` of `key` produced `object`.
    pub fn record_write(&mut self, key: &Key, part: Part, digest: String, object: &Value) {
        let version = rv(object).to_string();
        self.written
            .insert((key.clone(), part), Written { digest, version });
    }

    /// What the last reconcile of `key` that found nothing to do saw.
    pub fn settled(&self, key: &Key) -> Option<&Seen> {
        self.settled.get(key)
    }

    /// Records that a reconcile of `key` that saw `seen` left nothing to do.
    pub fn settle(&mut self, key: &Key, seen: Seen) {
        self.settled.insert(key.clone(), seen);
    }

    /// Forgets that `key` was settled.
    pub fn unsettle(&mut self, key: &Key) {
        self.settled.remove(key);
    }
}
