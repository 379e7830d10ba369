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
