//! What a sharded replica does with the Leases it read, as pure functions of what it saw and
//! when (its own monotonic clock): who is live, which tenants to take, keep and release.

use ferry_core::keys::ANN_RELEASED;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use super::leases::{annotation, holder, tenant_lease};

/// When a Lease's resourceVersion was last seen to change.
struct Seen {
    version: String,
    since: Instant,
}

/// A membership Lease as this replica saw it.
struct Member {
    /// The identity (from the Lease's name).
    identity: String,
    version: String,
    /// When its resourceVersion last changed (or it was first seen).
    since: Instant,
    /// When it was first seen: a member newer than a settle period takes nothing yet, and
    /// nothing is released to it yet.
    first: Instant,
    /// How long it lasts unchanged: the longer of this replica's lease and the one it
    /// declares (`leaseDurationSeconds`), so replicas of two configurations agree.
    lasts: Duration,
    /// Released by ferry itself (holder cleared, `ferry.dev/released`): gone at once.
    released: bool,
    /// The digest of its configured tenants (`ferry.dev/tenants-sha256`).
    digest: Option<String>,
}

/// The Leases as this replica saw them, with when each last changed on its own clock.
pub struct Observer {
    lease: Duration,
    /// Membership Leases by name; kept a while after one vanishes (a deleted Lease is not a
    /// released membership: its replica may still be writing).
    members: HashMap<String, Member>,
    /// Tenant Leases by name.
    tenants: HashMap<String, Seen>,
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
    /// Tenants this replica holds and hands to the winner (or no longer has configured).
    pub release: Vec<String>,
    /// Tenants whose Lease has been free or stale for over two lease durations.
    pub unowned: usize,
}

/// One round's input.
pub struct Round<'a> {
    /// This replica.
    pub me: &'a str,
    /// Whether this replica counts itself live: its fence is open, or it renewed this round.
    pub renewed: bool,
    /// The tenants of this replica's configuration.
    pub candidates: &'a [String],
    /// Their digest, as this replica's membership Lease carries it.
    pub digest: &'a str,
    /// For each tenant held, the live members when it was taken (a tenant held since before
    /// this process: none).
    pub taken_with: &'a BTreeMap<String, Vec<String>>,
    /// Now, on this replica's clock.
    pub now: Instant,
}

/// The digest of a configuration's tenants (`ferry.dev/tenants-sha256`): replicas with the
/// same digest would take the same tenants.
pub fn digest(candidates: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted: Vec<&str> = candidates.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    ferry_core::naming::hex(&Sha256::digest(sorted.join("\n").as_bytes()))
}

impl Observer {
    /// Nothing seen yet; memberships last `lease`.
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            members: HashMap::new(),
            tenants: HashMap::new(),
            unowned: HashMap::new(),
        }
    }

    /// Whether membership Lease `name` belongs to a replica gone for good: released, or
    /// unchanged for ten leases.
    pub fn collectable(&self, name: &str) -> bool {
        self.members
            .get(name)
            .is_some_and(|m| m.released || m.since.elapsed() > m.lasts * 10)
    }

    /// How long after a member is first seen it may take tenants and be handed them.
    pub fn settle(&self) -> Duration {
        self.lease * 2 / 3
    }

    /// Records `leases`, read at `now`.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        let mut tenants = HashMap::new();
        let mut listed = BTreeSet::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            match role(lease) {
                Some("member") => {
                    listed.insert(name.clone());
                    self.member(&name, lease, version, now);
                }
                Some("tenant") => {
                    let since = match self.tenants.get(&name) {
                        Some(seen) if seen.version == version => seen.since,
                        _ => now,
                    };
                    tenants.insert(name, Seen { version, since });
                }
                _ => {}
            }
        }
        self.tenants = tenants;
        // A vanished membership stays until it would be stale twice over.
        self.members
            .retain(|name, m| listed.contains(name) || now.duration_since(m.since) < m.lasts * 2);
    }

    fn member(&mut self, name: &str, lease: &Lease, version: String, now: Instant) {
        let Some(identity) = name.strip_prefix("ferry-member-") else {
            return;
        };
        let declared = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease, Duration::from_secs);
        let released = holder(lease).is_empty() && annotation(lease, ANN_RELEASED).is_some();
        let digest = annotation(lease, ferry_core::keys::ANN_TENANTS_SHA256).map(str::to_string);
        let entry = self.members.entry(name.to_string()).or_insert(Member {
            identity: identity.to_string(),
            version: version.clone(),
            since: now,
            first: now,
            lasts: self.lease,
            released,
            digest: None,
        });
        if entry.version != version {
            entry.version = version;
            entry.since = now;
        }
        entry.lasts = self.lease.max(declared);
        entry.released = released;
        entry.digest = digest;
    }

    /// The live members (`me` counted when it `renewed`): not released, and seen to change
    /// less than their lease ago.
    pub fn live(&self, round: &Round<'_>) -> Vec<String> {
        let mut live: BTreeSet<String> = self
            .members
            .values()
            .filter(|m| m.identity != round.me && !m.released)
            .filter(|m| round.now.duration_since(m.since) < m.lasts)
            .map(|m| m.identity.clone())
            .collect();
        if round.renewed {
            live.insert(round.me.to_string());
        }
        live.into_iter().collect()
    }

    /// Whether member `identity` has been seen for a settle period (this replica counts as
    /// settled).
    fn settled(&self, identity: &str, round: &Round<'_>) -> bool {
        identity == round.me
            || self
                .members
                .get(&super::leases::member_lease(identity))
                .is_some_and(|m| round.now.duration_since(m.first) >= self.settle())
    }

    fn digest_of(&self, identity: &str) -> Option<&str> {
        self.members
            .get(&super::leases::member_lease(identity))
            .and_then(|m| m.digest.as_deref())
    }

    /// Whether this replica hands `tenant`, which it holds, to `winner`: once the winner is
    /// settled, when it joined after the take, or when it has this replica's tenants (a
    /// tenant taken by fallback waits for its winner's configuration to catch up).
    fn hands_over(&self, tenant: &str, winner: &str, round: &Round<'_>) -> bool {
        if winner == round.me || !self.settled(winner, round) {
            return false;
        }
        let joined_since = round
            .taken_with
            .get(tenant)
            .is_none_or(|with| !with.iter().any(|m| m == winner));
        joined_since || self.digest_of(winner) == Some(round.digest)
    }

    /// What to do with every candidate tenant this round.
    pub fn decide(&mut self, leases: &[Lease], round: &Round<'_>) -> Decisions {
        let live = self.live(round);
        let members: Vec<&str> = live.iter().map(String::as_str).collect();
        let by_name: HashMap<&str, &Lease> = leases
            .iter()
            .filter(|l| role(l) == Some("tenant"))
            .filter_map(|l| l.metadata.name.as_deref().map(|n| (n, l)))
            .collect();
        let mut out = Decisions::default();
        let known: BTreeSet<&str> = round.candidates.iter().map(String::as_str).collect();
        self.unowned.retain(|t, _| known.contains(t.as_str()));
        // Held, but no longer configured here: released (every round until it is).
        for (name, lease) in &by_name {
            let tenant = name.strip_prefix("ferry-tenant-").unwrap_or("");
            if holder(lease) == round.me && !known.contains(tenant) {
                out.release.push(tenant.to_string());
            }
        }
        for tenant in round.candidates {
            let lease = by_name.get(tenant_lease(tenant).as_str()).copied();
            let held_by = lease.map(holder).unwrap_or("");
            let ranked = ferry_core::shard::ranked(tenant, &members);
            if held_by == round.me {
                self.unowned.remove(tenant);
                let winner = ranked.first().copied().unwrap_or(round.me);
                if self.hands_over(tenant, winner, round) {
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
            if let Some(take) = self.free(tenant, lease, (&ranked, round), &mut out.unowned) {
                out.take.push((tenant.clone(), take));
            }
        }
        out
    }

    /// A tenant whose Lease is absent, released or held by a member that is not live:
    /// whether this replica takes it (and from whom it moves), counting it in `unowned`
    /// after two leases.
    fn free(
        &mut self,
        tenant: &str,
        lease: Option<&Lease>,
        (ranked, round): (&[&str], &Round<'_>),
        unowned: &mut usize,
    ) -> Option<Option<Move>> {
        // Free or stale since it was first seen so, or since its Lease last changed (a take
        // and a release in between start the wait again).
        let first = *self.unowned.entry(tenant.to_string()).or_insert(round.now);
        let changed = lease
            .and_then(|l| l.metadata.name.as_deref())
            .and_then(|n| self.tenants.get(n))
            .map_or(first, |s| s.since);
        let waited = round.now.duration_since(first.max(changed));
        if waited > self.lease * 2 {
            *unowned += 1;
        }
        let rank = ranked.iter().position(|m| *m == round.me)?;
        if rank > 0 && waited < self.lease * rank as u32 {
            return None;
        }
        let held_by = lease.map(holder).unwrap_or("");
        let from = match (lease, held_by.is_empty()) {
            (None, _) => None,
            (Some(_), false) => Some(Move::Failover),
            (Some(l), true) => match annotation(l, ANN_RELEASED) {
                Some("shutdown") => Some(Move::Release),
                Some(_) => Some(Move::Scale),
                None => None,
            },
        };
        Some(if rank > 0 { Some(Move::Fallback) } else { from })
    }
}

/// `member` or `tenant`.
fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ferry_core::keys::LABEL_SHARD))
        .map(String::as_str)
}

#[cfg(test)]
#[path = "decide/tests.rs"]
mod tests;
