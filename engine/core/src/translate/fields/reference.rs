//! References: what they point at, whether the policy lets them, their renamed names and
//! mapped namespaces.

use serde_json::{Map, Value};

use super::{Fields, Way};
use crate::naming::dns_subdomain_problem;
use crate::policy::{Direction, Scope};
use crate::schema::{Annotated, Node, RefFormat, RefRule, Rule};
use crate::translate::path::Path;
use crate::translate::{Change, Reason, Reference, Refusal, Result};

/// The object a reference names: its group, kind and name.
#[derive(Clone, Copy)]
pub(super) struct Named<'a> {
    group: &'a str,
    kind: &'a str,
    name: &'a str,
}

/// What to rewrite in a reference.
pub(super) struct Decision {
    renamed: Option<String>,
    map_namespace: bool,
}

impl Fields<'_> {
    /// A string reference that is absent (or null) still has its sibling namespace field
    /// mapped: the field holds a namespace whether or not the name beside it is set.
    pub(super) fn absent_reference(
        &mut self,
        node: &Node,
        map: &mut Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        for annotated in &node.rules {
            if let Rule::Ref(rule) = &annotated.rule {
                let public = rule
                    .target(Some(map))
                    .and_then(|(group, kind)| self.policy.resource(group, kind))
                    .is_some_and(|r| {
                        r.direction == Direction::FromSuper && r.scope == Scope::Namespaced
                    });
                if let (false, Some(key)) = (public, rule.sibling_namespace()) {
                    self.reference_namespace(annotated, key, map, path)?;
                }
            }
        }
        Ok(())
    }

    /// Whether a reference to a kind approved both ways names a public copy in the tenant;
    /// offline that cannot be known, and the explanation says so.
    pub(super) fn public_copy_named(
        &mut self,
        target: Named<'_>,
        fields: Option<&Map<String, Value>>,
        ns_key: Option<&str>,
        annotated: &Annotated,
        name_path: &Path<'_>,
    ) -> bool {
        let Named { group, kind, name } = target;
        // A namespaced public object can be named unchanged only with its namespace: without
        // one, the reference resolves in the referrer's super namespace, the tenant's own.
        let namespace = match self.policy.resource_in(group, kind, Direction::FromSuper) {
            Some(r) if r.scope == Scope::Cluster => "",
            _ => match ns_key
                .and_then(|key| fields?.get(key)?.as_str())
                .filter(|ns| !ns.is_empty())
            {
                Some(ns) => ns,
                None => return false,
            },
        };
        match self.published.filter(|p| p.live()) {
            Some(p) => p.tenant_copy(group, kind, namespace, name),
            None => {
                if let Some(changes) = self.changes.as_deref_mut() {
                    changes.push(Change {
                        path: String::new(),
                        before: None,
                        after: None,
                        rule: format!(
                            "{name_path}: {kind} is approved both ways; mapped as the tenant's own object (live, a reference to a public copy in the tenant passes unchanged) [{}]",
                            annotated.origin
                        ),
                    });
                }
                false
            }
        }
    }

    pub(super) fn reference(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        value: &mut Value,
        siblings: Option<&mut Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        // On a string the string is the name and the *Field keys name siblings; on an object
        // they name the object's own fields.
        match value {
            Value::Null => Ok(()),
            Value::String(_) if rule.format == RefFormat::NamespacedName => {
                self.namespaced_name(annotated, rule, value, path)
            }
            Value::String(name) => {
                let name = name.clone();
                let ns_key = rule.namespace_key(false);
                let decision =
                    self.decide(annotated, rule, &name, path, siblings.as_deref(), ns_key)?;
                if let Some(new_name) = decision.renamed {
                    *value = Value::String(new_name);
                }
                if let (true, Some(siblings), Some(key)) =
                    (decision.map_namespace, siblings, ns_key)
                {
                    self.reference_namespace(annotated, key, siblings, &path.parent())?;
                }
                Ok(())
            }
            Value::Object(fields) => {
                let name_path = path.key(&rule.name_field);
                let name = match fields.get(&rule.name_field) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => {
                        return Err(Refusal::new(
                            Reason::Invalid,
                            format!("{name_path}: expected a name string, found {other}"),
                        ))
                    }
                };
                let ns_key = rule.namespace_key(true);
                let decision =
                    self.decide(annotated, rule, &name, &name_path, Some(fields), ns_key)?;
                if let Some(new_name) = decision.renamed {
                    fields.insert(rule.name_field.clone(), Value::String(new_name));
                }
                if let (true, Some(key)) = (decision.map_namespace, ns_key) {
                    self.reference_namespace(annotated, key, fields, path)?;
                }
                // A field rule does not know whether the reference is a string (its namespace
                // beside it) or an object: the sibling is a namespace either way, and so is
                // the object's own `namespace` (a controller reads it whatever the rule says).
                let typeless = !rule.on_string && !rule.on_object;
                let other_key = rule
                    .namespace_field
                    .as_deref()
                    .is_some_and(|k| k != "namespace");
                if decision.map_namespace && typeless && other_key {
                    self.reference_namespace(annotated, "namespace", fields, path)?;
                }
                if let (true, Some(siblings), Some(key)) = (
                    decision.map_namespace,
                    siblings,
                    rule.sibling_namespace().filter(|_| !rule.on_string),
                ) {
                    self.reference_namespace(annotated, key, siblings, &path.parent())?;
                }
                Ok(())
            }
            other => Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: expected a reference (a name or an object), found {other}"),
            )),
        }
    }

    /// A `namespacedName` reference (`name` or `namespace/name`): read as the reference
    /// object `{name, namespace}`, written back as text; explained as one change.
    fn namespaced_name(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Value::String(text) = value else {
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        let mut object = crate::translate::namespaced_name_object(text, path)?;
        let before = text.clone();
        // The parts' own explanations are replaced by one for the whole value.
        let changes = self.changes.take();
        let result = self.reference(annotated, &rule.as_object(), &mut object, None, path);
        self.changes = changes;
        result?;
        let part = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
        let after = match part("namespace") {
            "" => part("name").to_string(),
            ns => format!("{ns}/{}", part("name")),
        };
        if after != before {
            self.record(
                path,
                Some(Value::String(before)),
                Some(Value::String(after.clone())),
                annotated,
            );
            *value = Value::String(after);
        }
        Ok(())
    }

    /// Maps or unmaps the namespace field `key` of a reference, found in `fields`.
    pub(super) fn reference_namespace(
        &mut self,
        annotated: &Annotated,
        key: &str,
        fields: &mut Map<String, Value>,
        parent: &Path<'_>,
    ) -> Result<()> {
        let Some(ns) = fields.get_mut(key) else {
            return Ok(());
        };
        self.map_namespace(annotated, ns, &parent.key(key))
    }

    /// Checks a reference's target against the policy and says what to rewrite: the new name
    /// (cluster-scoped toSuper targets) and whether to map the namespace. Records the
    /// reference and the rename. A reference with an empty name names no object, but a
    /// namespace beside it is still mapped: it must never point outside the tenant.
    pub(super) fn decide(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        name: &str,
        name_path: &Path<'_>,
        fields: Option<&Map<String, Value>>,
        ns_key: Option<&str>,
    ) -> Result<Decision> {
        let target = rule.target(fields);
        // A produced target is the object a super-side controller makes for the referrer:
        // named alike in the referrer's super namespace.
        let approved = target
            .as_ref()
            .and_then(|(group, kind)| match rule.produced {
                true => self.policy.produced(group, kind),
                false => self.policy.resource(group, kind),
            });
        if name.is_empty() {
            let from_super = approved.is_some_and(|r| r.direction == Direction::FromSuper);
            return Ok(Decision {
                renamed: None,
                map_namespace: !from_super,
            });
        }
        if self.way == Way::Down {
            if let Some(why) = dns_subdomain_problem(name) {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{name_path}: {name:?} is not a valid Kubernetes object name: {why}"),
                ));
            }
        }
        let Some((group, kind)) = target else {
            return Err(Refusal::new(
                Reason::UnapprovedReference,
                format!(
                    "{name_path}: cannot tell which kind it refers to ({} is empty and the annotation names no kind)",
                    rule.kind_field.as_deref().unwrap_or("kindField")
                ),
            ));
        };
        let namespace = ns_key.and_then(|key| fields?.get(key)?.as_str());
        self.note(Named { group, kind, name }, namespace, rule.produced);
        // A kind approved both ways: the tenant's own object, unless the tenant object it
        // names is a copy of a public one (known live), which it then names unchanged.
        let copy_of_public = self.way == Way::Down
            && approved.is_some_and(|r| r.both_ways)
            && self.public_copy_named(
                Named { group, kind, name },
                fields,
                ns_key,
                annotated,
                name_path,
            );
        let (rename, map_namespace) = match approved {
            Some(r) if r.direction == Direction::Produced => (false, true),
            // A fromSuper target is the shared public object: the reference passes unchanged.
            // A cluster-scoped one has no namespace: one written beside it is the tenant's
            // (an operator may still read it), mapped like any.
            Some(r) if r.direction == Direction::FromSuper => (false, r.scope == Scope::Cluster),
            Some(_) if copy_of_public => (false, false),
            // A placed kind's copies share the operator's namespace: renamed below, and a
            // namespace beside the name has no meaning there.
            Some(r) if r.placement.is_some() => {
                let named = ns_key
                    .and_then(|key| fields?.get(key)?.as_str())
                    .is_some_and(|ns| !ns.is_empty());
                if named && self.way == Way::Down {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!(
                            "{name_path}: {} copies are placed in the operator's namespace; a reference to one names no namespace",
                            r.group_kind
                        ),
                    ));
                }
                (true, false)
            }
            Some(r) => (r.scope == Scope::Cluster, r.scope == Scope::Namespaced),
            // Passthrough keeps the name, but a namespace still maps: a tenant must never point
            // outside its own namespaces.
            None if rule.passthrough => (false, true),
            None if self.way == Way::Up => (false, false),
            None => {
                let shown = if group.is_empty() {
                    kind.to_string()
                } else {
                    format!("{kind}.{group}")
                };
                let why = match rule.produced {
                    true => format!("the rule ({}) says it is produced in the super cluster, and the policy does not approve {shown} produced: true", annotated.origin),
                    false => format!("a kind the policy does not sync and the annotation ({}) does not mark passthrough", annotated.origin),
                };
                return Err(Refusal::new(
                    Reason::UnapprovedReference,
                    format!("{name_path} refers to {shown} {name:?}, {why}"),
                ));
            }
        };
        // Up, every namespace a reference holds is namespace-bearing: the tenant's unmapped,
        // a published object's kept (live), any other redacted.
        let map_namespace = map_namespace || self.way == Way::Up;
        let renamed = match rename {
            true => self.renamed(approved, Named { group, kind, name }, name_path, annotated)?,
            false => None,
        };
        Ok(Decision {
            renamed,
            map_namespace,
        })
    }

    /// Going down, records the reference to `named` (in `namespace`, if it names one).
    fn note(&mut self, named: Named<'_>, namespace: Option<&str>, produced: bool) {
        if self.way != Way::Down {
            return;
        }
        if let Some(references) = self.references.as_deref_mut() {
            references.push(Reference {
                group: named.group.to_string(),
                kind: named.kind.to_string(),
                namespace: namespace.unwrap_or_default().to_string(),
                name: named.name.to_string(),
                produced,
            });
        }
    }

    /// The new name of a reference to `named`, a renamed kind (cluster-scoped toSuper, or
    /// placed in the operator's namespace), recorded; `None` when it stays.
    fn renamed(
        &mut self,
        approved: Option<&crate::policy::Resource>,
        Named { kind, name, .. }: Named<'_>,
        name_path: &Path<'_>,
        annotated: &Annotated,
    ) -> Result<Option<String>> {
        let mut renamed = None;
        let placed = approved.is_some_and(|r| r.placement.is_some());
        let tenant = self.names.tenant().as_str();
        if placed && self.way == Way::Down && self.own_namespace.is_empty() {
            return Err(Refusal::new(
                Reason::Invalid,
                format!(
                    "{name_path}: {kind} copies are named after the tenant namespace of the object that names them, and this object has none"
                ),
            ));
        }
        let new_name = match (self.way, placed) {
            (Way::Down, true) => Some(crate::naming::placed(tenant, &self.own_namespace, name)),
            (Way::Up, true) => name
                .strip_prefix(&format!("{tenant}-{}-", self.own_namespace))
                .filter(|n| crate::naming::placed(tenant, &self.own_namespace, n) == name)
                .map(str::to_string),
            (Way::Down, false) => Some(self.names.to_super(name)),
            (Way::Up, false) => self.names.to_tenant(name),
        };
        if let Some(new_name) = new_name.filter(|n| n != name) {
            self.record(
                name_path,
                Some(Value::String(name.to_string())),
                Some(Value::String(new_name.clone())),
                annotated,
            );
            renamed = Some(new_name);
        }
        Ok(renamed)
    }
}
