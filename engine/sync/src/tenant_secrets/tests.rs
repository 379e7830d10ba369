//! Kubeconfigs from Secrets: what is refused, and how Secret tenants join the static ones.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

use super::*;

fn config() -> TenantSecrets {
    TenantSecrets {
        namespace: "ferry-system".into(),
        selector: Default::default(),
        key: "kubeconfig".into(),
        name_label: "ferry.dev/tenant-name".into(),
        allow_insecure: false,
        allow_proxy: false,
    }
}

const GOOD: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://vc.team-a.svc:443', certificate-authority-data: Zm9v}\nusers:\n- name: u\n  user: {token: abc}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";

fn vetted(text: &str, config: &TenantSecrets) -> Result<(), String> {
    vet(&Kubeconfig::from_yaml(text).unwrap(), config)
}

#[test]
fn refuses_files_commands_plugins_proxies_and_plain_http() {
    assert_eq!(vetted(GOOD, &config()), Ok(()));
    let cases = [
        ("certificate-authority-data: Zm9v", "certificate-authority: /etc/passwd", "local file"),
        ("token: abc", "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token", "local file"),
        ("token: abc", "client-certificate: /root/.ssh/id_rsa", "local file"),
        ("token: abc", "client-key: /root/.ssh/id_rsa", "local file"),
        ("token: abc", "exec: {command: /bin/sh, args: [-c, 'curl evil'], apiVersion: client.authentication.k8s.io/v1}", "runs a command"),
        ("token: abc", "auth-provider: {name: oidc, config: {}}", "plugin"),
        ("server: 'https://vc.team-a.svc:443'", "server: 'https://vc.team-a.svc:443', proxy-url: 'http://10.0.0.1:3128'", "proxy-url"),
        ("server: 'https://vc.team-a.svc:443'", "server: 'https://vc.team-a.svc:443', insecure-skip-tls-verify: true", "insecure-skip-tls-verify"),
        ("server: 'https://vc.team-a.svc:443'", "server: 'http://vc.team-a.svc:80'", "https://"),
        ("current-context: x", "current-context: y", "names no context"),
    ];
    for (from, to, why) in cases {
        let text = GOOD.replace(from, to);
        assert_ne!(text, GOOD, "{to}");
        let err = vetted(&text, &config()).unwrap_err();
        assert!(err.contains(why), "{to}: {err}");
    }
    let allowing = TenantSecrets {
        allow_insecure: true,
        allow_proxy: true,
        ..config()
    };
    for to in [
        "server: 'http://vc.team-a.svc:80'",
        "server: 'https://vc.team-a.svc:443', insecure-skip-tls-verify: true",
        "server: 'https://vc.team-a.svc:443', proxy-url: 'http://10.0.0.1:3128'",
    ] {
        let text = GOOD.replace("server: 'https://vc.team-a.svc:443'", to);
        assert_eq!(vetted(&text, &allowing), Ok(()), "{to}");
    }
    // An unused context's exec is refused too: the whole file is vetted.
    let extra = GOOD.replace(
        "users:\n",
        "users:\n- name: other\n  user: {exec: {command: id, apiVersion: client.authentication.k8s.io/v1}}\n",
    );
    assert!(vetted(&extra, &config()).is_err());
}

fn secret(name: &str, tenant: Option<&str>, text: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    if let Some(t) = tenant {
        s.metadata.labels = Some([("ferry.dev/tenant-name".to_string(), t.to_string())].into());
    }
    s.data = Some(BTreeMap::from([(
        "kubeconfig".to_string(),
        ByteString(text.as_bytes().to_vec()),
    )]));
    s
}

#[test]
fn secret_tenants_never_displace_static_ones() {
    let statics = vec![TenantConfig {
        name: Tenant::new("team-a").unwrap(),
        kubeconfig: "team-a.kubeconfig".into(),
        domains: Vec::new(),
    }];
    let secrets = SecretTenants::default();
    let c = config();
    let entries: BTreeMap<String, (Read, Secret)> = [
        secret("vc-b", Some("team-b"), GOOD),
        secret("vc-a", Some("team-a"), GOOD),
        secret("team", None, GOOD),
        secret(
            "vc-bad",
            Some("team-c"),
            &GOOD.replace("token: abc", "tokenFile: /x"),
        ),
        secret("vc-name", Some("Team_D"), GOOD),
    ]
    .into_iter()
    .map(|s| (s.metadata.name.clone().unwrap(), (read(&c, &s), s)))
    .collect();
    secrets.set(entries);
    let (wanted, refused) = merge(&statics, &secrets, &[], &["team-ferry".to_string()]);
    let names: Vec<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["team-a", "team-b"]);
    assert!(matches!(wanted[0].source, Source::File(_)));
    assert!(matches!(&wanted[1].source, Source::Secret { name, .. } if name == "vc-b"));
    let why = |secret: &str| {
        refused
            .iter()
            .find(|(s, _)| s.metadata.name.as_deref() == Some(secret))
            .map(|(_, w)| w.clone())
            .unwrap_or_default()
    };
    assert!(why("vc-a").contains("already runs"), "{refused:?}");
    assert!(why("team").contains("cannot join"), "{refused:?}");
    assert!(why("vc-bad").contains("tokenFile"), "{refused:?}");
    assert!(why("vc-name").contains("tenant name"), "{refused:?}");
    assert_eq!(refused.len(), 4);
}

#[test]
fn rotated_credentials_change_the_source() {
    let c = config();
    let digest = |text: &str| match read(&c, &secret("vc-b", Some("team-b"), text)) {
        Read::Tenant(t) => t.source,
        Read::Refused(why) => panic!("{why}"),
    };
    assert_ne!(
        digest(GOOD),
        digest(&GOOD.replace("token: abc", "token: def"))
    );
    assert_eq!(digest(GOOD), digest(GOOD));
}

#[test]
fn a_new_secret_never_displaces_a_running_tenant() {
    let secrets = SecretTenants::default();
    let c = config();
    // "a-new" sorts before "vc-b", and claims the name team-b runs under.
    let entries: BTreeMap<String, (Read, Secret)> = [
        secret("a-new", Some("team-b"), GOOD),
        secret("vc-b", Some("team-b"), GOOD),
        secret("vc-f", Some("team"), GOOD),
    ]
    .into_iter()
    .map(|s| (s.metadata.name.clone().unwrap(), (read(&c, &s), s)))
    .collect();
    secrets.set(entries);
    let running: Vec<(Arc<str>, Source)> = vec![(
        "team-b".into(),
        Source::Secret {
            namespace: "ferry-system".into(),
            name: "vc-b".into(),
            digest: "old".into(),
        },
    )];
    let (wanted, refused) = merge(&[], &secrets, &running, &["team-ferry".into()]);
    assert_eq!(wanted.len(), 1, "{refused:?}");
    assert!(matches!(&wanted[0].source, Source::Secret { name, .. } if name == "vc-b"));
    let names: Vec<&str> = refused
        .iter()
        .filter_map(|(s, _)| s.metadata.name.as_deref())
        .collect();
    assert!(
        names.contains(&"a-new") && names.contains(&"vc-f"),
        "{refused:?}"
    );
    // A tenant whose super namespaces would include ferry's own is refused.
    let secrets = SecretTenants::default();
    let s = secret("vc-t", Some("team"), GOOD);
    secrets.set([("vc-t".to_string(), (read(&c, &s), s))].into());
    let (wanted, refused) = merge(&[], &secrets, &[], &["team-ferry".into()]);
    assert!(
        wanted.is_empty() && refused[0].1.contains("ferry's namespace"),
        "{refused:?}"
    );
}

#[test]
fn parse_errors_say_where_not_what() {
    let secret = secret(
        "vc",
        Some("team-b"),
        "users:\n- name: u\n  user: {token: \"SECRET-TOKEN\", username: [x]}\n",
    );
    match read(&config(), &secret) {
        Read::Refused(why) => assert!(!why.contains("SECRET-TOKEN"), "{why}"),
        Read::Tenant(_) => panic!("not a kubeconfig"),
    }
}
