//! `ferry check --against KUBECONFIG`: every annotated field of every approved custom kind
//! must exist in the CRD installed in that cluster, at the approved version.

use ferry_core::check::unknown_field_rules;
use ferry_core::policy::{Policy, Resource};
use ferry_core::schema::load::plan_from_json;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kube::api::{Api, ListParams};
use kube::Client;

/// What went wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error(transparent)]
    Kubeconfig(#[from] crate::client::Error),
    /// The API server refused or failed a request.
    #[error("listing CustomResourceDefinitions: {0}")]
    Api(#[from] kube::Error),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One mismatch between the policy and the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Where in ferry's files (the policy entry or the annotation).
    pub at: String,
    /// What does not match.
    pub message: String,
}

/// A client for the cluster of `kubeconfig`.
pub async fn connect(kubeconfig: &std::path::Path) -> Result<Client> {
    Ok(crate::client::connect(kubeconfig).await?)
}

/// Compares every approved custom kind that has a schema with the CRD installed in the cluster.
/// Core and other built-in kinds are only checked to be served; their schemas are not compared.
pub async fn check(policy: &Policy, client: Client) -> Result<Vec<Mismatch>> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let mut out = Vec::new();
    for resource in &policy.resources {
        let gk = &resource.group_kind;
        if gk.group.is_empty() {
            continue;
        }
        let Some(crd) = crds
            .items
            .iter()
            .find(|c| c.spec.group == gk.group && c.spec.names.kind == gk.kind)
        else {
            // Not a CRD: a built-in kind (storage.k8s.io StorageClass) is fine if served.
            let gvk = kube::api::GroupVersionKind::gvk(&gk.group, resource.version(), &gk.kind);
            if kube::discovery::pinned_kind(&client, &gvk).await.is_err() {
                out.push(Mismatch {
                    at: resource.at.to_string(),
                    message: format!(
                        "{gk} is approved at {}, but the cluster does not serve it (no CustomResourceDefinition installed)",
                        resource.api_version
                    ),
                });
            }
            continue;
        };
        out.extend(against_crd(resource, crd));
    }
    Ok(out)
}

/// Where the policy entry `resource` disagrees with the installed `crd` of its kind.
fn against_crd(resource: &Resource, crd: &CustomResourceDefinition) -> Vec<Mismatch> {
    let gk = &resource.group_kind;
    let mut out = Vec::new();
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    let Some(version) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == resource.version())
    else {
        let served: Vec<_> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
        out.push(Mismatch {
            at: resource.at.to_string(),
            message: format!(
                "{gk} is approved at {}, but CRD {crd_name} serves {}",
                resource.api_version,
                served.join(", ")
            ),
        });
        return out;
    };
    if !version.served {
        out.push(Mismatch {
            at: resource.at.to_string(),
            message: format!(
                "{gk} is approved at {}, which CRD {crd_name} does not serve",
                resource.api_version
            ),
        });
    }
    if !resource.plan.root.is_empty() {
        out.extend(against_schema(resource, &crd_name, version));
    }
    out
}

/// Where the annotated schema of `resource` names fields that `version` of CRD `crd_name`
/// does not have.
fn against_schema(
    resource: &Resource,
    crd_name: &str,
    version: &CustomResourceDefinitionVersion,
) -> Vec<Mismatch> {
    let gk = &resource.group_kind;
    let mut out = Vec::new();
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .ok()
        .flatten();
    let Some(schema) = schema else {
        out.push(Mismatch {
            at: resource.at.to_string(),
            message: format!(
                "CRD {crd_name} {} has no openAPIV3Schema to compare with",
                version.name
            ),
        });
        return out;
    };
    let live = match plan_from_json(&format!("CRD {crd_name}"), &schema) {
        Ok(plan) => plan,
        Err(e) => {
            out.push(Mismatch {
                at: resource.at.to_string(),
                message: format!("the installed schema does not compile: {e}"),
            });
            return out;
        }
    };
    for (at, jsonpath) in unknown_field_rules(&resource.plan, |p| live.knows(p)) {
        out.push(Mismatch {
            at,
            message: format!(
                "{gk}: field rule {jsonpath} names no field of CRD {crd_name} {} in the cluster",
                version.name
            ),
        });
    }
    for (path, annotated) in resource.plan.rules() {
        if annotated.jsonpath.is_none() && !live.knows(&path) {
            out.push(Mismatch {
                at: annotated.origin.to_string(),
                message: format!(
                    "{gk}: {path} is annotated {} but is not a field of CRD {crd_name} {} in the cluster",
                    annotated.rule.name(),
                    version.name
                ),
            });
        }
    }
    out
}
