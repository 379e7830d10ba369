//! `ferry schema init` on example CRDs and on a hostile one: what it annotates, what it only
//! suggests, and that nothing a CRD names becomes an annotation.

use super::*;

fn crd(properties: &str) -> Value {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: dbs.example.com, uid: x}}
spec:
  group: example.com
  names: {{kind: Db, plural: dbs}}
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
            properties: {properties}
status: {{acceptedNames: {{}}}}
"#
    ))
    .unwrap()
}

#[test]
fn annotates_only_what_is_certain_and_suggests_the_rest() {
    let out = skeleton(&crd(
        "{targetNamespace: {type: string, description: 'The Kubernetes namespace to restore into.'}, allowedNamespaces: {type: array, items: {type: string}}, secretRef: {type: object, properties: {name: {type: string}}}, podSelector: {type: object, properties: {matchLabels: {type: object}}}, engine: {type: string}, commonName: {type: string}, vault: {type: object, properties: {namespace: {type: string}}}, parentRefs: {type: array, items: {type: object, properties: {group: {type: string, default: gateway.networking.k8s.io}, kind: {type: string, default: Gateway}, name: {type: string}, namespace: {type: string}, sectionName: {type: string}}}}}",
    ))
    .unwrap();
    assert!(out.contains("x-ferry-namespace: true"), "{out}");
    assert!(
        out.contains(
            "x-ferry-ref: {apiVersionField: group, kindField: kind, namespaceField: namespace}"
        ),
        "{out}"
    );
    assert!(out.contains("default: gateway.networking.k8s.io"), "{out}");
    // Uncertain: comments only.
    assert!(!out.contains("x-ferry-selector: true\n"), "{out}");
    assert!(
        out.contains("# suggestion: x-ferry-selector: true"),
        "{out}"
    );
    assert!(
        out.contains("# suggestion: x-ferry-ref: {apiVersion: v1, kind: Secret}"),
        "{out}"
    );
    assert!(out.contains("Vault namespace"), "{out}");
    assert!(
        out.contains("# suggestion: x-ferry-namespace: {empty: refuse} on the list and x-ferry-namespace: true on items"),
        "{out}"
    );
    // Sparse: nothing that ferry does not touch.
    for absent in [
        "engine",
        "commonName",
        "sectionName",
        "acceptedNames",
        "uid",
    ] {
        assert!(!out.contains(absent), "{absent} in {out}");
    }
    // What it prints is a schema ferry loads.
    let doc: Value = serde_yaml::from_str(&out).expect("valid YAML");
    assert_eq!(doc["kind"], "CustomResourceDefinition");
}

/// The `x-` keys of a schema node and every node below it (property names are not
/// keys of a node: a property may be called anything).
fn extensions(node: &Value, path: &str, out: &mut Vec<String>) {
    let Some(map) = node.as_object() else { return };
    for (key, value) in map {
        match key.as_str() {
            "properties" => {
                for (name, child) in value.as_object().into_iter().flatten() {
                    extensions(child, &format!("{path}.{name}"), out);
                }
            }
            "items" | "additionalProperties" => extensions(value, path, out),
            k if k.starts_with("x-") => out.push(format!("{path} {k}")),
            _ => {}
        }
    }
}

#[test]
fn hostile_names_and_values_never_become_annotations() {
    let crd: Value = serde_yaml::from_str(include_str!(
        "../../../../testdata/schema-init-hostile/crd.yaml"
    ))
    .unwrap();
    let out = skeleton(&crd).unwrap();
    let doc: Value = serde_yaml::from_str(&out).expect("the overlay is valid YAML");
    let schema = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut found = Vec::new();
    extensions(schema, "", &mut found);
    found.sort();
    assert_eq!(
        found,
        [
            ".spec.parentRef x-ferry-ref",
            ".spec.target.namespace x-ferry-namespace"
        ],
        "{out}"
    );
    // Nothing was added beside what the overlay writes, at any level.
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect()
    };
    assert_eq!(keys(&doc), ["apiVersion", "kind", "metadata", "spec"]);
    assert_eq!(keys(&doc["spec"]), ["group", "names", "scope", "versions"]);
    assert_eq!(
        keys(&doc["spec"]["versions"][0]),
        ["name", "served", "storage", "schema"]
    );
    // Every name and value reads back exactly as the CRD wrote it.
    assert_eq!(doc["metadata"]["name"], crd["metadata"]["name"]);
    assert_eq!(doc["spec"]["names"], crd["spec"]["names"]);
    assert_eq!(
        doc["spec"]["versions"][0]["name"],
        crd["spec"]["versions"][0]["name"]
    );
    let written = &schema["properties"]["spec"]["properties"];
    let original = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    for name in keys(written) {
        assert!(
            original.get(&name).is_some(),
            "{name:?} is not a property of the CRD"
        );
    }
    assert_eq!(
        written["parentRef"]["properties"]["kind"]["default"],
        original["parentRef"]["properties"]["kind"]["default"]
    );
    // Each comment is one line: what follows a `#` never reaches the next line.
    for line in out.lines() {
        assert!(
            !line.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{7}']),
            "{line:?}"
        );
    }
}

#[test]
fn learns_the_reference_shapes_of_real_crds() {
    let out = skeleton(&crd(
        "{scaleTargetRef: {type: object, description: 'The target. Kind defaults to Deployment.', properties: {apiVersion: {type: string}, kind: {type: string}, name: {type: string}}}, triggers: {type: array, items: {type: object, properties: {authenticationRef: {type: object, properties: {name: {type: string}, kind: {type: string}}}, secretTargetRef: {type: array, items: {type: object, properties: {parameter: {type: string}, name: {type: string}, key: {type: string}}}}}}}, valuesFrom: {type: array, items: {type: object, properties: {kind: {type: string, enum: [Secret, ConfigMap]}, name: {type: string}, valuesKey: {type: string}}}}, template: {type: object, properties: {imagePullSecrets: {type: array, items: {type: object, properties: {name: {type: string}}}}, volumes: {type: array, items: {type: object, properties: {configMap: {type: object, properties: {name: {type: string}, items: {type: array}}}, secret: {type: object, properties: {secretName: {type: string}}}, projected: {type: object, properties: {sources: {type: array, items: {type: object, properties: {secret: {type: object, properties: {name: {type: string}}}}}}}}}}}}}, serverAddress: {type: string}, password: {type: object, description: 'SecretKeySelector selects a key of a Secret.', properties: {name: {type: string}, key: {type: string}, optional: {type: boolean}}}, hpaName: {type: string}, tokenSecretKeyRef: {type: object, properties: {name: {type: string}, key: {type: string}}}}",
    ))
    .unwrap();
    for expected in [
        // The default a description gives, as the fixed fallback.
        "x-ferry-ref: {apiVersionField: apiVersion, kindField: kind, apiVersion: apps/v1, kind: Deployment}",
        // Flux's valuesFrom: a core kind named by a field.
        "x-ferry-ref: {apiVersion: v1, kindField: kind}",
        // Pod-spec shapes.
        "x-ferry-ref: {apiVersion: v1, kind: ConfigMap}",
        "x-ferry-ref: {apiVersion: v1, kind: Secret, nameField: secretName}",
        "x-ferry-ref: {apiVersion: v1, kind: Secret}",
        // KEDA's secretTargetRef: a list of references to Secrets.
        "# suggestion: x-ferry-ref: {apiVersion: v1, kind: Secret} on items",
        // A Secret wherever the word is, an HPA by its short name.
        "# suggestion: x-ferry-ref: {apiVersion: v1, kind: Secret}, if it names",
        "# suggestion: x-ferry-ref: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler}",
        // A host or URL may embed a namespace.
        "# this string may embed a namespace",
    ] {
        assert!(out.contains(expected), "{expected} not in {out}");
    }
    let doc: Value = serde_yaml::from_str(&out).expect("valid YAML");
    assert_eq!(doc["kind"], "CustomResourceDefinition");
}
