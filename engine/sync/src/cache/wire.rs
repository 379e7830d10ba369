//! Objects as a watch or a list sends them, parsed straight into the JSON a cache holds: the
//! metadata stays JSON (not decoded into typed metadata and written out again), and of
//! `managedFields` only each entry's manager is read; their field sets, often the size of the
//! object again, are skipped unparsed. Maps and lists more than `READ_DEPTH` levels into the
//! object are read as empty ones, their content skipped unparsed: parsed, one such object
//! would fail the list of its kind (serde_json stops at 128 levels), and the translator
//! refuses an object that deep, so what was not read is never written.

use ferry_core::keys::UNREAD;
use std::borrow::Cow;
use std::fmt;

use ferry_core::translate::{READ_DEPTH, SERDE_JSON_NUMBER, SERDE_JSON_PRIVATE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, Resource};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use super::normalised;

/// The fields of typed metadata (`ObjectMeta`), which keeps no other (`managedFields` apart):
/// an API server newer than ferry's types may send more, and what ferry holds of an object
/// must not depend on whether a watch, a read or the answer to a write brought it.
const METADATA: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// The fields of a typed owner reference.
const OWNER_REFERENCE: &[&str] = &[
    "apiVersion",
    "blockOwnerDeletion",
    "controller",
    "kind",
    "name",
    "uid",
];

/// One object as the API server sent it, but for `managedFields`.
#[derive(Clone, Debug, Default)]
pub struct Wire {
    /// Its resourceVersion alone: what the watcher reads of an object.
    meta: ObjectMeta,
    /// `metadata`: the fields typed metadata has, but `managedFields`, and not null.
    metadata: Map<String, Value>,
    /// The other fields, in the order sent.
    rest: Map<String, Value>,
    /// The manager of each `managedFields` entry (null where an entry names none).
    managers: Option<Vec<Value>>,
}

impl Wire {
    /// The object as typed metadata (a `DynamicObject`) would give it: type first (set from
    /// `resource`; list items of built-in kinds come without it), metadata as typed metadata
    /// writes it (its fields alone, by key, nulls left out), then the rest as sent, and
    /// `managedFields` reduced to the managers on objects labelled `ferry.dev/tenant`,
    /// dropped elsewhere.
    pub fn into_value(self, resource: &ApiResource) -> Value {
        let Wire {
            mut metadata,
            rest,
            managers,
            ..
        } = self;
        metadata.sort_keys();
        if let Some(Value::Array(owners)) = metadata.get_mut("ownerReferences") {
            for owner in owners.iter_mut().filter_map(Value::as_object_mut) {
                owner.retain(|k, v| !v.is_null() && OWNER_REFERENCE.contains(&k.as_str()));
                owner.sort_keys();
            }
        }
        let mut fields = Map::with_capacity(rest.len() + 1);
        fields.insert("metadata".into(), Value::Object(metadata));
        fields.extend(rest);
        Value::Object(normalised(fields, resource, managers))
    }
}

impl Resource for Wire {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de> Deserialize<'de> for Wire {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(Object)
    }
}

/// The object's fields, `metadata` apart.
struct Object;

impl<'de> Visitor<'de> for Object {
    type Value = Wire;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wire, A::Error> {
        let mut wire = Wire::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "metadata" {
                let (metadata, managers) = map.next_value_seed(Metadata)?;
                wire.meta.resource_version = metadata
                    .get("resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                wire.metadata = metadata;
                wire.managers = managers;
            } else if reserved(&key) {
                map.next_value::<IgnoredAny>()?;
                let (key, value) = unread();
                wire.rest.insert(key, value);
            } else {
                let value = map.next_value_seed(Bounded(1))?;
                wire.rest.insert(key, value);
            }
        }
        Ok(wire)
    }
}

/// A value this many keys and indexes into the object, read as serde_json reads a `Value`
/// down to [`READ_DEPTH`]; a map or list deeper is read as an empty one, its content skipped
/// unparsed (serde_json skips without recursing).
#[derive(Clone, Copy)]
struct Bounded(usize);

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        if self.0 > READ_DEPTH {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
        } else {
            while let Some(item) = seq.next_element_seed(Bounded(self.0 + 1))? {
                items.push(item);
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        if self.0 > READ_DEPTH {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        } else {
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value_seed(Bounded(self.0 + 1))?;
                fields.insert(key, value);
            }
        }
        Ok(as_read(fields))
    }
}

/// A map as serde_json's own `Value` would read it where that is safe. serde_json runs with
/// `arbitrary_precision` and `raw_value`: a float or an integer past 64 bits comes as a map of
/// [`SERDE_JSON_NUMBER`] to its text, read here as that number. Any other use of a key serde_json
/// reserves (an object's own, which would be read as something else wherever the object is
/// parsed again) becomes a map of [`UNREAD`] saying so, refused wherever it would be
/// translated or written.
fn as_read(fields: Map<String, Value>) -> Value {
    if !fields.keys().any(|k| reserved(k)) {
        return Value::Object(fields);
    }
    if let (1, Some(Value::String(text))) = (fields.len(), fields.get(SERDE_JSON_NUMBER)) {
        if let Ok(number) = text.parse::<Number>() {
            return Value::Number(number);
        }
    }
    Value::Object(Map::from_iter([unread()]))
}

/// Whether serde_json reserves `key`.
fn reserved(key: &str) -> bool {
    key.starts_with(SERDE_JSON_PRIVATE)
}

/// The [`UNREAD`] entry standing for a key serde_json reserves.
fn unread() -> (String, Value) {
    let why = format!(
        "a key serde_json reserves ({SERDE_JSON_PRIVATE}…), which ferry cannot read as sent"
    );
    (UNREAD.to_string(), Value::String(why))
}

/// `metadata`, with the managers of `managedFields` apart.
struct Metadata;

impl<'de> DeserializeSeed<'de> for Metadata {
    type Value = (Map<String, Value>, Option<Vec<Value>>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Metadata {
    type Value = (Map<String, Value>, Option<Vec<Value>>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata = Map::new();
        let mut managers = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "managedFields" {
                managers = map.next_value_seed(Managers)?;
            } else if METADATA.contains(&key.as_str()) {
                let value = map.next_value::<Value>()?;
                if !value.is_null() {
                    metadata.insert(key, value);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok((metadata, managers))
    }
}

/// `managedFields`: each entry's manager, the rest skipped.
struct Managers;

impl<'de> DeserializeSeed<'de> for Managers {
    type Value = Option<Vec<Value>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Managers {
    type Value = Option<Vec<Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of managedFields entries")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut managers = Vec::new();
        while let Some(manager) = seq.next_element_seed(Manager)? {
            managers.push(manager);
        }
        Ok(Some(managers))
    }
}

/// One `managedFields` entry: its manager (null when it names none).
struct Manager;

impl<'de> DeserializeSeed<'de> for Manager {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Manager {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a managedFields entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut manager = Value::Null;
        while let Some(is_manager) = map.next_key_seed(Named("manager"))? {
            if is_manager {
                manager = map
                    .next_value::<Option<String>>()?
                    .map_or(Value::Null, Value::String);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(manager)
    }
}

/// Whether a key is this one, read without building it.
struct Named(&'static str);

impl<'de> DeserializeSeed<'de> for Named {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for Named {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}
