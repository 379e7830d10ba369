//! `ferry check --against` through the binary, on the local super cluster.

use std::process::Command;

#[tokio::test]
async fn check_against_the_local_super_cluster() {
    let clusters = ferry_testkit::Clusters::connect().await.unwrap();
    ferry_testkit::install_crds(&clusters.super_cluster)
        .await
        .unwrap();
    let kubeconfig = ferry_testkit::clusters_dir().join("super.kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["check", "--policy", "policies", "--against"])
        .arg(&kubeconfig)
        .current_dir(ferry_testkit::root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every annotated field exists in the cluster's CRDs"),
        "{stdout}"
    );
    // A field rule on a CRD without a schema file is checked against the installed schema.
    let dir = std::env::temp_dir().join(format!("ferry-check-fields-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        r#"apiVersion: ferry.dev/v1alpha1
kind: SyncPolicy
spec:
  resources:
  - apiVersion: example.com/v1
    kind: Database
    direction: toSuper
    fields:
    - {path: "$.spec.restoreFrom.namespace", namespace: true}
    - {path: "$.spec.noSuchField", drop: true}
"#,
    )
    .unwrap();
    let fields = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["check", "--policy"])
        .arg(&policy)
        .arg("--against")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&fields.stdout),
        String::from_utf8_lossy(&fields.stderr)
    );
    assert_eq!(fields.status.code(), Some(1), "{text}");
    assert!(
        text.contains("field rule $.spec.noSuchField names no field of CRD databases.example.com"),
        "{text}"
    );
    assert!(!text.contains("restoreFrom"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([
            "check",
            "--policy",
            "policies",
            "--against",
            "target/clusters/no-such.kubeconfig",
        ])
        .current_dir(ferry_testkit::root())
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such.kubeconfig"));
}
