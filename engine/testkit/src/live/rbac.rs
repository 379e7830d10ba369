//! The restricted identity of [`Identity::Rbac`](super::Identity::Rbac): the roles `ferry
//! rbac` prints, installed in the local clusters and bound to [`RBAC_USER`].

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::{FERRY_NAMESPACE, RBAC_USER};

/// Installs the roles `ferry rbac` prints for `policy`, bound to [`RBAC_USER`]: the
/// ClusterRoles `ferry-super` in the super cluster and `ferry-tenant` in each tenant, and the
/// Role `ferry-leases` in [`FERRY_NAMESPACE`] of the super cluster.
pub async fn install_rbac(ferry: &Path, policy: &Path, clusters: &crate::Clusters) -> Result<()> {
    let out = Command::new(ferry)
        .args(["rbac", "--namespace", FERRY_NAMESPACE, "--policy"])
        .arg(policy)
        .output()
        .context("running ferry rbac")?;
    if !out.status.success() {
        bail!(
            "ferry rbac failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let mut roles = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            roles.push(v);
        }
    }
    let targets = std::iter::once(("ferry-super", &clusters.super_cluster))
        .chain(clusters.tenants.values().map(|c| ("ferry-tenant", c)));
    for (role_name, client) in targets {
        let role = roles
            .iter()
            .find(|r| r["metadata"]["name"] == role_name)
            .with_context(|| format!("ferry rbac printed no {role_name}"))?;
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{role_name}-{RBAC_USER}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RBAC_USER}],
        });
        for (kind, object) in [("ClusterRole", role), ("ClusterRoleBinding", &binding)] {
            let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind);
            let api = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
            apply(&api, kind, object).await?;
        }
    }
    let lease_role = roles
        .iter()
        .find(|r| r["kind"] == "Role" && r["metadata"]["name"] == "ferry-leases")
        .context("ferry rbac printed no Role ferry-leases")?;
    install_lease_role(&clusters.super_cluster, lease_role).await
}

/// The Role holding ferry's Lease, bound to [`RBAC_USER`] in [`FERRY_NAMESPACE`] (made first:
/// a Role needs its namespace).
async fn install_lease_role(client: &Client, role: &Value) -> Result<()> {
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FERRY_NAMESPACE}});
    namespaces
        .patch(
            FERRY_NAMESPACE,
            &PatchParams::apply("ferry-testkit").force(),
            &Patch::Apply(&namespace),
        )
        .await
        .context("applying ferry's namespace")?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": format!("ferry-leases-{RBAC_USER}"), "namespace": FERRY_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ferry-leases"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RBAC_USER}],
    });
    for (kind, object) in [("Role", role), ("RoleBinding", &binding)] {
        let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind);
        let api = Api::namespaced_with(
            client.clone(),
            FERRY_NAMESPACE,
            &ApiResource::from_gvk(&gvk),
        );
        apply(&api, kind, object).await?;
    }
    Ok(())
}

/// Server-side applies `object` (a `kind`) as the harness's field manager.
async fn apply(api: &Api<DynamicObject>, kind: &str, object: &Value) -> Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply("ferry-testkit").force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}
