//! What a sharded replica does with the Leases it read, as pure functions of what it saw and
//! when (its own monotonic clock): who is live, which tenants to take, keep and release.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use super::leases::{annotation, holder, member_lease, tenant_lease, ANNOTATION_RELEASED};

/// When a Lease's resourceVersion was last seen to change.
struct Seen {
    version: String,
    since: Instant,
}

/// The Leases as this replica saw them, with when each last changed on its own clock.
pub struct Observer {
    lease: Duration,
    seen: HashMap<String, Seen>,
    /// Tenants whose Lease this replica saw free or stale, since when.
    unowned: HashMap<String, Instant>,
}

/// Why a tenant was taken from another replica (`ferry_shard_moves_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// Its holder released it for the new winner.
    Scale,
    /// Its holder's membership went stale.
    Failover,
    /// Its holder released it shutting down.
    Release,
    /// Taken by a replica ranked below the first, after waiting its turn.
    Fallback,
}

impl Move {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Move::Scale => "scale",
            Move::Failover => "failover",
            Move::Release => "release",
            Move::Fallback => "fallback",
        }
    }
}

/// What to do this round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Tenants to take, and from whom they move (`None`: nobody held them).
    pub take: Vec<(String, Option<Move>)>,
    /// Tenants this replica holds and keeps.
    pub keep: BTreeSet<String>,
    /// Tenants this replica holds and hands to the winner.
    pub release: Vec<String>,
    /// Tenants whose Lease has been free or stale for over two lease durations.
    pub unowned: usize,
}

/// One round's input.
pub struct Round<'a> {
    /// This replica.
    pub me: &'a str,
    /// Whether this replica's renewal succeeded this round.
    pub renewed: bool,
    /// The tenants of this replica's configuration.
    pub candidates: &'a [String],
    /// For each tenant held, the live members when it was taken (a tenant held since before
    /// this process: none).
    pub taken_with: &'a BTreeMap<String, Vec<String>>,
    /// Now, on this replica's clock.
    pub now: Instant,
}

impl Observer {
    /// Nothing seen yet; memberships last `lease`.
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            seen: HashMap::new(),
            unowned: HashMap::new(),
        }
    }

    /// Records `leases`, read at `now`.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        let mut names = BTreeSet::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            names.insert(name.clone());
            match self.seen.get_mut(&name) {
                Some(seen) if seen.version == version => {}
                Some(seen) => {
                    *seen = Seen {
                        version,
                        since: now,
                    }
                }
                None => {
                    self.seen.insert(
                        name,
                        Seen {
                            version,
                            since: now,
                        },
                    );
                }
            }
        }
        self.seen.retain(|name, _| names.contains(name));
    }

    /// The live members among `leases` (`me` counted when `renewed`): held, and seen to change
    /// less than a lease duration ago.
    pub fn live(&self, leases: &[Lease], round: &Round<'_>) -> Vec<String> {
        let mut live: BTreeSet<String> = leases
            .iter()
            .filter(|l| role(l) == Some("member"))
            .filter(|l| !holder(l).is_empty() && holder(l) != round.me)
            .filter(|l| {
                let name = l.metadata.name.as_deref().unwrap_or_default();
                name == member_lease(holder(l))
                    && self
                        .seen
                        .get(name)
                        .is_some_and(|s| round.now.duration_since(s.since) < self.lease)
            })
            .map(|l| holder(l).to_string())
            .collect();
        if round.renewed {
            live.insert(round.me.to_string());
        }
        live.into_iter().collect()
    }

    /// What to do with every candidate tenant this round.
    pub fn decide(&mut self, leases: &[Lease], round: &Round<'_>) -> Decisions {
        let live = self.live(leases, round);
        let members: Vec<&str> = live.iter().map(String::as_str).collect();
        let by_name: HashMap<&str, &Lease> = leases
            .iter()
            .filter(|l| role(l) == Some("tenant"))
            .filter_map(|l| l.metadata.name.as_deref().map(|n| (n, l)))
            .collect();
        let mut out = Decisions::default();
        let known: BTreeSet<&str> = round.candidates.iter().map(String::as_str).collect();
        self.unowned.retain(|t, _| known.contains(t.as_str()));
        for tenant in round.candidates {
            let lease = by_name.get(tenant_lease(tenant).as_str()).copied();
            let held_by = lease.map(holder).unwrap_or("");
            let ranked = ferry_core::shard::ranked(tenant, &members);
            if held_by == round.me {
                self.unowned.remove(tenant);
                let winner = ranked.first().copied().unwrap_or(round.me);
                let moved_on = round
                    .taken_with
                    .get(tenant)
                    .is_none_or(|with| *with != live);
                if winner != round.me && moved_on {
                    out.release.push(tenant.clone());
                } else {
                    out.keep.insert(tenant.clone());
                }
                continue;
            }
            if !held_by.is_empty() && members.contains(&held_by) {
                self.unowned.remove(tenant);
                continue;
            }
            // Free or stale since it was first seen so, or since its Lease last changed (a
            // take and a release in between start the wait again).
            let first = *self.unowned.entry(tenant.clone()).or_insert(round.now);
            let changed = lease
                .and_then(|l| l.metadata.name.as_deref())
                .and_then(|n| self.seen.get(n))
                .map_or(first, |s| s.since);
            let waited = round.now.duration_since(first.max(changed));
            if waited > self.lease * 2 {
                out.unowned += 1;
            }
            let Some(rank) = ranked.iter().position(|m| *m == round.me) else {
                continue;
            };
            if rank > 0 && waited < self.lease * rank as u32 {
                continue;
            }
            let from = match (lease, held_by.is_empty()) {
                (None, _) => None,
                (Some(_), false) => Some(Move::Failover),
                (Some(l), true) => match annotation(l, ANNOTATION_RELEASED) {
                    Some("shutdown") => Some(Move::Release),
                    Some(_) => Some(Move::Scale),
                    None => None,
                },
            };
            let from = if rank > 0 { Some(Move::Fallback) } else { from };
            out.take.push((tenant.clone(), from));
        }
        out
    }
}

/// `member` or `tenant`.
fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(super::leases::LABEL_SHARD))
        .map(String::as_str)
}

#[cfg(test)]
#[path = "decide/tests.rs"]
mod tests;
