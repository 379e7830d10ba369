//! Objects super-side controllers produce for a tenant's synced object flow up: a
//! Certificate's Secret (named by `spec.secretName`) and a ConfigMap owned by a Database's
//! copy. The test plays the controllers.

use super::*;

const SECRET: Kind = Kind::new("v1", "Secret");
const CONFIG_MAP: Kind = Kind::new("v1", "ConfigMap");
const CERTIFICATE: Kind = Kind::new("cert-manager.io/v1", "Certificate");

fn certificate(ns: &str, name: &str, secret: &str) -> Value {
    json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"secretName": secret, "dnsNames": [format!("{name}.team-a.apps.example.com")], "issuerRef": {"name": "ca", "kind": "Issuer"}},
    })
}

fn tls_secret(ns: &str, name: &str, crt: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": ns, "annotations": {"cert-manager.io/certificate-name": name}},
        "stringData": {"tls.crt": crt, "tls.key": "key"},
    })
}

/// The base64 text of `key` in a Secret's data.
fn data(secret: &Value, key: &str) -> String {
    secret["data"][key].as_str().unwrap_or_default().to_string()
}

pub async fn produced_objects_flow_up(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "produced").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "certs").await?;
    let super_ns = format!("team-a-{ns}");

    // A Certificate goes down; cert-manager (the test) writes its Secret in the super.
    create(&a, certificate(&ns, "web", "web-tls")).await?;
    CERTIFICATE
        .at(&s, &super_ns, "web")
        .until("Certificate copy", |_| true)
        .await?;
    let produced = create(&s, tls_secret(&super_ns, "web-tls", "first")).await?;
    let copy = SECRET
        .at(&a, &ns, "web-tls")
        .until("produced Secret copied up", |_| true)
        .await?;
    let meta = &copy["metadata"];
    ensure!(meta["labels"]["ferry.dev/from-super"] == "true", "{copy:#}");
    ensure!(
        meta["annotations"]["ferry.dev/super-uid"] == produced["metadata"]["uid"],
        "{copy:#}"
    );
    ensure!(
        meta["annotations"]["ferry.dev/produced-for"] == "cert-manager.io/Certificate/web",
        "{copy:#}"
    );
    ensure!(
        copy["type"] == "kubernetes.io/tls" && data(&copy, "tls.crt") == data(&produced, "tls.crt"),
        "{copy:#}"
    );

    // Read-only: an edit is reverted, a deleted copy comes back; a renewal follows.
    SECRET
        .at(&a, &ns, "web-tls")
        .merge(json!({"stringData": {"tls.crt": "forged"}}))
        .await?;
    SECRET
        .at(&a, &ns, "web-tls")
        .until("edit reverted", |o| {
            data(o, "tls.crt") == data(&produced, "tls.crt")
        })
        .await?;
    SECRET.at(&a, &ns, "web-tls").delete().await?;
    SECRET
        .at(&a, &ns, "web-tls")
        .until("deleted copy back", |o| {
            o["metadata"]["labels"]["ferry.dev/from-super"] == "true"
        })
        .await?;
    let renewed = SECRET
        .at(&s, &super_ns, "web-tls")
        .merge(json!({"stringData": {"tls.crt": "second"}}))
        .await?;
    SECRET
        .at(&a, &ns, "web-tls")
        .until("renewal copied", |o| {
            data(o, "tls.crt") == data(&renewed, "tls.crt")
        })
        .await?;

    // An object a Database's copy owns (controller ownerReference) flows up; one it does not
    // own stays in the super cluster.
    create(&a, database(&ns, "orders", db_spec("small"))).await?;
    let db_copy = DATABASE
        .at(&s, &super_ns, "orders")
        .until("Database copy", |_| true)
        .await?;
    let owner = json!([{"apiVersion": DB, "kind": "Database", "name": "orders", "uid": db_copy["metadata"]["uid"], "controller": true}]);
    create(&s, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orders-conn", "namespace": super_ns, "ownerReferences": owner}, "data": {"host": "orders.db.internal"}})).await?;
    create(&s, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated", "namespace": super_ns}, "data": {"x": "y"}})).await?;
    let conn = CONFIG_MAP
        .at(&a, &ns, "orders-conn")
        .until("owned ConfigMap copied up", |_| true)
        .await?;
    ensure!(conn["data"]["host"] == "orders.db.internal", "{conn:#}");
    ensure!(
        conn["metadata"]["annotations"]["ferry.dev/produced-for"] == "example.com/Database/orders",
        "{conn:#}"
    );

    // The tenant's own object of the same name is never overwritten: Event on the referrer.
    create(&a, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": ns}, "stringData": {"own": "yes"}})).await?;
    create(&a, certificate(&ns, "api", "mine")).await?;
    CERTIFICATE
        .at(&s, &super_ns, "api")
        .until("second Certificate copy", |_| true)
        .await?;
    create(&s, tls_secret(&super_ns, "mine", "theirs")).await?;
    let note = until_event(&a, &ns, "api", "SyncConflict").await?;
    ensure!(note.contains("its own Secret"), "{note}");
    drained(&ferry).await?;
    let own = SECRET
        .at(&a, &ns, "mine")
        .get()
        .await?
        .context("own Secret")?;
    ensure!(
        own["metadata"]["labels"]
            .get("ferry.dev/from-super")
            .is_none()
            && data(&own, "own") == "eWVz",
        "the tenant's own Secret is untouched: {own:#}"
    );

    // Never a loop: nothing ferry copied up went back down.
    ensure!(
        CONFIG_MAP.at(&a, &ns, "unrelated").get().await?.is_none(),
        "an unowned ConfigMap stays in the super cluster"
    );
    let original = SECRET
        .at(&s, &super_ns, "web-tls")
        .get()
        .await?
        .context("produced Secret")?;
    ensure!(
        original["metadata"]["labels"]
            .get("ferry.dev/tenant")
            .is_none()
            && original["metadata"]["uid"] == produced["metadata"]["uid"],
        "the produced Secret is the controller's, untouched by ferry: {original:#}"
    );

    // Collected when what it was produced for goes.
    CERTIFICATE.at(&a, &ns, "web").delete().await?;
    SECRET
        .at(&a, &ns, "web-tls")
        .until_gone("copy collected with its Certificate")
        .await?;
    DATABASE.at(&a, &ns, "orders").delete().await?;
    CONFIG_MAP
        .at(&a, &ns, "orders-conn")
        .until_gone("copy collected with its Database")
        .await?;
    env.finish(ferry).await
}
live!(produced_objects_flow_up: admin, rbac);

/// A service-account token never comes up: the super cluster's token controller fills such a
/// Secret with a credential for the super cluster's own API server. A Certificate naming one
/// gets an Event `Forbidden`, and the tenant never holds a copy, while a sibling's produced
/// Secret does flow up.
pub async fn token_secrets_never_cross(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "token").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    let ns = env.namespace("team-a", "certs").await?;
    let super_ns = format!("team-a-{ns}");
    for name in ["web", "svc"] {
        create(&a, certificate(&ns, name, &format!("{name}-secret"))).await?;
        CERTIFICATE
            .at(&s, &super_ns, name)
            .until("Certificate copy", |_| true)
            .await?;
    }
    create(&s, tls_secret(&super_ns, "web-secret", "cert")).await?;
    create(
        &s,
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "svc-secret", "namespace": super_ns,
                         "annotations": {"kubernetes.io/service-account.name": "default"}},
        }),
    )
    .await?;
    SECRET
        .at(&a, &ns, "web-secret")
        .until("the sibling's produced Secret copied up", |_| true)
        .await?;
    let note = until_event(&a, &ns, "svc", "Forbidden").await?;
    ensure!(note.contains("service-account-token"), "{note}");
    drained(&ferry).await?;
    ensure!(
        SECRET.at(&a, &ns, "svc-secret").get().await?.is_none(),
        "a service-account token Secret was copied into the tenant"
    );
    env.finish(ferry).await
}
live!(token_secrets_never_cross: admin, rbac);
