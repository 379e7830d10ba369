//! The guard's check of references after translation: namespaces the tenant's, renamed names
//! the tenant's, kinds approved, public targets published.

use serde_json::{Map, Value};

use super::{optional_str, shown, slash, Guard};
use crate::naming::{dns_label_problem, dns_subdomain_problem, is_system_namespace};
use crate::policy::{Direction, Resource, Scope};
use crate::schema::{RefFormat, RefRule};
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result};

/// A reference's parts, read after translation.
#[derive(Clone, Copy)]
struct Parts<'a> {
    /// The object holding its fields (the reference itself, or the object beside a name
    /// string).
    fields: Option<&'a Map<String, Value>>,
    name: &'a str,
    namespace: &'a str,
    name_path: &'a Path<'a>,
    ns_path: &'a Path<'a>,
}

impl Guard<'_> {
    /// A reference after translation: its namespace is the tenant's (or, for a public
    /// target, a published object's), a renamed name is the tenant's, its kind is approved.
    pub(super) fn reference(
        &mut self,
        rule: &RefRule,
        value: &Value,
        parent: Option<&Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        let declared = match (rule.on_string, rule.on_object) {
            (true, _) => Some("a name string"),
            (_, true) => Some("a reference object"),
            _ => None,
        };
        if let Some(expected) =
            declared.filter(|_| value.is_string() != rule.on_string && !value.is_null())
        {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: expected {expected}, found {}", shown(value)),
            ));
        }
        if let (RefFormat::NamespacedName, Value::String(text)) = (rule.format, value) {
            if text.is_empty() {
                return Ok(());
            }
            let object = crate::translate::namespaced_name_object(text, path)?;
            return self.reference(&rule.as_object(), &object, None, path);
        }
        self.sibling_namespaces(rule, value, parent, path)?;
        let (fields, name, ns_key, name_path) = match value {
            Value::Null => return Ok(()),
            Value::String(name) => (parent, name.as_str(), rule.namespace_key(false), None),
            Value::Object(m) => {
                let name = optional_str(
                    m.get(&rule.name_field),
                    &path.key(&rule.name_field),
                    "a name",
                )?;
                (
                    Some(m),
                    name,
                    rule.namespace_key(true),
                    Some(&rule.name_field),
                )
            }
            other => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!(
                        "{path}: expected a reference (a name or an object), found {}",
                        shown(other)
                    ),
                ))
            }
        };
        let name_path = match name_path {
            Some(key) => path.key(key),
            None => *path,
        };
        let parent_path = path.parent();
        let ns_path = match (value, ns_key) {
            (Value::Object(_), Some(key)) => Some(path.key(key)),
            (_, Some(key)) => Some(parent_path.key(key)),
            _ => None,
        };
        let namespace = match (fields, ns_key) {
            (Some(fields), Some(key)) => optional_str(
                fields.get(key),
                ns_path.as_ref().unwrap_or(path),
                "a namespace",
            )?,
            _ => "",
        };
        let ns_path = ns_path.unwrap_or(*path);
        let parts = Parts {
            fields,
            name,
            namespace,
            name_path: &name_path,
            ns_path: &ns_path,
        };
        self.target(rule, &parts)
    }

    /// The namespaces beside a reference (a namespaceField of its own object or of the object
    /// holding a name string) are the tenant's, unless the target is public.
    fn sibling_namespaces(
        &mut self,
        rule: &RefRule,
        value: &Value,
        parent: Option<&Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        // A field rule does not know whether the reference is a string or an object: with a
        // namespaceField, the sibling of that name is a namespace either way.
        if let (Value::Object(own), Some(declared), false) = (
            value,
            rule.namespace_field
                .as_deref()
                .filter(|k| *k != "namespace"),
            rule.on_string || rule.on_object,
        ) {
            if let Some(ns) = own.get("namespace").filter(|v| !v.is_null()) {
                let public = rule
                    .target(Some(own))
                    .and_then(|(g, k)| self.policy.resource(g, k))
                    .is_some_and(|r| r.direction == Direction::FromSuper);
                if !public {
                    self.namespace(ns, &path.key("namespace"))?;
                } else if own.get(declared) != Some(ns) {
                    // Only the declared field is checked as published: its twin must agree.
                    return Err(self.refuse(format!(
                        "{}: a reference to a public object names its namespace once ({declared}), found {} beside it",
                        path.key("namespace"),
                        shown(ns)
                    )));
                }
            }
        }
        if let (Value::Object(_), Some(key), Some(parent)) = (
            value,
            rule.sibling_namespace().filter(|_| !rule.on_string),
            parent,
        ) {
            if let Some(ns) = parent.get(key) {
                let public = rule
                    .target(Some(parent))
                    .and_then(|(g, k)| self.policy.resource(g, k))
                    .is_some_and(|r| r.direction == Direction::FromSuper);
                if !public {
                    self.namespace(ns, &path.parent().key(key))?;
                }
            }
        }
        Ok(())
    }

    /// What a reference's parts name, checked: its kind approved, its namespace the tenant's,
    /// a renamed name the tenant's, a public target published.
    fn target(&mut self, rule: &RefRule, parts: &Parts<'_>) -> Result<()> {
        let Parts {
            fields,
            name,
            namespace,
            name_path,
            ns_path,
        } = *parts;
        let target = rule.target(fields);
        let approved = target
            .as_ref()
            .and_then(|(group, kind)| match rule.produced {
                true => self.policy.produced(group, kind),
                false => self.policy.resource(group, kind),
            });
        // In a copy placed in the operator's namespace, a name without a namespace is looked
        // up there: the operator's own object, unless the target is cluster-scoped or itself
        // placed (renamed into the tenant's prefix).
        if let Some(fixed) = self.placed {
            let cluster = approved.is_some_and(|r| r.scope == Scope::Cluster);
            let placed = approved.is_some_and(|r| r.placement.is_some());
            if namespace.is_empty() && !name.is_empty() && !cluster && !placed {
                return Err(super::placed_unqualified(
                    name_path,
                    &format!("{name:?} without a namespace"),
                    fixed,
                ));
            }
        }
        if let Some(r) = approved.filter(|r| r.direction == Direction::FromSuper) {
            return self.public_reference(r, namespace, name, ns_path, name_path);
        }
        if let Some(named) = target.filter(|_| approved.is_some_and(|r| r.both_ways)) {
            if self.both_ways(named, approved, parts)? {
                return Ok(());
            }
        }
        if !namespace.is_empty() {
            self.tenant_namespace(namespace, ns_path)?;
        }
        if name.is_empty() {
            return Ok(());
        }
        if let Some(why) = dns_subdomain_problem(name) {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("{name_path}: {name:?} is not a valid object name: {why}"),
            ));
        }
        self.named(rule, (target, approved), parts)
    }

    /// A reference to `(group, kind)`, a kind approved both ways: the tenant's own object, or
    /// (live) a public object the tenant holds a copy of, named unchanged (`true`).
    fn both_ways(
        &mut self,
        (group, kind): (&str, &str),
        approved: Option<&Resource>,
        parts: &Parts<'_>,
    ) -> Result<bool> {
        let Parts {
            name,
            namespace,
            name_path,
            ..
        } = *parts;
        // A kind approved both ways: the tenant's own object, or (live) a public object
        // the tenant holds a copy of, named unchanged.
        let own_scope = approved.is_some_and(|r| r.scope == Scope::Cluster);
        let own = (namespace.is_empty() || self.names.in_tenant_space(namespace))
            && (!own_scope || name.is_empty() || self.names.in_tenant_space(name));
        let public_ns = match self.policy.resource_in(group, kind, Direction::FromSuper) {
            Some(r) if r.scope == Scope::Cluster => "",
            _ => namespace,
        };
        let public = !name.is_empty()
            && self.published.is_some_and(|p| {
                p.tenant_copy(group, kind, public_ns, name)
                    && p.published(group, kind, public_ns, name)
            });
        if !own && !public {
            return Err(self.refuse(format!(
                "{name_path}: {:?} names neither one of tenant {}'s {kind} objects nor a public {kind} it holds a copy of",
                slash(namespace, name),
                self.names.tenant()
            )));
        }
        Ok(public)
    }

    /// The name a reference gives, against the kind it names (`approved`, if the policy
    /// syncs `target`).
    fn named(
        &mut self,
        rule: &RefRule,
        (target, approved): (Option<(&str, &str)>, Option<&Resource>),
        parts: &Parts<'_>,
    ) -> Result<()> {
        let Parts {
            name,
            namespace,
            name_path,
            ns_path,
            ..
        } = *parts;
        match approved {
            // Copies of a placed kind share the operator's namespace: a reference names one of
            // this tenant's (`<tenant>-<namespace>-<name>`), and no namespace.
            Some(r) if r.placement.is_some() && r.direction == Direction::ToSuper => {
                if !namespace.is_empty() {
                    return Err(self.refuse(format!(
                        "{ns_path}: a reference to {} (placed in the operator's namespace) names no namespace",
                        r.group_kind
                    )));
                }
                if !self.names.in_tenant_space(name) {
                    return Err(self.refuse(format!(
                        "{name_path}: {name:?} is not one of tenant {}'s {} (their copies are named {}-<namespace>-<name>)",
                        self.names.tenant(),
                        r.group_kind,
                        self.names.tenant()
                    )));
                }
                Ok(())
            }
            Some(r) if r.scope == Scope::Cluster && !self.names.in_tenant_space(name) => {
                Err(self.refuse(format!(
                    "{name_path}: {name:?} is not one of tenant {}'s {} (cluster-scoped tenant objects are named {}-<name> in the super cluster)",
                    self.names.tenant(),
                    r.group_kind,
                    self.names.tenant()
                )))
            }
            Some(_) => Ok(()),
            None if rule.passthrough => Ok(()),
            None => Err(Refusal::new(
                Reason::UnapprovedReference,
                match target {
                    Some((group, kind)) => format!(
                        "{name_path} refers to {}, a kind the policy does not sync",
                        if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") }
                    ),
                    None => format!("{name_path}: cannot tell which kind it refers to"),
                },
            )),
        }
    }

    /// A reference to a public (fromSuper) object passes unchanged, so it must name a
    /// published object: checked live, and offline as far as the name alone allows.
    pub(super) fn public_reference(
        &mut self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        ns_path: &Path<'_>,
        name_path: &Path<'_>,
    ) -> Result<()> {
        if name.is_empty() && namespace.is_empty() {
            return Ok(());
        }
        if !namespace.is_empty() {
            if let Some(why) = dns_label_problem(namespace) {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{ns_path}: {namespace:?} is not a namespace name: {why}"),
                ));
            }
            if is_system_namespace(namespace) {
                return Err(Refusal::new(
                    Reason::UnapprovedReference,
                    format!(
                        "{ns_path}: {namespace:?} is a Kubernetes system namespace; a public {} is never published there",
                        resource.group_kind
                    ),
                ));
            }
        }
        let namespace = match resource.scope {
            Scope::Namespaced => namespace,
            // A namespace beside a cluster-scoped target is mapped like any: the tenant's.
            Scope::Cluster if namespace.is_empty() => "",
            Scope::Cluster => {
                self.tenant_namespace(namespace, ns_path)?;
                ""
            }
        };
        match self.published.filter(|p| p.live()) {
            Some(p) => {
                let gk = &resource.group_kind;
                if p.published(&gk.group, &gk.kind, namespace, name) {
                    Ok(())
                } else {
                    Err(Refusal::new(
                        Reason::UnapprovedReference,
                        format!(
                            "{name_path} refers to {} {:?}, which the super cluster does not publish",
                            resource.group_kind,
                            slash(namespace, name)
                        ),
                    ))
                }
            }
            None => {
                let Some(unverified) = self.unverified.as_mut() else {
                    return Ok(());
                };
                unverified.push(format!(
                    "{name_path}: {} {:?} must be published in the super cluster (checked live, not offline)",
                    resource.group_kind,
                    slash(namespace, name)
                ));
                Ok(())
            }
        }
    }
}
