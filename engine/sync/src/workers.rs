//! Workers: take keys from the queues in turn, reconcile them, and hand failures back to the
//! queue's backoff.

use std::sync::Arc;
use std::time::Instant;

use crate::key::Key;
use crate::metrics::labels;
use crate::reconcile::{Outcome, Reconciler};
use crate::state::Shared;
use crate::write;

/// How many keys are reconciled at once.
pub const WORKERS: usize = 32;
/// How many of them one tenant may hold: a tenant whose API server hangs holds at most this
/// many, and the others keep the rest.
pub const PER_TENANT: usize = WORKERS / 4;
/// How many one tenant may hold while another tenant has work. Measured with `cargo xtask
/// bench --sync` (a quiet tenant's create while another creates 5,000): the quiet tenant's
/// reconcile is its write to the super API server, which waits behind every write in flight
/// there.
pub const SHARING: usize = 2;

/// One worker, until the queues close.
pub async fn work(shared: Arc<Shared>) {
    let mut leader = shared.leader.clone();
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        let Some((key, since)) = shared.queues.next().await else {
            return;
        };
        if let Some(tenant) = shared.tenant(&key.tenant) {
            // A tenant handed over (or stopping) starts no reconcile; one in flight is waited for.
            if let Some(_in_flight) = tenant.busy.enter() {
                let reconciling = write::Reconciling {
                    tenant: key.tenant.clone(),
                    since,
                    sent: Default::default(),
                };
                let result = write::RECONCILING
                    .scope(
                        reconciling,
                        Reconciler::new(&shared, &tenant).reconcile(&key),
                    )
                    .await;
                finish(&shared, &key, since, result);
            }
        }
        shared.queues.done(&key);
    }
}

fn finish(shared: &Shared, key: &Key, since: Instant, result: Result<Outcome, write::Error>) {
    match result {
        Ok(outcome) => {
            shared.queues.forget(key);
            if outcome.wrote {
                shared
                    .metrics
                    .sync_latency
                    .observe(since.elapsed().as_secs_f64());
            }
            if let Some(after) = outcome.again {
                shared.queues.add_after(key.clone(), after);
            }
        }
        // Leadership moved: the new leader resyncs everything.
        Err(write::Error::NotLeader) => {}
        // A sharded replica's renewal is late: the key waits for it (its backoff), quietly.
        Err(write::Error::Fenced) => {
            let (attempt, delay) = shared.queues.retry(key);
            tracing::debug!(tenant = %key.tenant, object = %shared.describe(key), attempt, retry_in = ?delay, "membership renewal late; retrying");
        }
        Err(e) => {
            let (attempt, delay) = shared.queues.retry(key);
            shared
                .metrics
                .errors
                .get_or_create(&labels(&[("tenant", &key.tenant)]))
                .inc();
            // A cluster that does not answer was reported once, when it stopped.
            if matches!(e, write::Error::Unreachable(_)) {
                tracing::debug!(tenant = %key.tenant, object = %shared.describe(key), attempt, retry_in = ?delay, error = %e, "sync failed; retrying");
            } else {
                tracing::warn!(
                    tenant = %key.tenant,
                    object = %shared.describe(key),
                    attempt,
                    retry_in = ?delay,
                    error = %e,
                    "sync failed; retrying"
                );
            }
        }
    }
}
