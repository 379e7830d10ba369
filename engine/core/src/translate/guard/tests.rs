//! Property tests of the guard: hostile tenant objects through the whole translation, and
//! hostile transform outputs (any value at any annotated position, forged keys at any depth,
//! metadata a transform must not add) straight into the guard. Whatever is not refused must
//! satisfy the invariants, checked by an oracle written independently of the guard: it knows
//! the fixture's fields by path, not the compiled plan.

use std::path::Path as FsPath;

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::Guard;
use crate::naming::{dns_label_problem, NameMap, Tenant};
use crate::policy::Policy;
use crate::translate::{Reason, Translator};

const TENANT: &str = "team-a";

fn policy() -> Policy {
    let dir = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/guard");
    crate::policy::load(&dir).expect("the guard fixtures load")
}

fn names() -> NameMap {
    NameMap::new(Tenant::new(TENANT).unwrap())
}

/// Namespaces a hostile tenant would try: its own, another tenant's, system ones, invalid ones.
fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("prod".to_string()),
        Just("kube-system".to_string()),
        Just("default".to_string()),
        Just("team-b-prod".to_string()),
        Just("team-a-prod".to_string()),
        Just("team-a".to_string()),
        Just("Team-B".to_string()),
        Just("admin/team-a".to_string()),
        Just("x".repeat(70)),
        "[a-z][a-z0-9-]{0,12}",
    ]
}

/// Any shape where a namespace, a reference or a list of them is expected.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        namespace().prop_map(Value::String),
        Just(Value::Null),
        Just(json!(7)),
        Just(json!(true)),
        // Past int64: serde_json reads them as u64, Kubernetes cannot hold them.
        Just(json!(i64::MAX as u64 + 1)),
        Just(json!(u64::MAX)),
    ];
    let nested = leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            (namespace(), namespace(), inner).prop_map(|(name, ns, extra)| {
                json!({"name": name, "namespace": ns, "extra": extra})
            }),
        ]
    });
    // Plain strings are what most fields hold: make them common at the top.
    prop_oneof![2 => namespace().prop_map(Value::String), 3 => nested]
}

/// A map whose keys may be ferry's.
fn labels() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(
        prop_oneof![
            Just("ferry.dev/tenant".to_string()),
            Just("ferry.dev/tenant-namespace".to_string()),
            Just("app".to_string()),
        ],
        prop_oneof![
            Just("team-b".to_string()),
            Just("team-a".to_string()),
            namespace()
        ],
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect()))
}

const FIELDS: &[&str] = &[
    "targetNamespace",
    "allowedNamespaces",
    "restoreFrom",
    "sources",
    "backupSecret",
    "backupSecretNamespace",
    "gadget",
    "shelfRef",
    "rack",
    "podSelector",
    "notes",
    "endpoint",
    "template",
];

/// A hostile spec: any subset of the annotated fields, each with any value; selectors and
/// templates with forged keys.
fn spec() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec((0..FIELDS.len(), value()), 0..6),
        labels(),
        labels(),
    )
        .prop_map(|(fields, selector, template)| {
            let mut spec = Map::new();
            for (i, v) in fields {
                let v = match FIELDS[i] {
                    "podSelector" => json!({"matchLabels": selector.clone()}),
                    "template" => json!({"metadata": {"labels": template.clone()}}),
                    _ => v,
                };
                spec.insert(FIELDS[i].to_string(), v);
            }
            Value::Object(spec)
        })
}

fn widget(name: &str, ns: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    })
}

/// Every string anywhere in `v`.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// ferry.dev/ keys anywhere in `v`, with their paths.
fn reserved_keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| reserved_keys(v, &format!("{path}[{i}]"), out)),
        Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{path}/{k}");
                if k.starts_with("ferry.dev/") {
                    out.push(p.clone());
                }
                reserved_keys(v, &p, out);
            }
        }
        _ => {}
    }
}

fn ours(ns: &str) -> bool {
    ns.is_empty()
        || (dns_label_problem(ns).is_none()
            && ns.strip_prefix("team-a-").is_some_and(|r| !r.is_empty()))
}

/// How many levels of maps and lists `v` nests (a map of scalars is 1).
fn levels(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(levels).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(levels).max().unwrap_or(0),
        _ => 0,
    }
}

/// `leaf` inside `depth` maps and lists, alternately (by the bits of `lists`).
fn nest(depth: usize, lists: u64, leaf: Value) -> Value {
    (0..depth).fold(leaf, |inner, i| {
        if lists >> (i % 64) & 1 == 1 {
            json!([inner])
        } else {
            json!({ "x": inner })
        }
    })
}

/// Every number in `v` that is neither an int64 nor a finite float.
fn unholdable_numbers(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Number(n)
            if !n.is_i64() && !n.as_f64().is_some_and(|f| f.is_finite() && n.is_f64()) =>
        {
            out.push(format!("number {n}"))
        }
        Value::Array(a) => a.iter().for_each(|v| unholdable_numbers(v, out)),
        Value::Object(m) => m.values().for_each(|v| unholdable_numbers(v, out)),
        _ => {}
    }
}

/// What the guard promises of a written super object, checked by path.
fn violations(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    unholdable_numbers(obj, &mut out);
    if levels(obj) > super::values::MAX_DEPTH {
        out.push(format!("nested {} levels", levels(obj)));
    }
    let meta = &obj["metadata"];
    for key in meta.as_object().into_iter().flat_map(|m| m.keys()) {
        if !["name", "namespace", "labels", "annotations"].contains(&key.as_str()) {
            out.push(format!("metadata.{key} written"));
        }
    }
    if !ours(meta["namespace"].as_str().unwrap_or("")) || meta["namespace"].as_str().is_none() {
        out.push(format!("metadata.namespace {}", meta["namespace"]));
    }
    if meta["labels"]["ferry.dev/tenant"] != json!(TENANT) {
        out.push("ownership label".into());
    }
    if obj.get("status").is_some() {
        out.push("status went down".into());
    }
    let spec = &obj["spec"];
    for dropped in ["notes", "endpoint"] {
        if spec.get(dropped).is_some() {
            out.push(format!("spec.{dropped} went down"));
        }
    }
    let mut namespaces = Vec::new();
    for field in [
        "targetNamespace",
        "allowedNamespaces",
        "backupSecretNamespace",
    ] {
        strings(&spec[field], &mut namespaces);
    }
    strings(&spec["restoreFrom"]["namespace"], &mut namespaces);
    // A reference object where a name string is declared holds a namespace too.
    strings(&spec["backupSecret"]["namespace"], &mut namespaces);
    match &spec["sources"] {
        Value::Array(items) => items
            .iter()
            .for_each(|i| strings(&i["namespace"], &mut namespaces)),
        other => strings(&other["namespace"], &mut namespaces),
    }
    for ns in namespaces.iter().filter(|ns| !ours(ns)) {
        out.push(format!("namespace {ns:?} is not the tenant's"));
    }
    let mut public = Vec::new();
    strings(&spec["shelfRef"]["namespace"], &mut public);
    for ns in public.iter().filter(|ns| ns.starts_with("kube-")) {
        out.push(format!("public reference into {ns:?}"));
    }
    // A renamed reference: the tenant's name, as a string (or, where a field rule cannot know
    // the type, as a reference object of the tenant's).
    let renamed = |g: &str| g.is_empty() || g.starts_with("team-a-");
    match &spec["gadget"] {
        Value::Null => {}
        Value::String(g) if renamed(g) => {}
        Value::Object(m)
            if renamed(m.get("name").and_then(Value::as_str).unwrap_or(""))
                && ours(m.get("namespace").and_then(Value::as_str).unwrap_or("")) => {}
        other => out.push(format!("gadget {other}")),
    }
    match &spec["podSelector"] {
        Value::Null => {}
        s if s["matchLabels"]["ferry.dev/tenant"] == json!(TENANT) => {}
        other => out.push(format!("selector {other}")),
    }
    let mut keys = Vec::new();
    reserved_keys(obj, "", &mut keys);
    let allowed = [
        "/metadata/labels/ferry.dev/tenant",
        "/metadata/annotations/ferry.dev/tenant-namespace",
        "/metadata/annotations/ferry.dev/tenant-name",
        "/metadata/annotations/ferry.dev/tenant-uid",
        "/spec/podSelector/matchLabels/ferry.dev/tenant",
    ];
    for key in keys.iter().filter(|k| !allowed.contains(&k.as_str())) {
        out.push(format!("forged key {key}"));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Hostile tenant objects through the schema and metadata rules (and the same as field
    /// rules) and the guard.
    #[test]
    fn hostile_tenant_objects_are_refused_or_safe(
        name in prop_oneof![Just("w".to_string()), Just("Bad..Name".to_string()), "[a-z]{1,8}"],
        ns in namespace(),
        labels in labels(),
        spec in spec(),
    ) {
        let policy = policy();
        let mut object = widget(&name, &ns, labels, spec);
        // Gauge carries Widget's annotations as field rules, which know no field types.
        for kind in ["Widget", "Gauge"] {
            object["kind"] = json!(kind);
            if let Ok(t) = Translator::new(&policy, None).to_super(object.clone(), &names(), false) {
                let v = violations(&t.object);
                prop_assert!(v.is_empty(), "{v:?}\ninput {object:#}\noutput {:#}", t.object);
            }
        }
    }

    /// A transform may return anything: whatever the guard lets through is safe. Each case
    /// makes one hostile change to a valid output, so that accepted cases are common.
    #[test]
    fn hostile_transform_outputs_are_refused_or_safe(
        field in 0..FIELDS.len(),
        v in value(),
        change in 0..5usize,
        extra_meta in prop_oneof![
            Just(("ownerReferences", json!([{"kind": "Namespace", "name": "kube-system"}]))),
            Just(("finalizers", json!(["x/y"]))),
            Just(("namespace", json!("kube-system"))),
            Just(("namespace", json!("team-b-prod"))),
            Just(("name", json!("other"))),
        ],
        forged in labels(),
    ) {
        let policy = policy();
        let resource = policy.resource("example.com", "Widget").unwrap();
        let names = names();
        let base = widget("w", "prod", json!({}), json!({}));
        let mut out = Translator::new(&policy, None).to_super(base, &names, false).unwrap().object;
        match change {
            0 | 1 => out["spec"][FIELDS[field]] = v,
            2 => out["metadata"][extra_meta.0] = extra_meta.1,
            3 => out["status"] = json!({"phase": "Ready"}),
            _ => {
                if let Value::Object(forged) = forged {
                    for (k, v) in forged {
                        out["metadata"]["labels"][k] = v;
                    }
                }
            }
        }
        let mut guard = Guard::new(&policy, &names, None, true, false);
        if guard.down(resource, &out).is_ok() {
            let v = violations(&out);
            prop_assert!(v.is_empty(), "{v:?}\naccepted {out:#}");
        }
    }
}

/// A well-typed value of spec field `field` (as the schema declares it), hostile in content.
fn typed(field: &str) -> BoxedStrategy<Value> {
    let reference =
        (namespace(), namespace()).prop_map(|(name, ns)| json!({"name": name, "namespace": ns}));
    match field {
        "allowedNamespaces" => proptest::collection::vec(namespace().prop_map(Value::String), 0..3)
            .prop_map(Value::Array)
            .boxed(),
        "restoreFrom" | "shelfRef" => reference.boxed(),
        "sources" => proptest::collection::vec(reference, 0..3)
            .prop_map(Value::Array)
            .boxed(),
        "podSelector" => labels().prop_map(|l| json!({"matchLabels": l})).boxed(),
        "template" => labels()
            .prop_map(|l| json!({"metadata": {"labels": l}}))
            .boxed(),
        _ => namespace().prop_map(Value::String).boxed(),
    }
}

/// A well-typed hostile spec.
fn typed_spec() -> impl Strategy<Value = Value> {
    proptest::collection::vec(
        (0..FIELDS.len()).prop_flat_map(|i| (Just(i), typed(FIELDS[i]))),
        0..6,
    )
    .prop_map(|fields| {
        Value::Object(
            fields
                .into_iter()
                .map(|(i, v)| (FIELDS[i].to_string(), v))
                .collect(),
        )
    })
}

/// The outcome of a translation, with the kind (the only difference) set to `Widget`.
fn outcome(
    result: crate::translate::Result<crate::translate::Translated>,
) -> Result<Value, String> {
    match result {
        Ok(mut t) => {
            t.object["kind"] = json!("Widget");
            Ok(t.object)
        }
        Err(e) => Err(e.reason.to_string()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Field rules mean exactly what the schema annotations of the same name mean: Gauge
    /// carries Widget's annotations as field rules, and every object translates alike, down
    /// and up; whatever goes down is also safe by the oracle.
    #[test]
    fn field_rules_translate_like_schema_annotations(
        ns in namespace(),
        labels in labels(),
        spec in typed_spec(),
        status_ns in namespace(),
        listed in proptest::collection::vec(namespace(), 0..3),
    ) {
        let policy = policy();
        let names = names();
        let translator = Translator::new(&policy, None);
        let widget_obj = widget("w", &ns, labels, spec);
        let mut gauge_obj = widget_obj.clone();
        gauge_obj["kind"] = json!("Gauge");
        let down = outcome(translator.to_super(widget_obj.clone(), &names, false));
        prop_assert_eq!(&down, &outcome(translator.to_super(gauge_obj, &names, false)), "input {:#}", widget_obj);
        if let Ok(object) = &down {
            let v = violations(object);
            prop_assert!(v.is_empty(), "{v:?}");
        }
        let Ok(mut copy) = down else { return Ok(()) };
        copy["metadata"]["uid"] = json!("u-1");
        copy["metadata"]["annotations"]["ferry.dev/tenant-uid"] = json!("t-1");
        copy["spec"]["endpoint"] = json!("db.internal:5432");
        copy["status"] = json!({
            "phase": "Ready",
            "namespace": status_ns,
            "namespaces": listed.iter().map(|n| json!({"namespace": n, "ready": true})).collect::<Vec<_>>(),
        });
        let mut gauge_copy = copy.clone();
        gauge_copy["kind"] = json!("Gauge");
        let up = outcome(translator.to_tenant(&copy, &names, false));
        prop_assert_eq!(&up, &outcome(translator.to_tenant(&gauge_copy, &names, false)), "copy {:#}", copy);
    }
}

#[test]
fn the_oracle_sees_what_the_guard_must_refuse() {
    // The oracle is the test's measure: it must flag each class of attack.
    let bad = widget(
        "w",
        "prod",
        json!({}),
        json!({"restoreFrom": {"namespace": "kube-system"}, "template": {"labels": {"ferry.dev/x": "1"}}, "gadget": "team-b-gold"}),
    );
    let v = violations(&bad);
    assert!(v.iter().any(|v| v.contains("kube-system")), "{v:?}");
    assert!(v.iter().any(|v| v.contains("forged key")), "{v:?}");
    assert!(v.iter().any(|v| v.contains("gadget")), "{v:?}");
    let big = widget("w", "prod", json!({}), json!({"free": [u64::MAX]}));
    assert!(violations(&big).iter().any(|v| v.contains("number")));
    let deep = widget(
        "w",
        "prod",
        json!({}),
        json!({"free": nest(63, 0, json!(1))}),
    );
    assert!(violations(&deep)
        .iter()
        .any(|v| v.contains("nested 65 levels")));
}

#[test]
fn namespace_values_never_name_a_platform_namespace() {
    let policy = policy();
    let platform = [crate::glob::Glob::new("team-a-plat?-*").unwrap()];
    let fenced = names().with_platform(&platform);
    let translate = |spec: Value| {
        Translator::new(&policy, None).to_super(
            widget("w", "prod", json!({}), spec),
            &fenced,
            false,
        )
    };
    for spec in [
        json!({"targetNamespace": "platx-1"}),
        json!({"allowedNamespaces": ["prod", "platy-2"]}),
        json!({"restoreFrom": {"name": "w", "namespace": "platz-3"}}),
    ] {
        let refused = translate(spec.clone()).unwrap_err();
        assert_eq!(refused.reason, Reason::OutsideTenant, "{spec}: {refused}");
        assert!(refused.message.contains("platformNamespaces"), "{refused}");
    }
    // Without the pattern, or for a name it does not match, the value maps as ever.
    let out = translate(json!({"targetNamespace": "platform-x"})).unwrap();
    assert_eq!(out.object["spec"]["targetNamespace"], "team-a-platform-x");
    let plain = Translator::new(&policy, None)
        .to_super(
            widget(
                "w",
                "prod",
                json!({}),
                json!({"targetNamespace": "platx-1"}),
            ),
            &names(),
            false,
        )
        .unwrap();
    assert_eq!(plain.object["spec"]["targetNamespace"], "team-a-platx-1");
}

#[test]
fn selectors_of_namespaces_select_only_by_labels_super_namespaces_carry() {
    let dir = crate::policy::pin::tempdir::Dir::new();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, "apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nmetadata: {name: portal}\nspec:\n  resources:\n  - apiVersion: example.com/v1\n    kind: Portal\n    direction: toSuper\n    fields:\n    - {path: \"$.spec.from\", namespaceSelector: true}\n").unwrap();
    let policy = crate::policy::load(&file).unwrap();
    let portal = |from: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Portal",
            "metadata": {"name": "p", "namespace": "prod"}, "spec": {"from": from}})
    };
    let allow = [crate::glob::Glob::new("tier").unwrap()];
    let live = names().with_namespace_labels(&allow);
    let translate = |from: Value, names: &NameMap| {
        Translator::new(&policy, None).to_super(portal(from), names, false)
    };
    // Allowed keys, the tenant's label and namespace names pass, live and offline.
    let fine = json!({"matchLabels": {"tier": "gold", "kubernetes.io/metadata.name": "prod"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]});
    let out = translate(fine.clone(), &live).unwrap();
    assert_eq!(
        out.object["spec"]["from"]["matchLabels"]["ferry.dev/tenant"],
        "team-a"
    );
    for from in [
        json!({"matchLabels": {"team": "x"}}),
        json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}),
        // Allowed by a pattern or not, reserved keys are never on a super namespace.
        json!({"matchLabels": {"pod-security.kubernetes.io/enforce": "privileged"}}),
    ] {
        let refused = translate(from.clone(), &live).unwrap_err();
        assert_eq!(refused.reason, Reason::OutsideTenant, "{from}: {refused}");
        assert!(
            refused.message.contains("namespaceLabels.allow"),
            "{refused}"
        );
        // Offline nothing is known of the SyncConfig: not checked.
        assert!(translate(from, &names()).is_ok());
    }
    let everything = [crate::glob::Glob::new("*").unwrap()];
    let reserved = json!({"matchLabels": {"pod-security.kubernetes.io/enforce": "privileged"}});
    assert!(translate(reserved, &names().with_namespace_labels(&everything)).is_err());
}

mod annotations;
mod depth;
mod names;
mod placed;
