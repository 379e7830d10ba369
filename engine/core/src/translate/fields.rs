//! Applies a schema [`Plan`](crate::schema::Plan) to an object: namespaces, references and
//! selectors rewritten, tenant-private and super-owned fields removed on the way down; the
//! exact inverse on the way up.

use serde_json::{Map, Value};

use super::path::Path;
use super::{Change, Reason, Reference, Refusal, Result, LABEL_TENANT};
use crate::naming::NameMap;
use crate::policy::{Direction, Policy, Scope};
use crate::schema::load::group_of;
use crate::schema::{Annotated, Node, RefRule, Rule};

/// Which way the object is going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Tenant to super.
    Down,
    /// Super to tenant.
    Up,
}

/// One pass over an object.
pub struct Fields<'a> {
    policy: &'a Policy,
    names: &'a NameMap,
    way: Way,
    changes: Option<&'a mut Vec<Change>>,
    references: Option<&'a mut Vec<Reference>>,
}

/// What to rewrite in a reference.
struct Decision {
    renamed: Option<String>,
    map_namespace: bool,
}

/// What a reference's annotation and sibling fields say about its target.
struct Target {
    group: String,
    kind: String,
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
        }
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
                rule: format!("{} ({})", rule.rule.name(), rule.origin),
            });
        }
    }

    /// Applies the rules below `node` to `value`, which is at `path`.
    pub fn apply(&mut self, node: &Node, value: &mut Value, path: &Path<'_>) -> Result<()> {
        match value {
            Value::Object(map) => {
                for (key, child) in &node.fields {
                    if !map.contains_key(key) {
                        continue;
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
                if let Some(item) = &node.items {
                    for (i, element) in items.iter_mut().enumerate() {
                        let element_path = path.index(i);
                        for rule in &item.rules {
                            self.rule(rule, element, None, &element_path)?;
                        }
                        self.apply(item, element, &element_path)?;
                    }
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
        for rule in &node.rules {
            // Take the value out (leaving null in its place, so the field keeps its position)
            // so that its siblings can be read and written alongside it.
            let Some(slot) = map.get_mut(key) else { break };
            let mut value = std::mem::take(slot);
            let result = self.rule(rule, &mut value, Some(map), path);
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
        value: &mut Value,
        siblings: Option<&mut Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        match &rule.rule {
            Rule::Namespace => self.map_namespace(rule, value, path),
            Rule::Selector => self.selector(rule, value, path),
            Rule::Ref(r) => self.reference(rule, r, value, siblings, path),
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
            Way::Down => Some(self.names.to_super(&ns)),
            // A value that is not one of this tenant's namespaces is left as it is: it cannot
            // be unmapped, and guessing would point the tenant at the wrong object.
            Way::Up => self.names.to_tenant(&ns),
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

    fn selector(&mut self, rule: &Annotated, value: &mut Value, path: &Path<'_>) -> Result<()> {
        let tenant = self.names.tenant().as_str().to_string();
        let selector = match value {
            Value::Null => return Ok(()),
            Value::Object(m) => m,
            other => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{path}: expected a LabelSelector object, found {other}"),
                ))
            }
        };
        let match_labels = path.key("matchLabels");
        let label_path = match_labels.key(LABEL_TENANT);
        match self.way {
            Way::Down => {
                let labels = selector
                    .entry("matchLabels")
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(labels) = labels else {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!("{path}.matchLabels: expected an object"),
                    ));
                };
                let before = labels.insert(LABEL_TENANT.into(), Value::String(tenant.clone()));
                self.record(&label_path, before, Some(Value::String(tenant)), rule);
            }
            Way::Up => {
                let Some(Value::Object(labels)) = selector.get_mut("matchLabels") else {
                    return Ok(());
                };
                if labels.get(LABEL_TENANT).and_then(Value::as_str) == Some(tenant.as_str()) {
                    let before = labels.remove(LABEL_TENANT);
                    if labels.is_empty() {
                        selector.remove("matchLabels");
                    }
                    self.record(&label_path, before, None, rule);
                }
            }
        }
        Ok(())
    }

    fn reference(
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
            Value::String(name) => {
                let name = name.clone();
                let parent = path.parent();
                let renamed = self.decide(annotated, rule, &name, path, siblings.as_deref())?;
                let Some(decision) = renamed else {
                    return Ok(());
                };
                if let Some(new_name) = decision.renamed {
                    *value = Value::String(new_name);
                }
                if decision.map_namespace {
                    if let Some(siblings) = siblings {
                        self.reference_namespace(annotated, rule, siblings, &parent)?;
                    }
                }
                Ok(())
            }
            Value::Object(fields) => {
                let name = fields
                    .get(&rule.name_field)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let name_path = path.key(&rule.name_field);
                let Some(decision) =
                    self.decide(annotated, rule, &name, &name_path, Some(fields))?
                else {
                    return Ok(());
                };
                if let Some(new_name) = decision.renamed {
                    fields.insert(rule.name_field.clone(), Value::String(new_name));
                }
                if decision.map_namespace {
                    self.reference_namespace(annotated, rule, fields, path)?;
                }
                Ok(())
            }
            other => Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: expected a reference (a name or an object), found {other}"),
            )),
        }
    }

    /// Maps or unmaps the namespace field of a reference, found in `fields`.
    fn reference_namespace(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        fields: &mut Map<String, Value>,
        parent: &Path<'_>,
    ) -> Result<()> {
        let Some(key) = &rule.namespace_field else {
            return Ok(());
        };
        let Some(ns) = fields.get_mut(key) else {
            return Ok(());
        };
        self.map_namespace(annotated, ns, &parent.key(key))
    }

    /// Checks a reference's target against the policy and says what to rewrite: the new name
    /// (cluster-scoped toSuper targets) and whether to map the namespace. `None` when there is
    /// no reference (empty name). Records the reference and the rename.
    fn decide(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        name: &str,
        name_path: &Path<'_>,
        fields: Option<&Map<String, Value>>,
    ) -> Result<Option<Decision>> {
        if name.is_empty() {
            return Ok(None);
        }
        let read = |key: &Option<String>| -> Option<String> {
            let key = key.as_ref()?;
            fields?
                .get(key)?
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let target = self.target(
            rule,
            read(&rule.api_version_field),
            read(&rule.kind_field),
            name_path,
        )?;
        if self.way == Way::Down {
            if let Some(references) = self.references.as_deref_mut() {
                references.push(Reference {
                    path: name_path.to_string(),
                    group: target.group.clone(),
                    kind: target.kind.clone(),
                    namespace: read(&rule.namespace_field).unwrap_or_default(),
                    name: name.to_string(),
                });
            }
        }
        let approved = self.policy.resource(&target.group, &target.kind);
        let (rename, map_namespace) = match approved {
            // A fromSuper target is the shared public object: the reference passes unchanged.
            Some(r) if r.direction == Direction::FromSuper => (false, false),
            Some(r) => (r.scope == Scope::Cluster, r.scope == Scope::Namespaced),
            // Passthrough keeps the name, but a namespace still maps: a tenant must never point
            // outside its own namespaces.
            None if rule.passthrough => (false, true),
            None if self.way == Way::Up => (false, false),
            None => {
                let shown = if target.group.is_empty() {
                    target.kind.clone()
                } else {
                    format!("{}.{}", target.kind, target.group)
                };
                return Err(Refusal::new(
                    Reason::UnapprovedReference,
                    format!(
                        "{name_path} refers to {shown} {name:?}, a kind the policy does not sync and the annotation ({}) does not mark passthrough",
                        annotated.origin
                    ),
                ));
            }
        };
        let mut renamed = None;
        if rename {
            let new_name = match self.way {
                Way::Down => Some(self.names.to_super(name)),
                Way::Up => self.names.to_tenant(name),
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
        }
        Ok(Some(Decision {
            renamed,
            map_namespace,
        }))
    }

    /// The group and kind a reference points at: the fields first, the annotation's fixed
    /// keys when the fields are empty.
    fn target(
        &self,
        rule: &RefRule,
        api_field: Option<String>,
        kind_field: Option<String>,
        path: &Path<'_>,
    ) -> Result<Target> {
        let kind = kind_field.or_else(|| rule.kind.clone()).ok_or_else(|| {
            Refusal::new(
                Reason::UnapprovedReference,
                format!(
                    "{path}: cannot tell which kind it refers to ({} is empty and the annotation names no kind)",
                    rule.kind_field.as_deref().unwrap_or("kindField")
                ),
            )
        })?;
        let api = api_field
            .or_else(|| rule.api_version.clone())
            .unwrap_or_default();
        Ok(Target {
            group: group_of(&api).to_string(),
            kind,
        })
    }
}
