//! Metadata rules (DESIGN.md "Metadata" and "Naming"): what ferry keeps, rewrites, adds and
//! strips on the way down and up.

use crate::keys::{
    ANN_SUPER_UID, ANN_TENANT_NAME, ANN_TENANT_NAMESPACE, ANN_TENANT_UID, LABEL_FROM_SUPER,
    LABEL_TENANT, RESERVED_PREFIX,
};
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{join, Change, Reason, Refusal, Result};
use crate::naming::{dns_label_problem, dns_subdomain_problem, NameMap};
use crate::policy::{Annotations, Resource, Scope};

/// Holds the whole last-applied object, including fields that must not leave the tenant.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The namespace a namespaced object without one is read in, as kubectl does.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One label of the object, read in place.
pub fn label<'v>(obj: &'v Map<String, Value>, key: &str) -> Option<&'v str> {
    obj.get("metadata")?.get("labels")?.get(key)?.as_str()
}

/// The object's labels as strings.
pub fn labels(obj: &Map<String, Value>) -> BTreeMap<String, String> {
    string_map(obj.get("metadata").and_then(|m| m.get("labels")))
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Records a change when explaining; the arguments are evaluated only then.
macro_rules! record {
    ($changes:expr, $path:expr, $before:expr, $after:expr, $rule:expr) => {
        if let Some(changes) = $changes.as_deref_mut() {
            changes.push(Change {
                path: String::from($path),
                before: $before,
                after: $after,
                rule: $rule.to_string(),
            });
        }
    };
}

fn text<'v>(m: &'v Map<String, Value>, key: &str) -> Option<&'v str> {
    m.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Copies labels or annotations, leaving out ferry's reserved keys and the last-applied
/// configuration, and recording what it left out.
fn copy_user_keys(
    from: Option<Value>,
    field: &str,
    changes: &mut Option<&mut Vec<Change>>,
) -> Map<String, Value> {
    let Some(Value::Object(from)) = from else {
        return Map::new();
    };
    let mut out = Map::with_capacity(from.len() + 3);
    for (k, v) in from {
        if k.starts_with(RESERVED_PREFIX) {
            record!(changes, join(&format!("metadata.{field}"), &k), Some(v), None,
                "metadata: ferry.dev/ keys are ferry's; an object cannot set them (ownership cannot be forged)");
        } else if k == LAST_APPLIED {
            record!(changes, join(&format!("metadata.{field}"), &k), Some(v), None,
                "metadata: the last-applied configuration would carry fields that must not leave their side");
        } else {
            out.insert(k, v);
        }
    }
    out
}

/// Leaves out the tenant annotations the policy does not let cross with `resource` (for a
/// dependency, by default, all of them: super-side controllers act on annotations).
fn allowed_only(
    annotations: &mut Map<String, Value>,
    resource: &Resource,
    changes: &mut Option<&mut Vec<Change>>,
) {
    if resource.annotations == Annotations::All {
        return;
    }
    annotations.retain(|key, value| {
        let keep = resource.annotations.allows(key);
        if !keep {
            record!(
                changes,
                join("metadata.annotations", key),
                Some(value.clone()),
                None,
                format!(
                    "policy: {} ({} at {})",
                    resource.annotations.why_not(),
                    resource.group_kind,
                    resource.at
                )
            );
        }
        keep
    });
}

fn insert(
    map: &mut Map<String, Value>,
    field: &str,
    key: &str,
    value: String,
    changes: &mut Option<&mut Vec<Change>>,
    rule: &str,
) {
    record!(
        changes,
        join(&format!("metadata.{field}"), key),
        None,
        Some(Value::String(value.clone())),
        rule
    );
    map.insert(key.to_string(), Value::String(value));
}

/// A tenant object's name, checked to be an object name.
fn object_name(meta: &Map<String, Value>) -> Result<String> {
    let name = match meta.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            return Err(Refusal::new(
                Reason::Invalid,
                "metadata.name is empty (objects created with generateName are synced once the API server has named them)",
            ))
        }
        Some(other) => {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("metadata.name: expected a string, found {other}"),
            ))
        }
    };
    if let Some(why) = dns_subdomain_problem(&name) {
        return Err(Refusal::new(
            Reason::Invalid,
            format!("metadata.name: {name:?} is not a valid Kubernetes object name: {why}"),
        ));
    }
    Ok(name)
}

/// What a copy's ownership annotations say of the tenant object.
struct Own<'a> {
    namespace: Option<String>,
    name: &'a str,
    uid: Option<String>,
}

/// A copy's annotations: the tenant object's own (`from`, as the policy allows), then ferry's
/// ownership annotations.
fn annotations_down(
    from: Option<Value>,
    resource: &Resource,
    own: Own<'_>,
    changes: &mut Option<&mut Vec<Change>>,
) -> Map<String, Value> {
    let mut annotations = copy_user_keys(from, "annotations", changes);
    allowed_only(&mut annotations, resource, changes);
    if let Some(ns) = own.namespace {
        insert(
            &mut annotations,
            "annotations",
            ANN_TENANT_NAMESPACE,
            ns,
            changes,
            "metadata: ownership annotation",
        );
    }
    insert(
        &mut annotations,
        "annotations",
        ANN_TENANT_NAME,
        own.name.to_string(),
        changes,
        "metadata: ownership annotation",
    );
    if let Some(uid) = own.uid {
        insert(
            &mut annotations,
            "annotations",
            ANN_TENANT_UID,
            uid,
            changes,
            "metadata: ownership annotation",
        );
    }
    annotations
}

/// Rewrites the metadata of a tenant object for the super cluster and drops its status.
pub fn down(
    obj: &mut Map<String, Value>,
    resource: &Resource,
    names: &NameMap,
    mut changes: Option<&mut Vec<Change>>,
) -> Result<()> {
    let mut meta = match obj.get_mut("metadata") {
        Some(Value::Object(m)) => std::mem::take(m),
        _ => {
            return Err(Refusal::new(
                Reason::Invalid,
                "metadata: expected an object with a name",
            ))
        }
    };
    let name = object_name(&meta)?;
    let tenant = names.tenant().as_str();
    let mut out = Map::new();
    let name = name.as_str();
    let namespace = match resource.scope {
        Scope::Namespaced => Some(tenant_namespace(&meta)?),
        Scope::Cluster => None,
    };
    let (super_ns, super_name) =
        resource.super_key(names, namespace.as_deref().unwrap_or(""), name);
    if super_name != name {
        record!(
            changes,
            "metadata.name",
            Some(name.into()),
            Some(super_name.clone().into()),
            match resource.placement {
                Some(_) => "naming: copies in the operator's namespace are named map(tenant, namespace-name)",
                None => "naming: cluster-scoped tenant objects are renamed map(tenant, name)",
            }
        );
    }
    out.insert("name".into(), Value::String(super_name));
    if namespace.is_some() {
        record!(
            changes,
            "metadata.namespace",
            meta.get("namespace").cloned(),
            Some(super_ns.clone().into()),
            match resource.placement {
                Some(_) => "naming: placement.namespace (the operator's namespace)",
                None => "naming: super namespace map(tenant, namespace)",
            }
        );
        out.insert("namespace".into(), Value::String(super_ns));
    } else if let Some(ns) = meta.get("namespace") {
        record!(
            changes,
            "metadata.namespace",
            Some(ns.clone()),
            None,
            "naming: cluster-scoped objects have no namespace"
        );
    }
    let mut labels = copy_user_keys(meta.remove("labels"), "labels", &mut changes);
    insert(
        &mut labels,
        "labels",
        LABEL_TENANT,
        tenant.to_string(),
        &mut changes,
        "metadata: ownership label",
    );
    out.insert("labels".into(), Value::Object(labels));
    let own = Own {
        namespace,
        name,
        uid: text(&meta, "uid").map(str::to_string),
    };
    let annotations = annotations_down(meta.remove("annotations"), resource, own, &mut changes);
    out.insert("annotations".into(), Value::Object(annotations));
    for (k, v) in meta {
        if !matches!(k.as_str(), "name" | "namespace") {
            record!(
                changes,
                format!("metadata.{k}"),
                Some(v),
                None,
                "metadata: set by each API server, never copied"
            );
        }
    }
    if let Some(slot) = obj.get_mut("metadata") {
        *slot = Value::Object(out);
    }
    if let Some(status) = obj.remove("status") {
        record!(
            changes,
            "status",
            Some(status),
            None,
            "metadata: status never goes down"
        );
    }
    Ok(())
}

/// A namespaced tenant object's namespace (`default` when absent, as kubectl reads it),
/// checked to be a namespace name.
fn tenant_namespace(meta: &Map<String, Value>) -> Result<String> {
    let ns = match meta.get("namespace") {
        None | Some(Value::Null) => DEFAULT_NAMESPACE,
        Some(Value::String(s)) if s.is_empty() => DEFAULT_NAMESPACE,
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("metadata.namespace: expected a string, found {other}"),
            ))
        }
    };
    if let Some(why) = dns_label_problem(ns) {
        return Err(Refusal::new(
            Reason::Invalid,
            format!("metadata.namespace: {ns:?} is not a Kubernetes namespace name: {why}"),
        ));
    }
    Ok(ns.to_string())
}

/// The tenant fragment of a super object of a toSuper kind: apiVersion, kind, the tenant's
/// name and namespace, status and the super-owned fields, still mapped (the field rules unmap
/// them next). Refuses an object that is not this tenant's.
pub fn up(
    obj: &Map<String, Value>,
    resource: &Resource,
    names: &mut NameMap,
    mut changes: Option<&mut Vec<Change>>,
) -> Result<Value> {
    let tenant = names.tenant().as_str().to_string();
    let empty = Map::new();
    let meta = obj
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let owner = labels(obj).get(LABEL_TENANT).cloned();
    if owner.as_deref() != Some(tenant.as_str()) {
        return Err(Refusal::new(
            Reason::SyncConflict,
            match owner {
                Some(other) => {
                    format!("the super object belongs to tenant {other:?}, not {tenant:?}")
                }
                None => {
                    format!("the super object has no {LABEL_TENANT} label: ferry does not own it")
                }
            },
        ));
    }
    let annotations = string_map(meta.get("annotations"));
    let super_name = text(meta, "name").unwrap_or("");
    let placed = placed_key(resource, names, meta, &annotations)?;
    let name = match (resource.scope, annotations.get(ANN_TENANT_NAME)) {
        _ if placed.is_some() => placed.clone().map(|(_, n)| n).unwrap_or_default(),
        (Scope::Namespaced, _) => super_name.to_string(),
        (Scope::Cluster, Some(n)) if names.to_super(n) == super_name => n.clone(),
        (Scope::Cluster, _) => names.to_tenant(super_name).ok_or_else(|| {
            Refusal::new(
                Reason::SyncConflict,
                format!("super name {super_name:?} is not a name of tenant {tenant:?}"),
            )
        })?,
    };
    let mut out = Map::new();
    out.insert(
        "apiVersion".into(),
        obj.get("apiVersion").cloned().unwrap_or(Value::Null),
    );
    out.insert(
        "kind".into(),
        obj.get("kind").cloned().unwrap_or(Value::Null),
    );
    let mut tenant_meta = Map::new();
    if name != super_name {
        record!(
            changes,
            "metadata.name",
            Some(super_name.into()),
            Some(name.clone().into()),
            match placed {
                Some(_) => "naming: the tenant name of a copy in the operator's namespace (ferry.dev/tenant-name)",
                None => "naming: the tenant name of a renamed cluster-scoped object",
            }
        );
    }
    tenant_meta.insert("name".into(), Value::String(name));
    if resource.scope == Scope::Namespaced {
        let super_ns = text(meta, "namespace").unwrap_or("");
        let ns = match annotations.get(ANN_TENANT_NAMESPACE) {
            _ if placed.is_some() => placed.map(|(ns, _)| ns).unwrap_or_default(),
            Some(ns) if names.to_super(ns) == super_ns => ns.clone(),
            Some(ns) => {
                return Err(Refusal::new(
                    Reason::SyncConflict,
                    format!("annotation {ANN_TENANT_NAMESPACE}={ns:?} does not map to the object's namespace {super_ns:?}"),
                ))
            }
            None => names.to_tenant(super_ns).ok_or_else(|| {
                Refusal::new(Reason::SyncConflict, format!("super namespace {super_ns:?} is not a namespace of tenant {tenant:?}"))
            })?,
        };
        names.learn(&ns);
        record!(
            changes,
            "metadata.namespace",
            Some(super_ns.into()),
            Some(ns.clone().into()),
            match resource.placement {
                Some(_) => "naming: the tenant namespace of a copy in the operator's namespace (ferry.dev/tenant-namespace)",
                None => "naming: the tenant namespace of the super namespace",
            }
        );
        tenant_meta.insert("namespace".into(), Value::String(ns));
    }
    out.insert("metadata".into(), Value::Object(tenant_meta));
    if let Some(status) = obj.get("status") {
        out.insert("status".into(), status.clone());
    }
    copy_owned(&resource.plan.root, obj, &mut out, "", &mut changes);
    Ok(Value::Object(out))
}

/// The tenant namespace and name of a copy in the operator's namespace (a resource's
/// `placement`): its ownership annotations, which must name exactly where it is.
fn placed_key(
    resource: &Resource,
    names: &NameMap,
    meta: &Map<String, Value>,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<(String, String)>> {
    if resource.placement.is_none() {
        return Ok(None);
    }
    let at = (
        text(meta, "namespace").unwrap_or("").to_string(),
        text(meta, "name").unwrap_or("").to_string(),
    );
    match (
        annotations.get(ANN_TENANT_NAMESPACE),
        annotations.get(ANN_TENANT_NAME),
    ) {
        (Some(ns), Some(name)) if resource.super_key(names, ns, name) == at => {
            Ok(Some((ns.clone(), name.clone())))
        }
        _ => Err(Refusal::new(
            Reason::SyncConflict,
            format!(
                "super object {}/{} is not where ferry puts a copy of tenant {}'s object its {ANN_TENANT_NAMESPACE} and {ANN_TENANT_NAME} annotations name",
                at.0,
                at.1,
                names.tenant()
            ),
        )),
    }
}

/// What [`up`] reads of a super copy of `resource`: its type, metadata, status and
/// `x-ferry-owner: super` fields. A copy reduced to these translates up the same.
pub fn flowing_up(resource: &Resource, obj: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for key in ["apiVersion", "kind", "metadata", "status"] {
        if let Some(v) = obj.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    copy_owned(&resource.plan.root, obj, &mut out, "", &mut None);
    out
}

/// Copies every `x-ferry-owner: super` field of `from` into `to` at the same path.
fn copy_owned(
    node: &crate::schema::Node,
    from: &Map<String, Value>,
    to: &mut Map<String, Value>,
    path: &str,
    changes: &mut Option<&mut Vec<Change>>,
) {
    for (key, child) in &node.fields {
        let Some(value) = from.get(key) else { continue };
        let child_path = join(path, key);
        if child.has(|r| matches!(r, crate::schema::Rule::OwnerSuper)) {
            if path.is_empty() && key == "status" {
                continue;
            }
            record!(
                changes,
                child_path,
                None,
                Some(value.clone()),
                "x-ferry-owner: super (flows up like status)"
            );
            to.insert(key.clone(), value.clone());
        } else if let Value::Object(inner) = value {
            let mut sub = match to.remove(key) {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            copy_owned(child, inner, &mut sub, &child_path, changes);
            if !sub.is_empty() {
                to.insert(key.clone(), Value::Object(sub));
            }
        }
    }
}

/// The read-only tenant copy of a public super object.
pub fn from_super(
    obj: &Map<String, Value>,
    mut changes: Option<&mut Vec<Change>>,
) -> Map<String, Value> {
    let mut out = obj.clone();
    let empty = Map::new();
    let meta = obj
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut tenant_meta = Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = meta.get(key) {
            tenant_meta.insert(key.into(), v.clone());
        }
    }
    let mut labels = copy_user_keys(meta.get("labels").cloned(), "labels", &mut changes);
    insert(
        &mut labels,
        "labels",
        LABEL_FROM_SUPER,
        "true".into(),
        &mut changes,
        "metadata: marks a read-only copy from the super cluster",
    );
    tenant_meta.insert("labels".into(), Value::Object(labels));
    let mut annotations = copy_user_keys(
        meta.get("annotations").cloned(),
        "annotations",
        &mut changes,
    );
    if let Some(uid) = text(meta, "uid") {
        insert(
            &mut annotations,
            "annotations",
            ANN_SUPER_UID,
            uid.to_string(),
            &mut changes,
            "metadata: the super object this copy follows",
        );
    }
    if !annotations.is_empty() {
        tenant_meta.insert("annotations".into(), Value::Object(annotations));
    }
    for (k, v) in meta {
        if !matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations") {
            record!(
                changes,
                format!("metadata.{k}"),
                Some(v.clone()),
                None,
                "metadata: set by each API server, never copied"
            );
        }
    }
    out.insert("metadata".into(), Value::Object(tenant_meta));
    out
}
