//! Applies a schema [`Plan`](crate::schema::Plan) to an object: namespaces, references and
//! selectors rewritten, tenant-private and super-owned fields removed on the way down; the
//! exact inverse on the way up.

use serde_json::{Map, Value};

use super::path::Path;
use super::{Change, Published, Reason, Reference, Refusal, Result, LABEL_TENANT};
use crate::naming::{dns_label_problem, dns_subdomain_problem, NameMap};
use crate::policy::{Direction, Policy, Scope};
use crate::schema::{Annotated, Node, RefRule, Rule};

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
}

/// What to rewrite in a reference.
struct Decision {
    renamed: Option<String>,
    map_namespace: bool,
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
        }
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
                rule: format!("{} ({})", rule.rule.name(), rule.origin),
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
                            continue;
                        }
                        Some(Value::Null) => self.absent_reference(child, map, path)?,
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

    /// A string reference that is absent (or null) still has its sibling namespace field
    /// mapped: the field holds a namespace whether or not the name beside it is set.
    fn absent_reference(
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
                    .is_some_and(|r| r.direction == Direction::FromSuper);
                if let (false, Some(key)) = (public, rule.sibling_namespace()) {
                    self.reference_namespace(annotated, key, map, path)?;
                }
            }
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
                .names
                .to_tenant(&ns)
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
                // ferry's scope never shows in a tenant, whoever's it is (a public object's
                // selector may scope to another tenant).
                if labels.contains_key(LABEL_TENANT) {
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

    /// Up, free text: every word that is one of this tenant's super namespaces becomes its
    /// tenant name; a word that is another tenant's super namespace (known live) is redacted.
    /// Words are runs of the characters of a namespace name, so `team-a-shop/orders` and
    /// `in team-a-shop.` are found, and a longer name that merely starts like one is not.
    fn text(&mut self, rule: &Annotated, value: &mut Value, path: &Path<'_>) -> Result<()> {
        let Value::String(text) = value else {
            return Ok(());
        };
        if self.way == Way::Down {
            return Ok(());
        }
        let is_word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(start) = rest.find(is_word) {
            out.push_str(&rest[..start]);
            let word_len = rest[start..]
                .find(|c| !is_word(c))
                .unwrap_or(rest.len() - start);
            let word = &rest[start..start + word_len];
            let tenant_name = self
                .namespaces
                .iter()
                .find(|ns| crate::naming::is_map_of(self.names.tenant().as_str(), ns, word));
            match tenant_name {
                Some(ns) => out.push_str(ns),
                None if self.published.is_some_and(|p| p.super_namespace(word)) => {
                    let shown = self.redact(word);
                    out.push_str(&shown)
                }
                None => out.push_str(word),
            }
            rest = &rest[start + word_len..];
        }
        out.push_str(rest);
        if out != *text {
            self.record(
                path,
                Some(Value::String(text.clone())),
                Some(Value::String(out.clone())),
                rule,
            );
            *text = out;
        }
        Ok(())
    }

    /// Whether a reference to a kind approved both ways names a public copy in the tenant;
    /// offline that cannot be known, and the explanation says so.
    #[allow(clippy::too_many_arguments)]
    fn public_copy_named(
        &mut self,
        group: &str,
        kind: &str,
        fields: Option<&Map<String, Value>>,
        ns_key: Option<&str>,
        name: &str,
        annotated: &Annotated,
        name_path: &Path<'_>,
    ) -> bool {
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
        match self.published {
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

    /// The namespace names a selector of namespaces names (`kubernetes.io/metadata.name` in
    /// `matchLabels` and in `matchExpressions` values), mapped like any namespace.
    fn selected_namespaces(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Value::Object(selector) = value else {
            return Ok(());
        };
        let labels_path = path.key("matchLabels");
        if let Some(Value::Object(labels)) = selector.get_mut("matchLabels") {
            if let Some(v) = labels.get_mut(NAMESPACE_NAME_LABEL) {
                self.map_namespace(rule, v, &labels_path.key(NAMESPACE_NAME_LABEL))?;
            }
        }
        let exprs_path = path.key("matchExpressions");
        if let Some(Value::Array(exprs)) = selector.get_mut("matchExpressions") {
            for (i, expr) in exprs.iter_mut().enumerate() {
                if expr.get("key").and_then(Value::as_str) != Some(NAMESPACE_NAME_LABEL) {
                    continue;
                }
                let expr_path = exprs_path.index(i);
                let values_path = expr_path.key("values");
                if let Some(Value::Array(values)) = expr.get_mut("values") {
                    for (j, v) in values.iter_mut().enumerate() {
                        self.map_namespace(rule, v, &values_path.index(j))?;
                    }
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
                Ok(())
            }
            other => Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: expected a reference (a name or an object), found {other}"),
            )),
        }
    }

    /// Maps or unmaps the namespace field `key` of a reference, found in `fields`.
    fn reference_namespace(
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
    fn decide(
        &mut self,
        annotated: &Annotated,
        rule: &RefRule,
        name: &str,
        name_path: &Path<'_>,
        fields: Option<&Map<String, Value>>,
        ns_key: Option<&str>,
    ) -> Result<Decision> {
        let target = rule.target(fields);
        let approved = target
            .as_ref()
            .and_then(|(group, kind)| self.policy.resource(group, kind));
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
        if self.way == Way::Down {
            if let Some(references) = self.references.as_deref_mut() {
                let namespace = ns_key
                    .and_then(|key| fields?.get(key)?.as_str())
                    .unwrap_or_default();
                references.push(Reference {
                    group: group.to_string(),
                    kind: kind.to_string(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                });
            }
        }
        // A kind approved both ways: the tenant's own object, unless the tenant object it
        // names is a copy of a public one (known live), which it then names unchanged.
        let copy_of_public = self.way == Way::Down
            && approved.is_some_and(|r| r.both_ways)
            && self.public_copy_named(group, kind, fields, ns_key, name, annotated, name_path);
        let (rename, map_namespace) = match approved {
            // A fromSuper target is the shared public object: the reference passes unchanged.
            Some(r) if r.direction == Direction::FromSuper => (false, false),
            Some(_) if copy_of_public => (false, false),
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
                return Err(Refusal::new(
                    Reason::UnapprovedReference,
                    format!(
                        "{name_path} refers to {shown} {name:?}, a kind the policy does not sync and the annotation ({}) does not mark passthrough",
                        annotated.origin
                    ),
                ));
            }
        };
        // Up, every namespace a reference holds is namespace-bearing: the tenant's unmapped,
        // a published object's kept (live), any other redacted.
        let map_namespace = map_namespace || self.way == Way::Up;
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
        Ok(Decision {
            renamed,
            map_namespace,
        })
    }
}
