//! Property tests of translation: down then up restores every namespace, reference and
//! selector field.

use std::path::Path;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::fields::{Fields, Way};
use crate::naming::{NameMap, Tenant};
use crate::policy::Policy;

fn policy() -> Policy {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    crate::policy::load(&dir).expect("the example policies load")
}

fn database(
    namespaces: &[String],
    restore_ns: &str,
    class: &str,
    labels: &[(String, String)],
    primary: &str,
) -> Value {
    let mut spec = json!({
        "engine": "postgres",
        "allowedNamespaces": namespaces,
        "restoreFrom": {"name": "snap", "namespace": restore_ns},
        "className": class,
        "credentialsRef": {"name": "admin"},
        "replicaSelector": {},
    });
    if !labels.is_empty() {
        let m: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        spec["replicaSelector"]["matchLabels"] = Value::Object(m);
    }
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": "db", "namespace": "prod"},
        "spec": spec,
        "status": {"primaryNamespace": primary},
    })
}

fn name() -> impl Strategy<Value = String> {
    // Up to 50 characters: with a 12-character tenant, long ones are hashed.
    "[a-z]([a-z0-9-]{0,48}[a-z0-9])?"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn down_then_up_restores_rewritten_fields(
        tenant in "[a-z]([a-z0-9-]{0,10}[a-z0-9])?",
        namespaces in proptest::collection::vec(name(), 0..4),
        restore_ns in name(),
        class in name(),
        labels in proptest::collection::vec(("[a-z]{1,8}", "[a-z0-9]{0,8}"), 0..3),
        primary in name(),
    ) {
        let policy = policy();
        let resource = policy.resource("example.com", "Database").expect("Database is approved");
        let mut names = NameMap::new(Tenant::new(&tenant).unwrap());
        // The live engine learns every tenant namespace from the super namespaces it
        // creates; hashed names can only be inverted that way.
        for ns in namespaces.iter().chain([&restore_ns, &primary]) {
            if !ns.is_empty() {
                names.learn(ns);
            }
        }
        let original = database(&namespaces, &restore_ns, &class, &labels, &primary);
        let mut object = original.clone();
        Fields::new(&policy, &names, Way::Down, None, None).apply(&resource.plan.root, &mut object, &super::Path::Root).unwrap();
        // Down really rewrote something (the class is cluster-scoped and renamed).
        prop_assert_ne!(&object["spec"]["className"], &original["spec"]["className"]);
        prop_assert_eq!(&object["spec"]["replicaSelector"]["matchLabels"]["ferry.dev/tenant"], &json!(tenant));
        // Up, the tenant's namespaces are known (live from its caches); every other is
        // redacted.
        let own: Vec<String> = namespaces.iter().chain([&restore_ns, &primary]).cloned().collect();
        Fields::new(&policy, &names, Way::Up, None, None).with_namespaces(&own).apply(&resource.plan.root, &mut object, &super::Path::Root).unwrap();
        prop_assert_eq!(object, original);
    }
}

#[test]
fn a_tenant_cannot_select_another_tenants_objects() {
    let policy = policy();
    let resource = policy.resource("example.com", "Database").unwrap();
    let names = NameMap::new(Tenant::new("team-a").unwrap());
    let mut object = database(
        &[],
        "prod",
        "gold",
        &[("ferry.dev/tenant".into(), "team-b".into())],
        "prod",
    );
    Fields::new(&policy, &names, Way::Down, None, None)
        .apply(&resource.plan.root, &mut object, &super::Path::Root)
        .unwrap();
    assert_eq!(
        object["spec"]["replicaSelector"]["matchLabels"]["ferry.dev/tenant"],
        json!("team-a")
    );
}
