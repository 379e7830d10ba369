//! Test support for ferry's end-to-end tests: clients for the local control planes that
//! `cargo xtask cluster up` (or `cargo xtask test`) started, fresh namespaces per test, and
//! the CRDs of the policies' `schemas/` installed without ferry's annotations.
//!
//! ```text
//!  target/clusters/{super,team-a,team-b}.kubeconfig ─▶ Clusters::connect ─▶ kube::Client each
//!  policies/**/schemas/*.yaml ─▶ strip x-ferry-* ─▶ server-side apply ─▶ wait Established
//! ```
//!
//! Tests point at a user's own clusters with `FERRY_CLUSTERS_DIR` (a directory holding
//! `super.kubeconfig` and one `<tenant>.kubeconfig` per tenant).

pub mod audit;
pub mod faults;
pub mod live;
pub mod object;
pub mod shard;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Where the kubeconfigs are: `FERRY_CLUSTERS_DIR`, or `target/clusters`.
pub fn clusters_dir() -> PathBuf {
    std::env::var_os("FERRY_CLUSTERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/clusters"))
}

/// A client for the cluster whose kubeconfig is `path`.
pub async fn client(path: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| {
        format!(
            "reading {} (start the control planes with `cargo xtask cluster up`)",
            path.display()
        )
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The super cluster and the tenants.
pub struct Clusters {
    /// The super cluster.
    pub super_cluster: Client,
    /// Other super clusters (`cargo xtask cluster up --supers super,west`): name -> client.
    pub supers: BTreeMap<String, Client>,
    /// Tenant name -> client.
    pub tenants: BTreeMap<String, Client>,
}

impl Clusters {
    /// Connects to every cluster in [`clusters_dir`].
    pub async fn connect() -> Result<Self> {
        let dir = clusters_dir();
        let super_cluster = client(&dir.join("super.kubeconfig")).await?;
        // `state.json` marks the API servers of super clusters.
        let state: serde_json::Value = std::fs::read_to_string(dir.join("state.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let is_super = |name: &str| name == "super" || state["clusters"][name]["super"] == true;
        let mut tenants = BTreeMap::new();
        let mut supers = BTreeMap::new();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".kubeconfig"))
            else {
                continue;
            };
            if name == "super" {
                continue;
            }
            let connected = client(&path).await?;
            if is_super(name) {
                supers.insert(name.to_string(), connected);
            } else {
                tenants.insert(name.to_string(), connected);
            }
        }
        Ok(Self {
            super_cluster,
            supers,
            tenants,
        })
    }

    /// The client of super cluster `name` (`super` or another).
    pub fn super_named(&self, name: &str) -> &Client {
        if name == "super" {
            return &self.super_cluster;
        }
        self.supers.get(name).unwrap_or_else(|| {
            panic!("no super cluster {name} (cargo xtask cluster up --supers super,{name})")
        })
    }

    /// The client of `tenant`.
    pub fn tenant(&self, tenant: &str) -> &Client {
        self.tenants
            .get(tenant)
            .unwrap_or_else(|| panic!("no control plane for tenant {tenant}"))
    }
}

/// A name no other test uses: `prefix-<pid><counter><time>` cut to a DNS label.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let suffix = format!(
        "{:x}{:x}{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        nanos
    );
    let mut name = format!("{prefix}-{suffix}");
    name.truncate(40);
    name.trim_end_matches('-').to_string()
}

/// Creates a namespace with a unique name starting with `prefix`.
pub async fn fresh_namespace(client: &Client, prefix: &str) -> Result<String> {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Removes every `x-ferry-*` key (and kustomize's object-ref extensions), which a live API
/// server rejects in a CRD.
pub fn strip_annotations(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| {
                !k.starts_with("x-ferry-") && !k.starts_with("x-kubernetes-object-ref-")
            });
            map.values_mut().for_each(strip_annotations);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_annotations),
        _ => {}
    }
}

/// An overlay is sparse: installed as a CRD, the API server would prune every status field it
/// leaves out (a condition's `type`, `lastTransitionTime`), which the operator of a real
/// cluster writes. Every object below `status` keeps unknown fields.
fn keep_unknown_status(crd: &mut Value) {
    fn keep(node: &mut Value) {
        let Value::Object(map) = node else { return };
        let object = map.contains_key("properties")
            || map.get("type").and_then(Value::as_str) == Some("object");
        if object && !map.contains_key("additionalProperties") {
            map.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                Value::Bool(true),
            );
        }
        if let Some(Value::Object(props)) = map.get_mut("properties") {
            props.values_mut().for_each(keep);
        }
        if let Some(items) = map.get_mut("items") {
            keep(items);
        }
    }
    let versions = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut);
    for version in versions.into_iter().flatten() {
        if let Some(status) = version.pointer_mut("/schema/openAPIV3Schema/properties/status") {
            keep(status);
        }
    }
}

/// The schema files of the policies: every `*.yaml` in a `schemas/` directory below
/// `policies/`, in path order.
fn schema_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            schema_files(&entry, out)?;
        } else if dir.file_name().is_some_and(|n| n == "schemas")
            && entry.extension().is_some_and(|e| e == "yaml")
        {
            out.push(entry);
        }
    }
    Ok(())
}

/// The CRDs of the annotated schema files of `policies/` (the library's overlays and the
/// example's), annotations stripped.
pub fn schema_crds() -> Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    schema_files(&root().join("policies"), &mut files)?;
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut value: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("parsing {}", file.display()))?;
            if value.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                strip_annotations(&mut value);
                keep_unknown_status(&mut value);
                out.push(value);
            }
        }
    }
    Ok(out)
}

/// Server-side applies every CRD of the policies' `schemas/` and waits until each is Established.
pub async fn install_crds(client: &Client) -> Result<Vec<String>> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut names = Vec::new();
    for crd in schema_crds()? {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(
            &name,
            &PatchParams::apply("ferry-testkit").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing CRD {name}"))?;
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for name in &names {
        loop {
            let crd = api.get(name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not Established after 30s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(names)
}
