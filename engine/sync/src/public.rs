//! What the super clusters publish to tenants: the objects of fromSuper kinds that their
//! selector selects, never a tenant's own copy; with several supers, the first in config
//! order that holds a name is its source. The guard in ferry-core asks the catalog whether a
//! tenant's reference to a public kind names a published object.

use ferry_core::keys::LABEL_TENANT;
use std::sync::Arc;

use ferry_core::policy::{Direction, Policy, Resource};
use ferry_core::translate::Published;

use crate::cache::Cache;
use crate::watch::selector_string;

/// The label selector of a fromSuper kind's super watch: its policy selector, and never an
/// object carrying `ferry.dev/tenant` (a tenant's copy labelled public is not published).
pub fn selector(resource: &Resource) -> String {
    let own = resource
        .selector
        .as_ref()
        .map(selector_string)
        .filter(|s| !s.is_empty());
    match own {
        Some(s) => format!("{s},!{LABEL_TENANT}"),
        None => format!("!{LABEL_TENANT}"),
    }
}

/// The super caches of every fromSuper kind, by group and kind (one per super, in config
/// order), and ferry's super namespaces in every super.
pub struct Catalog {
    kinds: Vec<(String, String, Arc<Cache>)>,
    namespaces: Vec<Arc<Cache>>,
}

impl Catalog {
    /// The catalog of `policy` over the supers whose caches (one per policy entry) and
    /// namespaces are `supers`.
    pub fn new(policy: &Policy, supers: &[(&[Arc<Cache>], Arc<Cache>)]) -> Self {
        Self {
            kinds: supers
                .iter()
                .flat_map(|(caches, _)| public_caches(policy, caches))
                .collect(),
            namespaces: supers.iter().map(|(_, n)| n.clone()).collect(),
        }
    }
}

/// The caches (one per policy entry, in `caches`) of the fromSuper entries, by group and kind.
fn public_caches(policy: &Policy, caches: &[Arc<Cache>]) -> Vec<(String, String, Arc<Cache>)> {
    policy
        .resources
        .iter()
        .zip(caches)
        .filter(|(r, _)| r.direction == Direction::FromSuper)
        .map(|(r, c)| {
            (
                r.group_kind.group.clone(),
                r.group_kind.kind.clone(),
                c.clone(),
            )
        })
        .collect()
}

/// Whether the cache of `group`/`kind` among `kinds` holds `namespace`/`name`.
fn holds(
    kinds: &[(String, String, Arc<Cache>)],
    (group, kind): (&str, &str),
    namespace: &str,
    name: &str,
) -> bool {
    kinds
        .iter()
        .filter(|(g, k, _)| g == group && k == kind)
        .any(|(_, _, cache)| cache.contains(namespace, name))
}

impl Published for Catalog {
    fn published(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool {
        holds(&self.kinds, (group, kind), namespace, name)
    }

    fn super_namespace(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| n.contains("", namespace))
    }

    fn public_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty()
            && self
                .kinds
                .iter()
                .any(|(_, _, cache)| cache.any_in(namespace))
    }
}

/// What one tenant's translations may ask of the live clusters: the super cluster's catalog,
/// and the tenant's own copies of public objects (for kinds approved both ways).
pub struct TenantView {
    catalog: Arc<Catalog>,
    copies: Vec<(String, String, Arc<Cache>)>,
}

impl TenantView {
    /// The view of a tenant whose caches (one per policy entry) are `caches`.
    pub fn new(catalog: Arc<Catalog>, policy: &Policy, caches: &[Arc<Cache>]) -> Self {
        Self {
            catalog,
            copies: public_caches(policy, caches),
        }
    }
}

impl Published for TenantView {
    fn published(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool {
        self.catalog.published(group, kind, namespace, name)
    }

    fn super_namespace(&self, namespace: &str) -> bool {
        self.catalog.super_namespace(namespace)
    }

    fn public_namespace(&self, namespace: &str) -> bool {
        self.catalog.public_namespace(namespace)
    }

    fn tenant_copy(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool {
        // The tenant caches of fromSuper kinds hold only ferry's copies.
        holds(&self.copies, (group, kind), namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_copies_are_never_selected_as_public() {
        let policy = ferry_core::policy::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies"),
        )
        .expect("the example policies load");
        let class = policy.resource("storage.k8s.io", "StorageClass").unwrap();
        assert_eq!(
            selector(class),
            "tenancy.x-k8s.io/super.public=true,!ferry.dev/tenant"
        );
    }
}
