//! `ferry check --against` on a real API server: clean for the example policies, precise for
//! a schema that drifted from the installed CRD, and for a kind that is not installed.

use ferry_testkit::{install_crds, Clusters};

#[tokio::test]
async fn example_policies_match_the_installed_crds() {
    let clusters = Clusters::connect().await.unwrap();
    install_crds(&clusters.super_cluster).await.unwrap();
    let policy = ferry_core::policy::load(&ferry_testkit::root().join("policies")).unwrap();
    let mismatches = ferry_sync::against::check(&policy, clusters.super_cluster.clone())
        .await
        .unwrap();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[tokio::test]
async fn drifted_schemas_and_missing_crds_are_reported() {
    let clusters = Clusters::connect().await.unwrap();
    install_crds(&clusters.super_cluster).await.unwrap();
    let dir = std::env::temp_dir().join(ferry_testkit::unique("against"));
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    let root = ferry_testkit::root();
    // The local schema annotates a field the installed CRD does not have.
    let schema = std::fs::read_to_string(root.join("policies/examples/schemas/databases.example.com.yaml"))
        .unwrap()
        .replace("              notes:\n", "              ghostNamespace: {type: string, x-ferry-namespace: true}\n              notes:\n");
    std::fs::write(dir.join("schemas/databases.yaml"), schema).unwrap();
    std::fs::write(
        dir.join("policy.yaml"),
        "apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nspec:\n  resources:\n  - {apiVersion: example.com/v1, kind: Database, direction: toSuper, schema: schemas/databases.yaml}\n  - {apiVersion: example.com/v1, kind: Gizmo, direction: toSuper}\n  - {apiVersion: v1, kind: Secret, direction: toSuper, dependency: true}\n  - {apiVersion: storage.k8s.io/v1, kind: StorageClass, direction: fromSuper, scope: Cluster}\n  - {apiVersion: example.com/v1, kind: DatabaseClass, direction: toSuper, scope: Cluster}\n",
    )
    .unwrap();
    let policy = ferry_core::policy::load(&dir.join("policy.yaml")).unwrap();
    let mismatches = ferry_sync::against::check(&policy, clusters.super_cluster.clone())
        .await
        .unwrap();
    let text: Vec<String> = mismatches
        .iter()
        .map(|m| format!("{}: {}", m.at, m.message))
        .collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(text[0].contains("spec.ghostNamespace is annotated x-ferry-namespace but is not a field of CRD databases.example.com v1"), "{text:#?}");
    assert!(text[0].contains("schemas/databases.yaml:"), "{text:#?}");
    assert!(
        text[1].contains(
            "Gizmo.example.com is approved at example.com/v1, but the cluster does not serve it"
        ),
        "{text:#?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
