//! The Leases of sharding in ferry's namespace of the first super cluster: one membership
//! Lease per replica (`ferry-member-<identity>`, renewed) and one ownership Lease per tenant
//! (`ferry-tenant-<tenant>`, written only on take and release). Every write is a
//! compare-and-swap on the resourceVersion read.

use ferry_core::keys::LABEL_SHARD;
use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;

/// The membership Lease of `identity`.
pub fn member_lease(identity: &str) -> String {
    format!("ferry-member-{identity}")
}

/// The ownership Lease of `tenant`.
pub fn tenant_lease(tenant: &str) -> String {
    format!("ferry-tenant-{tenant}")
}

/// The Leases of one namespace.
#[derive(Clone)]
pub struct Leases {
    api: Api<Lease>,
    client: Client,
    namespace: String,
    /// Seconds written as `leaseDurationSeconds` (for humans and other tools).
    seconds: i32,
}

impl Leases {
    /// The Leases in `namespace`, lasting `seconds`.
    pub fn new(client: Client, namespace: &str, seconds: i32) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_string(),
            seconds,
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Every sharding Lease (one LIST).
    pub async fn list(&self) -> kube::Result<Vec<Lease>> {
        let params = ListParams::default().labels(LABEL_SHARD);
        Ok(self.api.list(&params).await?.items)
    }

    /// One Lease.
    pub async fn get(&self, name: &str) -> kube::Result<Option<Lease>> {
        self.api.get_opt(name).await
    }

    /// Writes Lease `name` of role `role`: a create when `found` is `None`, else a replace at
    /// `found`'s resourceVersion, with `spec` and `annotations`. `None`: someone wrote first.
    pub async fn swap(
        &self,
        (name, role): (&str, &str),
        found: Option<&Lease>,
        spec: LeaseSpec,
        annotations: BTreeMap<String, String>,
    ) -> kube::Result<Option<Lease>> {
        let mut metadata = found.map(|l| l.metadata.clone()).unwrap_or(ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            ..ObjectMeta::default()
        });
        metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(LABEL_SHARD.into(), role.into());
        metadata.annotations = Some(annotations);
        metadata.managed_fields = None;
        let lease = Lease {
            metadata,
            spec: Some(spec),
        };
        let result = match found {
            None => {
                crate::client::ensure_namespace(&self.client, &self.namespace).await?;
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(_) => self.api.replace(name, &PostParams::default(), &lease).await,
        };
        match result {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes Lease `name` if it is still at `version`.
    pub async fn delete(&self, name: &str, version: &str) -> kube::Result<()> {
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: Some(version.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A spec held by `holder` (none: released), acquired and renewed now.
    pub fn spec(&self, holder: Option<&str>, transitions: i32) -> LeaseSpec {
        let now = holder.map(|_| MicroTime(Timestamp::now()));
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(self.seconds),
            acquire_time: now.clone(),
            renew_time: now,
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// Who holds `lease` (empty: released).
pub fn holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

/// An annotation of `lease`.
pub fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// How many times `lease` changed hands.
pub fn transitions(lease: Option<&Lease>) -> i32 {
    lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}
