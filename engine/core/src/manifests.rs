//! `ferry manifests`: everything to run ferry in its first super cluster, from a SyncConfig —
//! its namespace and service account, the ClusterRole of `ferry rbac` bound to it, the Role
//! holding its Lease in its own namespace (and the Role for `tenantSecrets`), a ConfigMap with
//! the configuration, policies, schemas and transforms (their tree kept, so relative paths
//! still hold), a Secret with the static tenants' kubeconfigs, a hardened Deployment (a
//! StatefulSet, sharded), a PodDisruptionBudget, a metrics Service and a NetworkPolicy keeping
//! tenant workloads away from its port, a ServiceMonitor, the alerts and a dashboard, API
//! Priority and Fairness objects (`manifests/flow.rs`); and, per tenant, what to apply there.
//!
//! ```text
//!  SyncConfig + Policy ─▶ files (common root) ─▶ ConfigMap items ─┐
//!  config rewritten (inCluster, /etc/ferry-kubeconfigs, 0.0.0.0) ──┼─▶ Deployment …
//!  rbac::cluster_roles ─▶ ClusterRole + ClusterRoleBinding ─────────┘
//! ```

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::naming::hex;
use crate::policy::Policy;

/// Where the configuration tree is mounted in the pod.
pub const CONFIG_DIR: &str = "/etc/ferry";
/// Where the static tenants' (and other supers') kubeconfigs are mounted.
pub const KUBECONFIG_DIR: &str = "/etc/ferry-kubeconfigs";
/// The user and group the container runs as (not root).
pub const RUN_AS: u32 = 65532;

const NAME: &str = "ferry";

mod deployment;
mod flow;
mod monitoring;
mod network;

pub use flow::flow_control;

pub use monitoring::{dashboard, queries, rule_groups};

/// A reason the manifests cannot be made.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct Error {
    /// The file at fault.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// What to deploy: the image, how many replicas (leader election on above one, unless the
/// configuration shards tenants), and who may scrape the metrics.
#[derive(Clone, Debug)]
pub struct Options {
    /// The container image.
    pub image: String,
    /// Replicas of the Deployment.
    pub replicas: u32,
    /// The namespaces allowed to reach ferry's metrics port (where Prometheus runs); none
    /// lets only the kubelet's probes in.
    pub metrics_namespaces: Vec<String>,
}

/// The super cluster's manifests, and warnings (kubeconfigs that read local files, which
/// the pod will not have).
pub struct Manifests {
    /// The documents, in the order to apply them.
    pub documents: Vec<Value>,
    /// What to look at before applying.
    pub warnings: Vec<String>,
}

fn labels() -> Value {
    json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "sync"})
}

fn meta(name: &str, namespace: Option<&str>) -> Value {
    let mut m = json!({"name": name, "labels": labels()});
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// Every file the running configuration reads, canonical: the config, the policy files, the
/// schemas and the transforms.
fn files(config_path: &Path, policy: &Policy) -> Result<Vec<PathBuf>, Error> {
    let mut out = vec![config_path.to_path_buf()];
    out.extend(policy.files.iter().cloned());
    for r in &policy.resources {
        if !r.plan.file.is_empty() {
            out.push(PathBuf::from(&r.plan.file));
        }
    }
    out.extend(policy.transforms.values().map(|t| t.file.clone()));
    let mut canonical = Vec::new();
    for f in out {
        let c = f.canonicalize().map_err(|e| Error {
            path: f.display().to_string(),
            message: e.to_string(),
        })?;
        if !canonical.contains(&c) {
            canonical.push(c);
        }
    }
    Ok(canonical)
}

/// The deepest directory holding every one of `files`.
fn common_root(files: &[PathBuf]) -> PathBuf {
    let mut root = files[0].parent().map(Path::to_path_buf).unwrap_or_default();
    while !files.iter().all(|f| f.starts_with(&root)) {
        if !root.pop() {
            break;
        }
    }
    root
}

/// A ConfigMap key for a path (keys hold no `/`).
fn key_of(relative: &str) -> String {
    relative
        .chars()
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') => c,
            _ => '_',
        })
        .collect()
}

/// The SyncConfig (rewritten for the pod) and the policy's files, as ConfigMap data.
struct ConfigFiles {
    /// ConfigMap key to file text.
    data: Map<String, Value>,
    /// The volume's items: key to relative path.
    items: Vec<Value>,
    /// Where the SyncConfig is mounted.
    mount: String,
}

/// The files of the SyncConfig at `config_path` and its policy, for the ConfigMap.
fn config_files(
    config_path: &Path,
    config: &Config,
    policy: &Policy,
    options: &Options,
) -> Result<ConfigFiles, Error> {
    let files = files(config_path, policy)?;
    let root = common_root(&files);
    let mut data = Map::new();
    let mut items = Vec::new();
    let mut config_mount = String::new();
    for (i, f) in files.iter().enumerate() {
        let relative = f
            .strip_prefix(&root)
            .unwrap_or(f)
            .to_string_lossy()
            .into_owned();
        let key = key_of(&relative);
        if data.contains_key(&key) {
            return Err(Error {
                path: f.display().to_string(),
                message: format!("two files map to ConfigMap key {key:?}; rename one"),
            });
        }
        let text = std::fs::read_to_string(f).map_err(|e| Error {
            path: f.display().to_string(),
            message: e.to_string(),
        })?;
        let text = if i == 0 {
            config_mount = format!("{CONFIG_DIR}/{relative}");
            rewritten(&text, config, options, policy_mount(config, &root)).map_err(|message| {
                Error {
                    path: f.display().to_string(),
                    message,
                }
            })?
        } else {
            text
        };
        data.insert(key.clone(), Value::String(text));
        items.push(json!({"key": key, "path": relative}));
    }
    Ok(ConfigFiles {
        data,
        items,
        mount: config_mount,
    })
}

/// The PodDisruptionBudget: sharded replicas are drained one at a time (each hands its
/// tenants over); leader-elected ones keep one running.
fn disruption_budget(namespace: &str, config: &Config, options: &Options) -> Value {
    let budget = if options.replicas > 1 && config.sharding.is_none() {
        json!({"minAvailable": 1})
    } else {
        json!({"maxUnavailable": 1})
    };
    let mut pdb = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(NAME, Some(namespace)),
        "spec": {"selector": {"matchLabels": labels()}},
    });
    for (k, v) in budget.as_object().into_iter().flatten() {
        pdb["spec"][k] = v.clone();
    }
    pdb
}

/// The super cluster's manifests for the SyncConfig at `config_path`.
pub fn super_cluster(
    config_path: &Path,
    config: &Config,
    policy: &Policy,
    options: &Options,
) -> Result<Manifests, Error> {
    let namespace = config.ferry_namespace();
    let ConfigFiles {
        data,
        items,
        mount: config_mount,
    } = config_files(config_path, config, policy, options)?;
    let (kubeconfigs, mut warnings) = kubeconfigs(config)?;
    // New configuration or rotated kubeconfigs roll the pods.
    let digest = hex(&Sha256::digest(
        serde_json::to_vec(&(&data, &kubeconfigs)).unwrap_or_default(),
    ));
    let mut documents = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(namespace, None)}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, Some(namespace))}),
    ];
    documents.extend(access(config, policy, namespace));
    documents.push(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("ferry-config", Some(namespace)),
        "data": data,
    }));
    if !kubeconfigs.is_empty() {
        documents.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta("ferry-kubeconfigs", Some(namespace)),
            "type": "Opaque",
            "stringData": kubeconfigs,
        }));
    }
    let port = config.metrics_address.port();
    let pod = deployment::Pod {
        namespace,
        config: &config_mount,
        digest: &digest,
        items,
        port,
        kubeconfigs: !kubeconfigs.is_empty(),
        sharding: config.sharding.as_ref(),
    };
    documents.push(deployment::deployment(pod, options));
    documents.push(disruption_budget(namespace, config, options));
    documents.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("ferry-metrics", Some(namespace)),
        "spec": {
            "selector": labels(),
            "ports": [{"name": "metrics", "port": port, "targetPort": "metrics"}],
        },
    }));
    documents.push(network::network_policy(
        namespace,
        port,
        &options.metrics_namespaces,
    ));
    // Operating the fleet: the alerts (Prometheus Operator) and a Grafana dashboard.
    documents.push(monitoring::service_monitor(namespace));
    documents.push(monitoring::prometheus_rule(namespace));
    documents.push(monitoring::dashboard_config_map(namespace));
    // Fair queuing of ferry's requests by namespace (so by tenant) in the API server.
    documents.extend(flow_control(json!({
        "kind": "ServiceAccount",
        "serviceAccount": {"name": NAME, "namespace": namespace},
    })));
    if options.metrics_namespaces.is_empty() {
        warnings.push(format!(
            "no --metrics-namespace: the NetworkPolicy lets only the kubelet's probes reach port {port}; name the namespace Prometheus scrapes from"
        ));
    }
    if config.tenants.is_empty() && config.tenant_secrets.is_none() {
        warnings.push("the configuration names no tenant and no tenantSecrets".into());
    }
    Ok(Manifests {
        documents,
        warnings,
    })
}

/// What ferry's service account (in `namespace`) may do: the super side of `ferry rbac`
/// cluster-wide, its Lease in its own namespace, and the kubeconfig Secrets of
/// `tenantSecrets` in theirs; each role with its binding.
fn access(config: &Config, policy: &Policy, namespace: &str) -> Vec<Value> {
    let binding = |kind: &str, name: &str, at: Option<&str>| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": format!("{kind}Binding"),
            "metadata": meta(name, at),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        })
    };
    let mut roles = crate::rbac::cluster_roles(policy);
    let mut documents = vec![
        roles.remove(0),
        binding("ClusterRole", "ferry-super", None),
        // The Lease of leader election (and of sharding) lives in ferry's namespace alone.
        crate::rbac::lease_role(namespace),
        binding("Role", "ferry-leases", Some(namespace)),
    ];
    if let Some(ts) = &config.tenant_secrets {
        documents.push(crate::rbac::tenant_secrets_role(&ts.namespace));
        documents.push(binding("Role", "ferry-tenant-secrets", Some(&ts.namespace)));
    }
    documents
}

/// The configuration as the pod reads it: the first super through the service account, the
/// other kubeconfigs from the Secret, metrics on every interface, leader election with
/// several replicas.
fn rewritten(
    text: &str,
    config: &Config,
    options: &Options,
    policy_mount: Option<String>,
) -> Result<String, String> {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let spec = doc
        .get_mut("spec")
        .and_then(serde_yaml::Value::as_mapping_mut)
        .ok_or("spec: expected a mapping")?;
    if spec.contains_key("super") {
        spec.insert(
            "super".into(),
            serde_yaml::to_value(json!({"inCluster": true})).map_err(|e| e.to_string())?,
        );
    }
    if let Some(serde_yaml::Value::Sequence(supers)) = spec.get_mut("supers") {
        for (i, s) in supers.iter_mut().enumerate() {
            let Some(m) = s.as_mapping_mut() else {
                continue;
            };
            if i == 0 {
                m.remove("kubeconfig");
                m.insert("inCluster".into(), true.into());
            } else if config.supers.get(i).is_some_and(|s| s.kubeconfig.is_some()) {
                m.remove("kubeconfig");
                let name = config.supers[i].name.clone();
                m.insert(
                    "kubeconfig".into(),
                    format!("{KUBECONFIG_DIR}/super.{name}.kubeconfig").into(),
                );
            }
        }
    }
    if let Some(serde_yaml::Value::Sequence(tenants)) = spec.get_mut("tenants") {
        for t in tenants.iter_mut() {
            let Some(m) = t.as_mapping_mut() else {
                continue;
            };
            let name = m
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string();
            m.insert(
                "kubeconfig".into(),
                format!("{KUBECONFIG_DIR}/tenant.{name}.kubeconfig").into(),
            );
        }
    }
    if let Some(policy) = policy_mount {
        spec.insert("policy".into(), policy.into());
    }
    let port = config.metrics_address.port();
    spec.insert(
        "metrics".into(),
        serde_yaml::to_value(json!({"address": format!("0.0.0.0:{port}")}))
            .map_err(|e| e.to_string())?,
    );
    if options.replicas > 1 && config.sharding.is_none() {
        let le = &config.leader_election;
        spec.insert(
            "leaderElection".into(),
            serde_yaml::to_value(
                json!({"enabled": true, "namespace": le.namespace, "lease": le.lease}),
            )
            .map_err(|e| e.to_string())?,
        );
    }
    serde_yaml::to_string(&doc).map_err(|e| e.to_string())
}

/// Where the policy (file or directory) is in the pod.
fn policy_mount(config: &Config, root: &Path) -> Option<String> {
    let canonical = config.policy.canonicalize().ok()?;
    let relative = canonical.strip_prefix(root).ok()?;
    Some(format!("{CONFIG_DIR}/{}", relative.display()))
}

/// The static tenants' and the other supers' kubeconfigs, by Secret key; warnings for those
/// that read local files or run commands (the pod has neither).
fn kubeconfigs(config: &Config) -> Result<(Map<String, Value>, Vec<String>), Error> {
    let mut out = Map::new();
    let warnings = Vec::new();
    let entries = config
        .supers
        .iter()
        .skip(1)
        .filter_map(|s| {
            Some((
                format!("super.{}.kubeconfig", s.name),
                s.kubeconfig.clone()?,
            ))
        })
        .chain(config.tenants.iter().map(|t| {
            (
                format!("tenant.{}.kubeconfig", t.name.as_str()),
                t.kubeconfig.clone(),
            )
        }));
    for (key, path) in entries {
        let text = std::fs::read_to_string(&path).map_err(|e| Error {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| Error {
            path: path.display().to_string(),
            message: format!("not a kubeconfig: {e}"),
        })?;
        // A file the pod does not have, a command it cannot run, or (tokenFile) the pod's own
        // service account token sent to whatever server the kubeconfig names.
        if let Some(field) = reads_files(&doc) {
            return Err(Error {
                path: path.display().to_string(),
                message: format!(
                    "{field} reads a local file or runs a command, which the pod must not; embed the data (certificate-authority-data, client-*-data, token)"
                ),
            });
        }
        out.insert(key, Value::String(text));
    }
    Ok((out, warnings))
}

/// The first key of `doc` (at any depth) that makes a kubeconfig read a file or run a command.
fn reads_files(doc: &serde_yaml::Value) -> Option<String> {
    const FIELDS: [&str; 6] = [
        "certificate-authority",
        "client-certificate",
        "client-key",
        "tokenFile",
        "exec",
        "auth-provider",
    ];
    match doc {
        serde_yaml::Value::Mapping(m) => m.iter().find_map(|(k, v)| {
            let key = k.as_str().unwrap_or("");
            if FIELDS.contains(&key) && !v.is_null() {
                Some(key.to_string())
            } else {
                reads_files(v)
            }
        }),
        serde_yaml::Value::Sequence(items) => items.iter().find_map(reads_files),
        _ => None,
    }
}

/// What to apply in a tenant's cluster: a namespace and service account for ferry,
/// and the ClusterRole of `ferry rbac` bound to it (make ferry's kubeconfig for the tenant
/// from that account's token).
pub fn tenant(policy: &Policy, namespace: &str) -> Vec<Value> {
    let role = crate::rbac::cluster_roles(policy).remove(1);
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(namespace, None)}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, Some(namespace))}),
        role,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta("ferry-tenant", None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ferry-tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        }),
    ]
}
