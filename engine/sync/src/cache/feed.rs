//! What a watcher feeds into a cache: discovery of the kind, then the list and the watch
//! events, each object held as the cache holds it and its change reported.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;
use tokio::sync::watch;

use super::{Cache, Objects, OnChange, Phase, Served, Wire};
use crate::object::key_of;

/// How long to wait before asking again whether a kind is served.
const DISCOVERY_RETRY: Duration = Duration::from_secs(3);

/// Which objects a cache watches: a fixed label selector, or (a sharded replica's copies in
/// a super cluster) the objects whose label `key` names a tenant this replica owns, the
/// selector following the ownership (a change lists again; no tenant: nothing watched).
pub enum Labels {
    /// A label selector, or every object.
    Fixed(Option<String>),
    /// `key in (owned tenants)`.
    Owned {
        /// The label naming the tenant.
        key: String,
        /// The ownership.
        owned: watch::Receiver<Owned>,
    },
}

/// The ownership a sharded replica publishes: which tenants are its own, and a generation
/// that grows with every change (a cache listed at generation `g` holds every object of the
/// tenants owned at `g`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    /// Counts changes.
    pub generation: u64,
    /// The tenants.
    pub tenants: Arc<BTreeSet<String>>,
}

/// Resolves `gvk` in the cluster (retrying while it is not served), then keeps `cache` in step
/// with the cluster, calling `on_change` for every object that changes. Runs until aborted.
pub async fn run(
    client: Client,
    gvk: GroupVersionKind,
    labels: Labels,
    cache: Arc<Cache>,
    on_change: OnChange,
) {
    let served = discover(&client, &gvk, &cache).await;
    cache.set_phase(Phase::Listing);
    let resource = served.resource.clone();
    let _ = cache.kind.set((
        Value::String(resource.api_version.clone()),
        Value::String(resource.kind.clone()),
    ));
    *cache.served.write().unwrap_or_else(|e| e.into_inner()) = Some(served);
    // Parsed as sent, not through typed metadata (`wire.rs`).
    let api: Api<Wire> = Api::all_with(client, &resource);
    let feed = Feed {
        api,
        resource,
        cache,
        on_change,
    };
    match labels {
        Labels::Fixed(labels) => feed.follow(labels.as_deref(), 0).await,
        Labels::Owned { key, mut owned } => loop {
            let now = owned.borrow_and_update().clone();
            if now.tenants.is_empty() {
                feed.replace(Objects::default());
                feed.cache.listed.store(now.generation, Ordering::SeqCst);
            } else {
                let names: Vec<&str> = now.tenants.iter().map(String::as_str).collect();
                let selector = format!("{key} in ({})", names.join(","));
                tokio::select! {
                    _ = feed.follow(Some(&selector), now.generation) => return,
                    changed = owned.changed() => if changed.is_err() { return },
                }
                continue;
            }
            if owned.changed().await.is_err() {
                return;
            }
        },
    }
}

/// Asks whether the cluster serves `gvk` until it does.
async fn discover(client: &Client, gvk: &GroupVersionKind, cache: &Cache) -> Served {
    let mut reported = false;
    let served = loop {
        match kube::discovery::pinned_kind(client, gvk).await {
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
    served
}

/// A served kind's watch into its cache.
struct Feed {
    api: Api<Wire>,
    resource: ApiResource,
    cache: Arc<Cache>,
    on_change: OnChange,
}

impl Feed {
    /// Lists and watches the objects `labels` selects, for ever; a completed list is recorded
    /// as of ownership `generation`.
    async fn follow(&self, labels: Option<&str>, generation: u64) {
        let (cache, resource, on_change) = (&self.cache, &self.resource, &self.on_change);
        let mut config = watcher::Config::default();
        if let Some(labels) = labels {
            config = config.labels(labels);
        }
        let mut stream = watcher::watcher(self.api.clone(), config)
            .default_backoff()
            .boxed();
        let mut listing = Objects::default();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => listing = Objects::default(),
                Ok(Event::InitApply(object)) => {
                    let value = object.into_value(resource);
                    if let Some(key) = key_of(&value) {
                        // A copy checked before the relist stays checked if only what flows
                        // up changed.
                        let held = {
                            let objects = cache.objects.read().unwrap_or_else(|e| e.into_inner());
                            cache.hold(&objects, &key, &value).or_else(|| {
                                objects.get(&key.0, &key.1).map(super::held::HeldRef::owned)
                            })
                        };
                        if let Some(held) = held {
                            listing.insert(&key.0, &key.1, held);
                        }
                    }
                }
                Ok(Event::InitDone) => {
                    self.replace(std::mem::take(&mut listing));
                    cache.listed.store(generation, Ordering::SeqCst);
                }
                Ok(Event::Apply(object)) => observe(cache, resource, on_change, object, true),
                Ok(Event::Delete(object)) => observe(cache, resource, on_change, object, false),
                // The resourceVersion it resumed from is compacted away: the watcher lists
                // again, and the InitDone above reports whatever changed or went meanwhile.
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    tracing::info!(cache = %cache.what, "watch expired (410 Gone); relisting")
                }
                Err(e) => tracing::warn!(cache = %cache.what, error = %e, "watch failed; retrying"),
            }
        }
    }

    /// Makes `fresh` (a completed list) the cache's objects and reports what went and what is
    /// there.
    fn replace(&self, fresh: Objects) {
        let cache = &self.cache;
        cache.gone.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let gone: Vec<Arc<Value>> = {
            let mut objects = cache.objects.write().unwrap_or_else(|e| e.into_inner());
            let gone = objects
                .iter()
                .filter(|(ns, name, _)| !fresh.contains(ns, name))
                .filter_map(|(ns, name, held)| cache.metadata_of(ns, name, held))
                .collect();
            *objects = fresh;
            gone
        };
        cache.set_phase(Phase::Synced);
        tracing::debug!(cache = %cache.what, objects = cache.len(), "listed");
        for value in &gone {
            (self.on_change)(value);
        }
        // Every listed object, by its metadata alone (a list of 100,000 objects is reported
        // at once), with no lock held while routing (a worker woken by it may write to this
        // cache at once).
        cache.each_metadata(|value| (self.on_change)(value));
    }
}

/// Records one watched object, present or gone, and reports it.
pub(super) fn observe(
    cache: &Cache,
    resource: &ApiResource,
    on_change: &OnChange,
    object: Wire,
    present: bool,
) {
    let value = object.into_value(resource);
    let Some(key) = key_of(&value) else {
        return;
    };
    {
        let mut gone = cache.gone.lock().unwrap_or_else(|e| e.into_inner());
        let mut objects = cache.objects.write().unwrap_or_else(|e| e.into_inner());
        if present {
            gone.remove(&key);
            if let Some(held) = cache.hold(&objects, &key, &value) {
                objects.insert(&key.0, &key.1, held);
            }
        } else {
            objects.remove(&key.0, &key.1);
            gone.insert(key, crate::object::uid(&value).to_string());
        }
    }
    on_change(&value);
}
