//! The one executor of a tenant's read-only copies of super objects, public (fromSuper) and
//! produced: planned from the caches and ferry's last write (and, where the name may be free,
//! one read of the tenant's API server), then applied. What differs between the two is data
//! ([`Copying`]); nothing here decides what the copy should be.
//!
//! ```text
//!  desired copy (translated) + cached copy ─decide::read_only_copy─▶ ReadOnly
//!      Check ─GET─▶ decide::read_only_checked ─▶ Create | Replace | Refuse
//!  ─▶ Plan ─apply─▶ create / replace (422: decide::in_place) / delete / nothing
//! ```

use ferry_core::policy::{GroupKind, Resource};
use kube::discovery::ApiResource;
use serde_json::Value;

use super::{Outcome, Reconciler, Result, LOOK_AGAIN};
use crate::cache::{Cache, Served};
use crate::compare::digest;
use crate::decide::{self, Checked, Doomed, InPlace, ReadOnly, Unchangeable};
use crate::key::{slash, Key};
use crate::ledger::Part;

/// How one direction's read-only copies differ.
pub(super) struct Copying<'a> {
    /// What the copy is of, for a refusal of a name the tenant holds.
    pub source: Source<'a>,
    /// What a deleted copy was of, for the log.
    pub gone: &'static str,
    /// What a replace did, for the log.
    pub replaced: &'static str,
    /// Where a refusal's Event goes.
    pub refuse_on: EventOn<'a>,
    /// A copy that cannot change in place (the API server answers 422).
    pub in_place: InPlace,
}

/// What a read-only copy is of, said only when a refusal needs it.
pub(super) enum Source<'a> {
    /// The public super object of the copy's name.
    Public,
    /// An object of `kind` produced in the super cluster for `producer` (`<group>/<Kind>/<name>`).
    Produced {
        kind: &'a GroupKind,
        producer: Option<&'a str>,
    },
}

impl std::fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Public => f.write_str("the public super object of that name"),
            Source::Produced { kind, producer } => write!(
                f,
                "the {kind} produced in the super cluster for {}",
                producer.unwrap_or("it")
            ),
        }
    }
}

/// Where the Event of a refused read-only copy goes.
pub(super) enum EventOn<'a> {
    /// On the tenant's object that holds the name.
    Found,
    /// On this object (what the copy was produced for), if any.
    Object(Option<&'a Value>),
}

/// What is to be done with one read-only copy, once its name was read where needed.
#[derive(Debug)]
pub(super) enum Plan {
    /// Left as it is (`wanted`: a copy should exist, and does).
    Unchanged { wanted: bool },
    /// Created.
    Create(Value),
    /// Replaced, guarded by the resourceVersion the body carries.
    Replace(Value),
    /// Deleted.
    Delete(Doomed),
    /// Not written: the tenant's own object holds the name (`found`).
    Refuse {
        refusal: ferry_core::translate::Refusal,
        found: Option<Value>,
    },
}

/// A [`Plan`] and the digest of the desired copy it writes (for the ledger).
#[derive(Debug)]
pub(super) struct Planned {
    pub plan: Plan,
    pub hash: String,
}

/// The read-only copy of `key` and how it is served (`api`, held in `cache`).
pub(super) struct Target<'a> {
    pub key: &'a Key,
    pub cache: &'a Cache,
    pub api: &'a ApiResource,
    /// The kind, for messages.
    pub kind: &'a GroupKind,
}

impl<'a> Target<'a> {
    /// The copy of `key` of policy entry `resource`, served as `served`, held in `cache`.
    pub fn new(key: &'a Key, cache: &'a Cache, served: &'a Served, resource: &'a Resource) -> Self {
        Self {
            key,
            cache,
            api: &served.resource,
            kind: &resource.group_kind,
        }
    }
}

impl Reconciler<'_> {
    /// What to do with the tenant's read-only copy `copy` of `target` to make it `desired`:
    /// from the caches and ferry's last write, and, where the name may be free, from the
    /// tenant API server (a tenant object of that name is refused as not a copy of
    /// `copying.source`). Also `desired`'s digest, for the ledger.
    pub(super) async fn plan_read_only(
        &self,
        target: &Target<'_>,
        desired: Option<&Value>,
        copy: Option<&Value>,
        copying: &Copying<'_>,
    ) -> Result<Planned> {
        let key = target.key;
        let hash = desired.map(digest).unwrap_or_default();
        let wrote = copy.is_some_and(|c| self.tenant.ledger().wrote(key, Part::Copy, &hash, c));
        let plan = match decide::read_only_copy(desired, copy, wrote) {
            ReadOnly::Nothing => Plan::Unchanged {
                wanted: desired.is_some(),
            },
            ReadOnly::Replace(body) => Plan::Replace(body),
            ReadOnly::Delete(doomed) => Plan::Delete(doomed),
            ReadOnly::Check(desired) => {
                let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
                let found = self.tenant.writer.get(target.api, namespace, name).await?;
                let what = format!("{} {}", target.kind, slash(namespace, name));
                let source = copying.source.to_string();
                match decide::read_only_checked(found.as_ref(), &desired, &what, &source) {
                    Checked::Create(body) => Plan::Create(body),
                    Checked::Replace(body) => Plan::Replace(body),
                    Checked::Refuse(refusal) => Plan::Refuse { refusal, found },
                }
            }
        };
        Ok(Planned { plan, hash })
    }

    /// Carries a planned write out for the read-only copy `copy` of `target`.
    pub(super) async fn apply_read_only(
        &self,
        target: &Target<'_>,
        Planned { plan, hash }: Planned,
        copy: Option<&Value>,
        copying: &Copying<'_>,
    ) -> Result<Outcome> {
        let (key, writer, api) = (target.key, &self.tenant.writer, target.api);
        let out = match plan {
            Plan::Unchanged { wanted } => return Ok(self.copy_unchanged(key, wanted)),
            Plan::Delete(doomed) => return self.copy_deleted(target, &doomed, copying.gone).await,
            Plan::Refuse { refusal, found } => {
                let on = match copying.refuse_on {
                    EventOn::Found => found.as_ref(),
                    EventOn::Object(object) => object,
                };
                self.refuse(key, on, &refusal).await;
                return Ok(Outcome::default());
            }
            Plan::Create(body) => writer.create(api, &body).await?,
            Plan::Replace(body) => match writer.replace(api, &body).await {
                Ok(out) => {
                    if copy.is_some() {
                        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(key), "{}", copying.replaced);
                    }
                    out
                }
                Err(e) if e.code() == Some(422) => {
                    return match decide::unchangeable(copying.in_place, copy, &e.to_string()) {
                        Unchangeable::Keep(refusal) => {
                            self.refuse(key, copy, &refusal).await;
                            Ok(Outcome::default())
                        }
                        Unchangeable::Remake(doomed) => self.remake(target, &doomed, &e).await,
                        Unchangeable::Fail => Err(e),
                    };
                }
                Err(e) => return Err(e),
            },
        };
        self.tenant
            .ledger()
            .record_write(key, Part::Copy, &hash, &out);
        target.cache.remember(out);
        self.accepted(key);
        self.set_synced(key, true);
        Ok(Outcome::wrote(true))
    }

    /// Deletes the tenant's read-only copy `doomed` of `target`, the copy of `why`: out of
    /// sync, and nothing is remembered of it.
    async fn copy_deleted(
        &self,
        target: &Target<'_>,
        doomed: &Doomed,
        why: &str,
    ) -> Result<Outcome> {
        self.set_synced(target.key, false);
        self.delete_read_only(target, doomed).await?;
        self.tenant.ledger().forget(target.key);
        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(target.key), "deleted the copy of {why}");
        Ok(Outcome::wrote(true))
    }

    /// Deletes a copy that cannot change in place (`e`), to be made anew by the next
    /// reconcile.
    async fn remake(
        &self,
        target: &Target<'_>,
        doomed: &Doomed,
        e: &crate::write::Error,
    ) -> Result<Outcome> {
        self.delete_read_only(target, doomed).await?;
        tracing::info!(tenant = %self.tenant.name, object = %self.shared.describe(target.key), "a copy cannot change in place ({e}); it is made anew");
        Ok(Outcome::again(LOOK_AGAIN))
    }

    /// Deletes the copy `doomed` of `target` (on its uid and resourceVersion) and forgets it.
    async fn delete_read_only(&self, target: &Target<'_>, doomed: &Doomed) -> Result<()> {
        let (namespace, name) = (target.key.namespace.as_str(), target.key.name.as_str());
        self.tenant
            .writer
            .delete(target.api, namespace, name, doomed)
            .await?;
        target.cache.forget(namespace, name);
        Ok(())
    }

    /// A read-only copy left as it is: in sync if one is wanted.
    fn copy_unchanged(&self, key: &Key, wanted: bool) -> Outcome {
        self.set_synced(key, wanted);
        if wanted {
            self.accepted(key);
        } else {
            // Nothing on either side: nothing to remember.
            self.tenant.ledger().forget(key);
        }
        Outcome::default()
    }
}
