//! What a cache holds of one object: its text, or, for a tenant object of a toSuper kind or
//! its super copy once the reconciler found the copy holding what ferry applies, only what
//! flows up and what ferry decides by, with a digest of the rest. A later version whose rest
//! has the same digest stays checked, so a status update neither brings the full text back nor
//! needs a comparison; a tenant object is read whole from its API server when it must be
//! translated again (`reconcile/to_super.rs`).

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use serde_json::{Map, Value};

/// Reduces a super copy to what flows up (type, metadata, status, super-owned fields).
pub type Reduce = Arc<dyn Fn(&Map<String, Value>) -> Map<String, Value> + Send + Sync>;

/// Metadata a reduced copy keeps: where it is, which version, whether it is going, the
/// labels and annotations ferry's ownership and digest are read from (`ferry.dev/` keys), and
/// its managers.
const KEPT_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "deletionTimestamp",
    "labels",
    "annotations",
    "managedFields",
];

/// One cached object.
pub enum Held {
    /// The object, as compact JSON text.
    Full(Box<str>),
    /// A reduced super copy checked to hold what ferry applies, and the digest of the rest.
    Checked { text: Box<str>, rest: u64 },
    /// The object parsed, in a cache read on every reconcile whose objects are few
    /// (namespaces): parsing its text each time cost more than holding it parsed (about 8%
    /// of ferry's CPU while a restart converged).
    Parsed(Arc<Value>),
}

impl Held {
    /// The text held (none for a parsed object).
    pub fn text(&self) -> Option<&str> {
        self.as_ref().text()
    }

    /// The same, borrowed.
    pub fn as_ref(&self) -> HeldRef<'_> {
        match self {
            Held::Full(text) => HeldRef::Full(text),
            Held::Checked { text, rest } => HeldRef::Checked { text, rest: *rest },
            Held::Parsed(object) => HeldRef::Parsed(object),
        }
    }
}

/// A cached object as its cache holds it, borrowed (see [`Held`]).
#[derive(Clone, Copy)]
pub enum HeldRef<'a> {
    Full(&'a str),
    Checked { text: &'a str, rest: u64 },
    Parsed(&'a Arc<Value>),
}

impl<'a> HeldRef<'a> {
    /// The text held (none for a parsed object).
    pub fn text(self) -> Option<&'a str> {
        match self {
            HeldRef::Full(t) | HeldRef::Checked { text: t, .. } => Some(t),
            HeldRef::Parsed(_) => None,
        }
    }

    /// Whether this is a checked, reduced copy.
    pub fn checked(self) -> bool {
        matches!(self, HeldRef::Checked { .. })
    }

    /// An owned copy.
    pub fn owned(self) -> Held {
        match self {
            HeldRef::Full(text) => Held::Full(text.into()),
            HeldRef::Checked { text, rest } => Held::Checked {
                text: text.into(),
                rest,
            },
            HeldRef::Parsed(object) => Held::Parsed(object.clone()),
        }
    }
}

/// How a cache of super copies reduces them once checked.
pub struct Reducer {
    reduce: Reduce,
    keys: RandomState,
}

impl Reducer {
    /// A reducer keeping what `reduce` keeps (and the metadata above).
    pub fn new(reduce: Reduce) -> Self {
        Self {
            reduce,
            keys: RandomState::new(),
        }
    }

    /// `object` reduced and checked.
    pub fn checked(&self, object: &Value) -> Option<Held> {
        let fields = object.as_object()?;
        let mut kept = (self.reduce)(fields);
        if let Some(Value::Object(meta)) = kept.get_mut("metadata") {
            meta.retain(|k, _| KEPT_METADATA.contains(&k.as_str()));
            // Only ferry's own keys are read; the others (kubectl's copy of the whole object
            // among them) count in the rest.
            for field in ["labels", "annotations"] {
                if let Some(Value::Object(keys)) = meta.get_mut(field) {
                    keys.retain(|k, _| k.starts_with(ferry_core::keys::RESERVED_PREFIX));
                }
            }
        }
        Some(Held::Checked {
            text: encode(&Value::Object(kept)),
            rest: self.rest(fields),
        })
    }

    /// `object` as it is to be held, given what was held before (`before`): still checked
    /// when it is the same object with the same rest, else in full; `None` when what is
    /// held stays as it is (the watch's echo of the version ferry applied).
    pub fn hold(&self, object: &Value, before: Option<HeldRef<'_>>) -> Option<Held> {
        if let (Some(held @ HeldRef::Checked { rest, .. }), Some(fields)) =
            (before, object.as_object())
        {
            let head = super::head(held);
            let same_object = head
                .as_ref()
                .is_some_and(|h| h.metadata.uid == crate::object::uid(object));
            // The watch's echo of the version ferry applied: nothing to compute or copy.
            if same_object
                && head.is_some_and(|h| h.metadata.resource_version == crate::object::rv(object))
            {
                return None;
            }
            if same_object && self.rest(fields) == rest {
                if let Some(held) = self.checked(object) {
                    return Some(held);
                }
            }
        }
        Some(Held::Full(encode(object)))
    }

    /// The digest of what a reduced copy leaves out, and of its labels and annotations (keyed
    /// per process): everything but status, the resourceVersion, managedFields and the
    /// generation (which a status write bumps for a kind without a status subresource, and
    /// which otherwise changes only with what the digest covers).
    fn rest(&self, fields: &Map<String, Value>) -> u64 {
        let keys = &self.keys;
        let entries = fields.iter().map(|(k, v)| match (k.as_str(), v) {
            ("status", _) => 0,
            ("metadata", Value::Object(meta)) => {
                let kept = meta.iter().filter(|(mk, _)| {
                    !matches!(
                        mk.as_str(),
                        "resourceVersion" | "managedFields" | "generation"
                    )
                });
                entry(keys, k, |h| h.write_u64(combine(keys, kept)))
            }
            _ => entry(keys, k, |h| feed(keys, h, v)),
        });
        entries.fold(0, u64::wrapping_add)
    }
}

/// The digest of one member `key` whose value `value` feeds to a fresh hasher.
fn entry(keys: &RandomState, key: &str, value: impl FnOnce(&mut DefaultHasher)) -> u64 {
    let mut hasher = keys.build_hasher();
    key.hash(&mut hasher);
    value(&mut hasher);
    hasher.finish()
}

/// The digest of an object's members, the same whatever their order (each member is digested
/// alone and the digests added): no sorting, no allocation.
fn combine<'a>(keys: &RandomState, members: impl Iterator<Item = (&'a String, &'a Value)>) -> u64 {
    members
        .map(|(k, v)| entry(keys, k, |h| feed(keys, h, v)))
        .fold(0, u64::wrapping_add)
}

/// Feeds `value` to `hasher`, the same for the same value whatever the order of its keys.
fn feed(keys: &RandomState, hasher: &mut DefaultHasher, value: &Value) {
    match value {
        Value::Null => hasher.write_u8(0),
        Value::Bool(b) => {
            hasher.write_u8(1);
            b.hash(hasher);
        }
        Value::Number(n) => {
            hasher.write_u8(2);
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => hasher.write_i64(i),
                (None, Some(u)) => hasher.write_u64(u),
                _ => hasher.write_u64(n.as_f64().unwrap_or(0.0).to_bits()),
            }
        }
        Value::String(s) => {
            hasher.write_u8(3);
            s.hash(hasher);
        }
        Value::Array(items) => {
            hasher.write_u8(4);
            hasher.write_usize(items.len());
            for item in items {
                feed(keys, hasher, item);
            }
        }
        Value::Object(map) => {
            hasher.write_u8(5);
            hasher.write_usize(map.len());
            hasher.write_u64(combine(keys, map.iter()));
        }
    }
}

/// `value` as compact JSON text, without its `apiVersion` and `kind` (the cache's own) and
/// without its metadata's `name` and `namespace` (the cache's key): all set back by
/// `Cache::decode`.
pub(super) fn encode(value: &Value) -> Box<str> {
    let text = match value {
        Value::Object(fields) => serde_json::to_string(&Untyped(fields)),
        _ => serde_json::to_string(value),
    };
    text.unwrap_or_default().into()
}

/// An object's fields but `apiVersion` and `kind`, its metadata unplaced, for [`encode`].
struct Untyped<'a>(&'a Map<String, Value>);

/// Metadata but `name` and `namespace`, for [`encode`].
struct Unplaced<'a>(&'a Map<String, Value>);

impl serde::Serialize for Untyped<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.0 {
            match (k.as_str(), v) {
                ("apiVersion" | "kind", _) => {}
                ("metadata", Value::Object(meta)) => map.serialize_entry(k, &Unplaced(meta))?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

impl serde::Serialize for Unplaced<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.0 {
            if k != "name" && k != "namespace" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// Sets back what [`encode`] leaves out of an object's metadata: `name`, and `namespace`
/// unless cluster-scoped, where a watch or an answer had them (metadata is read typed, its
/// fields in alphabetical order): a transform sees the same object from the cache as from its
/// API server.
pub(super) fn place(value: &mut Value, namespace: &str, name: &str) {
    let Some(Value::Object(meta)) = value.get_mut("metadata") else {
        return;
    };
    for (field, text) in [("name", name), ("namespace", namespace)] {
        if text.is_empty() {
            continue;
        }
        let at = meta
            .keys()
            .position(|k| k.as_str() > field)
            .unwrap_or(meta.len());
        meta.shift_insert(at, field.into(), text.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reducer() -> Reducer {
        Reducer::new(Arc::new(|fields| {
            let mut out = Map::new();
            for k in ["apiVersion", "kind", "metadata", "status"] {
                if let Some(v) = fields.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            out
        }))
    }

    fn copy(version: &str, tier: &str, status: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Database",
            "metadata": {"name": "a", "namespace": "n", "uid": "u1", "resourceVersion": version,
                "generation": 1, "labels": {"ferry.dev/tenant": "t"}},
            "spec": {"tier": tier, "notes": "x"},
            "status": {"phase": status}})
    }

    #[test]
    fn a_status_change_stays_checked_and_a_spec_change_does_not() {
        let r = reducer();
        let checked = r.checked(&copy("5", "small", "Pending")).unwrap();
        let text = checked.text().unwrap().to_string();
        assert!(
            !text.contains("spec") && !text.contains("generation"),
            "{text}"
        );
        assert!(text.contains("Pending") && text.contains("ferry.dev/tenant"));
        // The watch's echo of the same version stays as it is.
        assert!(r
            .hold(&copy("5", "small", "Pending"), Some(checked.as_ref()))
            .is_none());
        let status = r
            .hold(&copy("6", "small", "Ready"), Some(checked.as_ref()))
            .unwrap();
        assert!(status.as_ref().checked() && status.text().unwrap().contains("Ready"));
        let edited = r
            .hold(&copy("7", "large", "Ready"), Some(status.as_ref()))
            .unwrap();
        assert!(!edited.as_ref().checked() && edited.text().unwrap().contains("large"));
        // Once held in full, it stays so until the reconciler checks it again.
        assert!(!r
            .hold(&copy("8", "small", "Ready"), Some(edited.as_ref()))
            .unwrap()
            .as_ref()
            .checked());
    }

    #[test]
    fn another_object_of_the_same_name_is_held_in_full() {
        let r = reducer();
        let checked = r.checked(&copy("5", "small", "Pending")).unwrap();
        let mut other = copy("9", "small", "Pending");
        other["metadata"]["uid"] = json!("u2");
        assert!(!r
            .hold(&other, Some(checked.as_ref()))
            .unwrap()
            .as_ref()
            .checked());
    }

    #[test]
    fn only_ferrys_labels_and_annotations_are_kept() {
        let r = reducer();
        let mut object = copy("5", "small", "Pending");
        object["metadata"]["labels"]["app"] = json!("shop");
        object["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\": {}}",
            "ferry.dev/applied": "d1",
        });
        let text = r.checked(&object).unwrap().text().unwrap().to_string();
        assert!(text.contains("ferry.dev/tenant") && text.contains("ferry.dev/applied"));
        assert!(
            !text.contains("shop") && !text.contains("last-applied"),
            "{text}"
        );
    }

    #[test]
    fn labels_and_annotations_count_in_the_rest() {
        let r = reducer();
        let checked = r.checked(&copy("5", "small", "Pending")).unwrap();
        let mut relabelled = copy("6", "small", "Pending");
        relabelled["metadata"]["labels"]["extra"] = json!("1");
        assert!(!r
            .hold(&relabelled, Some(checked.as_ref()))
            .unwrap()
            .as_ref()
            .checked());
    }
}
