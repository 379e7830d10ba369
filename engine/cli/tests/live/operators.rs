//! Operator shapes beyond one object in one namespace: a kind without a schema file whose
//! status flows up under the roles `ferry rbac` prints (the shipped Ingress policy), a kind
//! whose copies go to the operator's own namespace (`placement`, Velero's shape), and a
//! cluster-scoped object whose produced connection Secret comes up (a Crossplane composite's
//! shape). The test plays the operators.

use super::*;

const INGRESS: Kind = Kind::new("networking.k8s.io/v1", "Ingress");
const SNAPSHOT: Kind = Kind::new("example.com/v1", "Snapshot");
const BUCKET: Kind = Kind::new("example.com/v1", "Bucket");
const SECRET: Kind = Kind::new("v1", "Secret");

pub async fn status_without_schema_flows_up(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "ingress-status").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "web").await?;
    let host = "shop.team-a.apps.example.com";
    create(
        &a,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "shop", "namespace": ns},
            "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]}}]},
        }),
    )
    .await?;
    let copy = INGRESS.at(&s, &format!("team-a-{ns}"), "shop");
    copy.until("Ingress copy", |_| true).await?;
    // The ingress controller (the test) publishes the load balancer through /status.
    copy.merge_status(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}))
        .await?;
    INGRESS
        .at(&a, &ns, "shop")
        .until("Ingress status up", |o| {
            o["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.7"
        })
        .await?;
    env.finish(ferry).await
}
live!(status_without_schema_flows_up: admin, rbac);

/// The platform's namespace for Snapshot copies (`policies/examples/operators.yaml`).
const SNAPSHOTS: &str = "snapshots";

pub async fn placed_kind_round_trips(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "placed").await?;
    let s = env.super_();
    // The platform's namespace exists before any copy goes there.
    let _ = create(
        &s,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SNAPSHOTS}}),
    )
    .await;
    let ferry = env.ferry(&["team-a"]).await?;
    let a = env.tenant("team-a");
    let ns = env.namespace("team-a", "backup").await?;
    let snapshot = |name: &str, spec: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    create(&a, snapshot("nightly", json!({"includedNamespaces": [ns]}))).await?;
    create(
        &a,
        snapshot(
            "restore",
            json!({"includedNamespaces": [ns], "restoreFrom": "nightly"}),
        ),
    )
    .await?;
    let copy = SNAPSHOT.at(&s, SNAPSHOTS, &format!("team-a-{ns}-nightly"));
    let found = copy
        .until("Snapshot copy in the operator's namespace", |_| true)
        .await?;
    ensure!(
        found["spec"]["includedNamespaces"] == json!([format!("team-a-{ns}")])
            && found["metadata"]["labels"]["ferry.dev/tenant"] == "team-a"
            && found["metadata"]["annotations"]["ferry.dev/tenant-namespace"] == ns.as_str()
            && found["metadata"]["annotations"]["ferry.dev/tenant-name"] == "nightly",
        "{found:#}"
    );
    let restore = SNAPSHOT
        .at(&s, SNAPSHOTS, &format!("team-a-{ns}-restore"))
        .until("second copy", |_| true)
        .await?;
    ensure!(
        restore["spec"]["restoreFrom"] == format!("team-a-{ns}-nightly"),
        "{restore:#}"
    );
    // Nothing of the tenant lands in its own super namespace for this kind.
    ensure!(
        SNAPSHOT
            .at(&s, &format!("team-a-{ns}"), "nightly")
            .get()
            .await?
            .is_none(),
        "a Snapshot copy in the tenant's super namespace"
    );
    // The operator reports; the tenant sees it under its own names.
    copy.merge_status(json!({"status": {"phase": "Completed",
        "message": format!("snapshot of team-a-{ns} stored")}}))
        .await?;
    let tenant = SNAPSHOT
        .at(&a, &ns, "nightly")
        .until("status up", |o| o["status"]["phase"] == "Completed")
        .await?;
    ensure!(
        tenant["status"]["message"] == format!("snapshot of {ns} stored"),
        "{tenant:#}"
    );
    // The tenant object goes: so does its copy.
    SNAPSHOT.at(&a, &ns, "nightly").delete().await?;
    copy.until_gone("copy deleted with the tenant object")
        .await?;
    env.finish(ferry).await
}
live!(placed_kind_round_trips: admin, rbac);

pub async fn produced_for_cluster_scoped(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "bucket").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "data").await?;
    let super_ns = format!("team-a-{ns}");
    let name = unique("bkt");
    create(
        &a,
        json!({"apiVersion": "example.com/v1", "kind": "Bucket", "metadata": {"name": name},
            "spec": {"region": "eu", "writeConnectionSecretToRef": {"name": "conn", "namespace": ns}}}),
    )
    .await?;
    let copy = BUCKET
        .at(&s, "", &format!("team-a-{name}"))
        .until("Bucket copy", |_| true)
        .await?;
    ensure!(
        copy["spec"]["writeConnectionSecretToRef"]["namespace"] == super_ns.as_str(),
        "{copy:#}"
    );
    // ferry made the super namespace the copy names; the bucket's controller (the test)
    // writes the connection Secret there.
    Kind::new("v1", "Namespace")
        .at(&s, "", &super_ns)
        .until("the named namespace's super namespace", |_| true)
        .await?;
    create(
        &s,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "conn", "namespace": super_ns},
            "stringData": {"endpoint": "bucket.example.com"}}),
    )
    .await?;
    let secret = SECRET
        .at(&a, &ns, "conn")
        .until("connection Secret up", |_| true)
        .await?;
    ensure!(
        secret["metadata"]["labels"]["ferry.dev/from-super"] == "true"
            && secret["metadata"]["annotations"]["ferry.dev/produced-for"]
                == format!("example.com/Bucket/{name}"),
        "{secret:#}"
    );
    // Nothing names it any more: the tenant's copy goes.
    BUCKET.at(&a, "", &name).delete().await?;
    SECRET
        .at(&a, &ns, "conn")
        .until_gone("connection Secret removed with its bucket")
        .await?;
    env.finish(ferry).await
}
live!(produced_for_cluster_scoped: admin, rbac);
