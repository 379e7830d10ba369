//! The field shapes `ferry schema init` recognises, each a function from what it sees of a
//! field to the overlay it writes there (or `None`): reference objects, pod-spec references,
//! namespaces, selectors, reference-like names, and strings that embed a namespace.

use serde_json::{Map, Value};

use super::{props, scalar, ty, Field};

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

/// What a recogniser sees of one field.
pub(super) struct Seen<'a> {
    pub schema: &'a Value,
    pub name: &'a str,
    /// The field's description, lower-cased.
    pub description: String,
    /// Below a Vault-like field, whose "namespaces" are not Kubernetes'.
    pub vault: bool,
    pub properties: Option<&'a Map<String, Value>>,
}

impl<'a> Seen<'a> {
    pub fn new(schema: &'a Value, name: &'a str, vault: bool) -> Self {
        Self {
            schema,
            name,
            description: schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_lowercase(),
            vault: vault || name.to_ascii_lowercase().contains("vault"),
            properties: props(schema),
        }
    }

    fn has(&self, key: &str) -> bool {
        self.properties.is_some_and(|p| p.contains_key(key))
    }

    fn ty(&self) -> Option<&str> {
        ty(self.schema)
    }

    fn field(&self) -> Field {
        Field {
            ty: self.ty().map(str::to_string),
            ..Field::default()
        }
    }

    /// The field's own property `key`, typed as the CRD types it (and its default).
    fn keep(&self, field: &mut Field, key: &str) {
        if let Some(p) = self.properties.and_then(|p| p.get(key)) {
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
}

/// The first shape `seen` has, as its overlay.
pub(super) fn shapes(seen: &Seen<'_>) -> Option<Field> {
    let recognisers: [fn(&Seen<'_>) -> Option<Field>; 8] = [
        reference_object,
        kind_and_name,
        pod_reference,
        namespace_string,
        namespace_list,
        selector,
        reference_like,
        embeds_a_name,
    ];
    recognisers.iter().find_map(|r| r(seen))
}

/// `{group|apiVersion, kind, name[, namespace]}`: what it points at is in its own fields
/// (Gateway API's `parentRefs`, KEDA's `scaleTargetRef`).
fn reference_object(seen: &Seen<'_>) -> Option<Field> {
    if !(seen.has("name") && seen.has("kind") && (seen.has("group") || seen.has("apiVersion"))) {
        return None;
    }
    let api = if seen.has("group") {
        "group"
    } else {
        "apiVersion"
    };
    let kind_default = defaulted(seen, "kind", kind_token);
    let api_default = defaulted(seen, api, api_token).or_else(|| {
        kind_default
            .as_deref()
            .and_then(known_api_version)
            .map(str::to_string)
    });
    let mut rule = format!("{{apiVersionField: {api}, kindField: kind");
    if seen.has("namespace") {
        rule.push_str(", namespaceField: namespace");
    }
    let mut field = seen.field();
    // A schema default is taken when the field is absent; only a default the prose gives
    // needs writing down.
    let schema_default = seen
        .properties
        .and_then(|p| p.get("kind"))
        .is_some_and(|k| k.get("default").is_some());
    let fallback = match (&api_default, &kind_default) {
        (_, Some(kind)) if schema_default => {
            format!("; an absent kind is its schema default ({kind})")
        }
        (Some(api_version), Some(kind)) if api == "apiVersion" => {
            rule.push_str(&format!(", apiVersion: {}, kind: {}", scalar(api_version), scalar(kind)));
            format!("; when kind is left empty it is {kind} ({api_version}), as the CRD says")
        }
        (_, Some(kind)) => format!(
            "; the CRD says kind defaults to {kind}: add apiVersion: <group/version>, kind: {kind} as the fallback"
        ),
        (_, None) => "; an object that leaves kind empty is refused (UnapprovedReference): add a fixed apiVersion and kind as the fallback if the controller has a default".into(),
    };
    rule.push('}');
    field.annotations.push(("x-ferry-ref".into(), rule));
    field.comment = Some(format!(
        "a reference object: its {api} and kind say what it points at{}{fallback}; add passthrough: true if it may name kinds the policy does not sync",
        if seen.has("namespace") { ", its namespace is mapped" } else { "" }
    ));
    for key in [api, "kind", "name", "namespace"] {
        seen.keep(&mut field, key);
    }
    Some(field)
}

/// `{kind, name}` where kind is one of Secret and ConfigMap (Flux's `valuesFrom` and
/// `substituteFrom`): a core reference whose kind is a field.
fn kind_and_name(seen: &Seen<'_>) -> Option<Field> {
    if !(seen.has("name") && seen.has("kind")) || seen.has("group") || seen.has("apiVersion") {
        return None;
    }
    let kinds: Vec<&str> = seen
        .properties?
        .get("kind")?
        .get("enum")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let core = ["Secret", "ConfigMap"];
    if kinds.is_empty() || !kinds.iter().all(|k| core.contains(k)) {
        return None;
    }
    let mut field = seen.field();
    field.annotations.push((
        "x-ferry-ref".into(),
        "{apiVersion: v1, kindField: kind}".into(),
    ));
    field.comment = Some(format!(
        "a reference to a {} in the object's namespace, its kind a field",
        kinds.join(" or ")
    ));
    for key in ["kind", "name"] {
        seen.keep(&mut field, key);
    }
    Some(field)
}

/// Pod-spec references, whose shapes leave no doubt: `imagePullSecrets[]` and
/// `secrets[]` `{name}`, a volume's or a projected source's `secret` (`secretName` or `name`),
/// `configMap` and `persistentVolumeClaim` (`claimName`), and `secretKeyRef` /
/// `configMapKeyRef` of an env var.
fn pod_reference(seen: &Seen<'_>) -> Option<Field> {
    let (kind, name_field) = match seen.name {
        "imagePullSecrets" | "secrets" if seen.ty() == Some("array") => {
            let items = Seen::new(seen.schema.get("items")?, "", seen.vault);
            if !items.has("name") || items.properties?.len() > 2 {
                return None;
            }
            let mut item = items.field();
            item.annotations.push((
                "x-ferry-ref".into(),
                "{apiVersion: v1, kind: Secret}".into(),
            ));
            items.keep(&mut item, "name");
            let mut field = seen.field();
            field.comment = Some("Secrets named in the object's namespace (a pod's)".into());
            field.items = Some(Box::new(item));
            return Some(field);
        }
        "secret" | "secretKeyRef" if seen.has("secretName") => ("Secret", "secretName"),
        "secret" | "secretKeyRef" if seen.has("name") => ("Secret", "name"),
        "configMap" | "configMapKeyRef" | "configMapRef" if seen.has("name") => {
            ("ConfigMap", "name")
        }
        "secretRef" if seen.has("name") && seen.has("optional") => ("Secret", "name"),
        "persistentVolumeClaim" if seen.has("claimName") => ("PersistentVolumeClaim", "claimName"),
        // A key selector, whatever its field's name: `{name, key}` whose description says
        // which kind (Kubernetes' SecretKeySelector, ConfigMapKeySelector).
        _ if key_selector(seen) => {
            if seen.description.contains("configmap") || seen.description.contains("config map") {
                ("ConfigMap", "name")
            } else {
                ("Secret", "name")
            }
        }
        _ => return None,
    };
    let mut field = seen.field();
    let rule = match name_field {
        "name" => format!("{{apiVersion: v1, kind: {kind}}}"),
        other => format!("{{apiVersion: v1, kind: {kind}, nameField: {other}}}"),
    };
    field.annotations.push(("x-ferry-ref".into(), rule));
    field.comment = Some(format!(
        "a {kind} in the object's namespace (a pod-spec shape)"
    ));
    seen.keep(&mut field, name_field);
    Some(field)
}

/// `{name, key[, optional]}` described as selecting a key of a Secret or a ConfigMap.
fn key_selector(seen: &Seen<'_>) -> bool {
    let only = seen.properties.is_some_and(|p| {
        p.keys()
            .all(|k| matches!(k.as_str(), "name" | "key" | "optional"))
    });
    let says = ["secret", "configmap", "config map"]
        .iter()
        .any(|w| seen.description.contains(w))
        && seen.description.contains("key");
    seen.has("name") && seen.has("key") && only && says
}

/// A string named `namespace` or `*Namespace`: certain only when the schema says it is a
/// Kubernetes namespace (secret stores such as Vault have "namespaces" of their own).
fn namespace_string(seen: &Seen<'_>) -> Option<Field> {
    let looks_like_ns = seen.name == "namespace" || seen.name.ends_with("Namespace");
    if seen.ty() != Some("string") || !looks_like_ns {
        return None;
    }
    let mut field = seen.field();
    if seen.vault || !seen.description.contains("kubernetes") {
        field.comment = Some(if seen.vault || seen.description.contains("vault") {
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
    Some(field)
}

/// A list of strings named `*namespaces`.
fn namespace_list(seen: &Seen<'_>) -> Option<Field> {
    let items_are_strings = seen.schema.get("items").and_then(ty) == Some("string");
    if seen.ty() != Some("array")
        || !items_are_strings
        || !seen.name.to_ascii_lowercase().ends_with("namespaces")
    {
        return None;
    }
    let mut field = seen.field();
    field.comment = Some(
        "suggestion: x-ferry-namespace: {empty: refuse} on the list and x-ferry-namespace: true on items, if they hold Kubernetes namespaces (an empty list often means every namespace; a wildcard such as \"*\" would be refused unless pattern: glob)".into(),
    );
    field.items = Some(Box::new(Field {
        ty: Some("string".into()),
        ..Field::default()
    }));
    Some(field)
}

/// A LabelSelector.
fn selector(seen: &Seen<'_>) -> Option<Field> {
    if seen.ty() != Some("object") || !(seen.has("matchLabels") || seen.has("matchExpressions")) {
        return None;
    }
    let mut field = seen.field();
    field.comment = Some(if seen.name.to_ascii_lowercase().contains("namespace") {
        "suggestion: x-ferry-namespace-selector: true, if it selects namespaces (scoped to the tenant's)".into()
    } else {
        "suggestion: x-ferry-selector: true, if it selects the tenant's own objects (not, for example, a super-side controller's pods); x-ferry-selector: {over: published} if it selects the platform's published objects".into()
    });
    for key in ["matchLabels", "matchExpressions"] {
        if let Some(p) = seen.properties.and_then(|p| p.get(key)) {
            field.properties.insert(
                key.to_string(),
                Field {
                    ty: ty(p).map(str::to_string),
                    ..Field::default()
                },
            );
        }
    }
    Some(field)
}

/// A field named `*Ref` (a string, an object with a name, or a list of such objects) or a
/// string `*Name`: a suggestion, its kind guessed from the name.
fn reference_like(seen: &Seen<'_>) -> Option<Field> {
    let name = seen.name;
    if NOT_REFERENCES.contains(&name) {
        return None;
    }
    let items = seen.schema.get("items");
    let list_of_refs = seen.ty() == Some("array")
        && name.ends_with("Ref")
        && items
            .and_then(props)
            .is_some_and(|p| p.contains_key("name"));
    let reference_like = (name.ends_with("Ref")
        && (seen.ty() == Some("string") || seen.has("name")))
        || (name.ends_with("Name") && seen.ty() == Some("string"))
        || list_of_refs;
    if !reference_like {
        return None;
    }
    let (api, kind) = guess_kind(name);
    let target = if list_of_refs { items? } else { seen.schema };
    let namespace = if props(target).is_some_and(|p| p.contains_key("namespace")) {
        ", namespaceField: namespace"
    } else {
        ""
    };
    let mut field = seen.field();
    field.comment = Some(format!(
        "suggestion: x-ferry-ref: {{apiVersion: {api}, kind: {}{namespace}}}{}, if it names a Kubernetes object",
        scalar(&kind),
        if list_of_refs { " on items" } else { "" }
    ));
    if !namespace.is_empty() {
        let ns = Field {
            ty: Some("string".into()),
            ..Field::default()
        };
        if list_of_refs {
            let mut item = Field {
                ty: Some("object".into()),
                ..Field::default()
            };
            item.properties.insert("namespace".into(), ns);
            field.items = Some(Box::new(item));
        } else {
            field.properties.insert("namespace".into(), ns);
        }
    }
    Some(field)
}

/// A string that names a host, an address or a URL: it may embed a namespace
/// (`db.team-a-shop.svc`), which x-ferry-namespace does not see.
fn embeds_a_name(seen: &Seen<'_>) -> Option<Field> {
    if seen.ty() != Some("string") {
        return None;
    }
    let lower = seen.name.to_ascii_lowercase();
    let named = [
        "url", "uri", "host", "hosts", "address", "endpoint", "server", "servers",
    ]
    .iter()
    .any(|w| lower == *w || lower.ends_with(w));
    let described = seen.description.contains("namespace/name")
        || seen.description.contains("<namespace>")
        || seen.description.contains(".svc");
    if !named && !described {
        return None;
    }
    let mut field = seen.field();
    field.comment = Some(
        "this string may embed a namespace (an in-cluster host such as svc.ns.svc, a URL, namespace/name): use x-ferry-host: service|external, x-ferry-identity, or a transform".into(),
    );
    Some(field)
}

/// The default the CRD gives the property `key` of a reference object: its `default`, or
/// what its description (or the object's) says ("defaults to Deployment"), if `valid`.
fn defaulted(seen: &Seen<'_>, key: &str, valid: fn(&str) -> bool) -> Option<String> {
    let property = seen.properties?.get(key)?;
    if let Some(d) = property.get("default").and_then(Value::as_str) {
        return valid(d).then(|| d.to_string());
    }
    let own = property
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let parent = seen
        .schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    [own, parent]
        .iter()
        .find_map(|text| said_default(text).filter(|d| valid(d)))
}

/// The word after "defaults to", "default is" or "default:" in `text`.
fn said_default(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = [
        "defaults to ",
        "default is ",
        "default: ",
        "default value is ",
    ]
    .iter()
    .find_map(|p| lower.find(p).map(|i| i + p.len()))?;
    let word: String = text[at..]
        .trim_start_matches(['"', '`', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-'))
        .collect();
    let word = word.trim_end_matches('.').to_string();
    (!word.is_empty()).then_some(word)
}

/// A kind: CamelCase letters and digits.
fn kind_token(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
        && s.len() <= 63
}

/// An apiVersion: `v1` or `group/version`.
fn api_token(s: &str) -> bool {
    s.len() <= 253
        && s.matches('/').count() <= 1
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '/'))
        && s.rsplit('/').next().is_some_and(|v| v.starts_with('v'))
}

/// The apiVersion of a well-known kind.
fn known_api_version(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => "apps/v1",
        "Job" | "CronJob" => "batch/v1",
        "Secret" | "ConfigMap" | "Service" | "Pod" | "ServiceAccount" => "v1",
        "HorizontalPodAutoscaler" => "autoscaling/v2",
        _ => return None,
    })
}

/// A starting point for the target of a reference-like field, from its name.
pub(super) fn guess_kind(field: &str) -> (&'static str, String) {
    let stem = field.trim_end_matches("Ref").trim_end_matches("Name");
    let lower = stem.to_ascii_lowercase();
    // `secretKeyRef`, `secretTargetRef`, `tlsSecretName`: a Secret wherever the word is.
    let core = [
        ("configmap", "ConfigMap"),
        ("serviceaccount", "ServiceAccount"),
        ("secret", "Secret"),
        ("persistentvolumeclaim", "PersistentVolumeClaim"),
        ("claim", "PersistentVolumeClaim"),
    ];
    if let Some((_, kind)) = core.iter().find(|(word, _)| lower.contains(word)) {
        return ("v1", kind.to_string());
    }
    if lower.ends_with("service") {
        return ("v1", "Service".into());
    }
    if lower.ends_with("hpa") || lower.contains("horizontalpodautoscaler") {
        return ("autoscaling/v2", "HorizontalPodAutoscaler".into());
    }
    let mut chars = stem.chars();
    let kind = chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default();
    ("<group/version>", kind)
}
