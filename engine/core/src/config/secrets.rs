//! Tenants from kubeconfig Secrets (DESIGN.md "Running in a cluster"): the `tenantSecrets`
//! entry of a SyncConfig. The Secrets live in the first super cluster, in one namespace.

use crate::keys::{DEFAULT_NAME_LABEL, DEFAULT_SECRET_LABEL};
use schemars::JsonSchema;
use serde::Deserialize;

use super::Error;
use crate::locate::Positions;
use crate::naming::{dns_label_problem, qualified_name_problem};
use crate::policy::LabelSelector;

/// The namespace the Secrets are read from when the entry names none (never ferry's own:
/// whoever writes Secrets there is not trusted like ferry's own credentials).
pub const DEFAULT_SECRETS_NAMESPACE: &str = "ferry-tenants";

/// Tenants from kubeconfig Secrets (vcluster, VirtualCluster), added, rotated and removed live.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct TenantSecretsEntry {
    /// The Secrets' namespace in the first super cluster (default `ferry-tenants`; never
    /// ferry's own namespace, `leaderElection.namespace`).
    #[serde(default)]
    namespace: Option<String>,
    /// Which Secrets there are tenants (default `ferry.dev/tenant-kubeconfig=true`).
    #[serde(default)]
    selector: Option<LabelSelector>,
    /// The data key holding the kubeconfig (default `kubeconfig`; vcluster: `config`,
    /// VirtualCluster: `admin-kubeconfig`).
    #[serde(default)]
    key: Option<String>,
    /// The label naming the tenant (default `ferry.dev/tenant-name`); without it, the
    /// Secret's name.
    #[serde(default)]
    name_label: Option<String>,
    /// Allow kubeconfigs that skip TLS verification or use plain http.
    #[serde(default)]
    allow_insecure: bool,
    /// Allow kubeconfigs that name a proxy.
    #[serde(default)]
    allow_proxy: bool,
}

/// Where tenants' kubeconfig Secrets are, and what a kubeconfig from one may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSecrets {
    /// The namespace of the Secrets (in the first super cluster).
    pub namespace: String,
    /// Which Secrets there are tenants.
    pub selector: LabelSelector,
    /// The data key holding the kubeconfig (vcluster: `config`, VirtualCluster:
    /// `admin-kubeconfig`).
    pub key: String,
    /// The label naming the tenant; a Secret without it names the tenant by its own name.
    pub name_label: String,
    /// Whether a kubeconfig may skip TLS verification or use plain http.
    pub allow_insecure: bool,
    /// Whether a kubeconfig may name a proxy.
    pub allow_proxy: bool,
}

/// The `tenantSecrets` entry, checked.
pub(super) fn tenant_secrets(
    positions: &Positions,
    e: TenantSecretsEntry,
) -> Result<TenantSecrets, Error> {
    let invalid = |at: &str, message: String| Error {
        at: positions.at(&format!("spec.tenantSecrets{at}")),
        message,
    };
    let namespace = e
        .namespace
        .unwrap_or_else(|| DEFAULT_SECRETS_NAMESPACE.into());
    if let Some(why) = dns_label_problem(&namespace) {
        return Err(invalid(
            ".namespace",
            format!("tenantSecrets.namespace: {namespace:?} is not a namespace name: {why}"),
        ));
    }
    let selector = e.selector.unwrap_or_else(|| LabelSelector {
        match_labels: [(DEFAULT_SECRET_LABEL.to_string(), "true".to_string())].into(),
        match_expressions: Vec::new(),
    });
    if let Some(problem) = selector.problem() {
        return Err(invalid(
            ".selector",
            format!("tenantSecrets.selector: {problem}"),
        ));
    }
    let key = e.key.unwrap_or_else(|| "kubeconfig".into());
    let key_ok = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !key_ok {
        return Err(invalid(
            ".key",
            format!("tenantSecrets.key: expected a Secret data key (letters, digits, '-', '_', '.'), found {key:?}"),
        ));
    }
    let name_label = e.name_label.unwrap_or_else(|| DEFAULT_NAME_LABEL.into());
    if let Some(why) = qualified_name_problem(&name_label) {
        return Err(invalid(
            ".nameLabel",
            format!("tenantSecrets.nameLabel: {name_label:?} is not a label key: {why}"),
        ));
    }
    Ok(TenantSecrets {
        namespace,
        selector,
        key,
        name_label,
        allow_insecure: e.allow_insecure,
        allow_proxy: e.allow_proxy,
    })
}
