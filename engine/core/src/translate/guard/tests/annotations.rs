//! Which annotations a dependency's super copy carries: none of the tenant's by default, those
//! an allow-list or a field rule names otherwise, whatever a transform puts back. The oracle
//! lists the allowed keys of the fixtures by hand.

use super::*;

/// Annotation keys a tenant (or a transform) could write on a Secret.
const KEYS: &[&str] = &[
    "reflector.v1.k8s.emberstack.com/reflection-allowed",
    "reflector.v1.k8s.emberstack.com/reflection-auto-enabled",
    "kubed.appscode.com/sync",
    "example.com/owner",
    "example.com",
    "backup.example.com/schedule",
    "backup.example.com/retention",
    "tier-1.example.com/level",
    "tier-12.example.com/level",
    "example.net/peer-secret",
];

/// The keys `testdata/dependency-annotations-allow` lets cross: its `allow` globs
/// (`example.com/*`, `backup.example.com/schedule`, `tier-?.example.com/level`) and the key
/// its field rule maps.
const ALLOWED: &[&str] = &[
    "example.com/owner",
    "backup.example.com/schedule",
    "tier-1.example.com/level",
    "example.net/peer-secret",
];

fn fixture(case: &str) -> Policy {
    let dir = FsPath::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(case);
    crate::policy::load(&dir.join("policy.yaml")).expect("the fixture loads")
}

fn secret(annotations: &[usize]) -> Value {
    let annotations: Map<String, Value> = annotations
        .iter()
        .map(|&i| (KEYS[i].to_string(), json!("default/x")))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "shop", "annotations": annotations},
        "stringData": {"password": "x"},
    })
}

/// The tenant annotations of a written copy (ferry's own left out).
fn tenant_annotations(copy: &Value) -> Vec<String> {
    copy["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .filter(|k| !k.starts_with("ferry.dev/"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Down, a dependency without an allow-list carries no tenant annotation, whatever the
    /// tenant wrote.
    #[test]
    fn a_dependency_copy_carries_no_tenant_annotation(keys in proptest::collection::vec(0..KEYS.len(), 0..6)) {
        let policy = fixture("dependency-annotations");
        let copy = Translator::new(&policy, None).to_super(secret(&keys), &names(), false).unwrap();
        prop_assert!(tenant_annotations(&copy.object).is_empty(), "{:#}", copy.object);
    }

    /// Whatever annotations a transform leaves on the copy, the guard lets it through only if
    /// each is allowed.
    #[test]
    fn the_guard_lets_through_only_allowed_annotations(keys in proptest::collection::vec(0..KEYS.len(), 0..6)) {
        let bare = fixture("dependency-annotations");
        let mut copy = Translator::new(&bare, None).to_super(secret(&[]), &names(), false).unwrap().object;
        for &i in &keys {
            copy["metadata"]["annotations"][KEYS[i]] = json!("team-a-default/x");
        }
        let expected_ok = keys.iter().all(|&i| ALLOWED.contains(&KEYS[i]));
        let allowing = fixture("dependency-annotations-allow");
        for policy in [&bare, &allowing] {
            let resource = policy.resource("", "Secret").unwrap();
            let names = names();
            let outcome = Guard::new(policy, &names, None, true, false).down(resource, &copy);
            let ok = if std::ptr::eq(policy, &bare) { keys.is_empty() } else { expected_ok };
            prop_assert_eq!(outcome.is_ok(), ok, "{:?} {:?}", keys, outcome);
            if let Err(e) = outcome {
                prop_assert_eq!(e.reason, Reason::TransformFailed);
            }
        }
    }
}
