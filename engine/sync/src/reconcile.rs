//! The executors: for one key, read the caches, translate (ferry-core), ask `decide` what to
//! do, and carry the action out through the writers.
//!
//! ```text
//!  toSuper:   tenant object ─to_super─▶ desired copy ─to_super/plan.rs (pure)─▶ namespaces, writes, then deletes
//!             super copy ─to_tenant─▶ status + super-owned fields ─decide::up─▶ tenant apply
//!  fromSuper: super object ─to_tenant─▶ desired tenant copy ─decide::read_only_copy─▶ create / replace / delete
//!  produced:  super object + what names or owns it ─to_tenant─▶ tenant copy ─decide::read_only_copy─▶ ...
//!  Namespace: tenant namespace ─decide::tenant_namespace─▶ super namespace labels / delete
//! ```

use std::time::{Duration, Instant};

use ferry_core::policy::{Direction, Policy, Resource};
use ferry_core::sandbox::Sandbox;
use ferry_core::translate::{Reason, Refusal, Translated, Translator};
use serde_json::Value;

use crate::deps;
use crate::key::{Key, Kind};
use crate::public::TenantView;
use crate::state::{Shared, TenantState};
use crate::write;

mod from_super;
mod migration;
mod namespaces;
mod produced;
mod read_only;
mod reduced;
mod report;
mod to_super;
mod up;

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

/// While an old copy or namespace is being deleted (finalizers), look again this often.
const WAIT_FOR_DELETION: Duration = Duration::from_secs(2);
/// After deleting an old copy, or losing a race to create a namespace, look again this soon.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// `Result` of a reconcile.
pub type Result<T, E = write::Error> = std::result::Result<T, E>;

/// Reconciles the keys of one tenant.
pub struct Reconciler<'a> {
    shared: &'a Shared,
    tenant: &'a TenantState,
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
                let Some(resource) = self.shared.policy.resources.get(idx.0) else {
                    return Ok(Outcome::default());
                };
                match resource.direction {
                    Direction::ToSuper => {
                        let outcome = self.to_super(key, idx, resource).await;
                        if !resource.dependency {
                            deps::ensure_recorded(self.shared, self.tenant, key, idx);
                        }
                        outcome
                    }
                    Direction::FromSuper => self.public_copy(key, idx, resource).await,
                    Direction::Produced => self.produced(key, idx, resource).await,
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
        self.translate_for(resource, object, down, None).await
    }

    /// [`Reconciler::translate`] of an object produced for `producer` (`<group>/<Kind>/<name>`).
    async fn translate_for(
        &self,
        resource: &Resource,
        object: Value,
        down: bool,
        producer: Option<String>,
    ) -> std::result::Result<Translated, Refusal> {
        let names = self.tenant.names();
        let view = TenantView::new(
            self.shared.public.clone(),
            &self.shared.policy,
            &self.tenant.caches,
        );
        // The tenant's namespaces go up (redactions never take one of their names, free text
        // is unmapped with them) and to transforms that ask for them.
        let asks = resource.plan.has_text
            || (down && resource.plan.fills_namespaces())
            || resource
                .transforms
                .iter()
                .any(|s| s.uses_tenant_namespaces());
        let namespaces = if !down || asks {
            self.tenant.live_namespaces()
        } else {
            Vec::new()
        };
        let run = move |policy: &Policy, sandbox: &Sandbox| {
            let mut t = Translator::new(policy, Some(sandbox))
                .with_published(&view)
                .with_namespaces(&namespaces);
            if let Some(producer) = &producer {
                t = t.with_producer(producer);
            }
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
}
