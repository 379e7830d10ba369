//! End-to-end smoke tests of the local control planes through kube-rs: the harness gives
//! real API servers that do what ferry needs (CRDs, watches, server-side apply, the status
//! subresource, Leases), and keeps the clusters apart.

use std::time::Duration;

use ferry_testkit::{fresh_namespace, install_crds, unique, Clusters};
use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    ValidationDirective,
};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

fn databases(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Database");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "databases"),
    )
}

fn database(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": name},
        "spec": {"engine": "postgres", "tier": "small", "allowedNamespaces": ["prod"]},
    }))
    .unwrap()
}

#[tokio::test]
async fn schemas_install_as_crds_in_every_cluster() {
    let clusters = Clusters::connect().await.unwrap();
    for client in std::iter::once(&clusters.super_cluster).chain(clusters.tenants.values()) {
        let names = install_crds(client).await.unwrap();
        assert!(
            names.contains(&"databases.example.com".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"certificates.cert-manager.io".to_string()),
            "{names:?}"
        );
    }
}

/// Annotations must live in ferry's files, never in the cluster: a server-side apply of an
/// unstripped CRD is refused, with or without strict field validation.
#[tokio::test]
async fn unstripped_annotations_never_reach_the_api_server() {
    let clusters = Clusters::connect().await.unwrap();
    let mut crd = ferry_testkit::schema_crds()
        .unwrap()
        .into_iter()
        .find(|c| c["metadata"]["name"] == "databases.example.com")
        .unwrap();
    let plural = unique("rejects");
    let name = format!("{plural}.example.com");
    crd["metadata"]["name"] = json!(name);
    crd["spec"]["names"] = json!({"kind": "Rejects", "plural": plural});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-ferry-drop"] =
        json!(true);
    // Sent as raw JSON: the typed CRD would drop the unknown key before the server saw it.
    let api: Api<DynamicObject> = Api::all_with(
        clusters.super_cluster.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let strict = PatchParams::apply("ferry-testkit").validation(ValidationDirective::Strict);
    let Err(err) = api.patch(&name, &strict, &Patch::Apply(&crd)).await else {
        panic!("strict validation refuses x-ferry-*");
    };
    assert!(err.to_string().contains("x-ferry-drop"), "{err}");
    let lenient = api
        .patch(
            &name,
            &PatchParams::apply("ferry-testkit"),
            &Patch::Apply(&crd),
        )
        .await;
    let Err(err) = lenient else {
        panic!("server-side apply refuses x-ferry-* too");
    };
    assert!(err.to_string().contains("x-ferry-drop"), "{err}");
}

#[tokio::test]
async fn custom_resources_create_list_and_watch() {
    let clusters = Clusters::connect().await.unwrap();
    let client = &clusters.super_cluster;
    install_crds(client).await.unwrap();
    let ns = fresh_namespace(client, "smoke-watch").await.unwrap();
    let api = databases(client, &ns);
    let events = watcher(api.clone(), watcher::Config::default()).applied_objects();
    let mut events = Box::pin(events);
    // The watch starts with an empty list; then the create arrives.
    api.create(&PostParams::default(), &database("orders"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(obj) = events.try_next().await.unwrap() {
            if obj.metadata.name.as_deref() == Some("orders") {
                return obj;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("the watch delivers the create");
    assert_eq!(seen.data["spec"]["engine"], json!("postgres"));
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
}

#[tokio::test]
async fn server_side_apply_records_the_field_manager_and_status_is_a_subresource() {
    let clusters = Clusters::connect().await.unwrap();
    let client = &clusters.super_cluster;
    install_crds(client).await.unwrap();
    let ns = fresh_namespace(client, "smoke-ssa").await.unwrap();
    let api = databases(client, &ns);
    let applied = api
        .patch(
            "orders",
            &PatchParams::apply("ferry"),
            &Patch::Apply(&database("orders")),
        )
        .await
        .unwrap();
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"ferry".to_string()), "{managers:?}");
    // Status through the subresource; a status in a main-resource update is ignored.
    let status =
        json!({"apiVersion": "example.com/v1", "kind": "Database", "status": {"phase": "Ready"}});
    api.patch_status(
        "orders",
        &PatchParams::apply("ferry"),
        &Patch::Apply(&status),
    )
    .await
    .unwrap();
    let mut with_status = database("orders");
    with_status.data["status"] = json!({"phase": "Hacked"});
    with_status.data["spec"]["tier"] = json!("large");
    let updated = api
        .patch(
            "orders",
            &PatchParams::apply("ferry").force(),
            &Patch::Apply(&with_status),
        )
        .await
        .unwrap();
    assert_eq!(updated.data["status"]["phase"], json!("Ready"));
    assert_eq!(updated.data["spec"]["tier"], json!("large"));
}

#[tokio::test]
async fn leases_can_be_taken_and_renewed() {
    let clusters = Clusters::connect().await.unwrap();
    let client = &clusters.super_cluster;
    let ns = fresh_namespace(client, "smoke-lease").await.unwrap();
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "ferry"},
        "spec": {"holderIdentity": "replica-1", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().holder_identity = Some("replica-2".into());
    let replaced = api
        .replace("ferry", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.unwrap().holder_identity.as_deref(),
        Some("replica-2")
    );
    // A stale resourceVersion loses: the optimistic concurrency leader election relies on.
    let err = api
        .replace("ferry", &PostParams::default(), &created)
        .await
        .expect_err("conflict");
    assert!(
        err.to_string().contains("modified") || err.to_string().contains("Conflict"),
        "{err}"
    );
}

#[tokio::test]
async fn clusters_are_isolated() {
    let clusters = Clusters::connect().await.unwrap();
    assert!(
        clusters.tenants.len() >= 2,
        "expected at least two tenant control planes"
    );
    let (first, client) = clusters.tenants.iter().next().unwrap();
    let ns = fresh_namespace(client, "smoke-isolated").await.unwrap();
    let in_super = Api::<Namespace>::all(clusters.super_cluster.clone())
        .get_opt(&ns)
        .await
        .unwrap();
    assert!(
        in_super.is_none(),
        "namespace {ns} of {first} leaked into the super cluster"
    );
    for (other, other_client) in clusters.tenants.iter().skip(1) {
        let leaked = Api::<Namespace>::all(other_client.clone())
            .get_opt(&ns)
            .await
            .unwrap();
        assert!(
            leaked.is_none(),
            "namespace {ns} of {first} leaked into {other}"
        );
    }
}
