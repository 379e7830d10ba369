//! The Deployment of `ferry manifests`: one container, hardened (non-root, read-only root
//! filesystem, no capabilities, seccomp), probes on the metrics port, the configuration tree
//! and the kubeconfigs mounted read-only.

use serde_json::{json, Value};

use super::{labels, meta, Options, CONFIG_DIR, KUBECONFIG_DIR, NAME, RUN_AS};

/// What the pod mounts and serves: the config file in the pod, the digest that rolls the pods,
/// the ConfigMap's items, the metrics port, and whether the kubeconfigs Secret exists.
pub(super) struct Pod<'a> {
    /// The namespace (ferry's own).
    pub namespace: &'a str,
    /// Where the config file is in the pod.
    pub config: &'a str,
    /// The sha256 of the configuration and kubeconfigs.
    pub digest: &'a str,
    /// The ConfigMap's items (key and path).
    pub items: Vec<Value>,
    /// The metrics, health and readiness port.
    pub port: u16,
    /// Whether the `ferry-kubeconfigs` Secret is mounted.
    pub kubeconfigs: bool,
}

/// The Deployment running `pod` as `options` say.
pub(super) fn deployment(pod: Pod<'_>, options: &Options) -> Value {
    let Pod {
        namespace,
        config,
        digest,
        items,
        port,
        kubeconfigs,
    } = pod;
    let mut args = vec!["run", "--config", config, "--log-format", "json"];
    if options.replicas > 1 {
        args.push("--leader-elect");
    }
    let mut volumes = vec![
        json!({"name": "config", "configMap": {"name": "ferry-config", "items": items}}),
        json!({"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}),
    ];
    let mut mounts = vec![
        json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true}),
        json!({"name": "tmp", "mountPath": "/tmp"}),
    ];
    if kubeconfigs {
        volumes.push(json!({"name": "kubeconfigs", "secret": {"secretName": "ferry-kubeconfigs", "defaultMode": 0o440}}));
        mounts.push(json!({"name": "kubeconfigs", "mountPath": KUBECONFIG_DIR, "readOnly": true}));
    }
    let probe = |path: &str, period: u32| json!({"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period, "timeoutSeconds": 2});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(NAME, Some(namespace)),
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": labels()},
            // One replica is never two writers at once (no leader election then).
            "strategy": if options.replicas > 1 {
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
            } else {
                json!({"type": "Recreate"})
            },
            "template": {
                "metadata": {
                    "labels": labels(),
                    // A new configuration rolls the pods.
                    "annotations": {"ferry.dev/config-sha256": digest},
                },
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "fsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": NAME,
                        "image": options.image,
                        "args": args,
                        "env": [{"name": "HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "metrics", "containerPort": port}],
                        "livenessProbe": probe("/healthz", 10),
                        "readinessProbe": probe("/readyz", 5),
                        "startupProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 2, "failureThreshold": 30},
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": "2", "memory": "1Gi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    })
}
