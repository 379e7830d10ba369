//! `ferry schema init`: turns a CRD into an annotation overlay skeleton for `schemas/`.
//!
//! Annotations are added only where the shape leaves no doubt (a string field named
//! `namespace` or `*Namespace`, an object with `matchLabels`); fields that look like
//! references are listed in the header for a human to decide, since the target kind and
//! whether the policy syncs it are policy decisions.

use serde_json::{Map, Value};

/// The skeleton as YAML text: a header of suggestions, then the CRD reduced to what ferry
/// reads, with the certain annotations in place.
pub fn skeleton(crd: &Value) -> Result<String, String> {
    if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
        return Err(format!(
            "expected a CustomResourceDefinition, found kind {}",
            crd.get("kind")
                .map_or("(none)".to_string(), Value::to_string)
        ));
    }
    let name = crd
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let mut notes = Vec::new();
    let mut versions = Vec::new();
    for version in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let vname = version.get("name").and_then(Value::as_str).unwrap_or("?");
        let mut schema = version
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(Value::Null);
        annotate(&mut schema, "", vname, &mut notes);
        let mut v = Map::new();
        v.insert("name".into(), Value::String(vname.into()));
        for key in ["served", "storage", "subresources"] {
            if let Some(x) = version.get(key) {
                v.insert(key.into(), x.clone());
            }
        }
        v.insert(
            "schema".into(),
            serde_json::json!({ "openAPIV3Schema": schema }),
        );
        versions.push(Value::Object(v));
    }
    let mut out_spec = Map::new();
    for key in ["group", "names", "scope"] {
        if let Some(x) = spec.get(key) {
            out_spec.insert(key.into(), x.clone());
        }
    }
    out_spec.insert("versions".into(), Value::Array(versions));
    let doc = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": name },
        "spec": Value::Object(out_spec),
    });
    let body = serde_yaml::to_string(&doc).map_err(|e| e.to_string())?;
    let mut header = String::from(
        "# ferry schema overlay. Review every x-ferry-* annotation below, then reference this\n\
         # file from a policy entry (schema: ...). Annotations: x-ferry-namespace, x-ferry-ref,\n\
         # x-ferry-selector, x-ferry-owner: super, x-ferry-drop.\n",
    );
    if notes.is_empty() {
        header.push_str("# No field looked like an unannotated reference.\n");
    } else {
        header.push_str("# Fields that look like references (add x-ferry-ref, or leave them if they are not):\n");
        for note in &notes {
            header.push_str(&format!("#   {note}\n"));
        }
    }
    Ok(format!("{header}{body}"))
}

fn annotate(schema: &mut Value, path: &str, version: &str, notes: &mut Vec<String>) {
    let Value::Object(map) = schema else { return };
    let Some(Value::Object(props)) = map.get_mut("properties") else {
        if let Some(items) = map.get_mut("items") {
            annotate(items, &format!("{path}[*]"), version, notes);
        }
        return;
    };
    for (name, prop) in props.iter_mut() {
        let field = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let Value::Object(p) = prop else { continue };
        let ty = p
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let has_ferry = p.keys().any(|k| k.starts_with("x-ferry-"));
        if !has_ferry && path != "metadata" {
            if ty == "string" && (name == "namespace" || name.ends_with("Namespace")) {
                p.insert("x-ferry-namespace".into(), Value::Bool(true));
            } else if ty == "object"
                && p.get("properties")
                    .and_then(|x| x.get("matchLabels"))
                    .is_some()
            {
                p.insert("x-ferry-selector".into(), Value::Bool(true));
            } else if name.ends_with("Ref")
                || name.ends_with("Name") && ty == "string" && name != "name"
            {
                let guess = guess_kind(name);
                notes.push(format!(
                    "{version} {field}: x-ferry-ref: {{apiVersion: {}, kind: {}}}",
                    guess.0, guess.1
                ));
            }
        }
        annotate(prop, &field, version, notes);
    }
}

/// A starting point for the target of a reference-like field, from its name.
fn guess_kind(field: &str) -> (&'static str, String) {
    let stem = field.trim_end_matches("Ref").trim_end_matches("Name");
    match stem.to_ascii_lowercase().as_str() {
        "secret" | "credentialssecret" | "passwordsecret" => ("v1", "Secret".into()),
        "configmap" => ("v1", "ConfigMap".into()),
        "serviceaccount" => ("v1", "ServiceAccount".into()),
        "service" => ("v1", "Service".into()),
        "persistentvolumeclaim" | "claim" => ("v1", "PersistentVolumeClaim".into()),
        _ => {
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
mod tests {
    use super::*;

    #[test]
    fn annotates_obvious_fields_and_lists_refs() {
        let crd: Value = serde_yaml::from_str(
            r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: dbs.example.com, uid: x}
spec:
  group: example.com
  names: {kind: Db, plural: dbs}
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
              targetNamespace: {type: string}
              secretRef: {type: object, properties: {name: {type: string}}}
              podSelector: {type: object, properties: {matchLabels: {type: object}}}
status: {acceptedNames: {}}
"#,
        )
        .unwrap();
        let out = skeleton(&crd).unwrap();
        assert!(out.contains("x-ferry-namespace: true"), "{out}");
        assert!(out.contains("x-ferry-selector: true"), "{out}");
        assert!(
            out.contains("spec.secretRef: x-ferry-ref: {apiVersion: v1, kind: Secret}"),
            "{out}"
        );
        assert!(!out.contains("acceptedNames"), "{out}");
        assert!(!out.contains("uid"), "{out}");
    }
}
