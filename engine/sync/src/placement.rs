//! Where a tenant namespace runs (DESIGN.md "Multiple super clusters"): read back from the
//! supers holding its super namespace (their placement generation and migration mark, which
//! only ferry writes), decided by `ferry_core::config::{candidates, place}` over the supers'
//! live labels, cordons and rules (`Supers::live`) for a namespace not placed yet (the choice
//! kept in `choices.rs` until a super namespace exists), and the target of a migration when
//! its super is no longer a candidate. The switch itself is carried out by
//! `reconcile/migration.rs`.
//!
//! ```text
//!  hosts (super namespaces: generation, migrating-from) ─▶ active ─┐
//!  rules + namespace labels + cordons ─▶ candidates ───────────────┴▶ target (= active unless migrating)
//! ```

use std::collections::BTreeMap;

use ferry_core::config::{candidates, place};
use ferry_core::keys::{ANN_GENERATION, ANN_MIGRATING_FROM, ANN_SUPER, RESERVED_PREFIX};

use serde_json::{json, Value};

use crate::cache::Cache;
use crate::cache::Phase;
use crate::object::{annotation, deleting, Ownership};
use crate::supers::{SuperId, Supers};

mod choices;

pub use choices::Choices;
use ferry_core::naming::NameMap;

/// Where a tenant namespace runs: `active` holds its copies and gives their status; while
/// migrating, `target` gets every copy before the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The super its copies are in.
    pub active: SuperId,
    /// Where they are to be; `active` unless migrating.
    pub target: SuperId,
    /// The placement generation of the active super namespace (0 when none exists yet).
    pub generation: u64,
    /// Whether the active super namespace still carries a migration's mark (a target whose
    /// source went away).
    pub marked: bool,
}

impl Placed {
    /// Whether the namespace is moving to another super.
    pub fn migrating(&self) -> bool {
        self.active != self.target
    }

    /// The supers that hold (or are to hold) its copies: `active`, then `target`.
    pub fn supers(&self) -> Vec<SuperId> {
        if self.migrating() {
            vec![self.active, self.target]
        } else {
            vec![self.active]
        }
    }

    /// The annotations a super namespace made in super `i` for this placement carries.
    pub fn annotations(&self, i: SuperId, supers: &Supers) -> Value {
        if self.migrating() && i == self.target {
            json!({ANN_GENERATION: (self.generation + 1).to_string(), ANN_MIGRATING_FROM: &*supers[self.active].name})
        } else {
            json!({ANN_GENERATION: self.generation.max(1).to_string()})
        }
    }
}

/// A super holding a tenant's super namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// Which super.
    pub index: SuperId,
    /// Its placement generation.
    pub generation: u64,
    /// Whether it is a migration's target not switched to yet.
    pub migrating: bool,
}

/// What placement reads of a tenant (`TenantState::tenancy`).
pub struct Tenancy<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its naming map (read, not copied, where a super namespace's name is needed).
    pub names: &'a std::sync::RwLock<NameMap>,
    /// Its namespaces (their labels place them; `ferry.dev/super` says a first choice).
    pub namespaces: &'a Cache,
    /// The choices made for its namespaces not placed yet.
    pub choices: &'a Choices,
}

/// The supers holding `tenant`'s super namespace of `namespace` (config order).
pub fn hosts(supers: &Supers, tenant: &Tenancy<'_>, namespace: &str) -> Vec<Host> {
    let super_ns = tenant
        .names
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .to_super(namespace);
    supers
        .iter()
        .filter_map(|(index, s)| {
            let n = s.namespaces.get("", &super_ns)?;
            if deleting(&n) || !Ownership::of(&n).is_namespace_of(tenant.name, namespace) {
                return None;
            }
            Some(Host {
                index,
                generation: generation(&n),
                migrating: annotation(&n, ANN_MIGRATING_FROM).is_some(),
            })
        })
        .collect()
}

/// The placement generation of a super namespace (0 before generations existed).
pub fn generation(ns: &Value) -> u64 {
    annotation(ns, ANN_GENERATION)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

/// Where the namespace runs among `hosts`: the host with the highest generation that is not
/// a migration's target, else the lowest target (one whose source went away; its mark is
/// removed next, see `placed_at`).
pub fn running(hosts: &[Host]) -> Option<Host> {
    let order = |h: &&Host| (h.generation, std::cmp::Reverse(h.index));
    hosts
        .iter()
        .filter(|h| !h.migrating)
        .max_by_key(order)
        .or_else(|| hosts.iter().min_by_key(|h| (h.generation, h.index)))
        .copied()
}

/// Where `tenant`'s namespace `namespace` runs; `None` when it is not placed and no super is
/// a candidate (every super cordoned, or none the rules allow).
pub fn placed(supers: &Supers, tenant: &Tenancy<'_>, namespace: &str) -> Option<Placed> {
    if supers.len() == 1 {
        return Some(Placed {
            active: SuperId(0),
            target: SuperId(0),
            generation: 0,
            marked: false,
        });
    }
    let hosts = hosts(supers, tenant, namespace);
    let running = running(&hosts);
    // A super not listed yet might hold the namespace: nothing is placed anew until it is.
    if running.is_none() && supers.each().any(|s| s.namespaces.phase() != Phase::Synced) {
        return None;
    }
    let tenant_ns = tenant.namespaces.get("", namespace);
    let labels: BTreeMap<String, String> = tenant_ns
        .as_deref()
        .and_then(|n| n.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        // ferry's own keys never place anything.
        .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    let live = supers.live();
    let candidates: Vec<SuperId> = candidates(&live.configs, &live.rules, tenant.name, &labels)
        .into_iter()
        .map(SuperId)
        .collect();
    let active = running.map(|h| h.index);
    let target = match active {
        Some(a) if candidates.contains(&a) => Some(a),
        _ => hosts
            .iter()
            .filter(|h| Some(h.index) != active && h.migrating && candidates.contains(&h.index))
            .map(|h| h.index)
            .next()
            .or_else(|| {
                // Chosen once, so that objects reconciled meanwhile agree; chosen again when
                // the choice is no longer a candidate.
                // A process that has not chosen yet takes the super the namespace says, if it
                // is a candidate (restart-safe before anything is synced there).
                let said = tenant_ns
                    .as_deref()
                    .and_then(|n| annotation(n, ANN_SUPER))
                    .and_then(|name| supers.named(name))
                    .filter(|i| candidates.contains(i));
                let fresh = || {
                    said.or_else(|| {
                        let placed: Vec<usize> =
                            supers.each().map(|s| s.namespaces.len()).collect();
                        let indexes: Vec<usize> = candidates.iter().map(|c| c.0).collect();
                        place(&indexes, None, &placed).map(SuperId)
                    })
                };
                match tenant.choices.chosen(namespace, fresh) {
                    Some(c) if candidates.contains(&c) => Some(c),
                    Some(_) => {
                        tenant.choices.forget(namespace);
                        tenant.choices.chosen(namespace, fresh)
                    }
                    None => None,
                }
            })
            .or(active),
    };
    let target = target?;
    let active = active.unwrap_or(target);
    if active == target && hosts.iter().any(|h| h.index == active) {
        tenant.choices.forget(namespace);
    }
    Some(Placed {
        active,
        target,
        generation: running.map_or(0, |h| h.generation),
        marked: running.is_some_and(|h| h.index == active && h.migrating),
    })
}

/// The supers a cluster-scoped copy of `tenant`'s goes to: every super holding one of its
/// namespaces (the only one, with a single super). The first is where status comes from.
pub fn hosting(supers: &Supers, tenant: &str) -> Vec<SuperId> {
    if supers.len() == 1 {
        return vec![SuperId(0)];
    }
    supers
        .iter()
        .filter(|(_, s)| {
            s.namespaces
                .values()
                .iter()
                .any(|n| !deleting(n) && Ownership::of(n).tenant == Some(tenant))
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(index: usize, generation: u64, migrating: bool) -> Host {
        Host {
            index: SuperId(index),
            generation,
            migrating,
        }
    }

    #[test]
    fn a_namespace_runs_in_the_newest_host_that_is_not_a_migrations_target() {
        assert_eq!(running(&[]), None);
        // Mid-migration: the target (generation 2, marked) is not where it runs yet.
        let moving = [host(0, 1, false), host(1, 2, true)];
        assert_eq!(running(&moving).map(|h| h.index), Some(SuperId(0)));
        // The switch removes the mark: the higher generation wins, whatever the order.
        let switched = [host(0, 1, false), host(1, 2, false)];
        assert_eq!(running(&switched).map(|h| h.index), Some(SuperId(1)));
        let back = [host(0, 3, false), host(1, 2, false)];
        assert_eq!(running(&back).map(|h| h.index), Some(SuperId(0)));
        // A target whose source went away: it is all there is; of two such, the older.
        assert_eq!(
            running(&[host(1, 2, true)]).map(|h| h.index),
            Some(SuperId(1))
        );
        let orphans = [host(1, 2, true), host(2, 3, true)];
        assert_eq!(running(&orphans).map(|h| h.index), Some(SuperId(1)));
        // Namespaces from before generations (0) on two supers: config order.
        let old = [host(0, 0, false), host(1, 0, false)];
        assert_eq!(running(&old).map(|h| h.index), Some(SuperId(0)));
    }
}
