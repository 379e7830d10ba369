//! How deep objects may nest: past what ferry writes (refused with the path) and past what
//! it reads from a cluster (never given to a transform).

use super::*;
use crate::keys::UNREAD;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Maps and lists nested around ferry's limit, in a tenant object, a transform's output
    /// and what flows up: written only within the limit, refused with the path past it.
    #[test]
    fn objects_nested_past_the_limit_are_refused(
        depth in 55usize..75,
        lists in any::<u64>(),
        leaf in prop_oneof![Just(json!(1)), Just(json!({})), Just(json!("ferry.dev/x"))],
    ) {
        let policy = policy();
        let names = names();
        let resource = policy.resource("example.com", "Widget").unwrap();
        let translator = Translator::new(&policy, None);
        let inner = nest(depth, lists, leaf);
        let tenant = widget("w", "prod", json!({}), json!({"free": inner.clone()}));
        let written = levels(&tenant) <= crate::translate::guard::values::MAX_DEPTH;
        match translator.to_super(tenant.clone(), &names, false) {
            Ok(t) => {
                prop_assert!(written, "written {} levels deep", levels(&t.object));
                let v = violations(&t.object);
                prop_assert!(v.is_empty(), "{v:?}");
            }
            Err(e) => {
                prop_assert!(!written, "refused within the limit: {}", e.message);
                prop_assert!(e.message.contains("spec.free") && e.message.contains("nested deeper"), "{}", e.message);
            }
        }
        let mut out = translator.to_super(widget("w", "prod", json!({}), json!({})), &names, false).unwrap().object;
        out["spec"]["free"] = inner.clone();
        let mut guard = Guard::new(&policy, &names, None, true, false);
        match guard.down(resource, &out) {
            Ok(()) => prop_assert!(violations(&out).is_empty(), "accepted {} levels", levels(&out)),
            Err(e) => prop_assert!(!violations(&out).is_empty(), "refused: {}", e.message),
        }
        let up = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "prod"}, "status": {"free": inner}});
        let result = guard.up(resource, &up);
        prop_assert_eq!(result.is_ok(), levels(&up) <= crate::translate::guard::values::MAX_DEPTH, "up, {} levels", levels(&up));
        if let Err(e) = result {
            prop_assert!(e.message.contains("status.free"), "{}", e.message);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// What ferry reads of a cluster's object stops at `READ_DEPTH` (below, an empty map or
    /// list): such an object never reaches a transform, which could drop what was not read
    /// and write the rest; one within it does.
    #[test]
    fn objects_deeper_than_read_never_reach_a_transform(depth in 90usize..110, lists in any::<u64>()) {
        let policy = policy();
        let translator = Translator::new(&policy, None);
        let mut gizmo = widget("g", "prod", json!({}), json!({"free": nest(depth, lists, json!({}))}));
        gizmo["kind"] = json!("Gizmo");
        // `spec` holds `free`, whose value is `depth` maps and lists around an empty map.
        let deepest = depth + 2;
        let e = translator.to_super(gizmo, &names(), false).unwrap_err();
        if deepest > crate::translate::guard::values::READ_DEPTH {
            prop_assert_eq!(e.reason, Reason::Invalid);
            prop_assert!(e.message.starts_with("spec.free") && e.message.contains("nested deeper than 100"), "{}", e.message);
        } else {
            prop_assert_eq!(e.reason, Reason::TransformFailed, "{}", e.message);
        }
    }
}

/// A map ferry could not read (`UNREAD`, where a cluster sent a key serde_json reserves) is
/// refused where it would be written, down and up, and never reaches a transform.
#[test]
fn unread_maps_are_refused_everywhere() {
    let policy = policy();
    let names = names();
    let translator = Translator::new(&policy, None);
    let unread = json!({ UNREAD: "a key serde_json reserves" });
    for kind in ["Widget", "Gizmo"] {
        let mut tenant = widget(
            "w",
            "prod",
            json!({}),
            json!({"free": {"x": unread.clone()}}),
        );
        tenant["kind"] = json!(kind);
        let e = translator.to_super(tenant, &names, false).unwrap_err();
        assert_eq!(e.reason, Reason::Invalid, "{kind}: {}", e.message);
        assert!(
            e.message
                .starts_with("spec.free.x: a key serde_json reserves"),
            "{kind}: {}",
            e.message
        );
    }
    let resource = policy.resource("example.com", "Widget").unwrap();
    let guard = Guard::new(&policy, &names, None, false, false);
    let up = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "prod"}, "status": {"free": unread}});
    let e = guard.up(resource, &up).unwrap_err();
    assert!(e.message.starts_with("status.free: "), "{}", e.message);
}
