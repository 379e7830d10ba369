//! Where a tenant namespace runs (DESIGN.md "Multiple super clusters"): read back from the
//! supers holding its super namespace and the tenant namespace's `ferry.dev/super`, decided by
//! `ferry_core::config::{candidates, place}` for a namespace not placed yet, and the target of
//! a migration when its super is no longer a candidate.
//!
//! ```text
//!  hosts (super namespaces) + ferry.dev/super ─▶ active ─┐
//!  rules + namespace labels + cordons ─▶ candidates ─────┴▶ target (= active unless migrating)
//! ```

use std::collections::BTreeMap;

use ferry_core::config::{candidates, place};

use crate::object::{annotation, deleting, Ownership};
use crate::state::{Shared, TenantState};

/// Annotation on tenant namespaces: the super cluster the namespace runs in.
pub const ANN_SUPER: &str = "ferry.dev/super";

/// Where a tenant namespace runs: `active` holds its copies and gives their status; while
/// migrating, `target` gets every copy before the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The super (index into `Shared::supers`) its copies are in.
    pub active: usize,
    /// Where they are to be; `active` unless migrating.
    pub target: usize,
}

impl Placed {
    /// Whether the namespace is moving to another super.
    pub fn migrating(&self) -> bool {
        self.active != self.target
    }

    /// The supers that hold (or are to hold) its copies: `active`, then `target`.
    pub fn supers(&self) -> Vec<usize> {
        if self.migrating() {
            vec![self.active, self.target]
        } else {
            vec![self.active]
        }
    }
}

/// The supers holding `tenant`'s super namespace of `namespace` (config order).
pub fn hosts(shared: &Shared, tenant: &TenantState, namespace: &str) -> Vec<usize> {
    let super_ns = tenant.names().to_super(namespace);
    shared
        .supers
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.namespaces.get("", &super_ns).is_some_and(|n| {
                !deleting(&n) && Ownership::of(&n).is_namespace_of(&tenant.name, namespace)
            })
        })
        .map(|(i, _)| i)
        .collect()
}

/// Where `tenant`'s namespace `namespace` runs; `None` when it is not placed and no super is
/// a candidate (every super cordoned, or none the rules allow).
pub fn placed(shared: &Shared, tenant: &TenantState, namespace: &str) -> Option<Placed> {
    let supers = &shared.supers;
    if supers.len() == 1 {
        return Some(Placed {
            active: 0,
            target: 0,
        });
    }
    let hosts = hosts(shared, tenant, namespace);
    let tenant_ns = tenant.namespaces.get("", namespace);
    let labels: BTreeMap<String, String> = tenant_ns
        .as_deref()
        .and_then(|n| n.pointer("/metadata/labels"))
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let annotated = tenant_ns
        .as_deref()
        .and_then(|n| annotation(n, ANN_SUPER))
        .and_then(|name| supers.iter().position(|s| &*s.name == name));
    let placement = shared.placement();
    let candidates = candidates(&placement.supers, &placement.rules, &tenant.name, &labels);
    let placed: Vec<usize> = supers.iter().map(|s| s.namespaces.len()).collect();
    let active = annotated
        .filter(|a| hosts.contains(a))
        .or_else(|| hosts.first().copied());
    let target = match active {
        Some(a) if candidates.contains(&a) => Some(a),
        _ => hosts
            .iter()
            .copied()
            .find(|h| Some(*h) != active && candidates.contains(h))
            .or_else(|| {
                // Chosen once, so that objects reconciled meanwhile agree; chosen again when
                // the choice is no longer a candidate.
                let fresh = || place(&candidates, None, &placed);
                match tenant.chosen(namespace, fresh) {
                    Some(c) if candidates.contains(&c) => Some(c),
                    Some(_) => {
                        tenant.forget_choice(namespace);
                        tenant.chosen(namespace, fresh)
                    }
                    None => None,
                }
            })
            .or(active),
    };
    let target = target?;
    let active = active.unwrap_or(target);
    if active == target && hosts.contains(&active) {
        tenant.forget_choice(namespace);
    }
    Some(Placed { active, target })
}

/// The supers a cluster-scoped copy of `tenant`'s goes to: every super holding one of its
/// namespaces (the only one, with a single super). The first is where status comes from.
pub fn hosting(shared: &Shared, tenant: &TenantState) -> Vec<usize> {
    if shared.supers.len() == 1 {
        return vec![0];
    }
    shared
        .supers
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.namespaces
                .values()
                .iter()
                .any(|n| !deleting(n) && Ownership::of(n).tenant == Some(&*tenant.name))
        })
        .map(|(i, _)| i)
        .collect()
}
