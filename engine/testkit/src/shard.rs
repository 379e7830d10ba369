//! What sharded replicas agreed on: the holders of the tenant Leases, and `ferry shard
//! plan`'s answer for a set of members.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::Client;

/// Tenant → holder of its Lease `ferry-tenant-<tenant>` in `namespace` (empty: released).
pub async fn holders(client: &Client, namespace: &str) -> Result<BTreeMap<String, String>> {
    let leases = Api::<Lease>::namespaced(client.clone(), namespace);
    let list = leases.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name?;
            let tenant = name.strip_prefix("ferry-tenant-")?.to_string();
            Some((tenant, l.spec?.holder_identity.unwrap_or_default()))
        })
        .collect())
}

/// `ferry shard plan --config <config> --members <members>` run with binary `ferry`: tenant →
/// owner.
pub fn plan(ferry: &Path, config: &Path, members: &[String]) -> Result<BTreeMap<String, String>> {
    let out = std::process::Command::new(ferry)
        .args(["shard", "plan", "--config"])
        .arg(config)
        .arg("--members")
        .arg(members.join(","))
        .output()?;
    ensure!(
        out.status.success(),
        "ferry shard plan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(t, o)| (t.to_string(), o.to_string()))
        .collect())
}
