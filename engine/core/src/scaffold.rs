//! `ferry schema init`: turns a CRD into a sparse annotation overlay for `schemas/`.
//!
//! The overlay holds only the paths that lead to a field ferry annotates or suggests, each
//! with a comment saying why. Annotations are written only where the shape leaves no doubt:
//! a `{group, kind, name, namespace}`-style reference object (Gateway API's `parentRefs`), and
//! a string named `namespace` or `*Namespace` outside any Vault-like context. Everything else
//! that looks like a namespace, a reference or a selector is a suggestion in a comment: what a
//! field points at, and whether scoping a selector to the tenant is right, are decisions for
//! the platform engineer (a pod-affinity selector scoped to the tenant would leave a super-side
//! controller's own pods unschedulable).

use indexmap::IndexMap;
use serde_json::Value;

/// One field of the overlay: its type, what ferry writes or suggests there, and the fields
/// below it that lead to something.
#[derive(Default)]
struct Field {
    ty: Option<String>,
    default: Option<Value>,
    /// Annotations written (key, value as flow YAML).
    annotations: Vec<(String, String)>,
    /// The comment above the field: why it is annotated, or what to consider.
    comment: Option<String>,
    properties: IndexMap<String, Field>,
    items: Option<Box<Field>>,
    values: Option<Box<Field>>,
}

impl Field {
    fn is_empty(&self) -> bool {
        self.annotations.is_empty()
            && self.comment.is_none()
            && self.properties.is_empty()
            && self.items.is_none()
            && self.values.is_none()
    }
}

/// The overlay as YAML text.
pub fn skeleton(crd: &Value) -> Result<String, String> {
    if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
        return Err(format!(
            "expected a CustomResourceDefinition, found kind {}",
            crd.get("kind")
                .map_or("(none)".to_string(), Value::to_string)
        ));
    }
    let text = |pointer: &str| crd.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    let mut out = String::from(
        "# ferry schema overlay: only the fields ferry rewrites, each with a comment (fields left\n\
         # out pass unchanged). Review every x-ferry-* annotation and every suggestion, then name\n\
         # this file in a policy entry (schema: ...). Annotations: x-ferry-namespace, x-ferry-ref,\n\
         # x-ferry-selector, x-ferry-namespace-selector, x-ferry-host, x-ferry-identity,\n\
         # x-ferry-forbid, x-ferry-secret-template, x-ferry-text, x-ferry-owner: super,\n\
         # x-ferry-drop (docs/reference/annotations.md; docs/writing-a-policy.md).\n",
    );
    out.push_str("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n");
    out.push_str(&format!(
        "metadata:\n  name: {}\nspec:\n",
        scalar(text("/metadata/name"))
    ));
    out.push_str(&format!("  group: {}\n", scalar(text("/spec/group"))));
    if let Some(names) = crd.pointer("/spec/names") {
        out.push_str(&format!("  names: {}\n", flow(names)));
    }
    out.push_str(&format!(
        "  scope: {}\n  versions:\n",
        scalar(text("/spec/scope"))
    ));
    let mut found = 0;
    for version in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = version.get("name").and_then(Value::as_str).unwrap_or("?");
        out.push_str(&format!("  - name: {}\n", scalar(name)));
        for key in ["served", "storage", "subresources"] {
            if let Some(v) = version.get(key) {
                out.push_str(&format!("    {key}: {}\n", flow(v)));
            }
        }
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .unwrap_or(&Value::Null);
        let root = visit(schema, "", "", false).unwrap_or_default();
        found += count(&root);
        out.push_str("    schema:\n      openAPIV3Schema:\n");
        emit(&root, 8, &mut out);
    }
    if found == 0 {
        out.insert_str(
            0,
            "# No field looks like a namespace, a reference or a selector.\n",
        );
    }
    Ok(out)
}

fn count(field: &Field) -> usize {
    usize::from(field.comment.is_some())
        + field.properties.values().map(count).sum::<usize>()
        + field.items.as_deref().map_or(0, count)
        + field.values.as_deref().map_or(0, count)
}

fn ty(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str)
}

fn props(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// The overlay of `schema` (the field `name`, at `path`), or `None` when nothing below it
/// needs ferry. `vault` is set below a Vault-like field, whose "namespaces" are not
/// Kubernetes'. The name is passed, not cut from the path: a property name may hold a `.`.
fn visit(schema: &Value, name: &str, path: &str, vault: bool) -> Option<Field> {
    let seen = recognise::Seen::new(schema, name, vault);
    if let Some(field) = recognise::shapes(&seen) {
        return Some(field);
    }
    let mut field = Field {
        ty: ty(schema).map(str::to_string),
        ..Field::default()
    };
    if path != "metadata" {
        for (key, child) in props(schema).into_iter().flatten() {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            if let Some(f) = visit(child, key, &child_path, seen.vault) {
                field.properties.insert(key.clone(), f);
            }
        }
        if let Some(items) = schema.get("items") {
            field.items = visit(items, "", &format!("{path}[*]"), seen.vault).map(Box::new);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            field.values = visit(values, "*", &format!("{path}.*"), seen.vault).map(Box::new);
        }
    }
    (!field.is_empty()).then_some(field)
}

/// Writes `field`'s schema at `indent` spaces.
fn emit(field: &Field, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    if let Some(ty) = &field.ty {
        out.push_str(&format!("{pad}type: {}\n", scalar(ty)));
    }
    if let Some(default) = &field.default {
        out.push_str(&format!("{pad}default: {}\n", flow(default)));
    }
    for (key, value) in &field.annotations {
        out.push_str(&format!("{pad}{key}: {value}\n"));
    }
    if !field.properties.is_empty() {
        out.push_str(&format!("{pad}properties:\n"));
        for (name, child) in &field.properties {
            if let Some(text) = &child.comment {
                out.push_str(&format!("{pad}  # {}\n", comment(text)));
            }
            out.push_str(&format!("{pad}  {}:\n", scalar(name)));
            emit(child, indent + 4, out);
        }
    }
    for (key, child) in [
        ("items", &field.items),
        ("additionalProperties", &field.values),
    ] {
        if let Some(child) = child {
            if let Some(text) = &child.comment {
                out.push_str(&format!("{pad}# {}\n", comment(text)));
            }
            out.push_str(&format!("{pad}{key}:\n"));
            emit(child, indent + 2, out);
        }
    }
}

/// A scalar as YAML: plain when that reads back as the same string, double-quoted otherwise.
/// Names and values come from the CRD, which anyone may have written: quoting keeps a newline,
/// `#`, `: ` or a quote in them from ending the scalar and starting a line of their own.
fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && serde_yaml::from_str::<Value>(s).ok() == Some(Value::String(s.to_string()));
    if plain {
        s.to_string()
    } else {
        quoted(s)
    }
}

/// `s` as a YAML double-quoted scalar of printable ASCII alone: every other character
/// escaped (`\n`, `\u2028`, `\U0001F600`), so that no reader's idea of a line break (YAML 1.1
/// also breaks lines at U+0085, U+2028 and U+2029) can end it early.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// `text` as the body of one comment line: control characters and line or paragraph
/// separators become spaces, so text from the CRD can never end the comment and start an
/// active line.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A value as flow YAML: `{kind: Db, plural: dbs}`.
fn flow(v: &Value) -> String {
    match v {
        Value::String(s) => scalar(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", scalar(k), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

mod recognise;
#[cfg(test)]
mod tests;
