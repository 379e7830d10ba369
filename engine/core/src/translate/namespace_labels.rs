//! The labels a super namespace carries from its tenant namespace, so that selectors of
//! namespaces keep matching in the super cluster.

use serde_json::{Map, Value};

/// Annotation on a super namespace: the keys of the labels ferry copied from its tenant
/// namespace (comma-separated), so that a label the tenant removes is removed too.
pub const ANN_TENANT_LABELS: &str = "ferry.dev/tenant-labels";

/// The labels a super namespace carries from its tenant namespace, so that label selectors of
/// namespaces (`x-ferry-namespace-selector`) keep matching: every label except ferry's own and
/// those Kubernetes reserves (`kubernetes.io/` and `k8s.io/` and their subdomains, such as
/// `kubernetes.io/metadata.name`, which each API server sets, and
/// `pod-security.kubernetes.io/enforce`, which a tenant must never set on a namespace of the
/// shared cluster).
pub fn super_namespace_labels(tenant_labels: &Map<String, Value>) -> Map<String, Value> {
    let reserved = |key: &str| {
        let Some((prefix, _)) = key.split_once('/') else {
            return false;
        };
        prefix == "ferry.dev"
            || ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|r| prefix == *r || prefix.ends_with(&format!(".{r}")))
    };
    tenant_labels
        .iter()
        .filter(|(k, v)| !reserved(k) && v.is_string())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super_namespace_labels;

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
        let out = super_namespace_labels(tenant.as_object().unwrap());
        assert_eq!(
            json!(out),
            json!({"team": "payments", "accelerator": "gpu"})
        );
    }
}
