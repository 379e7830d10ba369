//! Sharding across replicas (DESIGN.md "Sharding across replicas"): three replicas over eight
//! tenants (four tenant names on each tenant API server) own exactly what `ferry shard plan`
//! says and write only their own tenants' copies (by the super API server's audit log); a
//! SIGTERM hands over at once, a fourth replica takes exactly the plan's difference and
//! writes nothing for unchanged objects; an owner killed mid-burst loses nothing, and one
//! paused until its tenants moved writes nothing for them once resumed.

use std::collections::BTreeMap;
use std::time::Instant;

use ferry_testkit::audit;
use ferry_testkit::faults;
use k8s_openapi::api::coordination::v1::Lease;

use super::faults::{burst, converged, creates, in_background, Change};
use super::*;

/// The tests' leaseDuration: short, so that expiries fit a test.
const LEASE_S: u64 = 6;

/// Replicas of one fleet: each in a directory of its own, its Leases in `namespace`.
struct Fleet {
    tenants: Vec<String>,
    namespace: String,
    prefix: String,
    replicas: BTreeMap<String, Ferry>,
}

impl Fleet {
    /// Eight tenants (the first four on team-a's API server, the others on team-b's).
    fn new() -> Self {
        let prefix = unique("s");
        Self {
            tenants: (1..=8).map(|i| format!("{prefix}{i}")).collect(),
            namespace: unique("ferry-shard"),
            replicas: BTreeMap::new(),
            prefix,
        }
    }

    fn identity(&self, r: usize) -> String {
        format!("{}-r{r}", self.prefix)
    }

    fn settings(&self, env: &Env, identity: &str) -> Settings {
        let names: Vec<&str> = self.tenants.iter().map(String::as_str).collect();
        let mut s = env.settings(&names);
        s.policy = ferry_testkit::root().join("policies/examples/databases.yaml");
        for (i, t) in self.tenants.iter().enumerate() {
            let cluster = if i < 4 { "team-a" } else { "team-b" };
            s.clusters.insert(t.clone(), cluster.into());
        }
        s.spec.insert("leaderElection".into(), Value::Null);
        s.spec.insert(
            "sharding".into(),
            json!({"enabled": true, "namespace": self.namespace, "leaseDuration": format!("{LEASE_S}s")}),
        );
        s.args = vec!["--identity".into(), identity.into()];
        s
    }

    /// Starts replicas `rs` at once; returns when each is ready.
    async fn start(&mut self, env: &Env, rs: &[usize]) -> Result<()> {
        for r in rs {
            let id = self.identity(*r);
            let dir = env.dir.join(&id);
            std::fs::create_dir_all(&dir)?;
            let ferry = Ferry::start(ferry_bin(), &dir, &self.settings(env, &id), "ferry.log")?;
            self.replicas.insert(id, ferry);
        }
        for r in rs {
            self.replicas
                .get_mut(&self.identity(*r))
                .context("replica")?
                .ready()
                .await?;
        }
        Ok(())
    }

    /// `ferry shard plan` for `members`: tenant → owner.
    fn plan(&self, members: &[String]) -> Result<BTreeMap<String, String>> {
        let config = &self.replicas.values().next().context("a replica")?.config;
        ferry_testkit::shard::plan(ferry_bin(), config, members)
    }

    /// Tenant → holder of its Lease (absent: no Lease yet).
    async fn holders(&self, s: &Client) -> Result<BTreeMap<String, String>> {
        let mut all = ferry_testkit::shard::holders(s, &self.namespace).await?;
        all.retain(|t, _| self.tenants.contains(t));
        Ok(all)
    }

    /// Waits until the tenant Leases' holders are `plan`; how long it took.
    async fn until_held(
        &self,
        s: &Client,
        plan: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Duration> {
        let started = Instant::now();
        eventually(what, Duration::from_secs(90), || async {
            Ok((self.holders(s).await? == *plan).then_some(()))
        })
        .await
        .with_context(|| self.logs())?;
        Ok(started.elapsed())
    }

    /// Sums metric `name` over the replicas.
    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
        let mut sum = 0.0;
        for ferry in self.replicas.values() {
            sum += ferry.metric(name, labels).await?;
        }
        Ok(sum)
    }

    /// Waits until every team-a tenant's copies of namespace `ns` match the tenant's
    /// Databases (`a`, the super `s`): nothing lost, nothing orphaned.
    async fn converged(&self, a: &Client, s: &Client, ns: &str, when: &str) -> Result<()> {
        for t in self.on_team_a() {
            let what = format!("tenant {t} converged {when}");
            converged(a, ns, s, &format!("{t}-{ns}"), &what).await?;
        }
        Ok(())
    }

    /// Checks that the replicas counted one move for `reason` per tenant `plan` gave `from`.
    async fn moves_counted(
        &self,
        reason: &str,
        plan: &BTreeMap<String, String>,
        from: &str,
    ) -> Result<()> {
        let counted = self
            .metric("ferry_shard_moves_total", &[("reason", reason)])
            .await?;
        let expected = plan.values().filter(|o| *o == from).count() as f64;
        ensure!(
            counted == expected,
            "{counted} moves counted `{reason}`; {from} held {expected} tenants"
        );
        Ok(())
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|(id, f)| format!("--- {id}\n{}", f.log()))
            .collect()
    }

    /// The team-a tenants (whose namespaces are team-a's).
    fn on_team_a(&self) -> &[String] {
        &self.tenants[..4]
    }

    /// Stops every replica and deletes the super namespaces of the fleet's tenants.
    async fn finish(mut self, env: Env) -> Result<()> {
        let s = env.super_();
        let last = self.replicas.pop_last().map(|(_, f)| f);
        for (_, ferry) in std::mem::take(&mut self.replicas) {
            ferry.stop()?;
        }
        if let Some(last) = last {
            env.finish(last).await?;
        }
        let namespaces = kube::Api::<Namespace>::all(s);
        for ns in namespaces.list(&ListParams::default()).await?.items {
            let name = ns.metadata.name.unwrap_or_default();
            if self
                .tenants
                .iter()
                .any(|t| name.starts_with(&format!("{t}-")))
                || name == self.namespace
            {
                let _ = namespaces.delete(&name, &DeleteParams::default()).await;
            }
        }
        Ok(())
    }
}

/// Whether the audited write `w` was made by replica `identity`.
fn by(w: &audit::Write, identity: &str) -> bool {
    w.user_agent.ends_with(&format!("({identity})"))
}

/// The writes into super namespaces of tenant `t` (and the namespaces themselves).
fn of_tenant<'a>(writes: &'a [audit::Write], t: &str) -> impl Iterator<Item = &'a audit::Write> {
    let prefix = format!("{t}-");
    writes.iter().filter(move |w| {
        w.namespace.starts_with(&prefix)
            || (w.resource == "namespaces" && w.name.starts_with(&prefix))
    })
}

/// Three replicas own the plan, write only their own tenants, hand over on SIGTERM at once;
/// a fourth takes exactly the plan's difference and writes nothing for unchanged objects.
pub async fn shards_follow_the_plan(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "shards").await?;
    let s = env.super_();
    let log = audit::Log::of("super")?;
    let mut fleet = Fleet::new();
    fleet.start(&env, &[0, 1, 2]).await?;
    let three: Vec<String> = (0..3).map(|r| fleet.identity(r)).collect();
    let plan = fleet.plan(&three)?;
    fleet
        .until_held(&s, &plan, "the Leases name the plan's owners")
        .await?;
    // A second process with a running replica's identity refuses to start.
    let dup_dir = env.dir.join("duplicate");
    std::fs::create_dir_all(&dup_dir)?;
    let settings = fleet.settings(&env, &three[1]);
    let mut dup = Ferry::start(ferry_bin(), &dup_dir, &settings, "ferry.log")?;
    match dup.ready().await {
        Err(e) if e.to_string().contains("is in use") => {}
        other => anyhow::bail!(
            "a second replica named {} started: {other:?}\n{}",
            three[1],
            dup.log()
        ),
    }
    drop(dup);
    // Started at once: no tenant moved.
    let moved = fleet.metric("ferry_shard_moves_total", &[]).await?;
    ensure!(
        moved == 0.0,
        "{moved} tenants moved while three replicas started at once:\n{}",
        fleet.logs()
    );
    for id in &three {
        let owned = fleet.replicas[id]
            .metric("ferry_tenants_owned", &[])
            .await?;
        let planned = plan.values().filter(|o| *o == id).count() as f64;
        ensure!(
            owned == planned,
            "{id} owns {owned} tenants; the plan gives it {planned}"
        );
    }
    // A Database in team-a: a copy for each of the four tenants on team-a's API server.
    let ns = env.namespace("team-a", "shop").await?;
    create(
        &env.tenant("team-a"),
        database(&ns, "orders", db_spec("small")),
    )
    .await?;
    for t in fleet.on_team_a() {
        DATABASE
            .at(&s, &format!("{t}-{ns}"), "orders")
            .until("the copy", |_| true)
            .await?;
    }
    let writes = log.writes()?;
    for t in fleet.on_team_a() {
        let owner = &plan[t];
        let theirs: Vec<_> = of_tenant(&writes, t).collect();
        ensure!(!theirs.is_empty(), "no audited write for tenant {t}");
        if let Some(w) = theirs.iter().find(|w| !by(w, owner)) {
            anyhow::bail!("{w:?} for tenant {t}, whose owner is {owner}");
        }
    }
    // SIGTERM: the others take r0's tenants without waiting for its membership to expire.
    let r0 = fleet.identity(0);
    fleet.replicas.remove(&r0).context("r0")?.stop()?;
    let stopped = Instant::now();
    let two = &three[1..];
    let plan2 = fleet.plan(two)?;
    fleet
        .until_held(&s, &plan2, "r0's tenants taken by the others")
        .await?;
    let took = stopped.elapsed();
    ensure!(
        took < Duration::from_secs(LEASE_S),
        "r0's tenants moved {took:?} after it stopped: no faster than its membership expiring ({LEASE_S}s)"
    );
    fleet.moves_counted("release", &plan, &r0).await?;
    // A fourth replica: exactly the tenants it now wins move, only to it, and nothing is
    // written for objects that did not change.
    let before = log.writes()?.len();
    fleet.start(&env, &[3]).await?;
    let r3 = fleet.identity(3);
    let mut members = two.to_vec();
    members.push(r3.clone());
    let plan3 = fleet.plan(&members)?;
    for (t, owner) in &plan3 {
        ensure!(
            owner == &plan2[t] || *owner == r3,
            "{t} moved from {} to {owner}, not to the new replica",
            plan2[t]
        );
    }
    fleet
        .until_held(&s, &plan3, "the new replica took its share")
        .await?;
    let r3_owned = plan3.values().filter(|o| **o == r3).count();
    eventually("the new replica synced its tenants", WAIT, || async {
        let (_, body) = fleet.replicas[&r3].get("/readyz").await?;
        Ok((body.matches(": syncing").count() == r3_owned).then_some(()))
    })
    .await?;
    drained(&fleet.replicas[&r3]).await?;
    let writes = log.writes()?;
    let handover: Vec<_> = writes[before..]
        .iter()
        .filter(|w| by(w, &r3) && !w.resource.starts_with("leases"))
        .collect();
    ensure!(
        handover.is_empty(),
        "the new owner wrote for unchanged objects: {handover:?}"
    );
    // Its tenants still sync: a change reaches every copy.
    DATABASE
        .at(&env.tenant("team-a"), &ns, "orders")
        .merge(json!({"spec": {"tier": "large"}}))
        .await?;
    for t in fleet.on_team_a() {
        DATABASE
            .at(&s, &format!("{t}-{ns}"), "orders")
            .until("the change", |o| o["spec"]["tier"] == "large")
            .await?;
    }
    fleet.finish(env).await
}
live!(shards_follow_the_plan: admin);

/// An owner killed mid-burst: its tenants converge on the others, nothing lost or orphaned;
/// an owner paused until its tenants moved writes nothing for them once resumed, until it
/// takes them back.
pub async fn shard_owner_faults(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "shard-faults").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let mut fleet = Fleet::new();
    fleet.start(&env, &[0, 1, 2]).await?;
    let three: Vec<String> = (0..3).map(|r| fleet.identity(r)).collect();
    let plan = fleet.plan(&three)?;
    fleet.until_held(&s, &plan, "the plan held").await?;
    let ns = env.namespace("team-a", "burst").await?;
    let first_tenant = fleet.on_team_a()[0].clone();
    let victim = plan[&first_tenant].clone();
    let running = in_background(&a, &ns, creates("db", 0..60, 1));
    eventually("part of the burst synced", WAIT, || async {
        Ok((DATABASE
            .list(&s, &format!("{first_tenant}-{ns}"))
            .await?
            .len()
            >= 15)
            .then_some(()))
    })
    .await?;
    let mut changes: Vec<Change> = (0..20)
        .map(|i| Change::Update(format!("db{i}"), 2))
        .collect();
    changes.extend((20..30).map(|i| Change::Delete(format!("db{i}"))));
    let second = in_background(&a, &ns, changes);
    let ferry = fleet.replicas.remove(&victim).context("victim")?;
    faults::signal(ferry.pid().context("runs")?, "KILL")?;
    drop(ferry);
    running.await??;
    second.await??;
    fleet
        .converged(&a, &s, &ns, "after its owner was killed")
        .await?;
    // Every tenant of the victim taken (those on team-b too), then counted.
    let live: Vec<String> = three.iter().filter(|m| **m != victim).cloned().collect();
    let after_kill = fleet.plan(&live)?;
    fleet
        .until_held(&s, &after_kill, "the killed replica's tenants taken")
        .await?;
    fleet.moves_counted("failover", &plan, &victim).await?;
    // Pause an owner until its tenants move, change its tenants' objects, resume it.
    let paused = live[0].clone();
    let plan2 = after_kill;
    let pid = fleet.replicas[&paused].pid().context("runs")?;
    faults::signal(pid, "STOP")?;
    let alone = fleet.plan(&live[1..])?;
    fleet
        .until_held(&s, &alone, "the paused replica's tenants moved")
        .await?;
    let log = audit::Log::of("super")?;
    burst(&a, &ns, creates("late", 0..10, 1)).await?;
    faults::signal(pid, "CONT")?;
    fleet
        .until_held(&s, &plan2, "the resumed replica took its tenants back")
        .await?;
    fleet.converged(&a, &s, &ns, "after the pause").await?;
    let leases = kube::Api::<Lease>::namespaced(s.clone(), &fleet.namespace);
    for t in fleet.on_team_a() {
        let lease = leases.get(&format!("ferry-tenant-{t}")).await?;
        let acquired = lease.spec.and_then(|s| s.acquire_time).map(|t| t.0);
        for w in of_tenant(&log.writes()?, t).filter(|w| by(w, &paused)) {
            ensure!(
                plan2[t] == paused && w.time.is_some() && w.time >= acquired,
                "the resumed replica wrote {w:?} for {t} before taking it back (at {acquired:?})"
            );
        }
    }
    fleet.finish(env).await
}
live!(shard_owner_faults: admin);
