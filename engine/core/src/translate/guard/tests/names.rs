//! Property tests of the names a tenant owns beyond namespaces: hostile host names,
//! identities, globs and lists through the whole translation, and as a transform's output
//! straight into the guard. Whatever is not refused must satisfy an oracle written apart from
//! the guard: plain string checks over the fixture's fields, by path.

use std::path::Path as FsPath;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::naming::{NameMap, Tenant};
use crate::policy::Policy;
use crate::translate::guard::Guard;
use crate::translate::Translator;

const DOMAIN: &str = "team-a.apps.example.com";

fn policy() -> Policy {
    let dir = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/names/policy.yaml");
    crate::policy::load(&dir).expect("the names fixtures load")
}

fn names() -> NameMap {
    NameMap::new(Tenant::new("team-a").unwrap()).with_domains([DOMAIN])
}

/// Host names a hostile tenant would try.
fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("*"),
            Just("*.team-b-prod.svc.cluster.local"),
            Just("db-0.db.team-b-prod.svc.cluster.local"),
            Just("api.team-a-prod.svc.cluster.local"),
            Just("*.svc.cluster.local"),
            Just("*.cluster.local"),
            Just("prod.svc"),
            Just("a.b.c.prod.svc"),
            Just("reviews"),
            Just("reviews.prod"),
            Just("login.example.com"),
            Just("shop.team-a.apps.example.com"),
            Just("SHOP.Team-A.apps.example.com."),
            Just("*.apps.example.com"),
            Just("evilteam-a.apps.example.com"),
            Just("team-a.apps.example.com.evil.com"),
            Just("*.team-a.apps.example.com"),
            Just("*x.team-a.apps.example.com"),
            Just("x.*.team-a.apps.example.com"),
            Just("shöp.team-a.apps.example.com"),
            Just("team-a.apps.example.com"),
            Just("a..team-a.apps.example.com"),
            Just(""),
        ]
        .prop_map(str::to_string),
        "[a-z*.-]{1,12}(\\.team-a\\.apps\\.example\\.com)?",
        "[a-z]{1,6}\\.(team-a-|team-b-|kube-)?[a-z]{1,6}(\\.svc(\\.cluster\\.local)?)?",
    ]
}

/// Identities a hostile tenant would try.
fn identity() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("*"),
            Just("cluster.local/ns/prod/sa/api"),
            Just("spiffe://cluster.local/ns/team-b-prod/sa/payments"),
            Just("spiffe://cluster.local/ns/*/sa/payments"),
            Just("cluster.local/ns/kube-system/sa/*"),
            Just("cluster.local/ns/prod/sa/api/extra"),
            Just("cluster.local/ns/prod"),
            Just("cluster.local/ns//sa/x"),
        ]
        .prop_map(str::to_string),
        "(spiffe://)?[a-z.]{1,8}/ns/[a-z*-]{0,8}/sa/[a-z*-]{0,6}",
    ]
}

/// Globs a hostile tenant would try.
fn glob() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("*"),
            Just("team-b-*"),
            Just("[a-z]*"),
            Just("{a,b}"),
            Just("prod-*"),
            Just(""),
            Just("team-a-*"),
            Just("?"),
        ]
        .prop_map(str::to_string),
        "[a-z*?{}\\[\\]!-]{1,8}",
    ]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The oracle's reading of a host as in-cluster: the namespace label (the one before `svc`,
/// else the last), or `None` for a short name.
fn host_namespace(host: &str) -> Option<String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    if labels.len() == 1 {
        return None;
    }
    let at = labels
        .iter()
        .rposition(|l| *l == "svc")
        .unwrap_or(labels.len());
    Some(labels[..at].last().copied().unwrap_or("").to_string())
}

fn in_cluster_ok(host: &str) -> bool {
    host != "*"
        && host_namespace(host)
            .is_none_or(|ns| ns.strip_prefix("team-a-").is_some_and(|r| !r.is_empty()))
}

fn external_ok(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let name = host.strip_prefix("*.").unwrap_or(&host);
    host.is_ascii()
        && !name.contains('*')
        && (name == DOMAIN || name.ends_with(&format!(".{DOMAIN}")))
}

fn identity_ok(id: &str) -> bool {
    let parts: Vec<&str> = id.trim_start_matches("spiffe://").split('/').collect();
    parts.len() == 5
        && parts[1] == "ns"
        && parts[3] == "sa"
        && parts[2]
            .strip_prefix("team-a-")
            .is_some_and(|r| !r.is_empty())
}

fn glob_ok(glob: &str) -> bool {
    glob.strip_prefix("team-a-").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-*?".contains(c))
    })
}

/// What the guard promises of a written Route, Policy or Backup, checked by path.
fn violations(obj: &Value) -> Vec<String> {
    let spec = &obj["spec"];
    let mut out = Vec::new();
    for h in strings(&spec["service"]) {
        if !in_cluster_ok(&h) {
            out.push(format!("service host {h:?}"));
        }
    }
    match spec.get("external") {
        Some(Value::Array(a)) if !a.is_empty() => {}
        Some(_) | None if obj["kind"] == "Route" => out.push("external hosts absent".into()),
        _ => {}
    }
    for h in strings(&spec["external"]) {
        if !external_ok(&h) {
            out.push(format!("external host {h:?}"));
        }
    }
    for h in strings(&spec["both"]) {
        let lower = h.to_ascii_lowercase();
        let in_cluster = !lower.contains('.')
            || lower.trim_end_matches('.').ends_with(".svc")
            || lower.trim_end_matches('.').ends_with(".svc.cluster.local");
        if !(if in_cluster {
            in_cluster_ok(&h)
        } else {
            external_ok(&h)
        }) {
            out.push(format!("host {h:?}"));
        }
    }
    for id in strings(&spec["principals"]) {
        if !identity_ok(&id) {
            out.push(format!("identity {id:?}"));
        }
    }
    if obj["kind"] == "Backup" && strings(&spec["includedNamespaces"]).is_empty() {
        out.push("includedNamespaces empty".into());
    }
    for g in strings(&spec["includedNamespaces"])
        .into_iter()
        .chain(strings(&spec["excludedNamespaces"]))
    {
        if !glob_ok(&g) {
            out.push(format!("glob {g:?}"));
        }
    }
    out
}

/// A hostile tenant object of one of the fixture's kinds.
fn tenant_object() -> impl Strategy<Value = Value> {
    let list = |s: BoxedStrategy<String>| proptest::collection::vec(s, 0..3);
    prop_oneof![
        (
            list(host().boxed()),
            list(host().boxed()),
            list(host().boxed())
        )
            .prop_map(
                |(service, external, both)| json!({"apiVersion": "example.com/v1", "kind": "Route",
                "metadata": {"name": "r", "namespace": "prod"},
                "spec": {"service": service, "external": external, "both": both}})
            ),
        (list(identity().boxed()), list(glob().boxed())).prop_map(|(principals, namespaces)| {
            json!({"apiVersion": "example.com/v1", "kind": "Policy",
                "metadata": {"name": "p", "namespace": "prod"},
                "spec": {"principals": principals, "namespaces": namespaces}})
        }),
        (list(glob().boxed()), list(glob().boxed())).prop_map(|(included, excluded)| {
            json!({"apiVersion": "example.com/v1", "kind": "Backup",
                "metadata": {"name": "b", "namespace": "prod"},
                "spec": {"includedNamespaces": included, "excludedNamespaces": excluded}})
        }),
    ]
}

/// The same object as a transform might return it: ferry's metadata, any values.
fn written(mut object: Value) -> Value {
    let name = object["metadata"]["name"].clone();
    object["metadata"] = json!({
        "name": name,
        "namespace": "team-a-prod",
        "labels": {"ferry.dev/tenant": "team-a"},
        "annotations": {"ferry.dev/tenant-namespace": "prod", "ferry.dev/tenant-name": name},
    });
    object
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Hostile names through the whole translation: refused, or inside the tenant's space.
    #[test]
    fn hostile_names_are_refused_or_the_tenants(object in tenant_object()) {
        let policy = policy();
        let namespaces = vec!["prod".to_string()];
        let translator = Translator::new(&policy, None).with_namespaces(&namespaces);
        if let Ok(t) = translator.to_super(object, &names(), false) {
            prop_assert_eq!(violations(&t.object), Vec::<String>::new(), "{:#}", t.object);
        }
    }

    /// Hostile names as a transform's output, straight into the guard.
    #[test]
    fn the_guard_lets_no_foreign_name_through(object in tenant_object()) {
        let policy = policy();
        let object = written(object);
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let resource = policy.resource("example.com", &kind).expect("approved");
        let names = names();
        let mut guard = Guard::new(&policy, &names, None, true, false);
        if guard.down(resource, &object).is_ok() {
            prop_assert_eq!(violations(&object), Vec::<String>::new(), "{:#}", object);
        }
    }

    /// Up, a to_tenant output naming namespaces: only the tenant's, or redacted ones, pass.
    #[test]
    fn up_only_the_tenants_namespaces_pass(
        namespace in prop_oneof![Just("prod"), Just("team-b-prod"), Just("redacted-2"), Just("kube-system"), Just("redacted-"), Just("")],
        host in host(),
    ) {
        let policy = policy();
        let resource = policy.resource("example.com", "Route").expect("approved");
        let names = names();
        let own = vec!["prod".to_string()];
        let guard = Guard::new(&policy, &names, None, true, false).with_namespaces(&own);
        let fragment = json!({"apiVersion": "example.com/v1", "kind": "Route",
            "metadata": {"name": "r", "namespace": "prod"},
            "status": {"hosts": [host.clone(), format!("svc.{namespace}.svc")]}});
        if guard.up(resource, &fragment).is_ok() {
            let shown: Vec<String> = [host.as_str(), &format!("svc.{namespace}.svc")]
                .iter()
                .filter_map(|h| host_namespace(h))
                .collect();
            for ns in shown {
                let redacted = ns.strip_prefix("redacted-").is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
                prop_assert!(ns == "prod" || redacted, "{ns:?} flowed up in {fragment:#}");
            }
        }
    }
}
