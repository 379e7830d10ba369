//! Tenant names bound to their cluster (DESIGN.md "Names a tenant owns beyond namespaces").
//! Every super namespace of a tenant records in `ferry.dev/tenant-cluster` the uid of the
//! `kube-system` namespace of the tenant cluster it was made for. A tenant of the same name
//! connecting from another cluster (a tenantSecret re-added pointing elsewhere, a kubeconfig
//! edited) would otherwise be synced as the same tenant: the objects that cluster lacks would
//! read as deleted, and their copies would go. It is refused until an admin removes the
//! annotation ([`release_command`]). Super namespaces made before the annotation existed
//! record the cluster at their next reconcile (adopted, not refused).
//!
//! ```text
//!  tenant primed ─▶ conflicts(its super namespaces, kube-system uid) ─┬─ none: synced; namespaces
//!                                                                     │  recording none: bind
//!                                                                     └─ some: refused, looked at again
//! ```

use ferry_core::keys::{ANN_TENANT_CLUSTER, LABEL_TENANT};
use serde_json::{json, Value};

use crate::object::{meta_str, uid, Ownership};

/// A super namespace's binding, against the tenant cluster ferry reaches now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// It records no cluster (made before bindings, or released by an admin): it takes the
    /// current one.
    Unbound,
    /// It records the current cluster (or the current one is not known yet).
    Same,
    /// It records another cluster: nothing of the tenant is written into it.
    Other,
}

/// The binding of super namespace `ns` for tenant cluster `cluster` (kube-system's uid).
pub fn binding(ns: &Value, cluster: Option<&str>) -> Binding {
    match (Ownership::of(ns).cluster, cluster) {
        (None, _) => Binding::Unbound,
        (Some(recorded), Some(now)) if recorded != now => Binding::Other,
        _ => Binding::Same,
    }
}

/// `patch` (a merge patch of super namespace `ns`, or none) also recording `cluster` when `ns`
/// records none; `None` when there is nothing to write.
pub fn bind(patch: Option<Value>, ns: &Value, cluster: Option<&str>) -> Option<Value> {
    let cluster = match (binding(ns, cluster), cluster) {
        (Binding::Unbound, Some(cluster)) => cluster,
        _ => return patch,
    };
    // The uid makes the patch land on the namespace that was looked at, or nowhere.
    let mut patch = patch.unwrap_or_else(|| json!({"metadata": {"uid": uid(ns)}}));
    patch["metadata"]["annotations"][ANN_TENANT_CLUSTER] = json!(cluster);
    Some(patch)
}

/// A super namespace bound to another cluster than the tenant's now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Its name.
    pub name: String,
    /// Its uid (the Event's object).
    pub uid: String,
    /// The cluster it records.
    pub cluster: String,
}

/// The super namespaces of `tenant` among `namespaces` bound to another cluster than
/// `cluster`, sorted by name.
pub fn conflicts<'a>(
    namespaces: impl IntoIterator<Item = &'a Value>,
    tenant: &str,
    cluster: &str,
) -> Vec<Bound> {
    let mut out: Vec<Bound> = namespaces
        .into_iter()
        .filter(|ns| Ownership::of(ns).tenant == Some(tenant))
        .filter(|ns| binding(ns, Some(cluster)) == Binding::Other)
        .map(|ns| Bound {
            name: meta_str(ns, "name").unwrap_or("").to_string(),
            uid: uid(ns).to_string(),
            cluster: Ownership::of(ns).cluster.unwrap_or("").to_string(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The command that releases `tenant`'s names from the cluster they are bound to.
pub fn release_command(tenant: &str) -> String {
    format!("kubectl annotate namespace -l {LABEL_TENANT}={tenant} {ANN_TENANT_CLUSTER}-")
}

/// Why `tenant`, now at cluster `cluster`, is refused for `bound` (not empty).
pub fn refusal_message(tenant: &str, cluster: &str, bound: &[Bound]) -> String {
    let first = bound.first().map_or("", |b| b.cluster.as_str());
    format!(
        "tenant {tenant:?} connects from a cluster whose kube-system uid is {cluster}, but {} of its super namespaces ({}{}) are bound to the cluster {first}; nothing of it is synced until an admin releases them: {}",
        bound.len(),
        bound.iter().take(3).map(|b| b.name.as_str()).collect::<Vec<_>>().join(", "),
        if bound.len() > 3 { ", ..." } else { "" },
        release_command(tenant)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, tenant: &str, cluster: Option<&str>) -> Value {
        let mut ns = json!({"metadata": {"name": name, "uid": format!("uid-{name}"),
            "labels": {LABEL_TENANT: tenant}, "annotations": {}}});
        if let Some(c) = cluster {
            ns["metadata"]["annotations"][ANN_TENANT_CLUSTER] = json!(c);
        }
        ns
    }

    #[test]
    fn namespaces_without_a_cluster_are_adopted_others_refused() {
        let old = ns("team-a-shop", "team-a", None);
        assert_eq!(binding(&old, Some("c1")), Binding::Unbound);
        assert_eq!(
            bind(None, &old, Some("c1")),
            Some(
                json!({"metadata": {"uid": "uid-team-a-shop", "annotations": {ANN_TENANT_CLUSTER: "c1"}}})
            )
        );
        // Beside a label patch: one write.
        let labels = json!({"metadata": {"uid": "uid-team-a-shop", "labels": {"x": "y"}}});
        assert_eq!(
            bind(Some(labels), &old, Some("c1")),
            Some(
                json!({"metadata": {"uid": "uid-team-a-shop", "labels": {"x": "y"}, "annotations": {ANN_TENANT_CLUSTER: "c1"}}})
            )
        );
        let bound = ns("team-a-shop", "team-a", Some("c1"));
        assert_eq!(binding(&bound, Some("c1")), Binding::Same);
        assert_eq!(bind(None, &bound, Some("c1")), None);
        assert_eq!(binding(&bound, Some("c2")), Binding::Other);
        // Never rewritten to the new cluster.
        assert_eq!(bind(None, &bound, Some("c2")), None);
        // Unknown cluster: nothing said, nothing written.
        assert_eq!(binding(&bound, None), Binding::Same);
        assert_eq!(bind(None, &old, None), None);
    }

    #[test]
    fn conflicts_are_the_tenants_namespaces_bound_elsewhere() {
        let all = [
            ns("team-a-b", "team-a", Some("c1")),
            ns("team-a-a", "team-a", Some("c1")),
            ns("team-a-new", "team-a", Some("c2")),
            ns("team-a-old", "team-a", None),
            ns("team-b-a", "team-b", Some("c1")),
        ];
        let found = conflicts(&all, "team-a", "c2");
        let names: Vec<&str> = found.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["team-a-a", "team-a-b"]);
        assert_eq!(found[0].cluster, "c1");
        assert!(conflicts(&all, "team-a", "c1").len() == 1);
        assert!(conflicts(&all, "team-b", "c1").is_empty());
        let message = refusal_message("team-a", "c2", &found);
        assert!(
            message.contains(
                "2 of its super namespaces (team-a-a, team-a-b) are bound to the cluster c1"
            ),
            "{message}"
        );
        assert!(message.ends_with(
            "kubectl annotate namespace -l ferry.dev/tenant=team-a ferry.dev/tenant-cluster-"
        ));
    }
}
