//! A cache's objects, each under its `namespace/name` and, held as text, with its text right
//! after in the same allocation (a key and a text apart took two allocations, and every map
//! entry 16 bytes more); found by `namespace` and `name` without building that text (DESIGN.md
//! "Performance targets": memory). Neither part can hold the other's place: a namespace has
//! no `/`, and the place is split at its first.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use super::held::{Held, HeldRef};

/// One object: `namespace/name` (`/name` when cluster-scoped), then its text when held as
/// text; and how it is held.
struct Entry {
    all: Box<str>,
    how: How,
}

/// How an [`Entry`] holds its object: where its text starts, the digest of a checked copy's
/// rest, or the object parsed.
enum How {
    Full(u32),
    Checked(u32, u64),
    Parsed(Arc<Value>),
}

impl Entry {
    fn new(namespace: &str, name: &str, held: Held) -> Self {
        let text = held.text().unwrap_or_default();
        let mut all = String::with_capacity(namespace.len() + 1 + name.len() + text.len());
        all.push_str(namespace);
        all.push('/');
        all.push_str(name);
        // A namespace and a name an API server gave: a few hundred bytes at most.
        let at = u32::try_from(all.len()).expect("a place of under 4 GiB");
        all.push_str(text);
        let how = match held {
            Held::Full(_) => How::Full(at),
            Held::Checked { rest, .. } => How::Checked(at, rest),
            Held::Parsed(object) => How::Parsed(object),
        };
        Self {
            all: all.into_boxed_str(),
            how,
        }
    }

    /// Where the text starts (the end, for a parsed object).
    fn at(&self) -> usize {
        match self.how {
            How::Full(at) | How::Checked(at, _) => at as usize,
            How::Parsed(_) => self.all.len(),
        }
    }

    fn held(&self) -> HeldRef<'_> {
        let text = &self.all[self.at()..];
        match &self.how {
            How::Full(_) => HeldRef::Full(text),
            How::Checked(_, rest) => HeldRef::Checked { text, rest: *rest },
            How::Parsed(object) => HeldRef::Parsed(object),
        }
    }
}

/// What a lookup and a held entry both are: a namespace and a name.
trait Place {
    fn place(&self) -> (&str, &str);
}

impl Place for Entry {
    fn place(&self) -> (&str, &str) {
        let placed = &self.all[..self.at()];
        placed.split_once('/').unwrap_or(("", placed))
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

// An entry hashes and compares as its place, so that a lookup by place finds it.
impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn Place).hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.place() == other.place()
    }
}

impl Eq for Entry {}

impl<'a> Borrow<dyn Place + 'a> for Entry {
    fn borrow(&self) -> &(dyn Place + 'a) {
        self
    }
}

/// The objects of one cache.
#[derive(Default)]
pub(super) struct Objects(HashSet<Entry>);

impl Objects {
    /// The object at `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<HeldRef<'_>> {
        self.0
            .get(&(namespace, name) as &dyn Place)
            .map(Entry::held)
    }

    /// Whether an object is at `namespace`/`name`.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.get(namespace, name).is_some()
    }

    /// Holds `held` at `namespace`/`name`, in place of what was there.
    pub fn insert(&mut self, namespace: &str, name: &str, held: Held) {
        // An API server refuses a `/` in a namespace; one here would be split elsewhere.
        debug_assert!(!namespace.contains('/'), "namespace {namespace:?}");
        self.0.replace(Entry::new(namespace, name, held));
    }

    /// Drops the object at `namespace`/`name`; whether there was one.
    pub fn remove(&mut self, namespace: &str, name: &str) -> bool {
        self.0.remove(&(namespace, name) as &dyn Place)
    }

    /// Whether any object is in `namespace`.
    pub fn any_in(&self, namespace: &str) -> bool {
        self.0.iter().any(|e| e.place().0 == namespace)
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every object with its namespace and name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, HeldRef<'_>)> {
        self.0.iter().map(|entry| {
            let (namespace, name) = entry.place();
            (namespace, name, entry.held())
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
        assert_eq!(objects.get("a", "x").and_then(HeldRef::text), Some("4"));
        assert_eq!(objects.get("", "x").and_then(HeldRef::text), Some("3"));
        // A name with a slash (no API server gives one) is still its own place.
        assert_eq!(objects.get("", "a/x").and_then(HeldRef::text), Some("5"));
        assert!(!objects.contains("b", "x") && !objects.contains("a", "z"));
        assert!(objects.any_in("a") && objects.any_in("") && !objects.any_in("b"));
        let mut all: Vec<_> = objects
            .iter()
            .map(|(ns, n, _)| format!("{ns}|{n}"))
            .collect();
        all.sort();
        assert_eq!(all, ["a|x", "a|y", "|a/x", "|x"]);
        assert!(!objects.remove("a", "z") && !objects.remove("b", "x"));
        assert!(objects.remove("a", "x"));
        objects.remove("a", "y");
        assert!(!objects.any_in("a") && objects.len() == 2);
    }

    #[test]
    fn every_way_of_holding_comes_back_as_held_beside_its_place() {
        let mut objects = Objects::default();
        let text = r#"{"metadata":{"uid":"u/1"},"spec":{"path":"a/b"}}"#;
        let parsed = Arc::new(serde_json::json!({"metadata": {"name": "p"}}));
        objects.insert(
            "ns",
            "c",
            Held::Checked {
                text: text.into(),
                rest: 7,
            },
        );
        objects.insert("ns", "f", Held::Full(text.into()));
        objects.insert("", "p", Held::Parsed(parsed.clone()));
        match objects.get("ns", "c") {
            Some(HeldRef::Checked { text: t, rest: 7 }) => assert_eq!(t, text),
            _ => panic!("checked"),
        }
        assert!(matches!(objects.get("ns", "f"), Some(HeldRef::Full(t)) if t == text));
        assert!(
            matches!(objects.get("", "p"), Some(HeldRef::Parsed(o)) if Arc::ptr_eq(o, &parsed))
        );
        // A text's own slashes are not part of its place.
        assert!(!objects.contains("ns", "c\"{") && !objects.any_in("u"));
        // One map entry: the allocation and how it is held, 16 bytes each.
        assert_eq!(std::mem::size_of::<Entry>(), 32);
    }
}
