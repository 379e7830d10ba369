//! Super namespaces carry the labels of their tenant namespace that the SyncConfig allows
//! (`namespaceLabels.allow`, never reserved ones: see
//! `ferry_core::translate::super_namespace_labels`), so that selectors of namespaces keep
//! matching in the super cluster. Which keys ferry copied is recorded in the annotation
//! `ferry.dev/tenant-labels`, so that a label the tenant removes goes too, and labels the
//! platform sets on the namespace itself are left alone.

use ferry_core::keys::{ANN_TENANT_LABELS, LABEL_TENANT};
use ferry_core::translate::{super_namespace_labels, NamespaceLabels};
use serde_json::{json, Map, Value};

/// The labels to copy from `tenant_namespace` (none when it is unknown): those `allowed`.
pub fn desired(tenant_namespace: Option<&Value>, allowed: &NamespaceLabels) -> Map<String, Value> {
    tenant_namespace
        .and_then(|ns| ns.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|labels| super_namespace_labels(labels, allowed))
        .unwrap_or_default()
}

/// The `ferry.dev/tenant-labels` value for `labels`.
pub fn recorded(labels: &Map<String, Value>) -> String {
    let mut keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys.join(",")
}

/// The merge patch that brings `super_namespace`'s copied labels to `desired`, or `None` when
/// they are current. Never touches `ferry.dev/tenant` or labels ferry did not copy.
pub fn patch(super_namespace: &Value, desired: &Map<String, Value>) -> Option<Value> {
    let meta = super_namespace.get("metadata");
    let current = meta
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object);
    let copied: Vec<&str> = meta
        .and_then(|m| {
            m.pointer(&format!(
                "/annotations/{}",
                ANN_TENANT_LABELS.replace('/', "~1")
            ))
        })
        .and_then(Value::as_str)
        .map(|s| s.split(',').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in desired {
        if current.and_then(|c| c.get(k)) != Some(v) {
            labels.insert(k.clone(), v.clone());
        }
    }
    for k in copied {
        if !desired.contains_key(k) && k != LABEL_TENANT {
            labels.insert(k.to_string(), Value::Null);
        }
    }
    let record = recorded(desired);
    let recorded_now = meta
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANN_TENANT_LABELS))
        .and_then(Value::as_str)
        .unwrap_or("");
    if labels.is_empty() && recorded_now == record {
        return None;
    }
    let uid = meta
        .and_then(|m| m.get("uid"))
        .cloned()
        .unwrap_or(Value::Null);
    Some(json!({
        "metadata": {
            "uid": uid,
            "labels": labels,
            "annotations": {ANN_TENANT_LABELS: record},
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn super_ns(labels: Value, recorded: &str) -> Value {
        json!({"metadata": {"name": "team-a-prod", "uid": "u1", "labels": labels, "annotations": {ANN_TENANT_LABELS: recorded}}})
    }

    fn allow(keys: &[&str]) -> NamespaceLabels {
        use ferry_core::glob::Glob;
        NamespaceLabels::new(keys.iter().map(|k| Glob::new(k).unwrap()).collect())
    }

    #[test]
    fn copied_labels_follow_the_tenant_and_platform_labels_stay() {
        let tenant = json!({"metadata": {"labels": {"accelerator": "gpu", "team": "x", "kubernetes.io/metadata.name": "prod"}}});
        let want = desired(Some(&tenant), &allow(&["accelerator", "zone"]));
        // Current: nothing to do.
        let ns = super_ns(
            json!({"ferry.dev/tenant": "team-a", "accelerator": "gpu", "pod-security.kubernetes.io/enforce": "restricted"}),
            "accelerator",
        );
        assert_eq!(patch(&ns, &want), None);
        // The tenant changed a value and dropped a label: one patch, the platform's label kept.
        let ns = super_ns(
            json!({"ferry.dev/tenant": "team-a", "accelerator": "cpu", "zone": "a", "pod-security.kubernetes.io/enforce": "restricted"}),
            "accelerator,zone",
        );
        assert_eq!(
            patch(&ns, &want),
            Some(
                json!({"metadata": {"uid": "u1", "labels": {"accelerator": "gpu", "zone": null}, "annotations": {ANN_TENANT_LABELS: "accelerator"}}})
            )
        );
    }

    #[test]
    fn labels_no_longer_allowed_are_removed() {
        let tenant = json!({"metadata": {"labels": {"accelerator": "gpu", "team": "x"}}});
        // Copied while every label was (before namespaceLabels): the allow-list now names none.
        let ns = super_ns(
            json!({"ferry.dev/tenant": "team-a", "accelerator": "gpu", "team": "x"}),
            "accelerator,team",
        );
        let want = desired(Some(&tenant), &NamespaceLabels::default());
        assert!(want.is_empty());
        assert_eq!(
            patch(&ns, &want),
            Some(
                json!({"metadata": {"uid": "u1", "labels": {"accelerator": null, "team": null}, "annotations": {ANN_TENANT_LABELS: ""}}})
            )
        );
    }
}
