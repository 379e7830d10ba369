//! Objects the super cluster publishes (fromSuper), dependencies followed and collected, and a
//! kind served only after ferry started.

use super::*;

pub async fn public_storage_class(identity: Identity) -> Result<()> {
    let env = Env::new(identity, "public").await?;
    let ferry = env.ferry(&["team-a", "team-b"]).await?;
    let s = env.super_();
    let sc = "storage.k8s.io/v1";
    let (public, private) = (unique("fast"), unique("internal"));
    let created = create(&s, json!({"apiVersion": sc, "kind": "StorageClass", "metadata": {"name": public, "labels": {"tenancy.x-k8s.io/super.public": "true"}}, "provisioner": "example.com/fast", "parameters": {"tier": "gold"}})).await?;
    create(&s, json!({"apiVersion": sc, "kind": "StorageClass", "metadata": {"name": private}, "provisioner": "example.com/internal"})).await?;
    for t in ["team-a", "team-b"] {
        let copy = Kind::new(sc, "StorageClass")
            .at(&env.tenant(t), "", &public)
            .until("public StorageClass copied", |_| true)
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
    Kind::new(sc, "StorageClass")
        .at(&a, "", &public)
        .merge(json!({"metadata": {"labels": {"mine": "yes"}}, "mountOptions": ["debug"]}))
        .await?;
    Kind::new(sc, "StorageClass")
        .at(&a, "", &public)
        .until("tenant edit reverted", |o| {
            o.get("mountOptions").is_none() && o["metadata"]["labels"].get("mine").is_none()
        })
        .await?;
    ensure!(
        Kind::new(sc, "StorageClass")
            .at(&a, "", &private)
            .get()
            .await?
            .is_none(),
        "a private StorageClass stays in the super cluster"
    );
    // No longer public: it leaves every tenant.
    Kind::new(sc, "StorageClass")
        .at(&s, "", &public)
        .merge(json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": null}}}))
        .await?;
    for t in ["team-a", "team-b"] {
        Kind::new(sc, "StorageClass")
            .at(&env.tenant(t), "", &public)
            .until_gone("de-selected StorageClass removed")
            .await?;
    }
    Kind::new(sc, "StorageClass")
        .at(&s, "", &public)
        .merge(json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": "true"}}}))
        .await?;
    Kind::new(sc, "StorageClass")
        .at(&a, "", &public)
        .until("public again", |_| true)
        .await?;
    Kind::new(sc, "StorageClass")
        .at(&s, "", &public)
        .delete()
        .await?;
    Kind::new(sc, "StorageClass")
        .at(&s, "", &private)
        .delete()
        .await?;
    for t in ["team-a", "team-b"] {
        Kind::new(sc, "StorageClass")
            .at(&env.tenant(t), "", &public)
            .until_gone("deleted StorageClass removed")
            .await?;
    }
    env.finish(ferry).await
}
live!(public_storage_class: admin, rbac);

pub async fn secret_followed_and_collected(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "secret").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    // Reflector would copy a Secret so annotated across the super cluster: a dependency
    // carries none of its annotations down (policies/library/core/core.yaml gives no annotations.allow).
    let reflected = json!({"reflector.v1.k8s.emberstack.com/reflection-allowed": "true", "example.com/owner": "shop"});
    for name in ["creds", "spare"] {
        create(&a, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns, "annotations": reflected}, "stringData": {"password": "hunter2"}})).await?;
    }
    create(&a, database(&ns, "plain", db_spec("small"))).await?;
    DATABASE
        .at(&s, &super_ns, "plain")
        .until("unrelated copy", |_| true)
        .await?;
    ensure!(
        Kind::new("v1", "Secret")
            .at(&s, &super_ns, "creds")
            .get()
            .await?
            .is_none(),
        "an unreferenced Secret stays in the tenant"
    );
    let mut spec = db_spec("small");
    spec["credentialsRef"] = json!({"name": "creds", "key": "password"});
    create(&a, database(&ns, "orders", spec)).await?;
    let secret = Kind::new("v1", "Secret")
        .at(&s, &super_ns, "creds")
        .until("referenced Secret follows", |_| true)
        .await?;
    ensure!(
        secret["metadata"]["labels"]["ferry.dev/tenant"] == "team-a",
        "{secret:#}"
    );
    let carried: Vec<&String> = secret["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| !k.starts_with("ferry.dev/"))
        .collect();
    ensure!(carried.is_empty(), "a dependency carried {carried:?} down");
    ensure!(
        Kind::new("v1", "Secret")
            .at(&s, &super_ns, "spare")
            .get()
            .await?
            .is_none(),
        "the other Secret stays"
    );
    DATABASE
        .at(&a, &ns, "orders")
        .merge(json!({"spec": {"credentialsRef": {"name": "spare"}}}))
        .await?;
    Kind::new("v1", "Secret")
        .at(&s, &super_ns, "spare")
        .until("newly referenced Secret follows", |_| true)
        .await?;
    Kind::new("v1", "Secret")
        .at(&s, &super_ns, "creds")
        .until_gone("unreferenced Secret collected")
        .await?;
    DATABASE.at(&a, &ns, "orders").delete().await?;
    Kind::new("v1", "Secret")
        .at(&s, &super_ns, "spare")
        .until_gone("Secret of a deleted referrer collected")
        .await?;
    env.finish(ferry).await
}
live!(secret_followed_and_collected: admin, rbac);

/// A kind approved before its CRD exists: reported, retried, and synced once served.
pub async fn kind_served_later(identity: Identity) -> Result<()> {
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
        Kind::new("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .at(&client, "", &format!("widgets.{group}"))
            .until("CRD established", |o| {
                o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
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
        Kind::new("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .at(&client, "", &format!("widgets.{group}"))
            .delete()
            .await?;
    }
    env.finish(ferry).await
}
live!(kind_served_later: admin);
