//! The NetworkPolicy of `ferry manifests`: who may open a connection to ferry's pods.
//!
//! ferry's pods serve one port, `/metrics`, `/healthz` and `/readyz` together. In a super
//! cluster tenant workloads run beside ferry, and none of them has any business there: the
//! metrics name tenants, namespaces and kinds, and a flood of requests is ferry's CPU. So
//! ferry's pods are isolated for ingress, and only the namespaces the platform engineer names
//! (`--metrics-namespace`, where Prometheus runs) may reach the port.
//!
//! The kubelet's probes need no rule: Kubernetes defines that a pod isolated for ingress still
//! accepts connections from its own node ("the only allowed connections into the pod are
//! those from the pod's node and those allowed by the ingress list", Network Policies concept
//! page; blocking "access from their resident node" is listed among what a NetworkPolicy
//! cannot do). The same exemption lets in whatever reaches the pod as its node: a
//! hostNetwork pod on that node, or traffic a plugin rewrote to the node's address (a
//! NodePort), so the metrics Service stays a ClusterIP. Egress is left alone: ferry must
//! reach every tenant's API server, wherever it is.

use serde_json::{json, Value};

use super::{labels, meta, NAME};

/// The label every namespace carries with its own name, set by the API server and immutable,
/// so a rule naming namespaces by it cannot be met by relabelling another namespace.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The well-known annotation holding a human-readable description of an object.
const DESCRIPTION: &str = "kubernetes.io/description";

/// The NetworkPolicy in `namespace` letting only `metrics_namespaces` reach ferry's `port`
/// (none: only the node, for the kubelet's probes).
pub(super) fn network_policy(namespace: &str, port: u16, metrics_namespaces: &[String]) -> Value {
    let ingress: Vec<Value> = if metrics_namespaces.is_empty() {
        Vec::new()
    } else {
        vec![json!({
            "from": [{"namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": metrics_namespaces},
            ]}}],
            "ports": [{"protocol": "TCP", "port": port}],
        })]
    };
    let mut metadata = meta(NAME, Some(namespace));
    // Whoever reads the policy in the cluster sees why the port is closed.
    metadata["annotations"] = json!({DESCRIPTION: format!(
        "Only the pods' own node (the kubelet's probes, which Kubernetes always lets in) and the namespaces given to ferry manifests --metrics-namespace ({}) reach ferry's port {port} (/metrics, /healthz, /readyz); tenant workloads do not.",
        if metrics_namespaces.is_empty() { "none".to_string() } else { metrics_namespaces.join(", ") }
    )});
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": labels()},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::network_policy;

    #[test]
    fn only_the_named_namespaces_reach_the_port() {
        let open = network_policy("ferry-system", 9090, &["monitoring".into()]);
        let rule = &open["spec"]["ingress"][0];
        assert_eq!(
            rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"][0],
            "monitoring"
        );
        assert_eq!(rule["ports"][0]["port"], 9090);
        assert_eq!(open["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
        let closed = network_policy("ferry-system", 9090, &[]);
        assert_eq!(closed["spec"]["ingress"], serde_json::json!([]));
    }
}
