//! ferry as it runs in a cluster: the super cluster through the pod's service account
//! (`super: {inCluster: true}`, run with exactly a pod's environment), and tenants from
//! kubeconfig Secrets added, refused, rotated and removed live.

use super::*;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;

/// Where a pod finds its service account.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The server URL of the harness's cluster `name`.
fn server_of(name: &str) -> Result<String> {
    let path = ferry_testkit::clusters_dir().join(format!("{name}.kubeconfig"));
    let config: Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    Ok(config["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("server")?
        .to_string())
}

pub async fn in_cluster_super(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "in-cluster").await?;
    ensure!(
        identity == Identity::Rbac,
        "the service account is bound to ferry rbac's role"
    );
    let s = env.super_();
    // A service account bound to the ClusterRole `ferry rbac` prints, and a token for it from
    // the TokenRequest API.
    let ns = fresh_namespace(&s, "ferry-sa").await?;
    env.cleanup.push((s.clone(), ns.clone()));
    let accounts = kube::Api::<ServiceAccount>::namespaced(s.clone(), &ns);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "ferry"}}))?;
    accounts.create(&PostParams::default(), &account).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("ferry-super-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ferry-super"},
        "subjects": [{"kind": "ServiceAccount", "name": "ferry", "namespace": ns}],
    }))?;
    let bindings = kube::Api::<ClusterRoleBinding>::all(s.clone());
    bindings.create(&PostParams::default(), &binding).await?;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))?;
    let token = accounts
        .create_token_request("ferry", &PostParams::default(), &request)
        .await?
        .status
        .context("token")?
        .token;
    let server = server_of("super")?;
    let ca = std::fs::read(ferry_testkit::clusters_dir().join("pki/ca.crt"))?;
    let (host, port) = server
        .trim_start_matches("https://")
        .split_once(':')
        .context("host:port")?;
    let sa_dir = env.dir.join("serviceaccount");
    std::fs::create_dir_all(&sa_dir)?;
    std::fs::write(sa_dir.join("token"), token.context("no token issued")?)?;
    std::fs::write(sa_dir.join("ca.crt"), ca)?;
    std::fs::write(sa_dir.join("namespace"), &ns)?;
    std::fs::create_dir_all(SERVICE_ACCOUNT_DIR)?;
    // ferry sees exactly a pod's environment: the service account files at their path (in a
    // mount namespace of its own), KUBERNETES_SERVICE_HOST and _PORT, no super kubeconfig.
    let mut settings = env.settings(&["team-a"]);
    settings
        .spec
        .insert("super".into(), json!({"inCluster": true}));
    settings.launcher = vec![
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        format!("mount --bind \"$0\" {SERVICE_ACCOUNT_DIR} && exec \"$@\""),
        sa_dir.display().to_string(),
    ];
    settings.env = vec![
        ("KUBERNETES_SERVICE_HOST".into(), host.into()),
        ("KUBERNETES_SERVICE_PORT".into(), port.into()),
    ];
    let ferry = env.start(&settings, "ferry.log").await?;
    let (tenant_ns, super_ns, _) = env
        .orders("copy written through the service account")
        .await?;
    let copy = DATABASE
        .at(&s, &super_ns, "orders")
        .get()
        .await?
        .context("copy")?;
    ensure!(copy["metadata"]["annotations"]["ferry.dev/tenant-namespace"] == tenant_ns.as_str());
    bindings
        .delete(&format!("ferry-super-{ns}"), &DeleteParams::default())
        .await?;
    env.finish(ferry).await
}
live!(in_cluster_super: rbac);

/// The kubeconfig text of the harness's cluster `name` (its credentials inline).
fn kubeconfig_text(name: &str) -> Result<String> {
    Ok(std::fs::read_to_string(
        ferry_testkit::clusters_dir().join(format!("{name}.kubeconfig")),
    )?)
}

fn kubeconfig_secret(name: &str, tenant: &str, kubeconfig: &str) -> Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"ferry.dev/tenant-kubeconfig": "true", "ferry.dev/tenant-name": tenant}},
        "stringData": {"kubeconfig": kubeconfig},
    }))?)
}

pub async fn tenants_from_secrets(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "tenant-secrets").await?;
    let s = env.super_();
    let secrets_ns = fresh_namespace(&s, "ferry-tenants").await?;
    env.cleanup.push((s.clone(), secrets_ns.clone()));
    let secrets = kube::Api::<Secret>::namespaced(s.clone(), &secrets_ns);
    let mut settings = env.settings(&["team-a"]);
    settings
        .spec
        .insert("tenantSecrets".into(), json!({"namespace": secrets_ns}));
    let ferry = env.start(&settings, "ferry.log").await?;
    // team-b's kubeconfig in a Secret: team-b runs beside the static team-a.
    let team_b = kubeconfig_text("team-b")?;
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("vc-team-b", "team-b", &team_b)?,
        )
        .await?;
    let b = env.tenant("team-b");
    let ns = env.namespace("team-b", "shop").await?;
    create(&b, database(&ns, "orders", db_spec("small"))).await?;
    DATABASE
        .at(&s, &format!("team-b-{ns}"), "orders")
        .until("team-b from a Secret syncs", |_| true)
        .await?;
    // A Secret naming a static tenant, one whose kubeconfig runs a command, one that reads a
    // local file: refused with Events; the others keep running.
    let exec = team_b.replace(
        "users:\n",
        "users:\n- name: sneaky\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [/tmp/ferry-pwned]}\n",
    );
    ensure!(exec != team_b, "the kubeconfig has a users list");
    let file = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{}', certificate-authority: /etc/shadow}}\nusers:\n- name: u\n  user: {{token: x}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        server_of("team-b")?
    );
    for (name, tenant, text) in [
        ("vc-clash", "team-a", team_b.as_str()),
        ("vc-exec", "team-c", exec.as_str()),
        ("vc-file", "team-d", file.as_str()),
    ] {
        secrets
            .create(
                &PostParams::default(),
                &kubeconfig_secret(name, tenant, text)?,
            )
            .await?;
    }
    for (name, why) in [
        ("vc-clash", "already runs"),
        ("vc-exec", "exec runs a command"),
        ("vc-file", "certificate-authority reads a local file"),
    ] {
        let note = until_event(&s, &secrets_ns, name, "TenantRefused").await?;
        ensure!(note.contains(why), "{name}: {note}");
    }
    ensure!(
        !std::path::Path::new("/tmp/ferry-pwned").exists(),
        "the exec plugin never ran"
    );
    let (_, readyz) = ferry.get("/readyz").await?;
    ensure!(
        readyz.contains("team-a: syncing") && readyz.contains("team-b: syncing"),
        "{readyz}"
    );
    ensure!(
        !readyz.contains("team-c") && !readyz.contains("team-d"),
        "{readyz}"
    );
    // A kubeconfig that reaches the super cluster itself would copy ferry's own copies: the
    // tenant starts but is never synced, and the engine stays ready.
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("vc-super", "team-s", &kubeconfig_text("super")?)?,
        )
        .await?;
    eventually("a super cluster as a tenant is refused", WAIT, || async {
        let (code, readyz) = ferry.get("/readyz").await?;
        Ok((code == 200
            && readyz.contains("team-s: not synced (its kubeconfig reaches super cluster super)"))
        .then_some(()))
    })
    .await?;
    secrets.delete("vc-super", &DeleteParams::default()).await?;
    // Rotated credentials: the tenant restarts and goes on syncing.
    let rotated = format!("{team_b}\n# rotated\n");
    secrets
        .replace(
            "vc-team-b",
            &PostParams::default(),
            &kubeconfig_secret("vc-team-b", "team-b", &rotated)?,
        )
        .await?;
    eventually("team-b restarted with the new kubeconfig", WAIT, || async {
        let log = ferry.log();
        let restarted = log
            .contains("tenant removed; its super objects are left in place tenant=team-b")
            && log.matches("tenant added tenant=team-b").count() >= 2;
        Ok(restarted.then_some(()))
    })
    .await?;
    create(&b, database(&ns, "after", db_spec("small"))).await?;
    DATABASE
        .at(&s, &format!("team-b-{ns}"), "after")
        .until("team-b syncs after rotation", |_| true)
        .await?;
    // The Secret removed: team-b stops (its copies stay, as for a tenant removed from the file).
    secrets
        .delete("vc-team-b", &DeleteParams::default())
        .await?;
    eventually("team-b stopped", WAIT, || async {
        let (_, readyz) = ferry.get("/readyz").await?;
        Ok((!readyz.contains("team-b")).then_some(()))
    })
    .await?;
    create(&b, database(&ns, "ignored", db_spec("small"))).await?;
    drained(&ferry).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        DATABASE
            .at(&s, &format!("team-b-{ns}"), "ignored")
            .get()
            .await?
            .is_none(),
        "a removed tenant is not synced"
    );
    ensure!(
        DATABASE
            .at(&s, &format!("team-b-{ns}"), "orders")
            .get()
            .await?
            .is_some(),
        "a removed tenant's copies stay"
    );
    env.finish(ferry).await
}
live!(tenants_from_secrets: admin);
