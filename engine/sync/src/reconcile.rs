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
    Reason, Refusal, Translated, Translator, ANN_TENANT_NAME, ANN_TENANT_NAMESPACE, ANN_TENANT_UID,
    LABEL_TENANT,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ApiResource;
use serde_json::Value;

use crate::compare::{
    annotation, deleting, digest, holds, label, meta_str, set_annotation, ANN_APPLIED,
};
use crate::engine::{Shared, TenantState};
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
}

fn slash(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

mod books;
mod namespaces;
mod public_copy;
mod up;
