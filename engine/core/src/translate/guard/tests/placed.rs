//! Property tests of copies placed in the operator's namespace (`placement`), where a name
//! without a namespace is the operator's own object, and of selectors over published objects:
//! hostile values through the whole translation. Whatever is not refused must satisfy an
//! oracle written apart from the guard.

use std::path::Path as FsPath;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::naming::{NameMap, Tenant};
use crate::policy::Policy;
use crate::translate::Translator;

fn policy() -> Policy {
    let file =
        FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/placed-guard/policy.yaml");
    crate::policy::load(&file).expect("the placed fixtures load")
}

fn names() -> NameMap {
    NameMap::new(Tenant::new("team-a").unwrap())
}

fn name() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("")),
        Just(json!("operator-creds")),
        Just(json!("team-b-shop-job")),
        Just(json!("team-a-shop-job")),
        "[a-z][a-z0-9-]{0,8}".prop_map(Value::String),
    ]
}

fn namespace() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("")),
        Just(json!("shop")),
        Just(json!("operator")),
        Just(json!("team-b-shop")),
        Just(json!("kube-system")),
    ]
}

fn host() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("prometheus-operated")),
        Just(json!("web.shop.svc")),
        Just(json!("web.team-b-shop.svc")),
        Just(json!("web")),
        Just(json!("web.operator.svc.cluster.local")),
    ]
}

fn selector() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!({})),
        Just(json!({"matchLabels": {"tier": "gold"}})),
        Just(json!({"matchLabels": {"tenancy.x-k8s.io/super.public": "false"}})),
        Just(
            json!({"matchExpressions": [{"key": "ferry.dev/tenant", "operator": "In", "values": ["team-b"]}]})
        ),
        Just(json!({"matchExpressions": "bad"})),
        Just(
            json!({"matchExpressions": [{"key": "tenancy.x-k8s.io/super.public", "operator": "DoesNotExist"}]})
        ),
    ]
}

/// The fields of the super copy, as strings (`None` when absent or empty).
fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every name a placed copy carries names the tenant's space: a reference with the
    /// tenant's namespace, a placed copy under the tenant's prefix, a host in the tenant's
    /// namespaces; never a bare name or `""` the operator would read in its own namespace.
    #[test]
    fn a_placed_copy_names_nothing_of_the_operator(
        secret in name(), secret_ns in namespace(), config in name(), account in name(),
        previous in name(), target in namespace(), endpoint in host(), labels in any::<bool>(),
    ) {
        let mut metadata = json!({"name": "job", "namespace": "shop"});
        if labels {
            metadata["labels"] = json!({"tenancy.x-k8s.io/super.public": "true"});
        }
        let object = json!({"apiVersion": "example.com/v1", "kind": "Job", "metadata": metadata,
            "spec": {"secretRef": {"name": secret, "namespace": secret_ns}, "configName": config,
                "accountName": account, "previous": previous, "targetNamespace": target,
                "endpoint": endpoint}});
        let Ok(out) = Translator::new(&policy(), None).to_super(object, &names(), false) else {
            return Ok(());
        };
        let copy = out.object;
        let placed_in = text(&copy, "/metadata/namespace");
        prop_assert_eq!(placed_in.as_deref(), Some("operator"));
        prop_assert!(copy.pointer("/metadata/labels/tenancy.x-k8s.io~1super.public").is_none(), "{copy:#}");
        // A Secret reference with a name names the tenant's namespace.
        if text(&copy, "/spec/secretRef/name").is_some() {
            let ns = text(&copy, "/spec/secretRef/namespace");
            prop_assert!(ns.as_deref().is_some_and(|n| n.starts_with("team-a-")), "{copy:#}");
        }
        // Passthrough names without a namespace would be the operator's: never there.
        for field in ["/spec/configName", "/spec/accountName"] {
            prop_assert!(text(&copy, field).is_none(), "{field}: {copy:#}");
        }
        if let Some(p) = text(&copy, "/spec/previous") {
            prop_assert!(p.starts_with("team-a-shop-"), "{copy:#}");
        }
        prop_assert!(copy.pointer("/spec/targetNamespace").and_then(Value::as_str) != Some(""), "{copy:#}");
        if let Some(ns) = text(&copy, "/spec/targetNamespace") {
            prop_assert!(ns.starts_with("team-a-"), "{copy:#}");
        }
        let host = text(&copy, "/spec/endpoint").unwrap_or_default();
        prop_assert!(host.contains(".team-a-"), "{copy:#}");
    }

    /// A selector over published objects requires the public label and no tenant's label, and
    /// holds no requirement over ferry's keys.
    #[test]
    fn a_published_selector_selects_no_tenant_copy(profiles in selector()) {
        let object = json!({"apiVersion": "example.com/v1", "kind": "Job",
            "metadata": {"name": "job", "namespace": "shop"}, "spec": {"profiles": profiles}});
        let Ok(out) = Translator::new(&policy(), None).to_super(object, &names(), false) else {
            return Ok(());
        };
        let Some(selector) = out.object.pointer("/spec/profiles").filter(|s| !s.is_null()) else {
            return Ok(());
        };
        prop_assert_eq!(selector.pointer("/matchLabels/tenancy.x-k8s.io~1super.public"), Some(&json!("true")));
        let expressions = selector["matchExpressions"].as_array().cloned().unwrap_or_default();
        let not_a_copy = json!({"key": "ferry.dev/tenant", "operator": "DoesNotExist"});
        prop_assert!(expressions.contains(&not_a_copy), "{selector:#}");
        for e in &expressions {
            let key = e["key"].as_str().unwrap_or("");
            prop_assert!(!key.starts_with("ferry.dev/") || e["operator"] == "DoesNotExist", "{selector:#}");
        }
    }
}

/// The properties are not vacuous: a placed copy that names only the tenant's space passes,
/// and each bare name is refused.
#[test]
fn a_placed_copy_of_the_tenants_names_passes() {
    let job = |spec: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Job",
            "metadata": {"name": "job", "namespace": "shop"}, "spec": spec})
    };
    let translate = |spec| Translator::new(&policy(), None).to_super(job(spec), &names(), false);
    let out = translate(json!({"secretRef": {"name": "creds", "namespace": "shop"},
        "previous": "nightly", "targetNamespace": "shop", "endpoint": "web.shop.svc",
        "profiles": {"matchLabels": {"tier": "gold"}}}))
    .unwrap()
    .object;
    assert_eq!(out["metadata"]["name"], "team-a-shop-job");
    assert_eq!(out["spec"]["previous"], "team-a-shop-nightly");
    assert_eq!(out["spec"]["secretRef"]["namespace"], "team-a-shop");
    for bare in [
        json!({"secretRef": {"name": "operator-creds"}}),
        json!({"configName": "operator-config"}),
        json!({"targetNamespace": ""}),
        json!({"endpoint": "prometheus-operated"}),
    ] {
        let refusal = translate(bare.clone()).unwrap_err();
        assert_eq!(
            refusal.reason,
            crate::translate::Reason::OutsideTenant,
            "{bare}: {refusal}"
        );
    }
}
