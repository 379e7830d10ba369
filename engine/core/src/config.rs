//! The live engine's configuration file (`ferry run --config FILE`, DESIGN.md "Live sync"),
//! loaded as strictly as a policy: unknown fields, bad durations and bad tenant sets are errors
//! that name the file, line and column.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::locate::{yaml_message, Location, Positions};
use crate::naming::{check_tenant_set, Tenant};
use crate::policy::options::relative;

mod namespaces;
mod secrets;
mod sharding;
mod supers;

pub use crate::translate::NamespaceLabels;
pub use namespaces::{PlatformNamespaces, DEFAULT_PLATFORM_NAMESPACES};
pub use secrets::{TenantSecrets, DEFAULT_SECRETS_NAMESPACE};
pub use sharding::Sharding;
pub use supers::{candidates, place, PlacementRule, SuperConfig, DEFAULT_SUPER};

/// A problem with the configuration file.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct Error {
    /// Where.
    pub at: Location,
    /// What was expected and found.
    pub message: String,
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A SyncConfig: what `ferry run` syncs, between which clusters.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "SyncConfig")]
struct File {
    /// `ferry.dev/v1alpha1`.
    api_version: String,
    /// `SyncConfig`.
    kind: String,
    /// Name and labels; informational.
    #[serde(default)]
    #[schemars(with = "Option<crate::policy::model::Metadata>")]
    metadata: Option<serde_yaml::Value>,
    /// The configuration.
    spec: Spec,
}

/// `spec` of a SyncConfig.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    /// The policy file or directory (every `*.yaml` in it), relative to this file.
    policy: String,
    /// The one super cluster (named `super`); or give `supers`.
    #[serde(rename = "super", default)]
    super_cluster: Option<Cluster>,
    /// Several super clusters, in order (the first holds the Lease and the tenant Secrets).
    #[serde(default)]
    supers: Option<Vec<supers::SuperEntry>>,
    /// Which supers a tenant namespace may run in; the first rule that applies decides.
    #[serde(default)]
    placement: Vec<supers::RuleEntry>,
    /// Tenant control planes from kubeconfig files (names: DNS labels of at most 20
    /// characters, none a prefix of another plus `-`). Edit while running: applied live.
    #[serde(default)]
    tenants: Vec<TenantEntry>,
    /// How often the patrol compares everything ferry owns with what it should be (`60s`).
    #[serde(default)]
    patrol_interval: Option<String>,
    /// Leader election through a Lease in the first super cluster (only the leader writes).
    #[serde(default)]
    leader_election: Option<LeaderElection>,
    /// Tenants spread over several replicas through Leases (exclusive with
    /// `leaderElection`).
    #[serde(default)]
    sharding: Option<sharding::ShardingEntry>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[serde(default)]
    metrics: Option<Metrics>,
    /// Tenants from kubeconfig Secrets in the first super cluster, beside `tenants`.
    #[serde(default)]
    tenant_secrets: Option<secrets::TenantSecretsEntry>,
    /// Super namespaces ferry never creates, labels or writes into, names or globs (`*` any
    /// characters, `?` one); a tenant namespace whose super name matches one is refused
    /// (`OutsideTenant`). Absent: `kube-*`, `default`, `ferry-*`, `istio-system`,
    /// `cert-manager`, `ingress-nginx`, `monitoring`, `flux-system`, `argocd`,
    /// `gatekeeper-system`, `kyverno`, `velero`, `keda`, `crossplane-system`,
    /// `tekton-pipelines`. A list replaces these defaults entirely (`[]`: none).
    #[serde(default)]
    platform_namespaces: Option<Vec<String>>,
    /// Which tenant namespace labels super namespaces carry (default: none).
    #[serde(default)]
    namespace_labels: Option<namespaces::NamespaceLabelsEntry>,
    /// How ferry's writes to each super cluster are paced: `unlimited` (default) sends what
    /// the workers have (each tenant's share of them is the limit); `adaptive` keeps that API
    /// server's queue short with a limit on writes in flight learnt from its answers, the
    /// tenants' writes over it served in turn.
    #[serde(default)]
    super_writes: Option<SuperWrites>,
}

/// How ferry's writes to a super cluster are paced (`spec.superWrites`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SuperWrites {
    /// As many as the workers send.
    #[default]
    Unlimited,
    /// A limit on writes in flight learnt from the answers' times; tenants in turn.
    Adaptive,
}

/// A super cluster: its kubeconfig, or the pod's service account.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Cluster {
    /// A kubeconfig file, relative to this file.
    #[serde(default)]
    kubeconfig: Option<String>,
    /// The pod's service account (also when `kubeconfig` is absent).
    #[serde(default)]
    in_cluster: Option<bool>,
}

/// A tenant control plane.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TenantEntry {
    /// The tenant's name: a DNS label of at most 20 characters.
    name: String,
    /// Its kubeconfig file, relative to this file.
    kubeconfig: String,
    /// Its DNS domains (beside the policy's `spec.domains`): an `x-ferry-host: external`
    /// name must lie under one.
    #[serde(default)]
    domains: Vec<String>,
}

/// Leader election settings (a coordination.k8s.io Lease in the super cluster).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaderElection {
    /// Whether to elect a leader (only the leader writes).
    #[serde(default)]
    pub enabled: bool,
    /// The Lease's namespace.
    #[serde(default = "default_lease_namespace")]
    pub namespace: String,
    /// The Lease's name.
    #[serde(default = "default_lease_name")]
    pub lease: String,
}

fn default_lease_namespace() -> String {
    "ferry-system".into()
}

fn default_lease_name() -> String {
    "ferry".into()
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: default_lease_namespace(),
            lease: default_lease_name(),
        }
    }
}

/// The metrics endpoint.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Metrics {
    /// `host:port` (default `127.0.0.1:9464`).
    address: String,
}

/// The JSON Schema of a SyncConfig file (for editors: `# yaml-language-server: $schema=`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(File)).unwrap_or_default()
}

/// One tenant control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantConfig {
    /// The tenant.
    pub name: Tenant,
    /// Its kubeconfig, resolved against the config file.
    pub kubeconfig: PathBuf,
    /// Its DNS domains.
    pub domains: Vec<String>,
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The policy file or directory.
    pub policy: PathBuf,
    /// The super clusters, in config order (at least one; `super: {kubeconfig}` is one
    /// named `super`).
    pub supers: Vec<SuperConfig>,
    /// Placement rules, first match wins.
    pub placement: Vec<PlacementRule>,
    /// The tenants, a valid set (no duplicates, no `a-` prefix of another).
    pub tenants: Vec<TenantConfig>,
    /// How often the patrol compares desired and actual state.
    pub patrol_interval: Duration,
    /// Leader election.
    pub leader_election: LeaderElection,
    /// Tenants spread over replicas (`None`: one replica, or leader election, syncs all).
    pub sharding: Option<Sharding>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_address: std::net::SocketAddr,
    /// Tenants from kubeconfig Secrets, beside the static ones.
    pub tenant_secrets: Option<TenantSecrets>,
    /// Super namespaces ferry never creates, labels or writes into.
    pub platform_namespaces: PlatformNamespaces,
    /// Which tenant namespace labels super namespaces carry.
    pub namespace_labels: NamespaceLabels,
    /// How writes to each super are paced.
    pub super_writes: SuperWrites,
}

impl Config {
    /// The namespace ferry runs in and keeps its Leases in: sharding's, else leader
    /// election's.
    pub fn ferry_namespace(&self) -> &str {
        self.sharding
            .as_ref()
            .map_or(&self.leader_election.namespace, |s| &s.namespace)
    }

    /// ferry's own namespaces in the first super cluster: the Lease's (leader election and
    /// sharding) and the tenant Secrets'. No tenant may own one.
    pub fn own_namespaces(&self) -> Vec<String> {
        let mut own = vec![self.leader_election.namespace.clone()];
        own.extend(self.tenant_secrets.as_ref().map(|t| t.namespace.clone()));
        own.extend(self.sharding.as_ref().map(|s| s.namespace.clone()));
        own.dedup();
        own
    }
}

/// Parses `30s`, `5m`, `1h`, `500ms` (or a plain number of seconds).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n * 60)),
        "h" => Some(Duration::from_secs(n * 3600)),
        _ => None,
    }
}

/// The tenants of `spec.tenants` in the config file `path`: valid names and domains, a valid
/// set, each domain apart from the others'.
fn tenants(
    path: &Path,
    positions: &Positions,
    entries: &[TenantEntry],
) -> Result<Vec<TenantConfig>> {
    let invalid = |at: &str, message: String| Error {
        at: positions.at(at),
        message,
    };
    let mut tenants = Vec::new();
    for (i, t) in entries.iter().enumerate() {
        let name = Tenant::new(&t.name)
            .map_err(|e| invalid(&format!("spec.tenants[{i}].name"), e.to_string()))?;
        for (j, domain) in t.domains.iter().enumerate() {
            if let Some(why) = crate::naming::embedded::domain_problem(domain) {
                return Err(invalid(
                    &format!("spec.tenants[{i}].domains[{j}]"),
                    format!("{domain:?}: {why}"),
                ));
            }
        }
        tenants.push(TenantConfig {
            name,
            kubeconfig: relative(path, &t.kubeconfig),
            domains: t.domains.clone(),
        });
    }
    domains_apart(&tenants)
        .map_err(|(i, message)| invalid(&format!("spec.tenants[{i}].domains"), message))?;
    check_tenant_set(tenants.iter().map(|t| &t.name)).map_err(|e| {
        // Point at the entry that makes the set invalid: the longer name, or the repeat.
        let culprit = match &e {
            crate::naming::Error::PrefixCollision { long, .. } => {
                tenants.iter().position(|t| t.name.as_str() == long)
            }
            crate::naming::Error::DuplicateTenant(name) => {
                tenants.iter().rposition(|t| t.name.as_str() == name)
            }
            crate::naming::Error::InvalidTenant { .. } => None,
        };
        let at = culprit.map_or("spec.tenants".to_string(), |i| {
            format!("spec.tenants[{i}].name")
        });
        invalid(&at, e.to_string())
    })?;
    Ok(tenants)
}

/// ferry's own namespaces, as the config names them.
struct Own<'a> {
    leader_election: Option<&'a LeaderElection>,
    tenant_secrets: Option<&'a TenantSecrets>,
    sharding: Option<&'a Sharding>,
}

impl Own<'_> {
    /// ferry's own namespaces (the Lease's, the tenant Secrets') must not be reachable as a
    /// tenant's super namespace, nor be one another.
    fn apart(&self, positions: &Positions, tenants: &[TenantConfig]) -> Result<()> {
        let invalid = |at: &str, message: String| Error {
            at: positions.at(at),
            message,
        };
        // tenant's super namespace.
        let lease_ns = self
            .leader_election
            .map_or(LeaderElection::default().namespace, |l| l.namespace.clone());
        if let Some(ts) = self.tenant_secrets.filter(|t| t.namespace == lease_ns) {
            return Err(invalid(
                "spec.tenantSecrets",
                format!(
                    "tenantSecrets.namespace {:?} is ferry's own namespace (leaderElection.namespace): whoever writes tenant Secrets there could reach ferry's credentials; use a namespace of their own",
                    ts.namespace
                ),
            ));
        }
        if let Some(sh) = self.sharding.filter(|sh| {
            self.tenant_secrets
                .is_some_and(|t| t.namespace == sh.namespace)
        }) {
            return Err(invalid(
                "spec.sharding.namespace",
                format!(
                    "sharding.namespace {:?} is the tenant Secrets' namespace: whoever writes tenant Secrets could forge ferry's Leases; use ferry's own namespace",
                    sh.namespace
                ),
            ));
        }
        let owned: Vec<String> = std::iter::once(lease_ns)
            .chain(self.tenant_secrets.map(|t| t.namespace.clone()))
            .chain(self.sharding.map(|s| s.namespace.clone()))
            .collect();
        if let Some((i, t, own)) = tenants.iter().enumerate().find_map(|(i, t)| {
            owned
                .iter()
                .find(|own| own.starts_with(&format!("{}-", t.name)))
                .map(|own| (i, t, own))
        }) {
            return Err(invalid(
                &format!("spec.tenants[{i}].name"),
                format!(
                    "tenant {:?} could own ferry's namespace {own:?} (its namespace {:?} maps there); rename the tenant or ferry's namespace",
                    t.name.as_str(),
                    &own[t.name.as_str().len() + 1..]
                ),
            ));
        }
        Ok(())
    }
}

/// `spec.patrolInterval`: 60s unless given.
fn patrol_interval(positions: &Positions, text: Option<&str>) -> Result<Duration> {
    let Some(text) = text else {
        return Ok(Duration::from_secs(60));
    };
    match parse_duration(text) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(Error {
            at: positions.at("spec.patrolInterval"),
            message: format!("patrolInterval: expected a duration like 60s or 5m, found {text:?}"),
        }),
    }
}

/// `spec.metrics.address`: 127.0.0.1:9464 unless given.
fn metrics_address(
    positions: &Positions,
    metrics: Option<Metrics>,
) -> Result<std::net::SocketAddr> {
    let metrics_text = metrics
        .map(|m| m.address)
        .unwrap_or_else(|| "127.0.0.1:9464".into());
    metrics_text.parse().map_err(|_| Error {
        at: positions.at("spec.metrics.address"),
        message: format!(
            "metrics.address: expected host:port like 127.0.0.1:9464, found {metrics_text:?}"
        ),
    })
}

/// Loads and validates `path`.
pub fn load(path: &Path) -> Result<Config> {
    let text = crate::locate::read_text(path).map_err(|e| Error {
        at: Location::file(path),
        message: format!("cannot read: {e}"),
    })?;
    let file: File = serde_yaml::from_str(&text).map_err(|e| Error {
        at: Location::of_yaml_error(path, &e, 0),
        message: yaml_message(&e),
    })?;
    let positions = Positions::index(path, &text);
    if let Some((at, message)) = positions.duplicate_error() {
        return Err(Error { at, message });
    }
    let invalid = |at: &str, message: String| Error {
        at: positions.at(at),
        message,
    };
    if file.api_version != "ferry.dev/v1alpha1" {
        return Err(invalid(
            "apiVersion",
            format!(
                "apiVersion: expected \"ferry.dev/v1alpha1\", found {:?}",
                file.api_version
            ),
        ));
    }
    if file.kind != "SyncConfig" {
        return Err(invalid(
            "kind",
            format!("kind: expected \"SyncConfig\", found {:?}", file.kind),
        ));
    }
    let _ = file.metadata;
    let spec = file.spec;
    let tenants = tenants(path, &positions, &spec.tenants)?;
    let tenant_secrets = spec
        .tenant_secrets
        .map(|e| secrets::tenant_secrets(&positions, e))
        .transpose()?;
    let leader_elect = spec.leader_election.as_ref().is_some_and(|l| l.enabled);
    let sharding = sharding::sharding(&positions, spec.sharding, leader_elect)?;
    let own = Own {
        leader_election: spec.leader_election.as_ref(),
        tenant_secrets: tenant_secrets.as_ref(),
        sharding: sharding.as_ref(),
    };
    own.apart(&positions, &tenants)?;
    let patrol_interval = patrol_interval(&positions, spec.patrol_interval.as_deref())?;
    let metrics_address = metrics_address(&positions, spec.metrics)?;
    let supers = supers::supers(path, &positions, spec.super_cluster, spec.supers)?;
    let names: Vec<Tenant> = tenants.iter().map(|t| t.name.clone()).collect();
    let placement = supers::rules(&positions, spec.placement, &supers, &names)?;
    let platform_namespaces =
        namespaces::platform_namespaces(&positions, spec.platform_namespaces)?;
    let namespace_labels = namespaces::namespace_labels(&positions, spec.namespace_labels)?;
    Ok(Config {
        policy: relative(path, &spec.policy),
        supers,
        placement,
        tenants,
        patrol_interval,
        leader_election: spec.leader_election.unwrap_or_default(),
        sharding,
        metrics_address,
        tenant_secrets,
        platform_namespaces,
        namespace_labels,
        super_writes: spec.super_writes.unwrap_or_default(),
    })
}

/// Two tenants never share a domain, nor hold one under the other's: each would then own the
/// other's host names. Gives the later tenant's index and why.
fn domains_apart(tenants: &[TenantConfig]) -> std::result::Result<(), (usize, String)> {
    let normal = |d: &String| crate::naming::embedded::normalize_host(d).unwrap_or_default();
    for (i, t) in tenants.iter().enumerate() {
        for earlier in &tenants[..i] {
            for mine in t.domains.iter().map(normal) {
                let theirs: Vec<String> = earlier.domains.iter().map(normal).collect();
                let mine_under = crate::naming::embedded::under_domain(&mine, &theirs);
                let theirs_under = theirs
                    .iter()
                    .any(|d| crate::naming::embedded::under_domain(d, std::slice::from_ref(&mine)));
                if mine_under || theirs_under {
                    return Err((
                        i,
                        format!(
                            "{mine:?} overlaps a domain of tenant {} (a tenant's domains are its own: none may be another's or lie under it)",
                            earlier.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
