//! One test per decision, without an API server.

use super::*;
use crate::key::Kind;

fn key() -> Key {
    Key::new(
        &"team-a".into(),
        Kind::Resource(crate::key::EntryId(0)),
        "shop",
        "orders",
    )
}

/// ferry's copy of team-a's shop/orders (tenant uid `t1`), with `spec`.
fn copy(spec: Value, applied: &str) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {
            "name": "orders", "namespace": "team-a-shop", "uid": "c1", "resourceVersion": "7",
            "managedFields": [{"manager": "ferry"}],
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {
                "ferry.dev/tenant-namespace": "shop", "ferry.dev/tenant-name": "orders",
                "ferry.dev/tenant-uid": "t1", ANN_APPLIED: applied,
            },
        },
        "spec": spec,
    })
}

fn desired(spec: Value) -> (Value, String) {
    let mut d = copy(spec, "");
    d["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(ANN_APPLIED);
    for k in ["uid", "resourceVersion"] {
        d["metadata"].as_object_mut().unwrap().remove(k);
    }
    stamped(d)
}

#[test]
fn what_is_wanted() {
    assert!(wanted(true, true, false, false));
    assert!(!wanted(false, true, false, true));
    assert!(!wanted(true, false, false, true), "namespace going");
    assert!(!wanted(true, true, true, false), "unreferenced dependency");
    assert!(wanted(true, true, true, true));
}

/// `d` naming the uid it may be applied to.
fn at_uid(d: &Value, uid: &str) -> Value {
    let mut d = d.clone();
    d["metadata"]["uid"] = json!(uid);
    d
}

#[test]
fn a_missing_copy_is_created_only_where_nothing_holds_the_name() {
    let (d, hash) = desired(json!({"a": 1}));
    // One request: created on condition that nothing holds the name; read only if it fails.
    assert_eq!(
        to_super(&d, &hash, None, "t1", false),
        CopyWrite::Create(d.clone())
    );
    // It failed: ferry's own copy (not in the cache yet) is applied to, by its uid.
    let mine = copy(json!({}), "");
    assert_eq!(
        checked(Some(&mine), &key(), true, &d, "t1"),
        CopyWrite::Apply(at_uid(&d, "c1"))
    );
    assert_eq!(
        checked(None, &key(), true, &d, "t1"),
        CopyWrite::Create(d.clone())
    );
    // The copy of an earlier tenant object of that name is not adopted; a going one awaited.
    assert_eq!(
        checked(Some(&mine), &key(), true, &d, "t2"),
        CopyWrite::Recreate(Doomed {
            uid: "c1".into(),
            version: "7".into()
        })
    );
    let mut going = mine.clone();
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(
        checked(Some(&going), &key(), true, &d, "t1"),
        CopyWrite::Wait
    );
}

#[test]
fn someone_elses_super_object_is_refused() {
    let (d, _) = desired(json!({"a": 1}));
    let foreign = json!({"metadata": {"name": "orders", "namespace": "team-a-shop"}});
    let CopyWrite::Refuse(r) = checked(Some(&foreign), &key(), true, &d, "t1") else {
        panic!("not refused")
    };
    assert_eq!(r.reason, Reason::SyncConflict);
    assert!(r.message.contains("team-a-shop/orders") && r.message.contains("does not own"));
    let mut other = copy(json!({}), "");
    other["metadata"]["labels"]["ferry.dev/tenant"] = json!("team-b");
    let CopyWrite::Refuse(r) = checked(Some(&other), &key(), true, &d, "t1") else {
        panic!("another tenant's copy taken")
    };
    assert!(r.message.contains("team-b"), "{}", r.message);
}

#[test]
fn a_current_copy_gets_no_write() {
    let (d, hash) = desired(json!({"a": 1}));
    let current = copy(json!({"a": 1}), &hash);
    assert_eq!(
        to_super(&d, &hash, Some(&current), "t1", false),
        CopyWrite::Nothing
    );
    // The API server normalised it (a field pruned): ferry's own write still counts.
    let normalised = copy(json!({}), &hash);
    assert_eq!(
        to_super(&d, &hash, Some(&normalised), "t1", true),
        CopyWrite::Nothing
    );
    assert_eq!(
        to_super(&d, &hash, Some(&normalised), "t1", false),
        CopyWrite::Apply(at_uid(&d, "c1"))
    );
}

#[test]
fn a_changed_or_edited_copy_is_applied() {
    let (d, hash) = desired(json!({"a": 2}));
    // The tenant changed it (another digest), or an admin edited the copy (same digest).
    let old = copy(json!({"a": 1}), "0123");
    assert_eq!(
        to_super(&d, &hash, Some(&old), "t1", false),
        CopyWrite::Apply(at_uid(&d, "c1"))
    );
    let edited = copy(json!({"a": 3}), &hash);
    assert_eq!(
        to_super(&d, &hash, Some(&edited), "t1", false),
        CopyWrite::Apply(at_uid(&d, "c1"))
    );
}

#[test]
fn the_copy_of_an_earlier_object_is_recreated_and_a_going_copy_awaited() {
    let (d, hash) = desired(json!({"a": 1}));
    let current = copy(json!({"a": 1}), &hash);
    assert_eq!(
        to_super(&d, &hash, Some(&current), "t2", false),
        CopyWrite::Recreate(Doomed {
            uid: "c1".into(),
            version: "7".into()
        })
    );
    let mut going = current.clone();
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(
        to_super(&d, &hash, Some(&going), "t1", false),
        CopyWrite::Wait
    );
    assert_eq!(remove(Some(&going)), None);
    assert_eq!(
        remove(Some(&current)),
        Some(Doomed {
            uid: "c1".into(),
            version: "7".into()
        })
    );
    assert_eq!(remove(None), None);
}

fn super_ns(tenant: &str, tenant_ns: &str, labels: Value, recorded: &str) -> Value {
    let mut all = labels;
    all["ferry.dev/tenant"] = json!(tenant);
    json!({"metadata": {"name": "team-a-shop", "uid": "n1", "labels": all,
        "annotations": {"ferry.dev/tenant-namespace": tenant_ns, "ferry.dev/tenant-labels": recorded}}})
}

fn labels(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn super_namespaces_are_made_followed_and_never_annexed() {
    let want = labels(json!({"zone": "a"}));
    let NamespaceStep::Create(ns) =
        super_namespace(None, "team-a", "shop", "team-a-shop", &want, None)
    else {
        panic!("not created")
    };
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"zone": "a", "ferry.dev/tenant": "team-a"})
    );
    assert_eq!(
        ns["metadata"]["annotations"]["ferry.dev/tenant-namespace"],
        "shop"
    );
    let mine = super_ns("team-a", "shop", json!({"zone": "a"}), "zone");
    assert_eq!(
        super_namespace(Some(&mine), "team-a", "shop", "team-a-shop", &want, None),
        NamespaceStep::Ready
    );
    let relabelled = labels(json!({"zone": "b"}));
    assert!(matches!(
        super_namespace(
            Some(&mine),
            "team-a",
            "shop",
            "team-a-shop",
            &relabelled,
            None
        ),
        NamespaceStep::Patch(_)
    ));
    let theirs = super_ns("team-b", "elsewhere", json!({}), "");
    let NamespaceStep::Refuse(r) =
        super_namespace(Some(&theirs), "team-a", "shop", "team-a-shop", &want, None)
    else {
        panic!("another tenant's namespace annexed")
    };
    assert!(r.message.contains("team-b"), "{}", r.message);
    let mut going = mine.clone();
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(
        super_namespace(Some(&going), "team-a", "shop", "team-a-shop", &want, None),
        NamespaceStep::Wait
    );
}

#[test]
fn a_gone_tenant_namespace_takes_its_super_namespace_only() {
    let want = labels(json!({"zone": "a"}));
    let mine = super_ns("team-a", "shop", json!({"zone": "a"}), "zone");
    assert_eq!(
        tenant_namespace(false, Some(&mine), "team-a", "shop", &want, None),
        NamespaceFollow::Delete(Doomed {
            uid: "n1".into(),
            version: String::new()
        })
    );
    assert_eq!(
        tenant_namespace(true, Some(&mine), "team-a", "shop", &want, None),
        NamespaceFollow::Nothing
    );
    let theirs = super_ns("team-b", "shop", json!({}), "");
    assert_eq!(
        tenant_namespace(false, Some(&theirs), "team-a", "shop", &want, None),
        NamespaceFollow::Nothing
    );
    assert_eq!(
        tenant_namespace(false, None, "team-a", "shop", &want, None),
        NamespaceFollow::Nothing
    );
}

#[test]
fn super_namespaces_record_their_tenant_cluster_and_never_serve_another() {
    let want = labels(json!({"zone": "a"}));
    let NamespaceStep::Create(ns) =
        super_namespace(None, "team-a", "shop", "team-a-shop", &want, Some("c1"))
    else {
        panic!("not created")
    };
    assert_eq!(
        ns["metadata"]["annotations"]["ferry.dev/tenant-cluster"],
        "c1"
    );
    // Made before bindings: adopted by the cluster ferry reaches now, alone or with labels.
    let old = super_ns("team-a", "shop", json!({"zone": "a"}), "zone");
    let adopt =
        json!({"metadata": {"uid": "n1", "annotations": {"ferry.dev/tenant-cluster": "c1"}}});
    assert_eq!(
        super_namespace(
            Some(&old),
            "team-a",
            "shop",
            "team-a-shop",
            &want,
            Some("c1")
        ),
        NamespaceStep::Patch(adopt.clone())
    );
    assert_eq!(
        tenant_namespace(true, Some(&old), "team-a", "shop", &want, Some("c1")),
        NamespaceFollow::Patch(adopt)
    );
    // Bound to c1, reached from c2: refused, never patched, never deleted.
    let mut bound = old.clone();
    bound["metadata"]["annotations"]["ferry.dev/tenant-cluster"] = json!("c1");
    assert_eq!(
        super_namespace(
            Some(&bound),
            "team-a",
            "shop",
            "team-a-shop",
            &want,
            Some("c1")
        ),
        NamespaceStep::Ready
    );
    let NamespaceStep::Refuse(r) = super_namespace(
        Some(&bound),
        "team-a",
        "shop",
        "team-a-shop",
        &want,
        Some("c2"),
    ) else {
        panic!("written into a namespace bound to another cluster")
    };
    assert_eq!(r.reason, Reason::OutsideTenant);
    assert!(
        r.message.contains("ferry.dev/tenant-cluster-"),
        "{}",
        r.message
    );
    for alive in [true, false] {
        assert_eq!(
            tenant_namespace(alive, Some(&bound), "team-a", "shop", &want, Some("c2")),
            NamespaceFollow::Nothing
        );
    }
}

#[test]
fn read_only_copies_follow_their_super_object_and_tenant_edits_are_reverted() {
    let d = json!({"metadata": {"name": "fast", "labels": {"ferry.dev/from-super": "true"}}, "provisioner": "x"});
    assert_eq!(
        read_only_copy(Some(&d), None, false),
        ReadOnly::Check(d.clone())
    );
    assert_eq!(
        read_only_checked(None, &d, "StorageClass fast", "the public object"),
        Checked::Create(d.clone())
    );
    let mut c = d.clone();
    c["metadata"]["resourceVersion"] = json!("5");
    c["metadata"]["uid"] = json!("u5");
    assert_eq!(read_only_copy(Some(&d), Some(&c), false), ReadOnly::Nothing);
    let mut edited = c.clone();
    edited["provisioner"] = json!("mine");
    let ReadOnly::Replace(body) = read_only_copy(Some(&d), Some(&edited), false) else {
        panic!("edit not reverted")
    };
    assert_eq!(body["metadata"]["resourceVersion"], "5");
    assert_eq!(body["provisioner"], "x");
    assert_eq!(
        read_only_copy(Some(&d), Some(&edited), true),
        ReadOnly::Nothing
    );
    assert_eq!(
        read_only_copy(None, Some(&c), false),
        ReadOnly::Delete(Doomed {
            uid: "u5".into(),
            version: "5".into()
        })
    );
    assert_eq!(read_only_copy(None, None, false), ReadOnly::Nothing);
}

#[test]
fn a_tenants_own_object_is_never_replaced_by_a_read_only_copy() {
    let d = json!({"metadata": {"name": "fast"}});
    let own = json!({"metadata": {"name": "fast", "resourceVersion": "3"}});
    let Checked::Refuse(r) =
        read_only_checked(Some(&own), &d, "StorageClass fast", "the public object")
    else {
        panic!("the tenant's object replaced")
    };
    assert!(r.message.contains("its own StorageClass fast"));
    let stale = json!({"metadata": {"name": "fast", "resourceVersion": "3", "labels": {"ferry.dev/from-super": "true"}}});
    assert!(matches!(
        read_only_checked(Some(&stale), &d, "x", "the public object"),
        Checked::Replace(_)
    ));
}

#[test]
fn status_and_super_owned_fields_flow_up_once() {
    let fragment = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "namespace": "n"},
        "status": {"phase": "Ready"}, "spec": {"endpoint": "db:5432"}});
    let object = json!({"metadata": {"name": "a"}, "spec": {"tier": "small"}});
    let writes = up(fragment.clone(), &object, true, |_, _| false);
    let parts: Vec<Part> = writes.iter().map(|(p, _, _)| *p).collect();
    assert_eq!(parts, [Part::Status, Part::Object]);
    assert_eq!(writes[0].2["status"]["phase"], "Ready");
    assert!(writes[0].2.get("spec").is_none());
    assert_eq!(writes[1].2["spec"]["endpoint"], "db:5432");
    assert!(writes[1].2.get("status").is_none());
    // Without a status subresource, status goes with the object.
    let writes = up(fragment.clone(), &object, false, |_, _| false);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].2["status"]["phase"], "Ready");
    // Already there, or ferry wrote it: nothing.
    let current = json!({"metadata": {"name": "a"}, "status": {"phase": "Ready"}, "spec": {"tier": "small", "endpoint": "db:5432"}});
    assert!(up(fragment.clone(), &current, true, |_, _| false).is_empty());
    assert!(up(fragment, &object, true, |_, _| true).is_empty());
}

#[test]
fn a_public_copy_that_cannot_change_is_kept_and_a_produced_one_made_anew() {
    let c = json!({"metadata": {"name": "fast", "uid": "u5", "resourceVersion": "5"}});
    let Unchangeable::Keep(r) = unchangeable(InPlace::Keep, Some(&c), "field is immutable") else {
        panic!("a public copy deleted")
    };
    assert_eq!(r.reason, Reason::Invalid);
    assert!(r.message.contains("field is immutable"), "{}", r.message);
    assert_eq!(
        unchangeable(InPlace::Remake, Some(&c), "x"),
        Unchangeable::Remake(Doomed {
            uid: "u5".into(),
            version: "5".into()
        })
    );
    // Created over an earlier copy not in the cache: the write's error stands.
    assert_eq!(unchangeable(InPlace::Remake, None, "x"), Unchangeable::Fail);
}
