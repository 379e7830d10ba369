//! API Priority and Fairness objects of `ferry manifests`: ferry's requests to its super
//! cluster get a priority level of their own, and inside it one flow per namespace.
//!
//! Every tenant's writes land in that tenant's super namespaces, so `distinguisherMethod:
//! ByNamespace` makes each tenant's requests flows of their own, and the API server's fair
//! queuing serves the flows in turn once the level's seats are taken: a tenant's burst queues
//! behind itself, not in front of another tenant. The level is small (`nominalConcurrency
//! Shares` 5 of the defaults' ~245) and lends nothing, so that ferry's bursts queue there
//! rather than in the workloads' levels; ferry's own pace (`superWrites: adaptive`) keeps its
//! writes in flight under the level's seats in normal operation, and this level is what holds
//! when it does not. The FlowSchema matches ferry's service account, before the
//! `service-accounts` schema (matchingPrecedence 9000) would.

use serde_json::{json, Value};

use super::{labels, NAME};

/// The FlowSchema's precedence: after the system's own schemas (at most 900), before
/// `service-accounts` (9000).
const PRECEDENCE: u32 = 1000;

/// The PriorityLevelConfiguration and the FlowSchema sending `subject`'s requests to it
/// (ferry's service account; a FlowSchema subject).
pub fn flow_control(subject: Value) -> Vec<Value> {
    let meta = json!({"name": NAME, "labels": labels()});
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": meta,
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 5,
                    "lendablePercent": 0,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50},
                    },
                },
            },
        }),
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": meta,
            "spec": {
                "priorityLevelConfiguration": {"name": NAME},
                "matchingPrecedence": PRECEDENCE,
                "distinguisherMethod": {"type": "ByNamespace"},
                "rules": [{
                    "subjects": [subject],
                    "resourceRules": [{
                        "verbs": ["*"],
                        "apiGroups": ["*"],
                        "resources": ["*"],
                        "namespaces": ["*"],
                        "clusterScope": true,
                    }],
                }],
            },
        }),
    ]
}
