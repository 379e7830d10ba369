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

/// Names that end like references but are not (a certificate's `commonName`, a route's
/// `sectionName`).
const NOT_REFERENCES: &[&str] = &[
    "name",
    "commonName",
    "serverName",
    "sectionName",
    "hostName",
    "hostname",
    "displayName",
    "fullName",
    "userName",
    "username",
    "subjectName",
    "fileName",
    "filename",
    "keyName",
];

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
        "# ferry schema overlay: only the fields ferry rewrites, each with a comment. Review every\n\
         # x-ferry-* annotation and every suggestion, then name this file in a policy entry\n\
         # (schema: ...). Annotations: x-ferry-namespace, x-ferry-ref, x-ferry-selector,\n\
         # x-ferry-namespace-selector, x-ferry-text, x-ferry-owner: super, x-ferry-drop.\n",
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
    let vault = vault || name.to_ascii_lowercase().contains("vault");
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut field = Field {
        ty: ty(schema).map(str::to_string),
        ..Field::default()
    };
    let properties = props(schema);
    let has = |key: &str| properties.is_some_and(|p| p.contains_key(key));
    let is_selector =
        ty(schema) == Some("object") && (has("matchLabels") || has("matchExpressions"));
    let looks_like_ns = name == "namespace" || name.ends_with("Namespace");
    if has("name") && has("kind") && (has("group") || has("apiVersion")) {
        // A reference object: what it points at is in its own fields.
        let api = if has("group") { "group" } else { "apiVersion" };
        let mut rule = format!("{{apiVersionField: {api}, kindField: kind");
        if has("namespace") {
            rule.push_str(", namespaceField: namespace");
        }
        rule.push('}');
        field.annotations.push(("x-ferry-ref".into(), rule));
        field.comment = Some(format!(
            "a reference object: its {api} and kind say what it points at{}; add passthrough: true if it may name kinds the policy does not sync",
            if has("namespace") { ", its namespace is mapped" } else { "" }
        ));
        for key in [api, "kind", "name", "namespace"] {
            if let Some(p) = properties.and_then(|p| p.get(key)) {
                field.properties.insert(
                    key.to_string(),
                    Field {
                        ty: ty(p).map(str::to_string),
                        default: p.get("default").cloned(),
                        ..Field::default()
                    },
                );
            }
        }
        return Some(field);
    }
    if ty(schema) == Some("string") && looks_like_ns {
        // Certain only when the schema says it is a Kubernetes namespace: secret stores
        // (Vault, Akeyless) have "namespaces" of their own.
        if vault || !description.contains("kubernetes") {
            field.comment = Some(if vault || description.contains("vault") {
                "suggestion: x-ferry-namespace: true, only if it holds a Kubernetes namespace (this looks like a Vault namespace, which is not one)".into()
            } else {
                "suggestion: x-ferry-namespace: true, if it holds a Kubernetes namespace (its description does not say so)".into()
            });
        } else {
            field
                .annotations
                .push(("x-ferry-namespace".into(), "true".into()));
            field.comment =
                Some("a Kubernetes namespace: mapped to the tenant's super namespace".into());
        }
        return Some(field);
    }
    let items_are_strings = schema.get("items").and_then(ty) == Some("string");
    if ty(schema) == Some("array")
        && items_are_strings
        && name.to_ascii_lowercase().ends_with("namespaces")
    {
        field.comment = Some(
            "suggestion: x-ferry-namespace: true on items, if they hold Kubernetes namespaces (a wildcard such as \"*\" would then be refused)".into(),
        );
        field.items = Some(Box::new(Field {
            ty: Some("string".into()),
            ..Field::default()
        }));
        return Some(field);
    }
    if is_selector {
        field.comment = Some(if name.to_ascii_lowercase().contains("namespace") {
            "suggestion: x-ferry-namespace-selector: true, if it selects namespaces (scoped to the tenant's)".into()
        } else {
            "suggestion: x-ferry-selector: true, if it selects the tenant's own objects (not, for example, a super-side controller's pods)".into()
        });
        for key in ["matchLabels", "matchExpressions"] {
            if let Some(p) = properties.and_then(|p| p.get(key)) {
                field.properties.insert(
                    key.to_string(),
                    Field {
                        ty: ty(p).map(str::to_string),
                        ..Field::default()
                    },
                );
            }
        }
        return Some(field);
    }
    let reference_like = !NOT_REFERENCES.contains(&name)
        && ((name.ends_with("Ref") && (ty(schema) == Some("string") || has("name")))
            || (name.ends_with("Name") && ty(schema) == Some("string")));
    if reference_like {
        let (api, kind) = guess_kind(name);
        let namespace = if has("namespace") {
            ", namespaceField: namespace"
        } else {
            ""
        };
        field.comment = Some(format!(
            "suggestion: x-ferry-ref: {{apiVersion: {api}, kind: {}{namespace}}}, if it names a Kubernetes object",
            scalar(&kind)
        ));
        if has("namespace") {
            field.properties.insert(
                "namespace".into(),
                Field {
                    ty: Some("string".into()),
                    ..Field::default()
                },
            );
        }
        return Some(field);
    }
    if path != "metadata" {
        for (key, child) in properties.into_iter().flatten() {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            if let Some(f) = visit(child, key, &child_path, vault) {
                field.properties.insert(key.clone(), f);
            }
        }
        if let Some(items) = schema.get("items") {
            field.items = visit(items, "", &format!("{path}[*]"), vault).map(Box::new);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            field.values = visit(values, "*", &format!("{path}.*"), vault).map(Box::new);
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

/// A starting point for the target of a reference-like field, from its name.
fn guess_kind(field: &str) -> (&'static str, String) {
    let stem = field.trim_end_matches("Ref").trim_end_matches("Name");
    let lower = stem.to_ascii_lowercase();
    let core = [
        ("secret", "Secret"),
        ("configmap", "ConfigMap"),
        ("serviceaccount", "ServiceAccount"),
        ("persistentvolumeclaim", "PersistentVolumeClaim"),
        ("claim", "PersistentVolumeClaim"),
        ("service", "Service"),
    ];
    match core.iter().find(|(suffix, _)| lower.ends_with(suffix)) {
        Some((_, kind)) => ("v1", kind.to_string()),
        None => {
            let mut chars = stem.chars();
            let kind = chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default();
            ("<group/version>", kind)
        }
    }
}

#[cfg(test)]
mod tests;
