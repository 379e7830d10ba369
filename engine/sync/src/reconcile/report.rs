//! What a reconcile reports: a refusal (metric, log line, Event on the tenant object, once per
//! distinct refusal), the synced gauge, and the retry of objects refused for a reference to a
//! public object that was not published yet.

use ferry_core::translate::{Reason, Refusal};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use serde_json::Value;

use super::Reconciler;
use crate::key::{Key, Kind};
use crate::metrics::labels;
use crate::object::meta_str;

/// The longest Event note (the API server refuses longer ones).
const MAX_NOTE: usize = 1000;

impl Reconciler<'_> {
    /// Records a refusal of `key`; the Event goes on `object` when there is one.
    pub(super) async fn refuse(&self, key: &Key, object: Option<&Value>, refusal: &Refusal) {
        let text = refusal.to_string();
        {
            let mut ledger = self.tenant.ledger();
            if ledger.refusals.get(key) == Some(&text) {
                return;
            }
            ledger.refusals.insert(key.clone(), text);
        }
        self.shared
            .metrics
            .refusals
            .get_or_create(&labels(&[
                ("tenant", &self.tenant.name),
                ("reason", refusal.reason.as_str()),
            ]))
            .inc();
        tracing::warn!(
            tenant = %self.tenant.name,
            object = %self.shared.describe(key),
            reason = refusal.reason.as_str(),
            "{}",
            refusal.message
        );
        let Some(object) = object else { return };
        let mut note = refusal.message.clone();
        if note.len() > MAX_NOTE {
            let mut cut = MAX_NOTE;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_: if refusal.reason == Reason::NotSelected {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: refusal.reason.as_str().to_string(),
            note: Some(note),
            action: "Sync".into(),
            secondary: None,
        };
        self.publish(object, &event).await;
    }

    /// Publishes `event` on the tenant object `object` (only the leader, or a sharded
    /// replica whose fence is open, does).
    pub(super) async fn publish(&self, object: &Value, event: &Event) {
        if !self.shared.gate.open() {
            return;
        }
        let text = |k: &str| object.get(k).and_then(Value::as_str).map(str::to_string);
        let meta = |k: &str| meta_str(object, k).map(str::to_string);
        let reference = ObjectReference {
            api_version: text("apiVersion"),
            kind: text("kind"),
            name: meta("name"),
            namespace: meta("namespace"),
            uid: meta("uid"),
            ..ObjectReference::default()
        };
        if let Err(e) = self.tenant.recorder.publish(event, &reference).await {
            tracing::warn!(tenant = %self.tenant.name, error = %e, "could not publish the Event");
        }
    }

    /// `key` is no longer refused.
    pub(super) fn accepted(&self, key: &Key) {
        self.tenant.ledger().refusals.remove(key);
    }

    /// Whether ferry keeps `key` in sync (the `ferry_synced_objects` gauge).
    pub(super) fn set_synced(&self, key: &Key, synced: bool) {
        let changed = self.tenant.ledger().set_synced(key, synced);
        if !changed {
            return;
        }
        let kind = match key.kind {
            Kind::Resource(idx) => self.shared.policy.resources[idx].group_kind.to_string(),
            Kind::Namespace => "Namespace".into(),
        };
        let gauge = self
            .shared
            .metrics
            .synced
            .get_or_create(&labels(&[("tenant", &self.tenant.name), ("kind", &kind)]));
        if synced {
            gauge.inc();
        } else {
            gauge.dec();
        }
    }

    /// A public object is (still) published: the tenant's objects refused for a reference
    /// that may name it are looked at again.
    pub(super) fn retry_unpublished(&self) {
        let prefix = format!("{}:", Reason::UnapprovedReference);
        let keys: Vec<Key> = self
            .tenant
            .ledger()
            .refusals
            .iter()
            .filter(|(_, text)| text.starts_with(&prefix))
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.shared.queues.add(key);
        }
    }
}
