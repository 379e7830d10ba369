//! Names a tenant owns beyond namespaces, live: platform namespaces ferry never touches,
//! namespace labels that cross only when allowed, a tenant's names bound to its cluster.

use super::*;

const NAMESPACE: Kind = Kind::new("v1", "Namespace");

/// The uid of `client`'s cluster's kube-system namespace.
async fn cluster_uid(client: &Client) -> Result<String> {
    let ns = kube::Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?;
    ns.metadata.uid.context("kube-system has no uid")
}

/// A tenant namespace whose super name is a platform namespace is refused (`OutsideTenant`
/// on the tenant namespace and its object): its super namespace is never created, nor
/// written when it exists (even one that carries the tenant's ownership metadata).
pub async fn platform_namespaces_untouched(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "platform").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.spec.insert(
        "platformNamespaces".into(),
        json!(["kube-*", "team-a-plat?-*"]),
    );
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    // One platform namespace exists, made to look like ferry's (so that without the fence
    // ferry would adopt, label and fill it); the other does not.
    let taken = env.namespace("team-a", "platx").await?;
    let taken_super = format!("team-a-{taken}");
    let made = create(&s, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": taken_super, "labels": {"ferry.dev/tenant": "team-a"}, "annotations": {"ferry.dev/tenant-namespace": taken}}})).await?;
    env.cleanup.push((s.clone(), taken_super.clone()));
    let fresh = env.namespace("team-a", "platy").await?;
    let fresh_super = format!("team-a-{fresh}");
    NAMESPACE
        .at(&a, "", &taken)
        .merge(json!({"metadata": {"labels": {"tier": "gold"}}}))
        .await?;
    create(&a, database(&taken, "orders", db_spec("small"))).await?;
    create(&a, database(&fresh, "orders", db_spec("small"))).await?;
    // A namespace outside the platform's syncs meanwhile.
    let shop = env.namespace("team-a", "shop").await?;
    create(&a, database(&shop, "orders", db_spec("small"))).await?;
    DATABASE
        .at(&s, &format!("team-a-{shop}"), "orders")
        .until("the copy outside the platform's namespaces", |_| true)
        .await?;
    // Events on the tenant namespaces (cluster-scoped: in `default`) and their objects.
    for ns in [&taken, &fresh] {
        let note = until_event(&a, "default", ns, "OutsideTenant").await?;
        ensure!(note.contains("platformNamespaces"), "{note}");
        until_event(&a, ns, "orders", "OutsideTenant").await?;
    }
    drained(&ferry).await?;
    let now = NAMESPACE
        .at(&s, "", &taken_super)
        .get()
        .await?
        .context("the platform namespace")?;
    ensure!(
        now["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"],
        "the platform namespace was written: {now:#}"
    );
    ensure!(
        DATABASE
            .at(&s, &taken_super, "orders")
            .get()
            .await?
            .is_none(),
        "a copy was written into a platform namespace"
    );
    ensure!(
        NAMESPACE.at(&s, "", &fresh_super).get().await?.is_none(),
        "a platform namespace was created"
    );
    let refused = ferry
        .metric(
            "ferry_refusals_total",
            &[("tenant", "team-a"), ("reason", "OutsideTenant")],
        )
        .await?;
    ensure!(refused >= 4.0, "refusal metric: {refused}");
    env.finish(ferry).await
}
live!(platform_namespaces_untouched: admin, rbac);

/// Only the tenant namespace labels `namespaceLabels.allow` names reach the super namespace;
/// one the tenant removes goes, a changed value follows, and the platform's own label and
/// the API server's `kubernetes.io/metadata.name` stay as they are. A selector of namespaces
/// over another key is refused.
pub async fn namespace_labels_allowed_only(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "nslabels").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.spec.insert(
        "namespaceLabels".into(),
        json!({"allow": ["tier", "example.com/*"]}),
    );
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "labels").await?;
    let super_ns = format!("team-a-{ns}");
    let tenant_ns = NAMESPACE.at(&a, "", &ns);
    tenant_ns
        .merge(json!({"metadata": {"labels": {"tier": "gold", "example.com/cost": "a", "secret-project": "x"}}}))
        .await?;
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let copied = NAMESPACE
        .at(&s, "", &super_ns)
        .until("allowed labels copied", |n| {
            n["metadata"]["labels"]["tier"] == "gold"
                && n["metadata"]["labels"]["example.com/cost"] == "a"
        })
        .await?;
    let labels = &copied["metadata"]["labels"];
    ensure!(
        labels.get("secret-project").is_none(),
        "a label not allowed reached the super namespace: {copied:#}"
    );
    ensure!(
        labels["kubernetes.io/metadata.name"] == super_ns.as_str(),
        "{copied:#}"
    );
    NAMESPACE
        .at(&s, "", &super_ns)
        .merge(json!({"metadata": {"labels": {"platform-owned": "yes"}}}))
        .await?;
    tenant_ns
        .merge(json!({"metadata": {"labels": {"tier": null, "example.com/cost": "b"}}}))
        .await?;
    let followed = NAMESPACE
        .at(&s, "", &super_ns)
        .until("a removed label removed, a changed one changed", |n| {
            n["metadata"]["labels"].get("tier").is_none()
                && n["metadata"]["labels"]["example.com/cost"] == "b"
        })
        .await?;
    let labels = &followed["metadata"]["labels"];
    ensure!(
        labels["platform-owned"] == "yes"
            && labels["ferry.dev/tenant"] == "team-a"
            && labels.get("secret-project").is_none()
            && labels["kubernetes.io/metadata.name"] == super_ns.as_str(),
        "{followed:#}"
    );
    // A selector of namespaces selects only by the keys super namespaces carry.
    let class = shared_class(&s).await?;
    let gateway = |name: &str, key: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"gatewayClassName": class, "listeners": [{"name": "http", "hostname": "*.team-a.apps.example.com", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {key: "x"}}}}}]}})
    };
    create(&a, gateway("by-tier", "tier")).await?;
    create(&a, gateway("by-secret", "secret-project")).await?;
    let note = until_event(&a, &ns, "by-secret", "OutsideTenant").await?;
    ensure!(note.contains("namespaceLabels.allow"), "{note}");
    Kind::new("gateway.networking.k8s.io/v1", "Gateway")
        .at(&s, &super_ns, "by-tier")
        .until("a selector over an allowed key synced", |_| true)
        .await?;
    env.finish(ferry).await
}
live!(namespace_labels_allowed_only: admin, rbac);

/// A tenant's super namespaces record its cluster; the same tenant name reached through
/// another cluster is refused (nothing written, its first cluster's copies kept, an Event on
/// the super namespaces, `/readyz` saying why) while other tenants sync, until an admin
/// removes the annotation.
pub async fn names_bound_to_their_cluster(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "bound").await?;
    let mut tenant = unique("b");
    tenant.truncate(12);
    let tenant = tenant.trim_end_matches('-').to_string();
    let mut settings = env.settings(&[&tenant]);
    settings.clusters.insert(tenant.clone(), "team-a".into());
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, b, s) = (env.tenant("team-a"), env.tenant("team-b"), env.super_());
    let (uid_a, uid_b) = (cluster_uid(&a).await?, cluster_uid(&b).await?);
    let first = env.namespace("team-a", "bound").await?;
    let first_super = format!("{tenant}-{first}");
    env.cleanup.push((s.clone(), first_super.clone()));
    create(&a, database(&first, "orders", db_spec("small"))).await?;
    DATABASE
        .at(&s, &first_super, "orders")
        .until("the first cluster's copy", |_| true)
        .await?;
    let recorded =
        |n: &Value| n["metadata"]["annotations"]["ferry.dev/tenant-cluster"] == uid_a.as_str();
    NAMESPACE
        .at(&s, "", &first_super)
        .until("the super namespace records the cluster", recorded)
        .await?;
    // A super namespace without the annotation (made before bindings) is adopted.
    NAMESPACE
        .at(&s, "", &first_super)
        .merge(json!({"metadata": {"annotations": {"ferry.dev/tenant-cluster": null}}}))
        .await?;
    NAMESPACE
        .at(&s, "", &first_super)
        .until("a namespace without a binding adopted", recorded)
        .await?;
    // The tenant's kubeconfig now reaches team-b's cluster (as a re-added Secret would);
    // team-a runs beside it.
    let second = env.namespace("team-b", "bound").await?;
    let second_super = format!("{tenant}-{second}");
    env.cleanup.push((s.clone(), second_super.clone()));
    create(&b, database(&second, "orders", db_spec("small"))).await?;
    let mut moved = settings.clone();
    moved.tenants.push("team-a".into());
    moved.clusters.insert(tenant.clone(), "team-b".into());
    write_config(&env.dir, &moved, ferry.address.port())?;
    let note = until_event(&s, &first_super, &first_super, "OutsideTenant").await?;
    ensure!(note.contains(&uid_b) && note.contains(&uid_a), "{note}");
    ensure!(note.contains("ferry.dev/tenant-cluster-"), "{note}");
    // Ready (the refusal is the tenant's, not the engine's), and saying why.
    let listed = format!("{tenant}: not synced");
    eventually("/readyz lists the refused tenant", WAIT, || async {
        let (code, body) = ferry.get("/readyz").await?;
        Ok(
            (code == 200 && body.contains(&listed) && body.contains("tenant-cluster-"))
                .then_some(()),
        )
    })
    .await?;
    // The other tenant syncs meanwhile.
    let shop = env.namespace("team-a", "shop").await?;
    create(&a, database(&shop, "orders", db_spec("small"))).await?;
    DATABASE
        .at(&s, &format!("team-a-{shop}"), "orders")
        .until("the other tenant's copy", |_| true)
        .await?;
    // The refused tenant's keys wait in its closed queue; team-a's drains.
    let mut calm = 0;
    for _ in 0..600 {
        let depth = ferry
            .metric("ferry_queue_depth", &[("tenant", "team-a")])
            .await?;
        calm = if depth == 0.0 { calm + 1 } else { 0 };
        if calm == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(calm == 5, "team-a's queue did not drain:\n{}", ferry.log());
    ensure!(
        DATABASE
            .at(&s, &first_super, "orders")
            .get()
            .await?
            .is_some(),
        "the first cluster's copy was deleted by the second cluster's tenant"
    );
    ensure!(
        NAMESPACE.at(&s, "", &second_super).get().await?.is_none(),
        "the second cluster's namespace was synced"
    );
    let refused = ferry
        .metric(
            "ferry_refusals_total",
            &[("tenant", &tenant), ("reason", "OutsideTenant")],
        )
        .await?;
    ensure!(refused >= 1.0, "refusal metric: {refused}");
    // The admin releases the names: the tenant syncs from its new cluster, bound to it.
    let namespaces = kube::Api::<Namespace>::all(s.clone());
    let selector = format!("ferry.dev/tenant={tenant}");
    for ns in namespaces
        .list(&ListParams::default().labels(&selector))
        .await?
    {
        let name = ns.metadata.name.unwrap_or_default();
        NAMESPACE
            .at(&s, "", &name)
            .merge(json!({"metadata": {"annotations": {"ferry.dev/tenant-cluster": null}}}))
            .await?;
    }
    DATABASE
        .at(&s, &second_super, "orders")
        .until("synced once released", |_| true)
        .await?;
    NAMESPACE
        .at(&s, "", &second_super)
        .until("bound to the new cluster", |n| {
            n["metadata"]["annotations"]["ferry.dev/tenant-cluster"] == uid_b.as_str()
        })
        .await?;
    env.cleanup.push((s.clone(), format!("team-a-{shop}")));
    env.finish(ferry).await
}
live!(names_bound_to_their_cluster: admin, rbac);
