//! Reading the objects `ferry translate` works on: YAML or JSON, one or many documents, from
//! a file or stdin; `kind: List` expanded.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use ferry_core::locate::{yaml_message, Location};
use serde_json::Value;

/// One input document and how to name it in messages.
#[derive(Debug)]
pub struct Document {
    /// `file#N` (1-based), plus the object's kind and name when it has them.
    pub label: String,
    /// The object.
    pub value: Value,
}

/// Reads `path` (`-` for stdin).
pub fn read(path: &str) -> Result<Vec<Document>> {
    let (name, text) = if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading stdin")?;
        ("stdin".to_string(), text)
    } else {
        let text = std::fs::read_to_string(Path::new(path))
            .with_context(|| format!("cannot read {path}"))?;
        (path.to_string(), text)
    };
    parse(&name, &text)
}

/// Parses every document of `text`.
pub fn parse(name: &str, text: &str) -> Result<Vec<Document>> {
    let mut out = Vec::new();
    for (line_offset, chunk) in ferry_core::schema::load::split_documents(text) {
        if let Some((at, message)) =
            ferry_core::locate::duplicate_key(Path::new(name), chunk, line_offset)
        {
            bail!("{at}: {message}");
        }
        let parsed = serde_yaml::from_str::<Value>(chunk);
        match parsed {
            Ok(Value::Null) => {}
            Ok(Value::Object(map)) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                for item in map
                    .get("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    push(&mut out, name, item.clone());
                }
            }
            Ok(value) => push(&mut out, name, value),
            Err(e) => {
                let at = Location::of_yaml_error(Path::new(name), &e, line_offset);
                bail!("{at}: {}", yaml_message(&e));
            }
        }
    }
    Ok(out)
}

fn push(out: &mut Vec<Document>, name: &str, value: Value) {
    let n = out.len() + 1;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("?");
    let meta = value.get("metadata");
    let obj_name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let label = match meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{name}#{n} ({kind} {ns}/{obj_name})"),
        None => format!("{name}#{n} ({kind} {obj_name})"),
    };
    out.push(Document { label, value });
}

/// YAML text of a JSON value (`ferry_core::yaml`: numbers printed as numbers).
pub fn to_yaml(value: &Value) -> Result<String> {
    ferry_core::yaml::to_yaml(value).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_documents_and_lists() {
        let docs = parse(
            "in.yaml",
            "kind: A\nmetadata: {name: a, namespace: n}\n---\nkind: List\nitems:\n- {kind: B, metadata: {name: b}}\n---\n",
        )
        .unwrap();
        let labels: Vec<_> = docs.iter().map(|d| d.label.as_str()).collect();
        assert_eq!(labels, ["in.yaml#1 (A n/a)", "in.yaml#2 (B b)"]);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse("in.yaml", "kind: A\n---\nkind: [\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("in.yaml:4:") || err.starts_with("in.yaml:3:"),
            "{err}"
        );
    }
}
