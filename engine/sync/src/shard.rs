//! Sharding across replicas (DESIGN.md "Sharding across replicas"): each replica holds a
//! membership Lease, tenants go to members by rendezvous hashing (`ferry_core::shard`), and a
//! tenant's ownership Lease names the one replica that syncs it. The supervisor
//! (`tenants.rs`) runs exactly the tenants published here; every writer checks the fence.
//!
//! ```text
//!  every leaseDuration/3: renew ferry-member-<me> ─▶ LIST Leases ─▶ Observer::decide
//!     ├─ lost (another holds it): stop, drain          ┐ then the fence opens again
//!     ├─ release (another member wins): stop, drain, release (CAS)
//!     └─ take (free, released, stale holder; rank r after r × leaseDuration): CAS ─▶ Owned
//!  SIGTERM: fence shut ─▶ membership released ─▶ every tenant stopped, drained, released
//! ```

use ferry_core::keys::ANN_INSTANCE;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;

use crate::cache::Owned;
use crate::metrics::{labels, Metrics};

use crate::state::Shared;
use crate::write::Fence;

mod decide;
mod leases;
mod round;

pub use decide::{Move, Observer};
pub use leases::{member_lease, tenant_lease, Leases};

use leases::{annotation, holder};

/// Why a sharded replica stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another running process renews this identity's membership.
    #[error("identity {identity:?} is in use: another running replica renews its membership Lease {namespace}/{lease}; give each replica its own --identity (a StatefulSet's pod names are)")]
    InUse {
        /// The identity.
        identity: String,
        /// The Leases' namespace.
        namespace: String,
        /// The Lease.
        lease: String,
    },
}

/// What the probes and `/readyz` say about this replica's membership.
pub struct Status {
    lease: Duration,
    started: Instant,
    fence: Arc<Fence>,
    inner: Mutex<StatusInner>,
}

#[derive(Default)]
struct StatusInner {
    renewed: Option<Instant>,
    members: Vec<String>,
    candidates: usize,
}

impl Status {
    fn new(lease: Duration, fence: Arc<Fence>) -> Self {
        Self {
            lease,
            started: Instant::now(),
            fence,
            inner: Mutex::default(),
        }
    }

    /// `/healthz`: failing once the membership renewal has not succeeded for a lease duration
    /// (counted from the start until the first).
    pub fn health(&self) -> (bool, String) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let since = inner.renewed.unwrap_or(self.started).elapsed();
        let ok = since < self.lease;
        let what = match inner.renewed {
            Some(_) => format!("membership renewed {}s ago", since.as_secs()),
            None => format!("membership not held yet ({}s since start)", since.as_secs()),
        };
        (
            ok,
            format!("{what} (leaseDuration {}s)\n", self.lease.as_secs()),
        )
    }

    /// Whether this replica may write: its membership renewal is fresh and its tenants
    /// checked (a replica that cannot renew, or not yet, is not ready).
    pub fn member(&self) -> bool {
        self.fence.open()
    }

    /// A line for `/readyz`.
    pub fn describe(&self, identity: &str, owned: usize) -> String {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let fenced = if self.fence.open() {
            ""
        } else {
            " (fenced: its membership renewal is not fresh; it writes nothing)"
        };
        format!(
            "shard: member {identity}{fenced} of {} live ({}), owns {owned} of {} tenants",
            inner.members.len(),
            inner.members.join(", "),
            inner.candidates
        )
    }
}

/// The channels a sharded replica publishes to the rest of the engine.
pub struct Channels {
    /// The write fence.
    pub fence: Arc<Fence>,
    /// The tenants owned.
    pub owned: watch::Receiver<Owned>,
    owned_tx: watch::Sender<Owned>,
    /// The tenants of the configuration (the supervisor sends them).
    pub candidates: watch::Sender<Vec<String>>,
    candidates_rx: watch::Receiver<Vec<String>>,
    /// The live members, as last seen.
    pub members: watch::Receiver<Vec<String>>,
    members_tx: watch::Sender<Vec<String>>,
}

impl Channels {
    /// Channels for a membership lasting `lease`: the fence shut, nothing owned.
    pub fn new(lease: Duration) -> Self {
        let (owned_tx, owned) = watch::channel(Owned::default());
        let (candidates, candidates_rx) = watch::channel(Vec::new());
        let (members_tx, members) = watch::channel(Vec::new());
        Self {
            fence: Arc::new(Fence::new(lease)),
            owned,
            owned_tx,
            candidates,
            candidates_rx,
            members,
            members_tx,
        }
    }
}

/// One replica's part in sharding.
pub struct Shard {
    leases: Leases,
    identity: String,
    instance: String,
    lease: Duration,
    fence: Arc<Fence>,
    owned: watch::Sender<Owned>,
    candidates: watch::Receiver<Vec<String>>,
    members: watch::Sender<Vec<String>>,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    observer: Observer,
    /// This replica's membership Lease as last written.
    mine: Option<Lease>,
    /// The live members when each held tenant was taken.
    taken_with: BTreeMap<String, Vec<String>>,
    /// Tenants taken and not primed yet, since when (`ferry_tenant_handover_seconds`).
    taking: BTreeMap<String, Instant>,
    rounds: u64,
    /// Tenants handed over whose reconciles are still in flight: the fence stays shut.
    draining: Vec<Arc<crate::state::TenantState>>,
    /// For the probes.
    pub status: Arc<Status>,
}

/// How long a hand-over waits for a tenant's reconciles in flight.
fn drain_bound(lease: Duration) -> Duration {
    lease / 3
}

impl Shard {
    /// The sharding of `identity` through `leases`, lasting `lease`, with `channels` (from
    /// [`Channels::new`]) and the engine `shared`.
    pub fn new(
        leases: Leases,
        identity: String,
        lease: Duration,
        channels: &Channels,
        shared: Arc<Shared>,
    ) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            leases,
            instance: format!("{nanos:x}-{:x}", std::process::id()),
            identity,
            lease,
            fence: channels.fence.clone(),
            owned: channels.owned_tx.clone(),
            candidates: channels.candidates_rx.clone(),
            members: channels.members_tx.clone(),
            metrics: shared.metrics.clone(),
            shared,
            observer: Observer::new(lease),
            mine: None,
            taken_with: BTreeMap::new(),
            taking: BTreeMap::new(),
            rounds: 0,
            draining: Vec::new(),
            status: Arc::new(Status::new(lease, channels.fence.clone())),
        }
    }

    /// Claims the membership, then takes part until `stop` turns true; then hands every tenant
    /// over. An error: the identity is another running process's.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), Error> {
        tokio::select! {
            claimed = self.claim() => claimed?,
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        tracing::info!(identity = %self.identity, namespace = %self.leases.namespace(), lease_s = self.lease.as_secs(), "sharding: member");
        loop {
            if let Err(e) = self.round().await {
                self.fence.close();
                return Err(e);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.lease / 3) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        self.shutdown().await;
        Ok(())
    }

    fn membership_spec(&self) -> k8s_openapi::api::coordination::v1::LeaseSpec {
        self.leases.spec(Some(&self.identity), 0)
    }

    /// The membership's annotations: this process's instance, the digest of its tenants.
    fn instance_annotation(&self) -> BTreeMap<String, String> {
        let digest = decide::digest(&self.candidates.borrow());
        [
            (ANN_INSTANCE.to_string(), self.instance.clone()),
            (ferry_core::keys::ANN_TENANTS_SHA256.to_string(), digest),
        ]
        .into()
    }

    /// Takes this identity's membership Lease. Held by another process (another instance)
    /// that keeps renewing it: [`Error::InUse`]; left by one that stopped renewing (killed):
    /// taken once unchanged for longer than the fence stays open.
    async fn claim(&mut self) -> Result<(), Error> {
        let name = member_lease(&self.identity);
        loop {
            let found = match self.leases.get(&name).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(error = %e, "sharding: cannot read the membership Lease; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let found = match found {
                Some(l)
                    if !holder(&l).is_empty()
                        && annotation(&l, ANN_INSTANCE) != Some(&self.instance) =>
                {
                    tracing::info!(lease = %name, "sharding: membership Lease held; checking that its holder stopped");
                    tokio::time::sleep(self.fence.window() + Duration::from_secs(1)).await;
                    let again = self.leases.get(&name).await.ok().flatten();
                    let renewed = again.as_ref().is_some_and(|a| {
                        a.metadata.resource_version != l.metadata.resource_version
                    });
                    if renewed {
                        return Err(Error::InUse {
                            identity: self.identity.clone(),
                            namespace: self.leases.namespace().to_string(),
                            lease: name,
                        });
                    }
                    again
                }
                other => other,
            };
            let spec = self.membership_spec();
            let annotations = self.instance_annotation();
            let sent = Instant::now();
            match self
                .leases
                .swap((&name, "member"), found.as_ref(), spec, annotations)
                .await
            {
                Ok(Some(written)) => {
                    self.mine = Some(written);
                    self.renewed(sent);
                    return Ok(());
                }
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "sharding: cannot take the membership Lease; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Records a successful renewal sent at `sent` (the fence itself opens once the round
    /// has checked which tenants are still this replica's).
    fn renewed(&self, sent: Instant) {
        self.status
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .renewed = Some(sent);
    }

    /// Renews the membership (one write, at the resourceVersion last written); whether it
    /// succeeded. Another instance holding it: [`Error::InUse`].
    async fn renew(&mut self) -> Result<Option<Instant>, Error> {
        let name = member_lease(&self.identity);
        let sent = Instant::now();
        let spec = self.membership_spec();
        let annotations = self.instance_annotation();
        match self
            .leases
            .swap((&name, "member"), self.mine.as_ref(), spec, annotations)
            .await
        {
            Ok(Some(written)) => {
                self.mine = Some(written);
                self.renewed(sent);
                return Ok(Some(sent));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "sharding: membership renewal failed");
                return Ok(None);
            }
        }
        // Someone wrote it: this process, a moment ago (an answer lost), someone annotating
        // it, or another process with this identity.
        match self.leases.get(&name).await {
            Ok(Some(l)) if annotation(&l, ANN_INSTANCE) == Some(&self.instance) => {
                let sent = Instant::now();
                let (spec, annotations) = (self.membership_spec(), self.instance_annotation());
                let again = self
                    .leases
                    .swap((&name, "member"), Some(&l), spec, annotations);
                match again.await {
                    Ok(Some(written)) => {
                        self.mine = Some(written);
                        self.renewed(sent);
                        Ok(Some(sent))
                    }
                    _ => {
                        self.mine = Some(l);
                        Ok(None)
                    }
                }
            }
            Ok(Some(_)) => Err(Error::InUse {
                identity: self.identity.clone(),
                namespace: self.leases.namespace().to_string(),
                lease: name,
            }),
            Ok(None) => {
                self.mine = None;
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(error = %e, "sharding: cannot read the membership Lease");
                Ok(None)
            }
        }
    }
}
