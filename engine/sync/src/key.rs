//! The unit of work: an object of a tenant, named as the tenant names it. Everything ferry
//! does for that object (its super copy, the status that flows back, a public copy, a super
//! namespace) is done under its key.

use std::fmt;
use std::sync::Arc;

/// What a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An approved kind: its entry in the policy.
    Resource(EntryId),
    /// A tenant namespace (its super namespace follows it).
    Namespace,
}

/// One object of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The tenant.
    pub tenant: Arc<str>,
    /// The kind.
    pub kind: Kind,
    /// The tenant namespace (empty for cluster-scoped objects and namespaces).
    pub namespace: String,
    /// The tenant name.
    pub name: String,
}

impl Key {
    /// The key of `namespace`/`name` of `kind` in `tenant`.
    pub fn new(tenant: &Arc<str>, kind: Kind, namespace: &str, name: &str) -> Self {
        Self {
            tenant: tenant.clone(),
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The same tenant's object `namespace`/`name` of `kind`.
    pub fn sibling(&self, kind: Kind, namespace: &str, name: &str) -> Self {
        Self::new(&self.tenant, kind, namespace, name)
    }
}

/// `tenant/namespace/name` (`tenant/name` when cluster-scoped): how logs name a key. The kind
/// is the policy's to name (see `Shared::describe`).
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.tenant)?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        f.write_str(&self.name)
    }
}

/// `namespace/name`, or `name` when cluster-scoped.
pub fn slash(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_display_as_the_tenant_names_them() {
        let tenant: Arc<str> = "team-a".into();
        assert_eq!(
            Key::new(
                &tenant,
                Kind::Resource(crate::key::EntryId(0)),
                "shop",
                "orders"
            )
            .to_string(),
            "team-a/shop/orders"
        );
        assert_eq!(
            Key::new(&tenant, Kind::Namespace, "", "shop").to_string(),
            "team-a/shop"
        );
    }
}

/// A super cluster, by its place in the configuration (config order; the first holds the
/// Leases and the tenant Secrets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SuperId(pub usize);

impl std::fmt::Display for SuperId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A policy entry (an approved kind in one direction), by its place in the policy: every
/// cache of that kind, in each cluster, stands at the same place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub usize);

/// Each entry of `policy` with its id.
pub fn entries(
    policy: &ferry_core::policy::Policy,
) -> impl Iterator<Item = (EntryId, &ferry_core::policy::Resource)> {
    policy
        .resources
        .iter()
        .enumerate()
        .map(|(i, r)| (EntryId(i), r))
}

impl std::ops::Index<EntryId> for Vec<ferry_core::policy::Resource> {
    type Output = ferry_core::policy::Resource;

    fn index(&self, id: EntryId) -> &Self::Output {
        &self[id.0]
    }
}
