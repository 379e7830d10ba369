//! Watch caches: one per (cluster, kind), fed by a kube-runtime watcher and read by the
//! reconciler. Objects are kept as compact JSON text without `managedFields` (a parsed value
//! takes several times the memory of its text) and parsed when the reconciler reads them.
//! The caches of a toSuper kind, on both sides, keep an object the reconciler checked reduced
//! to what flows up (`held.rs`): what ferry wrote is known from a digest, and a tenant object
//! is read whole again only when it must be translated.
//!
//! ```text
//!  discovery (retried until served) ─▶ watcher ─▶ Cache ─▶ on_change(object) ─▶ queues
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;

use crate::object::{key_of, rv, ObjKey};

mod held;

pub use held::Reduce;
use held::{Held, Reducer};

/// Called with every object that appeared, changed or went away.
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
    objects: RwLock<HashMap<ObjKey, Held>>,
    /// How checked super copies are reduced; `None` holds every object in full.
    reducer: Option<Reducer>,
    phase: Mutex<Phase>,
    served: RwLock<Option<Served>>,
    /// The `apiVersion` and `kind` every object of the cache has (known once served): held
    /// once here, not in every object's text.
    kind: std::sync::OnceLock<(Value, Value)>,
    /// Objects the watch saw deleted (by uid) since the last list, so that a write's answer
    /// arriving after the delete does not bring the object back.
    gone: Mutex<HashMap<ObjKey, String>>,
}

impl Cache {
    /// An empty cache described as `what` in logs.
    pub fn new(what: String) -> Self {
        Self::reducing(what, None)
    }

    /// An empty cache that keeps a checked object reduced by `reduce`.
    pub fn reducing(what: String, reduce: Option<Reduce>) -> Self {
        Self {
            what,
            objects: RwLock::default(),
            reducer: reduce.map(Reducer::new),
            phase: Mutex::new(Phase::Resolving),
            served: RwLock::default(),
            kind: std::sync::OnceLock::new(),
            gone: Mutex::default(),
        }
    }

    /// The object at `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get_checked(namespace, name).map(|(value, _)| value)
    }

    /// The object at `namespace`/`name`, and whether it is a copy checked to hold what ferry
    /// applies (see [`Cache::check`]); such a copy is reduced to what flows up.
    pub fn get_checked(&self, namespace: &str, name: &str) -> Option<(Arc<Value>, bool)> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let held = objects.get(&(namespace.to_string(), name.to_string()))?;
        Some((self.decode(held.text())?, held.checked()))
    }

    /// Records that `object`, as cached, holds what ferry applies: a cache of super copies
    /// then keeps it reduced, and later versions that differ only in what flows up stay
    /// checked. Nothing changes if the cache holds another version by now. Whether the cache
    /// holds this very version checked.
    pub fn check(&self, object: &Value) -> bool {
        let (Some(reducer), Some(key)) = (&self.reducer, key_of(object)) else {
            return false;
        };
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        let same = objects
            .get(&key)
            .and_then(|h| head(h.text()))
            .is_some_and(|h| {
                h.metadata.uid == crate::object::uid(object)
                    && h.metadata.resource_version == rv(object)
            });
        if !same {
            return false;
        }
        if objects.get(&key).is_some_and(Held::checked) {
            return true;
        }
        match reducer.checked(object) {
            Some(held) => {
                objects.insert(key, held);
                true
            }
            None => false,
        }
    }

    /// How `object` is to be held at `key`, given what `objects` holds there now.
    fn hold(&self, objects: &HashMap<ObjKey, Held>, key: &ObjKey, object: &Value) -> Held {
        match &self.reducer {
            Some(reducer) => reducer.hold(object, objects.get(key)),
            None => Held::Full(held::encode(object)),
        }
    }

    /// The resourceVersion of the object at `namespace`/`name`, read without building it.
    pub fn resource_version(&self, namespace: &str, name: &str) -> Option<String> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let held = objects.get(&(namespace.to_string(), name.to_string()))?;
        head(held.text()).map(|h| h.metadata.resource_version.to_string())
    }

    /// Whether an object is at `namespace`/`name`.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Whether any object is in `namespace`.
    pub fn any_in(&self, namespace: &str) -> bool {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.keys().any(|(ns, _)| ns == namespace)
    }

    /// Every object.
    pub fn values(&self) -> Vec<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .values()
            .filter_map(|h| self.decode(h.text()))
            .collect()
    }

    /// Where every object is.
    pub fn keys(&self) -> Vec<ObjKey> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.keys().cloned().collect()
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
            .get(&key)
            .and_then(|h| head(h.text()))
            .is_some_and(|cached| {
                cached.metadata.uid == uid
                    && cached.metadata.resource_version.parse().unwrap_or(0u64) > version(&object)
            });
        if !newer {
            let held = match &self.reducer {
                Some(reducer) if checked => reducer.checked(&object),
                _ => None,
            };
            let held = held.unwrap_or_else(|| self.hold(&objects, &key, &object));
            objects.insert(key, held);
        }
    }

    /// Forgets an object ferry has just deleted.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.remove(&(namespace.to_string(), name.to_string()));
    }
}

/// A resourceVersion as a number, for ordering two versions of one object (etcd's revisions;
/// an unparsable one orders first, so that what ferry wrote is kept).
pub(crate) fn version(object: &Value) -> u64 {
    rv(object).parse().unwrap_or(0)
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

fn head(text: &str) -> Option<Head<'_>> {
    serde_json::from_str(text).ok()
}

impl Cache {
    /// An object from its text, its `apiVersion` and `kind` set back.
    fn decode(&self, text: &str) -> Option<Arc<Value>> {
        let mut value: Value = serde_json::from_str(text).ok()?;
        if let (Value::Object(fields), Some((api_version, kind))) = (&mut value, self.kind.get()) {
            fields.insert("apiVersion".into(), api_version.clone());
            fields.insert("kind".into(), kind.clone());
        }
        Some(Arc::new(value))
    }
}

/// A JSON object with its type set (list items of built-in kinds come without it) and without
/// `managedFields` (large, and nothing ferry decides depends on them).
fn to_value(object: DynamicObject, resource: &ApiResource) -> Option<Value> {
    let Value::Object(fields) = serde_json::to_value(object).ok()? else {
        return None;
    };
    Some(Value::Object(normalise(fields, resource)))
}

/// `apiVersion` and `kind` first (set from the resource), then the rest with
/// `metadata.managedFields` reduced to the managers on objects labelled `ferry.dev/tenant`
/// (whether ferry wrote a claimed copy is all that is read of them), and dropped elsewhere.
pub fn normalise(
    fields: serde_json::Map<String, Value>,
    resource: &ApiResource,
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
                    .and_then(|l| l.get(ferry_core::translate::LABEL_TENANT))
                    .is_some();
                let entries = meta.remove("managedFields");
                if let (true, Some(Value::Array(entries))) = (claims, entries) {
                    let mut managers: Vec<Value> = Vec::new();
                    for e in entries {
                        let manager = e.get("manager").cloned().unwrap_or(Value::Null);
                        if !managers.iter().any(|m| m["manager"] == manager) {
                            managers.push(serde_json::json!({ "manager": manager }));
                        }
                    }
                    meta.insert("managedFields".into(), Value::Array(managers));
                }
            }
        }
        out.insert(k, v);
    }
    out
}

/// How long to wait before asking again whether a kind is served.
const DISCOVERY_RETRY: Duration = Duration::from_secs(3);

/// Resolves `gvk` in the cluster (retrying while it is not served), then keeps `cache` in step
/// with the cluster, calling `on_change` for every object that changes. Runs until aborted.
pub async fn run(
    client: Client,
    gvk: GroupVersionKind,
    labels: Option<String>,
    cache: Arc<Cache>,
    on_change: OnChange,
) {
    let mut reported = false;
    let served = loop {
        match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((resource, caps)) => {
                break Served {
                    resource,
                    has_status: caps.subresources.iter().any(|(r, _)| r.plural == "status"),
                }
            }
            Err(e) => {
                // Not served is an answer; no answer at all says nothing about what the
                // cluster holds, so the cache stays not ready.
                let answered = matches!(&e, kube::Error::Discovery(_))
                    || matches!(&e, kube::Error::Api(s) if s.code == 404);
                if answered {
                    cache.set_phase(Phase::NotServed);
                }
                if !reported {
                    let what = if answered {
                        "kind not served yet"
                    } else {
                        "no answer from the cluster"
                    };
                    tracing::warn!(cache = %cache.what, error = %e, "{what}; retrying every {}s", DISCOVERY_RETRY.as_secs());
                    reported = true;
                }
                tokio::time::sleep(DISCOVERY_RETRY).await;
            }
        }
    };
    if reported {
        tracing::info!(cache = %cache.what, "kind is served now");
    }
    cache.set_phase(Phase::Listing);
    let resource = served.resource.clone();
    let _ = cache.kind.set((
        Value::String(resource.api_version.clone()),
        Value::String(resource.kind.clone()),
    ));
    *cache.served.write().unwrap_or_else(|e| e.into_inner()) = Some(served);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut config = watcher::Config::default();
    if let Some(labels) = &labels {
        config = config.labels(labels);
    }
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing: HashMap<ObjKey, Held> = HashMap::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(object)) => {
                if let Some(value) = to_value(object, &resource) {
                    if let Some(key) = key_of(&value) {
                        // A copy checked before the relist stays checked if only what flows
                        // up changed.
                        let held = {
                            let objects = cache.objects.read().unwrap_or_else(|e| e.into_inner());
                            cache.hold(&objects, &key, &value)
                        };
                        listing.insert(key, held);
                    }
                }
            }
            Ok(Event::InitDone) => {
                let fresh = std::mem::take(&mut listing);
                cache.gone.lock().unwrap_or_else(|e| e.into_inner()).clear();
                let changed: Vec<Arc<Value>> = {
                    let mut objects = cache.objects.write().unwrap_or_else(|e| e.into_inner());
                    let gone = objects
                        .iter()
                        .filter(|(k, _)| !fresh.contains_key(*k))
                        .filter_map(|(_, h)| cache.decode(h.text()));
                    let all = fresh.values().filter_map(|h| cache.decode(h.text()));
                    let changed = gone.chain(all).collect();
                    *objects = fresh;
                    changed
                };
                cache.set_phase(Phase::Synced);
                tracing::debug!(cache = %cache.what, objects = cache.len(), "listed");
                for value in &changed {
                    on_change(value);
                }
            }
            Ok(Event::Apply(object)) => observe(&cache, &resource, &on_change, object, true),
            Ok(Event::Delete(object)) => observe(&cache, &resource, &on_change, object, false),
            // The resourceVersion it resumed from is compacted away: the watcher lists again,
            // and the InitDone above reports whatever changed or went meanwhile.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::info!(cache = %cache.what, "watch expired (410 Gone); relisting")
            }
            Err(e) => tracing::warn!(cache = %cache.what, error = %e, "watch failed; retrying"),
        }
    }
}

/// Records one watched object, present or gone, and reports it.
fn observe(
    cache: &Cache,
    resource: &ApiResource,
    on_change: &OnChange,
    object: DynamicObject,
    present: bool,
) {
    let Some(value) = to_value(object, resource) else {
        return;
    };
    let Some(key) = key_of(&value) else {
        return;
    };
    {
        let mut gone = cache.gone.lock().unwrap_or_else(|e| e.into_inner());
        let mut objects = cache.objects.write().unwrap_or_else(|e| e.into_inner());
        if present {
            gone.remove(&key);
            let held = cache.hold(&objects, &key, &value);
            objects.insert(key, held);
        } else {
            gone.insert(key.clone(), crate::object::uid(&value).to_string());
            objects.remove(&key);
        }
    }
    on_change(&value);
}

#[cfg(test)]
#[path = "cache/tests.rs"]
mod tests;
