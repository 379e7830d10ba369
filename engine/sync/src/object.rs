//! Reading objects as JSON: their metadata, and the ownership metadata ferry puts on what it
//! writes (read by `ferry_core::keys::Ownership`, beside the keys; `OwnershipKey` here
//! against the live engine's keys).
//!
//! ```text
//!  super copy     label ferry.dev/tenant + annotations tenant-namespace, tenant-name, tenant-uid
//!  super namespace label ferry.dev/tenant + annotations tenant-namespace, tenant-cluster
//!  tenant copy    label ferry.dev/from-super=true (of a public super object)
//! ```

use std::sync::Arc;

pub use ferry_core::keys::{managed_by_ferry, Ownership, FIELD_MANAGER};

use serde_json::{Map, Value};

use crate::key::{Key, Kind};

/// `metadata.<key>` as a string.
pub fn meta_str<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object.get("metadata")?.get(key)?.as_str()
}

/// `metadata.resourceVersion`, or empty.
pub fn rv(object: &Value) -> &str {
    meta_str(object, "resourceVersion").unwrap_or("")
}

/// `metadata.uid`, or empty.
pub fn uid(object: &Value) -> &str {
    meta_str(object, "uid").unwrap_or("")
}

/// A label's value.
pub fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object.get("metadata")?.get("labels")?.get(key)?.as_str()
}

/// An annotation's value.
pub fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
}

/// Whether the object is being deleted.
pub fn deleting(object: &Value) -> bool {
    object
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
}

/// Sets an annotation.
pub fn set_annotation(object: &mut Value, key: &str, value: String) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(a) = annotations {
        a.insert(key.to_string(), Value::String(value));
    }
}

/// An object's place in a cache: namespace (empty when cluster-scoped) and name.
pub type ObjKey = (String, String);

/// The cache key of an object.
pub fn key_of(object: &Value) -> Option<ObjKey> {
    let meta = object.get("metadata")?;
    let name = meta.get("name")?.as_str()?.to_string();
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Some((namespace, name))
}

/// An object to delete, as decided on: its uid and resourceVersion are the delete's
/// preconditions (a changed object is decided again).
#[derive(Clone, Debug, PartialEq)]
pub struct Doomed {
    /// Its uid.
    pub uid: String,
    /// Its resourceVersion as decided on.
    pub version: String,
}

impl Doomed {
    /// `object`, to be deleted as it is.
    pub fn of(object: &Value) -> Self {
        Self {
            uid: uid(object).to_string(),
            version: rv(object).to_string(),
        }
    }
}

/// [`Ownership`] against the live engine's keys.
pub trait OwnershipKey {
    /// Whether a super object is ferry's copy of `key`'s tenant object: ferry wrote it, and
    /// its ownership metadata names the object.
    fn is_copy_of(&self, key: &Key, namespaced: bool) -> bool;
    /// The key of the tenant object a super object (copy or namespace) was made for.
    fn key(&self, kind: Kind, namespaced: bool) -> Option<Key>;
}

impl OwnershipKey for Ownership<'_> {
    fn is_copy_of(&self, key: &Key, namespaced: bool) -> bool {
        let named = (key.namespace.as_str(), key.name.as_str());
        self.names_object(&key.tenant, named, namespaced)
    }

    fn key(&self, kind: Kind, namespaced: bool) -> Option<Key> {
        let tenant: Arc<str> = self.tenant?.into();
        let (namespace, name) = match kind {
            Kind::Namespace => ("", self.namespace?),
            Kind::Resource(_) if namespaced => (self.namespace?, self.name?),
            Kind::Resource(_) => ("", self.name?),
        };
        Some(Key::new(&tenant, kind, namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn super_objects_name_their_tenant_object() {
        let mut copy = json!({"metadata": {
            "name": "orders", "namespace": "team-a-shop",
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {"ferry.dev/tenant-namespace": "shop", "ferry.dev/tenant-name": "orders"},
        }});
        let key = Ownership::of(&copy)
            .key(Kind::Resource(crate::key::EntryId(3)), true)
            .unwrap();
        assert_eq!(key.to_string(), "team-a/shop/orders");
        // The same metadata stamped by another writer (a controller's template) is not ferry's.
        assert!(!Ownership::of(&copy).is_copy_of(&key, true));
        copy["metadata"]["managedFields"] =
            json!([{"manager": "external-secrets"}, {"manager": "ferry"}]);
        let owner = Ownership::of(&copy);
        assert!(owner.is_copy_of(&key, true));
        let other = Key::new(
            &"team-b".into(),
            Kind::Resource(crate::key::EntryId(3)),
            "shop",
            "orders",
        );
        assert!(!owner.is_copy_of(&other, true));
        let namespace = json!({"metadata": {
            "name": "team-a-shop",
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {"ferry.dev/tenant-namespace": "shop"},
        }});
        let owner = Ownership::of(&namespace);
        assert_eq!(
            owner.key(Kind::Namespace, false).unwrap().to_string(),
            "team-a/shop"
        );
        // Not ferry's: no key, so nothing is ever queued for it.
        let foreign = json!({"metadata": {"name": "x"}});
        assert!(Ownership::of(&foreign)
            .key(Kind::Resource(crate::key::EntryId(3)), true)
            .is_none());
    }
}
