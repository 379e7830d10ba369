//! The labels a super namespace carries from its tenant namespace, so that selectors of
//! namespaces keep matching in the super cluster: only the keys the SyncConfig allows
//! (`namespaceLabels.allow`), never reserved ones.

use serde_json::{Map, Value};

use crate::glob::Glob;

/// Which tenant namespace labels super namespaces carry (`namespaceLabels.allow` of a
/// SyncConfig; none by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceLabels {
    allow: Vec<Glob>,
}

impl NamespaceLabels {
    /// Labels whose key matches one of `allow`.
    pub fn new(allow: Vec<Glob>) -> Self {
        Self { allow }
    }

    /// The keys and globs allowed, as written.
    pub fn patterns(&self) -> &[Glob] {
        &self.allow
    }

    /// Whether a label with this key may reach a super namespace: allowed and not reserved.
    pub fn allows(&self, key: &str) -> bool {
        !reserved_namespace_label(key) && self.allow.iter().any(|g| g.matches(key))
    }
}

/// Whether a super namespace never carries the tenant's label `key`, whatever is allowed:
/// ferry's own keys and those Kubernetes reserves (`kubernetes.io/` and `k8s.io/` and their
/// subdomains, such as `kubernetes.io/metadata.name`, which each API server sets, and
/// `pod-security.kubernetes.io/enforce`, which a tenant must never set on a namespace of the
/// shared cluster).
pub fn reserved_namespace_label(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    prefix == "ferry.dev"
        || ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|r| prefix == *r || prefix.ends_with(&format!(".{r}")))
}

/// The labels a super namespace carries from its tenant namespace, so that label selectors of
/// namespaces (`x-ferry-namespace-selector`) keep matching: those `allowed`, never a
/// [reserved](reserved_namespace_label) one.
pub fn super_namespace_labels(
    tenant_labels: &Map<String, Value>,
    allowed: &NamespaceLabels,
) -> Map<String, Value> {
    tenant_labels
        .iter()
        .filter(|(k, v)| allowed.allows(k) && v.is_string())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn allow(keys: &[&str]) -> NamespaceLabels {
        NamespaceLabels::new(keys.iter().map(|k| Glob::new(k).unwrap()).collect())
    }

    #[test]
    fn super_namespaces_never_carry_reserved_labels() {
        let tenant = json!({
            "team": "payments",
            "accelerator": "gpu",
            "kubernetes.io/metadata.name": "prod",
            "pod-security.kubernetes.io/enforce": "privileged",
            "node-role.k8s.io/x": "y",
            "ferry.dev/tenant": "team-b",
        });
        let out = super_namespace_labels(tenant.as_object().unwrap(), &allow(&["*"]));
        assert_eq!(
            json!(out),
            json!({"team": "payments", "accelerator": "gpu"})
        );
    }

    #[test]
    fn only_allowed_labels_reach_super_namespaces() {
        let tenant = json!({"team": "payments", "accelerator": "gpu", "example.com/cost": "a"});
        let labels = tenant.as_object().unwrap();
        assert_eq!(
            json!(super_namespace_labels(labels, &NamespaceLabels::default())),
            json!({})
        );
        assert_eq!(
            json!(super_namespace_labels(
                labels,
                &allow(&["accelerator", "example.com/*"])
            )),
            json!({"accelerator": "gpu", "example.com/cost": "a"})
        );
        assert!(!allow(&["accel?rator"]).allows("accelerator-x"));
        assert!(allow(&["accel?rator"]).allows("accelerator"));
    }
}
