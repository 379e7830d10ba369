//! Objects flow down, status flows up, and drift on either side is repaired.

use super::*;

pub async fn propagation(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "propagation").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "shop").await?;
    let super_ns = format!("team-a-{ns}");
    let created = create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let copy = DATABASE
        .at(&s, &super_ns, "orders")
        .until("super copy", |_| true)
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
    let namespace = Kind::new("v1", "Namespace")
        .at(&s, "", &super_ns)
        .get()
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

    DATABASE
        .at(&a, &ns, "orders")
        .merge(json!({"spec": {"tier": "large"}}))
        .await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until("update reaches the super copy", |o| {
            o["spec"]["resources"]["cpu"] == "8"
        })
        .await?;
    // A field the tenant removes goes from the copy too (the copy was created with a POST,
    // which made ferry an Update manager of the field), and what the platform added stays.
    DATABASE
        .at(&s, &super_ns, "orders")
        .merge(json!({"metadata": {"annotations": {"platform.example/keep": "yes"}}}))
        .await?;
    DATABASE
        .at(&a, &ns, "orders")
        .merge(json!({"spec": {"version": null}, "metadata": {"labels": {"team": "payments"}}}))
        .await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until("label reaches the super copy", |o| {
            o["metadata"]["labels"]["team"] == "payments"
        })
        .await?;
    DATABASE
        .at(&a, &ns, "orders")
        .merge(json!({"metadata": {"labels": {"team": null}}}))
        .await?;
    let copy = DATABASE
        .at(&s, &super_ns, "orders")
        .until("removals reach the super copy", |o| {
            o["spec"].get("version").is_none()
                && o["metadata"]["labels"].get("team").is_none()
                && o["spec"]["engine"] == "postgres"
        })
        .await?;
    ensure!(
        copy["metadata"]["annotations"]["platform.example/keep"] == "yes",
        "the platform's annotation stays: {copy:#}"
    );
    let update_entries = copy["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["manager"] == "ferry" && m["operation"] == "Update")
        .count();
    ensure!(
        update_entries == 0,
        "the create's Update entry went with the removed field: {copy:#}"
    );

    let class = unique("gold");
    create(&a, json!({"apiVersion": DB, "kind": "DatabaseClass", "metadata": {"name": class}, "spec": {"engine": "postgres"}})).await?;
    let super_class = format!("team-a-{class}");
    Kind::new(DB, "DatabaseClass")
        .at(&s, "", &super_class)
        .until("cluster-scoped copy renamed", |o| {
            o["metadata"]["annotations"]["ferry.dev/tenant-name"] == class.as_str()
        })
        .await?;

    DATABASE.at(&a, &ns, "orders").delete().await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until_gone("delete reaches the super cluster")
        .await?;
    Kind::new(DB, "DatabaseClass")
        .at(&a, "", &class)
        .delete()
        .await?;
    Kind::new(DB, "DatabaseClass")
        .at(&s, "", &super_class)
        .until_gone("cluster-scoped delete")
        .await?;
    env.finish(ferry).await
}
live!(propagation: admin, rbac);

pub async fn status_flows_up(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "status").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let (ns, super_ns, _) = env.orders("super copy").await?;
    DATABASE.at(&s, &super_ns, "orders").merge_status( json!({"status": {"phase": "Ready", "primaryNamespace": super_ns, "conditions": [{"type": "Ready", "status": "True", "message": format!("primary in {super_ns} is up")}]}})).await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .merge(json!({"spec": {"endpoint": "orders.db:5432"}}))
        .await?;
    let up = DATABASE
        .at(&a, &ns, "orders")
        .until("status and super-owned field flow up", |o| {
            o["status"]["phase"] == "Ready" && o["spec"]["endpoint"] == "orders.db:5432"
        })
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
live!(status_flows_up: admin, rbac);

/// A super controller's status arriving while ferry reconciles the tenant's own change of
/// the same object is never lost: a key is settled only with the copy's version that its
/// reconcile looked at, not with a newer one the watch brought meanwhile (the patrol does not
/// look at a settled key again).
pub async fn status_racing_tenant_writes(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "status-race").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "race").await?;
    let super_ns = format!("team-a-{ns}");
    for round in 0..10 {
        let name = format!("race-{round}");
        create(&a, database(&ns, &name, db_spec("small"))).await?;
        let (tenant, copy) = (
            DATABASE.at(&a, &ns, &name),
            DATABASE.at(&s, &super_ns, &name),
        );
        copy.until("super copy", |_| true).await?;
        // A tenant change that goes down (a translation, a transform, an apply) or stays in
        // the tenant (its own status field), then at once the super's status: two watch
        // events of one key close together, while ferry may still be on the create's.
        if round % 2 == 0 {
            tenant
                .merge_status(json!({"status": {"observedTier": "small"}}))
                .await?;
        } else {
            tenant
                .merge(json!({"metadata": {"labels": {"round": round.to_string()}}}))
                .await?;
        }
        copy.merge_status(json!({"status": {"phase": "Ready"}}))
            .await?;
        tenant
            .until(&format!("{name}'s status flows up"), |o| {
                o["status"]["phase"] == "Ready"
            })
            .await?;
    }
    env.finish(ferry).await
}
live!(status_racing_tenant_writes: admin, rbac);

pub async fn drift_repaired(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "drift").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let (ns, super_ns, copy) = env.orders("super copy").await?;
    // Down: an edit of the super copy is reverted; a deleted copy comes back.
    DATABASE
        .at(&s, &super_ns, "orders")
        .merge(json!({"spec": {"engine": "mysql"}}))
        .await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until("super edit reverted", |o| o["spec"]["engine"] == "postgres")
        .await?;
    DATABASE.at(&s, &super_ns, "orders").delete().await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .until("deleted copy recreated", |o| {
            o["metadata"]["uid"] != copy["metadata"]["uid"]
        })
        .await?;
    // Up: a tenant edit of the status ferry writes is reverted.
    ready_flows_up(
        &DATABASE.at(&s, &super_ns, "orders"),
        &DATABASE.at(&a, &ns, "orders"),
    )
    .await?;
    DATABASE
        .at(&a, &ns, "orders")
        .merge_status(json!({"status": {"phase": "Forged"}}))
        .await?;
    DATABASE
        .at(&a, &ns, "orders")
        .until("tenant status edit reverted", |o| {
            o["status"]["phase"] == "Ready"
        })
        .await?;
    env.finish(ferry).await
}
live!(drift_repaired: admin, rbac);
