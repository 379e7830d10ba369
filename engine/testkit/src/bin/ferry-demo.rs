//! The live part of `cargo xtask demo`: with the local control planes up (super, team-a,
//! team-b), installs the sample CRDs, starts `ferry run` with `policies/`, creates sample
//! objects in the tenants and the super cluster, and shows what crosses, how fast, and what
//! ferry refuses, ending with a summary table.
//!
//! Usage: `ferry-demo --ferry target/debug/ferry [--keep]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferry_testkit::live::{api, eventually, Ferry, Identity, Settings};
use ferry_testkit::{install_crds, root, Clusters};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

#[path = "ferry-demo/produced.rs"]
mod produced;
#[path = "ferry-demo/report.rs"]
mod report;
#[path = "ferry-demo/supers.rs"]
mod supers;

use report::{done, item, ms, progress, step, summary, Row};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "shop";

/// Server-side applies `object` as `manager` (so that re-running the demo is harmless).
async fn apply(client: &Client, manager: &str, object: Value) -> Result<Value> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (version, kind) = (s(&object["apiVersion"]), s(&object["kind"]));
    let (ns, name) = (
        s(&object["metadata"]["namespace"]),
        s(&object["metadata"]["name"]),
    );
    let o: DynamicObject = serde_json::from_value(object)?;
    let out = api(client, &version, &kind, &ns)
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&o),
        )
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    Ok(serde_json::to_value(out)?)
}

async fn get(
    client: &Client,
    version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Option<Value>> {
    Ok(api(client, version, kind, ns)
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or_default()))
}

/// Waits until the object exists and `test` holds; returns it and how long it took.
async fn appears(
    client: &Client,
    version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    since: Instant,
    test: impl Fn(&Value) -> bool,
) -> Result<(Value, Duration)> {
    let what = format!("{kind} {ns}/{name}");
    let object = eventually(&what, WAIT, || async {
        Ok(get(client, version, kind, ns, name)
            .await?
            .filter(|o| test(o)))
    })
    .await?;
    Ok((object, since.elapsed()))
}

/// The clusters the demo writes to.
struct Cast {
    a: Client,
    b: Client,
    s: Client,
    gpu: Client,
}

const TOTAL: usize = 9;

/// Step 1: the sample CRDs in every cluster.
async fn crds(c: &Cast) -> Result<()> {
    let Cast { a, b, s, gpu } = c;
    step(
        1,
        TOTAL,
        "Sample CRDs (policies/**/schemas/, ferry's annotations stripped) in every cluster",
    );
    progress("installing");
    let mut crds = 0;
    for client in [&s, &gpu, &a, &b] {
        crds = install_crds(client).await?.len();
    }
    done(&format!("{crds} CRDs in super, gpu, team-a and team-b"));
    Ok(())
}

/// Step 2: `ferry run` with the sample policy; the running ferry and its pid file.
async fn start_ferry(ferry_bin: &std::path::Path) -> Result<(Ferry, PathBuf)> {
    step(2, TOTAL, "ferry run with the sample policy (policies/)");
    let dir = root().join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let pid_file = dir.join("ferry.pid");
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        // A ferry left running by an earlier `--keep`.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", pid.trim()])
            .status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::fs::remove_file(&pid_file);
    }
    let mut settings = Settings::new(&["team-a", "team-b"], Identity::Admin);
    settings.patrol = "10s".into();
    supers::two_supers(&mut settings);
    progress("starting");
    let started = Instant::now();
    let mut ferry = Ferry::start(ferry_bin, &dir, &settings, "ferry.log")?;
    ferry.ready().await?;
    done(&format!(
        "ready in {} (config {}, log {}, metrics http://{}/metrics)",
        ms(started.elapsed()),
        rel(&ferry.config),
        rel(&dir.join("ferry.log")),
        ferry.address
    ));
    Ok((ferry, pid_file))
}

/// Step 3: tenants create objects; ferry copies them into the super cluster.
async fn tenants_create(c: &Cast, rows: &mut Vec<Row>) -> Result<()> {
    let Cast { a, b, .. } = c;
    step(
        3,
        TOTAL,
        "Tenants create objects; ferry copies them into the super cluster",
    );
    for client in [&a, &b] {
        apply(
            client,
            "demo",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .await?;
    }
    let t0 = Instant::now();
    apply(a, "demo", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "orders-admin", "namespace": NS}, "stringData": {"password": "s3cret"}})).await?;
    apply(a, "demo", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unused", "namespace": NS}, "stringData": {"token": "private"}})).await?;
    apply(a, "demo", json!({"apiVersion": "example.com/v1", "kind": "DatabaseClass", "metadata": {"name": "gold"}, "spec": {"engine": "postgres"}})).await?;
    apply(a, "demo", json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": NS, "labels": {"app": "shop"}},
        "spec": {"engine": "postgres", "version": "16", "tier": "medium", "className": "gold", "credentialsRef": {"name": "orders-admin", "key": "password"},
                 "allowedNamespaces": [NS], "replicaSelector": {"matchLabels": {"app": "shop"}}, "notes": "tenant-private: never leaves team-a"}})).await?;
    apply(b, "demo", json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": NS}, "spec": {"engine": "mysql", "tier": "small"}})).await?;
    println!("    team-a: Database {NS}/orders (tier medium, class gold, credentials orders-admin), DatabaseClass gold, Secrets orders-admin and unused");
    println!(
        "    team-b: Database {NS}/orders (tier small) — the same namespace and name as team-a's"
    );
    tenants_copied(c, t0, rows).await
}

/// Step 3, continued: what reached the super cluster since `t0`, and what did not.
async fn tenants_copied(c: &Cast, t0: Instant, rows: &mut Vec<Row>) -> Result<()> {
    let s = &c.s;
    let (db, d) = appears(
        s,
        "example.com/v1",
        "Database",
        "team-a-shop",
        "orders",
        t0,
        |_| true,
    )
    .await?;
    item(&format!(
        "team-a Database {NS}/orders → super team-a-shop/orders in {}: resources {} (db-tier transform), className {}, notes {}",
        ms(d),
        db["spec"]["resources"],
        db["spec"]["className"],
        if db["spec"].get("notes").is_some() { "copied (!)" } else { "dropped (x-ferry-drop)" }
    ));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Database {NS}/orders"),
        super_object: "team-a-shop/orders".into(),
        outcome: "synced".into(),
        latency: Some(d),
    });
    let (_, d) = appears(s, "v1", "Secret", "team-a-shop", "orders-admin", t0, |_| {
        true
    })
    .await?;
    item(&format!("team-a Secret {NS}/orders-admin → super team-a-shop/orders-admin ({}): followed the Database's credentialsRef", ms(d)));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Secret {NS}/orders-admin"),
        super_object: "team-a-shop/orders-admin".into(),
        outcome: "dependency".into(),
        latency: Some(d),
    });
    let (_, d) = appears(
        s,
        "example.com/v1",
        "DatabaseClass",
        "",
        "team-a-gold",
        t0,
        |_| true,
    )
    .await?;
    item(&format!(
        "team-a DatabaseClass gold → super team-a-gold ({}): cluster-scoped, so renamed",
        ms(d)
    ));
    rows.push(Row {
        tenant: "team-a",
        object: "DatabaseClass gold".into(),
        super_object: "team-a-gold".into(),
        outcome: "synced".into(),
        latency: Some(d),
    });
    let (_, d) = appears(
        s,
        "example.com/v1",
        "Database",
        "team-b-shop",
        "orders",
        t0,
        |_| true,
    )
    .await?;
    item(&format!(
        "team-b Database {NS}/orders → super team-b-shop/orders ({}): kept apart from team-a's",
        ms(d)
    ));
    rows.push(Row {
        tenant: "team-b",
        object: format!("Database {NS}/orders"),
        super_object: "team-b-shop/orders".into(),
        outcome: "synced".into(),
        latency: Some(d),
    });
    let unused = get(s, "v1", "Secret", "team-a-shop", "unused").await?;
    item(&format!(
        "team-a Secret {NS}/unused: {}",
        if unused.is_none() {
            "stays in the tenant (nothing references it)"
        } else {
            "copied (!)"
        }
    ));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Secret {NS}/unused"),
        super_object: "-".into(),
        outcome: "not referenced".into(),
        latency: None,
    });
    Ok(())
}

/// Step 4: a public StorageClass reaches every tenant.
async fn public_copies(c: &Cast, rows: &mut Vec<Row>) -> Result<()> {
    let Cast { a, b, s, .. } = c;
    step(
        4,
        TOTAL,
        "The platform publishes a StorageClass; every tenant gets a read-only copy",
    );
    let t0 = Instant::now();
    apply(s, "platform", json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast-ssd", "labels": {"tenancy.x-k8s.io/super.public": "true"}}, "provisioner": "example.com/ssd"})).await?;
    for (tenant, client) in [("team-a", &a), ("team-b", &b)] {
        let (_, d) = appears(
            client,
            "storage.k8s.io/v1",
            "StorageClass",
            "",
            "fast-ssd",
            t0,
            |_| true,
        )
        .await?;
        item(&format!(
            "super StorageClass fast-ssd → {tenant} ({}), labelled ferry.dev/from-super=true",
            ms(d)
        ));
        rows.push(Row {
            tenant,
            object: "StorageClass fast-ssd".into(),
            super_object: "fast-ssd (public)".into(),
            outcome: "copied up".into(),
            latency: Some(d),
        });
    }
    Ok(())
}

/// Step 5: the operator in the super cluster reports status.
async fn status_up(c: &Cast, rows: &mut Vec<Row>) -> Result<()> {
    let Cast { a, s, .. } = c;
    step(
        5,
        TOTAL,
        "The database operator in the super cluster reports status",
    );
    let t0 = Instant::now();
    let status = json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": "team-a-shop"},
        "status": {"phase": "Ready", "primaryNamespace": "team-a-shop", "conditions": [{"type": "Ready", "status": "True", "message": "primary team-a-shop/orders-0 is up"}]}});
    let o: DynamicObject = serde_json::from_value(status)?;
    api(s, "example.com/v1", "Database", "team-a-shop")
        .patch_status(
            "orders",
            &PatchParams::apply("db-operator").force(),
            &Patch::Apply(&o),
        )
        .await?;
    apply(s, "db-operator", json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": "team-a-shop"}, "spec": {"engine": "postgres", "endpoint": "orders.team-a-shop.svc:5432"}})).await?;
    println!("    super: status.phase=Ready, primaryNamespace=team-a-shop, message \"primary team-a-shop/orders-0 is up\", spec.endpoint set");
    let (up, d) = appears(a, "example.com/v1", "Database", NS, "orders", t0, |o| {
        o["status"]["phase"] == "Ready" && o["spec"].get("endpoint").is_some()
    })
    .await?;
    item(&format!(
        "team-a sees it in {}: primaryNamespace={}, message {}, spec.endpoint={}",
        ms(d),
        up["status"]["primaryNamespace"],
        up["status"]["conditions"][0]["message"],
        up["spec"]["endpoint"]
    ));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Database {NS}/orders status"),
        super_object: "team-a-shop/orders".into(),
        outcome: "status up".into(),
        latency: Some(d),
    });
    Ok(())
}

/// Step 6: a super object ferry does not own is never touched.
async fn safety(c: &Cast, rows: &mut Vec<Row>) -> Result<()> {
    let Cast { b, s, .. } = c;
    step(
        6,
        TOTAL,
        "Safety: a super object ferry does not own is never touched",
    );
    apply(s, "someone-else", json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "legacy", "namespace": "team-b-shop"}, "spec": {"engine": "mysql"}})).await?;
    apply(b, "demo", json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "legacy", "namespace": NS}, "spec": {"engine": "postgres", "tier": "small"}})).await?;
    println!("    super: Database team-b-shop/legacy created by someone else; team-b creates Database {NS}/legacy");
    let note = eventually("Event SyncConflict", WAIT, || async {
        let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(b.clone(), NS);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find_map(|e| {
                (e.regarding.as_ref()?.name.as_deref()? == "legacy"
                    && e.reason.as_deref() == Some("SyncConflict"))
                .then(|| e.note.unwrap_or_default())
            }))
    })
    .await?;
    let legacy = get(s, "example.com/v1", "Database", "team-b-shop", "legacy")
        .await?
        .unwrap_or_default();
    item(&format!(
        "left untouched (engine still {}); team-b got Event SyncConflict: {note}",
        legacy["spec"]["engine"]
    ));
    rows.push(Row {
        tenant: "team-b",
        object: format!("Database {NS}/legacy"),
        super_object: "team-b-shop/legacy (not ferry's)".into(),
        outcome: "SyncConflict".into(),
        latency: None,
    });
    Ok(())
}

/// Step 7: an edit of ferry's copy in the super cluster is reverted.
async fn drift(c: &Cast, rows: &mut Vec<Row>) -> Result<()> {
    let Cast { s, .. } = c;
    step(
        7,
        TOTAL,
        "Drift: someone edits ferry's copy in the super cluster",
    );
    let t0 = Instant::now();
    api(s, "example.com/v1", "Database", "team-a-shop")
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tier": "large"}})),
        )
        .await?;
    println!("    super: team-a-shop/orders spec.tier medium → large");
    let (_, d) = appears(
        s,
        "example.com/v1",
        "Database",
        "team-a-shop",
        "orders",
        t0,
        |o| o["spec"]["tier"] == "medium",
    )
    .await?;
    item(&format!("reverted to the tenant's medium in {}", ms(d)));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Database {NS}/orders drift"),
        super_object: "team-a-shop/orders".into(),
        outcome: "repaired".into(),
        latency: Some(d),
    });
    Ok(())
}

/// The summary, then ferry stopped or (`keep`) left running with what to explore.
async fn finish(ferry: Ferry, rows: &[Row], keep: bool, pid_file: &std::path::Path) -> Result<()> {
    summary(rows);
    let writes = ferry.metric("ferry_writes_total", &[]).await?;
    let super_writes = ferry
        .metric("ferry_writes_total", &[("cluster", "super")])
        .await?;
    let refusals = ferry.metric("ferry_refusals_total", &[]).await?;
    println!("  ferry wrote {writes} times ({super_writes} in the super cluster) and refused {refusals} object(s)");

    if keep {
        let address = ferry.address;
        let pid = ferry.detach();
        std::fs::write(pid_file, pid.to_string())?;
        let k = |c: &str| format!("kubectl --kubeconfig target/clusters/{c}.kubeconfig");
        println!("\nferry keeps running (pid {pid}, log target/demo/ferry.log). Explore:");
        println!(
            "  {} get databases,certificates,secrets -n {NS}",
            k("team-a")
        );
        println!(
            "  {} get ns,databases,secrets -A -l ferry.dev/tenant",
            k("super")
        );
        println!(
            "  {} get databases -n team-a-shop orders -o yaml",
            k("super")
        );
        println!("  {} get storageclasses --show-labels", k("team-b"));
        println!("  {} get databases -A   # the GPU super cluster", k("gpu"));
        println!("  {} get events -n {NS}", k("team-b"));
        println!("  curl -s http://{address}/metrics | grep '^ferry_'");
        println!(
            "  {} create ns web   # then create objects in it and watch them cross",
            k("team-a")
        );
        println!("Stop everything with: cargo xtask cluster down");
    } else {
        progress("stopping ferry");
        ferry.stop()?;
        done("ferry stopped");
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut ferry_bin = None;
    let mut keep = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ferry" => ferry_bin = args.next().map(PathBuf::from),
            "--keep" => keep = true,
            other => {
                bail!("unexpected argument {other:?} (usage: ferry-demo --ferry PATH [--keep])")
            }
        }
    }
    let ferry_bin = ferry_bin.context("--ferry PATH is required")?;
    let clusters = Clusters::connect().await?;
    let c = Cast {
        a: clusters.tenant("team-a").clone(),
        b: clusters.tenant("team-b").clone(),
        s: clusters.super_cluster.clone(),
        gpu: clusters.super_named("gpu").clone(),
    };
    crds(&c).await?;
    let (ferry, pid_file) = start_ferry(&ferry_bin).await?;
    let mut rows = Vec::new();
    tenants_create(&c, &mut rows).await?;
    public_copies(&c, &mut rows).await?;
    status_up(&c, &mut rows).await?;
    safety(&c, &mut rows).await?;
    drift(&c, &mut rows).await?;
    step(
        8,
        TOTAL,
        "A second super cluster: a GPU namespace runs in `gpu`, relabelled it moves",
    );
    supers::gpu_namespace(&c.a, &c.s, &c.gpu, &mut rows).await?;

    step(
        9,
        TOTAL,
        "Produced: cert-manager writes a Certificate's Secret in the super cluster",
    );
    produced::certificate_secret(&c.a, &c.s, &mut rows).await?;

    finish(ferry, &rows, keep, &pid_file).await
}

fn rel(path: &std::path::Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}
