//! Annotated schemas: which fields of a kind hold namespaces, references, selectors,
//! tenant-private or super-owned data, compiled into a [`Plan`] that translation walks.
//!
//! ```text
//!  schemas/x.yaml (CRD or OpenAPI document) ─▶ load::find_schema ─▶ openapiv3::Schema
//!        ─▶ compile::compile (x-ferry-*, kustomize object-ref, $ref, items, maps) ─▶ Plan
//! ```
//!
//! A plan keeps only the branches that lead to an annotation, so translating an object
//! touches only the fields that can change.

pub mod compile;
pub mod load;

use std::collections::BTreeMap;

use crate::locate::Location;

pub use compile::compile;
pub use load::PlanCache;

/// A problem with a schema file or one of its annotations.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{file}: cannot read schema: {message}")]
    Read {
        /// The schema file.
        file: String,
        /// The I/O error.
        message: String,
    },
    /// The file is not YAML/JSON, or a schema in it is not OpenAPI v3.
    #[error("{at}: {message}")]
    Parse {
        /// Where.
        at: Location,
        /// What was expected and found.
        message: String,
    },
    /// The file holds no schema for the kind the policy approves.
    #[error("{file}: no schema for {api_version} {kind}: {message}")]
    NoSchema {
        /// The schema file.
        file: String,
        /// The approved apiVersion.
        api_version: String,
        /// The approved kind.
        kind: String,
        /// What the file does hold.
        message: String,
    },
    /// An annotation is malformed or on the wrong kind of field.
    #[error("{at}: {field}: {message}")]
    Annotation {
        /// Where in the schema file.
        at: Location,
        /// The object field path the annotation is on (`spec.secretRef`).
        field: String,
        /// What was expected and found.
        message: String,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A reference to another object (`x-ferry-ref`, or kustomize's object-ref extensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefRule {
    /// Fixed target apiVersion (or a bare group), the fallback when `api_version_field` is empty.
    pub api_version: Option<String>,
    /// Fixed target kind, the fallback when `kind_field` is empty.
    pub kind: Option<String>,
    /// Field naming the target apiVersion or group.
    pub api_version_field: Option<String>,
    /// Field naming the target kind.
    pub kind_field: Option<String>,
    /// Field holding the name (on an object; default `name`).
    pub name_field: String,
    /// Field holding the namespace, if the reference can cross namespaces.
    pub namespace_field: Option<String>,
    /// A reference to a kind the policy does not sync passes unchanged.
    pub passthrough: bool,
    /// The annotation is on a string field, so `namespace_field` names a sibling, which holds
    /// a namespace even while the reference itself is absent.
    pub on_string: bool,
    /// The annotation is on an object field (the reference object).
    pub on_object: bool,
    /// The schema `default` of `api_version_field`, which an absent field takes.
    pub api_version_default: Option<String>,
    /// The schema `default` of `kind_field`, which an absent field takes.
    pub kind_default: Option<String>,
    /// How a string reference writes its target.
    pub format: RefFormat,
    /// The target is produced in the super cluster for the referrer and flows up.
    pub produced: bool,
}

/// Splits a `namespacedName` reference into its namespace (if any) and name; `None` when it
/// is neither `name` nor `namespace/name`.
pub fn split_namespaced_name(text: &str) -> Option<(Option<&str>, &str)> {
    match text.split_once('/') {
        None => Some((None, text)),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Some((Some(ns), name))
        }
        Some(_) => None,
    }
}

/// How a string reference writes its target (`format` in `x-ferry-ref` or a field rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RefFormat {
    /// The string is the name.
    #[default]
    Name,
    /// The string is `name` or `namespace/name` (as ingress-nginx annotations write them).
    NamespacedName,
}

impl RefRule {
    /// The sibling field holding a namespace, for a reference on a string (or on a field of
    /// unknown type, as a field rule's: its namespace field is then mapped and guarded
    /// whether or not the reference is set).
    pub fn sibling_namespace(&self) -> Option<&str> {
        self.namespace_field.as_deref().filter(|_| !self.on_object)
    }

    /// A `namespacedName` reference read as a reference object `{name, namespace}`.
    pub fn as_object(&self) -> RefRule {
        RefRule {
            name_field: "name".into(),
            namespace_field: Some("namespace".into()),
            on_string: false,
            on_object: true,
            format: RefFormat::Name,
            ..self.clone()
        }
    }

    /// The field holding the target's namespace: the declared `namespaceField`, or on a
    /// reference object a field named `namespace` (a controller reads it whatever the
    /// annotation says, so ferry maps and guards it too). A string reference without
    /// `namespaceField` has none.
    pub fn namespace_key(&self, on_object: bool) -> Option<&str> {
        match &self.namespace_field {
            Some(key) => Some(key),
            None if on_object => Some("namespace"),
            None => None,
        }
    }

    /// The group and kind the reference points at, read from `fields` (the reference object,
    /// or a string reference's siblings). The kind: the `kindField`, its schema default when
    /// absent, the fixed `kind` when empty. The group: the `apiVersionField` as written (an
    /// explicit `""` is the core group, as in Gateway API's `group: ""`), its schema default
    /// when absent, else the fixed `apiVersion`. `None` when nothing names a kind.
    pub fn target<'s>(
        &'s self,
        fields: Option<&'s serde_json::Map<String, serde_json::Value>>,
    ) -> Option<(&'s str, &'s str)> {
        let field = |key: &Option<String>| -> Option<&'s serde_json::Value> {
            fields?.get(key.as_deref()?)
        };
        // A null field is an absent one: the API server prunes it and applies the default.
        let field = |key: &Option<String>| field(key).filter(|v| !v.is_null());
        let kind = match field(&self.kind_field) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.as_str()),
            None => self.kind_default.as_deref().or(self.kind.as_deref()),
            Some(_) => self.kind.as_deref(),
        }?;
        let api = match field(&self.api_version_field) {
            Some(serde_json::Value::String(s)) if s.is_empty() => return Some(("", kind)),
            Some(serde_json::Value::String(s)) => s.as_str(),
            None => self
                .api_version_default
                .as_deref()
                .or(self.api_version.as_deref())
                .unwrap_or(""),
            Some(_) => self.api_version.as_deref().unwrap_or(""),
        };
        Some((load::group_of(api), kind))
    }
}

/// What an annotation asks translation to do with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `x-ferry-namespace: true`: the string is a tenant namespace.
    Namespace,
    /// `x-ferry-ref`: the field refers to another object.
    Ref(RefRule),
    /// `x-ferry-selector: true`: a LabelSelector scoped to the tenant.
    Selector,
    /// `x-ferry-selector: {over: published}`: a LabelSelector over the platform's objects,
    /// limited to the published ones (the public label required).
    PublishedSelector,
    /// `x-ferry-namespace-selector: true`: a LabelSelector of namespaces, scoped to the tenant,
    /// its `kubernetes.io/metadata.name` values mapped.
    NamespaceSelector,
    /// `x-ferry-text: true`: free text (a condition message); up, the tenant's super namespace
    /// names in it become its own, other tenants' are redacted.
    Text,
    /// `x-ferry-owner: super`: written in the super cluster, flows up, never down.
    OwnerSuper,
    /// `x-ferry-drop: true`: never leaves the tenant.
    Drop,
    /// `x-ferry-namespace: {pattern: glob}`: a glob over namespace names (`prod-*`), mapped
    /// into the tenant's names (`team-a-prod-*`).
    Pattern,
    /// `keep` of `x-ferry-namespace`: literal values that are not namespaces (Istio's `.`)
    /// and pass unchanged; the field's other rules skip them.
    Keep(Vec<String>),
    /// `empty` of `x-ferry-namespace` or `x-ferry-host`, on the list (or string) itself: the
    /// operator reads an absent or empty value as "every namespace" or "every host".
    Required(Empty),
    /// `x-ferry-host`: a DNS name, in-cluster (its namespace label mapped) or external (under
    /// one of the tenant's domains).
    Host(Hosts),
    /// `short: refuse` of `x-ferry-host`: a name without a dot (resolved in whichever
    /// namespace reads it: `kubernetes`, `vault`) is refused, as in a certificate.
    Qualified,
    /// `x-ferry-identity: true`: a workload identity (`spiffe://<td>/ns/<ns>/sa/<sa>` or
    /// `<td>/ns/<ns>/sa/<sa>`), its namespace mapped.
    Identity,
    /// `x-ferry-forbid`: a tenant may not set the field (unless to one of the listed values).
    Forbid(Forbid),
    /// `x-ferry-secret-template: true`: an object that templates a Secret a super-side
    /// controller writes (its `type` and `metadata.annotations`): never a service-account
    /// token.
    SecretTemplate,
}

/// Which host names an `x-ferry-host` field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hosts {
    /// In-cluster DNS names (`<name>.<ns>`, `<name>.<ns>.svc[.cluster.local]`, pod and
    /// wildcard forms); short names (`<name>`) stay.
    Service,
    /// DNS names (or `*.` wildcards) that must lie under one of the tenant's domains.
    External,
    /// Either (`[service, external]`): short names and names ending in `.svc` or
    /// `.svc.cluster.local` are in-cluster, any other is external.
    Both,
}

impl Hosts {
    /// How the annotation writes it.
    pub fn name(self) -> &'static str {
        match self {
            Hosts::Service => "service",
            Hosts::External => "external",
            Hosts::Both => "[service, external]",
        }
    }
}

/// What ferry does with an absent or empty list (or string) that the operator reads as
/// "every namespace" or "every host".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Empty {
    /// The object is refused.
    Refuse,
    /// It becomes the tenant's namespaces (with `pattern: glob`, the tenant's glob
    /// `<tenant>-*`).
    Tenant,
}

/// A field a tenant may not set (`x-ferry-forbid`, a `forbid` field rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbid {
    /// Why, as the refusal says it.
    pub reason: String,
    /// Values the field may still hold (`followRedirects: false`).
    pub unless: Vec<serde_json::Value>,
}

impl Rule {
    /// The annotation's name, as `--explain` prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Namespace => "x-ferry-namespace",
            Rule::Ref(_) => "x-ferry-ref",
            Rule::Selector => "x-ferry-selector",
            Rule::PublishedSelector => "x-ferry-selector {over: published}",
            Rule::NamespaceSelector => "x-ferry-namespace-selector",
            Rule::Text => "x-ferry-text",
            Rule::OwnerSuper => "x-ferry-owner: super",
            Rule::Drop => "x-ferry-drop",
            Rule::Pattern => "x-ferry-namespace {pattern: glob}",
            Rule::Keep(_) => "x-ferry-namespace {keep}",
            Rule::Required(_) => "empty",
            Rule::Host(_) => "x-ferry-host",
            Rule::Qualified => "x-ferry-host {short: refuse}",
            Rule::Identity => "x-ferry-identity",
            Rule::Forbid(_) => "x-ferry-forbid",
            Rule::SecretTemplate => "x-ferry-secret-template",
        }
    }

    /// The field rule action of the same meaning, as a policy's `fields` writes it.
    pub fn action(&self) -> &'static str {
        match self {
            Rule::Namespace => "namespace",
            Rule::Ref(_) => "ref",
            Rule::Selector | Rule::PublishedSelector => "selector",
            Rule::NamespaceSelector => "namespaceSelector",
            Rule::Text => "text",
            Rule::OwnerSuper => "owner: super",
            Rule::Drop => "drop",
            Rule::Pattern | Rule::Keep(_) | Rule::Required(_) => "namespace",
            Rule::Host(_) | Rule::Qualified => "host",
            Rule::Identity => "identity",
            Rule::Forbid(_) => "forbid",
            Rule::SecretTemplate => "secretTemplate",
        }
    }

    /// Whether the rule says the value is a name of the tenant's (a namespace, a glob, a host,
    /// an identity), so that `""` among such names is refused.
    pub fn bears_name(&self) -> bool {
        matches!(
            self,
            Rule::Namespace | Rule::Pattern | Rule::Identity | Rule::Host(_)
        )
    }

    /// Whether the rule says the value holds a namespace (or embeds one), which up is one of
    /// the tenant's or redacted.
    pub fn bears_namespace(&self) -> bool {
        matches!(
            self,
            Rule::Namespace
                | Rule::Pattern
                | Rule::Identity
                | Rule::Host(Hosts::Service | Hosts::Both)
        )
    }
}

/// A rule and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Annotated {
    /// The rule.
    pub rule: Rule,
    /// `file:line:column` of the annotation.
    pub origin: Location,
    /// The JSONPath of the policy's field rule it came from; `None` for a schema annotation.
    pub jsonpath: Option<String>,
}

impl Annotated {
    /// A rule written as a schema annotation at `origin`.
    pub fn new(rule: Rule, origin: Location) -> Self {
        Self {
            rule,
            origin,
            jsonpath: None,
        }
    }

    /// The rule and where it was written, as `--explain` cites it.
    pub fn describe(&self) -> String {
        match &self.jsonpath {
            None => format!("{} ({})", self.rule.name(), self.origin),
            Some(path) => format!("field rule {path} {} ({})", self.rule.action(), self.origin),
        }
    }
}

/// One field of the compiled plan and the branches below it that lead to rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Rules on this field itself.
    pub rules: Vec<Annotated>,
    /// Named properties.
    pub fields: BTreeMap<String, Node>,
    /// Every element of an array.
    pub items: Option<Box<Node>>,
    /// Every value of a map (`additionalProperties`).
    pub values: Option<Box<Node>>,
    /// The elements of a list whose `key` field equals a literal (a field rule's
    /// `[?@.name=='namespace']`), beside what `items` says of every element.
    pub keyed: BTreeMap<Keyed, Node>,
}

/// A list element chosen by equality of one of its fields with a literal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Keyed {
    /// The element's field.
    pub key: String,
    /// The literal it must equal.
    pub value: String,
}

impl Keyed {
    /// Whether `element` is one this chooses.
    pub fn chooses(&self, element: &serde_json::Value) -> bool {
        element.get(&self.key).and_then(serde_json::Value::as_str) == Some(self.value.as_str())
    }
}

impl std::fmt::Display for Keyed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[?@.{}=={:?}]", self.key, self.value)
    }
}

impl Node {
    /// True when no rule is at or below this node.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.fields.is_empty()
            && self.items.is_none()
            && self.values.is_none()
            && self.keyed.is_empty()
    }

    /// The node of a list element: `items`, merged with every keyed node that chooses it.
    /// Borrowed unless a keyed node applies (rare, and then a clone).
    pub fn element<'n>(
        &'n self,
        element: &serde_json::Value,
    ) -> Option<std::borrow::Cow<'n, Node>> {
        let mut chosen = self.keyed.iter().filter(|(k, _)| k.chooses(element));
        let Some((_, first)) = chosen.next() else {
            return self.items.as_deref().map(std::borrow::Cow::Borrowed);
        };
        let mut merged = self.items.as_deref().cloned().unwrap_or_default();
        merged.merge(first.clone());
        for (_, node) in chosen {
            merged.merge(node.clone());
        }
        Some(std::borrow::Cow::Owned(merged))
    }

    /// Whether `value` is one of the literals a `keep` on this node lets pass unchanged.
    pub fn kept(&self, value: &serde_json::Value) -> bool {
        let Some(text) = value.as_str() else {
            return false;
        };
        self.rules
            .iter()
            .any(|a| matches!(&a.rule, Rule::Keep(keep) if keep.iter().any(|k| k == text)))
    }

    /// Whether a rule matching `pred` is on this node or below it.
    pub fn leads_to(&self, pred: &impl Fn(&Rule) -> bool) -> bool {
        self.has(pred)
            || self.fields.values().any(|n| n.leads_to(pred))
            || self.items.as_ref().is_some_and(|n| n.leads_to(pred))
            || self.values.as_ref().is_some_and(|n| n.leads_to(pred))
            || self.keyed.values().any(|n| n.leads_to(pred))
    }

    /// Whether a rule of this variant is on this node.
    pub fn has(&self, pred: impl Fn(&Rule) -> bool) -> bool {
        self.rules.iter().any(|a| pred(&a.rule))
    }

    /// Merges `other` into `self` (for `allOf`/`anyOf`/`oneOf` branches).
    pub fn merge(&mut self, other: Node) {
        for rule in other.rules {
            if !self.rules.iter().any(|r| r.rule == rule.rule) {
                self.rules.push(rule);
            }
        }
        for (k, v) in other.fields {
            self.fields.entry(k).or_default().merge(v);
        }
        merge_boxed(&mut self.items, other.items);
        merge_boxed(&mut self.values, other.values);
        for (k, v) in other.keyed {
            self.keyed.entry(k).or_default().merge(v);
        }
    }

    /// Every rule in the plan with its field path (`spec.items[*].name`, `spec.labels.*`).
    pub fn walk<'a>(&'a self, path: &str, out: &mut Vec<(String, &'a Annotated)>) {
        for rule in &self.rules {
            out.push((path.to_string(), rule));
        }
        let join = |seg: &str| {
            if path.is_empty() {
                seg.to_string()
            } else {
                format!("{path}.{seg}")
            }
        };
        for (k, v) in &self.fields {
            v.walk(&join(k), out);
        }
        if let Some(items) = &self.items {
            items.walk(&format!("{path}[*]"), out);
        }
        if let Some(values) = &self.values {
            values.walk(&join("*"), out);
        }
        for (keyed, node) in &self.keyed {
            node.walk(&format!("{path}{keyed}"), out);
        }
    }
}

fn merge_boxed(into: &mut Option<Box<Node>>, from: Option<Box<Node>>) {
    match (into.as_mut(), from) {
        (Some(a), Some(b)) => a.merge(*b),
        (None, Some(b)) => *into = Some(b),
        _ => {}
    }
}

/// The compiled annotations of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The schema file the plan came from (empty for a kind without schema).
    pub file: String,
    /// The object's root.
    pub root: Node,
    /// Fields the schema knows, as paths (`spec.hosts[*]`, `spec.labels.*`), for
    /// `ferry check --against`.
    pub known_paths: Vec<String>,
    /// Fields with `x-kubernetes-preserve-unknown-fields: true`: anything below them exists.
    pub open_paths: Vec<String>,
    /// Unannotated string fields whose names suggest a namespace or a reference.
    pub suspicious: Vec<(String, Location)>,
    /// The resource name (`databases`), when the schema is a CRD.
    pub plural: Option<String>,
    /// Whether the CRD version has the status subresource.
    pub has_status_subresource: bool,
    /// The CRD's `spec.scope` (`Namespaced` or `Cluster`), when the schema is a CRD.
    pub crd_scope: Option<String>,
    /// Whether any field is `x-ferry-text` (translating up then needs the tenant's
    /// namespaces).
    pub has_text: bool,
    /// Likely mistakes found while compiling (an `x-ferry-namespace` with a schema
    /// `default`, a namespace field in a reference without `namespaceField`), for
    /// `ferry check`: where, and what to do.
    pub warnings: Vec<(Location, String)>,
}

/// How a tenant object's status is written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusRoute {
    /// Through the status subresource (the CRD declares one).
    Subresource,
    /// With the object (the CRD has a status but no subresource, as Argo CD's Application).
    Object,
    /// No CRD tells (a built-in kind, a kind approved without a schema file, an OpenAPI
    /// document): live, whatever the serving cluster's discovery says; `ferry rbac` grants the
    /// subresource, which every built-in kind with a status and most CRDs have.
    Served,
    /// The CRD has no status at all.
    None,
}

impl Plan {
    /// How status flows up for this kind; `ferry rbac` grants from it, and `ferry run`
    /// follows discovery, which agrees wherever a CRD is given.
    pub fn status_route(&self) -> StatusRoute {
        if self.plural.is_none() {
            StatusRoute::Served
        } else if self.has_status_subresource {
            StatusRoute::Subresource
        } else if self.known_paths.iter().any(|p| p == "status") {
            StatusRoute::Object
        } else {
            StatusRoute::None
        }
    }

    /// Whether `path` is a field of this schema: declared, or below a field that preserves
    /// unknown fields.
    pub fn knows(&self, path: &str) -> bool {
        path.is_empty()
            || self.known_paths.iter().any(|p| p == path)
            || self.open_paths.iter().any(|open| {
                open.is_empty()
                    || path
                        .strip_prefix(open.as_str())
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
            })
    }

    /// Whether translating down needs the tenant's namespaces: a list that becomes them
    /// when empty (`empty: tenant`).
    pub fn fills_namespaces(&self) -> bool {
        self.root
            .leads_to(&|r| matches!(r, Rule::Required(Empty::Tenant)))
    }

    /// Every rule with its field path.
    pub fn rules(&self) -> Vec<(String, &Annotated)> {
        let mut out = Vec::new();
        self.root.walk("", &mut out);
        out
    }
}
