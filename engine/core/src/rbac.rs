//! `ferry rbac`: the least-privilege ClusterRoles the live engine needs on each side, derived
//! from the policy: exactly the kinds it approves and the verbs each direction uses.
//!
//! ```text
//!  Policy ─▶ rules per side (group, resource, verbs) ─▶ ClusterRole ferry-super, ferry-tenant
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::policy::{Direction, Policy};
use crate::schema::{Rule, StatusRoute};

/// Reading a kind: what watchers need.
const READ: &[&str] = &["get", "list", "watch"];
/// Owning the super copies of a toSuper kind: reading them, and writing them as the engine
/// does (`engine/sync/src/write.rs`): create, server-side apply and JSON or merge patches
/// (`patch`), delete. It never replaces one, so no `update`.
const APPLY: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
/// Owning the tenant copies of a fromSuper or produced kind: these are created and then
/// replaced whole under their resourceVersion when they differ (`Writer::replace`, a PUT:
/// `update`).
const COPY: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// Every verb ferry may be granted, in the order RBAC rules list them.
const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// The resource name of a kind: the CRD's plural when the schema gives one, otherwise the
/// Kubernetes guess (lower case, `-ies` for a consonant and `y`, `-es` after s, x, ch, sh).
pub fn plural(kind: &str, known: Option<&str>) -> String {
    if let Some(p) = known {
        return p.to_string();
    }
    let lower = kind.to_ascii_lowercase();
    if lower == "endpoints" {
        return lower;
    }
    if let Some(stem) = lower.strip_suffix('y') {
        if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) {
            return format!("{stem}ies");
        }
    }
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[derive(Default)]
struct Rules(BTreeMap<(String, String), BTreeSet<&'static str>>);

impl Rules {
    fn allow(&mut self, group: &str, resource: &str, verbs: &[&'static str]) {
        self.0
            .entry((group.to_string(), resource.to_string()))
            .or_default()
            .extend(verbs);
    }

    /// Rules grouped as RBAC writes them: one per (group, verbs), resources listed together.
    fn into_role(self, name: &str, side: &str) -> Value {
        let mut grouped: BTreeMap<(String, Vec<&str>), Vec<String>> = BTreeMap::new();
        for ((group, resource), verbs) in self.0 {
            let verbs: Vec<&str> = VERBS.into_iter().filter(|v| verbs.contains(v)).collect();
            grouped.entry((group, verbs)).or_default().push(resource);
        }
        let rules: Vec<Value> = grouped
            .into_iter()
            .map(|((group, verbs), resources)| json!({"apiGroups": [group], "resources": resources, "verbs": verbs}))
            .collect();
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": side},
            },
            "rules": rules,
        })
    }
}

/// Built-in kinds served without a status subresource (so none is granted); every other
/// kind without a CRD to tell gets one.
const BUILTIN_WITHOUT_STATUS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "PodTemplate"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("networking.k8s.io", "IngressClass"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("node.k8s.io", "RuntimeClass"),
    ("coordination.k8s.io", "Lease"),
];

/// Whether a kind without a CRD to tell may have a status subresource.
fn builtin_has_status(group: &str, kind: &str) -> bool {
    !BUILTIN_WITHOUT_STATUS.contains(&(group, kind))
}

/// The ClusterRoles for the super cluster and for every tenant, in that order.
pub fn cluster_roles(policy: &Policy) -> Vec<Value> {
    let mut super_side = Rules::default();
    let mut tenant_side = Rules::default();
    // Super namespaces are created with their ownership labels; tenant namespaces are read to
    // map them; a super namespace is deleted when its tenant namespace is. Refusals become
    // Events on tenant objects. The Lease of leader election is not here: it lives in ferry's
    // own namespace, granted there by [`lease_role`].
    super_side.allow(
        "",
        "namespaces",
        &["get", "list", "watch", "create", "patch", "delete"],
    );
    // A tenant whose names are bound to another cluster gets an Event on each of its super
    // namespaces (`binding.rs` in engine/sync), in that namespace.
    super_side.allow("events.k8s.io", "events", &["create"]);
    // Tenant namespaces carry `ferry.dev/super`, the super cluster they run in.
    tenant_side.allow("", "namespaces", &["get", "list", "watch", "patch"]);
    tenant_side.allow("", "events", &["create", "patch"]);
    tenant_side.allow("events.k8s.io", "events", &["create", "patch"]);
    for resource in &policy.resources {
        let group = resource.group_kind.group.as_str();
        let name = plural(&resource.group_kind.kind, resource.plan.plural.as_deref());
        match resource.direction {
            Direction::ToSuper => {
                super_side.allow(group, &name, APPLY);
                tenant_side.allow(group, &name, READ);
                // What flows up: status through its subresource (or, without a CRD to
                // say, whatever the cluster serves, which is the subresource for built-in
                // kinds and most CRDs), super-owned fields through the object, both by
                // server-side apply (`patch`).
                let route = match resource.plan.status_route() {
                    StatusRoute::Served
                        if !builtin_has_status(group, &resource.group_kind.kind) =>
                    {
                        StatusRoute::None
                    }
                    route => route,
                };
                if matches!(route, StatusRoute::Subresource | StatusRoute::Served) {
                    tenant_side.allow(group, &format!("{name}/status"), &["patch"]);
                }
                let owned = resource
                    .plan
                    .rules()
                    .iter()
                    .any(|(_, a)| matches!(a.rule, Rule::OwnerSuper));
                if owned || route == StatusRoute::Object {
                    tenant_side.allow(group, &name, &["patch"]);
                }
            }
            // Public and produced objects are read in the super cluster, copied into tenants.
            Direction::FromSuper | Direction::Produced => {
                super_side.allow(group, &name, READ);
                tenant_side.allow(group, &name, COPY);
            }
        }
    }
    vec![
        super_side.into_role("ferry-super", "super"),
        tenant_side.into_role("ferry-tenant", "tenant"),
    ]
}

/// The Role in ferry's own namespace (`namespace`, where `leaderElection.namespace` says)
/// holding the Lease of leader election, or sharding's membership and tenant Leases: read
/// them (sharding lists them every round), create each once, and renew, take over or
/// release one by replacing it under its resourceVersion (the compare-and-swap of
/// `engine/sync/src/leader.rs` and `engine/sync/src/shard/leases.rs`, a PUT: `update`), and
/// delete the membership Lease of a replica gone for good (at the version read). A Role, not the ClusterRole: ferry holds no
/// Lease anywhere else, and a tenant's super namespace may hold Leases of its own workloads.
pub fn lease_role(namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": "ferry-leases",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "super"},
        },
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update", "delete"]},
        ],
    })
}

/// The Role in the namespace of `tenantSecrets` (`namespace`): reading the kubeconfig Secrets
/// there (no Secret anywhere else) and Events on those it refuses.
pub fn tenant_secrets_role(namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": "ferry-tenant-secrets",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "super"},
        },
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": READ},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn plurals_follow_kubernetes() {
        assert_eq!(plural("Secret", None), "secrets");
        assert_eq!(plural("StorageClass", None), "storageclasses");
        assert_eq!(plural("NetworkPolicy", None), "networkpolicies");
        assert_eq!(plural("Gateway", None), "gateways");
        assert_eq!(plural("Ingress", None), "ingresses");
        assert_eq!(plural("Endpoints", None), "endpoints");
        assert_eq!(plural("Database", Some("dbs")), "dbs");
    }
}
