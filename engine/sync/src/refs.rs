//! Which dependencies (kinds approved with `dependency: true`) and produced objects are
//! referenced, and by whom.
//! A dependency is synced while at least one synced object references it. Both ends are keys
//! of the same tenant.
//! The objects listed when a tenant starts are awaited: until each has had its references
//! recorded (its first reconcile), no dependency is known to be unreferenced.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use crate::key::Key;

/// The references of one tenant's objects to dependencies.
#[derive(Default)]
pub struct RefIndex {
    by_target: HashMap<Key, HashSet<Key>>,
    by_referrer: HashMap<Key, Vec<Key>>,
    /// Referrers awaited, by keyed digest (8 bytes each, for 100,000 objects at a restart).
    awaited: HashSet<u64>,
    /// The key of those digests.
    keys: RandomState,
}

impl RefIndex {
    /// Records that `referrer` now references exactly `targets`; returns the targets whose
    /// referenced-ness may have changed (added or dropped).
    pub fn set(&mut self, referrer: &Key, targets: Vec<Key>) -> Vec<Key> {
        let old = self.by_referrer.remove(referrer).unwrap_or_default();
        let mut changed = Vec::new();
        for t in &old {
            if !targets.contains(t) {
                if let Some(set) = self.by_target.get_mut(t) {
                    set.remove(referrer);
                    if set.is_empty() {
                        self.by_target.remove(t);
                    }
                }
                changed.push(t.clone());
            }
        }
        for t in &targets {
            if !old.contains(t) {
                self.by_target
                    .entry(t.clone())
                    .or_default()
                    .insert(referrer.clone());
                changed.push(t.clone());
            }
        }
        if !targets.is_empty() {
            self.by_referrer.insert(referrer.clone(), targets);
        }
        changed
    }

    /// What `referrer` references.
    pub fn targets(&self, referrer: &Key) -> Vec<Key> {
        self.by_referrer.get(referrer).cloned().unwrap_or_default()
    }

    /// What references `target`, in key order.
    pub fn referrers(&self, target: &Key) -> Vec<Key> {
        let mut out: Vec<Key> = self
            .by_target
            .get(target)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Whether anything references `target`.
    pub fn is_referenced(&self, target: &Key) -> bool {
        self.by_target.contains_key(target)
    }

    /// Awaits the references of `referrers` (every object that may reference a dependency,
    /// as listed at start).
    pub fn await_referrers(&mut self, referrers: impl IntoIterator<Item = Key>) {
        let keys = &self.keys;
        self.awaited
            .extend(referrers.into_iter().map(|r| keys.hash_one(&r)));
    }

    /// Whether `referrer`'s references are awaited.
    pub fn awaits(&self, referrer: &Key) -> bool {
        !self.awaited.is_empty() && self.awaited.contains(&self.keys.hash_one(referrer))
    }

    /// Whether every awaited referrer has been recorded: only then is a target nothing
    /// references known to be unreferenced.
    pub fn complete(&self) -> bool {
        self.awaited.is_empty()
    }

    /// Marks `referrer`'s references recorded. Whether that was the last one awaited.
    pub fn recorded(&mut self, referrer: &Key) -> bool {
        if self.awaited.is_empty() || !self.awaited.remove(&self.keys.hash_one(referrer)) {
            return false;
        }
        if self.awaited.is_empty() {
            // What held 100,000 digests is given back.
            self.awaited = HashSet::new();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    fn key(kind: usize, name: &str) -> Key {
        Key::new(
            &"a".into(),
            Kind::Resource(crate::key::EntryId(kind)),
            "ns",
            name,
        )
    }

    #[test]
    fn a_target_lives_while_referenced() {
        let mut index = RefIndex::default();
        let secret = key(0, "creds");
        assert_eq!(
            index.set(&key(1, "db1"), vec![secret.clone()]),
            vec![secret.clone()]
        );
        assert!(index
            .set(&key(1, "db2"), vec![secret.clone()])
            .contains(&secret));
        assert_eq!(index.set(&key(1, "db1"), vec![]), vec![secret.clone()]);
        assert!(index.is_referenced(&secret));
        index.set(&key(1, "db2"), vec![]);
        assert!(!index.is_referenced(&secret));
    }

    #[test]
    fn awaited_referrers_complete_once_each_is_recorded() {
        let mut index = RefIndex::default();
        assert!(index.complete());
        index.await_referrers([key(1, "db1"), key(1, "db2")]);
        assert!(!index.complete());
        assert!(index.awaits(&key(1, "db1")) && !index.awaits(&key(1, "db3")));
        assert!(!index.recorded(&key(1, "db3")));
        assert!(!index.recorded(&key(1, "db1")));
        assert!(!index.recorded(&key(1, "db1")), "recorded once");
        assert!(!index.awaits(&key(1, "db1")));
        assert!(index.recorded(&key(1, "db2")), "the last one completes");
        assert!(index.complete() && !index.recorded(&key(1, "db2")));
    }
}
