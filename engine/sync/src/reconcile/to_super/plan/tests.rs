//! The toSuper plans, one test per behaviour, without an API server.

use ferry_core::keys::ANN_APPLIED;
use serde_json::json;

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

/// ferry's copy of team-a's shop/orders (tenant uid `tenant_uid`) with uid `uid`, applied
/// with digest `applied`.
fn copy(uid: &str, tenant_uid: &str, applied: &str) -> Arc<Value> {
    Arc::new(json!({
        "apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {
            "name": "orders", "namespace": "team-a-shop", "uid": uid, "resourceVersion": "7",
            "managedFields": [{"manager": "ferry"}],
            "labels": {"ferry.dev/tenant": "team-a"},
            "annotations": {
                "ferry.dev/tenant-namespace": "shop", "ferry.dev/tenant-name": "orders",
                "ferry.dev/tenant-uid": tenant_uid, ANN_APPLIED: applied,
            },
        },
        "spec": {"size": 1},
    }))
}

fn going(copy: &Arc<Value>) -> Arc<Value> {
    let mut c = (**copy).clone();
    c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    Arc::new(c)
}

/// A super serving the kind, holding `copy` (checked, its digest current, when `checked`).
fn holding(copy: Option<Arc<Value>>, checked: bool) -> Held {
    Held {
        served: true,
        copy,
        checked,
        applied_current: checked,
        stale: false,
    }
}

fn unserved() -> Held {
    Held::default()
}

/// A wanted namespaced tenant object (uid `t1`) with `supers` and `targets`.
fn snapshot(supers: Vec<Held>, targets: &[usize]) -> Snapshot {
    Snapshot {
        namespaced: true,
        object_uid: Some("t1".into()),
        reduced: false,
        wanted: true,
        supers,
        targets: targets.iter().copied().map(SuperId).collect(),
        settled: false,
    }
}

/// The body and digest the tenant object asks for.
fn desired() -> (Value, String) {
    decide::stamped(json!({
        "apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {"name": "orders", "namespace": "team-a-shop"},
        "spec": {"size": 1},
    }))
}

/// The placing `s` plans for the desired copy `body` (digest `hash`).
fn placing_of(s: &Snapshot, body: &Value, hash: &str) -> Placing {
    placed_by(plan(s, Some(Desired { body, hash })))
}

fn placed_by(plan: Plan) -> Placing {
    match plan {
        Plan::Place(placing) => placing,
        other => panic!("not placed: {other:?}"),
    }
}

fn doomed(uid: &str) -> Doomed {
    Doomed {
        uid: uid.into(),
        version: "7".into(),
    }
}

#[test]
fn a_missing_copy_is_created() {
    let (body, hash) = desired();
    let s = snapshot(vec![holding(None, false)], &[0]);
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(placing.source, SuperId(0));
    assert!(placing.complete);
    assert_eq!(
        placing.writes,
        [Write {
            at: SuperId(0),
            step: CopyWrite::Create(body.clone())
        }]
    );
    assert!(placing.deletes.is_empty());
}

#[test]
fn a_current_copy_is_not_written() {
    let (body, hash) = desired();
    let s = snapshot(vec![holding(Some(copy("c1", "t1", &hash)), true)], &[0]);
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(placing.writes[0].step, CopyWrite::Nothing);
}

#[test]
fn a_copy_left_stale_by_a_failed_cleanup_is_applied_again() {
    let (body, hash) = desired();
    let mut held = holding(Some(copy("c1", "t1", &hash)), true);
    held.stale = true;
    let s = snapshot(vec![held], &[0]);
    let placing = placing_of(&s, &body, &hash);
    let CopyWrite::Apply(applied) = &placing.writes[0].step else {
        panic!("not applied again: {:?}", placing.writes)
    };
    assert_eq!(applied["metadata"]["uid"], "c1");
}

#[test]
fn a_migration_writes_the_new_copy_first_and_deletes_nothing() {
    let (body, hash) = desired();
    let old = copy("c1", "t1", &hash);
    let s = snapshot(
        vec![holding(Some(old), true), holding(None, false)],
        &[0, 1],
    );
    let placing = placing_of(&s, &body, &hash);
    let order: Vec<usize> = placing.writes.iter().map(|w| w.at.0).collect();
    assert_eq!(order, [1, 0], "the migration's target first");
    assert_eq!(placing.writes[0].step, CopyWrite::Create(body.clone()));
    assert_eq!(
        placing.source,
        SuperId(0),
        "status still flows from the running super"
    );
    assert!(placing.deletes.is_empty());
}

#[test]
fn a_copy_outside_the_targets_goes_only_in_a_plan_where_every_target_serves_the_kind() {
    let (body, hash) = desired();
    let old = copy("c1", "t1", &hash);
    // Switched to super 1, which lacks the copy: it is created there, then the old one goes.
    let s = snapshot(
        vec![holding(Some(old.clone()), true), holding(None, false)],
        &[1],
    );
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(
        placing.writes,
        [Write {
            at: SuperId(1),
            step: CopyWrite::Create(body.clone())
        }]
    );
    assert_eq!(
        placing.deletes,
        [Delete {
            at: SuperId(0),
            doomed: doomed("c1")
        }]
    );
    // Super 1 does not serve the kind (yet): no copy can exist there, so the old one stays.
    let s = snapshot(vec![holding(Some(old), true), unserved()], &[1]);
    let placing = placing_of(&s, &body, &hash);
    // The write is still tried (the kind may be served by then), but nothing elsewhere goes.
    assert_eq!(placing.writes.len(), 1);
    assert!(!placing.complete);
    assert!(placing.deletes.is_empty(), "the only copy deleted");
}

#[test]
fn a_target_that_does_not_serve_the_kind_is_not_complete() {
    let (body, hash) = desired();
    let elsewhere = holding(Some(copy("c1", "t1", &hash)), true);
    let s = snapshot(vec![holding(None, false), unserved(), elsewhere], &[0, 1]);
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(
        placing.writes.len(),
        2,
        "a write tried where the kind may be served"
    );
    assert!(!placing.complete, "settled although a target holds no copy");
    assert!(placing.deletes.is_empty(), "a copy elsewhere deleted");
}

#[test]
fn a_new_tenant_object_of_the_same_name_has_the_earlier_copy_recreated() {
    let (body, hash) = desired();
    let earlier = copy("c1", "t0", &hash);
    let s = snapshot(vec![holding(Some(earlier), true)], &[0]);
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(placing.writes[0].step, CopyWrite::Recreate(doomed("c1")));
    // Being deleted already: awaited, never written over.
    let going = going(&copy("c1", "t1", &hash));
    let s = snapshot(vec![holding(Some(going), false)], &[0]);
    let placing = placing_of(&s, &body, &hash);
    assert_eq!(placing.writes[0].step, CopyWrite::Wait);
}

#[test]
fn a_create_that_finds_the_name_taken_plans_again_from_what_holds_it() {
    let (body, hash) = desired();
    let s = snapshot(vec![holding(None, false)], &[0]);
    let d = Desired {
        body: &body,
        hash: &hash,
    };
    // Ours, not in the cache yet: applied to, by its uid.
    let CopyWrite::Apply(applied) = after_conflict(Some(&copy("c9", "t1", "")), &key(), &s, d)
    else {
        panic!("ferry's own copy not applied to")
    };
    assert_eq!(applied["metadata"]["uid"], "c9");
    // Someone else's: refused, never written.
    let foreign = json!({"metadata": {"name": "orders", "namespace": "team-a-shop", "uid": "x"}});
    let CopyWrite::Refuse(refusal) = after_conflict(Some(&foreign), &key(), &s, d) else {
        panic!("someone else's object written")
    };
    assert_eq!(refusal.reason, ferry_core::translate::Reason::SyncConflict);
    // An earlier tenant object's copy: recreated, not adopted.
    let earlier = copy("c8", "t0", "");
    assert_eq!(
        after_conflict(Some(&earlier), &key(), &s, d),
        CopyWrite::Recreate(doomed("c8"))
    );
    // Gone again meanwhile: created.
    assert_eq!(
        after_conflict(None, &key(), &s, d),
        CopyWrite::Create(body.clone())
    );
}

#[test]
fn an_unwanted_object_has_every_copy_deleted_but_those_going() {
    let c = copy("c1", "t1", "h");
    let s = Snapshot {
        wanted: false,
        ..snapshot(
            vec![
                holding(Some(c.clone()), true),
                holding(Some(going(&c)), false),
                unserved(),
            ],
            &[],
        )
    };
    assert_eq!(
        plan(&s, None),
        Plan::Remove(vec![Delete {
            at: SuperId(0),
            doomed: doomed("c1")
        }])
    );
}

#[test]
fn an_unplaced_namespace_waits_and_a_homeless_cluster_object_leaves_every_super() {
    let (body, hash) = desired();
    let d = Desired {
        body: &body,
        hash: &hash,
    };
    let s = snapshot(vec![holding(Some(copy("c1", "t1", &hash)), true)], &[]);
    assert_eq!(
        plan(&s, Some(d)),
        Plan::Unplaced,
        "a namespaced copy deleted"
    );
    let s = Snapshot {
        namespaced: false,
        ..s
    };
    assert_eq!(
        plan(&s, Some(d)),
        Plan::Homeless(vec![Delete {
            at: SuperId(0),
            doomed: doomed("c1")
        }])
    );
}

#[test]
fn a_settled_key_does_nothing() {
    let s = Snapshot {
        settled: true,
        ..snapshot(vec![holding(None, false)], &[0])
    };
    assert_eq!(start(&s), Start::Settled);
}

#[test]
fn a_reduced_unchanged_object_only_flows_up() {
    let c = copy("c1", "t1", "h");
    let reduced = |supers: Vec<Held>, targets: &[usize]| Snapshot {
        reduced: true,
        ..snapshot(supers, targets)
    };
    assert_eq!(
        start(&reduced(vec![holding(Some(c.clone()), true)], &[0])),
        Start::UpOnly(SuperId(0))
    );
    // Anything else: translated again, from the object read whole.
    let whole = Start::Plan { read_whole: true };
    let mut changed = holding(Some(c.clone()), true);
    changed.applied_current = false;
    assert_eq!(
        start(&reduced(vec![changed], &[0])),
        whole,
        "context changed"
    );
    let mut stale = holding(Some(c.clone()), true);
    stale.stale = true;
    assert_eq!(start(&reduced(vec![stale], &[0])), whole, "cleanup pending");
    let unchecked = holding(Some(c.clone()), false);
    assert_eq!(
        start(&reduced(vec![unchecked], &[0])),
        whole,
        "copy unchecked"
    );
    let earlier = holding(Some(copy("c1", "t0", "h")), true);
    assert_eq!(
        start(&reduced(vec![earlier], &[0])),
        whole,
        "earlier object"
    );
    let elsewhere = vec![
        holding(Some(c.clone()), true),
        holding(Some(c.clone()), true),
    ];
    assert_eq!(start(&reduced(elsewhere, &[0])), whole, "a copy elsewhere");
    let migrating = vec![
        holding(Some(c.clone()), true),
        holding(Some(c.clone()), true),
    ];
    assert_eq!(start(&reduced(migrating, &[0, 1])), whole, "migrating");
    // A target's copy being deleted is awaited before anything is read.
    let gone = holding(Some(going(&c)), true);
    assert_eq!(start(&reduced(vec![gone], &[0])), Start::AwaitDeletion);
    // Not reduced: planned from the cached object.
    assert_eq!(
        start(&snapshot(vec![holding(Some(c), true)], &[0])),
        Start::Plan { read_whole: false }
    );
}
