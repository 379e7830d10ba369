//! Applies a schema [`Plan`](crate::schema::Plan) to an object: namespaces, references and
//! selectors rewritten, tenant-private and super-owned fields removed on the way down; the
//! exact inverse on the way up.

use serde_json::{Map, Value};

use super::path::Path;
use super::{Change, Published, Reason, Reference, Refusal, Result};
use crate::naming::{dns_label_problem, NameMap};
use crate::policy::Policy;
use crate::schema::{Annotated, Node, Rule};

/// Which way the object is going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Tenant to super.
    Down,
    /// Super to tenant.
    Up,
}

/// The label every namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One pass over an object.
pub struct Fields<'a> {
    policy: &'a Policy,
    names: &'a NameMap,
    way: Way,
    changes: Option<&'a mut Vec<Change>>,
    references: Option<&'a mut Vec<Reference>>,
    published: Option<&'a dyn Published>,
    namespaces: &'a [String],
    /// Namespaces redacted so far, in order: the n-th is shown as `redacted-<n>`.
    redacted: Vec<(String, String)>,
    /// The tenant namespace of the object itself (references to a placed kind name their
    /// target's copy by it).
    own_namespace: String,
}

impl<'a> Fields<'a> {
    /// A pass; `changes` collects explanations, `references` collects what the object refers to.
    pub fn new(
        policy: &'a Policy,
        names: &'a NameMap,
        way: Way,
        changes: Option<&'a mut Vec<Change>>,
        references: Option<&'a mut Vec<Reference>>,
    ) -> Self {
        Self {
            policy,
            names,
            way,
            changes,
            references,
            published: None,
            namespaces: &[],
            redacted: Vec::new(),
            own_namespace: String::new(),
        }
    }

    /// The tenant namespace of the object being translated.
    pub fn with_own_namespace(mut self, namespace: &str) -> Self {
        self.own_namespace = namespace.to_string();
        self
    }

    /// What a tenant sees in place of a namespace that is not its own: `redacted-<n>`, numbered
    /// by first appearance in the object, so distinct values stay distinct (a list keyed by
    /// namespace keeps its keys unique), nothing of the name shows or can be confirmed by
    /// guessing, the value is still a valid namespace name (schemas constrain such fields),
    /// and none of the tenant's own namespaces is taken. The same object gives the same
    /// values, so nothing is rewritten when nothing changed.
    fn redact(&mut self, namespace: &str) -> String {
        if let Some((_, shown)) = self.redacted.iter().find(|(ns, _)| ns == namespace) {
            return shown.clone();
        }
        let mut n = self.redacted.len() + 1;
        let shown = loop {
            let candidate = format!("redacted-{n}");
            let taken = self.namespaces.contains(&candidate)
                || self.redacted.iter().any(|(_, s)| *s == candidate);
            if !taken {
                break candidate;
            }
            n += 1;
        };
        self.redacted.push((namespace.to_string(), shown.clone()));
        shown
    }

    /// Up, the tenant's namespaces, whose super names free text may carry.
    pub fn with_namespaces(mut self, namespaces: &'a [String]) -> Self {
        self.namespaces = namespaces;
        self
    }

    /// Up, keeps the namespaces of published objects (live) instead of redacting them.
    pub fn with_published(mut self, published: Option<&'a dyn Published>) -> Self {
        self.published = published;
        self
    }

    fn record(
        &mut self,
        path: &Path<'_>,
        before: Option<Value>,
        after: Option<Value>,
        rule: &Annotated,
    ) {
        if let Some(changes) = self.changes.as_deref_mut() {
            changes.push(Change {
                path: path.to_string(),
                before,
                after,
                rule: rule.describe(),
            });
        }
    }

    /// Applies the rules below `node` to `value`, which is at `path`.
    pub fn apply(&mut self, node: &Node, value: &mut Value, path: &Path<'_>) -> Result<()> {
        match value {
            Value::Object(map) => {
                for (key, child) in &node.fields {
                    // A null reference is no reference, like an absent one.
                    match map.get(key) {
                        None => {
                            self.absent_reference(child, map, path)?;
                            self.absent_required(child, map, key, path)?;
                            continue;
                        }
                        Some(Value::Null) => {
                            self.absent_reference(child, map, path)?;
                            if names::requires_below(child) && self.way == Way::Down {
                                map.remove(key);
                                self.absent_required(child, map, key, path)?;
                                continue;
                            }
                        }
                        Some(_) => {}
                    }
                    self.field(child, map, key, &path.key(key))?;
                }
                if let Some(values) = &node.values {
                    let keys: Vec<String> = map
                        .keys()
                        .filter(|k| !node.fields.contains_key(*k))
                        .cloned()
                        .collect();
                    for key in keys {
                        self.field(values, map, &key, &path.key(&key))?;
                    }
                }
            }
            Value::Array(items) => {
                for (i, element) in items.iter_mut().enumerate() {
                    let Some(item) = node.element(element) else {
                        continue;
                    };
                    let element_path = path.index(i);
                    if !item.kept(element) {
                        let empty = element.is_null() || element.as_str() == Some("");
                        if empty && item.has(Rule::bears_name) {
                            return Err(Refusal::new(
                                Reason::Invalid,
                                format!("{element_path}: \"\" in a list of names means every namespace or host to some operators; leave it out"),
                            ));
                        }
                        for rule in &item.rules {
                            self.rule(rule, &item, element, None, &element_path)?;
                        }
                    }
                    self.apply(&item, element, &element_path)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies `node`'s rules to `map[key]`, then descends into it.
    fn field(
        &mut self,
        node: &Node,
        map: &mut Map<String, Value>,
        key: &str,
        path: &Path<'_>,
    ) -> Result<()> {
        if self.way == Way::Down {
            if let Some(rule) = node
                .rules
                .iter()
                .find(|a| matches!(a.rule, Rule::Drop | Rule::OwnerSuper))
            {
                let removed = map.remove(key);
                self.record(path, removed, None, rule);
                return Ok(());
            }
        }
        let kept = map.get(key).is_some_and(|v| node.kept(v));
        for rule in node.rules.iter().filter(|_| !kept) {
            // Take the value out (leaving null in its place, so the field keeps its position)
            // so that its siblings can be read and written alongside it.
            let Some(slot) = map.get_mut(key) else { break };
            let mut value = std::mem::take(slot);
            let result = self.rule(rule, node, &mut value, Some(map), path);
            if let Some(slot) = map.get_mut(key) {
                *slot = value;
            }
            result?;
        }
        if let Some(value) = map.get_mut(key) {
            self.apply(node, value, path)?;
        }
        Ok(())
    }

    fn rule(
        &mut self,
        rule: &Annotated,
        node: &Node,
        value: &mut Value,
        siblings: Option<&mut Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        match &rule.rule {
            Rule::Namespace => self.map_namespace(rule, value, path),
            Rule::Pattern => self.map_pattern(rule, value, path),
            Rule::Host(hosts) => self.map_host(rule, *hosts, value, path),
            Rule::Identity => self.map_identity(rule, value, path),
            Rule::Qualified if self.way == Way::Down => names::qualified(value, path),
            Rule::Qualified => Ok(()),
            Rule::Required(empty) => self.required(rule, *empty, node, value, path),
            Rule::Forbid(forbid) if self.way == Way::Down => self.forbid(forbid, value, path),
            Rule::SecretTemplate => self.secret_template(value, path),
            Rule::Keep(_) | Rule::Forbid(_) => Ok(()),
            Rule::Selector | Rule::PublishedSelector => self.selector(rule, value, path),
            Rule::NamespaceSelector => {
                self.selector(rule, value, path)?;
                self.selected_namespaces(rule, value, path)
            }
            Rule::Ref(r) => self.reference(rule, r, value, siblings, path),
            Rule::Text => self.text(rule, value, path),
            Rule::Drop | Rule::OwnerSuper => Ok(()),
        }
    }

    /// Maps (down) or unmaps (up) one namespace string; `""` and null are left alone.
    fn map_namespace(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let ns = match value {
            Value::Null => return Ok(()),
            Value::String(s) if s.is_empty() => return Ok(()),
            Value::String(s) => s.clone(),
            other => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{path}: expected a namespace string, found {other}"),
                ))
            }
        };
        let mapped = match self.way {
            Way::Down => {
                if let Some(why) = dns_label_problem(&ns) {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!("{path}: {ns:?} is not a Kubernetes namespace name: {why}"),
                    ));
                }
                Some(self.names.to_super(&ns))
            }
            // A value that is not one of this tenant's namespaces is redacted: it is another
            // tenant's or the platform's, never to be shown, and never to be collapsed onto a
            // tenant name (two list-map keys would collide). The namespace of a published
            // object passes: the tenant sees that object under the same name.
            Way::Up => match self
                .tenant_namespace(&ns)
                .filter(|t| dns_label_problem(t).is_none())
            {
                Some(tenant_ns) => Some(tenant_ns),
                None if self.published.is_some_and(|p| p.public_namespace(&ns)) => None,
                None => Some(self.redact(&ns)),
            },
        };
        if let Some(mapped) = mapped {
            if mapped != ns {
                self.record(
                    path,
                    Some(Value::String(ns)),
                    Some(Value::String(mapped.clone())),
                    rule,
                );
                *value = Value::String(mapped);
            }
        }
        Ok(())
    }
}

pub(crate) mod names;
mod reference;
pub(super) mod selector;
