//! The reference pages of the user guide for the SyncPolicy and SyncConfig files, rendered
//! from their JSON Schemas (themselves derived from the Rust types that parse the files), so
//! that the documentation, the editor schemas and the parser cannot disagree.
//!
//! ```text
//!  policy::model / config types ─schemars─▶ JSON Schema ─▶ docs/schemas/*.json
//!                                                     └─▶ markdown ─▶ docs/reference/*.md
//! ```

use std::fmt::Write;

use serde_json::{Map, Value};

/// The markdown reference of `schema` (a JSON Schema with `$defs`), under `title`.
pub fn markdown(schema: &Value, title: &str, intro: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the Rust types that read the file (FERRY_BLESS=1 cargo xtask test regenerates it). -->\n"
    );
    let _ = writeln!(out, "{intro}\n");
    let root_name = schema["title"].as_str().unwrap_or(title);
    section(&mut out, root_name, schema);
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    for (name, def) in &defs {
        section(&mut out, name, def);
    }
    out
}

fn section(out: &mut String, name: &str, def: &Value) {
    let _ = writeln!(out, "## {name}\n");
    if let Some(d) = def["description"].as_str() {
        let _ = writeln!(out, "{}\n", one_line(d));
    }
    if let Some(variants) = variants(def) {
        let _ = writeln!(out, "One of:\n");
        for (value, description) in variants {
            let _ = writeln!(
                out,
                "- `{value}`{}",
                description
                    .map(|d| format!(": {}", one_line(&d)))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(out);
        return;
    }
    let Some(properties) = def["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = def["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = writeln!(out, "| field | type | required | description |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (field, p) in properties {
        let _ = writeln!(
            out,
            "| `{field}` | {} | {} | {} |",
            type_of(p),
            if required.contains(&field.as_str()) {
                "yes"
            } else {
                ""
            },
            one_line(p["description"].as_str().unwrap_or("")).replace('|', "\\|")
        );
    }
    if def["additionalProperties"] == false {
        let _ = writeln!(out, "\nNo other field is allowed.");
    }
    let _ = writeln!(out);
}

/// The values of an enumeration (`enum`, or `oneOf` of constants), with their descriptions.
fn variants(def: &Value) -> Option<Vec<(String, Option<String>)>> {
    if let Some(values) = def["enum"].as_array() {
        return Some(values.iter().map(|v| (text(v), None)).collect());
    }
    let one_of = def["oneOf"].as_array()?;
    one_of
        .iter()
        .map(|v| {
            let value = v.get("const").or_else(|| v["enum"].get(0))?;
            Some((text(value), v["description"].as_str().map(str::to_string)))
        })
        .collect()
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// How a property's type reads: a link to a definition, `list of …`, `map of …`, a scalar.
fn type_of(p: &Value) -> String {
    if let Some(r) = p["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[{name}](#{})", name.to_ascii_lowercase());
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(options) = p[key].as_array() {
            let shown: Vec<String> = options
                .iter()
                .filter(|o| o["type"] != "null")
                .map(type_of)
                .collect();
            return shown.join(" or ");
        }
    }
    let types: Vec<&str> = match &p["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    match types.first().copied() {
        Some("array") => format!("list of {}", type_of(&p["items"])),
        Some("object") => match &p["additionalProperties"] {
            Value::Object(m) if !m.is_empty() => {
                format!("map of {}", type_of(&Value::Object(m.clone())))
            }
            _ => "object".into(),
        },
        Some(t) => t.to_string(),
        None if p.as_object().is_some_and(Map::is_empty) || *p == Value::Bool(true) => "any".into(),
        None => "any".into(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
