//! Every write ferry makes, in one place: counted by cluster and verb, refused when this
//! replica is not the leader.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::DynamicResourceScope;
use kube::Client;
use serde_json::Value;

use crate::cache::Wire;
use crate::metrics::{labels, Metrics};
use crate::object::Doomed;

mod fence;
mod gate;
pub mod pace;
mod upgrade;

pub use gate::{Fence, Gate, Sharded};
pub use pace::Pace;

pub use crate::object::FIELD_MANAGER;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed it.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// This replica lost the lease.
    #[error("not the leader: writes are left to the replica holding the lease")]
    NotLeader,
    /// A sharded replica whose membership renewal is not fresh writes nothing.
    #[error(
        "membership not renewed in the last two thirds of leaseDuration: writes wait until it is"
    )]
    Fenced,
    /// The cluster did not answer a request a moment ago; requests fail at once for a while.
    #[error("{0} did not answer a moment ago; retrying later")]
    Unreachable(String),
    /// The apply went through, but the fields a create set and the apply dropped are still
    /// there (the patch removing them failed); the next reconcile must apply again.
    #[error("removing the fields the apply dropped: {0}")]
    Cleanup(Box<Error>),
    /// An object could not be read as a Kubernetes object.
    #[error("{0}")]
    Invalid(String),
    /// The write would go into a platform namespace (`platformNamespaces`; `write/fence.rs`).
    #[error("super namespace {namespace:?} is a platform namespace (platformNamespaces: {pattern:?}); ferry never writes into it")]
    Platform {
        /// The namespace.
        namespace: String,
        /// The pattern it matches.
        pattern: String,
    },
}

impl Error {
    /// The HTTP status the API server answered, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }
}

/// What must hold for a server-side apply to go through (one request either way, no read).
/// An apply never creates: a create is a POST ([`Writer::create`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition<'a> {
    /// The object with this uid holds the name: never another one, and never a new one.
    Uid(&'a str),
    /// The object with this uid, still at this resourceVersion (status subresources of custom
    /// resources do not check the uid; they check the resourceVersion before anything else).
    Exact {
        /// Its uid.
        uid: &'a str,
        /// Its resourceVersion.
        version: &'a str,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes into one cluster.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    cluster: String,
    metrics: Arc<Metrics>,
    gate: Gate,
    /// Whether the cluster answers.
    reach: Arc<Mutex<Reach>>,
    /// Namespaces never written (a super's writer: `platformNamespaces`; `write/fence.rs`).
    platform: Option<Arc<ferry_core::config::PlatformNamespaces>>,
    /// The one exception: the copies of a placed kind (group, kind) in the operator's
    /// namespace its policy entry names (`placement.namespace`).
    placed: Arc<[(String, String, String)]>,
    /// How many writes may be in flight, and whose goes next (a super's writer: `pace.rs`).
    pace: Option<Arc<Pace>>,
}

tokio::task_local! {
    /// The reconcile a task is doing, for what its writes say of it: whose write waits in
    /// which line (`pace.rs`), and ferry's own time from the change to its first write sent
    /// (`ferry_own_seconds`).
    pub static RECONCILING: Reconciling;
}

/// See [`RECONCILING`].
pub struct Reconciling {
    /// The tenant.
    pub tenant: Arc<str>,
    /// When the change was queued.
    pub since: Instant,
    /// Whether a write was sent already.
    pub sent: std::cell::Cell<bool>,
}

/// Whether a request got an answer (an error the API server sent counts).
fn is_answer<T>(result: &kube::Result<T>) -> bool {
    matches!(
        result,
        Err(kube::Error::Api(_) | kube::Error::SerdeError(_)) | Ok(_)
    )
}

/// Writes in flight to a super before its answers teach the pace more (`write/pace.rs`).
const INITIAL_LIMIT: usize = 4;

/// Whether a cluster answers.
#[derive(Clone, Copy, Debug, Default)]
enum Reach {
    /// It answered its last request.
    #[default]
    Answering,
    /// It did not: requests fail at once until then.
    Silent(Instant),
    /// One request, sent then, is finding out; the others fail at once.
    Probing(Instant),
}

/// After a request got no answer (a timeout, a refused connection), further requests to that
/// cluster fail at once for this long, so that a hung cluster holds no worker and the other
/// clusters' keys go on; its keys come back after their backoff.
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);
/// How long one probing request may take before another may try (the request client's
/// timeout is 15 s).
const PROBE_FOR: Duration = Duration::from_secs(20);

/// What is sent: read from `value` where it is (not from a copy of it).
fn object(value: &Value) -> Result<DynamicObject> {
    use serde::Deserialize;
    DynamicObject::deserialize(value).map_err(|e| Error::Invalid(e.to_string()))
}

/// The namespace (empty for a cluster-scoped object) and name `desired` is written as.
fn named(desired: &Value) -> Result<(&str, &str)> {
    let Some(metadata) = desired.get("metadata").and_then(Value::as_object) else {
        return Err(Error::Invalid("an object without metadata".into()));
    };
    let text = |key: &str| match metadata.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(other) => Err(Error::Invalid(format!(
            "metadata.{key}: expected a string, found {other}"
        ))),
    };
    Ok((text("namespace")?, text("name")?))
}

/// How [`Writer::send`] writes.
#[derive(Clone, Copy)]
enum Verb {
    /// POST: a new object.
    Create,
    /// PUT: the object `desired` names, as it is now.
    Replace,
}

impl Writer {
    /// A writer into the cluster of `client`, named `cluster` in metrics.
    pub fn new(client: Client, cluster: &str, metrics: Arc<Metrics>, gate: Gate) -> Self {
        Self {
            client,
            cluster: cluster.to_string(),
            metrics,
            gate,
            reach: Arc::default(),
            platform: None,
            placed: Arc::new([]),
            pace: None,
        }
    }

    /// The same writer with its writes paced (`pace.rs`).
    pub fn paced(mut self, pacing: ferry_core::config::SuperWrites) -> Self {
        use ferry_core::config::SuperWrites;
        self.pace = match pacing {
            SuperWrites::Adaptive => Some(Pace::new(INITIAL_LIMIT)),
            SuperWrites::Unlimited => None,
        };
        self
    }

    fn api(&self, resource: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        self.api_of(resource, namespace)
    }

    /// The API of `resource` in `namespace`, its objects read as `K`: `Wire` where an answer
    /// holds what a tenant wrote (read as the caches read the watch: `cache/wire.rs`).
    fn api_of<K>(&self, resource: &ApiResource, namespace: &str) -> Api<K>
    where
        K: kube::Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
    {
        if namespace.is_empty() {
            Api::all_with(self.client.clone(), resource)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, resource)
        }
    }

    /// Whether a write of `resource` `namespace`/`name` may go: by the leader or a member
    /// whose renewal is fresh (`write/gate.rs`, checked last before the request), outside
    /// the platform's namespaces, to a cluster that answers.
    fn allowed(&self, resource: &ApiResource, namespace: &str, name: &str) -> Result<()> {
        self.fence(resource, namespace, name)?;
        self.gate.check()?;
        self.reachable()
    }

    /// Whether this replica may write now (leader, or fresh membership).
    pub fn may_write(&self) -> bool {
        self.gate.open()
    }

    /// Whether the cluster did not answer a moment ago and its pause is not over.
    fn silent(&self) -> bool {
        let reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        matches!(*reach, Reach::Silent(until) if Instant::now() < until)
    }

    /// Whether a request may go: always while the cluster answers; after it did not, one
    /// request at a time once the pause is over (a request timeout later, another).
    fn reachable(&self) -> Result<()> {
        let mut reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match *reach {
            Reach::Answering => Ok(()),
            Reach::Silent(until) | Reach::Probing(until) if now < until => {
                Err(Error::Unreachable(self.cluster.clone()))
            }
            Reach::Silent(_) | Reach::Probing(_) => {
                *reach = Reach::Probing(now + PROBE_FOR);
                Ok(())
            }
        }
    }

    /// What write `request` gives: sent when the pace has a place for it (and, having waited
    /// for one, when this replica may still write: `write/gate.rs` is checked last before a
    /// request), timed from the change it follows (the first write of a reconcile,
    /// `ferry_own_seconds`), then as [`Writer::asked`].
    async fn answered<T>(
        &self,
        request: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        // The reconcile's tenant, and when its change was queued if this is its first write.
        let (tenant, first) = RECONCILING
            .try_with(|r| (r.tenant.clone(), (!r.sent.replace(true)).then_some(r.since)))
            .unwrap_or_else(|_| (Arc::from(""), None));
        let permit = match &self.pace {
            Some(pace) => {
                let permit = pace.permit(&tenant).await;
                // While it waited, this replica may have lost its right to write, or the
                // cluster stopped answering.
                self.gate.check()?;
                if self.silent() {
                    return Err(Error::Unreachable(self.cluster.clone()));
                }
                Some(permit)
            }
            None => None,
        };
        if let Some(since) = first {
            self.metrics.own.observe(since.elapsed().as_secs_f64());
        }
        let result = self.asked(request).await;
        if let (Some(permit), Some(pace)) = (&permit, &self.pace) {
            permit.answered(pace::Answer::of(&result, permit.elapsed()));
            self.metrics
                .write_limit
                .get_or_create(&labels(&[("cluster", &self.cluster)]))
                .set(pace.limit() as i64);
        }
        Ok(result?)
    }

    /// What `request` gives, noting whether the cluster answered at all and how long it took
    /// (`ferry_request_seconds`). An answer that cannot be read (an object nested past the
    /// parser's limit, say) is an answer: that request fails, and the cluster's other
    /// requests go on.
    async fn asked<T>(
        &self,
        request: impl std::future::Future<Output = kube::Result<T>>,
    ) -> kube::Result<T> {
        let sent = Instant::now();
        let result = request.await;
        self.metrics
            .requests
            .get_or_create(&labels(&[("cluster", &self.cluster)]))
            .observe(sent.elapsed().as_secs_f64());
        let answered = is_answer(&result);
        self.metrics
            .reachable
            .get_or_create(&labels(&[("cluster", &self.cluster)]))
            .set(i64::from(answered));
        let mut reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        if answered {
            if !matches!(*reach, Reach::Answering) {
                tracing::info!(cluster = %self.cluster, "answering again");
            }
            *reach = Reach::Answering;
        } else if let Err(e) = &result {
            if matches!(*reach, Reach::Answering) {
                tracing::warn!(cluster = %self.cluster, error = %e, "no answer; requests to this cluster pause for {}s, then one at a time until it answers", UNREACHABLE_FOR.as_secs());
            }
            *reach = Reach::Silent(Instant::now() + UNREACHABLE_FOR);
        }
        result
    }

    /// Counts a write of `what` (formatted only when debug logs are on).
    fn count(&self, verb: &str, what: std::fmt::Arguments<'_>) {
        tracing::debug!(cluster = %self.cluster, verb, object = %what, "wrote");
        self.metrics
            .writes
            .get_or_create(&labels(&[("cluster", &self.cluster), ("verb", verb)]))
            .inc();
    }

    /// Reads an object (not a write; here because the reconciler reads through the writer
    /// when its cache may be behind).
    pub async fn get(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>> {
        self.reachable()?;
        // Parsed as the caches parse a watch (`cache/wire.rs`): an object nested too deep to
        // read whole is read as the watch holds it, and refused, not retried.
        let api = self.api_of::<Wire>(resource, namespace);
        let found = self.asked(api.get_opt(name)).await?;
        Ok(found.map(|o| o.into_value(resource)))
    }

    /// Which cluster this is: the uid of its kube-system namespace.
    pub async fn cluster_uid(&self) -> Result<String> {
        self.reachable()?;
        let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone());
        let ns = self.asked(api.get("kube-system")).await?;
        Ok(ns.metadata.uid.unwrap_or_default())
    }

    /// Whether any object of `resource` exists, in any namespace (one LIST of at most one).
    pub async fn holds_any(&self, resource: &ApiResource) -> Result<bool> {
        self.reachable()?;
        let params = kube::api::ListParams::default().limit(1);
        let list = self
            .asked(self.api(resource, "").list_metadata(&params))
            .await?;
        Ok(!list.items.is_empty())
    }

    /// Server-side applies `desired` (field manager `ferry`, forcing conflicts: ferry is the
    /// authority on the fields it sets) if `precondition` holds; a `409 Conflict` otherwise.
    pub async fn apply(
        &self,
        resource: &ApiResource,
        desired: &Value,
        precondition: Precondition<'_>,
    ) -> Result<Value> {
        let out: Wire = self
            .apply_to(resource, desired, precondition, false)
            .await?;
        Ok(out.into_value(resource))
    }

    /// [`Writer::apply`] to a copy ferry created with [`Writer::create`] and alone decides:
    /// a field the create set that `desired` no longer has is removed too (with ferry's
    /// Update entry in managedFields; one more request, once per copy at most: see
    /// `write/upgrade.rs`).
    pub async fn apply_copy(
        &self,
        resource: &ApiResource,
        desired: &Value,
        precondition: Precondition<'_>,
    ) -> Result<Value> {
        // Ferry's own copy, which the guard checked: read whole (the cleanup reads its
        // managedFields).
        let out: DynamicObject = self
            .apply_to(resource, desired, precondition, false)
            .await?;
        let raw = serde_json::to_value(&out).map_err(|e| Error::Invalid(e.to_string()))?;
        let Some(patch) = upgrade::cleanup(&raw, desired, FIELD_MANAGER) else {
            // The answer as a value is at hand (managedFields included, which the cleanup
            // reads): not serialized again.
            return Ok(match raw {
                Value::Object(fields) => Value::Object(crate::cache::normalise(fields, resource)),
                _ => Value::Null,
            });
        };
        let namespace = out.metadata.namespace.clone().unwrap_or_default();
        let name = out.metadata.name.clone().unwrap_or_default();
        self.allowed(resource, &namespace, &name)
            .map_err(|e| Error::Cleanup(Box::new(e)))?;
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(|e| Error::Invalid(e.to_string()))?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let cleaned = self
            .answered(self.api_of::<Wire>(resource, &namespace).patch(
                &name,
                &params,
                &Patch::<()>::Json(patch),
            ))
            .await
            .map_err(|e| match e {
                // Fenced or unreachable after waiting for its place: not a failed cleanup.
                Error::Api(_) => Error::Cleanup(Box::new(e)),
                other => other,
            })?;
        self.count(
            "patch",
            format_args!("{} {namespace}/{name}", resource.kind),
        );
        Ok(cleaned.into_value(resource))
    }

    /// Server-side applies `desired` through the status subresource, if `precondition` holds.
    pub async fn apply_status(
        &self,
        resource: &ApiResource,
        desired: &Value,
        precondition: Precondition<'_>,
    ) -> Result<Value> {
        let out: Wire = self.apply_to(resource, desired, precondition, true).await?;
        Ok(out.into_value(resource))
    }

    async fn apply_to<K>(
        &self,
        resource: &ApiResource,
        desired: &Value,
        precondition: Precondition<'_>,
        status: bool,
    ) -> Result<K>
    where
        K: kube::Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let mut o = object(desired)?;
        match precondition {
            // An empty uid would be no precondition at all.
            Precondition::Uid("") | Precondition::Exact { uid: "", .. } => {
                return Err(Error::Invalid(
                    "refusing an apply without the uid of the object it is for".into(),
                ))
            }
            Precondition::Uid(uid) => o.metadata.uid = Some(uid.to_string()),
            Precondition::Exact { uid, version } => {
                o.metadata.uid = Some(uid.to_string());
                o.metadata.resource_version = Some(version.to_string());
            }
        }
        let namespace = o.metadata.namespace.clone().unwrap_or_default();
        let name = o.metadata.name.clone().unwrap_or_default();
        self.allowed(resource, &namespace, &name)?;
        let api = self.api_of::<K>(resource, &namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let out = if status {
            self.answered(api.patch_status(&name, &params, &Patch::Apply(&o)))
                .await?
        } else {
            self.answered(api.patch(&name, &params, &Patch::Apply(&o)))
                .await?
        };
        let verb = if status { "apply-status" } else { "apply" };
        self.count(verb, format_args!("{} {namespace}/{name}", resource.kind));
        Ok(out)
    }

    /// Merge-patches the object `namespace`/`name` (a `metadata.uid` in the patch makes it
    /// conditional on the object being the one ferry looked at).
    pub async fn merge_patch(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value> {
        self.allowed(resource, namespace, name)?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let out = self
            .answered(self.api_of::<Wire>(resource, namespace).patch(
                name,
                &params,
                &Patch::Merge(patch),
            ))
            .await?;
        self.count(
            "patch",
            format_args!("{} {namespace}/{name}", resource.kind),
        );
        Ok(out.into_value(resource))
    }

    /// Creates `desired`.
    pub async fn create(&self, resource: &ApiResource, desired: &Value) -> Result<Value> {
        self.send(resource, desired, Verb::Create).await
    }

    /// Replaces an object with `desired`, whose resourceVersion guards the write.
    pub async fn replace(&self, resource: &ApiResource, desired: &Value) -> Result<Value> {
        self.send(resource, desired, Verb::Replace).await
    }

    /// POSTs or PUTs `desired` as it is, and reads the answer as the caches read the watch
    /// (`Wire`): no typed metadata is built to be written out again, and the answer's
    /// managedFields (the size of the object again) are skipped unparsed.
    async fn send(&self, resource: &ApiResource, desired: &Value, how: Verb) -> Result<Value> {
        let (namespace, name) = named(desired)?;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let body = serde_json::to_vec(desired).map_err(|e| Error::Invalid(e.to_string()))?;
        let url = self.api_of::<Wire>(resource, namespace);
        let request = kube::core::Request::new(url.resource_url());
        let (request, verb) = match how {
            Verb::Create => (request.create(&params, body), "create"),
            Verb::Replace => (request.replace(name, &params, body), "replace"),
        };
        let mut request = request.map_err(|e| Error::Invalid(e.to_string()))?;
        request.extensions_mut().insert(verb);
        // Checked last before the request: a request that cannot be built must not leave a
        // cluster being probed (`reachable`) without one.
        self.allowed(resource, namespace, name)?;
        let out: Wire = self.answered(self.client.request(request)).await?;
        self.count(verb, format_args!("{} {namespace}/{name}", resource.kind));
        Ok(out.into_value(resource))
    }

    /// Deletes the object `doomed` at `namespace`/`name` if it is still as decided on (its
    /// uid, and its resourceVersion when known). Gone already is success; another uid (the
    /// object was replaced meanwhile) is a conflict error.
    pub async fn delete(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        doomed: &Doomed,
    ) -> Result<()> {
        let (uid, version) = (&doomed.uid, &doomed.version);
        self.allowed(resource, namespace, name)?;
        // The object decided on, unchanged since: a delete sent late (a replica paused
        // mid-request) fails rather than removes a newer object.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: (!version.is_empty()).then(|| version.clone()),
            }),
            ..DeleteParams::background()
        };
        match self
            .answered(self.api(resource, namespace).delete(name, &params))
            .await
        {
            Ok(_) => {
                self.count(
                    "delete",
                    format_args!("{} {namespace}/{name}", resource.kind),
                );
                Ok(())
            }
            Err(Error::Api(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}
