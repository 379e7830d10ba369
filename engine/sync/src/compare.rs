//! Desired against actual: the pure decisions of whether a write is needed.
//!
//! Invariant: an object that already holds what ferry would write gets no write, so a restart
//! with nothing changed issues none.

use ferry_core::naming::hex;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The digest of `value` (16 hex digits), independent of the order of object keys (a list
/// and a watch event may give the same object's keys in different orders).
pub fn digest(value: &Value) -> String {
    let mut hasher = Sha256::new();
    feed(&mut hasher, value);
    hex(&hasher.finalize()[..8])
}

fn feed(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hasher.update(b"{");
            for k in keys {
                json(hasher, k);
                hasher.update(b":");
                feed(hasher, &map[k]);
                hasher.update(b",");
            }
            hasher.update(b"}");
        }
        Value::Array(items) => {
            hasher.update(b"[");
            for item in items {
                feed(hasher, item);
                hasher.update(b",");
            }
            hasher.update(b"]");
        }
        other => json(hasher, other),
    }
}

/// Feeds `value`'s compact JSON text to `hasher`, written straight into it (the digest is of
/// the same bytes as its `to_string()`, which would allocate).
fn json(hasher: &mut Sha256, value: &(impl serde::Serialize + ?Sized)) {
    struct Into<'a>(&'a mut Sha256);
    impl std::io::Write for Into<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let _ = serde_json::to_writer(Into(hasher), value);
}

/// Whether `actual` holds everything `desired` says: every key of an object with a value that
/// holds it in turn, every element of an array held by some element of the actual array
/// (other managers may add elements to associative lists), scalars equal.
pub fn holds(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| a.get(k).is_some_and(|av| holds(av, dv))),
        (Value::Array(a), Value::Array(d)) => d.iter().all(|dv| a.iter().any(|av| holds(av, dv))),
        (Value::Number(a), Value::Number(d)) => {
            a == d || (a.as_f64().is_some() && a.as_f64() == d.as_f64())
        }
        (a, d) => a == d,
    }
}

/// Whether a tenant's read-only copy of a super object is exactly `desired` (ignoring what the
/// API server sets and status, which a create or replace does not write): a tenant's edit,
/// even a field added, makes it differ and is reverted.
pub fn same_copy(actual: &Value, desired: &Value) -> bool {
    let (Some(a), Some(d)) = (actual.as_object(), desired.as_object()) else {
        return false;
    };
    let body = |k: &String| !matches!(k.as_str(), "metadata" | "status");
    let empty = Value::Object(Map::new());
    let meta = |v: &'_ Value, key: &str| -> Value {
        v.get("metadata")
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_else(|| empty.clone())
    };
    a.keys().filter(|k| body(k)).count() == d.keys().filter(|k| body(k)).count()
        && d.iter()
            .filter(|(k, _)| body(k))
            .all(|(k, v)| a.get(k) == Some(v))
        && meta(actual, "labels") == meta(desired, "labels")
        && meta(actual, "annotations") == meta(desired, "annotations")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn holds_ignores_what_others_added() {
        let actual =
            json!({"spec": {"a": 1, "b": [{"name": "x", "v": 1}, {"name": "y"}]}, "status": {}});
        assert!(holds(
            &actual,
            &json!({"spec": {"a": 1, "b": [{"name": "x"}]}})
        ));
        assert!(!holds(&actual, &json!({"spec": {"a": 2}})));
        assert!(!holds(&actual, &json!({"spec": {"c": 1}})));
        assert!(!holds(&actual, &json!({"spec": {"b": [{"name": "z"}]}})));
    }

    #[test]
    fn copies_differ_on_any_edit() {
        let desired = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"l": "1"}}, "p": 1});
        let mut actual = desired.clone();
        actual["metadata"]["uid"] = json!("u");
        actual["status"] = json!({"s": 1});
        assert!(same_copy(&actual, &desired));
        actual["q"] = json!(2);
        assert!(!same_copy(&actual, &desired));
        let mut relabelled = desired.clone();
        relabelled["metadata"]["labels"]["l"] = json!("2");
        assert!(!same_copy(&relabelled, &desired));
    }

    #[test]
    fn digests_are_stable_and_short() {
        let d = digest(&json!({"a": 1}));
        assert_eq!(d.len(), 16);
        assert_eq!(d, digest(&json!({"a": 1})));
        assert_ne!(d, digest(&json!({"a": 2})));
        let mut reordered = serde_json::Map::new();
        reordered.insert("b".into(), json!(2));
        reordered.insert("a".into(), json!(1));
        assert_eq!(
            digest(&json!({"a": 1, "b": 2})),
            digest(&Value::Object(reordered))
        );
    }

    /// Copies carry the digest (`ferry.dev/applied`): a ferry that digested the same object
    /// otherwise would rewrite every copy once after an upgrade.
    #[test]
    fn digests_stay_what_copies_carry() {
        // sha256 of `{"a":1,"b":"x\"y","c":[true,null,1.5,],}`, first 8 bytes.
        let d = digest(&json!({"c": [true, null, 1.5], "b": "x\"y", "a": 1}));
        assert_eq!(d, "89c656c25c97e4dc");
    }
}
