//! A super copy is created with a POST (the super API server's cheapest write) and changed
//! later with server-side apply. The create makes ferry an *Update* manager of every field it
//! set, and an apply removes only fields its own *Apply* entry owned: a field the tenant
//! removed since the create would stay. After an apply, [`cleanup`] finds such fields (owned by
//! ferry's Update entry, absent from what ferry applied) and builds the one JSON patch that
//! removes them with that entry, on condition that the object is still the version the apply
//! made (client-go's csaupgrade solves the same problem by moving the fields to the Apply
//! entry, which needs a second apply to remove them).

use serde_json::{json, Map, Value};

/// The JSON patch that removes what ferry's Update entry (manager `manager`) holds of
/// `object` that `desired` no longer has, and the entry; `None` when there is nothing to
/// remove.
pub fn cleanup(object: &Value, desired: &Value, manager: &str) -> Option<Value> {
    let entries = object.pointer("/metadata/managedFields")?.as_array()?;
    let is_ours = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
    };
    let ours = entries.iter().find(|e| is_ours(e))?;
    let mut stale = Vec::new();
    if let Some(Value::Object(fields)) = ours.get("fieldsV1") {
        leftovers(fields, object, Some(desired), String::new(), &mut stale);
    }
    if stale.is_empty() {
        return None;
    }
    let version = object.pointer("/metadata/resourceVersion")?.clone();
    let kept: Vec<Value> = entries.iter().filter(|e| !is_ours(e)).cloned().collect();
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
    // Later elements of a list first, so that earlier indexes stay valid.
    stale.sort_by(|a, b| later_first(b, a));
    ops.extend(stale.iter().map(|p| json!({"op": "remove", "path": p})));
    if !kept.is_empty() {
        ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": kept}));
    }
    Some(Value::Array(ops))
}

/// JSON pointers in order, segment by segment, list indexes as numbers.
fn later_first(a: &str, b: &str) -> std::cmp::Ordering {
    let segments = |p: &'_ str| -> Vec<(Option<usize>, String)> {
        p.split('/')
            .map(|s| (s.parse().ok(), s.to_string()))
            .collect()
    };
    segments(a).cmp(&segments(b))
}

/// Appends to `out` the JSON pointer of every field the field set `fields` (managedFields'
/// `fieldsV1` format) names in `actual` (at `at`) that `desired` does not have.
fn leftovers(
    fields: &Map<String, Value>,
    actual: &Value,
    desired: Option<&Value>,
    at: String,
    out: &mut Vec<String>,
) {
    for (k, sub) in fields {
        let children = sub.as_object();
        if let Some(name) = k.strip_prefix("f:") {
            let Some(a) = actual.get(name) else { continue };
            let path = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
            match desired.and_then(|d| d.get(name)) {
                None => out.push(path),
                Some(d) => {
                    if let Some(children) = children {
                        leftovers(children, a, Some(d), path, out);
                    }
                }
            }
        } else if let Some(item) = element(k, actual) {
            let (i, a) = item;
            let path = format!("{at}/{i}");
            match desired.and_then(|d| same_element(k, d, a)) {
                None => out.push(path),
                Some(d) => {
                    if let Some(children) = children {
                        leftovers(children, a, Some(d), path, out);
                    }
                }
            }
        }
    }
}

/// The element of the list `list` that the field-set key `k` (`k:{keys}`, `v:value` or
/// `i:index`) names, with its index.
fn element<'v>(k: &str, list: &'v Value) -> Option<(usize, &'v Value)> {
    let items = list.as_array()?;
    let found = if let Some(keys) = k.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).ok()?;
        items
            .iter()
            .position(|item| keys.iter().all(|(f, v)| item.get(f) == Some(v)))
    } else if let Some(value) = k.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        items.iter().position(|item| *item == value)
    } else if let Some(index) = k.strip_prefix("i:") {
        index.parse().ok().filter(|i| *i < items.len())
    } else {
        None
    };
    found.map(|i| (i, &items[i]))
}

/// The element of the desired list `list` that is the same element as `actual` under `k`.
fn same_element<'v>(k: &str, list: &'v Value, actual: &Value) -> Option<&'v Value> {
    let items = list.as_array()?;
    if let Some(keys) = k.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).ok()?;
        return items
            .iter()
            .find(|item| keys.keys().all(|f| item.get(f) == actual.get(f)));
    }
    if k.starts_with("v:") {
        return items.iter().find(|item| *item == actual);
    }
    let index: usize = k.strip_prefix("i:")?.parse().ok()?;
    items.get(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(fields: Value, spec: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Database",
            "metadata": {"name": "a", "namespace": "n", "resourceVersion": "7",
                "labels": {"app": "x", "gone": "y"},
                "managedFields": [
                    {"manager": "ferry", "operation": "Update", "apiVersion": "example.com/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "ferry", "operation": "Apply", "apiVersion": "example.com/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:tier": {}}}},
                    {"manager": "controller", "operation": "Update", "apiVersion": "example.com/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:extra": {}}}}
                ]},
            "spec": spec,
        })
    }

    #[test]
    fn fields_the_create_set_and_the_tenant_removed_go_with_the_entry() {
        let fields = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:gone": {}}},
            "f:spec": {".": {}, "f:tier": {}, "f:notes": {},
                "f:ports": {"k:{\"name\":\"a\"}": {".": {}, "f:name": {}, "f:port": {}},
                            "k:{\"name\":\"b\"}": {".": {}, "f:name": {}}},
                "f:tags": {"v:\"x\"": {}, "v:\"y\"": {}}}
        });
        let actual = object(
            fields,
            json!({"tier": "large", "notes": "n", "extra": 1,
                "ports": [{"name": "a", "port": 1}, {"name": "b"}], "tags": ["x", "y"]}),
        );
        let desired = json!({"metadata": {"labels": {"app": "x"}},
            "spec": {"tier": "large", "ports": [{"name": "a"}], "tags": ["y"]}});
        let patch = cleanup(&actual, &desired, "ferry").unwrap();
        let ops = patch.as_array().unwrap();
        assert_eq!(ops[0]["op"], "test");
        let removed: Vec<&str> = ops
            .iter()
            .filter(|o| o["op"] == "remove")
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            removed,
            [
                "/spec/tags/0",
                "/spec/ports/1",
                "/spec/ports/0/port",
                "/spec/notes",
                "/metadata/labels/gone"
            ]
        );
        // The controller's field stays; ferry's Update entry goes, its Apply entry stays.
        let kept = &ops.last().unwrap()["value"];
        assert_eq!(kept.as_array().unwrap().len(), 2);
        assert!(kept
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["operation"] == "Apply" || e["manager"] == "controller"));
    }

    #[test]
    fn later_list_elements_go_first_whatever_their_keys() {
        let fields = json!({"f:spec": {"f:ports": {
            "k:{\"name\":\"a\"}": {}, "k:{\"name\":\"b\"}": {}, "k:{\"name\":\"c\"}": {}}}});
        let ports: Vec<Value> = ["c", "b", "a"].iter().map(|n| json!({"name": n})).collect();
        let actual = object(fields, json!({"ports": ports}));
        let patch = cleanup(&actual, &json!({"spec": {"ports": []}}), "ferry").unwrap();
        let removed: Vec<&str> = patch
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["op"] == "remove")
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert_eq!(removed, ["/spec/ports/2", "/spec/ports/1", "/spec/ports/0"]);
        assert_eq!(later_first("/a/10", "/a/9"), std::cmp::Ordering::Greater);
    }

    #[test]
    fn nothing_to_remove_is_no_patch() {
        let actual = object(json!({"f:spec": {"f:tier": {}}}), json!({"tier": "large"}));
        assert!(cleanup(&actual, &json!({"spec": {"tier": "small"}}), "ferry").is_none());
        // No Update entry of ferry's at all.
        let mut applied = actual.clone();
        applied["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert!(cleanup(&applied, &json!({"spec": {}}), "ferry").is_none());
    }
}
