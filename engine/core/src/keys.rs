//! Every label and annotation key under `ferry.dev/`, in one place: who writes each, on what,
//! and what reads it. ferry alone writes keys under [`RESERVED_PREFIX`] on super objects; a
//! tenant's are stripped going down, and a transform that changes one is refused. The live
//! engine reads the ownership keys back through [`Ownership`], below.

use serde_json::Value;

/// The prefix of every key ferry reserves.
pub const RESERVED_PREFIX: &str = "ferry.dev/";

// Ownership: on every super object and namespace ferry owns (translate::metadata writes them).

/// Label on every super object ferry owns: the tenant's name.
pub const LABEL_TENANT: &str = "ferry.dev/tenant";
/// Annotation: the tenant namespace of a super object or namespace.
pub const ANN_TENANT_NAMESPACE: &str = "ferry.dev/tenant-namespace";
/// Annotation: the object's name in the tenant.
pub const ANN_TENANT_NAME: &str = "ferry.dev/tenant-name";
/// Annotation: the object's uid in the tenant.
pub const ANN_TENANT_UID: &str = "ferry.dev/tenant-uid";
/// Annotation on super copies: the digest of the object ferry last applied, so that a field
/// the tenant removed (which a containment check cannot see) still triggers an apply.
pub const ANN_APPLIED: &str = "ferry.dev/applied";

// Super namespaces.

/// Annotation on a tenant's super namespaces: the uid of the tenant cluster's `kube-system`
/// namespace, which cluster the tenant's names are bound to. A tenant of that name connecting
/// from another cluster is refused until an admin removes it (docs/operations.md).
pub const ANN_TENANT_CLUSTER: &str = "ferry.dev/tenant-cluster";
/// Annotation on a super namespace: the keys of the labels ferry copied from its tenant
/// namespace (comma-separated), so that a label the tenant removes is removed too.
pub const ANN_TENANT_LABELS: &str = "ferry.dev/tenant-labels";
/// Annotation on a super namespace: the placement it was made for, counting up with every
/// migration; where a namespace runs is the host with the highest.
pub const ANN_GENERATION: &str = "ferry.dev/placement-generation";
/// Annotation on a super namespace while it is a migration's target: the super the namespace
/// moves away from. Removed at the switch.
pub const ANN_MIGRATING_FROM: &str = "ferry.dev/migrating-from";

// Tenant objects ferry writes.

/// Annotation on tenant namespaces: the super cluster the namespace runs in, or will once
/// something is synced (written by ferry for the tenant to read; read back only as a fresh
/// process's first choice for a namespace no super holds yet, among the candidates).
pub const ANN_SUPER: &str = "ferry.dev/super";
/// Label on objects ferry copies into tenants from the super cluster.
pub const LABEL_FROM_SUPER: &str = "ferry.dev/from-super";
/// Annotation: the uid of the super object a tenant copy came from.
pub const ANN_SUPER_UID: &str = "ferry.dev/super-uid";
/// Annotation on a produced copy: what it was produced for, `<group>/<Kind>/<name>`.
pub const ANN_PRODUCED_FOR: &str = "ferry.dev/produced-for";

// Sharding Leases (in `sharding.namespace`).

/// The label every sharding Lease carries: `member` or `tenant`.
pub const LABEL_SHARD: &str = "ferry.dev/shard";
/// The annotation naming the process holding a membership Lease (a random instance id: two
/// processes with one identity tell each other apart by it).
pub const ANN_INSTANCE: &str = "ferry.dev/instance";
/// The annotation a Lease ferry released carries: why (`shutdown`, `moved`, `unconfigured`).
pub const ANN_RELEASED: &str = "ferry.dev/released";
/// The annotation of a membership Lease naming the digest of the replica's configured
/// tenants (`shard/decide.rs`, `digest`).
pub const ANN_TENANTS_SHA256: &str = "ferry.dev/tenants-sha256";

// Tenant Secrets (`tenantSecrets`), set by whoever registers a tenant.

/// The label a Secret carries to be read as a tenant's kubeconfig, when the entry selects
/// nothing else.
pub const DEFAULT_SECRET_LABEL: &str = "ferry.dev/tenant-kubeconfig";
/// The label naming the tenant, when the entry names none.
pub const DEFAULT_NAME_LABEL: &str = "ferry.dev/tenant-name";

// Never written.

/// The one key of the map that stands, in an object read from a cluster, where ferry could not
/// read what was sent (its value says why): keys serde_json reserves for itself.
pub const UNREAD: &str = "ferry.dev/unread";

// The one reader of the ownership keys.

/// The field manager of every server-side apply ferry makes: an object ferry wrote names it
/// in its managedFields.
pub const FIELD_MANAGER: &str = "ferry";

/// Whether `object`'s managedFields (as the caches keep them: the managers) name ferry's
/// field manager.
pub fn managed_by_ferry(object: &Value) -> bool {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER))
        })
}

/// `metadata.<field>.<key>` as a string.
fn metadata<'v>(object: &'v Value, field: &str, key: &str) -> Option<&'v str> {
    object.get("metadata")?.get(field)?.get(key)?.as_str()
}

/// The ownership metadata of an object, as ferry writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ownership<'v> {
    /// Label `ferry.dev/tenant`: the tenant a super object belongs to.
    pub tenant: Option<&'v str>,
    /// Annotation `ferry.dev/tenant-namespace`.
    pub namespace: Option<&'v str>,
    /// Annotation `ferry.dev/tenant-name`.
    pub name: Option<&'v str>,
    /// Annotation `ferry.dev/tenant-uid`: the tenant object a copy was made from.
    pub uid: Option<&'v str>,
    /// Annotation `ferry.dev/tenant-cluster` of a super namespace: the uid of kube-system in
    /// the tenant cluster its tenant's names are bound to (`engine/sync/src/binding.rs`).
    pub cluster: Option<&'v str>,
    /// Label `ferry.dev/from-super=true`: a tenant's copy of a public super object.
    pub from_super: bool,
    /// ferry's field manager has written the object (metadata a super-side controller
    /// stamps from a tenant's template cannot forge this).
    pub managed: bool,
}

impl<'v> Ownership<'v> {
    /// Reads the ownership metadata of `object`.
    pub fn of(object: &'v Value) -> Self {
        Self {
            tenant: metadata(object, "labels", LABEL_TENANT),
            namespace: metadata(object, "annotations", ANN_TENANT_NAMESPACE),
            name: metadata(object, "annotations", ANN_TENANT_NAME),
            uid: metadata(object, "annotations", ANN_TENANT_UID),
            cluster: metadata(object, "annotations", ANN_TENANT_CLUSTER),
            from_super: metadata(object, "labels", LABEL_FROM_SUPER) == Some("true"),
            managed: managed_by_ferry(object),
        }
    }

    /// Whether a super object is ferry's copy of `tenant`'s object `namespace`/`name` (the
    /// namespace only when `namespaced`): ferry wrote it, and its ownership metadata names
    /// the object.
    pub fn names_object(
        &self,
        tenant: &str,
        (namespace, name): (&str, &str),
        namespaced: bool,
    ) -> bool {
        self.managed
            && self.tenant == Some(tenant)
            && self.name == Some(name)
            && (!namespaced || self.namespace == Some(namespace))
    }

    /// Whether a super namespace is `tenant`'s, made for its namespace `namespace`.
    pub fn is_namespace_of(&self, tenant: &str, namespace: &str) -> bool {
        self.tenant == Some(tenant) && self.namespace == Some(namespace)
    }

    /// Why ferry does not write a super object that is not its copy, for refusals (which
    /// tenants read: another tenant's name, never its namespaces or objects).
    pub fn owner(&self) -> String {
        match self.tenant {
            Some(t) => format!("it belongs to tenant {t:?}"),
            None => format!("it has no {LABEL_TENANT} label, so ferry does not own it"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_what_ferry_wrote_names_a_tenant_object() {
        let mut copy = json!({"metadata": {
            "name": "orders", "namespace": "team-a-shop",
            "labels": {LABEL_TENANT: "team-a"},
            "annotations": {ANN_TENANT_NAMESPACE: "shop", ANN_TENANT_NAME: "orders"},
        }});
        let named = ("shop", "orders");
        // The same metadata stamped by another writer (a controller's template).
        assert!(!Ownership::of(&copy).names_object("team-a", named, true));
        copy["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER}]);
        let ownership = Ownership::of(&copy);
        assert!(ownership.names_object("team-a", named, true));
        assert!(!ownership.names_object("team-b", named, true));
        assert!(!ownership.names_object("team-a", ("other", "orders"), true));
        assert!(ownership.names_object("team-a", ("", "orders"), false));
        assert!(ownership.is_namespace_of("team-a", "shop"));
        assert!(!ownership.is_namespace_of("team-a", "prod"));
        assert!(ownership.owner().contains("team-a"));
        let foreign = json!({"metadata": {"name": "x"}});
        assert!(Ownership::of(&foreign).owner().contains("does not own"));
    }
}
