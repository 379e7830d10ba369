//! End-to-end tests of `ferry run` on the local control planes (super + team-a + team-b),
//! each in fresh namespaces. Every scenario runs twice: as the harness's admin and as a user
//! bound only to the ClusterRoles `ferry rbac --policy policies` prints. Scenarios run one at a
//! time (each starts its own ferry, and two ferrys on the same tenants would share the work).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use ferry_testkit::live::{
    api, eventually, install_rbac, scratch, write_config, Ferry, Identity, Settings,
};
use ferry_testkit::{fresh_namespace, install_crds, unique, Clusters};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::{Mutex, MutexGuard, OnceCell};

const WAIT: Duration = Duration::from_secs(60);

static SERIAL: Mutex<()> = Mutex::const_new(());
static CRDS: OnceCell<()> = OnceCell::const_new();
static RBAC: OnceCell<()> = OnceCell::const_new();

fn ferry_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ferry"))
}

struct Env {
    _serial: MutexGuard<'static, ()>,
    clusters: Clusters,
    dir: PathBuf,
    identity: Identity,
    cleanup: Vec<(Client, String)>,
}

impl Env {
    async fn new(identity: Identity, name: &str) -> Result<Self> {
        let serial = SERIAL.lock().await;
        let clusters = Clusters::connect().await?;
        CRDS.get_or_try_init(|| async {
            for client in std::iter::once(&clusters.super_cluster).chain(clusters.tenants.values())
            {
                install_crds(client).await?;
            }
            anyhow::Ok(())
        })
        .await?;
        if identity == Identity::Rbac {
            RBAC.get_or_try_init(|| async {
                install_rbac(
                    ferry_bin(),
                    &ferry_testkit::root().join("policies"),
                    &clusters,
                )
                .await
            })
            .await?;
        }
        Ok(Self {
            _serial: serial,
            clusters,
            dir: scratch(name)?,
            identity,
            cleanup: Vec::new(),
        })
    }

    fn settings(&self, tenants: &[&str]) -> Settings {
        Settings::new(tenants, self.identity)
    }

    async fn ferry(&self, tenants: &[&str]) -> Result<Ferry> {
        self.start(&self.settings(tenants), "ferry.log").await
    }

    async fn start(&self, settings: &Settings, log: &str) -> Result<Ferry> {
        let mut ferry = Ferry::start(ferry_bin(), &self.dir, settings, log)?;
        ferry.ready().await?;
        Ok(ferry)
    }

    fn tenant(&self, name: &str) -> Client {
        self.clusters.tenant(name).clone()
    }

    fn super_(&self) -> Client {
        self.clusters.super_cluster.clone()
    }

    /// A fresh tenant namespace, deleted at the end of the test.
    async fn namespace(&mut self, tenant: &str, prefix: &str) -> Result<String> {
        let client = self.tenant(tenant);
        let ns = fresh_namespace(&client, prefix).await?;
        self.cleanup.push((client, ns.clone()));
        Ok(ns)
    }

    /// Deletes the test's tenant namespaces and waits until ferry removed their super
    /// namespaces (so that no leftovers reach later tests).
    async fn finish(self, ferry: Ferry) -> Result<()> {
        for (client, ns) in &self.cleanup {
            let _ = kube::Api::<Namespace>::all(client.clone())
                .delete(ns, &DeleteParams::default())
                .await;
        }
        ferry.stop()
    }
}

fn database(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "shop"}},
        "spec": spec,
    })
}

fn db_spec(tier: &str) -> Value {
    json!({"engine": "postgres", "version": "16", "tier": tier})
}

fn kind_of(object: &Value) -> (String, String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&object["apiVersion"]),
        s(&object["kind"]),
        s(&object["metadata"]["namespace"]),
        s(&object["metadata"]["name"]),
    )
}

async fn create(client: &Client, object: Value) -> Result<Value> {
    let (v, k, ns, _) = kind_of(&object);
    let o: DynamicObject = serde_json::from_value(object)?;
    let out = api(client, &v, k.as_str(), &ns)
        .create(&PostParams::default(), &o)
        .await
        .with_context(|| format!("creating {k}"))?;
    Ok(serde_json::to_value(out)?)
}

async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Option<Value>> {
    let out = api(client, api_version, kind, ns).get_opt(name).await?;
    Ok(out.map(|o| serde_json::to_value(o).unwrap_or_default()))
}

/// A merge patch of the object, or of its status subresource.
async fn patch_merge(
    client: &Client,
    (api_version, kind, ns, name): (&str, &str, &str, &str),
    patch: Value,
    status: bool,
) -> Result<Value> {
    let api = api(client, api_version, kind, ns);
    let params = PatchParams::default();
    let out = if status {
        api.patch_status(name, &params, &Patch::Merge(&patch))
            .await?
    } else {
        api.patch(name, &params, &Patch::Merge(&patch)).await?
    };
    Ok(serde_json::to_value(out)?)
}

async fn merge(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    patch: Value,
) -> Result<Value> {
    patch_merge(client, (api_version, kind, ns, name), patch, false).await
}

async fn merge_status(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    patch: Value,
) -> Result<Value> {
    patch_merge(client, (api_version, kind, ns, name), patch, true).await
}

async fn delete(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<()> {
    api(client, api_version, kind, ns)
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Waits for the object and returns it once `test` holds.
async fn until(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    what: &str,
    test: impl Fn(&Value) -> bool,
) -> Result<Value> {
    eventually(what, WAIT, || async {
        Ok(get(client, api_version, kind, ns, name)
            .await?
            .filter(|o| test(o)))
    })
    .await
}

async fn until_gone(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    what: &str,
) -> Result<()> {
    eventually(what, WAIT, || async {
        Ok(get(client, api_version, kind, ns, name)
            .await?
            .is_none()
            .then_some(()))
    })
    .await
}

/// Waits for an Event with `reason` regarding `name` in `ns`.
async fn until_event(client: &Client, ns: &str, name: &str, reason: &str) -> Result<String> {
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns);
    eventually(&format!("Event {reason} on {ns}/{name}"), WAIT, || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find_map(|e| {
            let regarding = e.regarding.as_ref()?.name.as_deref()?;
            (regarding == name && e.reason.as_deref() == Some(reason))
                .then(|| e.note.clone().unwrap_or_default())
        }))
    })
    .await
}

const DB: &str = "example.com/v1";

async fn propagation(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "propagation").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let created = create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let copy = until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "super copy",
        |_| true,
    )
    .await?;
    ensure!(
        copy["metadata"]["labels"]["ferry.dev/tenant"] == "team-a",
        "{copy:#}"
    );
    let ann = &copy["metadata"]["annotations"];
    ensure!(ann["ferry.dev/tenant-namespace"] == ns.as_str(), "{copy:#}");
    ensure!(ann["ferry.dev/tenant-name"] == "orders", "{copy:#}");
    ensure!(
        ann["ferry.dev/tenant-uid"] == created["metadata"]["uid"],
        "{copy:#}"
    );
    ensure!(
        copy["spec"]["resources"]["cpu"] == "500m",
        "transform applied: {copy:#}"
    );
    let namespace = get(&s, "v1", "Namespace", "", &super_ns)
        .await?
        .context("super namespace")?;
    ensure!(
        namespace["metadata"]["labels"]["ferry.dev/tenant"] == "team-a",
        "{namespace:#}"
    );
    ensure!(
        namespace["metadata"]["annotations"]["ferry.dev/tenant-namespace"] == ns.as_str(),
        "{namespace:#}"
    );
    let managers: Vec<_> = copy["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    ensure!(
        managers.contains(&"ferry"),
        "field manager ferry: {managers:?}"
    );

    merge(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        json!({"spec": {"tier": "large"}}),
    )
    .await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "update reaches the super copy",
        |o| o["spec"]["resources"]["cpu"] == "8",
    )
    .await?;
    // A field the tenant removes goes from the copy too.
    merge(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        json!({"spec": {"version": null}}),
    )
    .await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "removal reaches the super copy",
        |o| o["spec"].get("version").is_none() && o["spec"]["engine"] == "postgres",
    )
    .await?;

    let class = unique("gold");
    create(&a, json!({"apiVersion": DB, "kind": "DatabaseClass", "metadata": {"name": class}, "spec": {"engine": "postgres"}})).await?;
    let super_class = format!("team-a-{class}");
    until(
        &s,
        DB,
        "DatabaseClass",
        "",
        &super_class,
        "cluster-scoped copy renamed",
        |o| o["metadata"]["annotations"]["ferry.dev/tenant-name"] == class.as_str(),
    )
    .await?;

    delete(&a, DB, "Database", &ns, "orders").await?;
    until_gone(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "delete reaches the super cluster",
    )
    .await?;
    delete(&a, DB, "DatabaseClass", "", &class).await?;
    until_gone(
        &s,
        DB,
        "DatabaseClass",
        "",
        &super_class,
        "cluster-scoped delete",
    )
    .await?;
    env.finish(ferry).await
}

async fn status_flows_up(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "status").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "super copy",
        |_| true,
    )
    .await?;
    merge_status(&s, DB, "Database", &super_ns, "orders", json!({"status": {"phase": "Ready", "primaryNamespace": super_ns, "conditions": [{"type": "Ready", "status": "True", "message": format!("primary in {super_ns} is up")}]}})).await?;
    merge(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        json!({"spec": {"endpoint": "orders.db:5432"}}),
    )
    .await?;
    let up = until(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        "status and super-owned field flow up",
        |o| o["status"]["phase"] == "Ready" && o["spec"]["endpoint"] == "orders.db:5432",
    )
    .await?;
    ensure!(
        up["status"]["primaryNamespace"] == ns.as_str(),
        "namespace unmapped: {up:#}"
    );
    ensure!(
        up["status"]["conditions"][0]["message"] == format!("primary in {ns} is up"),
        "transform to_tenant: {up:#}"
    );
    env.finish(ferry).await
}

async fn drift_repaired(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "drift").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let copy = until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "super copy",
        |_| true,
    )
    .await?;
    // Down: an edit of the super copy is reverted; a deleted copy comes back.
    merge(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        json!({"spec": {"engine": "mysql"}}),
    )
    .await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "super edit reverted",
        |o| o["spec"]["engine"] == "postgres",
    )
    .await?;
    delete(&s, DB, "Database", &super_ns, "orders").await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "deleted copy recreated",
        |o| o["metadata"]["uid"] != copy["metadata"]["uid"],
    )
    .await?;
    // Up: a tenant edit of the status ferry writes is reverted.
    merge_status(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        json!({"status": {"phase": "Ready"}}),
    )
    .await?;
    until(&a, DB, "Database", &ns, "orders", "status up", |o| {
        o["status"]["phase"] == "Ready"
    })
    .await?;
    merge_status(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        json!({"status": {"phase": "Forged"}}),
    )
    .await?;
    until(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        "tenant status edit reverted",
        |o| o["status"]["phase"] == "Ready",
    )
    .await?;
    env.finish(ferry).await
}

async fn deletes_while_down(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "down").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let mut copies = Vec::new();
    for name in ["kept", "dropped", "recreated"] {
        create(&a, database(&ns, name, db_spec("small"))).await?;
        copies.push(until(&s, DB, "Database", &super_ns, name, "super copy", |_| true).await?);
    }
    ferry.stop()?;
    delete(&a, DB, "Database", &ns, "dropped").await?;
    // Deleted and created again under the same name: a new tenant uid.
    delete(&a, DB, "Database", &ns, "recreated").await?;
    let again = create(&a, database(&ns, "recreated", db_spec("large"))).await?;
    let ferry = env.start(&env.settings(&["team-a"]), "ferry-2.log").await?;
    until_gone(
        &s,
        DB,
        "Database",
        &super_ns,
        "dropped",
        "delete made while ferry was down",
    )
    .await?;
    let kept = get(&s, DB, "Database", &super_ns, "kept")
        .await?
        .context("the other copy stays")?;
    ensure!(
        kept["metadata"]["uid"] == copies[0]["metadata"]["uid"],
        "an unchanged copy is kept as it is"
    );
    let replaced = until(
        &s,
        DB,
        "Database",
        &super_ns,
        "recreated",
        "copy of the new object",
        |o| o["metadata"]["annotations"]["ferry.dev/tenant-uid"] == again["metadata"]["uid"],
    )
    .await?;
    ensure!(
        replaced["metadata"]["uid"] != copies[2]["metadata"]["uid"],
        "the old copy was replaced, not updated"
    );
    ensure!(replaced["spec"]["resources"]["cpu"] == "8", "{replaced:#}");
    env.finish(ferry).await
}

async fn unowned_left_alone(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "unowned").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    // A super object of the same name that ferry does not own.
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&s, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": super_ns, "labels": {"ferry.dev/tenant": "team-a"}, "annotations": {"ferry.dev/tenant-namespace": ns}}})).await?;
    env.cleanup.push((s.clone(), super_ns.clone()));
    create(
        &s,
        database(&super_ns, "orders", json!({"engine": "mysql"})),
    )
    .await?;
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let note = until_event(&a, &ns, "orders", "SyncConflict").await?;
    ensure!(note.contains("does not own"), "{note}");
    let other = get(&s, DB, "Database", &super_ns, "orders")
        .await?
        .context("unowned object")?;
    ensure!(
        other["spec"]["engine"] == "mysql",
        "left untouched: {other:#}"
    );
    ensure!(
        other["metadata"]["labels"]
            .get("ferry.dev/tenant")
            .is_none(),
        "{other:#}"
    );
    // A super namespace that belongs to another tenant is never written into.
    let ns2 = env.namespace("team-a", "taken").await?;
    let taken = format!("team-a-{ns2}");
    create(&s, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": taken, "labels": {"ferry.dev/tenant": "team-b"}, "annotations": {"ferry.dev/tenant-namespace": "elsewhere"}}})).await?;
    env.cleanup.push((s.clone(), taken.clone()));
    create(&a, database(&ns2, "orders", db_spec("small"))).await?;
    let note = until_event(&a, &ns2, "orders", "SyncConflict").await?;
    ensure!(note.contains("team-b"), "{note}");
    ensure!(
        get(&s, DB, "Database", &taken, "orders").await?.is_none(),
        "nothing written into another tenant's namespace"
    );
    let refused = ferry
        .metric(
            "ferry_refusals_total",
            &[("tenant", "team-a"), ("reason", "SyncConflict")],
        )
        .await?;
    ensure!(refused >= 2.0, "refusal metric: {refused}");
    env.finish(ferry).await
}

async fn tenants_isolated(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "isolated").await?;
    let ferry = env.ferry(&["team-a", "team-b"]).await?;
    let (a, b, s) = (env.tenant("team-a"), env.tenant("team-b"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    kube::Api::<Namespace>::all(b.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    env.cleanup.push((b.clone(), ns.clone()));
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    create(&b, database(&ns, "orders", db_spec("large"))).await?;
    let (sa, sb) = (format!("team-a-{ns}"), format!("team-b-{ns}"));
    until(&s, DB, "Database", &sa, "orders", "team-a copy", |o| {
        o["spec"]["resources"]["cpu"] == "500m"
    })
    .await?;
    until(&s, DB, "Database", &sb, "orders", "team-b copy", |o| {
        o["spec"]["resources"]["cpu"] == "8"
            && o["metadata"]["labels"]["ferry.dev/tenant"] == "team-b"
    })
    .await?;
    merge_status(
        &s,
        DB,
        "Database",
        &sa,
        "orders",
        json!({"status": {"phase": "Ready"}}),
    )
    .await?;
    until(&a, DB, "Database", &ns, "orders", "team-a status", |o| {
        o["status"]["phase"] == "Ready"
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = get(&b, DB, "Database", &ns, "orders")
        .await?
        .context("team-b object")?;
    ensure!(
        other
            .get("status")
            .is_none_or(|st| st.get("phase").is_none()),
        "team-b got team-a's status: {other:#}"
    );
    delete(&a, DB, "Database", &ns, "orders").await?;
    until_gone(&s, DB, "Database", &sa, "orders", "team-a copy deleted").await?;
    ensure!(
        get(&s, DB, "Database", &sb, "orders").await?.is_some(),
        "team-b copy stays"
    );
    env.finish(ferry).await
}

async fn public_storage_class(identity: Identity) -> Result<()> {
    let env = Env::new(identity, "public").await?;
    let ferry = env.ferry(&["team-a", "team-b"]).await?;
    let s = env.super_();
    let sc = "storage.k8s.io/v1";
    let (public, private) = (unique("fast"), unique("internal"));
    let created = create(&s, json!({"apiVersion": sc, "kind": "StorageClass", "metadata": {"name": public, "labels": {"tenancy.x-k8s.io/super.public": "true"}}, "provisioner": "example.com/fast", "parameters": {"tier": "gold"}})).await?;
    create(&s, json!({"apiVersion": sc, "kind": "StorageClass", "metadata": {"name": private}, "provisioner": "example.com/internal"})).await?;
    for t in ["team-a", "team-b"] {
        let copy = until(
            &env.tenant(t),
            sc,
            "StorageClass",
            "",
            &public,
            "public StorageClass copied",
            |_| true,
        )
        .await?;
        ensure!(
            copy["metadata"]["labels"]["ferry.dev/from-super"] == "true",
            "{copy:#}"
        );
        ensure!(
            copy["metadata"]["annotations"]["ferry.dev/super-uid"] == created["metadata"]["uid"],
            "{copy:#}"
        );
        ensure!(copy["provisioner"] == "example.com/fast", "{copy:#}");
    }
    let a = env.tenant("team-a");
    merge(
        &a,
        sc,
        "StorageClass",
        "",
        &public,
        json!({"metadata": {"labels": {"mine": "yes"}}, "mountOptions": ["debug"]}),
    )
    .await?;
    until(
        &a,
        sc,
        "StorageClass",
        "",
        &public,
        "tenant edit reverted",
        |o| o.get("mountOptions").is_none() && o["metadata"]["labels"].get("mine").is_none(),
    )
    .await?;
    ensure!(
        get(&a, sc, "StorageClass", "", &private).await?.is_none(),
        "a private StorageClass stays in the super cluster"
    );
    // No longer public: it leaves every tenant.
    merge(
        &s,
        sc,
        "StorageClass",
        "",
        &public,
        json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": null}}}),
    )
    .await?;
    for t in ["team-a", "team-b"] {
        until_gone(
            &env.tenant(t),
            sc,
            "StorageClass",
            "",
            &public,
            "de-selected StorageClass removed",
        )
        .await?;
    }
    merge(
        &s,
        sc,
        "StorageClass",
        "",
        &public,
        json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": "true"}}}),
    )
    .await?;
    until(&a, sc, "StorageClass", "", &public, "public again", |_| {
        true
    })
    .await?;
    delete(&s, sc, "StorageClass", "", &public).await?;
    delete(&s, sc, "StorageClass", "", &private).await?;
    for t in ["team-a", "team-b"] {
        until_gone(
            &env.tenant(t),
            sc,
            "StorageClass",
            "",
            &public,
            "deleted StorageClass removed",
        )
        .await?;
    }
    env.finish(ferry).await
}

async fn secret_followed_and_collected(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "secret").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    for name in ["creds", "spare"] {
        create(&a, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": {"password": "hunter2"}})).await?;
    }
    create(&a, database(&ns, "plain", db_spec("small"))).await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "plain",
        "unrelated copy",
        |_| true,
    )
    .await?;
    ensure!(
        get(&s, "v1", "Secret", &super_ns, "creds").await?.is_none(),
        "an unreferenced Secret stays in the tenant"
    );
    let mut spec = db_spec("small");
    spec["credentialsRef"] = json!({"name": "creds", "key": "password"});
    create(&a, database(&ns, "orders", spec)).await?;
    let secret = until(
        &s,
        "v1",
        "Secret",
        &super_ns,
        "creds",
        "referenced Secret follows",
        |_| true,
    )
    .await?;
    ensure!(
        secret["metadata"]["labels"]["ferry.dev/tenant"] == "team-a",
        "{secret:#}"
    );
    ensure!(
        get(&s, "v1", "Secret", &super_ns, "spare").await?.is_none(),
        "the other Secret stays"
    );
    merge(
        &a,
        DB,
        "Database",
        &ns,
        "orders",
        json!({"spec": {"credentialsRef": {"name": "spare"}}}),
    )
    .await?;
    until(
        &s,
        "v1",
        "Secret",
        &super_ns,
        "spare",
        "newly referenced Secret follows",
        |_| true,
    )
    .await?;
    until_gone(
        &s,
        "v1",
        "Secret",
        &super_ns,
        "creds",
        "unreferenced Secret collected",
    )
    .await?;
    delete(&a, DB, "Database", &ns, "orders").await?;
    until_gone(
        &s,
        "v1",
        "Secret",
        &super_ns,
        "spare",
        "Secret of a deleted referrer collected",
    )
    .await?;
    env.finish(ferry).await
}

async fn restart_without_writes(identity: Identity) -> Result<()> {
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
        until(&s, DB, "Database", &super_ns, name, "super copy", |_| true).await?;
        merge_status(
            &s,
            DB,
            "Database",
            &super_ns,
            name,
            json!({"status": {"phase": "Ready"}}),
        )
        .await?;
        until(&a, DB, "Database", &ns, name, "status up", |o| {
            o["status"]["phase"] == "Ready"
        })
        .await?;
    }
    until(&s, "v1", "Secret", &super_ns, "creds", "Secret", |_| true).await?;
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
            all.push(get(&s, DB, "Database", &super_ns, name).await?);
            all.push(get(&a, DB, "Database", &ns, name).await?);
        }
        all.push(get(&s, "v1", "Secret", &super_ns, "creds").await?);
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

/// Waits until no key waits (the depth of every queue stays 0 for half a second).
async fn drained(ferry: &Ferry) -> Result<()> {
    let mut calm = 0;
    for _ in 0..600 {
        if ferry.metric("ferry_queue_depth", &[]).await? == 0.0 {
            calm += 1;
            if calm >= 5 {
                return Ok(());
            }
        } else {
            calm = 0;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the queue did not drain in 60s:\n{}", ferry.log())
}

async fn leader_election(identity: Identity) -> Result<()> {
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
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "synced by the leader",
        |_| true,
    )
    .await?;
    ensure!(
        second.metric("ferry_leader", &[]).await? == 0.0,
        "two leaders"
    );
    ensure!(
        second.metric("ferry_writes_total", &[]).await? == 0.0,
        "the follower wrote:\n{}",
        second.log()
    );
    ensure!(
        first.metric("ferry_writes_total", &[]).await? > 0.0,
        "the leader did not write"
    );
    // The leader leaves (releasing the lease); the follower takes over.
    first.stop()?;
    eventually("second replica leads", Duration::from_secs(30), || async {
        Ok((second.metric("ferry_leader", &[]).await? == 1.0).then_some(()))
    })
    .await?;
    create(&a, database(&ns, "later", db_spec("small"))).await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "later",
        "synced by the new leader",
        |_| true,
    )
    .await?;
    ensure!(
        second.metric("ferry_writes_total", &[]).await? > 0.0,
        "the new leader did not write"
    );
    env.finish(second).await
}

async fn tenant_hot_added(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "hotadd").await?;
    let settings = env.settings(&["team-a"]);
    let ferry = env.start(&settings, "ferry.log").await?;
    let (b, s) = (env.tenant("team-b"), env.super_());
    let ns = env.namespace("team-b", "shop").await?;
    create(&b, database(&ns, "orders", db_spec("small"))).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let super_ns = format!("team-b-{ns}");
    ensure!(
        get(&s, DB, "Database", &super_ns, "orders")
            .await?
            .is_none(),
        "team-b synced before it was configured"
    );
    let both = Settings {
        tenants: vec!["team-a".into(), "team-b".into()],
        ..settings.clone()
    };
    write_config(&env.dir, &both, ferry.address.port())?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "hot-added tenant synced",
        |_| true,
    )
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
        get(&s, DB, "Database", &super_ns, "after").await?.is_none(),
        "a removed tenant is still synced"
    );
    ensure!(
        get(&s, DB, "Database", &super_ns, "orders")
            .await?
            .is_some(),
        "a removed tenant's copies stay"
    );
    // Leave nothing behind for later tests: team-b again, so ferry collects the namespace.
    write_config(&env.dir, &both, ferry.address.port())?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "after",
        "team-b back",
        |_| true,
    )
    .await?;
    env.finish(ferry).await
}

/// A policy that refuses in every way a live tenant can meet: a transform that fails on
/// `spec.version: "13"`, references to kinds it does not approve, and a selector.
fn refusing_policy(dir: &Path) -> Result<PathBuf> {
    let script = "def to_super(obj, ctx):\n    if obj[\"spec\"].get(\"version\") == \"13\":\n        fail(\"spec.version: 13 is end of life, expected 14 or later\")\n    return obj\n";
    database_policy(
        dir,
        "picky",
        script,
        "    selector:\n      matchExpressions: [{key: skip, operator: DoesNotExist}]\n",
    )
}

/// A policy approving only Database, with the pinned transform `name` (`script`, written
/// beside it) and `extra` lines for its entry.
fn database_policy(dir: &Path, name: &str, script: &str, extra: &str) -> Result<PathBuf> {
    use sha2::{Digest, Sha256};
    std::fs::write(dir.join(format!("{name}.star")), script)?;
    let pin: String = Sha256::digest(script.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let schema = ferry_testkit::root().join("schemas/databases.example.com.yaml");
    let policy = format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nmetadata: {{name: {name}}}\nspec:\n  resources:\n  - apiVersion: example.com/v1\n    kind: Database\n    direction: toSuper\n    schema: {}\n    transforms: [{name}]\n{extra}  transforms:\n  - name: {name}\n    file: {name}.star\n    sha256: {pin}\n",
        schema.display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, policy)?;
    Ok(path)
}

async fn refusals_are_events(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "refusals").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.policy = refusing_policy(&env.dir)?;
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let mut old = db_spec("small");
    old["version"] = json!("13");
    create(&a, database(&ns, "old", old)).await?;
    let mut secret = db_spec("small");
    secret["credentialsRef"] = json!({"name": "creds"});
    create(&a, database(&ns, "secret", secret)).await?;
    let mut skipped = database(&ns, "skipped", db_spec("small"));
    skipped["metadata"]["labels"]["skip"] = json!("yes");
    create(&a, skipped).await?;
    create(&a, database(&ns, "fine", db_spec("small"))).await?;
    let note = until_event(&a, &ns, "old", "TransformFailed").await?;
    ensure!(note.contains("end of life"), "{note}");
    let note = until_event(&a, &ns, "secret", "UnapprovedReference").await?;
    ensure!(note.contains("Secret"), "{note}");
    until_event(&a, &ns, "skipped", "NotSelected").await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "fine",
        "an accepted object still syncs",
        |_| true,
    )
    .await?;
    for name in ["old", "secret", "skipped"] {
        ensure!(
            get(&s, DB, "Database", &super_ns, name).await?.is_none(),
            "refused {name} was written"
        );
    }
    for reason in ["TransformFailed", "UnapprovedReference", "NotSelected"] {
        let n = ferry
            .metric(
                "ferry_refusals_total",
                &[("tenant", "team-a"), ("reason", reason)],
            )
            .await?;
        ensure!(n >= 1.0, "refusal metric {reason}: {n}");
    }
    // Fixed by the tenant: synced.
    merge(
        &a,
        DB,
        "Database",
        &ns,
        "old",
        json!({"spec": {"version": "16"}}),
    )
    .await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "old",
        "a fixed object syncs",
        |_| true,
    )
    .await?;
    env.finish(ferry).await
}

const CERT: &str = "cert-manager.io/v1";

fn certificate(ns: &str, name: &str, issuer: &str) -> Value {
    json!({
        "apiVersion": CERT,
        "kind": "Certificate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "secretName": format!("{name}-tls"),
            "dnsNames": ["shop.example.com"],
            "issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": issuer},
        },
    })
}

/// The guard live: a reference to a public kind must name an object the super cluster
/// publishes; a tenant's copy labelled public is not published.
async fn unpublished_references_refused(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "unpublished").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let published = unique("shared-ca");
    let private = unique("private-ca");
    for (name, public) in [(&published, "true"), (&private, "false")] {
        create(
            &s,
            json!({
                "apiVersion": CERT,
                "kind": "ClusterIssuer",
                "metadata": {"name": name, "labels": {"tenancy.x-k8s.io/super.public": public}},
                "spec": {"selfSigned": {}},
            }),
        )
        .await?;
    }
    create(&a, certificate(&ns, "shop", &published)).await?;
    create(&a, certificate(&ns, "unpublished", &private)).await?;
    create(&a, certificate(&ns, "missing", "no-such-issuer")).await?;
    until(
        &s,
        CERT,
        "Certificate",
        &super_ns,
        "shop",
        "a reference to a published ClusterIssuer syncs",
        |o| o["spec"]["issuerRef"]["name"] == published.as_str(),
    )
    .await?;
    for name in ["unpublished", "missing"] {
        let note = until_event(&a, &ns, name, "UnapprovedReference").await?;
        ensure!(note.contains("does not publish"), "{note}");
        ensure!(
            get(&s, CERT, "Certificate", &super_ns, name)
                .await?
                .is_none(),
            "{name} was written"
        );
    }
    for name in [&published, &private] {
        delete(&s, CERT, "ClusterIssuer", "", name).await?;
    }
    env.finish(ferry).await
}

/// A policy whose `to_tenant` writes the tenant's spec: the guard refuses what flows up.
fn leaky_policy(dir: &Path) -> Result<PathBuf> {
    let script = "def to_super(obj, ctx):\n    return obj\n\ndef to_tenant(obj, ctx):\n    obj[\"spec\"] = {\"tier\": \"large\"}\n    return obj\n";
    database_policy(dir, "leaky", script, "")
}

async fn to_tenant_writes_refused(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "leaky").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.policy = leaky_policy(&env.dir)?;
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    until(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        "super copy",
        |_| true,
    )
    .await?;
    merge_status(
        &s,
        DB,
        "Database",
        &super_ns,
        "orders",
        json!({"status": {"phase": "Ready"}}),
    )
    .await?;
    let note = until_event(&a, &ns, "orders", "TransformFailed").await?;
    ensure!(note.contains("spec"), "{note}");
    let tenant = get(&a, DB, "Database", &ns, "orders")
        .await?
        .context("the tenant object")?;
    ensure!(
        tenant["spec"]["tier"] == "small" && tenant.get("status").is_none(),
        "nothing may be written to the tenant: {tenant:#}"
    );
    env.finish(ferry).await
}

const GW: &str = "gateway.networking.k8s.io/v1";

/// Gateway API on real API servers: a route refers across the tenant's namespaces (allowed by
/// a ReferenceGrant), a listener admits routes from namespaces by label, and super namespaces
/// carry their tenant namespace's labels, so the label selects the tenant's namespaces only.
async fn gateway_api_stays_in_tenant(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "gateway").await?;
    let ferry = env.ferry(&["team-a", "team-b"]).await?;
    let (a, b, s) = (env.tenant("team-a"), env.tenant("team-b"), env.super_());
    let infra = env.namespace("team-a", "infra").await?;
    let shop = env.namespace("team-a", "shop").await?;
    let catalog = env.namespace("team-a", "catalog").await?;
    let other = env.namespace("team-b", "shop").await?;
    for (client, ns) in [(&a, &shop), (&b, &other)] {
        merge(
            client,
            "v1",
            "Namespace",
            "",
            ns,
            json!({"metadata": {"labels": {"gateway-access": "yes"}}}),
        )
        .await?;
    }
    // The platform's GatewayClass, published to every tenant.
    let class = unique("shared");
    create(
        &s,
        json!({
            "apiVersion": GW, "kind": "GatewayClass",
            "metadata": {"name": class, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
            "spec": {"controllerName": "example.com/gateway"},
        }),
    )
    .await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": infra},
        "spec": {"gatewayClassName": class, "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP",
             "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"gateway-access": "yes"}}}}},
            {"name": "all", "port": 8080, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        ]},
    })).await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": shop},
        "spec": {"parentRefs": [{"name": "edge", "namespace": infra}],
                 "rules": [{"backendRefs": [{"name": "catalog", "namespace": catalog, "port": 8080}]}]},
    })).await?;
    create(&a, json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "from-shop", "namespace": catalog},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": shop}],
                 "to": [{"group": "", "kind": "Service", "name": "catalog"}]},
    })).await?;
    // team-b has a route of its own, so its labelled namespace exists in the super cluster.
    create(
        &b,
        json!({
            "apiVersion": GW, "kind": "HTTPRoute",
            "metadata": {"name": "shop", "namespace": other},
            "spec": {"parentRefs": [{"name": "edge"}]},
        }),
    )
    .await?;
    let sup = |ns: &str| format!("team-a-{ns}");
    let gateway = until(
        &s,
        GW,
        "Gateway",
        &sup(&infra),
        "edge",
        "the Gateway's copy",
        |_| true,
    )
    .await?;
    let listeners = &gateway["spec"]["listeners"];
    ensure!(
        listeners[0]["allowedRoutes"]["namespaces"]["selector"]["matchLabels"]
            == json!({"gateway-access": "yes", "ferry.dev/tenant": "team-a"}),
        "selector scoped to the tenant: {gateway:#}"
    );
    ensure!(
        listeners[1]["allowedRoutes"]["namespaces"]
            == json!({"from": "Selector", "selector": {"matchLabels": {"ferry.dev/tenant": "team-a"}}}),
        "from: All admits only the tenant's namespaces: {gateway:#}"
    );
    let route = until(
        &s,
        GW,
        "HTTPRoute",
        &sup(&shop),
        "shop",
        "the route's copy",
        |_| true,
    )
    .await?;
    ensure!(
        route["spec"]["parentRefs"][0]["namespace"] == sup(&infra).as_str()
            && route["spec"]["rules"][0]["backendRefs"][0]["namespace"] == sup(&catalog).as_str(),
        "references mapped into the tenant's namespaces: {route:#}"
    );
    let grant = until(
        &s,
        "gateway.networking.k8s.io/v1beta1",
        "ReferenceGrant",
        &sup(&catalog),
        "from-shop",
        "the grant's copy",
        |_| true,
    )
    .await?;
    ensure!(
        grant["spec"]["from"][0]["namespace"] == sup(&shop).as_str(),
        "{grant:#}"
    );
    until(
        &s,
        GW,
        "HTTPRoute",
        &format!("team-b-{other}"),
        "shop",
        "team-b's route",
        |_| true,
    )
    .await?;
    // The Gateway's selector, as a super-side controller evaluates it, selects the tenant's
    // labelled namespace and not team-b's, which carries the same label.
    let selected = |labels: String| {
        let s = s.clone();
        async move {
            let list = kube::Api::<Namespace>::all(s)
                .list(&ListParams::default().labels(&labels))
                .await?;
            anyhow::Ok(
                list.items
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .collect::<Vec<_>>(),
            )
        }
    };
    let wanted = sup(&shop);
    eventually(
        "the tenant's labelled super namespace is selected",
        WAIT,
        || async {
            // (Earlier runs' namespaces may linger as Terminating; none of them is team-b's.)
            let names = selected("gateway-access=yes,ferry.dev/tenant=team-a".into()).await?;
            let ours = names.iter().all(|n| n.starts_with("team-a-"));
            Ok((ours && names.contains(&wanted)).then_some(()))
        },
    )
    .await?;
    ensure!(
        selected("gateway-access=yes".into())
            .await?
            .contains(&format!("team-b-{other}")),
        "team-b's namespace carries its label too (so the tenant label is what keeps it out)"
    );
    // The label leaves the tenant namespace: it leaves the super namespace.
    merge(
        &a,
        "v1",
        "Namespace",
        "",
        &shop,
        json!({"metadata": {"labels": {"gateway-access": null}}}),
    )
    .await?;
    eventually(
        "a removed label leaves the super namespace",
        WAIT,
        || async {
            let names = selected("gateway-access=yes,ferry.dev/tenant=team-a".into()).await?;
            Ok((!names.contains(&wanted)).then_some(()))
        },
    )
    .await?;
    delete(&s, GW, "GatewayClass", "", &class).await?;
    env.finish(ferry).await
}

/// One kind both ways: the platform's shared Gateway is copied into the tenant, the tenant's
/// own Gateway goes down, and a route attaches to each — the shared one unchanged.
async fn shared_gateway_both_ways(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "both-ways").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    // The platform's namespace, and the tenant namespace of the same name its copy lands in.
    let platform = unique("platform-gw");
    for client in [&s, &a] {
        create(
            client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": platform}}),
        )
        .await?;
    }
    env.cleanup.push((a.clone(), platform.clone()));
    let class = unique("shared");
    create(
        &s,
        json!({
            "apiVersion": GW, "kind": "GatewayClass",
            "metadata": {"name": class, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
            "spec": {"controllerName": "example.com/gateway"},
        }),
    )
    .await?;
    let listener = json!([{"name": "http", "port": 80, "protocol": "HTTP"}]);
    create(&s, json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "shared", "namespace": platform, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
        "spec": {"gatewayClassName": class, "listeners": listener},
    })).await?;
    let copy = until(
        &a,
        GW,
        "Gateway",
        &platform,
        "shared",
        "the shared Gateway copied into the tenant",
        |_| true,
    )
    .await?;
    ensure!(
        copy["metadata"]["labels"]["ferry.dev/from-super"] == "true",
        "{copy:#}"
    );
    let infra = env.namespace("team-a", "infra").await?;
    let shop = env.namespace("team-a", "shop").await?;
    create(
        &a,
        json!({
            "apiVersion": GW, "kind": "Gateway",
            "metadata": {"name": "edge", "namespace": infra},
            "spec": {"gatewayClassName": class, "listeners": listener},
        }),
    )
    .await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": shop},
        "spec": {"parentRefs": [{"name": "shared", "namespace": platform}, {"name": "edge", "namespace": infra}]},
    })).await?;
    until(
        &s,
        GW,
        "Gateway",
        &format!("team-a-{infra}"),
        "edge",
        "the tenant's own Gateway goes down",
        |_| true,
    )
    .await?;
    let route = until(
        &s,
        GW,
        "HTTPRoute",
        &format!("team-a-{shop}"),
        "shop",
        "the route's copy",
        |_| true,
    )
    .await?;
    ensure!(
        route["spec"]["parentRefs"][0]["namespace"] == platform.as_str()
            && route["spec"]["parentRefs"][1]["namespace"] == format!("team-a-{infra}").as_str(),
        "the shared parent unchanged, the own one mapped: {route:#}"
    );
    ensure!(
        get(&s, GW, "Gateway", &format!("team-a-{platform}"), "shared")
            .await?
            .is_none(),
        "a copy from the super cluster never goes back down"
    );
    delete(&s, GW, "Gateway", &platform, "shared").await?;
    until_gone(
        &a,
        GW,
        "Gateway",
        &platform,
        "shared",
        "the copy goes with the public Gateway",
    )
    .await?;
    delete(&s, GW, "GatewayClass", "", &class).await?;
    delete(&s, "v1", "Namespace", "", &platform).await?;
    env.finish(ferry).await
}

/// A kind approved before its CRD exists: reported, retried, and synced once served.
async fn kind_served_later(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "served-later").await?;
    let group = format!("{}.example.com", unique("e2e"));
    let policy = env.dir.join("widgets.yaml");
    std::fs::write(
        &policy,
        format!("apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nmetadata: {{name: widgets}}\nspec:\n  resources:\n  - apiVersion: {group}/v1\n    kind: Widget\n    direction: toSuper\n"),
    )?;
    let mut settings = env.settings(&["team-a"]);
    settings.policy = policy;
    let ferry = env.start(&settings, "ferry.log").await?;
    let (_, readyz) = ferry.get("/readyz").await?;
    ensure!(
        readyz.contains("Widget") && readyz.contains("not served"),
        "{readyz}"
    );
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    for client in [env.super_(), env.tenant("team-a")] {
        create(&client, crd.clone()).await?;
        until(
            &client,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            &format!("widgets.{group}"),
            "CRD established",
            |o| {
                o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            },
        )
        .await?;
    }
    let ns = env.namespace("team-a", "shop").await?;
    let a = env.tenant("team-a");
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w", "namespace": ns}, "size": 3});
    let o: DynamicObject = serde_json::from_value(widget)?;
    let widgets = |c: &Client, ns: &str| {
        let gvk = kube::api::GroupVersionKind::gvk(&group, "v1", "Widget");
        kube::Api::<DynamicObject>::namespaced_with(
            c.clone(),
            ns,
            &kube::api::ApiResource::from_gvk_with_plural(&gvk, "widgets"),
        )
    };
    widgets(&a, &ns).create(&PostParams::default(), &o).await?;
    let s = env.super_();
    let super_ns = format!("team-a-{ns}");
    eventually(
        "a kind served later syncs",
        Duration::from_secs(30),
        || async { Ok(widgets(&s, &super_ns).get_opt("w").await?) },
    )
    .await?;
    let log = ferry.log();
    ensure!(
        log.contains("kind not served yet") && log.contains("kind is served now"),
        "{log}"
    );
    for client in [env.super_(), env.tenant("team-a")] {
        delete(
            &client,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            &format!("widgets.{group}"),
        )
        .await?;
    }
    env.finish(ferry).await
}

/// Scenarios whose policy is their own (the RBAC suite installs the roles of `policies/`).
mod admin_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kind_served_later() {
        super::kind_served_later(super::Identity::Admin)
            .await
            .unwrap();
    }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        /// As the harness's admin.
        mod admin {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Identity::Admin).await.unwrap();
                }
            )*
        }
        /// As a user bound only to the ClusterRoles `ferry rbac` prints.
        mod rbac {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Identity::Rbac).await.unwrap();
                }
            )*
        }
    };
}

scenarios!(
    propagation,
    status_flows_up,
    drift_repaired,
    deletes_while_down,
    unowned_left_alone,
    tenants_isolated,
    public_storage_class,
    secret_followed_and_collected,
    restart_without_writes,
    leader_election,
    tenant_hot_added,
    refusals_are_events,
    unpublished_references_refused,
    to_tenant_writes_refused,
    gateway_api_stays_in_tenant,
    shared_gateway_both_ways,
);
