//! The policy file format (`SyncPolicy`), exactly as written: strict, unknown fields refused.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sandbox::Limits;

/// Which way an approved kind flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    /// Tenant objects go down (spec), status comes up.
    ToSuper,
    /// Selected super objects are copied read-only into every tenant.
    FromSuper,
    /// Super objects produced for a tenant's synced object (named by it, or owned by its
    /// copy) are copied read-only into its namespace. Written in a policy as `produced: true`.
    #[serde(skip)]
    Produced,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::ToSuper => "toSuper",
            Direction::FromSuper => "fromSuper",
            Direction::Produced => "produced",
        })
    }
}

/// Whether the kind lives in namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Scope {
    /// Objects live in namespaces (the default).
    #[default]
    Namespaced,
    /// Objects are cluster-scoped; tenant objects are renamed in the super cluster.
    Cluster,
}

/// A Kubernetes LabelSelector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Labels that must be equal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One set-based requirement of a LabelSelector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => !value.is_some_and(|v| r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }

    /// Why the selector is malformed, if it is.
    pub fn problem(&self) -> Option<String> {
        for (i, r) in self.match_expressions.iter().enumerate() {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Some(format!("matchExpressions[{i}]: operator {} needs values", r.operator))
                }
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    return Some(format!("matchExpressions[{i}]: operator {} takes no values", r.operator))
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Some(format!(
                        "matchExpressions[{i}].operator: expected In, NotIn, Exists or DoesNotExist, found {other:?}"
                    ))
                }
            }
        }
        None
    }
}

/// A policy file.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(title = "SyncPolicy")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFile {
    /// Must be `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Must be `SyncPolicy`.
    pub kind: String,
    /// Name and labels; informational.
    #[serde(default)]
    pub metadata: Metadata,
    /// The approvals.
    pub spec: PolicySpec,
}

/// The metadata ferry reads from its own files.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// The name.
    #[serde(default)]
    pub name: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `spec` of a policy file.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// Approved kinds.
    #[serde(default)]
    pub resources: Vec<ResourceEntry>,
    /// Declared transforms.
    #[serde(default)]
    pub transforms: Vec<TransformEntry>,
    /// Each tenant's DNS domains (`{tenant}.apps.example.com`): an `x-ferry-host: external`
    /// name must lie under one. `{tenant}` must be a whole label.
    #[serde(default)]
    pub domains: Vec<String>,
}

/// One entry of `spec.resources`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceEntry {
    /// `group/version`, exactly one version.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `toSuper` or `fromSuper`; absent for a kind approved only `produced`.
    #[serde(default)]
    pub direction: Option<Direction>,
    /// Objects of the kind produced in the super cluster for a tenant's synced object flow up.
    #[serde(default)]
    pub produced: bool,
    /// `Namespaced` (default) or `Cluster`.
    #[serde(default)]
    pub scope: Scope,
    /// Schema file, relative to the policy file.
    #[serde(default)]
    pub schema: Option<String>,
    /// Transform names, applied in order.
    #[serde(default)]
    pub transforms: Vec<String>,
    /// Synced only while a synced object references it.
    #[serde(default)]
    pub dependency: bool,
    /// Which objects cross.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    /// Field rules: JSONPath paths with the meaning of a schema annotation.
    #[serde(default)]
    pub fields: Vec<FieldRuleEntry>,
    /// Which tenant annotations go down with the kind's objects (toSuper only). Absent: every
    /// annotation, except for a dependency, which carries none (only ferry's own); the keys
    /// the kind's field rules map are always allowed.
    #[serde(default)]
    pub annotations: Option<AnnotationsEntry>,
    /// Where the super copies go (toSuper, Namespaced only): the operator's fixed namespace,
    /// for operators that act only in their own (Velero). Absent: the tenant's super
    /// namespaces.
    #[serde(default)]
    pub placement: Option<PlacementEntry>,
}

/// A resource's `placement`: where its super copies go instead of the tenant's super
/// namespaces.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacementEntry {
    /// The operator's own namespace in the super cluster (`velero`), for operators that act
    /// only there: a tenant object's copy goes there, named `<tenant>-<namespace>-<name>`
    /// (hashed past 63 characters), and its status flows back. It must not be any tenant's
    /// space, a system namespace, or a platform namespace other than the operator's.
    pub namespace: String,
}

/// A resource's `annotations`: which tenant annotations its super copies carry.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnnotationsEntry {
    /// Annotation keys or globs (`*` any characters, `?` one character; nothing else is
    /// special), such as `example.com/tier` or `reflector.v1.k8s.emberstack.com/*`.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// One entry of a resource's `fields`: a JSONPath and exactly one action, each with the
/// meaning of the schema annotation of the same name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRuleEntry {
    /// An RFC 9535 JSONPath (`$.spec.tls[*].secretName`).
    pub path: String,
    /// `x-ferry-namespace`: the value is a tenant namespace (or, as a mapping, a list that
    /// means every namespace when empty, a glob, literals kept).
    #[serde(default)]
    #[schemars(with = "Option<NamespaceSchema>")]
    pub namespace: Option<serde_json::Value>,
    /// `x-ferry-ref`: the value refers to another object (plus `format` and `produced`).
    #[serde(default, rename = "ref")]
    #[schemars(with = "Option<RefSchema>")]
    pub reference: Option<serde_json::Value>,
    /// `x-ferry-selector`: a LabelSelector of objects, scoped to the tenant.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub selector: Option<serde_json::Value>,
    /// `x-ferry-namespace-selector`: a LabelSelector of namespaces, scoped to the tenant.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub namespace_selector: Option<serde_json::Value>,
    /// `x-ferry-text`: free text; up, super namespace names in it become the tenant's.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub text: Option<serde_json::Value>,
    /// `x-ferry-owner: super`: written in the super cluster, flows up, never down.
    #[serde(default)]
    #[schemars(with = "Option<OwnerSchema>")]
    pub owner: Option<serde_json::Value>,
    /// `x-ferry-drop`: never leaves the tenant.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub drop: Option<serde_json::Value>,
    /// `x-ferry-host`: a host name, in-cluster (`service`, its namespace mapped), `external`
    /// (under the tenant's domains) or either; with `empty: refuse` on a list.
    #[serde(default)]
    #[schemars(with = "Option<HostSchema>")]
    pub host: Option<serde_json::Value>,
    /// `x-ferry-identity`: a workload identity (`spiffe://<td>/ns/<ns>/sa/<sa>`), its
    /// namespace mapped.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub identity: Option<serde_json::Value>,
    /// `x-ferry-forbid`: the field's presence refuses the object with the reason (unless it
    /// holds one of the values listed).
    #[serde(default)]
    #[schemars(with = "Option<ForbidSchema>")]
    pub forbid: Option<serde_json::Value>,
    /// `x-ferry-secret-template`: an object that templates a Secret (its `type` and
    /// `metadata.annotations`): never a service-account token.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub secret_template: Option<serde_json::Value>,
}

/// `host`: which host names a field holds.
#[derive(JsonSchema)]
#[schemars(rename = "Host")]
#[serde(untagged)]
#[allow(dead_code)]
enum HostSchema {
    /// `service` or `external`.
    One(HostType),
    /// `[service, external]`.
    Both(Vec<HostType>),
    /// With `empty: refuse` (an absent or empty list means every host).
    Options {
        /// `service`, `external` or both.
        #[serde(rename = "type")]
        kind: Vec<HostType>,
        /// `refuse`.
        empty: Option<String>,
    },
}

/// A kind of host name.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum HostType {
    /// In-cluster DNS names; the namespace label is mapped.
    Service,
    /// Names under the tenant's domains.
    External,
}

/// `namespace` as a mapping.
#[derive(JsonSchema)]
#[schemars(rename = "Namespace")]
#[serde(untagged)]
#[allow(dead_code)]
enum NamespaceSchema {
    /// `true`: the value is a tenant namespace.
    Flag(bool),
    /// Lists and globs.
    Options {
        /// `refuse` or `tenant`: what an absent or empty list (read as every namespace) does.
        empty: Option<String>,
        /// `glob`: the value is a glob over namespaces (`prod-*`).
        pattern: Option<String>,
        /// Literals that are not namespaces and pass unchanged (Istio's `.`).
        keep: Option<Vec<String>>,
    },
}

/// `forbid`: a reason, or a reason and the values still allowed.
#[derive(JsonSchema)]
#[schemars(rename = "Forbid")]
#[serde(untagged)]
#[allow(dead_code)]
enum ForbidSchema {
    /// The reason.
    Reason(String),
    /// The reason and the values still allowed.
    Options {
        /// Why the field is forbidden.
        reason: String,
        /// Values the field may still hold.
        unless: Option<Vec<serde_json::Value>>,
    },
}

/// Who writes a field (`x-ferry-owner`).
#[derive(JsonSchema)]
#[schemars(rename = "Owner")]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum OwnerSchema {
    /// Super-side controllers.
    Super,
}

/// How a reference string writes its target.
#[derive(JsonSchema)]
#[schemars(rename = "Format")]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
enum FormatSchema {
    /// The string is the name.
    Name,
    /// The string is `name` or `namespace/name`.
    NamespacedName,
}

/// A reference (`x-ferry-ref`, and a field rule's `ref`): which kind it points at and where
/// its name and namespace are.
#[derive(JsonSchema)]
#[schemars(rename = "Reference")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
struct RefSchema {
    /// The target's apiVersion (or group), fixed; the fallback when `apiVersionField` is empty.
    api_version: Option<String>,
    /// The target's kind, fixed; the fallback when `kindField` is empty.
    kind: Option<String>,
    /// The field naming the target's apiVersion or group.
    api_version_field: Option<String>,
    /// The field naming the target's kind.
    kind_field: Option<String>,
    /// On an object, the field holding the name (default `name`).
    name_field: Option<String>,
    /// The field holding the target's namespace (beside a string, inside an object).
    namespace_field: Option<String>,
    /// A target kind the policy does not sync passes unchanged (its namespace still maps).
    passthrough: Option<bool>,
    /// `name` (default) or `namespacedName` (`name` or `namespace/name` in the string).
    format: Option<FormatSchema>,
    /// The target is produced in the super cluster for the referrer and flows up.
    produced: Option<bool>,
}

/// The JSON Schema of a SyncPolicy file (for editors: `# yaml-language-server: $schema=`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(PolicyFile)).unwrap_or_default()
}

/// One entry of `spec.transforms`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TransformEntry {
    /// The name resources use.
    pub name: String,
    /// The Starlark file, relative to the policy file.
    pub file: String,
    /// The approval pin of the file's bytes.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Per-call limits.
    #[serde(default)]
    pub limits: Limits,
}
