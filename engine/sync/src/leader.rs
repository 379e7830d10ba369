//! Leader election with a coordination.k8s.io Lease in the super cluster: only the holder
//! writes; the others keep their caches warm and take over when the lease expires or is
//! released.
//!
//! ```text
//!  every RETRY: get Lease ─▶ ours? renew : expired or free? take (resourceVersion-guarded)
//!                         └▶ leader: watch::Sender<bool>
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;

/// How long a lease lasts without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews and the others try.
pub const RETRY: Duration = Duration::from_secs(2);

/// One replica's view of the lease.
pub struct Elector {
    api: Api<Lease>,
    client: Client,
    namespace: String,
    name: String,
    identity: String,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the lease.
    Held,
    /// Another replica holds a live lease.
    Other(String),
}

impl Elector {
    /// An elector for lease `namespace`/`name` under `identity`.
    pub fn new(client: Client, namespace: &str, name: &str, identity: String) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity,
        }
    }

    /// Tries to take or renew the lease until `stop` turns true, publishing leadership on
    /// `leader`; releases the lease on the way out if held.
    pub async fn run(self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut last_renewal: Option<std::time::Instant> = None;
        let mut holder_seen = String::new();
        loop {
            match self.attempt().await {
                Ok(Attempt::Held) => {
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.identity, lease = %format!("{}/{}", self.namespace, self.name), "became leader");
                    }
                    last_renewal = Some(std::time::Instant::now());
                    leader.send_replace(true);
                }
                Ok(Attempt::Other(holder)) => {
                    if *leader.borrow() {
                        tracing::warn!(holder = %holder, "lost the lease");
                    } else if holder != holder_seen {
                        tracing::info!(holder = %holder, "another replica leads; standing by");
                    }
                    holder_seen = holder;
                    leader.send_replace(false);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lease request failed");
                    // A leader that cannot renew stops writing before the lease can expire.
                    let stale = last_renewal
                        .is_none_or(|t| t.elapsed() > LEASE_DURATION.saturating_sub(RETRY * 2));
                    if stale {
                        leader.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        if *leader.borrow() {
            leader.send_replace(false);
            match self.release().await {
                Ok(()) => tracing::info!("released the lease"),
                Err(e) => tracing::warn!(error = %e, "could not release the lease"),
            }
        }
    }

    async fn attempt(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            crate::client::ensure_namespace(&self.client, &self.namespace).await?;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Other(String::new())),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        if holder == self.identity {
            lease.spec = Some(LeaseSpec {
                renew_time: Some(MicroTime(now)),
                ..spec
            });
        } else {
            let duration = spec
                .lease_duration_seconds
                .map_or(LEASE_DURATION.as_secs() as i64, i64::from);
            let expired = spec
                .renew_time
                .as_ref()
                .is_none_or(|t| now.as_second() - t.0.as_second() > duration);
            if !holder.is_empty() && !expired {
                return Ok(Attempt::Other(holder));
            }
            lease.spec = Some(self.spec(now, transitions + 1));
        }
        // The resourceVersion in `lease` makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Other(holder)),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Gives the lease up so that another replica takes over at once.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}
