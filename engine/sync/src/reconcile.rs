//! One key at a time: compute what should exist from the caches (via ferry-core's
//! translator), compare it with what does, and write only the difference.
//!
//! ```text
//!  toSuper:   tenant object ─to_super─▶ desired super copy ─(differs?)─▶ apply / delete
//!             super copy ─to_tenant─▶ status + super-owned fields ─(differ?)─▶ tenant apply
//!  fromSuper: super object ─to_tenant─▶ desired tenant copy ─(differs?)─▶ create / replace / delete
//!  Namespace: tenant namespace gone ─▶ its super namespace deleted
//! ```
//!
//! Invariant: ferry never writes a super object or namespace that lacks its ownership label
//! for this tenant, and never overwrites a tenant object it did not create.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::policy::{Direction, Policy, Resource, Scope};
use ferry_core::sandbox::Sandbox;
use ferry_core::translate::{
    Reason, Reference, Refusal, Translated, Translator, ANN_TENANT_LABELS, ANN_TENANT_NAME,
    ANN_TENANT_NAMESPACE, ANN_TENANT_UID, LABEL_FROM_SUPER, LABEL_TENANT,
};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::ApiResource;
use kube::runtime::events::{Event, EventType};
use serde_json::{json, Map, Value};

use crate::cache::Served;
use crate::compare::{
    annotation, deleting, digest, holds, label, meta_str, same_copy, set_annotation, ANN_APPLIED,
};
use crate::engine::{Shared, TenantState};
use crate::metrics::labels;
use crate::namespace_labels;
use crate::queue::{Key, Kind};
use crate::write;

/// What a reconcile did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Whether it wrote anything.
    pub wrote: bool,
    /// Look again after this long (an old copy is still being deleted).
    pub again: Option<Duration>,
}

impl Outcome {
    fn wrote(wrote: bool) -> Self {
        Self { wrote, again: None }
    }

    fn again(after: Duration) -> Self {
        Self {
            wrote: false,
            again: Some(after),
        }
    }
}

/// `Result` of a reconcile.
pub type Result<T, E = write::Error> = std::result::Result<T, E>;

/// Reconciles the keys of one tenant.
pub struct Reconciler<'a> {
    shared: &'a Shared,
    tenant: &'a TenantState,
}

/// While an old copy is being deleted (finalizers), look again this often.
const WAIT_FOR_DELETION: Duration = Duration::from_secs(2);

fn rv(object: &Value) -> String {
    meta_str(object, "resourceVersion")
        .unwrap_or("")
        .to_string()
}

fn namespace_resource() -> ApiResource {
    ApiResource::erase::<Namespace>(&())
}

impl<'a> Reconciler<'a> {
    /// A reconciler for `tenant`.
    pub fn new(shared: &'a Shared, tenant: &'a TenantState) -> Self {
        Self { shared, tenant }
    }

    /// Brings the objects `key` names in line with the policy.
    pub async fn reconcile(&self, key: &Key) -> Result<Outcome> {
        match key.kind {
            Kind::Namespace => self.namespace(key).await,
            Kind::Resource(idx) => {
                let Some(resource) = self.shared.policy.resources.get(idx) else {
                    return Ok(Outcome::default());
                };
                match resource.direction {
                    Direction::ToSuper => self.down(key, idx, resource).await,
                    Direction::FromSuper => self.public_copy(key, idx, resource).await,
                }
            }
        }
    }

    /// Translates in the sandbox's thread pool when the kind has transforms (a transform may
    /// block up to its deadline), inline otherwise.
    async fn translate(
        &self,
        resource: &Resource,
        object: Value,
        down: bool,
    ) -> std::result::Result<Translated, Refusal> {
        let names = self.tenant.names();
        let view = crate::public::TenantView::new(
            self.shared.public.clone(),
            &self.shared.policy,
            &self.tenant.caches,
        );
        // The tenant's namespaces go up (redactions never take one of their names, free text
        // is unmapped with them) and to transforms that ask for them.
        let namespaces: Vec<String> = if !down
            || resource.plan.has_text
            || resource
                .transforms
                .iter()
                .any(|s| s.uses_tenant_namespaces())
        {
            let mut all: Vec<String> = self
                .tenant
                .namespaces
                .keys()
                .into_iter()
                .map(|(_, name)| name)
                .filter(|n| self.tenant_namespace_alive(n))
                .collect();
            all.sort_unstable();
            all
        } else {
            Vec::new()
        };
        let run = move |policy: &Policy, sandbox: &Sandbox| {
            let t = Translator::new(policy, Some(sandbox))
                .with_published(&view)
                .with_namespaces(&namespaces);
            if down {
                t.to_super(object, &names, false)
            } else {
                t.to_tenant(&object, &names, false)
            }
        };
        if resource.transforms.is_empty() {
            return run(&self.shared.policy, &self.shared.sandbox);
        }
        let policy = self.shared.policy.clone();
        let sandbox = self.shared.sandbox.clone();
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self.shared.transforms.acquire().await;
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || run(&policy, &sandbox))
            .await
            .unwrap_or_else(|e| {
                Err(Refusal::new(
                    Reason::TransformFailed,
                    format!("transform worker thread failed: {e}"),
                ))
            });
        self.shared
            .metrics
            .transform_time
            .observe(started.elapsed().as_secs_f64());
        out
    }

    /// `Kind namespace/name` of a key, for logs.
    fn describe(&self, key: &Key) -> String {
        let kind = match key.kind {
            Kind::Resource(idx) => self.shared.policy.resources[idx].group_kind.kind.as_str(),
            Kind::Namespace => "Namespace",
        };
        format!("{kind} {}", slash(&key.namespace, &key.name))
    }

    /// Whether the tenant namespace exists and is not being deleted.
    fn tenant_namespace_alive(&self, namespace: &str) -> bool {
        self.tenant
            .namespaces
            .get("", namespace)
            .is_some_and(|n| !deleting(&n))
    }

    /// Whether a super object is ferry's copy of `key`'s tenant object.
    fn is_copy_of(&self, object: &Value, key: &Key, namespaced: bool) -> bool {
        label(object, LABEL_TENANT) == Some(&*self.tenant.name)
            && annotation(object, ANN_TENANT_NAME) == Some(key.name.as_str())
            && (!namespaced || annotation(object, ANN_TENANT_NAMESPACE) == Some(&key.namespace))
    }

    /// Records a refusal: a metric, a log line and an Event on the tenant object, once per
    /// distinct refusal.
    /// A public object is (still) published: the tenant's objects refused for a reference
    /// that may name it are looked at again.
    fn retry_unpublished(&self) {
        let prefix = format!("{}:", Reason::UnapprovedReference);
        let keys: Vec<Key> = self
            .tenant
            .memory()
            .refusals
            .iter()
            .filter(|(_, text)| text.starts_with(&prefix))
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.shared.queues.add(key);
        }
    }

    async fn refuse(&self, key: &Key, object: Option<&Value>, refusal: &Refusal) {
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

    fn accepted(&self, key: &Key) {
        self.tenant.memory().refusals.remove(key);
    }

    fn set_synced(&self, key: &Key, synced: bool) {
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
    fn wrote_this(&self, key: &Key, part: &'static str, hash: &str, object: &Value) -> bool {
        self.tenant
            .memory()
            .written
            .get(&(key.clone(), part))
            .is_some_and(|(h, v)| h == hash && *v == rv(object))
    }

    fn record_write(&self, key: &Key, part: &'static str, hash: String, object: &Value) {
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

    fn set_references(&self, key: &Key, references: &[Reference]) {
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

    fn update_references(&self, key: &Key, targets: Vec<crate::refs::Target>) {
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

    /// A toSuper key: the super copy follows the tenant object; status and super-owned
    /// fields follow the super copy.
    async fn down(&self, key: &Key, idx: usize, resource: &Resource) -> Result<Outcome> {
        let tenant_cache = &self.tenant.caches[idx];
        let super_cache = &self.shared.caches[idx];
        let (Some(tenant_kind), Some(super_kind)) = (tenant_cache.served(), super_cache.served())
        else {
            return Ok(Outcome::default());
        };
        let namespaced = resource.scope == Scope::Namespaced;
        let names = self.tenant.names();
        let (super_ns, super_name) = if namespaced {
            self.tenant.learn(&key.namespace);
            (names.to_super(&key.namespace), key.name.clone())
        } else {
            (String::new(), names.to_super(&key.name))
        };
        let actual = super_cache
            .get(&super_ns, &super_name)
            .filter(|s| self.is_copy_of(s, key, namespaced));
        let object = tenant_cache
            .get(&key.namespace, &key.name)
            .filter(|o| !deleting(o));
        // Everything in a namespace being deleted goes with it.
        let namespace_alive = !namespaced || self.tenant_namespace_alive(&key.namespace);
        let wanted = match &object {
            None => false,
            Some(_) if !namespace_alive => false,
            Some(_) if resource.dependency => self.tenant.memory().refs.is_referenced(&(
                idx,
                key.namespace.clone(),
                key.name.clone(),
            )),
            Some(_) => true,
        };
        // Nothing changed since a reconcile that found nothing to do: skip the translation.
        // (The patrol queues every key; this keeps it cheap.)
        let seen = (
            object.as_deref().map(rv).unwrap_or_default(),
            actual.as_deref().map(rv).unwrap_or_default(),
            wanted,
        );
        if wanted && self.tenant.memory().settled.get(key) == Some(&seen) {
            return Ok(Outcome::default());
        }
        self.tenant.memory().settled.remove(key);
        let accepted = match object.filter(|_| wanted) {
            None => {
                if !resource.dependency {
                    self.update_references(key, Vec::new());
                }
                self.accepted(key);
                None
            }
            Some(object) => match self.translate(resource, (*object).clone(), true).await {
                Ok(translated) => Some((object, translated)),
                Err(refusal) => {
                    self.refuse(key, Some(&object), &refusal).await;
                    // Out of the selection: its copy goes. Other refusals leave the copy.
                    if refusal.reason != Reason::NotSelected {
                        return Ok(Outcome::default());
                    }
                    None
                }
            },
        };
        let Some((object, translated)) = accepted else {
            return self
                .remove_copy(
                    key,
                    &super_kind.resource,
                    actual,
                    &super_ns,
                    &super_name,
                    idx,
                )
                .await;
        };
        if !resource.dependency {
            self.set_references(key, &translated.references);
        }
        let mut desired = translated.object;
        let hash = digest(&desired);
        set_annotation(&mut desired, ANN_APPLIED, hash.clone());
        if namespaced {
            if let Some(outcome) = self.ensure_namespace(key, &object, &super_ns).await? {
                return Ok(outcome);
            }
        }
        let tenant_uid = meta_str(&object, "uid").unwrap_or("");
        let writer = &self.shared.writer;
        let mut wrote = false;
        let current = match actual {
            Some(s) if deleting(&s) => return Ok(Outcome::again(WAIT_FOR_DELETION)),
            Some(s) if annotation(&s, ANN_TENANT_UID) != Some(tenant_uid) => {
                // The copy of an earlier tenant object of the same name: replace it.
                tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "tenant uid changed; replacing the super copy");
                writer
                    .delete(
                        &super_kind.resource,
                        &super_ns,
                        &super_name,
                        meta_str(&s, "uid").unwrap_or(""),
                    )
                    .await?;
                super_cache.forget(&super_ns, &super_name);
                return Ok(Outcome {
                    wrote: true,
                    again: Some(Duration::from_millis(100)),
                });
            }
            Some(s)
                if annotation(&s, ANN_APPLIED) == Some(hash.as_str())
                    && (self.wrote_this(key, "down", &hash, &s) || holds(&s, &desired)) =>
            {
                s
            }
            Some(s) => {
                tracing::debug!(tenant = %self.tenant.name, object = %self.describe(key), same_digest = annotation(&s, ANN_APPLIED) == Some(hash.as_str()), "the super copy differs; applying");
                wrote = true;
                Arc::new(writer.apply(&super_kind.resource, &desired).await?)
            }
            None => {
                // The cache holds only ferry's copies; a same-named object may still exist.
                match writer
                    .get(&super_kind.resource, &super_ns, &super_name)
                    .await?
                {
                    Some(found) if !self.is_copy_of(&found, key, namespaced) => {
                        let owner = match label(&found, LABEL_TENANT) {
                            Some(t) => format!("it belongs to tenant {t:?}"),
                            None => {
                                format!("it has no {LABEL_TENANT} label, so ferry does not own it")
                            }
                        };
                        let refusal = Refusal::new(
                            Reason::SyncConflict,
                            format!(
                                "super object {} already exists and {owner}; it is left untouched",
                                slash(&super_ns, &super_name)
                            ),
                        );
                        self.refuse(key, Some(&object), &refusal).await;
                        return Ok(Outcome::default());
                    }
                    _ => {
                        wrote = true;
                        Arc::new(writer.apply(&super_kind.resource, &desired).await?)
                    }
                }
            }
        };
        if wrote {
            super_cache.remember((*current).clone());
            self.record_write(key, "down", hash, &current);
        }
        self.accepted(key);
        self.set_synced(key, true);
        let up = self
            .up(key, resource, &object, &current, &tenant_kind)
            .await?;
        if !up {
            // After a write, the watch event of that write brings this very resourceVersion
            // back: recording it now saves translating the object once more.
            let seen = (seen.0, rv(&current), seen.2);
            self.tenant.memory().settled.insert(key.clone(), seen);
        }
        Ok(Outcome::wrote(wrote || up))
    }

    /// Deletes ferry's copy, if there is one.
    async fn remove_copy(
        &self,
        key: &Key,
        resource: &ApiResource,
        actual: Option<Arc<Value>>,
        namespace: &str,
        name: &str,
        idx: usize,
    ) -> Result<Outcome> {
        self.set_synced(key, false);
        let Some(copy) = actual else {
            return Ok(Outcome::default());
        };
        if deleting(&copy) {
            return Ok(Outcome::default());
        }
        self.shared
            .writer
            .delete(
                resource,
                namespace,
                name,
                meta_str(&copy, "uid").unwrap_or(""),
            )
            .await?;
        self.shared.caches[idx].forget(namespace, name);
        tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "deleted the super copy");
        Ok(Outcome::wrote(true))
    }

    /// Makes sure the super namespace exists and is this tenant's; `Some` ends the reconcile.
    async fn ensure_namespace(
        &self,
        key: &Key,
        object: &Value,
        super_ns: &str,
    ) -> Result<Option<Outcome>> {
        let found = match self.shared.namespaces.get("", super_ns) {
            Some(ns) => Some(ns),
            None => self
                .shared
                .writer
                .get(&namespace_resource(), "", super_ns)
                .await?
                .map(Arc::new),
        };
        match found {
            Some(ns) if self.owns_super_namespace(&ns, &key.namespace) => {
                if deleting(&ns) {
                    return Ok(Some(Outcome::again(WAIT_FOR_DELETION)));
                }
                self.sync_namespace_labels(&key.namespace, &ns).await?;
                Ok(None)
            }
            Some(ns) => {
                let owner = match (
                    label(&ns, LABEL_TENANT),
                    annotation(&ns, ANN_TENANT_NAMESPACE),
                ) {
                    (Some(t), n) => format!(
                        "it belongs to tenant {t:?} (namespace {:?})",
                        n.unwrap_or("")
                    ),
                    (None, _) => {
                        format!("it has no {LABEL_TENANT} label, so ferry does not own it")
                    }
                };
                let refusal = Refusal::new(
                    Reason::SyncConflict,
                    format!("super namespace {super_ns:?} exists and {owner}; nothing is written into it"),
                );
                self.refuse(key, Some(object), &refusal).await;
                Ok(Some(Outcome::default()))
            }
            None => {
                let mut labels = namespace_labels::desired(
                    self.tenant.namespaces.get("", &key.namespace).as_deref(),
                );
                let copied = namespace_labels::recorded(&labels);
                labels.insert(LABEL_TENANT.into(), json!(&*self.tenant.name));
                let namespace = json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": super_ns,
                        "labels": labels,
                        "annotations": {ANN_TENANT_NAMESPACE: key.namespace, ANN_TENANT_LABELS: copied},
                    },
                });
                match self
                    .shared
                    .writer
                    .create(&namespace_resource(), &namespace)
                    .await
                {
                    Ok(created) => {
                        self.shared.namespaces.remember(created);
                        tracing::info!(tenant = %self.tenant.name, namespace = %key.namespace, super_namespace = %super_ns, "created the super namespace");
                        Ok(None)
                    }
                    // Created meanwhile (by another reconcile): look again.
                    Err(e) if e.code() == Some(409) => {
                        Ok(Some(Outcome::again(Duration::from_millis(100))))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Status and super-owned fields of the super copy flow up into the tenant object.
    async fn up(
        &self,
        key: &Key,
        resource: &Resource,
        object: &Value,
        current: &Value,
        tenant_kind: &Served,
    ) -> Result<bool> {
        // Nothing flows up until the super side writes status or a super-owned field.
        if current.get("status").is_none() && !carries_owned(&resource.plan.root, current) {
            return Ok(false);
        }
        let fragment = match self.translate(resource, current.clone(), false).await {
            Ok(t) => t.object,
            Err(refusal) => {
                self.refuse(key, Some(object), &refusal).await;
                return Ok(false);
            }
        };
        let Value::Object(mut fragment) = fragment else {
            return Ok(false);
        };
        let mut head = Map::new();
        for k in ["apiVersion", "kind", "metadata"] {
            if let Some(v) = fragment.remove(k) {
                head.insert(k.into(), v);
            }
        }
        let status = fragment.remove("status");
        let mut owned = fragment;
        let mut wrote = false;
        let writer = &self.tenant.writer;
        let cache = match key.kind {
            Kind::Resource(idx) => &self.tenant.caches[idx],
            Kind::Namespace => return Ok(false),
        };
        if let Some(status) = status {
            if tenant_kind.has_status {
                let hash = digest(&status);
                if object.get("status") != Some(&status)
                    && !self.wrote_this(key, "status", &hash, object)
                {
                    let mut body = head.clone();
                    body.insert("status".into(), status);
                    let out = writer
                        .apply_status(&tenant_kind.resource, &Value::Object(body))
                        .await?;
                    self.record_write(key, "status", hash, &out);
                    cache.remember(out);
                    wrote = true;
                }
            } else {
                owned.insert("status".into(), status);
            }
        }
        if !owned.is_empty() {
            let want = Value::Object(owned.clone());
            let hash = digest(&want);
            if !holds(object, &want) && !self.wrote_this(key, "object", &hash, object) {
                let mut body = head;
                body.extend(owned);
                let out = writer
                    .apply(&tenant_kind.resource, &Value::Object(body))
                    .await?;
                self.record_write(key, "object", hash, &out);
                cache.remember(out);
                wrote = true;
            }
        }
        Ok(wrote)
    }

    /// A fromSuper key: the tenant's read-only copy follows the selected super object.
    async fn public_copy(&self, key: &Key, idx: usize, resource: &Resource) -> Result<Outcome> {
        let tenant_cache = &self.tenant.caches[idx];
        let super_cache = &self.shared.caches[idx];
        let Some(tenant_kind) = tenant_cache.served() else {
            return Ok(Outcome::default());
        };
        let source = super_cache
            .get(&key.namespace, &key.name)
            .filter(|s| !deleting(s));
        let copy = tenant_cache.get(&key.namespace, &key.name);
        if source.is_some() {
            self.retry_unpublished();
        }
        let desired = match &source {
            None => None,
            Some(s) => match self.translate(resource, (**s).clone(), false).await {
                Ok(t) => Some(t.object),
                Err(r) if r.reason == Reason::NotSelected => None,
                Err(r) => {
                    // Nothing in the tenant to hang an Event on unless a copy exists; the
                    // copy is left as it is.
                    self.refuse(key, copy.as_deref(), &r).await;
                    return Ok(Outcome::default());
                }
            },
        };
        let writer = &self.tenant.writer;
        let resource_ = &tenant_kind.resource;
        if desired.is_some()
            && !key.namespace.is_empty()
            && !self.tenant_namespace_alive(&key.namespace)
        {
            // A namespaced public object lands in the tenant namespace of the same name,
            // when the tenant has one.
            return Ok(Outcome::default());
        }
        match (desired, copy) {
            (None, None) => {
                self.set_synced(key, false);
                Ok(Outcome::default())
            }
            (None, Some(copy)) => {
                self.set_synced(key, false);
                if deleting(&copy) {
                    return Ok(Outcome::default());
                }
                writer
                    .delete(
                        resource_,
                        &key.namespace,
                        &key.name,
                        meta_str(&copy, "uid").unwrap_or(""),
                    )
                    .await?;
                tenant_cache.forget(&key.namespace, &key.name);
                tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "deleted the copy of a super object that is gone or no longer public");
                Ok(Outcome::wrote(true))
            }
            (Some(desired), None) => {
                let hash = digest(&desired);
                let out = match writer.get(resource_, &key.namespace, &key.name).await? {
                    Some(found) if label(&found, LABEL_FROM_SUPER) != Some("true") => {
                        let refusal = Refusal::new(
                            Reason::SyncConflict,
                            format!(
                                "the tenant has its own {} {}; the public super object of that name is not copied over it",
                                resource.group_kind,
                                slash(&key.namespace, &key.name)
                            ),
                        );
                        self.refuse(key, Some(&found), &refusal).await;
                        return Ok(Outcome::default());
                    }
                    Some(found) => self.replace_copy(resource_, desired, &found).await?,
                    None => writer.create(resource_, &desired).await?,
                };
                self.record_write(key, "copy", hash, &out);
                tenant_cache.remember(out);
                self.accepted(key);
                self.set_synced(key, true);
                Ok(Outcome::wrote(true))
            }
            (Some(desired), Some(copy)) => {
                self.accepted(key);
                self.set_synced(key, true);
                let hash = digest(&desired);
                if same_copy(&copy, &desired) || self.wrote_this(key, "copy", &hash, &copy) {
                    return Ok(Outcome::default());
                }
                let out = self.replace_copy(resource_, desired, &copy).await?;
                tracing::info!(tenant = %self.tenant.name, object = %self.describe(key), "reverted a tenant edit of a copy from the super cluster");
                self.record_write(key, "copy", hash, &out);
                tenant_cache.remember(out);
                Ok(Outcome::wrote(true))
            }
        }
    }

    async fn replace_copy(
        &self,
        resource: &ApiResource,
        mut desired: Value,
        actual: &Value,
    ) -> Result<Value> {
        if let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv(actual)));
        }
        self.tenant.writer.replace(resource, &desired).await
    }

    /// A tenant namespace: when it is gone, its super namespace (and so every copy in it) goes.
    /// Whether super namespace `ns` is this tenant's, made for its namespace `tenant_ns`.
    fn owns_super_namespace(&self, ns: &Value, tenant_ns: &str) -> bool {
        label(ns, LABEL_TENANT) == Some(&*self.tenant.name)
            && annotation(ns, ANN_TENANT_NAMESPACE) == Some(tenant_ns)
    }

    /// Brings the labels a super namespace copies from its tenant namespace up to date.
    async fn sync_namespace_labels(&self, tenant_ns: &str, super_ns: &Value) -> Result<bool> {
        let desired =
            namespace_labels::desired(self.tenant.namespaces.get("", tenant_ns).as_deref());
        let Some(patch) = namespace_labels::patch(super_ns, &desired) else {
            return Ok(false);
        };
        let name = meta_str(super_ns, "name").unwrap_or("");
        let patched = self
            .shared
            .writer
            .merge_patch(&namespace_resource(), "", name, &patch)
            .await?;
        self.shared.namespaces.remember(patched);
        Ok(true)
    }

    async fn namespace(&self, key: &Key) -> Result<Outcome> {
        let alive = self.tenant_namespace_alive(&key.name);
        if !alive {
            // Its objects go with it, even before the namespace controller deletes them.
            for (idx, resource) in self.shared.policy.resources.iter().enumerate() {
                if resource.direction != Direction::ToSuper || resource.scope != Scope::Namespaced {
                    continue;
                }
                for object in self.tenant.caches[idx].values() {
                    if meta_str(&object, "namespace") == Some(key.name.as_str()) {
                        self.shared.queues.add(Key {
                            tenant: self.tenant.name.clone(),
                            kind: Kind::Resource(idx),
                            namespace: key.name.clone(),
                            name: meta_str(&object, "name").unwrap_or("").to_string(),
                        });
                    }
                }
            }
        }
        let super_ns = self.tenant.names().to_super(&key.name);
        let Some(found) = self.shared.namespaces.get("", &super_ns) else {
            return Ok(Outcome::default());
        };
        if !self.owns_super_namespace(&found, &key.name) || deleting(&found) {
            return Ok(Outcome::default());
        }
        if alive {
            // Alive: its super namespace follows its labels.
            return Ok(Outcome::wrote(
                self.sync_namespace_labels(&key.name, &found).await?,
            ));
        }
        self.shared
            .writer
            .delete(
                &namespace_resource(),
                "",
                &super_ns,
                meta_str(&found, "uid").unwrap_or(""),
            )
            .await?;
        tracing::info!(tenant = %self.tenant.name, namespace = %key.name, super_namespace = %super_ns, "tenant namespace gone; deleted its super namespace");
        Ok(Outcome::wrote(true))
    }
}

/// Whether `value` holds a field marked `x-ferry-owner: super` (looked up as ferry-core copies
/// them up: through objects, not into arrays).
fn carries_owned(node: &ferry_core::schema::Node, value: &Value) -> bool {
    node.fields.iter().any(|(key, child)| match value.get(key) {
        None => false,
        Some(_) if child.has(|r| matches!(r, ferry_core::schema::Rule::OwnerSuper)) => true,
        Some(inner) => inner.is_object() && carries_owned(child, inner),
    })
}

fn slash(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}
