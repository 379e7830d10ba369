//! `ferry rbac` and `ferry manifests`: what to apply so that ferry can run, printed as YAML.

use std::path::Path;

use crate::{documents, fail};

fn print(docs: &[serde_json::Value]) -> anyhow::Result<()> {
    let texts: Vec<String> = docs
        .iter()
        .map(documents::to_yaml)
        .collect::<anyhow::Result<_>>()?;
    print!("{}", texts.join("---\n"));
    Ok(())
}

/// `ferry rbac --policy P | --config C [--namespace NS]`: the ClusterRoles of both sides;
/// with ferry's namespace (`--namespace`, or the config's leaderElection.namespace), the Role
/// holding its Lease there; with a config whose tenants come from Secrets, the Role reading
/// them.
pub fn rbac(
    policy: Option<&Path>,
    config: Option<&Path>,
    namespace: Option<&str>,
) -> anyhow::Result<u8> {
    let config = match config.map(ferry_core::config::load).transpose() {
        Ok(c) => c,
        Err(e) => return Ok(fail(&e)),
    };
    let policy_path = match (policy, &config) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(c)) => c.policy.clone(),
        (None, None) => return Ok(fail(&"give --policy or --config")),
    };
    let policy = match ferry_core::policy::load(&policy_path) {
        Ok(p) => p,
        Err(e) => return Ok(fail(&e)),
    };
    let mut docs = ferry_core::rbac::cluster_roles(&policy);
    let own = namespace.or(config.as_ref().map(|c| c.ferry_namespace()));
    if let Some(own) = own {
        if let Some(why) = ferry_core::naming::dns_label_problem(own) {
            return Ok(fail(&format!("--namespace {own:?}: {why}")));
        }
        docs.push(ferry_core::rbac::lease_role(own));
    }
    if let Some(ts) = config.as_ref().and_then(|c| c.tenant_secrets.as_ref()) {
        docs.push(ferry_core::rbac::tenant_secrets_role(&ts.namespace));
    }
    print(&docs)?;
    Ok(0)
}

/// `ferry manifests --config C [--image I] [--replicas N] [--metrics-namespace NS]...
/// [--tenant T]`.
pub fn manifests(
    config_path: &Path,
    options: ferry_core::manifests::Options,
    tenant: Option<&str>,
) -> anyhow::Result<u8> {
    let config = match ferry_core::config::load(config_path) {
        Ok(c) => c,
        Err(e) => return Ok(fail(&e)),
    };
    let policy = match ferry_core::policy::load(&config.policy) {
        Ok(p) => p,
        Err(e) => return Ok(fail(&e)),
    };
    if let Some(tenant) = tenant {
        if let Err(e) = ferry_core::naming::Tenant::new(tenant) {
            return Ok(fail(&format!("--tenant {tenant:?}: {e}")));
        }
        let namespace = config.ferry_namespace();
        print(&ferry_core::manifests::tenant(&policy, namespace))?;
        return Ok(0);
    }
    for ns in &options.metrics_namespaces {
        if let Some(why) = ferry_core::naming::dns_label_problem(ns) {
            return Ok(fail(&format!("--metrics-namespace {ns:?}: {why}")));
        }
    }
    let out = match ferry_core::manifests::super_cluster(config_path, &config, &policy, &options) {
        Ok(m) => m,
        Err(e) => return Ok(fail(&e)),
    };
    for w in &out.warnings {
        eprintln!("warning: {w}");
    }
    print(&out.documents)?;
    Ok(0)
}
