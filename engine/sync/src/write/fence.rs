//! The writer's fence: a super cluster's writer never writes into a platform namespace
//! (`platformNamespaces` of the SyncConfig), whatever asked for the write. Reconciles refuse a
//! tenant namespace that maps onto one before they get here (`OutsideTenant`); this is the
//! line every super-side write crosses, Events on super namespaces included, so that a path
//! that forgot to ask still cannot create, label or fill such a namespace.

use std::sync::Arc;

use ferry_core::config::PlatformNamespaces;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ApiResource, PostParams};

use super::{Error, Result, Writer};

/// The namespace a write of `resource` `namespace`/`name` writes into: the object's, or the
/// Namespace itself (empty for other cluster-scoped objects).
fn written_into<'a>(resource: &ApiResource, namespace: &'a str, name: &'a str) -> &'a str {
    if resource.group.is_empty() && resource.kind == "Namespace" {
        name
    } else {
        namespace
    }
}

impl Writer {
    /// This writer never writes into the namespaces `platform` names (a super's writer).
    pub fn fenced(mut self, platform: Arc<PlatformNamespaces>) -> Self {
        self.platform = Some(platform);
        self
    }

    /// The policy's placed kinds: their copies may be written into the operator's namespace
    /// each names, platform namespace or not (and nothing else may).
    pub fn placing(mut self, policy: &ferry_core::policy::Policy) -> Self {
        self.placed = policy
            .resources
            .iter()
            .filter_map(|r| {
                let ns = r.placement.clone()?;
                Some((r.group_kind.group.clone(), r.group_kind.kind.clone(), ns))
            })
            .collect();
        self
    }

    /// Whether a write of `resource` `namespace`/`name` stays out of the platform's
    /// namespaces; for a Namespace, `name` is the namespace written.
    pub(super) fn fence(&self, resource: &ApiResource, namespace: &str, name: &str) -> Result<()> {
        let Some(platform) = &self.platform else {
            return Ok(());
        };
        let written = written_into(resource, namespace, name);
        let placed = self
            .placed
            .iter()
            .any(|(g, k, n)| *g == resource.group && *k == resource.kind && n == written);
        if placed {
            return Ok(());
        }
        match platform.matching(written) {
            Some(pattern) if !written.is_empty() => Err(Error::Platform {
                namespace: written.to_string(),
                pattern: pattern.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Publishes a Warning Event `reason` about the super namespace `namespace` (uid `uid`)
    /// in that namespace, where `kubectl get events -n <namespace>` finds it. The API server
    /// keeps an Event about a cluster-scoped object in `default`, a platform namespace, so
    /// the Event names the namespace as its own (`regarding.namespace`), which lets it live
    /// there. Reporting controller `ferry`, instance `identity`; only the leader does, and
    /// never into a platform namespace.
    pub async fn namespace_event(
        &self,
        identity: &str,
        (namespace, uid): (&str, &str),
        reason: &str,
        note: &str,
    ) -> Result<()> {
        let events = ApiResource::erase::<K8sEvent>(&());
        self.allowed(&events, namespace, "")?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = K8sEvent {
            action: Some("Sync".into()),
            reason: Some(reason.into()),
            note: Some(note.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Namespace".into()),
                name: Some(namespace.into()),
                namespace: Some(namespace.into()),
                uid: Some(uid.into()),
                ..ObjectReference::default()
            }),
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(format!("{namespace}.{:x}", now.as_nanosecond())),
                ..ObjectMeta::default()
            },
            reporting_controller: Some("ferry".into()),
            reporting_instance: Some(identity.into()),
            type_: Some("Warning".into()),
            ..K8sEvent::default()
        };
        let api = Api::<K8sEvent>::namespaced(self.client.clone(), namespace);
        self.answered(api.create(&PostParams::default(), &event))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::api::rbac::v1::ClusterRole;

    use super::*;

    #[test]
    fn a_namespace_is_written_into_by_its_own_writes_and_its_objects() {
        let platform = PlatformNamespaces::default();
        let blocked = |resource: &ApiResource, namespace: &str, name: &str| {
            let into = written_into(resource, namespace, name);
            !into.is_empty() && platform.matching(into).is_some()
        };
        let namespace = ApiResource::erase::<Namespace>(&());
        let config_map = ApiResource::erase::<ConfigMap>(&());
        let role = ApiResource::erase::<ClusterRole>(&());
        assert!(blocked(&namespace, "", "kube-system"));
        assert!(blocked(&namespace, "", "cert-manager"));
        assert!(!blocked(&namespace, "", "team-a-cert-manager"));
        assert!(blocked(&config_map, "default", "orders"));
        assert!(blocked(&config_map, "ferry-system", "orders"));
        assert!(!blocked(&config_map, "team-a-shop", "kube-system"));
        // A cluster-scoped object is in no namespace, whatever its name.
        assert!(!blocked(&role, "", "kube-system"));
        let events = ApiResource::erase::<K8sEvent>(&());
        assert!(blocked(&events, "monitoring", ""));
    }
}
