//! Read-only tenant copies beyond a public copy's metadata: an object a super-side controller
//! produced for a tenant's object (in the tenant namespace its super namespace maps to, with
//! what it was produced for), and a public CustomResourceDefinition (no conversion webhook,
//! which a tenant could not reach).

use crate::keys::ANN_PRODUCED_FOR;
use serde_json::{Map, Value};

use super::{metadata, Change, Reason, Refusal, Result};
use crate::naming::NameMap;
use crate::policy::Policy;

/// The copy of `obj` (in one of the tenant's super namespaces) for the tenant `names` maps;
/// `producer` is what it was produced for (`<group>/<Kind>/<name>`), else read from the
/// object's controller ownerReference.
pub fn produced(
    obj: &Map<String, Value>,
    (names, policy): (&NameMap, &Policy),
    producer: Option<&str>,
    mut changes: Option<&mut Vec<Change>>,
) -> Result<Map<String, Value>> {
    let super_ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let Some(namespace) = names.to_tenant(super_ns) else {
        return Err(Refusal::new(
            Reason::NotSelected,
            format!(
                "metadata.namespace: {super_ns:?} is not a super namespace of tenant {}; what is produced there is not the tenant's",
                names.tenant()
            ),
        ));
    };
    let mut out = metadata::from_super(obj, changes.as_deref_mut());
    let owner = controller(obj, names, policy);
    let producer = producer.map(str::to_string).or(owner);
    let meta = out
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .expect("from_super writes metadata");
    let mut record = |path: &str, before: Option<Value>, after: Option<Value>, rule: &str| {
        if let Some(changes) = changes.as_deref_mut() {
            changes.push(Change {
                path: path.to_string(),
                before,
                after,
                rule: rule.to_string(),
            });
        }
    };
    record(
        "metadata.namespace",
        Some(Value::String(super_ns.to_string())),
        Some(Value::String(namespace.clone())),
        "naming: the tenant namespace of the super namespace",
    );
    meta.insert("namespace".into(), Value::String(namespace));
    match producer {
        Some(producer) => {
            record(
                &format!("metadata.annotations[{ANN_PRODUCED_FOR:?}]"),
                None,
                Some(Value::String(producer.clone())),
                "metadata: the tenant object it was produced for",
            );
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(annotations) = annotations {
                annotations.insert(ANN_PRODUCED_FOR.into(), Value::String(producer));
            }
        }
        None => record(
            "",
            None,
            None,
            "note: what it is produced for is known live (the tenant object that names it, or whose copy owns it)",
        ),
    }
    Ok(out)
}

/// `<group>/<Kind>/<name>` of the object's controller ownerReference, the name the tenant's
/// (a cluster-scoped owner's copy is renamed `<tenant>-<name>`).
fn controller(obj: &Map<String, Value>, names: &NameMap, policy: &Policy) -> Option<String> {
    let owners = obj.get("metadata")?.get("ownerReferences")?.as_array()?;
    let owner = owners
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
    let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or("");
    let group = crate::schema::load::group_of(text("apiVersion"));
    let renamed = policy
        .resource(group, text("kind"))
        .is_some_and(|r| r.scope == crate::policy::Scope::Cluster);
    let name = match renamed {
        true => names.to_tenant(text("name"))?,
        false => text("name").to_string(),
    };
    Some(format!("{group}/{}/{name}", text("kind")))
}

/// A public CustomResourceDefinition as a tenant gets it: conversion `None` (the super's
/// webhook is out of a tenant's reach; every version is served as stored) and no status (its
/// own API server sets it).
pub fn public_crd(object: &mut Value, mut changes: Option<&mut Vec<Change>>) {
    let Some(top) = object.as_object_mut() else {
        return;
    };
    let none = serde_json::json!({"strategy": "None"});
    if let Some(Value::Object(spec)) = top.get_mut("spec") {
        let before = spec.insert("conversion".into(), none.clone());
        if before.as_ref() != Some(&none) {
            if let Some(changes) = changes.as_deref_mut() {
                changes.push(Change {
                    path: "spec.conversion".into(),
                    before,
                    after: Some(none),
                    rule: "public CRD: no conversion webhook in a tenant".into(),
                });
            }
        }
    }
    if let Some(status) = top.remove("status") {
        if let Some(changes) = changes {
            changes.push(Change {
                path: "status".into(),
                before: Some(status),
                after: None,
                rule: "public CRD: the tenant's API server sets its status".into(),
            });
        }
    }
}
