//! `cargo xtask bench --sync`: live sync against the local control planes, as ratios measured
//! side by side in one run (interleaved rounds):
//!
//! - throughput: creates per second synced tenant → super (until every copy is visible in the
//!   super cluster) over direct creates per second into the same super API server, at the same
//!   concurrency;
//! - latency added at 100 objects/s: tenant create → super copy visible, minus direct super
//!   create → visible, p50 and p99;
//! - what the super API server pays: its requests per synced create and per synced update
//!   (from its own `apiserver_request_total`), its CPU seconds per synced create over per
//!   direct create, and ferry's CPU per synced object over the super API server's per direct
//!   create (from `/proc/<pid>/stat`); beside them, the super's CPU per direct create of ferry's
//!   exact copy (its bytes, without ferry watching), which splits the super's extra cost into
//!   what the copy's required metadata costs and what the rest (ferry's watch) does; and the
//!   floor, the super's CPU per direct create with one more plain watcher of the kind
//!   (`super_cpu_floor`);
//! - ferry's own time per object at 100 objects/s: change queued → first write sent, from its
//!   histogram `ferry_own_seconds` (`ferry_own_ms`), with the part its transforms took;
//! - what bounds the throughput ratio: how busy the super's core was in the direct rounds,
//!   and so the ratio its CPU allows a synced create (super and ferry share that core);
//! - memory: growth of ferry's resident memory per synced object;
//! - fairness: a quiet tenant's p99 create-to-super latency while another creates 5,000 objects
//!   as fast as it can, over the same on an idle engine; beside it the same without ferry (a
//!   quiet client's direct creates while a noisy one writes with as many in flight as ferry
//!   lets a tenant hold then, and one), what the super API server on its core gives by itself;
//!   and where the quiet tenant's time went: its own API server (answered → seen by a watch
//!   there), the hop to the super, and how the super answered ferry's requests meanwhile
//!   (`ferry_request_seconds`); the noisy tenant's synced rate beside the quiet one over alone
//!   (`fairness_noisy_throughput_ratio`); and all of it under each way of pacing ferry's writes
//!   (`fairness_by_pacing`: unlimited, adaptive, APF; `sync/pacing.rs`); and the super alone
//!   beside a noisy client at steady rates, 50/s up to 400/s (`fairness_direct_by_rate`,
//!   `FERRY_BENCH_ONLY=super-rates`): how far below saturation its core must stay for a quiet
//!   client's p99 to stay within 2x of idle;
//! - 500 tenants in one process on one tenant API server, first, while it holds no object:
//!   seconds until ready and idle RSS per tenant (`tenants_500`);
//! - `FERRY_BENCH_ONLY=watchers`: the super's CPU per direct create with one more watcher of
//!   every Database, of whole objects and of metadata only, over none (`sync/watchers.rs`);
//! - restart with 100,000 more synced objects (`FERRY_BENCH_RESTART_OBJECTS`): writes, and the
//!   time until converged over the time a plain client takes to LIST both sides.
//!
//! Writes `target/bench/sync.json`. `cargo xtask bench --sync` starts control planes of its
//! own for it (`target/clusters-bench`): the tenants' etcd and API servers and this load
//! generator on CPU 0, the super cluster's API server, its own etcd and ferry on CPU 1, so that
//! the ratios measure what ferry costs the super side. `FERRY_BENCH_POLICY` replaces
//! `policies/` (to compare policies); `FERRY_BENCH_SUPER_WRITES` sets the main ferry's
//! `superWrites` (the fairness measurement runs under each anyway).

// The report is one `json!` of many keys.
#![recursion_limit = "256"]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_testkit::live::{Ferry, Identity, Settings};
use ferry_testkit::{fresh_namespace, install_crds, Clusters};
use serde_json::json;

#[path = "sync/cost.rs"]
mod cost;
#[path = "sync/fairness.rs"]
mod fairness;
#[path = "sync/load.rs"]
mod load;
#[path = "sync/pacing.rs"]
mod pacing;
#[path = "sync/restart.rs"]
mod restart;
#[path = "sync/watchers.rs"]
mod watchers;

use cost::Cost;
use fairness::*;
use ferry_sync::workers::SHARING;
use load::*;

/// DESIGN.md's targets: the super's CPU per synced create at most this over the floor (per
/// direct create with one more watcher), ferry's at most this of the super's per direct
/// create; the bound of the throughput ratio at the CPU targets is read with the first as
/// 1.1.
const SUPER_CPU_OVER_FLOOR: f64 = 0.03;
const SUPER_CPU_TARGET: f64 = 1.1;
const FERRY_CPU_TARGET: f64 = 0.15;
/// How long the super's CPU is read while nothing happens.
const IDLE_MEASURED: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let clusters = Clusters::connect()
        .await
        .context("start the control planes: cargo xtask cluster up")?;
    for client in [
        &clusters.super_cluster,
        clusters.tenant("team-a"),
        clusters.tenant("team-b"),
    ] {
        install_crds(client).await?;
    }
    let dir = ferry_testkit::live::scratch("bench-sync")?;
    let mut settings = Settings::new(&["team-a", "team-b"], Identity::Admin);
    settings.patrol = "60s".into();
    // As deployed: info logs, not one debug line per write.
    settings.verbose = false;
    // `FERRY_BENCH_SUPER_WRITES=adaptive`: the main ferry paced otherwise (to compare).
    if let Ok(writes) = std::env::var("FERRY_BENCH_SUPER_WRITES") {
        settings.spec.insert("superWrites".into(), json!(writes));
    }
    if let Some(policy) = std::env::var_os("FERRY_BENCH_POLICY") {
        settings.policy = policy.into();
    }
    let only = std::env::var("FERRY_BENCH_ONLY").unwrap_or_default();
    // Many tenants first, while the tenant API servers hold no object yet: each of the 500
    // tenants (all on team-b's API server) would sync every object there.
    let many = match only.as_str() {
        "" | "tenants" => Some(tenants_many(&dir, &settings).await?),
        _ => None,
    };
    if only == "tenants" {
        return Ok(());
    }
    let mut ferry = Ferry::start(&ferry_binary(), &dir, &settings, "ferry.log")?;
    ferry.ready().await?;
    let (s, a) = (&clusters.super_cluster, clusters.tenant("team-a"));

    let rss_before = ferry.rss().unwrap_or(0);
    // How much ferry's RSS grew since it was ready, and (progress, and where memory grows)
    // that growth after a phase.
    let grown = |ferry: &Ferry| ferry.rss().unwrap_or(0) as f64 - rss_before as f64;
    let after = |ferry: &Ferry, phase: &str| {
        println!("ferry's RSS after {phase}: +{:.1} MB", grown(ferry) / 1e6);
    };
    // `FERRY_BENCH_ONLY=memory`, `cost`, `latency` (with fairness), `fairness`, `tenants`
    // (above), `restart`, `watchers` or `super-rates` (the super alone beside a noisy client
    // at steady rates): one figure alone, for profiling.

    if only == "memory" {
        for _ in 0..ROUNDS {
            let ns = fresh_namespace(a, "bench-sync").await?;
            throughput((a, &ns), (s, &format!("team-a-{ns}")), database).await?;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        println!(
            "memory: ferry's RSS grew {:.0} bytes per synced object (target <= 1024)",
            grown(&ferry) / (ROUNDS * PER_ROUND) as f64
        );
        return Ok(());
    }
    if only == "latency" {
        let before = cost::Within::reconciles(&ferry).await?;
        let own_before = own_buckets(&ferry).await?;
        let series = direct_and_synced_latencies(s, a).await?;
        own_time(&ferry, &own_before).await?;
        reconciles_against_hops(&ferry, before, &series.synced.hop).await?;
        for (what, ms) in [
            ("direct", &series.direct),
            ("synced", &series.synced.total),
            (
                "tenant create to visible in the tenant",
                &series.synced.tenant_visible,
            ),
            (
                "visible in the tenant to visible in the super",
                &series.synced.hop,
            ),
        ] {
            let p = |q| percentile(ms.clone(), q);
            println!(
                "latency {what}: p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} ms",
                p(0.5),
                p(0.9),
                p(0.99),
                p(1.0)
            );
        }
        let floor = p99_of_sum(&series.synced.tenant_visible, &series.direct);
        println!(
            "latency: a syncer taking no time would add p99 {:.1} ms",
            floor - percentile(series.direct.clone(), 0.99)
        );
        after(&ferry, "the latency series");
        let measured = fairness(&ferry, a, clusters.tenant("team-b"), s).await?;
        println!(
            "fairness: {}",
            quiet_split(&measured.idle, &measured.loaded)
        );
        println!("fairness: {}", noisy_line(&measured));
        settle(&ferry).await?;
        after(&ferry, "fairness");
        for in_flight in [SHARING, 1] {
            let (idle, loaded) = fairness_direct(s, in_flight).await?;
            println!("fairness without ferry, {in_flight} in flight: quiet p99 {loaded:.1} ms loaded, {idle:.1} ms idle");
        }
        return Ok(());
    }
    if only == "super-rates" {
        ferry.stop()?;
        super_rates(s).await?;
        return Ok(());
    }
    if only == "fairness" {
        ferry.stop()?;
        for pacing in &pacing::PACINGS {
            let m = pacing::fairness_paced((&ferry_binary(), &dir), &settings, &clusters, pacing)
                .await?;
            print_paced(pacing, &m);
        }
        return Ok(());
    }
    if only == "restart" {
        // `FERRY_BENCH_COMPARE=A:B`: builds A and B restarted in turn on the same objects.
        let compared = std::env::var("FERRY_BENCH_COMPARE").unwrap_or_default();
        let mut binaries: Vec<std::path::PathBuf> = compared
            .split(':')
            .filter(|b| !b.is_empty())
            .map(Into::into)
            .collect();
        if binaries.is_empty() {
            binaries.push(ferry_binary());
        }
        let total = restart::fill(ferry, (a, s), restart::objects()).await?;
        for _ in 0..3.min(binaries.len() + 1) {
            for binary in &binaries {
                println!("{}:", binary.display());
                restart::restarted((&dir, &settings, binary), (a, s), total).await?;
            }
        }
        return Ok(());
    }
    // The super API server, and its etcd when the tenants have one of their own (`cargo xtask
    // bench --sync` starts them so; a shared etcd would count the tenant's writes too).
    let own_etcd = ferry_testkit::faults::pid("etcd-tenants").is_ok();
    let mut super_pids = vec![ferry_testkit::faults::pid("super")?];
    if own_etcd {
        super_pids.push(ferry_testkit::faults::pid("etcd")?);
    }
    if only == "watchers" {
        return watchers::watchers(s, &super_pids).await;
    }
    let ferry_pid = ferry.pid().context("ferry runs")?;
    let cost = || Cost::now(s, &super_pids, ferry_pid);
    // Each round: direct creates of the bench object, direct creates of ferry's exact copy of
    // it (what the super stores and sends for a synced create, without ferry watching), and
    // synced creates.
    let template = exact_copy_template(a, s).await?;
    // What the super uses while nothing happens (ferry connected and idle): a round that takes
    // longer pays more of it, so the synced rounds (the slower ones) count more of it per
    // create than the direct ones.
    let quiet = cost().await?;
    tokio::time::sleep(IDLE_MEASURED).await;
    let quiet = cost().await?.since(quiet);
    let idle_per_second = quiet.super_cpu / quiet.seconds;
    let (mut direct, mut copies, mut synced) = (Vec::new(), Vec::new(), Vec::new());
    let mut direct_cost = Cost::default();
    let mut direct_busy = Vec::new();
    let (mut copy_cost, mut synced_cost) = (Cost::default(), Cost::default());
    let mut last_synced_ns = String::new();
    let mut floor_cpu = 0.0;
    for round in 0..ROUNDS {
        let ns = fresh_namespace(s, "bench-direct").await?;
        let before = cost().await?;
        let (rate, busy) = throughput_and_busy((s, &ns), (s, &ns), database, &super_pids).await?;
        direct.push(rate);
        direct_busy.push(busy);
        direct_cost.add(cost().await?.since(before));
        // The floor: a direct create with one more plain watcher of every Database (a syncer
        // must watch what it writes).
        floor_cpu += watchers::direct_round(s, &super_pids, watchers::Extra::Whole)
            .await?
            .1;
        let ns = fresh_namespace(s, "bench-copy").await?;
        let before = cost().await?;
        let exact = |name: &str| exact_copy(&template, name);
        copies.push(throughput((s, &ns), (s, &ns), exact).await?);
        copy_cost.add(cost().await?.since(before));
        let ns = fresh_namespace(a, "bench-sync").await?;
        let before = cost().await?;
        synced.push(throughput((a, &ns), (s, &format!("team-a-{ns}")), database).await?);
        synced_cost.add(cost().await?.since(before));
        last_synced_ns = ns;
        println!(
            "round {}: direct {:.0}/s, ferry's copies direct {:.0}/s, synced {:.0}/s",
            round + 1,
            direct[round],
            copies[round],
            synced[round]
        );
    }
    let objects = (ROUNDS * PER_ROUND) as f64;
    let requests_per_create = synced_cost.requests / objects;
    let super_cpu_ratio = synced_cost.super_cpu / direct_cost.super_cpu;
    let ferry_cpu_ratio = synced_cost.ferry_cpu / direct_cost.super_cpu;
    let copy_cpu_ratio = copy_cost.super_cpu / direct_cost.super_cpu;
    let super_cpu_floor = floor_cpu / direct_cost.super_cpu;
    let super_cpu_ratio_less_idle =
        synced_cost.super_cpu_less(idle_per_second) / direct_cost.super_cpu_less(idle_per_second);
    // What the throughput ratio can reach on this layout, where the super API server, its
    // etcd and ferry share one core: a synced create costs that core (super + ferry)
    // `super_cpu_ratio + ferry_cpu_ratio` of a direct create, and the direct rounds already
    // kept it `busy` (the median round's).
    let busy = median(&direct_busy);
    let core_ratio = super_cpu_ratio + ferry_cpu_ratio;
    let throughput_bound = 1.0 / (busy * core_ratio);
    println!("throughput bound: the super's core was {:.0}% busy in the direct rounds; a synced create costs it {core_ratio:.2}x a direct create (super + ferry), so synced over direct can reach {throughput_bound:.2} at most (at the CPU targets, {SUPER_CPU_TARGET} + {FERRY_CPU_TARGET}: {:.2})", busy * 100.0, 1.0 / (busy * (SUPER_CPU_TARGET + FERRY_CPU_TARGET)));
    let before = cost().await?;
    let super_ns = format!("team-a-{last_synced_ns}");
    update_all(a, &last_synced_ns, s, &super_ns).await?;
    let requests_per_update = cost().await?.since(before).requests / PER_ROUND as f64;
    println!(
        "super API server: {requests_per_create:.2} requests per synced create (direct: {:.2}; target 1.0), {requests_per_update:.2} per synced update (target 1.0)",
        direct_cost.requests / objects
    );
    let measured = if own_etcd {
        "kube-apiserver + etcd"
    } else {
        "kube-apiserver (etcd shared with the tenants, left out)"
    };
    println!("CPU: super {measured} {super_cpu_ratio:.2}x per synced create over per direct create, the floor (a direct create with one more watcher of the kind) {super_cpu_floor:.2}x (target <= floor + {SUPER_CPU_OVER_FLOOR}); ferry and its transform workers {ferry_cpu_ratio:.2}x of the super's per direct create (target <= {FERRY_CPU_TARGET}); per object: ferry {:.0} µs, the super {:.0} µs per direct create", synced_cost.ferry_cpu / objects * 1e6, direct_cost.super_cpu / objects * 1e6);
    println!("CPU: the super uses {:.3} CPU seconds a second idle; less that over each round, {super_cpu_ratio_less_idle:.2}x per synced create over per direct create (the direct rounds took {:.1} s, the synced {:.1} s)", idle_per_second, direct_cost.seconds, synced_cost.seconds);
    println!("CPU: super {measured} {copy_cpu_ratio:.2}x per direct create of ferry's exact copy over per direct create (the copy's own bytes); synced over exact copy {:.2}x (ferry's watch and the rest)", super_cpu_ratio / copy_cpu_ratio);
    after(&ferry, "the rounds and the updates");
    if only == "cost" {
        return Ok(());
    }
    let before = cost::Within::reconciles(&ferry).await?;
    let own_before = own_buckets(&ferry).await?;
    let series = direct_and_synced_latencies(s, a).await?;
    let own = own_time(&ferry, &own_before).await?;
    let (reconcile_8, reconcile_16) =
        reconciles_against_hops(&ferry, before, &series.synced.hop).await?;
    after(&ferry, "the latency series");
    let measured = fairness(&ferry, a, clusters.tenant("team-b"), s).await?;
    let (quiet_split_idle, quiet_split_loaded) = (&measured.idle, &measured.loaded);
    let (quiet_idle, quiet_loaded) = (quiet_split_idle.p99[0], quiet_split_loaded.p99[0]);
    let noisy_ratio = measured.noisy_with_quiet / measured.noisy_alone;
    // The noisy tenant's objects still on their way: the next measurements need an idle
    // engine, and memory is counted once every object is synced.
    settle(&ferry).await?;
    after(&ferry, "fairness");
    let fairness_ratio = quiet_loaded / quiet_idle;
    let (direct_idle, direct_loaded) = fairness_direct(s, SHARING).await?;
    let fairness_direct_ratio = direct_loaded / direct_idle;
    let (single_idle, single_loaded) = fairness_direct(s, 1).await?;
    let fairness_single_ratio = single_loaded / single_idle;
    let by_rate = super_rates(s).await?;
    println!("fairness: a quiet tenant's p99 create-to-super {quiet_loaded:.1} ms while another creates {NOISY_OBJECTS} as fast as it can, {quiet_idle:.1} ms on an idle engine: {fairness_ratio:.2}x (target <= 2)");
    println!(
        "fairness: {}",
        quiet_split(quiet_split_idle, quiet_split_loaded)
    );
    println!("fairness: {}", noisy_line(&measured));
    println!("fairness without ferry: a quiet client's p99 direct create {direct_loaded:.1} ms while another writes {NOISY_OBJECTS} with {SHARING} in flight, {direct_idle:.1} ms idle: {fairness_direct_ratio:.2}x (the super API server's own); with 1 in flight {single_loaded:.1} ms, {single_idle:.1} ms idle: {fairness_single_ratio:.2}x");
    // Every synced object is now in both of ferry's caches (tenant and super): settled after
    // fairness.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The fairness measurement syncs the noisy tenant's burst twice (alone and beside the
    // quiet one) and the quiet tenant's series three times (one to warm up).
    let synced_objects =
        (ROUNDS * PER_ROUND + LATENCY_OBJECTS + 2 * NOISY_OBJECTS + 3 * QUIET_OBJECTS) as f64;
    let rss_per_object = grown(&ferry) / synced_objects;
    let p = |ms: &Vec<f64>, q| percentile(ms.clone(), q);
    let (d50, d99) = (p(&series.direct, 0.5), p(&series.direct, 0.99));
    let (s50, s99) = (p(&series.synced.total, 0.5), p(&series.synced.total, 0.99));
    let (t50, t99) = (
        p(&series.synced.tenant_visible, 0.5),
        p(&series.synced.tenant_visible, 0.99),
    );
    let (h50, h99) = (p(&series.synced.hop, 0.5), p(&series.synced.hop, 0.99));
    // What the tenant's own create and watch add, before any syncer can act.
    let floor99 = p99_of_sum(&series.synced.tenant_visible, &series.direct) - d99;
    let ratio = median(&synced) / median(&direct);

    ferry.stop()?;
    let (ready_many, rss_per_tenant) = many.context("measured first")?;
    // The same fairness measurement under the other ways of pacing ferry's writes.
    let mut pacings = serde_json::Map::new();
    pacings.insert(pacing::PACINGS[0].name.into(), pacing::report(&measured));
    for pacing in &pacing::PACINGS[1..] {
        let m =
            pacing::fairness_paced((&ferry_binary(), &dir), &settings, &clusters, pacing).await?;
        print_paced(pacing, &m);
        pacings.insert(pacing.name.into(), pacing::report(&m));
    }
    let mut ferry = Ferry::start(&ferry_binary(), &dir, &settings, "ferry-2.log")?;
    ferry.ready().await?;

    // Restart with many synced, unchanged objects: writes and time to converge.
    let binary = ferry_binary();
    let restarted = restart::restart(
        ferry,
        (&dir, &settings, &binary),
        (a, s),
        restart::objects(),
    )
    .await?;

    let report = json!({
        "sync_throughput_ratio": ratio,
        "direct_creates_per_second": median(&direct),
        "synced_creates_per_second": median(&synced),
        "concurrency": CONCURRENCY,
        "objects_per_round": PER_ROUND,
        "rounds": ROUNDS,
        "latency_rate_per_second": RATE_PER_SECOND,
        "direct_latency_ms": {"p50": d50, "p99": d99},
        "synced_latency_ms": {"p50": s50, "p99": s99},
        "added_latency_ms": {"p50": s50 - d50, "p99": s99 - d99},
        "rss_growth_bytes_per_synced_object": rss_per_object,
        "super_requests_per_create": requests_per_create,
        "super_requests_per_direct_create": direct_cost.requests / objects,
        "super_requests_per_update": requests_per_update,
        "super_cpu_ratio": super_cpu_ratio,
        "super_cpu_floor": super_cpu_floor,
        "fairness_ratio": fairness_ratio,
        "fairness_noisy_throughput_ratio": noisy_ratio,
        "fairness_noisy_creates_per_second": {"alone": measured.noisy_alone, "beside_quiet": measured.noisy_with_quiet},
        "fairness_quiet_p99_ms": {"idle": quiet_idle, "loaded": quiet_loaded, "noisy_objects": NOISY_OBJECTS},
        "ferry_cpu_ratio": ferry_cpu_ratio,
        "restart": restarted,
        "exact_copy_super_cpu_ratio": copy_cpu_ratio,
        "direct_copy_creates_per_second": median(&copies),
        "direct_super_core_busy": busy,
        "sync_throughput_bound": throughput_bound,
        "fairness_direct_ratio": fairness_direct_ratio,
        "fairness_direct_quiet_p99_ms": {"idle": direct_idle, "loaded": direct_loaded, "in_flight": SHARING},
        "fairness_direct_single_ratio": fairness_single_ratio,
        "fairness_direct_single_quiet_p99_ms": {"idle": single_idle, "loaded": single_loaded, "in_flight": 1},
        "fairness_direct_by_rate": by_rate,
        "tenants_500": {"tenants": TENANTS, "ready_s": ready_many, "idle_rss_bytes_per_tenant": rss_per_tenant},
        "targets": {"tenants_500": "ready_s <= 30, idle_rss_bytes_per_tenant <= 1 MB", "fairness_ratio": "<= 2", "fairness_noisy_throughput_ratio": ">= 0.9", "super_requests_per_create": "1.0", "super_requests_per_update": "1.0", "super_cpu_ratio": format!("<= super_cpu_floor + {SUPER_CPU_OVER_FLOOR}"), "ferry_cpu_ratio": format!("<= {FERRY_CPU_TARGET}"), "ferry_own_ms.p99": "<= 2", "sync_throughput_ratio": ">= 0.95 x sync_throughput_bound", "added_latency_p99_ms": "<= 10", "rss_growth_bytes_per_synced_object": "<= 1024", "restart": "0 writes, list_ratio <= 1.5"},
    });
    // Where the synced latency goes.
    let split = [
        ("tenant_visible_latency_ms", json!({"p50": t50, "p99": t99})),
        (
            "tenant_to_super_latency_ms",
            json!({"p50": h50, "p99": h99}),
        ),
        ("added_latency_floor_ms", json!({"p99": floor99})),
        (
            "fairness_quiet_split",
            json!({
                "idle": quiet_json(quiet_split_idle),
                "loaded": quiet_json(quiet_split_loaded),
            }),
        ),
        ("super_idle_cpu_per_second", json!(idle_per_second)),
        ("ferry_own_ms", own),
        ("fairness_by_pacing", serde_json::Value::Object(pacings)),
        (
            "latency_tail_percent",
            json!({
                "hop_over_8ms": cost::share_over(&series.synced.hop, 8.0),
                "hop_over_16ms": cost::share_over(&series.synced.hop, 16.0),
                "reconcile_over_8ms": reconcile_8,
                "reconcile_over_16ms": reconcile_16,
            }),
        ),
        (
            "super_cpu_ratio_less_idle",
            json!(super_cpu_ratio_less_idle),
        ),
    ];
    let mut report = report;
    for (key, value) in split {
        report[key] = value;
    }
    println!("sync throughput ratio {ratio:.2} (synced {:.0}/s over direct {:.0}/s, {CONCURRENCY} in flight; target >= 0.95 of the bound {throughput_bound:.2})", median(&synced), median(&direct));
    println!("latency at {RATE_PER_SECOND}/s: direct p50 {d50:.1} ms p99 {d99:.1} ms; synced p50 {s50:.1} ms p99 {s99:.1} ms; added p99 {:.1} ms (target <= 10)", s99 - d99);
    println!("latency at {RATE_PER_SECOND}/s: tenant create to visible in the tenant p50 {t50:.1} ms p99 {t99:.1} ms, then to visible in the super p50 {h50:.1} ms p99 {h99:.1} ms; a syncer taking no time would add p99 {floor99:.1} ms");
    println!(
        "memory: ferry's RSS grew {rss_per_object:.0} bytes per synced object (target <= 1024)"
    );
    let out = ferry_testkit::root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("sync.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    Ok(())
}

/// `TENANTS` (500) tenants in one process, all on team-b's API server (each name still its
/// own super namespaces): seconds until ready and idle RSS per tenant over a one-tenant
/// ferry's. Their policy is `policies/examples` (4 kinds; `FERRY_BENCH_MANY_POLICY` another):
/// every watch is a connection of its own (the client speaks HTTP/1.1), and 500 tenants of
/// the whole library's 62 kinds would need 31,000 on one API server.
async fn tenants_many(dir: &Path, settings: &Settings) -> Result<(f64, f64)> {
    let policy = std::env::var_os("FERRY_BENCH_MANY_POLICY").map_or_else(
        || ferry_testkit::root().join("policies/examples"),
        Into::into,
    );
    let settings = &Settings {
        policy,
        ..settings.clone()
    };
    let one = Settings {
        tenants: vec!["t000".into()],
        clusters: [("t000".to_string(), "team-b".to_string())].into(),
        ..settings.clone()
    };
    let mut single = Ferry::start(&ferry_binary(), dir, &one, "ferry-1-tenant.log")?;
    single.ready().await?;
    settle(&single).await?;
    let rss_one = single.rss().unwrap_or(0) as f64;
    single.stop()?;
    let names: Vec<String> = (0..TENANTS).map(|i| format!("t{i:03}")).collect();
    let many = Settings {
        tenants: names.clone(),
        clusters: names
            .iter()
            .map(|n| (n.clone(), "team-b".to_string()))
            .collect(),
        ..settings.clone()
    };
    let started = Instant::now();
    let mut all = Ferry::start(&ferry_binary(), dir, &many, "ferry-many-tenants.log")?;
    all.ready().await?;
    let ready = started.elapsed().as_secs_f64();
    settle(&all).await?;
    let rss_per_tenant = (all.rss().unwrap_or(0) as f64 - rss_one) / (TENANTS - 1) as f64;
    all.stop()?;
    println!(
        "{TENANTS} tenants: ready in {ready:.1} s (target <= 30), idle RSS {:.2} MB per tenant (target <= 1)",
        rss_per_tenant / 1e6
    );
    Ok((ready, rss_per_tenant))
}

/// ferry's histogram of its own time per change (queued to first write sent).
const OWN: &str = "ferry_own_seconds";

/// ferry's histogram of its transforms' time (sandbox calls included).
const TRANSFORMS: &str = "ferry_transform_seconds";

/// [`OWN`] and [`TRANSFORMS`] now.
async fn own_buckets(ferry: &Ferry) -> Result<[cost::Buckets; 2]> {
    Ok([
        cost::Buckets::read(ferry, OWN).await?,
        cost::Buckets::read(ferry, TRANSFORMS).await?,
    ])
}

/// ferry's own time per change since `before` (p50, p99 in ms, and how many), printed with
/// the part its transforms took.
async fn own_time(ferry: &Ferry, before: &[cost::Buckets; 2]) -> Result<serde_json::Value> {
    let [own, transforms] = own_buckets(ferry).await?;
    let (own, transforms) = (own.since(&before[0]), transforms.since(&before[1]));
    let (p50, p99) = (1e3 * own.quantile(0.5), 1e3 * own.quantile(0.99));
    let (t50, t99) = (
        1e3 * transforms.quantile(0.5),
        1e3 * transforms.quantile(0.99),
    );
    println!(
        "ferry's own time per object at {RATE_PER_SECOND}/s (change queued to write sent, {OWN}): p50 {p50:.2} ms, p99 {p99:.2} ms over {:.0} writes (target p99 <= 2); its transforms p50 {t50:.2} ms, p99 {t99:.2} ms",
        own.count()
    );
    Ok(
        json!({"p50": p50, "p99": p99, "writes": own.count(), "transform_p50": t50, "transform_p99": t99}),
    )
}

/// The super API server alone beside a noisy client at steady rates ([`NOISY_RATES`]): a
/// quiet client's p99 ratio at each, printed, and as the report's `fairness_direct_by_rate`.
async fn super_rates(s: &kube::Client) -> Result<serde_json::Value> {
    let mut rates = Vec::new();
    for rate in NOISY_RATES {
        let (idle, loaded, reached) = fairness_direct_at(s, rate).await?;
        println!("fairness without ferry, a noisy client at {rate}/s (reached {reached:.0}/s): quiet p99 {loaded:.1} ms loaded, {idle:.1} ms idle: {:.2}x", loaded / idle);
        rates.push(json!({"rate": rate, "reached": reached, "ratio": loaded / idle, "quiet_p99_ms": {"idle": idle, "loaded": loaded}}));
    }
    Ok(json!(rates))
}

/// The quiet tenant's series idle and loaded ([`Quiet`]), as a line.
fn quiet_split(idle: &Quiet, loaded: &Quiet) -> String {
    let parts = |q: &Quiet| {
        let [total, tenant, hop] = q.p99;
        format!(
            "{total:.1} ms (answered to visible in the tenant {tenant:.1}, then to the super {hop:.1}; the super answered {:.1}% of ferry's {:.0} requests in over 32 ms, {:.1}% in over 128 ms)",
            q.super_over[0], q.super_requests, q.super_over[1]
        )
    };
    format!(
        "the quiet tenant's p99 loaded {}, idle {}",
        parts(loaded),
        parts(idle)
    )
}

/// One pacing's fairness figures, printed.
fn print_paced(pacing: &pacing::Pacing, m: &Fairness) {
    println!(
        "fairness, {}: {:.2}x; {}; {}",
        pacing.name,
        m.loaded.p99[0] / m.idle.p99[0],
        quiet_split(&m.idle, &m.loaded),
        noisy_line(m)
    );
}

/// The noisy tenant's synced rate alone and beside the quiet one, as a line.
fn noisy_line(m: &Fairness) -> String {
    format!(
        "the noisy tenant's {NOISY_OBJECTS} creates synced at {:.0}/s beside the quiet tenant, {:.0}/s alone: {:.2} (target >= 0.9)",
        m.noisy_with_quiet,
        m.noisy_alone,
        m.noisy_with_quiet / m.noisy_alone
    )
}

/// [`Quiet`]'s parts in the report.
fn quiet_json(q: &Quiet) -> serde_json::Value {
    json!({
        "tenant_visible": q.p99[1],
        "tenant_to_super": q.p99[2],
        "super_requests": q.super_requests,
        "super_requests_over_32ms_percent": q.super_over[0],
        "super_requests_over_128ms_percent": q.super_over[1],
    })
}

/// The ferry measured: this build's, or `FERRY_BENCH_FERRY` (another build, for a comparison
/// on the same control planes).
fn ferry_binary() -> std::path::PathBuf {
    std::env::var_os("FERRY_BENCH_FERRY")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ferry").into())
}

/// Prints how many of the synced series' hops and of ferry's writes in it (queued to answered,
/// from ferry's own histogram) took over 8 and 16 ms: where the hop's tail is. Returns the
/// writes' percentages.
async fn reconciles_against_hops(
    ferry: &Ferry,
    before: cost::Within,
    hops: &[f64],
) -> Result<(f64, f64)> {
    let (over, writes) = cost::Within::reconciles(ferry).await?.since(before).over();
    let (over_8, over_16) = (over[0], over[1]);
    println!(
        "latency tail: {:.1}% of hops over 8 ms, {:.1}% over 16 ms; of ferry's {writes:.0} writes (queued to answered) {over_8:.1}% over 8 ms, {over_16:.1}% over 16 ms",
        cost::share_over(hops, 8.0),
        cost::share_over(hops, 16.0)
    );
    Ok((over_8, over_16))
}
