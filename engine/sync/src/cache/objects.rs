//! A cache's objects, each under one `namespace/name` text (one allocation, where a pair of
//! strings took two) and found by `namespace` and `name` without building that text (DESIGN.md
//! "Performance targets": memory). Neither part can hold the other's place: a namespace has
//! no `/`, and the text is split at its first.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::held::Held;

/// Where an object is: `namespace/name` (`/name` when cluster-scoped).
struct Placed(Box<str>);

/// What a lookup and a held key both are: a namespace and a name.
trait Place {
    fn place(&self) -> (&str, &str);
}

impl Place for Placed {
    fn place(&self) -> (&str, &str) {
        self.0.split_once('/').unwrap_or(("", &self.0))
    }
}

impl Place for (&str, &str) {
    fn place(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl Hash for dyn Place + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.place().hash(state);
    }
}

impl PartialEq for dyn Place + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.place() == other.place()
    }
}

impl Eq for dyn Place + '_ {}

// A held key hashes and compares as its place, so that a lookup by place finds it.
impl Hash for Placed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn Place).hash(state);
    }
}

impl PartialEq for Placed {
    fn eq(&self, other: &Self) -> bool {
        self.place() == other.place()
    }
}

impl Eq for Placed {}

impl<'a> Borrow<dyn Place + 'a> for Placed {
    fn borrow(&self) -> &(dyn Place + 'a) {
        self
    }
}

/// The objects of one cache.
#[derive(Default)]
pub(super) struct Objects(HashMap<Placed, Held>);

impl Objects {
    /// The object at `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Held> {
        self.0.get(&(namespace, name) as &dyn Place)
    }

    /// Whether an object is at `namespace`/`name`.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.get(namespace, name).is_some()
    }

    /// Holds `held` at `namespace`/`name`, in place of what was there.
    pub fn insert(&mut self, namespace: &str, name: &str, held: Held) {
        // An API server refuses a `/` in a namespace; one here would be split elsewhere.
        debug_assert!(!namespace.contains('/'), "namespace {namespace:?}");
        match self.0.get_mut(&(namespace, name) as &dyn Place) {
            Some(slot) => *slot = held,
            None => {
                self.0
                    .insert(Placed(format!("{namespace}/{name}").into()), held);
            }
        }
    }

    /// Drops the object at `namespace`/`name`.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Held> {
        self.0.remove(&(namespace, name) as &dyn Place)
    }

    /// Whether any object is in `namespace`.
    pub fn any_in(&self, namespace: &str) -> bool {
        self.0.keys().any(|k| k.place().0 == namespace)
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every object with its namespace and name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Held)> {
        self.0.iter().map(|(placed, held)| {
            let (namespace, name) = placed.place();
            (namespace, name, held)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_found_by_namespace_and_name_and_counted() {
        let mut objects = Objects::default();
        let held = |t: &str| Held::Full(t.into());
        objects.insert("a", "x", held("1"));
        objects.insert("a", "y", held("2"));
        objects.insert("", "x", held("3"));
        objects.insert("", "a/x", held("5"));
        objects.insert("a", "x", held("4"));
        assert_eq!(objects.len(), 4);
        assert_eq!(objects.get("a", "x").and_then(Held::text), Some("4"));
        assert_eq!(objects.get("", "x").and_then(Held::text), Some("3"));
        // A name with a slash (no API server gives one) is still its own place.
        assert_eq!(objects.get("", "a/x").and_then(Held::text), Some("5"));
        assert!(!objects.contains("b", "x") && !objects.contains("a", "z"));
        assert!(objects.any_in("a") && objects.any_in("") && !objects.any_in("b"));
        let mut all: Vec<_> = objects
            .iter()
            .map(|(ns, n, _)| format!("{ns}|{n}"))
            .collect();
        all.sort();
        assert_eq!(all, ["a|x", "a|y", "|a/x", "|x"]);
        assert!(objects.remove("a", "z").is_none() && objects.remove("b", "x").is_none());
        let removed = objects.remove("a", "x");
        assert_eq!(removed.as_ref().and_then(Held::text), Some("4"));
        objects.remove("a", "y");
        assert!(!objects.any_in("a") && objects.len() == 2);
    }
}
