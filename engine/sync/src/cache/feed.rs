//! What a watcher feeds into a cache: discovery of the kind, then the list and the watch
//! events, each object held as the cache holds it and its change reported.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;

use super::{Cache, Objects, OnChange, Phase, Served, Wire};
use crate::object::key_of;

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
    // Parsed as sent, not through typed metadata (`wire.rs`).
    let api: Api<Wire> = Api::all_with(client, &resource);
    let mut config = watcher::Config::default();
    if let Some(labels) = &labels {
        config = config.labels(labels);
    }
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing = Objects::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing = Objects::default(),
            Ok(Event::InitApply(object)) => {
                let value = object.into_value(&resource);
                if let Some(key) = key_of(&value) {
                    // A copy checked before the relist stays checked if only what flows up
                    // changed.
                    let held = {
                        let objects = cache.objects.read().unwrap_or_else(|e| e.into_inner());
                        cache.hold(&objects, &key, &value)
                    };
                    listing.insert(&key.0, &key.1, held);
                }
            }
            Ok(Event::InitDone) => {
                let fresh = std::mem::take(&mut listing);
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
                    on_change(value);
                }
                // Every listed object, by its metadata alone (a list of 100,000 objects is
                // reported at once), with no lock held while routing (a worker woken by it may
                // write to this cache at once).
                cache.each_metadata(|value| on_change(value));
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
            let held = cache.hold(&objects, &key, &value);
            objects.insert(&key.0, &key.1, held);
        } else {
            objects.remove(&key.0, &key.1);
            gone.insert(key, crate::object::uid(&value).to_string());
        }
    }
    on_change(&value);
}
