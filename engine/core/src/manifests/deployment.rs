//! The Deployment of `ferry manifests` (a StatefulSet with sharding: stable identities, the
//! pod names): one container, hardened (non-root, read-only root filesystem, no capabilities,
//! seccomp), probes on the metrics port, the configuration tree and the kubeconfigs mounted
//! read-only.

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
    /// Sharding, when the configuration asks for it.
    pub sharding: Option<&'a crate::config::Sharding>,
}

/// How long a sharded pod may take to stop: its membership released, every tenant drained
/// (a third of the lease at most) and released, the reconciles in flight finished (10 s at
/// most), with room to spare.
fn grace_seconds(sharding: &crate::config::Sharding) -> u64 {
    sharding.lease_duration.as_secs() + 30
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
        sharding,
    } = pod;
    let mut args = vec!["run", "--config", config, "--log-format", "json"];
    if options.replicas > 1 && sharding.is_none() {
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
    let mut workload = json!({
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
                        "env": [
                            {"name": "HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            // The replica's identity in Leases and User-Agents.
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
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
    });
    if let Some(sharding) = sharding {
        stateful(&mut workload, sharding);
    }
    workload
}

/// `workload` as a StatefulSet: stable identities (the pod names), all started at once (a
/// cold start moves no tenant twice), time to hand every tenant over when stopped.
fn stateful(workload: &mut Value, sharding: &crate::config::Sharding) {
    {
        workload["kind"] = json!("StatefulSet");
        let spec = &mut workload["spec"];
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("strategy");
        }
        spec["serviceName"] = json!("ferry-metrics");
        spec["podManagementPolicy"] = json!("Parallel");
        spec["updateStrategy"] = json!({"type": "RollingUpdate"});
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = json!(grace_seconds(sharding));
    }
}
