//! The guard: the last check on every object ferry is about to write, whatever produced it
//! (metadata rules, schema rules, transforms). The rules that build an object try to keep the
//! tenant inside its namespaces; the guard proves the result does, and refuses it otherwise.
//!
//! ```text
//!  down:   super object ─▶ metadata (only name, namespace, labels, annotations; ferry's keys
//!          exactly as ferry sets them) ─▶ one walk along the plan: namespaces, references,
//!          selectors, shapes, removed fields, ferry.dev/ keys, numbers ─▶ write or refuse
//!  up:     tenant fragment ─▶ only apiVersion, kind, name, namespace, status and
//!          x-ferry-owner: super fields ─▶ write or refuse
//!  public: tenant copy ─▶ metadata as ferry sets it on a read-only copy ─▶ write or refuse
//! ```
//!
//! The walk follows the whole object once (ferry.dev/ keys may hide at any depth), reading
//! the compiled plan alongside, so it costs one pass and allocates nothing unless it refuses.

use crate::keys::{
    ANN_TENANT_NAME, ANN_TENANT_NAMESPACE, ANN_TENANT_UID, LABEL_TENANT, RESERVED_PREFIX,
};
use serde_json::{Map, Number, Value};

use super::fields::selector::shown;
use super::path::Path;
use super::{Reason, Refusal, Result};
use crate::naming::{
    dns_label_problem, dns_subdomain_problem, is_map_of, label_value_problem,
    qualified_name_problem, NameMap,
};
use crate::policy::{Direction, Policy, Resource, Scope};
use crate::schema::{Node, Rule};

/// What the super cluster publishes to tenants (the objects of fromSuper kinds that their
/// selector selects), so that a reference to a public kind can be checked live.
pub trait Published: Sync {
    /// Whether the super object `group`/`kind` `namespace`/`name` (`namespace` empty for a
    /// cluster-scoped kind) is published.
    fn published(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool;

    /// Whether `namespace` is a super namespace ferry made for some tenant (up, such a name in
    /// free text is redacted unless it is this tenant's).
    fn super_namespace(&self, namespace: &str) -> bool {
        let _ = namespace;
        false
    }

    /// Whether the tenant holds, at `namespace`/`name`, a copy of a public object of a kind
    /// approved both ways (a reference to it names the public object unchanged).
    fn tenant_copy(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let _ = (group, kind, namespace, name);
        false
    }

    /// Whether this knows the super cluster (live); offline, what only live can check is
    /// noted in explanations instead.
    fn live(&self) -> bool {
        true
    }

    /// Whether `namespace` holds a published object (its name is shown to tenants as is).
    fn public_namespace(&self, namespace: &str) -> bool {
        let _ = namespace;
        false
    }
}

/// The refusal of a value that, in a copy placed in the operator's namespace `fixed`, would
/// name the operator's own objects (a name without a namespace, a short host, `""`).
fn placed_unqualified(path: &Path<'_>, what: &str, fixed: &str) -> Refusal {
    Refusal::new(
        Reason::OutsideTenant,
        format!(
            "{path}: {what} resolves in the copy's namespace, the operator's {fixed:?} (placement), where it names the operator's own objects; name the tenant's namespace"
        ),
    )
}

/// Metadata keys a super copy may carry: everything else is set by the API server.
const DOWN_METADATA: &[&str] = &["name", "namespace", "labels", "annotations"];

/// The guard for one object of one tenant.
pub struct Guard<'a> {
    policy: &'a Policy,
    names: &'a NameMap,
    published: Option<&'a dyn Published>,
    /// The reason of a refusal that is not about a reference: `TransformFailed` when a
    /// transform had the last word, `Invalid` when the object came in that way.
    blame: Reason,
    /// References to public objects that could not be checked (offline), for `--explain`;
    /// `None` when not explaining.
    pub unverified: Option<Vec<String>>,
    /// The tenant's namespaces (tenant names): up, a namespace-bearing value is one of them.
    namespaces: &'a [String],
    /// Down, the operator's namespace the copy is placed in (`placement`): there a name
    /// without a namespace names the operator's own objects.
    placed: Option<&'a str>,
}

impl<'a> Guard<'a> {
    /// A guard; `published` is `None` offline, where publication cannot be checked.
    pub fn new(
        policy: &'a Policy,
        names: &'a NameMap,
        published: Option<&'a dyn Published>,
        transformed: bool,
        explain: bool,
    ) -> Self {
        Self {
            policy,
            names,
            published,
            blame: if transformed {
                Reason::TransformFailed
            } else {
                Reason::Invalid
            },
            unverified: explain.then(Vec::new),
            namespaces: &[],
            placed: None,
        }
    }

    /// The tenant's namespaces, which up namespace-bearing values must be among.
    pub fn with_namespaces(mut self, namespaces: &'a [String]) -> Self {
        self.namespaces = namespaces;
        self
    }

    fn refuse(&self, message: String) -> Refusal {
        Refusal::new(self.blame, message)
    }

    /// Checks a super object about to be applied for a toSuper kind.
    pub fn down(&mut self, resource: &'a Resource, object: &Value) -> Result<()> {
        self.placed = resource.placement.as_deref();
        let Value::Object(top) = object else {
            return Err(self.refuse("the object to write is not an object".into()));
        };
        if top.contains_key("status") {
            return Err(self.refuse("status: status never goes down to the super cluster".into()));
        }
        let Some(Value::Object(meta)) = top.get("metadata") else {
            return Err(self.refuse("metadata: expected an object".into()));
        };
        self.down_metadata(resource, meta)?;
        let root = Path::Root;
        if let Some(node) = resource.plan.root.fields.get("metadata") {
            self.metadata_rules(node, meta, &root.key("metadata"))?;
        }
        self.absent_references(&resource.plan.root, top, &root)?;
        self.absent_required(&resource.plan.root, top, &root)?;
        self.credential(top)?;
        map_keys(top, &root, self.blame)?;
        for (key, value) in top {
            if key == "metadata" {
                continue;
            }
            if key.starts_with(RESERVED_PREFIX) {
                return Err(self.refuse(format!(
                    "{}: keys under ferry.dev/ are ferry's; an object cannot carry them",
                    root.key(key)
                )));
            }
            let node = resource.plan.root.fields.get(key);
            self.walk(node, value, Some(top), &root.key(key))?;
        }
        Ok(())
    }

    /// The annotations and labels field rules mark (`metadata.annotations['key']`), checked
    /// like any marked field.
    fn metadata_rules(
        &mut self,
        node: &Node,
        meta: &Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        for (field, marked) in &node.fields {
            let Some(Value::Object(map)) = meta.get(field) else {
                continue;
            };
            let field_path = path.key(field);
            self.absent_references(marked, map, &field_path)?;
            for (key, rules) in &marked.fields {
                if let Some(value) = map.get(key) {
                    self.walk(Some(rules), value, Some(map), &field_path.key(key))?;
                }
            }
        }
        Ok(())
    }

    /// Metadata of a super copy: only what ferry sets, ferry's keys exactly as it sets them.
    /// Runs on every object, so it reads the maps in place and allocates only to refuse.
    fn down_metadata(&self, resource: &Resource, meta: &Map<String, Value>) -> Result<()> {
        if let Some(key) = meta.keys().find(|k| !DOWN_METADATA.contains(&k.as_str())) {
            return Err(self.refuse(format!(
                "metadata.{key}: ferry sends only name, namespace, labels and annotations down"
            )));
        }
        let text = |key: &str| meta.get(key).and_then(Value::as_str).unwrap_or("");
        let empty = Map::new();
        let (labels, annotations) = (
            string_map(meta, "labels")?.unwrap_or(&empty),
            string_map(meta, "annotations")?.unwrap_or(&empty),
        );
        let tenant = self.names.tenant().as_str();
        if get_str(labels, LABEL_TENANT) != Some(tenant) {
            return Err(self.refuse(format!(
                "metadata.labels[{LABEL_TENANT:?}]: expected {tenant:?}, found {:?}",
                get_str(labels, LABEL_TENANT).unwrap_or("nothing")
            )));
        }
        let tenant_name = get_str(annotations, ANN_TENANT_NAME).unwrap_or("");
        let name = text("name");
        if let Some(why) = dns_subdomain_problem(tenant_name) {
            return Err(self.refuse(format!(
                "metadata.annotations[{ANN_TENANT_NAME:?}]: {tenant_name:?} is not a valid name: {why}"
            )));
        }
        let tenant_ns = get_str(annotations, ANN_TENANT_NAMESPACE).unwrap_or("");
        let name_ok = match (resource.scope, &resource.placement) {
            (Scope::Namespaced, None) => name == tenant_name,
            (Scope::Namespaced, Some(_)) => {
                resource.super_key(self.names, tenant_ns, tenant_name).1 == name
            }
            (Scope::Cluster, _) => is_map_of(tenant, tenant_name, name),
        };
        if let Some(why) = dns_subdomain_problem(name) {
            // map() cuts hashed names at 54 characters, which can end a dotted name in '.'.
            return Err(Refusal::new(
                Reason::Invalid,
                format!("metadata.name: the super name {name:?} of {tenant_name:?} is not a valid Kubernetes name ({why}); rename the tenant object"),
            ));
        }
        if !name_ok {
            return Err(self.refuse(format!(
                "metadata.name: {name:?} is not the super name of tenant object {tenant_name:?}"
            )));
        }
        match resource.scope {
            Scope::Namespaced => {
                if let Some(why) = dns_label_problem(tenant_ns) {
                    return Err(self.refuse(format!(
                        "metadata.annotations[{ANN_TENANT_NAMESPACE:?}]: {tenant_ns:?} is not a namespace name: {why}"
                    )));
                }
                // A placed kind's copies go to the operator's namespace the policy names,
                // and nowhere else.
                if let Some(fixed) = &resource.placement {
                    if text("namespace") != fixed {
                        return Err(self.refuse(format!(
                            "metadata.namespace: {:?} is not {fixed:?}, the namespace {} copies are placed in",
                            text("namespace"),
                            resource.group_kind
                        )));
                    }
                    return self.metadata_keys(resource, labels, annotations);
                }
                if !is_map_of(tenant, tenant_ns, text("namespace")) {
                    return Err(self.refuse(format!(
                        "metadata.namespace: {:?} is not the super namespace of tenant namespace {tenant_ns:?}",
                        text("namespace")
                    )));
                }
                // A tenant namespace whose super name is the platform's is never written.
                if let Some(pattern) = self.names.platform(text("namespace")) {
                    return Err(platform_namespace(
                        text("namespace"),
                        pattern,
                        &Path::Root.key("metadata").key("namespace"),
                    ));
                }
            }
            Scope::Cluster => {
                if meta.contains_key("namespace") {
                    return Err(self.refuse(format!(
                        "metadata.namespace: {} is cluster-scoped",
                        resource.group_kind
                    )));
                }
            }
        }
        self.metadata_keys(resource, labels, annotations)
    }

    /// The labels and annotations of a super copy: ferry's keys only as ferry sets them, a
    /// tenant's annotations only where the policy lets them cross, every key and label value
    /// valid.
    fn metadata_keys(
        &self,
        resource: &Resource,
        labels: &Map<String, Value>,
        annotations: &Map<String, Value>,
    ) -> Result<()> {
        let ours = |field: &str, key: &str| match field {
            "labels" => key == LABEL_TENANT,
            _ => {
                key == ANN_TENANT_NAME
                    || key == ANN_TENANT_UID
                    || (key == ANN_TENANT_NAMESPACE && resource.scope == Scope::Namespaced)
            }
        };
        if labels.contains_key(crate::policy::DEFAULT_PUBLIC_LABEL) {
            return Err(self.refuse(format!(
                "metadata.labels[{:?}]: a tenant's copy is never published (selectors over the platform's published objects would match it)",
                crate::policy::DEFAULT_PUBLIC_LABEL
            )));
        }
        for (field, map) in [("labels", labels), ("annotations", annotations)] {
            for (key, value) in map {
                if key.starts_with(RESERVED_PREFIX) {
                    if !ours(field, key) {
                        return Err(self.refuse(format!(
                            "metadata.{field}[{key:?}]: ferry.dev/ keys are ferry's (ownership cannot be forged)"
                        )));
                    }
                } else if field == "annotations" && !resource.annotations.allows(key) {
                    // Translation leaves such keys out: one here was put back (a transform).
                    return Err(self.refuse(format!(
                        "metadata.annotations[{key:?}]: {} ({} at {})",
                        resource.annotations.why_not(),
                        resource.group_kind,
                        resource.at
                    )));
                }
                let value = value.as_str().unwrap_or("");
                let problem = qualified_name_problem(key)
                    .map(|why| {
                        format!(
                            "the key is not a valid {} key: {why}",
                            &field[..field.len() - 1]
                        )
                    })
                    .or_else(|| {
                        (field == "labels")
                            .then(|| label_value_problem(value))
                            .flatten()
                            .map(|why| format!("{value:?} is not a valid label value: {why}"))
                    });
                if let Some(why) = problem {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!("metadata.{field}[{key:?}]: {why}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks `value` (at `path`, a field of `parent`) against `node`'s rules, then
    /// everything below it.
    fn walk(
        &mut self,
        node: Option<&Node>,
        value: &Value,
        parent: Option<&Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        if let Some(node) = node.filter(|n| !n.kept(value)) {
            for annotated in &node.rules {
                if self.name_rule(&annotated.rule, value, path)? {
                    continue;
                }
                match &annotated.rule {
                    Rule::Drop | Rule::OwnerSuper => {
                        return Err(self.refuse(format!(
                            "{path}: the field is {} and never goes down",
                            annotated.rule.name()
                        )))
                    }
                    Rule::Namespace => self.namespace(value, path)?,
                    Rule::Text => {}
                    Rule::Selector => self.selector(value, path)?,
                    Rule::PublishedSelector => self.published_selector(value, path)?,
                    Rule::NamespaceSelector => {
                        self.selector(value, path)?;
                        self.selected_namespaces(value, path)?;
                    }
                    Rule::Ref(rule) => self.reference(rule, value, parent, path)?,
                    Rule::Pattern
                    | Rule::Keep(_)
                    | Rule::Required(_)
                    | Rule::Host(_)
                    | Rule::Identity
                    | Rule::Qualified
                    | Rule::Forbid(_)
                    | Rule::SecretTemplate => {}
                }
            }
        }
        if let Some(node) = node {
            self.shape(node, value, path)?;
        }
        nested(value, path, self.blame)?;
        match value {
            Value::Object(map) => {
                map_keys(map, path, self.blame)?;
                if let Some(node) = node {
                    self.absent_references(node, map, path)?;
                    self.absent_required(node, map, path)?;
                }
                let selector = node.is_some_and(|n| {
                    n.has(|r| matches!(r, Rule::Selector | Rule::NamespaceSelector))
                });
                for (k, v) in map {
                    // A scoped selector's own tenant label was checked by `selector`.
                    let scoped = selector && k == "matchLabels";
                    if k.starts_with(RESERVED_PREFIX) {
                        return Err(self.refuse(format!(
                            "{}: keys under ferry.dev/ are ferry's; an object cannot carry them (a super-side controller could stamp forged ownership with them)",
                            path.key(k)
                        )));
                    }
                    let child = node.and_then(|n| n.fields.get(k).or(n.values.as_deref()));
                    if scoped {
                        self.walk_scoped_labels(v, &path.key(k))?;
                    } else {
                        self.walk(child, v, Some(map), &path.key(k))?;
                    }
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let item = node.and_then(|n| n.element(v));
                    if let Some(item) = &item {
                        self.empty_name(item, v, &path.index(i))?;
                    }
                    self.walk(item.as_deref(), v, None, &path.index(i))?;
                }
            }
            Value::Number(n) => self.number(n, path)?,
            _ => {}
        }
        Ok(())
    }

    /// The sibling namespace of a string reference that is absent or null still holds a
    /// namespace.
    fn absent_references(
        &self,
        node: &Node,
        map: &Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        for (key, child) in &node.fields {
            for annotated in &child.rules {
                let Rule::Ref(rule) = &annotated.rule else {
                    continue;
                };
                let Some(ns_key) = rule.sibling_namespace() else {
                    continue;
                };
                if map.get(key).is_some_and(|v| !v.is_null()) {
                    continue;
                }
                let public = rule
                    .target(Some(map))
                    .and_then(|(g, k)| self.policy.resource(g, k))
                    .is_some_and(|r| {
                        r.direction == Direction::FromSuper && r.scope == Scope::Namespaced
                    });
                if let (false, Some(ns)) = (public, map.get(ns_key)) {
                    self.namespace(ns, &path.key(ns_key))?;
                }
            }
        }
        Ok(())
    }

    /// A list where the schema declares a list, an object where it declares an object: a
    /// value of the wrong shape would slip past the rules below it.
    fn shape(&self, node: &Node, value: &Value, path: &Path<'_>) -> Result<()> {
        let wants_list = node.items.is_some();
        let wants_object = !node.fields.is_empty() || node.values.is_some();
        let ok = match value {
            Value::Null => true,
            Value::Array(_) => wants_list || !wants_object,
            Value::Object(_) => wants_object || !wants_list,
            _ => !wants_list && !wants_object,
        };
        if ok {
            return Ok(());
        }
        let expected = match (wants_list, wants_object) {
            (true, false) => "a list",
            (false, true) => "an object",
            _ => "a list or an object",
        };
        Err(Refusal::new(
            Reason::Invalid,
            format!(
                "{path}: expected {expected} (the schema's annotations are below it), found {}",
                shown(value)
            ),
        ))
    }

    /// Kubernetes (Go) holds numbers as 64-bit integers or floats: anything else would be
    /// changed or rejected by the API server.
    fn number(&self, n: &Number, path: &Path<'_>) -> Result<()> {
        number(n, path)
    }

    /// A namespace-bearing value: empty, or one of this tenant's super namespaces.
    fn namespace(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        match value {
            Value::Null => Ok(()),
            Value::String(ns) if ns.is_empty() => match self.placed {
                Some(fixed) => Err(placed_unqualified(path, "\"\"", fixed)),
                None => Ok(()),
            },
            Value::String(ns) => self.tenant_namespace(ns, path),
            other => Err(Refusal::new(
                Reason::Invalid,
                format!(
                    "{path}: expected a namespace string, found {}",
                    shown(other)
                ),
            )),
        }
    }

    fn tenant_namespace(&self, ns: &str, path: &Path<'_>) -> Result<()> {
        if let Some(pattern) = self.names.platform(ns) {
            return Err(platform_namespace(ns, pattern, path));
        }
        if dns_label_problem(ns).is_none() && self.names.in_tenant_space(ns) {
            return Ok(());
        }
        Err(self.refuse(format!(
            "{path}: {ns:?} is not a namespace of tenant {} (a tenant's object may point only into its own namespaces)",
            self.names.tenant()
        )))
    }
}

/// A namespace-bearing value that maps onto a platform namespace (`platformNamespaces`): the
/// tenant namespace it names is refused (live, `OutsideTenant` on it), and so is every value
/// pointing at it.
fn platform_namespace(ns: &str, pattern: &crate::glob::Glob, path: &Path<'_>) -> Refusal {
    Refusal::new(
        Reason::OutsideTenant,
        format!(
            "{path}: {ns:?} is a platform namespace (platformNamespaces: {:?}), never a tenant's",
            pattern.as_str()
        ),
    )
}

fn slash(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

mod names;
mod reference;
mod selector;
mod up;
mod values;

pub(super) use values::readable;
pub use values::READ_DEPTH;
use values::{get_str, map_keys, nested, number, optional_str, string_map};

#[cfg(test)]
mod tests;
