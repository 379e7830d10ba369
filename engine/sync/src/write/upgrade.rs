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
    // What every other entry owns: never removed, even where ferry's entry owns it too.
    let mut others = Map::new();
    for e in entries.iter().filter(|e| !std::ptr::eq(*e, ours)) {
        if let Some(Value::Object(fields)) = e.get("fieldsV1") {
            union(&mut others, fields);
        }
    }
    let mut stale = Vec::new();
    if let Some(Value::Object(fields)) = ours.get("fieldsV1") {
        let at = Walk {
            actual: object,
            desired: Some(desired),
            others: Some(&others),
        };
        leftovers(fields, at, String::new(), &mut stale);
    }
    if stale.is_empty() {
        return None;
    }
    let version = object.pointer("/metadata/resourceVersion")?.clone();
    let kept: Vec<Value> = entries
        .iter()
        .filter(|e| !std::ptr::eq(*e, ours))
        .cloned()
        .collect();
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

/// Where [`leftovers`] is: the actual object's node, the desired one's (if any), and what
/// other managers own there (if anything).
#[derive(Clone, Copy)]
struct Walk<'v> {
    actual: &'v Value,
    desired: Option<&'v Value>,
    others: Option<&'v Map<String, Value>>,
}

/// Adds the field set `from` to `into`.
fn union(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => union(a, b),
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Appends to `out` the JSON pointer of every field the field set `fields` (managedFields'
/// `fieldsV1` format) names in the actual object (at `at`) that the desired one does not
/// have and no other manager owns; where another owns something below, only ferry's own
/// fields there go.
fn leftovers(fields: &Map<String, Value>, at: Walk<'_>, path: String, out: &mut Vec<String>) {
    for (k, sub) in fields {
        let children = sub.as_object();
        let others = at.others.and_then(|o| o.get(k));
        let (actual, desired, here) = if let Some(name) = k.strip_prefix("f:") {
            let Some(a) = at.actual.get(name) else {
                continue;
            };
            let here = format!("{path}/{}", name.replace('~', "~0").replace('/', "~1"));
            (a, at.desired.and_then(|d| d.get(name)), here)
        } else if let Some((i, a)) = element(k, at.actual) {
            let desired = match at.desired.map(|d| same_element(k, d, a)) {
                // The desired list lacks a key field of its elements (defaulted on the
                // server): which element is which cannot be told, so nothing goes.
                Some(Err(Unknown)) => continue,
                Some(Ok(d)) => d,
                None => None,
            };
            (a, desired, format!("{path}/{i}"))
        } else {
            continue;
        };
        let below = Walk {
            actual,
            desired,
            others: others.and_then(Value::as_object),
        };
        match (desired, others) {
            // Gone from what ferry applies, and only ferry's: it goes.
            (None, None) => out.push(here),
            // Another manager owns it too, or something below it: only ferry's parts go.
            (None, Some(_)) | (Some(_), _) => {
                if let Some(children) = children {
                    leftovers(children, below, here, out);
                }
            }
        }
    }
}

/// A desired list whose elements cannot be matched to the actual ones.
struct Unknown;

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

/// The element of the desired list `list` that is the same element as `actual` under `k`;
/// `Unknown` when a desired element lacks one of the key fields.
fn same_element<'v>(
    k: &str,
    list: &'v Value,
    actual: &Value,
) -> Result<Option<&'v Value>, Unknown> {
    let Some(items) = list.as_array() else {
        return Ok(None);
    };
    if let Some(keys) = k.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).map_err(|_| Unknown)?;
        let found = items
            .iter()
            .find(|item| keys.keys().all(|f| item.get(f) == actual.get(f)));
        if found.is_none()
            && items
                .iter()
                .any(|i| keys.keys().any(|f| i.get(f).is_none()))
        {
            return Err(Unknown);
        }
        return Ok(found);
    }
    if k.starts_with("v:") {
        return Ok(items.iter().find(|item| *item == actual));
    }
    let index: usize = k
        .strip_prefix("i:")
        .and_then(|i| i.parse().ok())
        .ok_or(Unknown)?;
    Ok(items.get(index))
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
        assert_eq!(
            removals(&patch),
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

    /// The paths a patch removes, in order.
    fn removals(patch: &Value) -> Vec<&str> {
        patch
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["op"] == "remove")
            .map(|o| o["path"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn later_list_elements_go_first_whatever_their_keys() {
        let fields = json!({"f:spec": {"f:ports": {
            "k:{\"name\":\"a\"}": {}, "k:{\"name\":\"b\"}": {}, "k:{\"name\":\"c\"}": {}}}});
        let ports: Vec<Value> = ["c", "b", "a"].iter().map(|n| json!({"name": n})).collect();
        let actual = object(fields, json!({"ports": ports}));
        let patch = cleanup(&actual, &json!({"spec": {"ports": []}}), "ferry").unwrap();
        assert_eq!(
            removals(&patch),
            ["/spec/ports/2", "/spec/ports/1", "/spec/ports/0"]
        );
        assert_eq!(later_first("/a/10", "/a/9"), std::cmp::Ordering::Greater);
    }

    #[test]
    fn what_another_manager_owns_stays() {
        // The controller owns spec.extra and spec.config.b; ferry's entry owns both too.
        let fields = json!({"f:spec": {"f:extra": {}, "f:config": {"f:a": {}, "f:b": {}}}});
        let mut actual = object(fields, json!({"extra": 1, "config": {"a": 1, "b": 2}}));
        actual["metadata"]["managedFields"][2]["fieldsV1"] =
            json!({"f:spec": {"f:extra": {}, "f:config": {"f:b": {}}}});
        let patch = cleanup(&actual, &json!({"spec": {}}), "ferry").unwrap();
        assert_eq!(removals(&patch), ["/spec/config/a"]);
    }

    #[test]
    fn elements_whose_key_the_desired_list_lacks_stay() {
        let fields = json!({"f:spec": {"f:ports": {
            "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}}}}});
        let actual = object(fields, json!({"ports": [{"port": 80, "protocol": "TCP"}]}));
        // The tenant's list does not name the defaulted protocol.
        let desired = json!({"spec": {"ports": [{"port": 80}]}});
        assert!(cleanup(&actual, &desired, "ferry").is_none());
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
