//! The resync: every key of a tenant queued again (its objects, ferry's copies of them, the
//! public super objects, its namespaces and their super namespaces). The patrol, leadership
//! changes and placement changes call it; the reconciler then finds drift and orphans.

use std::collections::BTreeMap;

use ferry_core::policy::{Direction, Scope};

use super::{Shared, TenantState};
use crate::cache::Cache;
use crate::key::{Key, Kind};
use crate::object::{key_of, Ownership, OwnershipKey};

impl Shared {
    /// Queues every key of `tenant`: its objects, ferry's copies of them, the public super
    /// objects, its namespaces and their super namespaces. The patrol and leadership changes
    /// call this; the reconciler then finds drift and orphans.
    pub fn resync(&self, tenant: &TenantState) {
        let name = &tenant.name;
        for (idx, resource) in crate::key::entries(&self.policy) {
            let kind = Kind::Resource(idx);
            for (ns, n) in tenant.caches[idx].keys() {
                self.queues.add_background(Key::new(name, kind, &ns, &n));
            }
            for s in self.supers.each() {
                match resource.direction {
                    Direction::FromSuper => {
                        for (ns, n) in s.caches[idx].keys() {
                            self.queues.add_background(Key::new(name, kind, &ns, &n));
                        }
                    }
                    Direction::ToSuper => {
                        // Copies name their tenant object in their metadata; only this
                        // tenant's.
                        let namespaced = resource.scope == Scope::Namespaced;
                        self.resync_owned(name, &s.caches[idx], kind, namespaced);
                    }
                    // Produced objects in this tenant's super namespaces (known by ferry's
                    // metadata on them, hashed names too).
                    Direction::Produced => {
                        let mine: BTreeMap<String, String> = s
                            .namespaces
                            .values()
                            .iter()
                            .filter_map(|n| {
                                let key = Ownership::of(n).key(Kind::Namespace, false)?;
                                let (super_ns, _) = key_of(n)?;
                                (*key.tenant == **name).then_some((super_ns, key.name))
                            })
                            .collect();
                        for (ns, n) in s.caches[idx].keys() {
                            if let Some(tenant_ns) = mine.get(&ns) {
                                self.queues
                                    .add_background(Key::new(name, kind, tenant_ns, &n));
                            }
                        }
                    }
                }
            }
        }
        for (_, n) in tenant.namespaces.keys() {
            self.queues
                .add_background(Key::new(name, Kind::Namespace, "", &n));
        }
        for s in self.supers.each() {
            self.resync_owned(name, &s.namespaces, Kind::Namespace, false);
        }
    }

    fn resync_owned(&self, tenant: &str, cache: &Cache, kind: Kind, namespaced: bool) {
        // Ownership is metadata: the copies are not read whole.
        cache.each_metadata(|object| {
            let key = Ownership::of(object).key(kind, namespaced);
            if let Some(key) = key.filter(|k| &*k.tenant == tenant) {
                self.queues.add_background(key);
            }
        });
    }
}
