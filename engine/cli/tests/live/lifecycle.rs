//! ferry's own life: stopped and restarted (deletes made meanwhile, no writes when nothing
//! changed, a dependency kept for an object refused when ferry starts again), two replicas
//! under leader election, a tenant added to a running ferry.

use super::*;

pub async fn deletes_while_down(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "down").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let mut copies = Vec::new();
    for name in ["kept", "dropped", "recreated"] {
        create(&a, database(&ns, name, db_spec("small"))).await?;
        copies.push(
            DATABASE
                .at(&s, &super_ns, name)
                .until("super copy", |_| true)
                .await?,
        );
    }
    ferry.stop()?;
    DATABASE.at(&a, &ns, "dropped").delete().await?;
    // Deleted and created again under the same name: a new tenant uid.
    DATABASE.at(&a, &ns, "recreated").delete().await?;
    let again = create(&a, database(&ns, "recreated", db_spec("large"))).await?;
    let ferry = env.start(&env.settings(&["team-a"]), "ferry-2.log").await?;
    DATABASE
        .at(&s, &super_ns, "dropped")
        .until_gone("delete made while ferry was down")
        .await?;
    let kept = DATABASE
        .at(&s, &super_ns, "kept")
        .get()
        .await?
        .context("the other copy stays")?;
    ensure!(
        kept["metadata"]["uid"] == copies[0]["metadata"]["uid"],
        "an unchanged copy is kept as it is"
    );
    let replaced = DATABASE
        .at(&s, &super_ns, "recreated")
        .until("copy of the new object", |o| {
            o["metadata"]["annotations"]["ferry.dev/tenant-uid"] == again["metadata"]["uid"]
        })
        .await?;
    ensure!(
        replaced["metadata"]["uid"] != copies[2]["metadata"]["uid"],
        "the old copy was replaced, not updated"
    );
    ensure!(replaced["spec"]["resources"]["cpu"] == "8", "{replaced:#}");
    env.finish(ferry).await
}
live!(deletes_while_down: admin, rbac);

pub async fn restart_without_writes(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "restart").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "hunter2"}})).await?;
    let mut spec = db_spec("medium");
    spec["credentialsRef"] = json!({"name": "creds"});
    for name in ["one", "two", "three"] {
        create(&a, database(&ns, name, spec.clone())).await?;
    }
    for name in ["one", "two", "three"] {
        DATABASE
            .at(&s, &super_ns, name)
            .until("super copy", |_| true)
            .await?;
        ready_flows_up(
            &DATABASE.at(&s, &super_ns, name),
            &DATABASE.at(&a, &ns, name),
        )
        .await?;
    }
    Kind::new("v1", "Secret")
        .at(&s, &super_ns, "creds")
        .until("Secret", |_| true)
        .await?;
    // Everything converged before the stop (leftovers of earlier tests included).
    drained(&ferry).await?;
    ferry.stop()?;
    let versions = |list: Vec<Option<Value>>| -> Vec<String> {
        list.into_iter()
            .map(|o| {
                o.map(|o| {
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default()
            })
            .collect()
    };
    let snapshot = || async {
        let mut all = Vec::new();
        for name in ["one", "two", "three"] {
            all.push(DATABASE.at(&s, &super_ns, name).get().await?);
            all.push(DATABASE.at(&a, &ns, name).get().await?);
        }
        all.push(
            Kind::new("v1", "Secret")
                .at(&s, &super_ns, "creds")
                .get()
                .await?,
        );
        anyhow::Ok(versions(all))
    };
    let before = snapshot().await?;
    let ferry = env.start(&env.settings(&["team-a"]), "ferry-2.log").await?;
    // Converged: every key looked at, the queue empty.
    eventually("copies synced", WAIT, || async {
        let synced = ferry
            .metric(
                "ferry_synced_objects",
                &[("tenant", "team-a"), ("kind", "Database.example.com")],
            )
            .await?;
        Ok((synced >= 3.0).then_some(()))
    })
    .await?;
    drained(&ferry).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = ferry.metric("ferry_writes_total", &[]).await?;
    ensure!(
        writes == 0.0,
        "a restart with nothing changed wrote {writes} times:\n{}",
        ferry.log()
    );
    ensure!(
        snapshot().await? == before,
        "resourceVersions changed across the restart"
    );
    env.finish(ferry).await
}
live!(restart_without_writes: admin, rbac);

/// An object with a copy, changed while ferry was down so that its transform refuses it when
/// ferry starts again: its copy stays, and so does the dependency it references, although
/// nothing else references it.
pub async fn refused_at_restart_keeps_dependencies(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "refused-restart").await?;
    let script = "def to_super(obj, ctx):\n    if obj[\"spec\"].get(\"version\") == \"13\":\n        fail(\"spec.version: 13 is end of life\")\n    return obj\n";
    let secrets =
        "  - apiVersion: v1\n    kind: Secret\n    direction: toSuper\n    dependency: true\n";
    let mut settings = env.settings(&["team-a"]);
    settings.policy = database_policy(&env.dir, "eol", script, secrets)?;
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "hunter2"}})).await?;
    let mut spec = db_spec("small");
    spec["version"] = json!("16");
    spec["credentialsRef"] = json!({"name": "creds"});
    create(&a, database(&ns, "solo", spec)).await?;
    DATABASE
        .at(&s, &super_ns, "solo")
        .until("super copy", |_| true)
        .await?;
    let secret = Kind::new("v1", "Secret")
        .at(&s, &super_ns, "creds")
        .until("Secret copy", |_| true)
        .await?;
    drained(&ferry).await?;
    ferry.stop()?;
    DATABASE
        .at(&a, &ns, "solo")
        .merge(json!({"spec": {"version": "13"}}))
        .await?;
    let ferry = env.start(&settings, "ferry-2.log").await?;
    let note = until_event(&a, &ns, "solo", "TransformFailed").await?;
    ensure!(note.contains("end of life"), "{note}");
    drained(&ferry).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = Kind::new("v1", "Secret")
        .at(&s, &super_ns, "creds")
        .get()
        .await?;
    ensure!(
        kept.is_some_and(|k| k["metadata"]["uid"] == secret["metadata"]["uid"]),
        "the Secret the refused object's copy references was collected:\n{}",
        ferry.log()
    );
    ensure!(
        DATABASE.at(&s, &super_ns, "solo").get().await?.is_some(),
        "the refused object's copy stays"
    );
    env.finish(ferry).await
}
live!(refused_at_restart_keeps_dependencies: admin);

pub async fn leader_election(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "leader").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.leader_election = true;
    let first = env.start(&settings, "ferry-1.log").await?;
    eventually("first replica leads", WAIT, || async {
        Ok((first.metric("ferry_leader", &[]).await? == 1.0).then_some(()))
    })
    .await?;
    let second_dir = env.dir.join("second");
    std::fs::create_dir_all(&second_dir)?;
    let mut second = Ferry::start(ferry_bin(), &second_dir, &settings, "ferry-2.log")?;
    second.ready().await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let (ns, super_ns, _) = env.orders("synced by the leader").await?;
    ensure!(
        second.metric("ferry_leader", &[]).await? == 0.0,
        "two leaders"
    );
    ensure!(
        second.metric("ferry_writes_total", &[]).await? == 0.0,
        "the follower wrote:\n{}",
        second.log()
    );
    eventually("the leader counts its write", WAIT, || async {
        Ok((first.metric("ferry_writes_total", &[]).await? > 0.0).then_some(()))
    })
    .await?;
    // The leader leaves (releasing the lease); the follower takes over.
    first.stop()?;
    eventually("second replica leads", Duration::from_secs(30), || async {
        Ok((second.metric("ferry_leader", &[]).await? == 1.0).then_some(()))
    })
    .await?;
    create(&a, database(&ns, "later", db_spec("small"))).await?;
    DATABASE
        .at(&s, &super_ns, "later")
        .until("synced by the new leader", |_| true)
        .await?;
    // A write is counted once its answer is read, which may be after the copy is visible.
    eventually("the new leader counts its write", WAIT, || async {
        Ok((second.metric("ferry_writes_total", &[]).await? > 0.0).then_some(()))
    })
    .await?;
    env.finish(second).await
}
live!(leader_election: admin, rbac);

pub async fn tenant_hot_added(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "hotadd").await?;
    let settings = env.settings(&["team-a"]);
    let ferry = env.start(&settings, "ferry.log").await?;
    let (b, s) = (env.tenant("team-b"), env.super_());
    let ns = env.namespace("team-b", "shop").await?;
    create(&b, database(&ns, "orders", db_spec("small"))).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let super_ns = format!("team-b-{ns}");
    ensure!(
        DATABASE.at(&s, &super_ns, "orders").get().await?.is_none(),
        "team-b synced before it was configured"
    );
    let both = Settings {
        tenants: vec!["team-a".into(), "team-b".into()],
        ..settings.clone()
    };
    write_config(&env.dir, &both, ferry.address.port())?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until("hot-added tenant synced", |_| true)
        .await?;
    // Removed again: its objects stay, new ones are not synced.
    write_config(&env.dir, &settings, ferry.address.port())?;
    eventually("tenant removed", WAIT, || async {
        Ok(ferry.log().contains("tenant removed").then_some(()))
    })
    .await?;
    create(&b, database(&ns, "after", db_spec("small"))).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        DATABASE.at(&s, &super_ns, "after").get().await?.is_none(),
        "a removed tenant is still synced"
    );
    ensure!(
        DATABASE.at(&s, &super_ns, "orders").get().await?.is_some(),
        "a removed tenant's copies stay"
    );
    // Leave nothing behind for later tests: team-b again, so ferry collects the namespace.
    write_config(&env.dir, &both, ferry.address.port())?;
    DATABASE
        .at(&s, &super_ns, "after")
        .until("team-b back", |_| true)
        .await?;
    env.finish(ferry).await
}
live!(tenant_hot_added: admin, rbac);
