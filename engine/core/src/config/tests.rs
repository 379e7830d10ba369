//! The SyncConfig loader's tests: the design's example, every refusal with its location.

use super::*;
use crate::policy::pin::tempdir::Dir;

fn load_text(text: &str) -> Result<Config> {
    let dir = Dir::new();
    let path = dir.path().join("ferry.yaml");
    std::fs::write(&path, text).unwrap();
    load(&path).map_err(|mut e| {
        e.at.file = PathBuf::from("ferry.yaml");
        e
    })
}

const GOOD: &str = "apiVersion: ferry.dev/v1alpha1\nkind: SyncConfig\nspec:\n  policy: policies/platform.yaml\n  super: {kubeconfig: super.kubeconfig}\n  tenants:\n  - {name: team-a, kubeconfig: team-a.kubeconfig}\n  - {name: team-b, kubeconfig: team-b.kubeconfig}\n  patrolInterval: 30s\n  leaderElection: {enabled: true}\n  metrics: {address: \"127.0.0.1:9464\"}\n";

#[test]
fn loads_the_design_example() {
    let config = load_text(GOOD).unwrap();
    assert_eq!(config.tenants.len(), 2);
    assert!(config.policy.ends_with("policies/platform.yaml"));
    assert_eq!(config.patrol_interval, Duration::from_secs(30));
    assert_eq!(
        config.leader_election,
        LeaderElection {
            enabled: true,
            ..LeaderElection::default()
        }
    );
}

#[test]
fn tenant_secrets_stay_out_of_ferrys_namespace() {
    let text = format!("{GOOD}  tenantSecrets: {{namespace: ferry-system}}\n");
    let err = load_text(&text).unwrap_err().to_string();
    assert!(err.contains("is ferry's own namespace"), "{err}");
    let config = load_text(&format!("{GOOD}  tenantSecrets: {{}}\n")).unwrap();
    assert_eq!(config.tenant_secrets.unwrap().namespace, "ferry-tenants");
}

#[test]
fn colliding_tenants_are_refused_with_their_location() {
    let text = GOOD.replace("name: team-b", "name: team");
    let err = load_text(&text).unwrap_err().to_string();
    assert!(err.starts_with("ferry.yaml:7:"), "{err}");
    assert!(err.contains("\"team\" and \"team-a\" collide"), "{err}");
}

#[test]
fn unknown_fields_and_bad_values_are_refused() {
    let err = load_text(&GOOD.replace("patrolInterval", "patrolInterva"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `patrolInterva`"), "{err}");
    let err = load_text(&GOOD.replace("30s", "soon"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("expected a duration like 60s or 5m, found \"soon\""),
        "{err}"
    );
    let err = load_text(&GOOD.replace("name: team-a", "name: Team_A"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("ferry.yaml:7:"), "{err}");
}

const TWO: &str = "apiVersion: ferry.dev/v1alpha1\nkind: SyncConfig\nspec:\n  policy: policies/platform.yaml\n  supers:\n  - {name: east, kubeconfig: east.kubeconfig, labels: {region: east}}\n  - {name: west, kubeconfig: west.kubeconfig, labels: {region: west, gpu: \"true\"}, cordoned: false}\n  placement:\n  - tenants: [team-a]\n    namespaceSelector: {matchLabels: {accelerator: gpu}}\n    supers: {matchLabels: {gpu: \"true\"}}\n  tenants:\n  - {name: team-a, kubeconfig: team-a.kubeconfig}\n";

#[test]
fn several_supers_and_placement_load() {
    let config = load_text(TWO).unwrap();
    let names: Vec<&str> = config.supers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["east", "west"]);
    assert!(config.supers[1]
        .kubeconfig
        .as_ref()
        .unwrap()
        .ends_with("west.kubeconfig"));
    assert_eq!(config.placement.len(), 1);
    // The single-super form is one super named `super`.
    let one = load_text(GOOD).unwrap();
    assert_eq!(one.supers.len(), 1);
    assert_eq!(one.supers[0].name, DEFAULT_SUPER);
    assert!(one.placement.is_empty());
}

#[test]
fn bad_supers_and_rules_are_refused_with_their_location() {
    let refused = |text: &str, at: &str, says: &str| {
        let err = load_text(text).unwrap_err().to_string();
        assert!(err.starts_with(at), "{err}");
        assert!(err.contains(says), "{err}");
    };
    refused(
        &TWO.replace("name: west", "name: east"),
        "ferry.yaml:7:",
        "super \"east\" is named twice",
    );
    refused(
        &TWO.replace("supers: {matchLabels: {gpu", "supers: {matchLabels: {tpu"),
        "ferry.yaml:11:",
        "placement rule selects no super",
    );
    refused(
        &TWO.replace(
            "  policy:",
            "  super: {kubeconfig: s.kubeconfig}\n  policy:",
        ),
        "ferry.yaml:6:",
        "super and supers: expected one of them, found both",
    );
    refused(
        &TWO.replace("tenants: [team-a]", "tenants: [team-z]"),
        "ferry.yaml:9:",
        "tenant \"team-z\" is not in spec.tenants",
    );
    refused(
        &TWO.replace("name: east", "name: East"),
        "ferry.yaml:6:",
        "super name \"East\"",
    );
    refused(
        &TWO.replace("    supers: {matchLabels: {gpu: \"true\"}}\n", ""),
        "ferry.yaml:9:",
        "expected supers",
    );
}

#[test]
fn platform_namespaces_default_or_exactly_as_listed() {
    let config = load_text(GOOD).unwrap();
    assert_eq!(config.platform_namespaces, PlatformNamespaces::default());
    assert_eq!(config.namespace_labels, NamespaceLabels::default());
    let listed = load_text(&format!(
        "{GOOD}  platformNamespaces: [\"payments-*\", shared-db]\n  namespaceLabels: {{allow: [gateway-access, \"example.com/*\"]}}\n"
    ))
    .unwrap();
    let platform = &listed.platform_namespaces;
    assert!(platform.matching("payments-prod").is_some());
    assert!(platform.matching("shared-db").is_some());
    // A list replaces the defaults.
    assert!(platform.matching("kube-system").is_none());
    assert!(listed.namespace_labels.allows("example.com/cost"));
    assert!(!listed.namespace_labels.allows("team"));
    let none = load_text(&format!("{GOOD}  platformNamespaces: []\n")).unwrap();
    assert!(none.platform_namespaces.patterns().is_empty());
}

#[test]
fn bad_globs_are_refused_with_their_location() {
    let err = load_text(&format!(
        "{GOOD}  platformNamespaces:\n  - kube-*\n  - \"istio-[a-z]*\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("ferry.yaml:14:5: "), "{err}");
    assert!(
        err.contains("platformNamespaces[1]: \"istio-[a-z]*\": '[' is not a key character"),
        "{err}"
    );
    let err = load_text(&format!("{GOOD}  platformNamespaces: [Monitoring]\n"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("ferry.yaml:12:"), "{err}");
    assert!(err.contains("'M' is in no namespace name"), "{err}");
    let err = load_text(&format!(
        "{GOOD}  namespaceLabels:\n    allow: [team, \"a b\"]\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("ferry.yaml:13:"), "{err}");
    assert!(err.contains("namespaceLabels.allow[1]"), "{err}");
    let err = load_text(&format!(
        "{GOOD}  namespaceLabels: {{allow: [kubernetes.io/metadata.name]}}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("is never copied to a super namespace"),
        "{err}"
    );
    let err = load_text(&format!("{GOOD}  namespaceLabels: {{deny: [x]}}\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `deny`"), "{err}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
    assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("1d"), None);
}
