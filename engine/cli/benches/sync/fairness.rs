//! The fairness measurement: a quiet tenant's creates alone and while a noisy one creates as
//! fast as it can, through ferry and on the super API server alone; and the noisy tenant's
//! synced rate alone and beside the quiet one.

use std::time::Duration;

use anyhow::Result;
use ferry_testkit::fresh_namespace;
use ferry_testkit::live::Ferry;
use kube::Client;

use crate::cost::Within;
use crate::load::{
    burst_of, database, latencies_of, percentile, synced_latencies, Since, CONCURRENCY,
};

/// Objects the noisy tenant creates as fast as it can in the fairness measurement.
pub const NOISY_OBJECTS: usize = 5_000;
/// The steady rates (creates a second) of the noisy client in [`fairness_direct_at`]: the
/// lowest first, so that the overload of the highest does not linger into the others.
pub const NOISY_RATES: [u64; 5] = [50, 100, 150, 200, 400];
/// Creates of the quiet tenant, and their rate.
/// (100, so that the p99 is not the one slowest sample.)
pub const QUIET_OBJECTS: usize = 100;
pub const QUIET_RATE: u64 = 10;

/// p99 create-to-super latency (ms) of the quiet tenant `b` on an idle engine, and while
/// tenant `a` creates `NOISY_OBJECTS` as fast as it can; from the tenant API server's answer,
/// since both tenants' API servers share one core with the load generator, and the noisy
/// tenant's burst slows the quiet tenant's own API server, which is not ferry's doing. Each
/// with where its time went ([`Quiet`]). Beside them, the noisy tenant's synced creates per
/// second alone and while the quiet tenant creates (what fairness costs it).
pub async fn fairness(ferry: &Ferry, a: &Client, b: &Client, s: &Client) -> Result<Fairness> {
    let quiet = || async {
        let ns = fresh_namespace(b, "bench-quiet").await?;
        let target = format!("team-b-{ns}");
        let before = Within::super_requests(ferry).await?;
        let split = synced_latencies((b, &ns), (s, &target), QUIET, Since::Created).await?;
        let answered = Within::super_requests(ferry).await?.since(before);
        let (super_over, super_requests) = answered.over();
        anyhow::Ok(Quiet {
            p99: split.p99(),
            super_over,
            super_requests,
        })
    };
    // A ferry just started (and a super just started) answers its first creates slower: the
    // quiet tenant's first series warms both and is not counted.
    quiet().await?;
    let alone = noisy_synced(a, s, || async { Ok(()) }).await?;
    let ((idle, loaded), with_quiet) = quiet_while(quiet, a, CONCURRENCY, Some(s)).await?;
    Ok(Fairness {
        idle,
        loaded,
        noisy_alone: alone.0,
        noisy_with_quiet: with_quiet.unwrap_or(0.0),
    })
}

/// What [`fairness`] measured.
pub struct Fairness {
    pub idle: Quiet,
    pub loaded: Quiet,
    /// The noisy tenant's synced creates per second alone, and while the quiet one creates.
    pub noisy_alone: f64,
    pub noisy_with_quiet: f64,
}

/// The noisy tenant's `NOISY_OBJECTS` creates, as fast as it can, synced: creates per second
/// until every copy is visible in the super cluster, and what `beside` gave meanwhile (run
/// once the burst is under way).
async fn noisy_synced<F, T>(a: &Client, s: &Client, beside: impl FnOnce() -> F) -> Result<(f64, T)>
where
    F: std::future::Future<Output = Result<T>>,
{
    let ns = fresh_namespace(a, "bench-noisy").await?;
    let (seen, task) = crate::load::watch(s, &format!("team-a-{ns}"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let burst = {
        let a = a.clone();
        tokio::spawn(async move { burst_of(&a, &ns, (NOISY_OBJECTS, CONCURRENCY), database).await })
    };
    // Let the noisy tenant's queue fill first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let besides = beside().await?;
    let start = burst.await??;
    let end = crate::load::wait_all(&seen, NOISY_OBJECTS).await?;
    task.abort();
    let rate = NOISY_OBJECTS as f64 / end.duration_since(start).as_secs_f64();
    Ok((rate, besides))
}

/// The quiet tenant's series in the fairness measurement: the p99s of its creates' latency
/// and of its two parts, answered → seen by a watch of the tenant's API server and from there
/// to seen in the super cluster ([`Synced::p99`]); and how the super answered ferry's
/// requests meanwhile, every tenant's (`ferry_request_seconds`): the percentage that took
/// over 32 and over 128 ms, and how many there were.
pub struct Quiet {
    pub p99: [f64; 3],
    pub super_over: Vec<f64>,
    pub super_requests: f64,
}

/// The same on the super API server alone, without ferry: a quiet client's p99 create-to-
/// visible latency idle, and while a noisy client creates `NOISY_OBJECTS` with `in_flight`
/// writes at once (as many as ferry lets a tenant hold while another has work, `SHARING`, and
/// one). What one core's API server gives a quiet writer beside a busy one; ferry's ratio is
/// read against it.
pub async fn fairness_direct(s: &Client, in_flight: usize) -> Result<(f64, f64)> {
    Ok(quiet_while(|| quiet_direct(s), s, in_flight, None).await?.0)
}

/// A quiet client's p99 create-to-visible latency (ms), writing directly to `s`.
async fn quiet_direct(s: &Client) -> Result<f64> {
    let ns = fresh_namespace(s, "bench-quiet").await?;
    let ms = latencies_of(s, &ns, s, &ns, QUIET, Since::Request).await?;
    Ok(percentile(ms, 0.99))
}

/// The same on the super API server alone, the noisy client creating at a steady `rate` a
/// second for fourteen seconds (the quiet series takes ten, from two seconds in) rather than
/// as fast as it can: how far below saturation a super must be kept for a quiet writer's p99
/// to stay near idle (`FERRY_BENCH_ONLY=super-rates`). The quiet client's p99 idle and
/// loaded, and the rate the noisy one reached (its creates over the time until all were seen).
pub async fn fairness_direct_at(s: &Client, rate: u64) -> Result<(f64, f64, f64)> {
    let idle = quiet_direct(s).await?;
    let noisy_ns = fresh_namespace(s, "bench-noisy").await?;
    let count = (rate * 14) as usize;
    let noisy = {
        let s = s.clone();
        tokio::spawn(async move {
            let start = std::time::Instant::now();
            latencies_of(&s, &noisy_ns, &s, &noisy_ns, (count, rate), Since::Request).await?;
            anyhow::Ok(count as f64 / start.elapsed().as_secs_f64())
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = quiet_direct(s).await?;
    let reached = noisy.await??;
    Ok((idle, loaded, reached))
}

/// The quiet tenant's creates and their rate.
const QUIET: (usize, u64) = (QUIET_OBJECTS, QUIET_RATE);

/// `quiet`'s p99 alone, then while `noisy` creates `NOISY_OBJECTS` with `in_flight` at once;
/// through ferry (`synced_into`: the super cluster, for the noisy tenant's synced rate) or
/// directly.
async fn quiet_while<F, T>(
    quiet: impl Fn() -> F,
    noisy: &Client,
    in_flight: usize,
    synced_into: Option<&Client>,
) -> Result<((T, T), Option<f64>)>
where
    F: std::future::Future<Output = Result<T>>,
{
    let idle = quiet().await?;
    if let Some(s) = synced_into {
        let (rate, loaded) = noisy_synced(noisy, s, &quiet).await?;
        return Ok(((idle, loaded), Some(rate)));
    }
    let noisy_ns = fresh_namespace(noisy, "bench-noisy").await?;
    let noisy = {
        let noisy = noisy.clone();
        tokio::spawn(async move {
            burst_of(&noisy, &noisy_ns, (NOISY_OBJECTS, in_flight), database).await
        })
    };
    // Let the noisy client's writes fill the server first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = quiet().await?;
    noisy.await??;
    Ok(((idle, loaded), None))
}
