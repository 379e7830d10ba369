//! API Priority and Fairness objects of `ferry manifests`: ferry's requests to its super
//! cluster get a priority level of their own, and inside it one flow per namespace.
//!
//! Every tenant's writes land in that tenant's super namespaces, so `distinguisherMethod:
//! ByNamespace` makes each tenant's requests flows of their own, and the API server's fair
//! queuing serves the flows in turn once the level's seats are taken: a tenant's burst queues
//! behind itself, not in front of another tenant. The level is small (`nominalConcurrency
//! Shares` 5 of the defaults' ~245) and lends nothing, so that ferry's bursts queue there
//! rather than in the workloads' levels (its seats, about a dozen on a default API server, are
//! more than the two writes in flight a tenant holds while another has work). The FlowSchema
//! matches ferry's service account, before the
//! `service-accounts` schema (matchingPrecedence 9000) would; its Lease requests go first to
//! the API server's `leader-election` level.

use serde_json::{json, Value};

use super::{labels, NAME};

/// The FlowSchemas' precedence: after the system's own schemas (at most 900), before
/// `service-accounts` (9000); ferry's Leases first.
const PRECEDENCE: u32 = 1000;
const LEASES_PRECEDENCE: u32 = 999;

/// The PriorityLevelConfiguration and the FlowSchema sending `subject`'s requests to it
/// (ferry's service account; a FlowSchema subject); and a FlowSchema sending its Lease
/// requests (leader election, shard membership) to the API server's own `leader-election`
/// level, so that a burst of writes never holds a renewal back.
pub fn flow_control(subject: Value) -> Vec<Value> {
    let meta = json!({"name": NAME, "labels": labels()});
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": format!("{NAME}-leases"), "labels": labels()},
            "spec": {
                "priorityLevelConfiguration": {"name": "leader-election"},
                "matchingPrecedence": LEASES_PRECEDENCE,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [subject.clone()],
                    "resourceRules": [{
                        "verbs": ["*"],
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "namespaces": ["*"],
                    }],
                }],
            },
        }),
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
