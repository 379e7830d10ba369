//! Watch caches: one per (cluster, kind), fed by a kube-runtime watcher and read by the
//! reconciler. Objects are kept as compact JSON text without `managedFields` (a parsed value
//! takes several times the memory of its text) and parsed when the reconciler reads them;
//! namespaces, few and read on every reconcile, are held parsed unless large.
//! The caches of a toSuper kind, on both sides, keep an object the reconciler checked reduced
//! to what flows up (`held.rs`): what ferry wrote is known from a digest, and a tenant object
//! is read whole again only when it must be translated.
//!
//! ```text
//!  discovery (retried until served) ─▶ watcher ─▶ Cache ─▶ on_change(object) ─▶ queues
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use kube::api::ApiResource;
use serde_json::Value;

use crate::object::{key_of, rv, ObjKey};

mod feed;
mod held;
mod objects;
mod wire;

pub use feed::{run, Labels, Owned};
pub use held::Reduce;
use held::{Held, HeldRef, Reducer};
use objects::Objects;
pub(crate) use wire::Wire;

/// Called with every object that appeared, changed or went away: the object, or after a list
/// only its metadata (`{"metadata": …}`), which is what routes a change to its key.
pub type OnChange = Arc<dyn Fn(&Value) + Send + Sync>;

/// Where a cache is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Asking the API server whether it serves the kind.
    Resolving,
    /// The API server does not serve the kind (yet); discovery is retried.
    NotServed,
    /// Served; the first list has not completed.
    Listing,
    /// The first list completed; watch events keep the cache current.
    Synced,
}

/// What discovery said about the kind.
#[derive(Clone, Debug)]
pub struct Served {
    /// The resource, for building requests.
    pub resource: ApiResource,
    /// Whether it has a status subresource.
    pub has_status: bool,
}

/// The objects of one kind in one cluster.
pub struct Cache {
    /// For logs: `super Database.example.com`.
    pub what: String,
    objects: RwLock<Objects>,
    /// How its objects are held.
    holding: Holding,
    phase: Mutex<Phase>,
    served: RwLock<Option<Served>>,
    /// The `apiVersion` and `kind` every object of the cache has (known once served): held
    /// once here, not in every object's text.
    kind: std::sync::OnceLock<(Value, Value)>,
    /// Objects the watch saw deleted (by uid) since the last list, so that a write's answer
    /// arriving after the delete does not bring the object back.
    gone: Mutex<HashMap<ObjKey, String>>,
    /// The ownership generation of its last completed list (`Labels::Owned`; 0 otherwise).
    listed: std::sync::atomic::AtomicU64,
}

impl Cache {
    /// An empty cache described as `what` in logs.
    pub fn new(what: String) -> Self {
        Self::reducing(what, None)
    }

    /// An empty cache holding its objects parsed (those of at most [`PARSED_AT_MOST`] bytes
    /// of text): for the few objects read on every reconcile (namespaces).
    pub fn parsed(what: String) -> Self {
        Self::holding(what, Holding::Parsed)
    }

    /// An empty cache that keeps a checked object reduced by `reduce`.
    pub fn reducing(what: String, reduce: Option<Reduce>) -> Self {
        let holding = match reduce {
            Some(reduce) => Holding::Reduced(Reducer::new(reduce)),
            None => Holding::Text,
        };
        Self::holding(what, holding)
    }

    fn holding(what: String, holding: Holding) -> Self {
        Self {
            what,
            objects: RwLock::default(),
            holding,
            phase: Mutex::new(Phase::Resolving),
            served: RwLock::default(),
            kind: std::sync::OnceLock::new(),
            gone: Mutex::default(),
            listed: Default::default(),
        }
    }

    /// The ownership generation its last completed list was made at (`Labels::Owned`).
    pub fn listed_at(&self) -> u64 {
        self.listed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The object at `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get_checked(namespace, name).map(|(value, _)| value)
    }

    /// The object at `namespace`/`name`, and whether it is a copy checked to hold what ferry
    /// applies (see [`Cache::check`]); such a copy is reduced to what flows up.
    pub fn get_checked(&self, namespace: &str, name: &str) -> Option<(Arc<Value>, bool)> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let held = objects.get(namespace, name)?;
        Some((self.decode(namespace, name, held)?, held.checked()))
    }

    /// Records that `object`, as cached, holds what ferry applies: a cache of super copies
    /// then keeps it reduced, and later versions that differ only in what flows up stay
    /// checked. Nothing changes if the cache holds another version by now. Whether the cache
    /// holds this very version checked.
    pub fn check(&self, object: &Value) -> bool {
        let (Holding::Reduced(reducer), Some(key)) = (&self.holding, key_of(object)) else {
            return false;
        };
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        let Some(held) = objects.get(&key.0, &key.1) else {
            return false;
        };
        let same = head(held).is_some_and(|h| {
            h.metadata.uid == crate::object::uid(object)
                && h.metadata.resource_version == rv(object)
        });
        if !same {
            return false;
        }
        if held.checked() {
            return true;
        }
        match reducer.checked(object) {
            Some(held) => {
                objects.insert(&key.0, &key.1, held);
                true
            }
            None => false,
        }
    }

    /// How `object` is to be held at `key`, given what `objects` holds there now; `None`
    /// when that stays as it is (see [`Reducer::hold`]).
    fn hold(&self, objects: &Objects, key: &ObjKey, object: &Value) -> Option<Held> {
        match &self.holding {
            Holding::Reduced(reducer) => reducer.hold(object, objects.get(&key.0, &key.1)),
            Holding::Text => Some(Held::Full(held::encode(object))),
            Holding::Parsed => {
                let text = held::encode(object);
                Some(if text.len() <= PARSED_AT_MOST {
                    Held::Parsed(Arc::new(object.clone()))
                } else {
                    Held::Full(text)
                })
            }
        }
    }

    /// Whether an object is at `namespace`/`name`.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.contains(namespace, name)
    }

    /// Whether any object is in `namespace`.
    pub fn any_in(&self, namespace: &str) -> bool {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.any_in(namespace)
    }

    /// The metadata of every object (`{"metadata": …}`, a parsed object whole), read without
    /// building the rest, a chunk at a time: no lock is held while `f` runs (it may write to
    /// this cache).
    pub fn each_metadata(&self, mut f: impl FnMut(&Value)) {
        let keys = self.keys();
        for chunk in keys.chunks(METADATA_AT_ONCE) {
            let values: Vec<Arc<Value>> = {
                let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
                chunk
                    .iter()
                    .filter_map(|(ns, name)| self.metadata_of(ns, name, objects.get(ns, name)?))
                    .collect()
            };
            for value in &values {
                f(value);
            }
        }
    }

    /// What [`Cache::each_metadata`] gives for `held`.
    fn metadata_of(&self, namespace: &str, name: &str, held: HeldRef<'_>) -> Option<Arc<Value>> {
        // A parsed object is at hand whole.
        let Some(text) = held.text() else {
            return self.decode(namespace, name, held);
        };
        let only: MetadataOnly = serde_json::from_str(text).ok()?;
        let mut value = serde_json::json!({ "metadata": only.metadata });
        held::place(&mut value, namespace, name);
        Some(Arc::new(value))
    }

    /// Every object.
    pub fn values(&self) -> Vec<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .iter()
            .filter_map(|(ns, name, held)| self.decode(ns, name, held))
            .collect()
    }

    /// Where every object is.
    pub fn keys(&self) -> Vec<ObjKey> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .iter()
            .map(|(ns, name, _)| (ns.to_string(), name.to_string()))
            .collect()
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.objects.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the cache is in its life.
    pub fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the reconciler can trust the cache: listed, or the kind is not served (so there
    /// is nothing to list).
    pub fn ready(&self) -> bool {
        matches!(self.phase(), Phase::Synced | Phase::NotServed)
    }

    /// What discovery said, once the kind is served.
    pub fn served(&self) -> Option<Served> {
        self.served
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_phase(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    /// Records an object ferry has just written, so that the next reconcile does not act on
    /// the stale copy before the watch event arrives; unless the watch has already said that
    /// this very object (its uid) was deleted, or brought a later version of it.
    pub fn remember(&self, object: Value) {
        self.record(object, false)
    }

    /// [`Cache::remember`] for a super copy ferry has just applied: it holds what ferry
    /// applies, so it is held checked (see [`Cache::check`]).
    pub fn remember_applied(&self, object: Value) {
        self.record(object, true)
    }

    fn record(&self, object: Value, checked: bool) {
        let Some(key) = key_of(&object) else {
            return;
        };
        let uid = crate::object::uid(&object);
        let deleted = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        if deleted.get(&key).is_some_and(|gone| gone == uid) {
            return;
        }
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        let newer = objects
            .get(&key.0, &key.1)
            .and_then(head)
            .is_some_and(|cached| {
                cached.metadata.uid == uid
                    && order(cached.metadata.resource_version) > version(&object)
            });
        if !newer {
            let held = match &self.holding {
                Holding::Reduced(reducer) if checked => reducer.checked(&object),
                _ => None,
            };
            if let Some(held) = held.or_else(|| self.hold(&objects, &key, &object)) {
                objects.insert(&key.0, &key.1, held);
            }
        }
    }

    /// Forgets an object ferry has just deleted.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.remove(namespace, name);
    }
}

/// The largest object (as text) a parsed cache holds parsed: a tenant decides how large its
/// namespaces' labels and annotations are, and a parsed value takes several times the memory
/// of its text.
const PARSED_AT_MOST: usize = 2048;

/// How a cache holds its objects.
enum Holding {
    /// As compact JSON text.
    Text,
    /// Parsed, when small (see [`Held::Parsed`]).
    Parsed,
    /// As text, and once checked reduced by the reducer (see [`Held::Checked`]).
    Reduced(Reducer),
}

/// An object's resourceVersion as a number, for ordering two versions of one object.
pub(crate) fn version(object: &Value) -> u64 {
    order(rv(object))
}

/// A resourceVersion as a number (etcd's revisions; an unparsable one orders first, so that
/// what ferry wrote is kept).
fn order(resource_version: &str) -> u64 {
    resource_version.parse().unwrap_or(0)
}

/// The uid and resourceVersion of a cached object, read without building its value.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    metadata: HeadMeta<'a>,
}

#[derive(serde::Deserialize)]
struct HeadMeta<'a> {
    #[serde(borrow, default)]
    uid: &'a str,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: &'a str,
}

fn head(held: HeldRef<'_>) -> Option<Head<'_>> {
    match held {
        HeldRef::Parsed(object) => Some(Head {
            metadata: HeadMeta {
                uid: crate::object::uid(object),
                resource_version: rv(object),
            },
        }),
        _ => serde_json::from_str(held.text()?).ok(),
    }
}

/// How many objects [`Cache::each_metadata`] reads under one lock.
const METADATA_AT_ONCE: usize = 256;

/// The metadata of a cached object, read without building the rest: what routes a change.
#[derive(serde::Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: Value,
}

impl Cache {
    /// The object held at `namespace`/`name`, its `apiVersion`, `kind`, name and namespace
    /// set back.
    fn decode(&self, namespace: &str, name: &str, held: HeldRef<'_>) -> Option<Arc<Value>> {
        let text = match held {
            HeldRef::Parsed(object) => return Some(object.clone()),
            HeldRef::Full(text) | HeldRef::Checked { text, .. } => text,
        };
        let mut value: Value = serde_json::from_str(text).ok()?;
        held::place(&mut value, namespace, name);
        if let (Value::Object(fields), Some((api_version, kind))) = (&mut value, self.kind.get()) {
            fields.insert("apiVersion".into(), api_version.clone());
            fields.insert("kind".into(), kind.clone());
        }
        Some(Arc::new(value))
    }
}

/// `managedFields` reduced to its distinct managers, in order: `[{"manager": …}]`.
/// Linear in the entries: a tenant may label its own objects `ferry.dev/tenant` and give them
/// as many managers as it likes.
fn managers_of(managers: impl Iterator<Item = Value>) -> Value {
    let mut seen = std::collections::HashSet::new();
    let out = managers
        .filter(|m| seen.insert(m.to_string()))
        .map(|m| serde_json::json!({ "manager": m }))
        .collect();
    Value::Array(out)
}

/// `apiVersion` and `kind` first (set from the resource), then the rest with
/// `metadata.managedFields` reduced to the managers on objects labelled `ferry.dev/tenant`
/// (whether ferry wrote a claimed copy is all that is read of them), and dropped elsewhere.
pub fn normalise(
    fields: serde_json::Map<String, Value>,
    resource: &ApiResource,
) -> serde_json::Map<String, Value> {
    normalised(fields, resource, None)
}

/// [`normalise`], with the managers of managedFields the caller read apart (`managers`, one
/// per entry, null where an entry names none) in place of those in `fields`.
fn normalised(
    fields: serde_json::Map<String, Value>,
    resource: &ApiResource,
    mut managers: Option<Vec<Value>>,
) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::with_capacity(fields.len() + 2);
    out.insert(
        "apiVersion".into(),
        Value::String(resource.api_version.clone()),
    );
    out.insert("kind".into(), Value::String(resource.kind.clone()));
    for (k, mut v) in fields {
        if k == "apiVersion" || k == "kind" {
            continue;
        }
        if k == "metadata" {
            if let Value::Object(meta) = &mut v {
                // Only an object claiming to be ferry's copy needs them read (whether ferry
                // wrote it); every other object holds none.
                let claims = meta
                    .get("labels")
                    .and_then(|l| l.get(ferry_core::keys::LABEL_TENANT))
                    .is_some();
                let entries = meta.shift_remove("managedFields");
                let managers = managers.take().or_else(|| match entries {
                    Some(Value::Array(entries)) if claims => Some(
                        entries
                            .into_iter()
                            .map(|mut e| e.get_mut("manager").map_or(Value::Null, Value::take))
                            .collect(),
                    ),
                    _ => None,
                });
                if let (true, Some(managers)) = (claims, managers) {
                    meta.insert("managedFields".into(), managers_of(managers.into_iter()));
                }
            }
        }
        out.insert(k, v);
    }
    out
}

#[cfg(test)]
#[path = "cache/tests.rs"]
mod tests;

impl std::ops::Index<crate::key::EntryId> for Vec<Arc<Cache>> {
    type Output = Arc<Cache>;

    fn index(&self, id: crate::key::EntryId) -> &Self::Output {
        &self[id.0]
    }
}
