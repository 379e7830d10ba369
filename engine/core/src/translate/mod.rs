//! Translation of one object between a tenant and the super cluster.
//!
//! ```text
//!  down (toSuper):  tenant object ─▶ approve ─▶ metadata::down ─▶ fields (Down) ─▶ to_super*
//!                   ─▶ invariants ─▶ super object
//!  up (toSuper):    super object ─▶ ownership ─▶ metadata::up ─▶ status + owner fields
//!                   ─▶ fields (Up) ─▶ to_tenant* ─▶ invariants ─▶ tenant fragment
//!  up (fromSuper):  super object ─▶ selector ─▶ metadata::from_super ─▶ to_tenant* ─▶ tenant copy
//! ```
//!
//! Each step records what it changed and why, for `ferry translate --explain`. A refusal says
//! why in one line and carries the short reason used for Events and metrics.

mod copies;
mod diff;
mod fields;
mod guard;
mod metadata;
mod namespace_labels;
mod outcome;

pub use guard::{Published, READ_DEPTH};
pub use metadata::flowing_up;
pub use namespace_labels::{reserved_namespace_label, super_namespace_labels, NamespaceLabels};
pub use outcome::{Change, Reason, Reference, Refusal, Translated};
pub use path::Path;

use crate::keys::{ANN_TENANT_NAMESPACE, LABEL_FROM_SUPER, LABEL_TENANT};
use serde_json::{Map, Value};

use crate::naming::NameMap;
use crate::path;
use crate::policy::{Direction, Policy, Resource};
use crate::sandbox::{CallContext, Hook, Sandbox};

pub use diff::diff;

pub use crate::naming::{SERDE_JSON_NUMBER, SERDE_JSON_PRIVATE};

/// `Result` of a translation.
pub type Result<T, E = Refusal> = std::result::Result<T, E>;

/// Translates objects under one policy.
pub struct Translator<'a> {
    policy: &'a Policy,
    sandbox: Option<&'a Sandbox>,
    published: Option<&'a dyn Published>,
    namespaces: &'a [String],
    producer: Option<&'a str>,
}

/// What kind of object a document is, from its `apiVersion` and `kind`.
fn type_of(obj: &Map<String, Value>) -> Result<(&str, &str)> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(Refusal::new(
            Reason::Invalid,
            "the document has no apiVersion and kind (expected a Kubernetes object)",
        ));
    }
    Ok((api_version, kind))
}

impl<'a> Translator<'a> {
    /// A translator; `sandbox` runs transforms (kinds with transforms are refused without one).
    pub fn new(policy: &'a Policy, sandbox: Option<&'a Sandbox>) -> Self {
        Self {
            policy,
            sandbox,
            published: None,
            namespaces: &[],
            producer: None,
        }
    }

    /// What a produced object is copied up for (`<group>/<Kind>/<name>`), known live; offline
    /// it is read from the object's controller ownerReference.
    pub fn with_producer(mut self, producer: &'a str) -> Self {
        self.producer = Some(producer);
        self
    }

    /// The tenant's namespaces, for transforms that call `ctx.tenant_namespaces()`.
    pub fn with_namespaces(mut self, namespaces: &'a [String]) -> Self {
        self.namespaces = namespaces;
        self
    }

    /// Checks references to public kinds against what the super cluster publishes (live);
    /// without it (offline) they are noted as unverified in explanations.
    pub fn with_published(mut self, published: &'a dyn Published) -> Self {
        self.published = Some(published);
        self
    }

    /// The approved rule for an object, or why there is none. For a kind approved both ways,
    /// the rule of `direction`.
    pub fn resource(&self, obj: &Map<String, Value>, direction: Direction) -> Result<&'a Resource> {
        let (api_version, kind) = type_of(obj)?;
        let (group, version) = crate::schema::load::split_api_version(api_version);
        match self.policy.resource_in(group, kind, direction) {
            Some(r) if r.version() == version => Ok(r),
            Some(r) => Err(Refusal::new(
                Reason::NotApproved,
                format!(
                    "{api_version} {kind} is not approved: the policy approves {kind} only at {} ({})",
                    r.api_version, r.at
                ),
            )),
            None => Err(Refusal::new(
                Reason::NotApproved,
                format!("{api_version} {kind} is not approved by the policy"),
            )),
        }
    }

    /// Translates a tenant object into the object ferry would apply in the super cluster.
    pub fn to_super(&self, object: Value, names: &NameMap, explain: bool) -> Result<Translated> {
        let (resource, mut translated) = self.rewrite_down(object, names, explain)?;
        let mut changes = std::mem::take(&mut translated.changes);
        let mut object = translated.object;
        for script in &resource.transforms {
            object = self.run(
                script,
                Hook::ToSuper,
                object,
                names,
                explain.then_some(&mut changes),
            )?;
        }
        let mut guard = guard::Guard::new(
            self.policy,
            names,
            self.published,
            !resource.transforms.is_empty(),
            explain,
        );
        guard.down(resource, &object)?;
        if let Some(unverified) = guard.unverified {
            changes.extend(unverified.into_iter().map(|note| Change {
                path: String::new(),
                before: None,
                after: None,
                rule: format!("guard: {note}"),
            }));
        }
        Ok(Translated {
            object,
            changes,
            references: translated.references,
        })
    }

    /// The references a tenant object makes, as [`Translator::to_super`] records them (before
    /// transforms run, so without running them): what dependency tracking needs, cheaply.
    pub fn references(&self, object: Value, names: &NameMap) -> Result<Vec<Reference>> {
        Ok(self.rewrite_down(object, names, false)?.1.references)
    }

    /// The schema and metadata rules of [`Translator::to_super`], without transforms.
    fn rewrite_down(
        &self,
        object: Value,
        names: &NameMap,
        explain: bool,
    ) -> Result<(&'a Resource, Translated)> {
        let Value::Object(mut out) = object else {
            return Err(Refusal::new(
                Reason::Invalid,
                "the document is not an object",
            ));
        };
        let resource = self.resource(&out, Direction::ToSuper)?;
        if metadata::label(&out, LABEL_FROM_SUPER) == Some("true") {
            // Never a loop: what ferry copied into the tenant never goes back down.
            return Err(Refusal::new(
                Reason::NotSelected,
                format!("the object is a read-only copy from the super cluster ({LABEL_FROM_SUPER}=true); it never goes down"),
            ));
        }
        if resource.direction == Direction::FromSuper {
            return Err(Refusal::new(
                Reason::NotApproved,
                format!(
                    "{} is approved fromSuper: super objects are copied into tenants, tenant objects never go down",
                    resource.group_kind
                ),
            ));
        }
        if let Some(selector) = &resource.selector {
            if !selector.matches(&metadata::labels(&out)) {
                return Err(Refusal::new(
                    Reason::NotSelected,
                    format!(
                        "the object's labels do not match the selector of {} ({})",
                        resource.group_kind, resource.at
                    ),
                ));
            }
        }
        let mut changes = Vec::new();
        metadata::down(&mut out, resource, names, explain.then_some(&mut changes))?;
        let mut references = Vec::new();
        let own_namespace = out
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(ANN_TENANT_NAMESPACE))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut object = Value::Object(out);
        fields::Fields::new(
            self.policy,
            names,
            fields::Way::Down,
            explain.then_some(&mut changes),
            Some(&mut references),
        )
        .with_published(self.published)
        .with_namespaces(self.namespaces)
        .with_own_namespace(&own_namespace)
        .apply(&resource.plan.root, &mut object, &Path::Root)?;
        Ok((
            resource,
            Translated {
                object,
                changes,
                references,
            },
        ))
    }

    /// Translates a super object into what ferry would write back into the tenant: for a
    /// toSuper kind the up-flowing fields under the tenant's name and namespace; for a
    /// fromSuper kind the read-only copy.
    pub fn to_tenant(&self, object: &Value, names: &NameMap, explain: bool) -> Result<Translated> {
        let Value::Object(input) = object else {
            return Err(Refusal::new(
                Reason::Invalid,
                "the document is not an object",
            ));
        };
        // A super object carrying ferry's tenant label is a tenant's copy (its status flows
        // up); any other is the platform's (copied into tenants if it is public).
        // A kind approved produced (never also fromSuper) is found in tenants' super
        // namespaces.
        let (group, kind) = type_of(input)?;
        let (group, _) = crate::schema::load::split_api_version(group);
        let direction = if metadata::label(input, LABEL_TENANT).is_some() {
            Direction::ToSuper
        } else if self.policy.produced(group, kind).is_some() {
            Direction::Produced
        } else {
            Direction::FromSuper
        };
        let resource = self.resource(input, direction)?;
        let mut names = names.clone();
        let mut changes = Vec::new();
        let mut object = match resource.direction {
            Direction::FromSuper => {
                let labels = metadata::labels(input);
                if let Some(owner) = labels.get(LABEL_TENANT) {
                    return Err(Refusal::new(
                        Reason::NotSelected,
                        format!("the super object is tenant {owner:?}'s copy ({LABEL_TENANT}), never a public object"),
                    ));
                }
                if let Some(selector) = &resource.selector {
                    if !selector.matches(&labels) {
                        return Err(Refusal::new(
                            Reason::NotSelected,
                            format!(
                                "the super object's labels do not match the selector of {} ({}), so it is not public",
                                resource.group_kind, resource.at
                            ),
                        ));
                    }
                }
                let mut copy =
                    Value::Object(metadata::from_super(input, explain.then_some(&mut changes)));
                if resource.group_kind.group == "apiextensions.k8s.io"
                    && resource.group_kind.kind == "CustomResourceDefinition"
                {
                    copies::public_crd(&mut copy, explain.then_some(&mut changes));
                }
                copy
            }
            Direction::ToSuper => {
                metadata::up(input, resource, &mut names, explain.then_some(&mut changes))?
            }
            Direction::Produced => Value::Object(copies::produced(
                input,
                (&names, self.policy),
                self.producer,
                explain.then_some(&mut changes),
            )?),
        };
        // A tenant's fragment and a public copy alike: the tenant's namespaces unmapped,
        // everyone else's redacted.
        let own_namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        fields::Fields::new(
            self.policy,
            &names,
            fields::Way::Up,
            explain.then_some(&mut changes),
            None,
        )
        .with_published(self.published)
        .with_namespaces(self.namespaces)
        .with_own_namespace(&own_namespace)
        .apply(&resource.plan.root, &mut object, &Path::Root)?;
        for script in &resource.transforms {
            object = self.run(
                script,
                Hook::ToTenant,
                object,
                &names,
                explain.then_some(&mut changes),
            )?;
        }
        let guard = guard::Guard::new(
            self.policy,
            &names,
            self.published,
            !resource.transforms.is_empty(),
            false,
        )
        .with_namespaces(self.namespaces);
        match resource.direction {
            Direction::FromSuper => guard.public_copy(resource, &object)?,
            Direction::Produced => guard.produced_copy(resource, &object)?,
            Direction::ToSuper => guard.up(resource, &object)?,
        }
        Ok(Translated {
            object,
            changes,
            references: Vec::new(),
        })
    }

    /// Runs one transform hook and checks that it kept what it must keep.
    fn run(
        &self,
        script: &crate::sandbox::Script,
        hook: Hook,
        object: Value,
        names: &NameMap,
        changes: Option<&mut Vec<Change>>,
    ) -> Result<Value> {
        // A transform could drop or flatten what was not read, and write something else.
        guard::readable(&object)?;
        let Some(sandbox) = self.sandbox else {
            return Err(Refusal::new(
                Reason::TransformFailed,
                format!(
                    "transform {} needs the sandbox, which is not running",
                    script.name
                ),
            ));
        };
        let ctx = CallContext {
            tenant: names.tenant().as_str(),
            learnt: names.learnt(),
            namespaces: self.namespaces,
        };
        let out = match sandbox.call(script, hook, &object, &ctx) {
            Ok(Some(out)) => out,
            // `to_tenant` is optional: without it, what flows up is unchanged.
            Ok(None) if hook == Hook::ToTenant => return Ok(object),
            Ok(None) => {
                return Err(Refusal::new(
                    Reason::TransformFailed,
                    format!(
                        "transform {} ({}) does not define {}",
                        script.name,
                        script.file,
                        hook.function()
                    ),
                ))
            }
            Err(e) => return Err(Refusal::new(Reason::TransformFailed, e.to_string())),
        };
        diff::check_invariants(&script.name, &object, &out)?;
        if let Some(changes) = changes {
            let rule = format!(
                "transform {} {} ({})",
                script.name,
                hook.function(),
                script.file
            );
            diff(&object, &out, "", &rule, changes);
        }
        Ok(out)
    }
}

/// A `namespacedName` reference (`name` or `namespace/name`, at `path`) as the reference
/// object `{name, namespace}` it stands for; `Invalid` when it is neither.
pub(crate) fn namespaced_name_object(text: &str, path: &Path<'_>) -> Result<Value> {
    let Some((namespace, name)) = crate::schema::split_namespaced_name(text) else {
        return Err(Refusal::new(
            Reason::Invalid,
            format!("{path}: expected name or namespace/name, found {text:?}"),
        ));
    };
    let mut object = Map::new();
    object.insert("name".into(), Value::String(name.to_string()));
    if let Some(ns) = namespace {
        object.insert("namespace".into(), Value::String(ns.to_string()));
    }
    Ok(Value::Object(object))
}

/// Joins a field path and a key the way `--explain` prints them.
pub(crate) fn join(path: &str, key: &str) -> String {
    match (path.is_empty(), path::is_plain_key(key)) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key:?}]"),
    }
}

#[cfg(test)]
mod tests;
