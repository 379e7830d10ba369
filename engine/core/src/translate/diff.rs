//! What a transform changed (for `--explain`), and what it must not change.

use serde_json::Value;

use super::path::Path;
use super::{join, Change, Reason, Refusal, Result, RESERVED_PREFIX};
use crate::naming::NameMap;
use crate::schema::{Node, Rule};

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

/// The `ferry.dev/` labels and annotations of an object.
fn reserved(v: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(m)) = v.pointer(&format!("/metadata/{field}")) {
            for (k, val) in m {
                if k.starts_with(RESERVED_PREFIX) {
                    out.push((format!("metadata.{field}[{k:?}]"), val.clone()));
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
    if a != b {
        let changed = b
            .iter()
            .find(|kv| !a.contains(kv))
            .or_else(|| a.iter().find(|kv| !b.contains(kv)))
            .map(|(k, _)| k.clone())
            .unwrap_or_default();
        return Err(Refusal::new(
            Reason::TransformFailed,
            format!(
                "transform {name} changed {changed} (ferry.dev/ keys are ferry's, not allowed)"
            ),
        ));
    }
    Ok(())
}

/// After transforms, every `x-ferry-namespace` field of a super object must still hold one of
/// the tenant's own namespaces (or `""`): a transform cannot point a tenant's object at a
/// namespace that is not the tenant's.
pub fn check_namespaces(node: &Node, value: &Value, names: &NameMap) -> Result<()> {
    walk(node, value, &Path::Root, names)
}

fn walk(node: &Node, value: &Value, path: &Path<'_>, names: &NameMap) -> Result<()> {
    if node.has(|r| matches!(r, Rule::Namespace)) {
        if let Value::String(ns) = value {
            if !ns.is_empty() && names.to_tenant(ns).is_none() {
                return Err(Refusal::new(
                    Reason::TransformFailed,
                    format!(
                        "{path}: {ns:?} is not a namespace of tenant {} after the transforms (a transform may not point outside the tenant's namespaces)",
                        names.tenant()
                    ),
                ));
            }
        }
    }
    match value {
        Value::Object(m) => {
            for (k, child) in &node.fields {
                if let Some(v) = m.get(k) {
                    walk(child, v, &path.key(k), names)?;
                }
            }
            if let Some(values) = &node.values {
                for (k, v) in m {
                    if !node.fields.contains_key(k) {
                        walk(values, v, &path.key(k), names)?;
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &node.items {
                for (i, v) in items.iter().enumerate() {
                    walk(item, v, &path.index(i), names)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}
