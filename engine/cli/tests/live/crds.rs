//! Public CustomResourceDefinitions: a CRD the platform labels public reaches every tenant
//! (without its conversion webhook), an instance syncs down, and un-publishing removes the
//! copy only from tenants that hold no instance of it.

use super::*;

const CRD: Kind = Kind::new("apiextensions.k8s.io/v1", "CustomResourceDefinition");

fn established(o: &Value) -> bool {
    o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Established" && c["status"] == "True")
}

pub async fn public_crd(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "public-crd").await?;
    let group = format!("{}.example.com", unique("pub"));
    let name = format!("caches.{group}");
    let policy = env.dir.join("crds.yaml");
    std::fs::write(
        &policy,
        format!("apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nmetadata: {{name: crds}}\nspec:\n  resources:\n  - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, direction: fromSuper, scope: Cluster}}\n  - {{apiVersion: {group}/v1, kind: Cache, direction: toSuper}}\n"),
    )?;
    let mut settings = env.settings(&["team-a", "team-b"]);
    settings.policy = policy;
    let ferry = env.start(&settings, "ferry.log").await?;
    let s = env.super_();
    let version = |v: &str, storage: bool| json!({"name": v, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    create(&s, json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
        "spec": {
            "group": group,
            "names": {"kind": "Cache", "plural": "caches", "singular": "cache", "listKind": "CacheList"},
            "scope": "Namespaced",
            "versions": [version("v1", true), version("v1beta1", false)],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://conversion.platform.invalid/convert"}}},
        },
    }))
    .await?;
    for t in ["team-a", "team-b"] {
        let copy = CRD
            .at(&env.tenant(t), "", &name)
            .until("public CRD copied and established", established)
            .await?;
        ensure!(
            copy["metadata"]["labels"]["ferry.dev/from-super"] == "true"
                && copy["spec"]["conversion"]["strategy"] == "None",
            "{copy:#}"
        );
    }
    // team-a creates an instance; it syncs down.
    let a = env.tenant("team-a");
    let ns = env.namespace("team-a", "cache").await?;
    let cache = Kind::new(Box::leak(format!("{group}/v1").into_boxed_str()), "Cache");
    create(&a, json!({"apiVersion": format!("{group}/v1"), "kind": "Cache", "metadata": {"name": "sessions", "namespace": ns}, "spec": {"size": "1Gi"}})).await?;
    cache
        .at(&s, &format!("team-a-{ns}"), "sessions")
        .until("instance synced down", |_| true)
        .await?;
    // Un-published: gone from team-b, kept in team-a (which holds an instance) with an Event.
    CRD.at(&s, "", &name)
        .merge(json!({"metadata": {"labels": {"tenancy.x-k8s.io/super.public": null}}}))
        .await?;
    CRD.at(&env.tenant("team-b"), "", &name)
        .until_gone("copy removed from a tenant without instances")
        .await?;
    let note = until_event(&a, "default", &name, "CRDInUse").await?;
    ensure!(note.contains("holds Cache objects"), "{note}");
    ensure!(
        CRD.at(&a, "", &name).get().await?.is_some(),
        "the copy stays while team-a holds a Cache"
    );
    cache.at(&a, &ns, "sessions").delete().await?;
    CRD.at(&a, "", &name)
        .until_gone("copy removed once the instances are gone")
        .await?;
    CRD.at(&s, "", &name).delete().await?;
    env.finish(ferry).await
}
live!(public_crd: admin);
