//! What a tenant remembers between reconciles: refusals (Events and metrics), synced keys,
//! what ferry last wrote, and who references which dependency.

use ferry_core::policy::Scope;
use ferry_core::translate::{Reason, Reference, Refusal, Translator};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use serde_json::Value;

use super::{rv, Reconciler};
use crate::compare::meta_str;
use crate::metrics::labels;
use crate::queue::{Key, Kind};

impl Reconciler<'_> {
    pub(super) async fn refuse(&self, key: &Key, object: Option<&Value>, refusal: &Refusal) {
        let text = refusal.to_string();
        {
            let mut memory = self.tenant.memory();
            if memory.refusals.get(key) == Some(&text) {
                return;
            }
            memory.refusals.insert(key.clone(), text);
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
            object = %self.describe(key),
            reason = refusal.reason.as_str(),
            "{}",
            refusal.message
        );
        let Some(object) = object else { return };
        if !*self.shared.leader.borrow() {
            return;
        }
        let reference = ObjectReference {
            api_version: object
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
            kind: object
                .get("kind")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: meta_str(object, "name").map(str::to_string),
            namespace: meta_str(object, "namespace").map(str::to_string),
            uid: meta_str(object, "uid").map(str::to_string),
            ..ObjectReference::default()
        };
        let mut note = refusal.message.clone();
        if note.len() > 1000 {
            let mut cut = 1000;
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
        if let Err(e) = self.tenant.recorder.publish(&event, &reference).await {
            tracing::warn!(tenant = %self.tenant.name, error = %e, "could not publish the Event");
        }
    }

    pub(super) fn accepted(&self, key: &Key) {
        self.tenant.memory().refusals.remove(key);
    }

    pub(super) fn set_synced(&self, key: &Key, synced: bool) {
        let changed = {
            let mut memory = self.tenant.memory();
            if synced {
                memory.synced.insert(key.clone())
            } else {
                memory.synced.remove(key)
            }
        };
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

    /// Whether ferry's last write of `part` for `key` produced `object` (same digest, same
    /// resourceVersion).
    pub(super) fn wrote_this(
        &self,
        key: &Key,
        part: &'static str,
        hash: &str,
        object: &Value,
    ) -> bool {
        self.tenant
            .memory()
            .written
            .get(&(key.clone(), part))
            .is_some_and(|(h, v)| h == hash && *v == rv(object))
    }

    pub(super) fn record_write(&self, key: &Key, part: &'static str, hash: String, object: &Value) {
        self.tenant
            .memory()
            .written
            .insert((key.clone(), part), (hash, rv(object)));
    }

    /// Records which dependencies `object` (of a non-dependency toSuper kind) references and
    /// queues the dependencies whose referenced-ness changed. References are found by the
    /// schema rules alone (transforms run after them), so no transform runs here.
    pub fn record_references(&self, key: &Key, object: &Value) {
        let translator = Translator::new(&self.shared.policy, None);
        if let Ok(references) = translator.references(object.clone(), &self.tenant.names()) {
            self.set_references(key, &references);
        }
    }

    pub(super) fn set_references(&self, key: &Key, references: &[Reference]) {
        let policy = &self.shared.policy;
        let targets = references
            .iter()
            .filter_map(|r| {
                let idx = policy.resources.iter().position(|p| {
                    p.dependency && p.group_kind.group == r.group && p.group_kind.kind == r.kind
                })?;
                let namespace = if policy.resources[idx].scope == Scope::Cluster {
                    String::new()
                } else if r.namespace.is_empty() {
                    key.namespace.clone()
                } else {
                    r.namespace.clone()
                };
                Some((idx, namespace, r.name.clone()))
            })
            .collect();
        self.update_references(key, targets);
    }

    pub(super) fn update_references(&self, key: &Key, targets: Vec<crate::refs::Target>) {
        let changed = self.tenant.memory().refs.set(key, targets);
        for (idx, namespace, name) in changed {
            self.shared.queues.add(Key {
                tenant: self.tenant.name.clone(),
                kind: Kind::Resource(idx),
                namespace,
                name,
            });
        }
    }
}
