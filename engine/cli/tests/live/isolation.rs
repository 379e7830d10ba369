//! What a tenant cannot do: take another's objects or namespaces, get past a refusal without an
//! Event, reference what the super cluster does not publish, write through `to_tenant`.

use super::*;

pub async fn unowned_left_alone(identity: Identity) -> Result<()> {
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
    let other = DATABASE
        .at(&s, &super_ns, "orders")
        .get()
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
        DATABASE.at(&s, &taken, "orders").get().await?.is_none(),
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
live!(unowned_left_alone: admin, rbac);

pub async fn tenants_isolated(identity: Identity) -> Result<()> {
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
    DATABASE
        .at(&s, &sa, "orders")
        .until("team-a copy", |o| o["spec"]["resources"]["cpu"] == "500m")
        .await?;
    DATABASE
        .at(&s, &sb, "orders")
        .until("team-b copy", |o| {
            o["spec"]["resources"]["cpu"] == "8"
                && o["metadata"]["labels"]["ferry.dev/tenant"] == "team-b"
        })
        .await?;
    ready_flows_up(
        &DATABASE.at(&s, &sa, "orders"),
        &DATABASE.at(&a, &ns, "orders"),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = DATABASE
        .at(&b, &ns, "orders")
        .get()
        .await?
        .context("team-b object")?;
    ensure!(
        other
            .get("status")
            .is_none_or(|st| st.get("phase").is_none()),
        "team-b got team-a's status: {other:#}"
    );
    DATABASE.at(&a, &ns, "orders").delete().await?;
    DATABASE
        .at(&s, &sa, "orders")
        .until_gone("team-a copy deleted")
        .await?;
    ensure!(
        DATABASE.at(&s, &sb, "orders").get().await?.is_some(),
        "team-b copy stays"
    );
    env.finish(ferry).await
}
live!(tenants_isolated: admin, rbac);

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
/// beside it) and `extra` lines for its entry (or further entries).
pub fn database_policy(dir: &Path, name: &str, script: &str, extra: &str) -> Result<PathBuf> {
    use sha2::{Digest, Sha256};
    std::fs::write(dir.join(format!("{name}.star")), script)?;
    let pin: String = Sha256::digest(script.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let schema = ferry_testkit::root().join("policies/examples/schemas/databases.example.com.yaml");
    let policy = format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nmetadata: {{name: {name}}}\nspec:\n  resources:\n  - apiVersion: example.com/v1\n    kind: Database\n    direction: toSuper\n    schema: {}\n    transforms: [{name}]\n{extra}  transforms:\n  - name: {name}\n    file: {name}.star\n    sha256: {pin}\n",
        schema.display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, policy)?;
    Ok(path)
}

pub async fn refusals_are_events(identity: Identity) -> Result<()> {
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
    DATABASE
        .at(&s, &super_ns, "fine")
        .until("an accepted object still syncs", |_| true)
        .await?;
    for name in ["old", "secret", "skipped"] {
        ensure!(
            DATABASE.at(&s, &super_ns, name).get().await?.is_none(),
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
    DATABASE
        .at(&a, &ns, "old")
        .merge(json!({"spec": {"version": "16"}}))
        .await?;
    DATABASE
        .at(&s, &super_ns, "old")
        .until("a fixed object syncs", |_| true)
        .await?;
    env.finish(ferry).await
}
live!(refusals_are_events: admin, rbac);

const CERT: &str = "cert-manager.io/v1";

fn certificate(ns: &str, name: &str, issuer: &str) -> Value {
    json!({
        "apiVersion": CERT,
        "kind": "Certificate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "secretName": format!("{name}-tls"),
            "dnsNames": ["shop.team-a.apps.example.com"],
            "issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": issuer},
        },
    })
}

/// The guard live: a reference to a public kind must name an object the super cluster
/// publishes; a tenant's copy labelled public is not published.
pub async fn unpublished_references_refused(identity: Identity) -> Result<()> {
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
    Kind::new(CERT, "Certificate")
        .at(&s, &super_ns, "shop")
        .until("a reference to a published ClusterIssuer syncs", |o| {
            o["spec"]["issuerRef"]["name"] == published.as_str()
        })
        .await?;
    for name in ["unpublished", "missing"] {
        let note = until_event(&a, &ns, name, "UnapprovedReference").await?;
        ensure!(note.contains("does not publish"), "{note}");
        ensure!(
            Kind::new(CERT, "Certificate")
                .at(&s, &super_ns, name)
                .get()
                .await?
                .is_none(),
            "{name} was written"
        );
    }
    // Un-published later: the synced reference is judged again at the copy's next change
    // (a controller's status update), though neither object's spec changed.
    Kind::new(CERT, "ClusterIssuer")
        .at(&s, "", &published)
        .merge(json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": "false"}}}))
        .await?;
    Kind::new(CERT, "Certificate")
        .at(&s, &super_ns, "shop")
        .merge_status(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
        .await?;
    let note = until_event(&a, &ns, "shop", "UnapprovedReference").await?;
    ensure!(note.contains("does not publish"), "{note}");
    for name in [&published, &private] {
        Kind::new(CERT, "ClusterIssuer")
            .at(&s, "", name)
            .delete()
            .await?;
    }
    env.finish(ferry).await
}
live!(unpublished_references_refused: admin, rbac);

/// A policy whose `to_tenant` writes the tenant's spec: the guard refuses what flows up.
fn leaky_policy(dir: &Path) -> Result<PathBuf> {
    let script = "def to_super(obj, ctx):\n    return obj\n\ndef to_tenant(obj, ctx):\n    obj[\"spec\"] = {\"tier\": \"large\"}\n    return obj\n";
    database_policy(dir, "leaky", script, "")
}

pub async fn to_tenant_writes_refused(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "leaky").await?;
    let mut settings = env.settings(&["team-a"]);
    settings.policy = leaky_policy(&env.dir)?;
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let (ns, super_ns, _) = env.orders("super copy").await?;
    DATABASE
        .at(&s, &super_ns, "orders")
        .merge_status(json!({"status": {"phase": "Ready"}}))
        .await?;
    let note = until_event(&a, &ns, "orders", "TransformFailed").await?;
    ensure!(note.contains("spec"), "{note}");
    let tenant = DATABASE
        .at(&a, &ns, "orders")
        .get()
        .await?
        .context("the tenant object")?;
    ensure!(
        tenant["spec"]["tier"] == "small" && tenant.get("status").is_none(),
        "nothing may be written to the tenant: {tenant:#}"
    );
    env.finish(ferry).await
}
live!(to_tenant_writes_refused: admin, rbac);

/// Sends `body` (`content_type`) as `method` to `path` of `client`'s API server, leaving the
/// answer unread: a typed client cannot parse an object nested 150 levels deep.
async fn send(
    client: &Client,
    method: http::Method,
    path: &str,
    content_type: &str,
    body: &Value,
) -> Result<()> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(serde_json::to_vec(body)?)?;
    client.request_text(request).await?;
    Ok(())
}

/// A tenant object nested deeper than ferry reads (150 levels: the API server stores and lists
/// it) and one using a key serde_json reserves: listed at ferry's start, the kind's list still
/// reads and ferry is ready; both are refused with an Event and nothing written; a neighbour
/// syncs; made shallow, the deep one syncs.
pub async fn deep_objects_refused(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "deep").await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "deep").await?;
    let super_ns = format!("team-a-{ns}");
    let issuers = format!("/apis/{CERT}/namespaces/{ns}/issuers");
    let nested = (0..150).fold(json!({}), |inner, _| json!({ "x": inner }));
    let deep = json!({"apiVersion": CERT, "kind": "Issuer",
        "metadata": {"name": "deep", "namespace": ns}, "spec": {"selfSigned": nested}});
    send(&a, http::Method::POST, &issuers, "application/json", &deep).await?;
    // serde_json's own key for JSON kept as text, which its `Value` reads as that JSON.
    let reserved = json!({"apiVersion": CERT, "kind": "Issuer",
        "metadata": {"name": "reserved", "namespace": ns},
        "spec": {"selfSigned": {"$serde_json::private::RawValue": "{\"crlDistributionPoints\":[\"x\"]}"}}});
    send(
        &a,
        http::Method::POST,
        &issuers,
        "application/json",
        &reserved,
    )
    .await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let note = until_event(&a, &ns, "deep", "Invalid").await?;
    ensure!(note.contains("nested deeper"), "{note}");
    let note = until_event(&a, &ns, "reserved", "Invalid").await?;
    ensure!(note.contains("serde_json reserves"), "{note}");
    let issuer = Kind::new(CERT, "Issuer");
    create(
        &a,
        json!({"apiVersion": CERT, "kind": "Issuer",
        "metadata": {"name": "fine", "namespace": ns}, "spec": {"selfSigned": {}}}),
    )
    .await?;
    issuer
        .at(&s, &super_ns, "fine")
        .until("a neighbour of the deep object syncs", |_| true)
        .await?;
    for name in ["deep", "reserved"] {
        ensure!(
            issuer.at(&s, &super_ns, name).get().await?.is_none(),
            "{name} was written"
        );
    }
    // The tenant's own status holding the same key around JSON 120 levels deep: ferry's
    // status writes answer with it, and the answer is read as the watch is (parsed by
    // serde_json's `Value`, it would hold 124 levels, which the cache cannot read back: the
    // object would look gone and its copy be deleted).
    let copy_uid = |o: &Value| o["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let before = copy_uid(
        &issuer
            .at(&s, &super_ns, "fine")
            .get()
            .await?
            .context("the copy")?,
    );
    let inner = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    let status = json!({"status": {"x": {"$serde_json::private::RawValue": inner}}});
    let fine_status = format!("{issuers}/fine/status");
    send(
        &a,
        http::Method::PATCH,
        &fine_status,
        "application/merge-patch+json",
        &status,
    )
    .await?;
    issuer
        .at(&s, &super_ns, "fine")
        .merge_status(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
        .await?;
    issuer
        .at(&a, &ns, "fine")
        .until("the super's status flows up beside the tenant's", |o| {
            o["status"]["conditions"][0]["type"] == "Ready"
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = issuer
        .at(&s, &super_ns, "fine")
        .get()
        .await?
        .context("the copy")?;
    ensure!(
        copy_uid(&after) == before,
        "the copy was deleted and made again"
    );
    let shallow = json!({"spec": {"selfSigned": {"x": null}}});
    let path = format!("{issuers}/deep");
    send(
        &a,
        http::Method::PATCH,
        &path,
        "application/merge-patch+json",
        &shallow,
    )
    .await?;
    issuer
        .at(&s, &super_ns, "deep")
        .until("the object made shallow syncs", |_| true)
        .await?;
    env.finish(ferry).await
}
live!(deep_objects_refused: admin, rbac);
