//! The guard's check of what flows up into a tenant: only status and super-owned fields for a
//! tenant's own object, ferry's metadata exactly on a public copy.

use crate::keys::{ANN_PRODUCED_FOR, ANN_SUPER_UID, LABEL_FROM_SUPER, RESERVED_PREFIX};
use serde_json::{Map, Value};

use super::{map_keys, nested, number, shown, string_map, Guard, DOWN_METADATA};
use crate::naming::dns_label_problem;
use crate::policy::Resource;
use crate::schema::{Node, Rule};
use crate::translate::path::Path;
use crate::translate::Reason;
use crate::translate::Result;

impl Guard<'_> {
    /// Checks what flows up into a tenant for a toSuper kind: apiVersion, kind, the tenant
    /// name and namespace, status and the `x-ferry-owner: super` fields, nothing else.
    pub fn up(&self, resource: &Resource, object: &Value) -> Result<()> {
        let Value::Object(top) = object else {
            return Err(self.refuse("what flows up is not an object".into()));
        };
        numbers(object, &Path::Root)?;
        let root = Path::Root;
        for (key, value) in top {
            let path = root.key(key);
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    let Value::Object(meta) = value else {
                        return Err(self.refuse("metadata: expected an object".into()));
                    };
                    if let Some(k) = meta
                        .keys()
                        .find(|k| !matches!(k.as_str(), "name" | "namespace"))
                    {
                        return Err(self.refuse(format!(
                            "metadata.{k}: only status and x-ferry-owner: super fields flow up into a tenant"
                        )));
                    }
                }
                _ => owned_only(resource.plan.root.fields.get(key), value, &path)
                    .map_err(|m| self.refuse(m))?,
            }
        }
        self.up_names(&resource.plan.root, object, None, &root)
    }

    /// Checks a read-only copy of a public object about to be written into a tenant.
    pub fn public_copy(&self, resource: &Resource, object: &Value) -> Result<()> {
        self.read_only_copy(object, &[ANN_SUPER_UID])?;
        self.up_names(&resource.plan.root, object, None, &Path::Root)
    }

    /// Checks a read-only copy of an object produced for a tenant's object: a public copy's
    /// metadata, plus what it was produced for, in one of the tenant's namespaces.
    pub fn produced_copy(&self, resource: &Resource, object: &Value) -> Result<()> {
        self.read_only_copy(object, &[ANN_SUPER_UID, ANN_PRODUCED_FOR])?;
        self.up_names(&resource.plan.root, object, None, &Path::Root)?;
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
        if let Some(why) = dns_label_problem(namespace) {
            return Err(self.refuse(format!(
                "metadata.namespace: a produced copy lands in a tenant namespace, found {namespace:?} ({why})"
            )));
        }
        Ok(())
    }

    /// A read-only copy carrying ferry's annotations `annotations` and no other ferry.dev/ key.
    fn read_only_copy(&self, object: &Value, allowed_annotations: &[&str]) -> Result<()> {
        numbers(object, &Path::Root)?;
        if let Value::Object(top) = object {
            self.credential(top)?;
        }
        let Some(Value::Object(meta)) = object.get("metadata") else {
            return Err(self.refuse("metadata: expected an object".into()));
        };
        if let Some(key) = meta.keys().find(|k| !DOWN_METADATA.contains(&k.as_str())) {
            return Err(self.refuse(format!(
                "metadata.{key}: a public copy carries only name, namespace, labels and annotations"
            )));
        }
        let empty = Map::new();
        let labels = string_map(meta, "labels")?.unwrap_or(&empty);
        let annotations = string_map(meta, "annotations")?.unwrap_or(&empty);
        if labels.get(LABEL_FROM_SUPER).and_then(Value::as_str) != Some("true") {
            return Err(self.refuse(format!(
                "metadata.labels[{LABEL_FROM_SUPER:?}]: a public copy is marked \"true\""
            )));
        }
        for (field, keys, allowed) in [
            ("labels", labels, &[LABEL_FROM_SUPER][..]),
            ("annotations", annotations, allowed_annotations),
        ] {
            if let Some(key) = keys
                .keys()
                .find(|k| k.starts_with(RESERVED_PREFIX) && !allowed.contains(&k.as_str()))
            {
                return Err(self.refuse(format!(
                    "metadata.{field}[{key:?}]: ferry.dev/ keys are ferry's (ownership cannot be forged)"
                )));
            }
        }
        Ok(())
    }
}

/// Every number in `value`, its depth and its maps' keys.
fn numbers(value: &Value, path: &Path<'_>) -> Result<()> {
    nested(value, path, Reason::Invalid)?;
    match value {
        Value::Number(n) => number(n, path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| numbers(v, &path.index(i))),
        Value::Object(map) => {
            map_keys(map, path, Reason::Invalid)?;
            map.iter().try_for_each(|(k, v)| numbers(v, &path.key(k)))
        }
        _ => Ok(()),
    }
}

/// Whether everything in `value` (at `path`, under plan `node`) is an `x-ferry-owner: super`
/// field or on the way to one; the message says what is not.
fn owned_only(
    node: Option<&Node>,
    value: &Value,
    path: &Path<'_>,
) -> std::result::Result<(), String> {
    let owner = |r: &Rule| matches!(r, Rule::OwnerSuper);
    match node {
        Some(n) if n.has(owner) => Ok(()),
        Some(n) if n.leads_to(&owner) => {
            let Value::Object(map) = value else {
                return Err(format!("{path}: only x-ferry-owner: super fields flow up, found {}", shown(value)));
            };
            for (k, v) in map {
                owned_only(n.fields.get(k).or(n.values.as_deref()), v, &path.key(k))?;
            }
            Ok(())
        }
        _ => Err(format!(
            "{path}: only status and x-ferry-owner: super fields flow up into a tenant (a transform's to_tenant may not write anything else)"
        )),
    }
}
