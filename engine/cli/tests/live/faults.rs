//! Faults ferry survives (DESIGN.md): killed mid-burst, API servers and etcd restarted under
//! it, a watch that expires, a hung tenant, an admin deleting what ferry made. Each ends with
//! the same check: every tenant object has a current copy and no copy of a deleted one remains.

use std::collections::BTreeMap;
use std::time::Instant;

use ferry_testkit::faults;
use futures::{StreamExt, TryStreamExt};

use super::*;

/// Parallel requests of a burst.
const IN_FLIGHT: usize = 12;

/// One change of a tenant's Databases.
#[derive(Clone, Debug)]
pub(super) enum Change {
    /// Create `name` at generation `gen`.
    Create(String, u32),
    /// Set `name` to generation `gen`.
    Update(String, u32),
    /// Delete `name`.
    Delete(String),
}

/// A Database whose generation is in a label (copied down as it is).
fn generation(ns: &str, name: &str, gen: u32) -> Value {
    let mut db = database(ns, name, db_spec("small"));
    db["metadata"]["labels"]["gen"] = json!(gen.to_string());
    db
}

/// Makes `changes` in namespace `ns` of `client`, `IN_FLIGHT` at a time. A request that fails
/// (its API server is being restarted) is retried until it takes effect.
pub(super) async fn burst(client: &Client, ns: &str, changes: Vec<Change>) -> Result<()> {
    futures::stream::iter(changes)
        .map(|change| async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let outcome = match &change {
                    Change::Create(name, gen) => {
                        create(client, generation(ns, name, *gen)).await.map(drop)
                    }
                    Change::Update(name, gen) => DATABASE
                        .at(client, ns, name)
                        .merge(json!({"metadata": {"labels": {"gen": gen.to_string()}}}))
                        .await
                        .map(drop),
                    Change::Delete(name) => DATABASE.at(client, ns, name).delete().await,
                };
                match outcome {
                    Ok(()) => return anyhow::Ok(()),
                    // Done already by an attempt whose answer was lost.
                    Err(e) if status(&e) == Some(409) || status(&e) == Some(404) => return Ok(()),
                    Err(e) if Instant::now() > deadline => return Err(e),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// [`burst`] on a task of its own.
pub(super) fn in_background(
    client: &Client,
    ns: &str,
    changes: Vec<Change>,
) -> tokio::task::JoinHandle<Result<()>> {
    let (client, ns) = (client.clone(), ns.to_string());
    tokio::spawn(async move { burst(&client, &ns, changes).await })
}

fn status(e: &anyhow::Error) -> Option<u16> {
    match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

pub(super) fn creates(prefix: &str, range: std::ops::Range<u32>, gen: u32) -> Vec<Change> {
    range
        .map(|i| Change::Create(format!("{prefix}{i}"), gen))
        .collect()
}

/// Name → `gen` label of every Database in `ns` not being deleted.
async fn generations(client: &Client, ns: &str) -> Result<BTreeMap<String, String>> {
    Ok(DATABASE
        .list(client, ns)
        .await?
        .into_iter()
        .filter(|o| o["metadata"].get("deletionTimestamp").is_none())
        .map(|o| {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            let gen = o["metadata"]["labels"]["gen"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (name, gen)
        })
        .collect())
}

/// How many super writes bring the copies in `super_ns` in line with the tenant's `ns`: one
/// per missing, stale or orphaned copy.
async fn writes_needed(a: &Client, ns: &str, s: &Client, super_ns: &str) -> Result<usize> {
    let (tenant, copies) = (generations(a, ns).await?, generations(s, super_ns).await?);
    let stale = tenant.iter().filter(|(n, g)| copies.get(*n) != Some(g));
    let orphans = copies.keys().filter(|n| !tenant.contains_key(*n));
    Ok(stale.count() + orphans.count())
}

/// Waits until every Database of the tenant's `ns` has a current copy in `super_ns` and no
/// other copy is there.
pub(super) async fn converged(
    a: &Client,
    ns: &str,
    s: &Client,
    super_ns: &str,
    what: &str,
) -> Result<()> {
    eventually(what, Duration::from_secs(120), || async {
        let tenant = generations(a, ns).await?;
        Ok((generations(s, super_ns).await? == tenant).then_some(tenant.len()))
    })
    .await
    .map(drop)
}

/// `kill -9` in the middle of a burst, more changes while ferry is down: the restarted ferry
/// converges with one write per object that needs one.
pub async fn killed_mid_burst(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "kill9").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "burst").await?;
    let super_ns = format!("team-a-{ns}");
    let first = in_background(&a, &ns, creates("db", 0..150, 1));
    // Some copies written, most still to come.
    eventually("a third of the burst synced", WAIT, || async {
        Ok((DATABASE.list(&s, &super_ns).await?.len() >= 50).then_some(()))
    })
    .await?;
    let mut changes: Vec<Change> = (0..40)
        .map(|i| Change::Update(format!("db{i}"), 2))
        .collect();
    changes.extend((40..70).map(|i| Change::Delete(format!("db{i}"))));
    let second = in_background(&a, &ns, changes);
    tokio::time::sleep(Duration::from_millis(300)).await;
    faults::signal(ferry.pid().context("ferry runs")?, "KILL")?;
    drop(ferry);
    first.await??;
    second.await??;
    // While ferry is down.
    let mut changes = creates("late", 0..30, 1);
    changes.extend((70..90).map(|i| Change::Update(format!("db{i}"), 3)));
    changes.extend((90..110).map(|i| Change::Delete(format!("db{i}"))));
    burst(&a, &ns, changes).await?;
    let needed = writes_needed(&a, &ns, &s, &super_ns).await?;
    let ferry = env.start(&env.settings(&["team-a"]), "ferry-2.log").await?;
    converged(&a, &ns, &s, &super_ns, "converged after kill -9").await?;
    drained(&ferry).await?;
    let writes = ferry
        .metric("ferry_writes_total", &[("cluster", "super")])
        .await?;
    ensure!(
        writes <= needed as f64,
        "the restarted ferry wrote {writes} times into the super cluster for {needed} objects that needed a write:\n{}",
        ferry.log()
    );
    // Every write's answer is timed, by cluster.
    let answered = ferry
        .metric("ferry_request_seconds_count", &[("cluster", "super")])
        .await?;
    ensure!(
        answered >= writes && answered > 0.0,
        "ferry_request_seconds timed {answered} answers from the super cluster for {writes} writes"
    );
    env.finish(ferry).await
}
live!(killed_mid_burst: admin);

/// The super API server, etcd and the tenant's API server each restarted in the middle of a
/// burst of creates, updates and deletes.
pub async fn control_planes_restarted(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "restarts").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "burst").await?;
    let super_ns = format!("team-a-{ns}");
    burst(&a, &ns, creates("db", 0..20, 1)).await?;
    converged(&a, &ns, &s, &super_ns, "first objects synced").await?;
    let rounds: [(&str, Vec<Change>); 3] = [
        ("super", creates("db", 20..80, 1)),
        (
            "etcd",
            (0..40)
                .map(|i| Change::Update(format!("db{i}"), 2))
                .collect(),
        ),
        (
            "team-a",
            (40..70)
                .map(|i| Change::Delete(format!("db{i}")))
                .chain(creates("late", 0..20, 1))
                .collect(),
        ),
    ];
    for (process, changes) in rounds {
        let changing = in_background(&a, &ns, changes);
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::task::spawn_blocking(move || faults::restart(process)).await??;
        changing.await??;
        converged(
            &a,
            &ns,
            &s,
            &super_ns,
            &format!("converged after {process} restarted"),
        )
        .await?;
    }
    env.finish(ferry).await
}
live!(control_planes_restarted: admin);

/// A watch that resumes after its resourceVersion expired (ferry hung while the tenant's API
/// server restarted and objects changed) gets `410 Gone`, relists, and misses no delete.
pub async fn watch_expired(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "expired").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "expiry").await?;
    let super_ns = format!("team-a-{ns}");
    burst(&a, &ns, creates("db", 0..20, 1)).await?;
    converged(&a, &ns, &s, &super_ns, "synced before the fault").await?;
    let pid = ferry.pid().context("ferry runs")?;
    faults::signal(pid, "STOP")?;
    let mut changes: Vec<Change> = (0..10).map(|i| Change::Delete(format!("db{i}"))).collect();
    changes.extend((10..15).map(|i| Change::Update(format!("db{i}"), 2)));
    changes.extend(creates("new", 0..5, 1));
    let outcome = async {
        burst(&a, &ns, changes).await?;
        tokio::task::spawn_blocking(|| faults::restart("team-a")).await?
    }
    .await;
    faults::signal(pid, "CONT")?;
    outcome?;
    converged(&a, &ns, &s, &super_ns, "converged after the watch expired").await?;
    ensure!(
        ferry.log().contains("relisting"),
        "no watch expired, so the relist was not exercised:\n{}",
        ferry.log()
    );
    env.finish(ferry).await
}
live!(watch_expired: admin);

/// A hung tenant API server (SIGSTOP) holding work of its own: the other tenant's creates
/// reach the super cluster as fast as before; the hung tenant resumes after SIGCONT.
pub async fn tenant_hung(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "hung").await?;
    let ferry = env.ferry(&["team-a", "team-b"]).await?;
    let (a, b, s) = (env.tenant("team-a"), env.tenant("team-b"), env.super_());
    let (ns_a, ns_b) = (
        env.namespace("team-a", "fast").await?,
        env.namespace("team-b", "hung").await?,
    );
    let (super_a, super_b) = (format!("team-a-{ns_a}"), format!("team-b-{ns_b}"));
    burst(&b, &ns_b, creates("db", 0..30, 1)).await?;
    converged(&b, &ns_b, &s, &super_b, "team-b synced").await?;
    faults::pause("team-b")?;
    let outcome = async {
        // Status for every team-b object: work that must write into the hung API server.
        for i in 0..30 {
            DATABASE
                .at(&s, &super_b, &format!("db{i}"))
                .merge_status(json!({"status": {"phase": "Ready"}}))
                .await?;
        }
        let mut slowest = Duration::ZERO;
        for i in 0..10 {
            let name = format!("a{i}");
            let started = Instant::now();
            create(&a, generation(&ns_a, &name, 1)).await?;
            DATABASE
                .at(&s, &super_a, &name)
                .until("team-a copy while team-b hangs", |_| true)
                .await?;
            slowest = slowest.max(started.elapsed());
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        ensure!(
            slowest < Duration::from_secs(5),
            "with team-b hung, a team-a create took {slowest:?} to reach the super cluster"
        );
        anyhow::Ok(())
    }
    .await;
    faults::resume("team-b")?;
    outcome?;
    for i in 0..30 {
        DATABASE
            .at(&b, &ns_b, &format!("db{i}"))
            .until("team-b status after SIGCONT", |o| {
                o["status"]["phase"] == "Ready"
            })
            .await?;
    }
    env.finish(ferry).await
}
live!(tenant_hung: admin);

/// An admin deletes a super namespace (the namespace controller empties and removes it):
/// ferry makes it and the copies in it again.
pub async fn super_namespace_deleted(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "nsdel").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    burst(&a, &ns, creates("db", 0..5, 1)).await?;
    converged(&a, &ns, &s, &super_ns, "synced").await?;
    let namespace = Kind::new("v1", "Namespace").at(&s, "", &super_ns);
    let before = namespace.get().await?.context("super namespace")?;
    namespace.delete().await?;
    namespace
        .until("the super namespace made again", |n| {
            n["metadata"]["uid"] != before["metadata"]["uid"]
                && n["metadata"].get("deletionTimestamp").is_none()
        })
        .await?;
    converged(&a, &ns, &s, &super_ns, "copies made again").await?;
    env.finish(ferry).await
}
live!(super_namespace_deleted: admin);
