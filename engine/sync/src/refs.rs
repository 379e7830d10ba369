//! Which dependencies (kinds approved with `dependency: true`) and produced objects are
//! referenced, and by whom.
//! A dependency is synced while at least one synced object references it. Both ends are keys
//! of the same tenant.

use std::collections::{HashMap, HashSet};

use crate::key::Key;

/// The references of one tenant's objects to dependencies.
#[derive(Default)]
pub struct RefIndex {
    by_target: HashMap<Key, HashSet<Key>>,
    by_referrer: HashMap<Key, Vec<Key>>,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    fn key(kind: usize, name: &str) -> Key {
        Key::new(&"a".into(), Kind::Resource(kind), "ns", name)
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
}
