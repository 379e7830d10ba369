//! How watch events become keys: one watch cache per policy entry and one for namespaces on
//! each side, and the routing of a super object's change to the tenant it belongs to (read
//! from its ownership metadata), or to every tenant for a public object.

use std::sync::Arc;

use ferry_core::policy::{Direction, Policy, Resource, Scope};
use ferry_core::translate::{ANN_TENANT_NAME, ANN_TENANT_NAMESPACE, LABEL_TENANT};
use kube::core::GroupVersionKind;
use kube::Client;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::cache::{self, key_of, Cache, OnChange};
use crate::compare::{annotation, label};
use crate::queue::{Key, Kind, Queues};

/// The group/version/kind of a policy entry.
pub fn gvk_of(resource: &Resource) -> GroupVersionKind {
    GroupVersionKind::gvk(
        &resource.group_kind.group,
        resource.version(),
        &resource.group_kind.kind,
    )
}

pub(super) fn namespace_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Namespace")
}

/// A label selector in the API's string syntax.
pub fn selector_string(selector: &ferry_core::policy::LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &selector.match_expressions {
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
            "Exists" => r.key.clone(),
            _ => format!("!{}", r.key),
        });
    }
    parts.join(",")
}

/// The key of a super object for the tenant it belongs to (toSuper copies and namespaces),
/// read from its ownership metadata.
pub(super) fn owned_key(kind: Kind, namespaced: bool, object: &Value) -> Option<Key> {
    let tenant = label(object, LABEL_TENANT)?;
    let (namespace, name) = match kind {
        Kind::Namespace => (
            String::new(),
            annotation(object, ANN_TENANT_NAMESPACE)?.to_string(),
        ),
        Kind::Resource(_) => (
            if namespaced {
                annotation(object, ANN_TENANT_NAMESPACE)?.to_string()
            } else {
                String::new()
            },
            annotation(object, ANN_TENANT_NAME)?.to_string(),
        ),
    };
    Some(Key {
        tenant: tenant.into(),
        kind,
        namespace,
        name,
    })
}

/// Queues what a change of a super object means for tenants.
pub(super) fn route_super(
    queues: &Queues,
    kind: Kind,
    resource: Option<&Resource>,
    object: &Value,
) {
    match resource {
        Some(r) if r.direction == Direction::FromSuper => {
            let Some((namespace, name)) = key_of(object) else {
                return;
            };
            for tenant in queues.tenants() {
                queues.add(Key {
                    tenant,
                    kind,
                    namespace: namespace.clone(),
                    name: name.clone(),
                });
            }
        }
        _ => {
            let namespaced = resource.is_none_or(|r| r.scope == Scope::Namespaced);
            if let Some(key) = owned_key(kind, namespaced, object) {
                queues.add(key);
            }
        }
    }
}

/// Starts a watch cache for every policy entry (label selector from `labels`) and one for
/// namespaces, in the cluster named `cluster` in logs; `on_change(kind)` reports their changes.
pub(super) fn watch_all(
    client: &Client,
    policy: &Policy,
    cluster: &str,
    labels: impl Fn(&Resource) -> Option<String>,
    namespace_labels: Option<String>,
    on_change: impl Fn(Kind) -> OnChange,
) -> (Vec<Arc<Cache>>, Arc<Cache>, Vec<JoinHandle<()>>) {
    let mut tasks = Vec::new();
    let mut watch = |what: String, gvk: GroupVersionKind, labels: Option<String>, kind: Kind| {
        let cache = Arc::new(Cache::new(what));
        tasks.push(tokio::spawn(cache::run(
            client.clone(),
            gvk,
            labels,
            cache.clone(),
            on_change(kind),
        )));
        cache
    };
    let caches = policy
        .resources
        .iter()
        .enumerate()
        .map(|(idx, r)| {
            watch(
                format!("{cluster} {}", r.group_kind),
                gvk_of(r),
                labels(r),
                Kind::Resource(idx),
            )
        })
        .collect();
    let namespaces = watch(
        format!("{cluster} Namespace"),
        namespace_gvk(),
        namespace_labels,
        Kind::Namespace,
    );
    (caches, namespaces, tasks)
}
