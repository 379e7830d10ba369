//! `ferry manifests` through the binary: what it prints for the super cluster and for a
//! tenant is accepted by the local API servers (`kubectl apply --dry-run=server`).

use std::io::Write;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

fn ferry(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .current_dir(ferry_testkit::root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ferry {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl apply --dry-run=server` of `manifests` into the harness's cluster `cluster`.
fn dry_run(cluster: &str, manifests: &str) {
    let kubeconfig = ferry_testkit::clusters_dir().join(format!("{cluster}.kubeconfig"));
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--dry-run=server", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cluster}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("(server dry run)"), "{stdout}");
}

/// Namespaces a dry run's namespaced objects need (a dry run creates none).
async fn namespaces(cluster: &kube::Client, names: &[&str]) {
    let api = Api::<Namespace>::all(cluster.clone());
    for name in names {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        if let Err(kube::Error::Api(e)) = api.create(&PostParams::default(), &ns).await {
            assert_eq!(e.code, 409, "{e}");
        }
    }
}

#[tokio::test]
async fn manifests_are_accepted_by_the_api_servers() {
    let clusters = ferry_testkit::Clusters::connect().await.unwrap();
    // Into the second super cluster, with the real PrometheusRule CRD (the harness's supers
    // hold the library's sparse overlay of it, which knows no `for`).
    let west = clusters.supers.get("west").expect("the west super");
    for crd in ["prometheusrules", "servicemonitors"] {
        upstream_crd(
            "west",
            &format!("testdata/upstream/prometheus-operator/{crd}.monitoring.coreos.com.yaml"),
        );
    }
    namespaces(west, &["ferry-system", "vclusters"]).await;
    namespaces(clusters.tenant("team-a"), &["ferry-system"]).await;
    let config = "testdata/manifests/ferry.yaml";
    for (replicas, scrapers) in [
        ("1", &[][..]),
        ("3", &["--metrics-namespace", "monitoring"][..]),
    ] {
        let mut args = vec!["manifests", "--config", config, "--replicas", replicas];
        args.extend(scrapers);
        let out = ferry(&args);
        assert!(out.contains("kind: Deployment") && out.contains("kind: PodDisruptionBudget"));
        // The Lease is granted in ferry's namespace only; the port is closed to tenants.
        assert!(
            out.contains("kind: Role\n") && out.contains("- leases"),
            "{out}"
        );
        assert!(out.contains("kind: NetworkPolicy"), "{out}");
        dry_run("west", &out);
    }
    dry_run(
        "team-a",
        &ferry(&["manifests", "--config", config, "--tenant", "team-a"]),
    );
    // Sharded: a StatefulSet of stable identities, no leader election, time to hand over.
    let out = ferry(&[
        "manifests",
        "--config",
        "testdata/manifests/sharded.yaml",
        "--replicas",
        "3",
    ]);
    assert!(
        out.contains("kind: StatefulSet") && !out.contains("kind: Deployment"),
        "{out}"
    );
    assert!(
        !out.contains("--leader-elect") && out.contains("POD_NAME"),
        "{out}"
    );
    assert!(out.contains("terminationGracePeriodSeconds: 45"), "{out}");
    assert!(
        out.contains("kind: PrometheusRule") && out.contains("grafana_dashboard"),
        "{out}"
    );
    dry_run("west", &out);
}

/// Installs an upstream CRD (server-side: it is too large for kubectl's annotation) into
/// `cluster` and waits until it is established.
fn upstream_crd(cluster: &str, file: &str) {
    let kubeconfig = ferry_testkit::clusters_dir().join(format!("{cluster}.kubeconfig"));
    let path = ferry_testkit::root().join(file);
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "-f"],
        vec!["wait", "--for=condition=Established", "--timeout=60s", "-f"],
    ] {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .arg(&path)
            .output()
            .expect("kubectl is installed");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
