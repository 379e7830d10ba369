//! Property tests of the naming map: the invariants ARCHITECTURE.md cites.
use super::*;
use proptest::prelude::*;

#[test]
fn short_names_join_with_a_dash() {
    assert_eq!(map("team-a", "db"), "team-a-db");
    assert_eq!(unmap_unhashed("team-a", "team-a-db").as_deref(), Some("db"));
    assert_eq!(unmap_unhashed("team-a", "team-b-db"), None);
}

#[test]
fn long_names_are_hashed_to_63_characters() {
    let x = "n".repeat(60);
    let out = map("team-a", &x);
    assert_eq!(out.len(), 63);
    assert!(out.starts_with(&format!("team-a-{}", "n".repeat(47))));
    let digest = Sha256::digest(format!("team-a/{x}").as_bytes());
    assert!(out.ends_with(&format!("-{}", hex(&digest[..4]))));
    // Read as an unhashed name, it is another (56-character) namespace.
    assert_ne!(unmap_unhashed("team-a", &out).as_deref(), Some(x.as_str()));
}

#[test]
fn exactly_63_is_not_hashed() {
    let x = "a".repeat(63 - "t-".len());
    assert_eq!(map("t", &x), format!("t-{x}"));
}

#[test]
fn tenant_names_are_validated() {
    assert!(Tenant::new("team-a").is_ok());
    assert!(Tenant::new("").is_err());
    assert!(Tenant::new("Team").is_err());
    assert!(Tenant::new("-a").is_err());
    assert!(Tenant::new("a".repeat(21).as_str()).is_err());
    assert!(Tenant::new("a".repeat(20).as_str()).is_ok());
}

#[test]
fn tenants_cannot_map_into_kubernetes_namespaces() {
    // Tenant `kube`'s namespace `system` would be `kube-system`.
    for name in [
        "kube",
        "kube-a",
        "kube-system",
        "ferry",
        "openshift",
        "openshift-x",
    ] {
        assert!(Tenant::new(name).is_err(), "{name}");
    }
    assert!(Tenant::new("ferryman").is_ok());
    assert!(Tenant::new("kubeflow").is_ok());
    assert!(is_system_namespace("kube-node-lease"));
    assert!(!is_system_namespace("kubeflow"));
}

#[test]
fn subdomains_are_validated() {
    assert_eq!(dns_subdomain_problem("gold.example.com"), None);
    for bad in ["", "Gold", "a..b", ".a", "a-.b", "a b", "a/b"] {
        assert!(dns_subdomain_problem(bad).is_some(), "{bad:?}");
    }
    for ok in ["app", "app.kubernetes.io/name", "A_b.c"] {
        assert_eq!(qualified_name_problem(ok), None, "{ok:?}");
    }
    for bad in ["", "x\n---\ny", "a/", "/a", "Bad/x", "-a", "a/b/c"] {
        assert!(qualified_name_problem(bad).is_some(), "{bad:?}");
    }
    assert_eq!(label_value_problem(""), None);
    assert!(label_value_problem("a b").is_some());
}

#[test]
fn prefix_collisions_are_rejected() {
    let set =
        |names: &[&str]| -> Vec<Tenant> { names.iter().map(|n| Tenant::new(n).unwrap()).collect() };
    assert!(check_tenant_set(&set(&["team-a", "team-b"])).is_ok());
    assert!(check_tenant_set(&set(&["team", "teams"])).is_ok());
    assert_eq!(
        check_tenant_set(&set(&["team-a", "team"])),
        Err(Error::PrefixCollision {
            short: "team".into(),
            long: "team-a".into()
        })
    );
    assert!(matches!(
        check_tenant_set(&set(&["a", "a"])),
        Err(Error::DuplicateTenant(_))
    ));
}

#[test]
fn name_map_inverts_learnt_hashed_names() {
    let mut names = NameMap::new(Tenant::new("team-a").unwrap());
    let long = "x".repeat(62);
    let super_name = names.to_super(&long);
    assert_ne!(names.to_tenant(&super_name).as_deref(), Some(long.as_str()));
    names.learn(&long);
    assert_eq!(names.to_tenant(&super_name), Some(long));
}

fn tenant_strategy() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,18}[a-z0-9])?"
        .prop_filter("Kubernetes' own prefix", |t| !is_system_namespace(t))
}

fn name_strategy() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
}

proptest! {
    #[test]
    fn map_yields_dns_labels(t in tenant_strategy(), x in name_strategy()) {
        let out = map(&t, &x);
        prop_assert_eq!(dns_label_problem(&out), None, "{} from {}/{}", out, t, x);
    }

    #[test]
    fn map_is_injective_over_valid_tenant_sets(
        t1 in tenant_strategy(), x1 in name_strategy(),
        t2 in tenant_strategy(), x2 in name_strategy(),
    ) {
        let tenants = [Tenant::new(&t1).unwrap(), Tenant::new(&t2).unwrap()];
        let valid_set = t1 == t2 || check_tenant_set(&tenants).is_ok();
        prop_assume!(valid_set);
        prop_assume!((t1.as_str(), x1.as_str()) != (t2.as_str(), x2.as_str()));
        prop_assert_ne!(map(&t1, &x1), map(&t2, &x2));
    }

    #[test]
    fn map_is_injective_for_shared_prefixes(x1 in name_strategy(), x2 in name_strategy()) {
        // The interesting collisions are between tenants that share characters.
        prop_assume!(x1 != x2);
        for (t1, t2) in [("team", "team"), ("team", "teams"), ("a1", "a")] {
            if t1 != t2 && check_tenant_set(&[Tenant::new(t1).unwrap(), Tenant::new(t2).unwrap()]).is_err() {
                continue;
            }
            prop_assert_ne!(map(t1, &x1), map(t2, &x2));
        }
    }

    #[test]
    fn a_tenants_space_holds_its_names_and_no_other_tenants(
        t1 in tenant_strategy(), t2 in tenant_strategy(), x in name_strategy(),
    ) {
        prop_assume!(t1 != t2);
        let tenants = [Tenant::new(&t1).unwrap(), Tenant::new(&t2).unwrap()];
        prop_assume!(check_tenant_set(&tenants).is_ok());
        let names = NameMap::new(tenants[0].clone());
        prop_assert!(names.in_tenant_space(&map(&t1, &x)));
        prop_assert!(!names.in_tenant_space(&map(&t2, &x)));
    }

    #[test]
    fn unhashed_names_round_trip(t in tenant_strategy(), x in name_strategy()) {
        let out = map(&t, &x);
        if out.len() == t.len() + 1 + x.len() {
            prop_assert_eq!(unmap_unhashed(&t, &out), Some(x));
        }
    }
}
