//! One round of a sharded replica, and its shutdown: renew, read the Leases, hand over what
//! is no longer this replica's, take what is, publish the ownership.

use ferry_core::keys::ANN_RELEASED;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;

use super::decide::{Decisions, Round};
use super::leases::{holder, tenant_lease, transitions};
use super::{drain_bound, labels, Error, Shard};
use crate::cache::Owned;

/// Rounds in which a starting replica takes nothing: the replicas starting with it have
/// written their memberships by then (so a cold start moves no tenant twice).
const SETTLE_ROUNDS: u64 = 2;

impl Shard {
    /// One round.
    pub(super) async fn round(&mut self) -> Result<(), Error> {
        self.rounds += 1;
        let sent = self.renew().await?;
        let leases = match self.leases.list().await {
            Ok(leases) => leases,
            Err(e) => {
                tracing::warn!(error = %e, "sharding: cannot list the Leases; writes stop when the fence closes");
                if !self.fence.open() {
                    self.metrics.shard.member.set(0);
                    self.metrics.shard.owned.set(0);
                }
                return Ok(());
            }
        };
        let now = Instant::now();
        self.observer.observe(&leases, now);
        let candidates = self.candidates.borrow().clone();
        let digest = super::decide::digest(&candidates);
        // One failed renewal is no reason to give tenants away while the fence is open.
        let round = Round {
            me: &self.identity,
            renewed: sent.is_some() || self.fence.open(),
            candidates: &candidates,
            digest: &digest,
            taken_with: &self.taken_with,
            now,
        };
        let mut decisions = self.observer.decide(&leases, &round);
        let live = self.observer.live(&round);
        let handed = self.hand_over(&leases, &candidates, &decisions).await;
        // The fence opens only once every tenant another replica holds now is stopped and
        // drained: a replica resumed after a pause writes nothing for what moved meanwhile.
        if let (Some(sent), true) = (sent, handed) {
            self.fence.renewed(sent);
        }
        if self.rounds <= SETTLE_ROUNDS || !self.fence.open() {
            decisions.take.clear();
        }
        self.take(&leases, &decisions, &live).await;
        self.report(&live, candidates.len(), decisions.unowned);
        self.collect(&leases).await;
        Ok(())
    }

    /// Deletes membership Leases released, or left unchanged for ten leases (replicas gone
    /// for good: hostname-pid identities outside a pod), at the version read.
    async fn collect(&self, leases: &[Lease]) {
        for lease in leases {
            let name = lease.metadata.name.as_deref().unwrap_or("");
            let version = lease.metadata.resource_version.as_deref().unwrap_or("");
            if !self.observer.collectable(name) || name == super::member_lease(&self.identity) {
                continue;
            }
            match self.leases.delete(name, version).await {
                Ok(()) => {
                    tracing::info!(lease = %name, "sharding: membership Lease of a replica gone for good deleted")
                }
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "sharding: membership Lease not deleted")
                }
            }
        }
    }

    /// Publishes `tenants` as owned (a new generation when it changed).
    fn publish(&self, tenants: BTreeSet<String>) {
        self.owned.send_if_modified(|owned| {
            if *owned.tenants == tenants {
                return false;
            }
            *owned = Owned {
                generation: owned.generation + 1,
                tenants: Arc::new(tenants),
            };
            true
        });
    }

    /// Stops the tenants this replica no longer keeps (held by another now, to be released,
    /// or no longer configured), waits for their reconciles in flight, then releases those
    /// whose Lease it still holds. Whether everything handed over drained.
    async fn hand_over(&mut self, leases: &[Lease], candidates: &[String], d: &Decisions) -> bool {
        let owned = self.owned.borrow().tenants.clone();
        let mut gone: Vec<String> = owned
            .iter()
            .filter(|t| !d.keep.contains(*t))
            .cloned()
            .collect();
        // Held from before this process (a restart under one identity): this replica's.
        let adopted: BTreeSet<String> = d
            .keep
            .iter()
            .filter(|t| !owned.contains(*t))
            .cloned()
            .collect();
        for t in &adopted {
            self.taken_with.entry(t.clone()).or_default();
            self.taking.insert(t.clone(), Instant::now());
        }
        gone.extend(d.release.iter().filter(|t| !owned.contains(*t)).cloned());
        self.draining
            .extend(gone.iter().filter_map(|t| self.shared.tenant(t)));
        self.publish(d.keep.clone());
        let mut draining = std::mem::take(&mut self.draining);
        for state in &draining {
            state.stop();
        }
        let bound = drain_bound(self.lease);
        futures::future::join_all(draining.iter().map(|s| s.busy.drained(bound))).await;
        draining.retain(|s| s.busy.in_flight() > 0);
        self.draining = draining;
        if !self.draining.is_empty() {
            tracing::warn!(
                "sharding: reconciles still in flight after the drain bound; releasing next round"
            );
            return false;
        }
        for t in &gone {
            self.taken_with.remove(t);
            self.taking.remove(t);
            let lease = find(leases, &tenant_lease(t));
            if lease.is_some_and(|l| holder(l) == self.identity) {
                let why = if candidates.contains(t) {
                    "moved"
                } else {
                    "unconfigured"
                };
                self.release(t, lease, why).await;
            } else {
                tracing::info!(tenant = %t, "sharding: tenant held by another replica now; stopped");
            }
        }
        true
    }

    /// Releases `tenant`'s Lease (found as `lease`), saying `why`.
    async fn release(&self, tenant: &str, lease: Option<&Lease>, why: &str) {
        let spec = self.leases.spec(None, transitions(lease));
        let annotations = [(ANN_RELEASED.to_string(), why.to_string())].into();
        match self
            .leases
            .swap((&tenant_lease(tenant), "tenant"), lease, spec, annotations)
            .await
        {
            Ok(Some(_)) => tracing::info!(tenant, why, "sharding: tenant released"),
            Ok(None) => tracing::info!(
                tenant,
                "sharding: tenant Lease changed meanwhile; not released"
            ),
            Err(e) => tracing::warn!(tenant, error = %e, "sharding: tenant not released"),
        }
    }

    /// Takes the tenants `d` says, each with a compare-and-swap on the Lease read.
    async fn take(&mut self, leases: &[Lease], d: &Decisions, live: &[String]) {
        let mut owned = (*self.owned.borrow().tenants).clone();
        for (t, from) in &d.take {
            let lease = find(leases, &tenant_lease(t));
            let spec = self
                .leases
                .spec(Some(&self.identity), transitions(lease) + 1);
            match self
                .leases
                .swap(
                    (&tenant_lease(t), "tenant"),
                    lease,
                    spec,
                    Default::default(),
                )
                .await
            {
                Ok(Some(_)) => {
                    let from_holder = lease.map(holder).unwrap_or("");
                    tracing::info!(tenant = %t, from = %from_holder, reason = from.map_or("new", |m| m.as_str()), "sharding: tenant taken");
                    if let Some(m) = from {
                        self.metrics
                            .shard
                            .moves
                            .get_or_create(&labels(&[("reason", m.as_str())]))
                            .inc();
                    }
                    owned.insert(t.clone());
                    self.taken_with.insert(t.clone(), live.to_vec());
                    self.taking.insert(t.clone(), Instant::now());
                }
                Ok(None) => {
                    tracing::debug!(tenant = %t, "sharding: another replica took the tenant first")
                }
                Err(e) => tracing::warn!(tenant = %t, error = %e, "sharding: tenant not taken"),
            }
        }
        self.publish(owned);
    }

    /// Metrics and the status the probes show.
    fn report(&mut self, live: &[String], candidates: usize, unowned: usize) {
        let owned = self.owned.borrow().tenants.len();
        let member = self.fence.open();
        self.metrics.shard.member.set(i64::from(member));
        // A fenced replica owns nothing it may write for.
        self.metrics
            .shard
            .owned
            .set(if member { owned as i64 } else { 0 });
        self.metrics.shard.unowned.set(unowned as i64);
        let primed: Vec<String> = self
            .taking
            .keys()
            .filter(|t| self.shared.tenant(t).is_some_and(|s| s.primed()))
            .cloned()
            .collect();
        for t in primed {
            if let Some(at) = self.taking.remove(&t) {
                let seconds = self
                    .shared
                    .tenant(&t)
                    .and_then(|s| s.primed_for())
                    .map_or(0.0, |p| at.elapsed().saturating_sub(p).as_secs_f64());
                self.metrics.shard.handover.observe(seconds);
            }
        }
        self.members.send_if_modified(|m| {
            let changed = m.as_slice() != live;
            *m = live.to_vec();
            changed
        });
        let mut inner = self.status.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.members = live.to_vec();
        inner.candidates = candidates;
    }

    /// SIGTERM: shuts the fence, releases the membership (the others see it gone at once),
    /// stops every tenant, waits for its reconciles in flight, and releases its Lease.
    pub(super) async fn shutdown(&mut self) {
        self.fence.close();
        let name = super::member_lease(&self.identity);
        let spec = self.leases.spec(None, 0);
        let released = [(ANN_RELEASED.to_string(), "shutdown".to_string())].into();
        match self
            .leases
            .swap((&name, "member"), self.mine.as_ref(), spec, released)
            .await
        {
            Ok(Some(_)) => tracing::info!("sharding: membership released"),
            Ok(None) => {
                tracing::warn!("sharding: membership Lease changed meanwhile; not released")
            }
            Err(e) => tracing::warn!(error = %e, "sharding: membership not released"),
        }
        let owned = self.owned.borrow().tenants.clone();
        self.publish(BTreeSet::new());
        let states: Vec<_> = owned.iter().filter_map(|t| self.shared.tenant(t)).collect();
        for state in &states {
            state.stop();
        }
        let bound = drain_bound(self.lease);
        futures::future::join_all(states.iter().map(|s| s.busy.drained(bound))).await;
        let leases = self.leases.list().await.unwrap_or_default();
        for t in owned.iter() {
            let lease = find(&leases, &tenant_lease(t));
            if lease.is_some_and(|l| holder(l) == self.identity) {
                self.release(t, lease, "shutdown").await;
            }
        }
    }
}

fn find<'a>(leases: &'a [Lease], name: &str) -> Option<&'a Lease> {
    leases
        .iter()
        .find(|l| l.metadata.name.as_deref() == Some(name))
}
