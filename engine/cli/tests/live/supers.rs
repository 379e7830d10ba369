//! Several super clusters (`super`, labelled `region: east`, and `west`, labelled `region:
//! west, gpu: "true"`): placement by namespace labels, cluster-scoped copies in every super
//! hosting one of the tenant's namespaces, public objects from both (the first in config order
//! wins a name), a restart that moves and writes nothing, migration on a relabel and on a
//! cordon with every copy on the new super before any goes from the old one, a hung super
//! that does not hold up the other, and a migration away from a hung super.

use super::*;

const SC: &str = "storage.k8s.io/v1";

/// Two supers: GPU namespaces on `west`, `zone: east` ones on `super`, others on either
/// (the one holding fewer namespaces).
fn two_supers(env: &Env) -> Settings {
    let mut settings = env.settings(&["team-a"]);
    let entry = |name: &str, labels: Value| json!({"name": name, "kubeconfig": name, "labels": labels, "cordoned": false});
    settings.supers = vec![
        entry("super", json!({"region": "east"})),
        entry("west", json!({"region": "west", "gpu": "true"})),
    ];
    settings.placement = vec![
        json!({"namespaceSelector": {"matchLabels": {"accelerator": "gpu"}}, "supers": {"matchLabels": {"gpu": "true"}}}),
        json!({"namespaceSelector": {"matchLabels": {"zone": "east"}}, "supers": {"matchLabels": {"region": "east"}}}),
    ];
    settings
}

/// A fresh namespace of team-a with `labels`, deleted at the end of the test.
async fn labelled(env: &mut Env, prefix: &str, labels: Value) -> Result<String> {
    let a = env.tenant("team-a");
    let ns = unique(prefix);
    create(&a, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})).await?;
    env.cleanup.push((a, ns.clone()));
    Ok(ns)
}

/// Where the tenant namespace `ns` of team-a says it runs.
async fn runs_in(a: &Client, ns: &str) -> Result<String> {
    let namespace = Kind::new("v1", "Namespace")
        .at(a, "", ns)
        .until("ferry.dev/super on the namespace", |n| {
            n["metadata"]["annotations"]["ferry.dev/super"].is_string()
        })
        .await?;
    Ok(namespace["metadata"]["annotations"]["ferry.dev/super"]
        .as_str()
        .unwrap_or("")
        .to_string())
}

/// Moves namespace `ns`'s Databases `names` from super `from` to super `to` by `change`, and
/// checks by polling both supers that no copy left `from` before all existed on `to`.
async fn moves(
    (from, to): (&Client, &Client),
    super_ns: &str,
    names: &[&str],
    change: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    change.await?;
    let started = std::time::Instant::now();
    loop {
        let mut on_to = 0;
        let mut on_from = 0;
        for name in names {
            on_to += DATABASE.at(to, super_ns, name).get().await?.is_some() as usize;
            on_from += DATABASE.at(from, super_ns, name).get().await?.is_some() as usize;
        }
        ensure!(
            on_from == names.len() || on_to == names.len(),
            "a copy left the old super before every copy was on the new one ({on_to} of {} there, {on_from} left)",
            names.len()
        );
        if on_from == 0 && on_to == names.len() {
            return Ok(());
        }
        ensure!(
            started.elapsed() < WAIT,
            "the namespace did not move in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn several_supers(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "supers").await?;
    let (a, east) = (env.tenant("team-a"), env.super_());
    let west = env.clusters.super_named("west").clone();
    let supers = |name: &str| {
        if name == "west" {
            west.clone()
        } else {
            east.clone()
        }
    };
    let settings = two_supers(&env);
    let ferry = env.start(&settings, "ferry.log").await?;
    // Placement by namespace labels, and by the number of namespaces for the rest.
    let gpu = labelled(&mut env, "gpu", json!({"accelerator": "gpu"})).await?;
    let cpu = labelled(&mut env, "cpu", json!({"zone": "east"})).await?;
    let flex = labelled(&mut env, "flex", json!({})).await?;
    let super_ns = |ns: &str| format!("team-a-{ns}");
    for (ns, name) in [
        (&gpu, "train"),
        (&gpu, "infer"),
        (&cpu, "orders"),
        (&flex, "cache"),
    ] {
        create(&a, database(ns, name, db_spec("small"))).await?;
    }
    for name in ["train", "infer"] {
        DATABASE
            .at(&west, &super_ns(&gpu), name)
            .until("GPU copy on west", |_| true)
            .await?;
    }
    DATABASE
        .at(&east, &super_ns(&cpu), "orders")
        .until("zone east copy on super", |_| true)
        .await?;
    ensure!(runs_in(&a, &gpu).await? == "west");
    ensure!(runs_in(&a, &cpu).await? == "super");
    // A namespace with nothing synced says where it will run.
    let empty = labelled(&mut env, "empty", json!({"accelerator": "gpu"})).await?;
    ensure!(runs_in(&a, &empty).await? == "west");
    let flex_in = runs_in(&a, &flex).await?;
    let flex_other = if flex_in == "west" { "super" } else { "west" };
    DATABASE
        .at(&supers(&flex_in), &super_ns(&flex), "cache")
        .until("copy where the namespace runs", |_| true)
        .await?;
    ensure!(DATABASE
        .at(&east, &super_ns(&gpu), "train")
        .get()
        .await?
        .is_none());
    ensure!(DATABASE
        .at(&west, &super_ns(&cpu), "orders")
        .get()
        .await?
        .is_none());
    ensure!(DATABASE
        .at(&supers(flex_other), &super_ns(&flex), "cache")
        .get()
        .await?
        .is_none());
    // A tenant's edit of the annotation is reverted.
    Kind::new("v1", "Namespace")
        .at(&a, "", &cpu)
        .merge(json!({"metadata": {"annotations": {"ferry.dev/super": "west"}}}))
        .await?;
    Kind::new("v1", "Namespace")
        .at(&a, "", &cpu)
        .until("annotation reverted", |n| {
            n["metadata"]["annotations"]["ferry.dev/super"] == "super"
        })
        .await?;
    ensure!(DATABASE
        .at(&west, &super_ns(&cpu), "orders")
        .get()
        .await?
        .is_none());

    // A cluster-scoped object goes to both supers, which host namespaces of team-a.
    let class = unique("gold");
    let super_class = format!("team-a-{class}");
    create(&a, json!({"apiVersion": DB, "kind": "DatabaseClass", "metadata": {"name": class}, "spec": {"engine": "postgres"}})).await?;
    for s in [&east, &west] {
        Kind::new(DB, "DatabaseClass")
            .at(s, "", &super_class)
            .until("cluster-scoped copy in each super", |_| true)
            .await?;
    }

    // Public objects come from both supers; the first super in config order wins a name.
    let (only_west, both) = (unique("west-fast"), unique("shared"));
    let public = |name: &str, provisioner: &str| json!({"apiVersion": SC, "kind": "StorageClass", "metadata": {"name": name, "labels": {"tenancy.x-k8s.io/super.public": "true"}}, "provisioner": provisioner});
    create(&west, public(&only_west, "example.com/west")).await?;
    create(&east, public(&both, "example.com/east")).await?;
    Kind::new(SC, "StorageClass")
        .at(&a, "", &only_west)
        .until("west's public object in the tenant", |_| true)
        .await?;
    Kind::new(SC, "StorageClass")
        .at(&a, "", &both)
        .until("super's public object in the tenant", |_| true)
        .await?;
    // The same name in west: the first super in config order stays the source.
    create(&west, public(&both, "example.com/west")).await?;
    eventually("conflict counted", WAIT, || async {
        let n = ferry.metric("ferry_public_conflicts_total", &[]).await?;
        Ok((n >= 1.0).then_some(()))
    })
    .await?;
    let copy = Kind::new(SC, "StorageClass")
        .at(&a, "", &both)
        .get()
        .await?;
    ensure!(
        copy.is_some_and(|c| c["provisioner"] == "example.com/east"),
        "the first super's object is the copy"
    );

    // A restart moves nothing and writes nothing.
    drained(&ferry).await?;
    ferry.stop()?;
    let ferry = env.start(&settings, "ferry-2.log").await?;
    drained(&ferry).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = ferry.metric("ferry_writes_total", &[]).await?;
    ensure!(
        writes == 0.0,
        "a restart wrote {writes} times:\n{}",
        ferry.log()
    );

    // Relabelled, the GPU namespace moves to super: every copy there before any goes.
    let namespace = Kind::new("v1", "Namespace").at(&a, "", &gpu);
    let relabel = async {
        namespace
            .merge(json!({"metadata": {"labels": {"accelerator": null, "zone": "east"}}}))
            .await
            .map(|_| ())
    };
    moves(
        (&west, &east),
        &super_ns(&gpu),
        &["train", "infer"],
        relabel,
    )
    .await?;
    eventually("annotation switched", WAIT, || async {
        Ok((runs_in(&a, &gpu).await? == "super").then_some(()))
    })
    .await?;
    until_event(&a, "default", &gpu, "Migrated").await?;
    ensure!(ferry.metric("ferry_migrations_total", &[]).await? >= 1.0);
    Kind::new("v1", "Namespace")
        .at(&west, "", &super_ns(&gpu))
        .until_gone("the old super namespace")
        .await?;

    // Cordoning the super the unlabelled namespace runs in (an edit of the file, live) moves
    // it to the other.
    let mut cordoned = settings.clone();
    for entry in &mut cordoned.supers {
        entry["cordoned"] = json!(entry["name"] == flex_in.as_str());
    }
    let cordon = async {
        write_config(&env.dir, &cordoned, ferry.address.port())?;
        Ok(())
    };
    moves(
        (&supers(&flex_in), &supers(flex_other)),
        &super_ns(&flex),
        &["cache"],
        cordon,
    )
    .await?;
    eventually("annotation switched after the cordon", WAIT, || async {
        Ok((runs_in(&a, &flex).await? == flex_other).then_some(()))
    })
    .await?;
    write_config(&env.dir, &settings, ferry.address.port())?;

    // A hung super does not hold up the other.
    ferry_testkit::faults::pause("west")?;
    let hung = async {
        create(&a, database(&cpu, "while-west-hangs", db_spec("small"))).await?;
        eventually(
            "copy on super while west hangs",
            Duration::from_secs(10),
            || async {
                Ok(DATABASE
                    .at(&east, &super_ns(&cpu), "while-west-hangs")
                    .get()
                    .await?
                    .map(|_| ()))
            },
        )
        .await
    };
    let result = hung.await;
    ferry_testkit::faults::resume("west")?;
    result?;

    // A namespace moves away from a hung super: its new copies are made meanwhile, the old
    // ones go once the super answers again.
    let edge = labelled(&mut env, "edge", json!({"accelerator": "gpu"})).await?;
    create(&a, database(&edge, "sensor", db_spec("small"))).await?;
    DATABASE
        .at(&west, &super_ns(&edge), "sensor")
        .until("copy on west", |_| true)
        .await?;
    ferry_testkit::faults::pause("west")?;
    let away = async {
        Kind::new("v1", "Namespace")
            .at(&a, "", &edge)
            .merge(json!({"metadata": {"labels": {"accelerator": null, "zone": "east"}}}))
            .await?;
        DATABASE
            .at(&east, &super_ns(&edge), "sensor")
            .until("new copy on super while west hangs", |_| true)
            .await?;
        eventually("annotation switched while west hangs", WAIT, || async {
            Ok((runs_in(&a, &edge).await? == "super").then_some(()))
        })
        .await
    };
    let result = away.await;
    ferry_testkit::faults::resume("west")?;
    result?;
    DATABASE
        .at(&west, &super_ns(&edge), "sensor")
        .until_gone("the old copy, once west answers")
        .await?;
    for name in [&only_west, &both] {
        Kind::new(SC, "StorageClass")
            .at(&west, "", name)
            .delete()
            .await?;
    }
    Kind::new(SC, "StorageClass")
        .at(&east, "", &both)
        .delete()
        .await?;
    Kind::new(DB, "DatabaseClass")
        .at(&a, "", &class)
        .delete()
        .await?;
    env.finish(ferry).await
}
live!(several_supers: admin);
