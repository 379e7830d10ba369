//! What a transform changed (for `--explain`), and what it must not change.

use crate::keys::RESERVED_PREFIX;
use serde_json::Value;

use std::collections::BTreeMap;

use super::{join, Change, Reason, Refusal, Result};

/// Appends to `out` the leaf-level differences between `before` and `after`, attributed to
/// `rule`.
pub fn diff(before: &Value, after: &Value, path: &str, rule: &str, out: &mut Vec<Change>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => diff(va, vb, &join(path, k), rule, out),
                    None => out.push(Change {
                        path: join(path, k),
                        before: Some(va.clone()),
                        after: None,
                        rule: rule.into(),
                    }),
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.push(Change {
                        path: join(path, k),
                        before: None,
                        after: Some(vb.clone()),
                        rule: rule.into(),
                    });
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                diff(va, vb, &format!("{path}[{i}]"), rule, out);
            }
        }
        (a, b) if a != b => out.push(Change {
            path: path.to_string(),
            before: Some(a.clone()),
            after: Some(b.clone()),
            rule: rule.into(),
        }),
        _ => {}
    }
}

/// The `ferry.dev/` labels and annotations of an object, by path (order does not matter:
/// Kubernetes holds them as maps).
fn reserved(v: &Value) -> BTreeMap<String, &Value> {
    let mut out = BTreeMap::new();
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(m)) = v.get("metadata").and_then(|m| m.get(field)) {
            for (k, val) in m {
                if k.starts_with(RESERVED_PREFIX) {
                    out.insert(format!("metadata.{field}[{k:?}]"), val);
                }
            }
        }
    }
    out
}

/// A transform's output must be an object that keeps apiVersion, kind, name, namespace and
/// every `ferry.dev/` key of its input.
pub fn check_invariants(name: &str, before: &Value, after: &Value) -> Result<()> {
    if !after.is_object() {
        return Err(Refusal::new(
            Reason::TransformFailed,
            format!("transform {name} must return an object"),
        ));
    }
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
        ("/metadata/namespace", "metadata.namespace"),
    ] {
        let (a, b) = (before.pointer(pointer), after.pointer(pointer));
        if a != b {
            let show = |v: Option<&Value>| v.map_or("nothing".to_string(), Value::to_string);
            return Err(Refusal::new(
                Reason::TransformFailed,
                format!(
                    "transform {name} changed {field} from {} to {} (not allowed)",
                    show(a),
                    show(b)
                ),
            ));
        }
    }
    let (a, b) = (reserved(before), reserved(after));
    let changed = b
        .iter()
        .find(|(k, v)| a.get(*k) != Some(v))
        .or_else(|| a.iter().find(|(k, _)| !b.contains_key(*k)))
        .map(|(k, _)| k);
    if let Some(changed) = changed {
        return Err(Refusal::new(
            Reason::TransformFailed,
            format!(
                "transform {name} changed {changed} (ferry.dev/ keys are ferry's, not allowed)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check_invariants;

    #[test]
    fn reordered_ferry_keys_are_no_change_and_a_changed_one_is_named() {
        let before = json!({"metadata": {"name": "a", "annotations": {"ferry.dev/tenant-name": "a", "ferry.dev/tenant-namespace": "n", "x": "1"}}});
        let reordered = json!({"metadata": {"name": "a", "annotations": {"x": "1", "ferry.dev/tenant-namespace": "n", "ferry.dev/tenant-name": "a"}}});
        assert_eq!(check_invariants("t", &before, &reordered), Ok(()));
        let forged = json!({"metadata": {"name": "a", "annotations": {"ferry.dev/tenant-name": "a", "ferry.dev/tenant-namespace": "other"}}});
        let err = check_invariants("t", &before, &forged).unwrap_err();
        assert!(err.message.contains("ferry.dev/tenant-namespace"), "{err}");
        let dropped =
            json!({"metadata": {"name": "a", "annotations": {"ferry.dev/tenant-name": "a"}}});
        let err = check_invariants("t", &before, &dropped).unwrap_err();
        assert!(err.message.contains("ferry.dev/tenant-namespace"), "{err}");
    }
}
