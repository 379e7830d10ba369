//! Finds the schema of one kind in a schema file: a CRD manifest (`apiextensions.k8s.io/v1`,
//! the version's `openAPIV3Schema`) or an OpenAPI v3 document (`components.schemas`, matched
//! by `x-kubernetes-group-version-kind`).

use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;
use openapiv3::{ReferenceOr, Schema};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::compile::{compile, Source};
use super::{Error, Plan, Result};
use crate::locate::{Location, Positions};
use crate::naming::hex;

/// Splits `group/version` (or a core `v1`) into group and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The group of an `apiVersion` (`cert-manager.io/v1`), a bare group (`cert-manager.io`, as
/// cert-manager's `issuerRef.group` holds) or a core version (`v1`).
pub fn group_of(api: &str) -> &str {
    if let Some((group, _)) = api.split_once('/') {
        return group;
    }
    let looks_like_version = api.starts_with('v')
        && api[1..].starts_with(|c: char| c.is_ascii_digit())
        && !api.contains('.');
    if looks_like_version {
        ""
    } else {
        api
    }
}

/// Compiled plans keyed by the sha256 of the schema file's bytes and the kind, so that a
/// schema shared by policies, or reloaded unchanged, is compiled once.
#[derive(Clone)]
pub struct PlanCache {
    plans: moka::sync::Cache<String, Arc<Plan>>,
}

impl Default for PlanCache {
    fn default() -> Self {
        Self {
            plans: moka::sync::Cache::new(1024),
        }
    }
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanCache({} plans)", self.plans.entry_count())
    }
}

impl PlanCache {
    /// Reads `file` and returns the plan of `api_version`/`kind` in it, compiling it unless an
    /// identical file was compiled for this kind before.
    pub fn get(&self, file: &Path, api_version: &str, kind: &str) -> Result<Arc<Plan>> {
        let bytes = crate::locate::read_file(file).map_err(|e| Error::Read {
            file: file.display().to_string(),
            message: e.to_string(),
        })?;
        let key = format!(
            "{}/{}/{}/{}",
            hex(&Sha256::digest(&bytes)),
            file.display(),
            api_version,
            kind
        );
        if let Some(plan) = self.plans.get(&key) {
            return Ok(plan);
        }
        let text = String::from_utf8(bytes).map_err(|_| Error::Parse {
            at: Location::file(file),
            message: "schema file is not UTF-8 text".into(),
        })?;
        let plan = Arc::new(load_plan_text(file, &text, api_version, kind)?);
        self.plans.insert(key, plan.clone());
        Ok(plan)
    }
}

/// Compiles the plan of a schema given as JSON (an `openAPIV3Schema` read from a live CRD);
/// `label` names it in messages.
pub fn plan_from_json(label: &str, schema: &Value) -> Result<Plan> {
    let file = Path::new(label);
    let positions = Positions::default();
    let parsed = parse_schema(schema, &positions, "openAPIV3Schema")?;
    let src = Source {
        file,
        positions: &positions,
        components: None,
    };
    compile(&parsed, "openAPIV3Schema", &src)
}

/// Parses every YAML document of `text` into JSON values, with each document's offset.
fn documents(file: &Path, text: &str) -> Result<Vec<(usize, Value)>> {
    let mut out = Vec::new();
    for (offset, chunk) in split_documents(text) {
        if let Some((at, message)) = crate::locate::duplicate_key(file, chunk, offset) {
            return Err(Error::Parse { at, message });
        }
        let doc = serde_yaml::Deserializer::from_str(chunk);
        let value = Value::deserialize(doc).map_err(|e| Error::Parse {
            at: Location::of_yaml_error(file, &e, offset),
            message: crate::locate::yaml_message(&e),
        })?;
        if !value.is_null() {
            out.push((offset, value));
        }
    }
    Ok(out)
}

/// Splits a multi-document YAML text on `---` lines, each document with the 0-based line it
/// starts on. A document may start on the `---` line itself (`--- {kind: A}`).
pub fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut start, mut start_line) = (0, 0);
    let mut pos = 0;
    for (line_no, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_end() == "---" || line.starts_with("--- ") || line.starts_with("---\t") {
            out.push((start_line, &text[start..pos]));
            if line.trim_end() == "---" {
                (start, start_line) = (pos + line.len(), line_no + 1);
            } else {
                (start, start_line) = (pos + 3, line_no);
            }
        }
        pos += line.len();
    }
    out.push((start_line, &text[start..]));
    out
}

/// The plan of `api_version` `kind` from the CustomResourceDefinition `doc`, if it defines
/// that version (`positions`: of its part of `file`); what it defines goes to `seen`.
fn from_crd(
    doc: &Value,
    file: &Path,
    (api_version, kind): (&str, &str),
    positions: &dyn Fn() -> Positions,
    seen: &mut Vec<String>,
) -> Result<Option<Plan>> {
    let (group, version) = split_api_version(api_version);
    let crd_group = doc
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let crd_kind = doc
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let versions = doc.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        seen.push(format!("{crd_group}/{name} {crd_kind}"));
        if crd_group != group || crd_kind != kind || name != version {
            continue;
        }
        let yaml_path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        let positions = positions();
        let Some(raw) = v.pointer("/schema/openAPIV3Schema") else {
            return Err(Error::NoSchema {
                file: file.display().to_string(),
                api_version: api_version.into(),
                kind: kind.into(),
                message: format!("the CRD has no {yaml_path}"),
            });
        };
        let schema = parse_schema(raw, &positions, &yaml_path)?;
        let src = Source {
            file,
            positions: &positions,
            components: None,
        };
        let mut plan = compile(&schema, &yaml_path, &src)?;
        plan.plural = doc
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .map(str::to_string);
        plan.has_status_subresource = v.pointer("/subresources/status").is_some();
        plan.crd_scope = doc
            .pointer("/spec/scope")
            .and_then(Value::as_str)
            .map(str::to_string);
        return Ok(Some(plan));
    }
    Ok(None)
}

fn load_plan_text(file: &Path, text: &str, api_version: &str, kind: &str) -> Result<Plan> {
    let (group, version) = split_api_version(api_version);
    let docs = documents(file, text)?;
    let mut seen = Vec::new();
    for (offset, doc) in &docs {
        let chunk_positions = || {
            let chunk = text.lines().skip(*offset).collect::<Vec<_>>().join("\n");
            let mut p = Positions::index(file, &chunk);
            p.shift_lines(*offset);
            p
        };
        if doc.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            let wanted = (api_version, kind);
            if let Some(plan) = from_crd(doc, file, wanted, &chunk_positions, &mut seen)? {
                return Ok(plan);
            }
            continue;
        }
        let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        else {
            continue;
        };
        let positions = chunk_positions();
        let mut components: IndexMap<String, ReferenceOr<Schema>> = IndexMap::new();
        let mut found = None;
        for (name, raw) in schemas {
            let yaml_path = format!("components.schemas.{name}");
            let parsed: ReferenceOr<Schema> =
                serde_json::from_value(raw.clone()).map_err(|e| Error::Parse {
                    at: positions.at(&yaml_path),
                    message: format!("not an OpenAPI v3 schema: {e}"),
                })?;
            for gvk in raw
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let g = gvk.get("group").and_then(Value::as_str).unwrap_or("");
                let v = gvk.get("version").and_then(Value::as_str).unwrap_or("");
                let k = gvk.get("kind").and_then(Value::as_str).unwrap_or("");
                seen.push(format!(
                    "{}{v} {k}",
                    if g.is_empty() {
                        String::new()
                    } else {
                        format!("{g}/")
                    }
                ));
                if g == group && v == version && k == kind {
                    found = Some(name.clone());
                }
            }
            components.insert(name.clone(), parsed);
        }
        if let Some(name) = found {
            let yaml_path = format!("components.schemas.{name}");
            let src = Source {
                file,
                positions: &positions,
                components: Some(&components),
            };
            let root = ReferenceOr::<Schema>::Reference {
                reference: format!("#/components/schemas/{name}"),
            };
            let schema = match &components[&name] {
                ReferenceOr::Item(s) => s.clone(),
                ReferenceOr::Reference { .. } => {
                    return compile_ref_root(&root, &yaml_path, &src);
                }
            };
            return compile(&schema, &yaml_path, &src);
        }
    }
    Err(Error::NoSchema {
        file: file.display().to_string(),
        api_version: api_version.into(),
        kind: kind.into(),
        message: if seen.is_empty() {
            "the file holds neither a CustomResourceDefinition nor an OpenAPI document with components.schemas".into()
        } else {
            format!("it has {}", seen.join(", "))
        },
    })
}

fn compile_ref_root(root: &ReferenceOr<Schema>, yaml_path: &str, src: &Source<'_>) -> Result<Plan> {
    let wrapper = Schema {
        schema_data: Default::default(),
        schema_kind: openapiv3::SchemaKind::AllOf {
            all_of: vec![root.clone()],
        },
    };
    compile(&wrapper, yaml_path, src)
}

fn parse_schema(raw: &Value, positions: &Positions, yaml_path: &str) -> Result<Schema> {
    serde_json::from_value(raw.clone()).map_err(|e| Error::Parse {
        at: positions.at(yaml_path),
        message: format!("{yaml_path} is not an OpenAPI v3 schema: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Rule;

    const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              targetNamespace:
                type: string
                x-ferry-namespace: true
              secretRef:
                type: object
                x-ferry-ref: {apiVersion: v1, kind: Secret}
                properties:
                  name: {type: string}
              hosts:
                type: array
                items:
                  type: object
                  properties:
                    namespace: {type: string, x-ferry-namespace: true}
              notes: {type: string, x-ferry-drop: true}
"#;

    fn plan(text: &str) -> Result<Plan> {
        load_plan_text(Path::new("w.yaml"), text, "example.com/v1", "Widget")
    }

    #[test]
    fn compiles_crd_annotations() {
        let plan = plan(CRD).unwrap();
        let rules: Vec<_> = plan
            .rules()
            .into_iter()
            .map(|(p, a)| (p, a.rule.name()))
            .collect();
        assert!(rules.contains(&("spec.targetNamespace".into(), "x-ferry-namespace")));
        assert!(rules.contains(&("spec.secretRef".into(), "x-ferry-ref")));
        assert!(rules.contains(&("spec.hosts[*].namespace".into(), "x-ferry-namespace")));
        assert!(rules.contains(&("spec.notes".into(), "x-ferry-drop")));
        let (_, ns) = plan
            .rules()
            .into_iter()
            .find(|(p, _)| p == "spec.targetNamespace")
            .unwrap();
        assert_eq!(ns.origin.to_string(), "w.yaml:21:36");
    }

    #[test]
    fn wrong_type_names_the_field_and_line() {
        let bad = CRD.replace(
            "notes: {type: string, x-ferry-drop: true}",
            "count: {type: integer, x-ferry-namespace: true}",
        );
        let err = plan(&bad).unwrap_err().to_string();
        assert!(err.starts_with("w.yaml:33:"), "{err}");
        assert!(err.contains("spec.count"), "{err}");
        assert!(
            err.contains("expects a field of type string, found type integer"),
            "{err}"
        );
    }

    #[test]
    fn unknown_annotation_is_an_error() {
        let bad = CRD.replace("x-ferry-drop: true", "x-ferry-dorp: true");
        let err = plan(&bad).unwrap_err().to_string();
        assert!(err.contains("unknown annotation \"x-ferry-dorp\""), "{err}");
    }

    #[test]
    fn groups() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("cert-manager.io/v1"), "cert-manager.io");
        assert_eq!(group_of("cert-manager.io"), "cert-manager.io");
        assert_eq!(group_of(""), "");
    }

    #[test]
    fn missing_version_lists_what_is_there() {
        let err = load_plan_text(Path::new("w.yaml"), CRD, "example.com/v2", "Widget")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no schema for example.com/v2 Widget"), "{err}");
        assert!(err.contains("example.com/v1 Widget"), "{err}");
    }

    #[test]
    fn openapi_documents_resolve_refs() {
        let doc = r##"openapi: 3.0.0
info: {title: t, version: "1"}
paths: {}
components:
  schemas:
    Ref:
      type: object
      properties:
        namespace: {type: string, x-ferry-namespace: true}
    Widget:
      type: object
      x-kubernetes-group-version-kind: [{group: example.com, version: v1, kind: Widget}]
      properties:
        spec:
          type: object
          properties:
            target:
              allOf: [{$ref: "#/components/schemas/Ref"}]
            byName:
              type: object
              additionalProperties: {$ref: "#/components/schemas/Ref"}
"##;
        let plan = plan(doc).unwrap();
        let paths: Vec<_> = plan
            .rules()
            .into_iter()
            .map(|(p, a)| (p, a.rule.clone()))
            .collect();
        assert!(
            paths.contains(&("spec.target.namespace".into(), Rule::Namespace)),
            "{paths:?}"
        );
        assert!(
            paths.contains(&("spec.byName.*.namespace".into(), Rule::Namespace)),
            "{paths:?}"
        );
    }
}
