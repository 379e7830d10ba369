//! One watch cache per policy entry and one for namespaces, in one cluster; what each cache
//! reports goes to a callback that turns it into keys (see `routing`).

use std::sync::Arc;

use ferry_core::policy::{Direction, LabelSelector, Policy, Resource};
use kube::core::GroupVersionKind;
use kube::Client;
use tokio::task::JoinHandle;

use crate::cache::{self, Cache, Labels, OnChange, Reduce};
use crate::key::{EntryId, Kind};

/// The group/version/kind of a policy entry.
pub fn gvk_of(resource: &Resource) -> GroupVersionKind {
    GroupVersionKind::gvk(
        &resource.group_kind.group,
        resource.version(),
        &resource.group_kind.kind,
    )
}

/// How the caches of `policy`'s toSuper kinds hold an object once the reconciler checked it:
/// reduced to what flows up (type, metadata, status, super-owned fields), on both sides.
pub fn flowing_up(policy: &Arc<Policy>) -> impl Fn(EntryId) -> Option<Reduce> {
    let policy = policy.clone();
    move |idx| {
        let policy = policy.clone();
        (policy.resources[idx].direction == Direction::ToSuper).then(|| {
            let reduce: Reduce = Arc::new(move |fields| {
                ferry_core::translate::flowing_up(&policy.resources[idx], fields)
            });
            reduce
        })
    }
}

/// A label selector in the API's string syntax.
pub fn selector_string(selector: &LabelSelector) -> String {
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

/// The caches of one cluster and the tasks that fill them (aborted by their owner).
pub struct Watched {
    /// One per policy entry, in the policy's order.
    pub caches: Vec<Arc<Cache>>,
    /// The namespaces.
    pub namespaces: Arc<Cache>,
    /// The watch tasks.
    pub tasks: Vec<JoinHandle<()>>,
}

/// Starts a watch cache for every policy entry (label selector from `labels`, checked objects
/// reduced by `reduce(entry)`) and one for namespaces, in the cluster named `cluster` in logs;
/// `on_change(kind)` reports their changes.
pub fn watch_all(
    client: &Client,
    policy: &Policy,
    cluster: &str,
    labels: impl Fn(&Resource) -> Labels,
    reduce: impl Fn(EntryId) -> Option<Reduce>,
    namespace_labels: Option<String>,
    on_change: impl Fn(Kind) -> OnChange,
) -> Watched {
    let mut tasks = Vec::new();
    let mut watch = |what: String, gvk: GroupVersionKind, labels: Labels, kind: Kind| {
        let reduce = match kind {
            Kind::Resource(idx) => reduce(idx),
            _ => None,
        };
        let cache = Arc::new(match kind {
            Kind::Namespace => Cache::parsed(what),
            Kind::Resource(_) => Cache::reducing(what, reduce),
        });
        tasks.push(tokio::spawn(cache::run(
            client.clone(),
            gvk,
            labels,
            cache.clone(),
            on_change(kind),
        )));
        cache
    };
    let caches = crate::key::entries(policy)
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
        GroupVersionKind::gvk("", "v1", "Namespace"),
        Labels::Fixed(namespace_labels),
        Kind::Namespace,
    );
    Watched {
        caches,
        namespaces,
        tasks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::policy::SelectorRequirement;

    #[test]
    fn selectors_use_the_api_syntax() {
        let selector = LabelSelector {
            match_labels: [("tier".to_string(), "gold".to_string())].into(),
            match_expressions: vec![
                SelectorRequirement {
                    key: "zone".into(),
                    operator: "In".into(),
                    values: vec!["a".into(), "b".into()],
                },
                SelectorRequirement {
                    key: "legacy".into(),
                    operator: "DoesNotExist".into(),
                    values: Vec::new(),
                },
            ],
        };
        assert_eq!(
            selector_string(&selector),
            "tier=gold,zone in (a,b),!legacy"
        );
    }
}
