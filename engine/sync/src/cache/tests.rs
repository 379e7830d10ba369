//! The cache's memory of what the watch and ferry's writes said: tombstones, later versions,
//! reduced checked copies, objects held parsed.

use super::feed::observe;
use super::*;
use ferry_core::keys::UNREAD;
use kube::api::DynamicObject;
use serde_json::json;

fn copy(uid: &str, version: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "n", "uid": uid, "resourceVersion": version}})
}

fn observed(cache: &Cache, object: Value, present: bool) {
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let object: Wire = serde_json::from_str(&object.to_string()).unwrap();
    let on_change: OnChange = Arc::new(|_| {});
    observe(cache, &resource, &on_change, object, present);
}

#[test]
fn a_write_answered_after_the_delete_does_not_bring_the_object_back() {
    let cache = Cache::new("test".into());
    observed(&cache, copy("u1", "5"), true);
    // ferry's write (version 6) answers after the watch saw the object deleted.
    observed(&cache, copy("u1", "6"), false);
    cache.remember(copy("u1", "6"));
    assert!(cache.get("n", "a").is_none());
    // Another object of that name is remembered.
    cache.remember(copy("u2", "9"));
    assert_eq!(rv(&cache.get("n", "a").unwrap()), "9");
}

#[test]
fn a_checked_copy_is_held_reduced_until_more_than_its_status_changes() {
    let reduce: Reduce = Arc::new(|fields| {
        let mut out = fields.clone();
        out.remove("data");
        out
    });
    let cache = Cache::reducing("test".into(), Some(reduce));
    let mut object = copy("u1", "5");
    object["data"] = json!({"big": "x"});
    observed(&cache, object.clone(), true);
    assert!(!cache.get_checked("n", "a").unwrap().1);
    // Another version is cached by now: checking the older one changes nothing.
    let mut older = object.clone();
    older["metadata"]["resourceVersion"] = json!("4");
    cache.check(&older);
    assert!(!cache.get_checked("n", "a").unwrap().1);
    cache.check(&object);
    let (held, checked) = cache.get_checked("n", "a").unwrap();
    assert!(checked && held.get("data").is_none());
    object["status"] = json!({"phase": "Ready"});
    object["metadata"]["resourceVersion"] = json!("6");
    observed(&cache, object.clone(), true);
    assert!(cache.get_checked("n", "a").unwrap().1);
    object["data"] = json!({"big": "y"});
    object["metadata"]["resourceVersion"] = json!("7");
    observed(&cache, object.clone(), true);
    let (held, checked) = cache.get_checked("n", "a").unwrap();
    assert!(!checked && held["data"]["big"] == "y");
    // What ferry applied is held checked at once.
    object["metadata"]["resourceVersion"] = json!("8");
    cache.remember_applied(object);
    assert!(cache.get_checked("n", "a").unwrap().1);
}

#[test]
fn a_later_version_from_the_watch_is_kept() {
    let cache = Cache::new("test".into());
    observed(&cache, copy("u1", "8"), true);
    cache.remember(copy("u1", "7"));
    assert_eq!(rv(&cache.get("n", "a").unwrap()), "8");
    cache.remember(copy("u1", "9"));
    assert_eq!(rv(&cache.get("n", "a").unwrap()), "9");
}

#[test]
fn objects_are_held_without_their_type_and_place_and_read_with_them() {
    let cache = Cache::new("test".into());
    let _ = cache.kind.set((json!("v1"), json!("ConfigMap")));
    observed(&cache, copy("u1", "5"), true);
    let mut cluster_scoped = copy("u2", "6");
    cluster_scoped["metadata"]["name"] = json!("c");
    cluster_scoped["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    observed(&cache, cluster_scoped.clone(), true);
    let objects = cache.objects.read().unwrap();
    let texts: Vec<String> = objects
        .iter()
        .map(|(_, _, held)| held.text().unwrap().to_string())
        .collect();
    drop(objects);
    for text in &texts {
        assert!(
            !text.contains("apiVersion") && !text.contains("ConfigMap"),
            "{text}"
        );
        assert!(
            !text.contains("\"name\"") && !text.contains("\"namespace\""),
            "{text}"
        );
    }
    let object = cache.get("n", "a").unwrap();
    assert_eq!(*object, copy("u1", "5"));
    // In the order a watch gives (typed metadata, alphabetical).
    let order: Vec<&String> = object["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(order, ["name", "namespace", "resourceVersion", "uid"]);
    assert_eq!(*cache.get("", "c").unwrap(), cluster_scoped);
    let mut all: Vec<Value> = cache.values().iter().map(|v| (**v).clone()).collect();
    all.sort_by_key(|v| v["metadata"]["name"].to_string());
    assert_eq!(all, [copy("u1", "5"), cluster_scoped.clone()]);
    let mut metadata = Vec::new();
    cache.each_metadata(|m| metadata.push(m["metadata"].clone()));
    metadata.sort_by_key(|m| m["name"].to_string());
    assert_eq!(
        metadata,
        [
            copy("u1", "5")["metadata"].clone(),
            cluster_scoped["metadata"].clone()
        ]
    );
}

#[test]
fn a_parsed_cache_holds_small_objects_parsed_and_large_ones_as_text() {
    let cache = Cache::parsed("test".into());
    observed(&cache, copy("u1", "8"), true);
    let first = cache.get("n", "a").unwrap();
    // The same value each time, never parsed again.
    assert!(Arc::ptr_eq(&first, &cache.get("n", "a").unwrap()));
    assert_eq!(first["kind"], "ConfigMap");
    // Versions are still ordered: an older answer does not replace it.
    cache.remember(copy("u1", "7"));
    assert_eq!(
        cache.get("n", "a").unwrap()["metadata"]["resourceVersion"],
        "8"
    );
    let mut large = copy("u1", "9");
    large["metadata"]["annotations"] = json!({"big": "x".repeat(PARSED_AT_MOST)});
    observed(&cache, large, true);
    let objects = cache.objects.read().unwrap();
    assert!(objects.iter().next().unwrap().2.text().is_some());
    drop(objects);
    assert_eq!(rv(&cache.get("n", "a").unwrap()), "9");
}

#[test]
fn a_watched_object_is_the_value_its_serialization_gives_and_as_sent_the_same() {
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let fields = json!([
        {"manager": "ferry", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
        {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}},
        {"manager": "ferry", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}},
        {"operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}},
    ]);
    let claimed = json!({"ferry.dev/tenant": "team-a"});
    // Labels (claimed, another's, empty, none) and managedFields (some, none).
    let cases = [
        (Some(claimed.clone()), Some(fields.clone())),
        (Some(json!({"app": "x"})), Some(fields.clone())),
        (Some(json!({})), Some(fields.clone())),
        (None, Some(fields.clone())),
        (Some(claimed), None),
        (None, None),
    ];
    for (labels, managed) in cases {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                "generateName": null, "creationTimestamp": "2026-12-02T01:02:03Z",
                "newerField": {"a": 1},
                "annotations": {"k": "v"},
                "ownerReferences": [{"kind": "K", "name": "o", "uid": "ou", "controller": true,
                    "apiVersion": "v1", "blockOwnerDeletion": null, "newer": 1}]},
            "data": {"a": "1"}, "binaryData": {}});
        if let Some(labels) = labels {
            object["metadata"]["labels"] = labels;
        }
        if let Some(managed) = managed {
            object["metadata"]["managedFields"] = managed;
        }
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        let Value::Object(whole) = serde_json::to_value(dynamic.clone()).unwrap() else {
            panic!("an object");
        };
        let expected = Value::Object(normalise(whole, &resource));
        // Parsed as sent (a watch, a list): the same value, its keys in the same order.
        let wire: Wire = serde_json::from_str(&object.to_string()).unwrap();
        assert_eq!(wire.into_value(&resource).to_string(), expected.to_string());
        assert_eq!(to_value(dynamic, &resource).unwrap(), expected);
    }
    // A list item of a built-in kind comes without its type.
    let item = r#"{"metadata": {"name": "a", "resourceVersion": "3"}, "data": {}}"#;
    let wire: Wire = serde_json::from_str(item).unwrap();
    assert_eq!(
        kube::ResourceExt::resource_version(&wire).as_deref(),
        Some("3")
    );
    assert_eq!(
        wire.into_value(&resource),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "3"}, "data": {}})
    );
    let claimed: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"ferry.dev/tenant": "t"}, "managedFields": fields}}))
        .unwrap();
    let managers = json!([{"manager": "ferry"}, {"manager": "kubectl"}, {"manager": null}]);
    assert_eq!(
        to_value(claimed.clone(), &resource).unwrap()["metadata"]["managedFields"],
        managers
    );
    let wire: Wire = serde_json::from_str(&serde_json::to_string(&claimed).unwrap()).unwrap();
    assert_eq!(
        wire.into_value(&resource)["metadata"]["managedFields"],
        managers
    );
}

/// An object nested past what ferry reads, in a list and in a watch event: both still parse
/// (serde_json alone stops at 128 levels and would fail the list of every object of the
/// kind), the object is read down to `READ_DEPTH` with an empty map or list below, its
/// neighbours whole, and one within the limit exactly as sent.
#[test]
fn objects_nested_too_deep_are_read_cut_not_failed() {
    use ferry_core::translate::READ_DEPTH;
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    for depth in [
        1,
        READ_DEPTH - 1,
        READ_DEPTH,
        READ_DEPTH + 1,
        126,
        127,
        500,
        20_000,
    ] {
        for list in [false, true] {
            let (open, close, empty) = if list {
                ("[2,", "]", "[]")
            } else {
                (r#"{"a":2,"x":"#, "}", "{}")
            };
            // `depth` maps or lists, the outermost the value of `data` (one key into the object).
            let nested =
                |n: usize, leaf: &str| format!("{}{leaf}{}", open.repeat(n), close.repeat(n));
            let item = |data: &str| {
                format!(r#"{{"metadata":{{"name":"deep","resourceVersion":"2"}},"data":{data}}}"#)
            };
            let deep = item(&nested(depth, "1"));
            let body = format!(
                r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{}},"items":[{deep},{{"metadata":{{"name":"b"}},"data":{{"k":"v"}}}}]}}"#
            );
            let parsed: kube::core::ObjectList<Wire> = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{depth} levels (lists: {list}): {e}"));
            let mut items = parsed.items.into_iter().map(|w| w.into_value(&resource));
            let cut = items.next().unwrap();
            let expected = if depth <= READ_DEPTH {
                nested(depth, "1")
            } else {
                nested(READ_DEPTH, empty)
            };
            let expected: Value = serde_json::from_str(&item(&expected)).unwrap();
            assert_eq!(
                cut["data"], expected["data"],
                "{depth} levels (lists: {list})"
            );
            assert_eq!(items.next().unwrap()["data"], json!({"k": "v"}));
            let event = format!(r#"{{"type":"ADDED","object":{deep}}}"#);
            let event: kube::core::WatchEvent<Wire> = serde_json::from_str(&event)
                .unwrap_or_else(|e| panic!("a watch event, {depth} levels: {e}"));
            let kube::core::WatchEvent::Added(watched) = event else {
                panic!("an added object");
            };
            assert_eq!(watched.into_value(&resource), cut);
        }
    }
}

/// serde_json runs with `arbitrary_precision` and `raw_value`: floats and integers past 64
/// bits are read as the numbers they are, and an object's own use of the keys serde_json
/// reserves (read as something else wherever it is parsed again) is read as an `UNREAD` map,
/// at the top of the object too, where serde_json's `Value` would read the text as JSON or
/// fail the whole list.
#[test]
fn keys_serde_json_reserves_are_read_unread() {
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let read = |item: &str| -> Value {
        let wire: Wire = serde_json::from_str(item).unwrap_or_else(|e| panic!("{item}: {e}"));
        wire.into_value(&resource)
    };
    let numbers = r#"{"metadata":{"name":"a"},"data":{"f":0.5,"e":-1.5e300,"big":123456789012345678901234567890,"i":-3}}"#;
    let parsed: Value = serde_json::from_str(numbers).unwrap();
    assert_eq!(read(numbers)["data"], parsed["data"]);
    assert!(read(numbers)["data"]["f"].is_number());
    let raw = r#"$serde_json::private::RawValue"#;
    let number = r#"$serde_json::private::Number"#;
    let payload = r#""{\"namespace\":\"team-b-data\"}""#;
    for spec in [
        format!(r#"{{"{raw}":{payload}}}"#),
        format!(r#"{{"a":1,"{raw}":{payload}}}"#),
        format!(r#"{{"{number}":"5","a":1}}"#),
        format!(r#"{{"{number}":"not a number"}}"#),
        format!(r#"{{"{number}":{{"x":1}}}}"#),
    ] {
        let item = format!(r#"{{"metadata":{{"name":"a"}},"data":{{"ref":{spec}}}}}"#);
        let value = read(&item);
        let cut = value["data"]["ref"].as_object().unwrap();
        assert_eq!(cut.len(), 1, "{spec}: {value}");
        assert!(
            cut[UNREAD].as_str().unwrap().contains("reserves"),
            "{spec}: {value}"
        );
        assert!(!value.to_string().contains("team-b-data"), "{value}");
    }
    // serde_json's own reading of one of them fails the whole list.
    let bad = format!(r#"{{"items":[{{"data":{{"{number}":"not a number"}}}}]}}"#);
    assert!(serde_json::from_str::<Value>(&bad).is_err());
    let top = format!(r#"{{"metadata":{{"name":"a"}},"{raw}":{payload}}}"#);
    let value = read(&top);
    assert!(
        value.get(raw).is_none() && value[UNREAD].is_string(),
        "{value}"
    );
}

/// The object as read from typed metadata (`DynamicObject`): what `Wire` must give.
fn to_value(object: DynamicObject, resource: &ApiResource) -> Option<Value> {
    // The fields besides metadata are moved, not copied through a serializer. The order is
    // the serializer's (metadata, then the rest).
    let DynamicObject {
        mut metadata, data, ..
    } = object;
    // managedFields (field by field, the size of the object again) are not serialized to be
    // dropped: only their managers are read.
    let managers = metadata.managed_fields.take().map(|entries| {
        entries
            .into_iter()
            .map(|e| e.manager.map_or(Value::Null, Value::String))
            .collect()
    });
    let mut fields = serde_json::Map::new();
    fields.insert("metadata".into(), serde_json::to_value(&metadata).ok()?);
    match data {
        Value::Object(rest) => fields.extend(rest),
        Value::Null => {}
        _ => return None,
    }
    Some(Value::Object(normalised(fields, resource, managers)))
}
