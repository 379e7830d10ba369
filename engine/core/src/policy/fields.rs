//! Field rules: a resource's `fields`, RFC 9535 JSONPath paths each with one action of the
//! same meaning as the schema annotation of that name. They are compiled into the kind's
//! plan, after its annotations, so translation up and down, `--explain`, `ferry rbac` and
//! the guard treat them exactly as annotations.
//!
//! A rule marks a field of every object of the kind, as an annotation marks a schema node.
//! So a path may name fields (`.a`, `['a']`, `['a','b']`) and every element or member
//! (`[*]`, `.*`); selectors that choose by position (`[0]`, `[1:]`), by value (`[?...]`) or at
//! any depth (`..`) are refused: whether a field is rewritten would then depend on the data
//! a tenant writes, and the guard could not know which rule a field is under.

use crate::keys::RESERVED_PREFIX;
use serde_json::Value;

use super::model::FieldRuleEntry;
use super::{Error, Result};
use crate::locate::{Location, Positions};

use crate::schema::compile::{parse_forbid, parse_names, parse_ref, NameRules};
use crate::schema::{Annotated, Empty, Node, Plan, RefFormat, Rule};
use path::{show, steps, Step};

/// The actions a rule may have, in the order messages list them.
const ACTIONS: [&str; 11] = [
    "namespace",
    "ref",
    "selector",
    "namespaceSelector",
    "text",
    "owner",
    "drop",
    "host",
    "identity",
    "forbid",
    "secretTemplate",
];

/// What one rule's action puts in the plan.
enum Action {
    /// One rule on the field the path names.
    One(Rule),
    /// Rules of names: on each value, and `empty` on the list (a path ending in `[*]`) or on
    /// the string itself.
    Names(NameRules),
}

/// `plan` with `entries`, the `fields` of the resource at `resource` (`spec.resources[0]`),
/// added.
pub fn compile(
    plan: &Plan,
    entries: &[FieldRuleEntry],
    positions: &Positions,
    resource: &str,
) -> Result<Plan> {
    let mut plan = plan.clone();
    for (j, entry) in entries.iter().enumerate() {
        let at = |j: usize, key: &str| {
            let entry = format!("{resource}.fields[{j}]");
            positions.at(&if key.is_empty() {
                entry
            } else {
                format!("{entry}.{key}")
            })
        };
        let invalid = |key: &str, message: String| Error::Invalid {
            at: at(j, key),
            message: format!("{resource}.fields[{j}]: {message}"),
        };
        let action = action(entry).map_err(|(key, message)| invalid(&key, message))?;
        let paths = steps(&entry.path).map_err(|m| invalid("path", m))?;
        let rule = match action {
            Action::One(rule) => rule,
            Action::Names(names) => {
                let origin = at(j, "path");
                for path in &paths {
                    allowed(path, &Rule::Namespace).map_err(|m| invalid("path", m))?;
                    insert_names(&mut plan.root, path, &names, &origin, &entry.path)
                        .map_err(|m| invalid("path", m))?;
                }
                continue;
            }
        };
        for path in &paths {
            allowed(path, &rule).map_err(|m| invalid("path", m))?;
        }
        let removes = matches!(rule, Rule::Drop | Rule::OwnerSuper);
        if removes
            && paths
                .iter()
                .flatten()
                .any(|s| matches!(s, Step::Items | Step::Members | Step::Keyed(_)))
        {
            return Err(invalid(
                "path",
                format!(
                    "{} is not supported inside lists and maps ([*]): it would need merging element by element on the way up; put it on the whole field",
                    rule.action()
                ),
            ));
        }
        let annotated = Annotated {
            rule,
            origin: at(j, "path"),
            jsonpath: Some(entry.path.clone()),
        };
        if annotated.rule == Rule::Text {
            plan.has_text = true;
        }
        for path in &paths {
            insert(&mut plan.root, path, &annotated).map_err(|m| invalid("path", m))?;
        }
    }
    mapped_once(&plan.root, "").map_err(|(at, message)| Error::Invalid { at, message })?;
    Ok(plan)
}

fn namespace_rule(node: &Node) -> Option<&Annotated> {
    node.rules.iter().find(|a| a.rule == Rule::Namespace)
}

/// A namespace is mapped once: a field rule's `namespace` on the namespace field of a
/// reference (its own field, or a string reference's sibling), or a namespace field shared
/// by two references, where either is a field rule, would map it twice.
fn mapped_once(node: &Node, path: &str) -> std::result::Result<(), (Location, String)> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    let mut siblings: Vec<(&str, &Annotated)> = Vec::new();
    for (key, child) in &node.fields {
        for annotated in &child.rules {
            let Rule::Ref(r) = &annotated.rule else {
                continue;
            };
            // Where the reference's namespace may be: beside it, and inside it.
            let beside = r.sibling_namespace().map(|k| (k, node.fields.get(k)));
            let inside = (!r.on_string)
                .then(|| r.namespace_key(true))
                .flatten()
                .map(|k| (k, child.fields.get(k)));
            for (ns_key, ns_node) in beside.into_iter().chain(inside) {
                if let Some(ns) = ns_node.and_then(namespace_rule) {
                    if ns.jsonpath.is_some() || annotated.jsonpath.is_some() {
                        return Err((
                            ns.origin.clone(),
                            format!(
                                "{}: namespace on the namespace field {ns_key:?} of the reference {} would map it twice; the reference maps it already",
                                join(key), annotated.describe()
                            ),
                        ));
                    }
                }
            }
            if let Some(ns_key) = r.sibling_namespace() {
                if let Some((_, first)) = siblings.iter().find(|(k, _)| *k == ns_key) {
                    if first.jsonpath.is_some() || annotated.jsonpath.is_some() {
                        return Err((
                            annotated.origin.clone(),
                            format!(
                                "{}: {ns_key} is the namespaceField of two references (also {}); it would be mapped twice",
                                join(key), first.describe()
                            ),
                        ));
                    }
                }
                siblings.push((ns_key, annotated));
            }
        }
        mapped_once(child, &join(key))?;
    }
    // Every value of a map shares its siblings: a reference there with a sibling namespace
    // field would map that field once per value.
    let shared = node
        .values
        .as_deref()
        .into_iter()
        .flat_map(|v| &v.rules)
        .find(|a| {
            a.jsonpath.is_some()
                && matches!(&a.rule, Rule::Ref(r) if r.sibling_namespace().is_some())
        });
    if let Some(a) = shared {
        return Err((
            a.origin.clone(),
            format!(
                "{path}.*: {} names a sibling namespaceField, which every member of the map would map again",
                a.describe()
            ),
        ));
    }
    for (inner, suffix) in [(&node.items, "[*]"), (&node.values, ".*")] {
        if let Some(inner) = inner {
            mapped_once(inner, &format!("{path}{suffix}"))?;
        }
    }
    for (keyed, inner) in &node.keyed {
        mapped_once(inner, &format!("{path}{keyed}"))?;
    }
    Ok(())
}

/// The rules of names at `path`: on the value (each element, for a path ending in `[*]`),
/// and `empty` on the list (or the string) itself.
fn insert_names(
    root: &mut Node,
    path: &[Step],
    names: &NameRules,
    origin: &Location,
    jsonpath: &str,
) -> std::result::Result<(), String> {
    let annotated = |rule: Rule| Annotated {
        rule,
        origin: origin.clone(),
        jsonpath: Some(jsonpath.to_string()),
    };
    let list = matches!(path.last(), Some(Step::Items));
    if let Some(empty) = names.empty {
        if empty == Empty::Tenant && !list {
            return Err("empty: tenant makes an empty list the tenant's namespaces: the path names the list's elements ([*] last)".into());
        }
        let at = if list { &path[..path.len() - 1] } else { path };
        if at.is_empty() {
            return Err("empty needs a field to stand on".into());
        }
        insert(root, at, &annotated(Rule::Required(empty)))?;
    }
    for rule in &names.rules {
        insert(root, path, &annotated(rule.clone()))?;
    }
    Ok(())
}

/// The one action of `entry`, or the key at fault and why.
fn action(entry: &FieldRuleEntry) -> std::result::Result<Action, (String, String)> {
    let given: Vec<(&str, &Value)> = [
        ("namespace", &entry.namespace),
        ("ref", &entry.reference),
        ("selector", &entry.selector),
        ("namespaceSelector", &entry.namespace_selector),
        ("text", &entry.text),
        ("owner", &entry.owner),
        ("drop", &entry.drop),
        ("host", &entry.host),
        ("identity", &entry.identity),
        ("forbid", &entry.forbid),
        ("secretTemplate", &entry.secret_template),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    .collect();
    let (key, value) = match given.as_slice() {
        [one] => *one,
        [] => {
            return Err((
                String::new(),
                format!("a rule needs one action, one of {}", ACTIONS.join(", ")),
            ))
        }
        [_, second, ..] => {
            let names: Vec<_> = given.iter().map(|(k, _)| *k).collect();
            return Err((
                second.0.to_string(),
                format!(
                    "one rule, one action: found {} (write one rule for each)",
                    names.join(" and ")
                ),
            ));
        }
    };
    let expect_true = |rule: Rule| match value {
        Value::Bool(true) => Ok(Action::One(rule)),
        other => Err((
            key.to_string(),
            format!("{key}: expected true, found {other} (leave the rule out instead)"),
        )),
    };
    let names = |annotation: &str| match parse_names(annotation, value) {
        Ok(Some(names)) => Ok(Action::Names(names)),
        Ok(None) => Err((
            key.to_string(),
            format!("{key}: expected true or a mapping, found false (leave the rule out instead)"),
        )),
        Err((sub, message)) => Err((
            sub.map_or_else(|| key.to_string(), |s| format!("{key}.{s}")),
            message.replace(annotation, key),
        )),
    };
    match key {
        "namespace" if value.is_object() => names("x-ferry-namespace"),
        "namespace" => expect_true(Rule::Namespace),
        "host" => names("x-ferry-host"),
        "identity" => names("x-ferry-identity"),
        "secretTemplate" => expect_true(Rule::SecretTemplate),
        "forbid" => parse_forbid(value, "forbid")
            .map(|f| Action::One(Rule::Forbid(f)))
            .map_err(|(sub, message)| {
                (
                    sub.map_or_else(|| key.to_string(), |s| format!("forbid.{s}")),
                    message,
                )
            }),
        "selector" if value.is_object() => crate::schema::compile::selector_over(value)
            .map(Action::One)
            .map_err(|message| (format!("{key}.over"), message)),
        "selector" => expect_true(Rule::Selector),
        "namespaceSelector" => expect_true(Rule::NamespaceSelector),
        "text" => expect_true(Rule::Text),
        "drop" => expect_true(Rule::Drop),
        "owner" => match value.as_str() {
            Some("super") => Ok(Action::One(Rule::OwnerSuper)),
            _ => Err((
                key.to_string(),
                format!("owner: expected \"super\", found {value}"),
            )),
        },
        _ => {
            let mut rule = parse_ref(value, "ref").map_err(|(sub, message)| {
                (
                    sub.map_or_else(|| "ref".to_string(), |k| format!("ref.{k}")),
                    message,
                )
            })?;
            // A field rule knows nothing of the field's type: a reference with a name field
            // or a namespace field beside it is an object's or a string's as the value is.
            rule.on_string = false;
            rule.on_object = false;
            Ok(Action::One(Rule::Ref(rule)))
        }
    }
}

/// Why a rule may not stand at `path`.
fn allowed(path: &[Step], rule: &Rule) -> std::result::Result<(), String> {
    let shown = show(path);
    if let Some(Step::Name(key)) = path
        .iter()
        .find(|s| matches!(s, Step::Name(n) if n.starts_with(RESERVED_PREFIX)))
    {
        return Err(format!(
            "{shown}: keys under {RESERVED_PREFIX} are ferry's ({key:?}); a rule cannot touch them"
        ));
    }
    match path {
        [] => Err("path $ is the whole object; name the field the rule marks".into()),
        [Step::Items | Step::Members, ..] => Err(format!(
            "{shown}: a rule at the top level names its field (a wildcard would take in apiVersion, kind and metadata)"
        )),
        [Step::Name(top), ..] if top == "apiVersion" || top == "kind" => Err(format!(
            "{shown}: apiVersion and kind are the object's type, not a field a rule rewrites"
        )),
        [Step::Name(top), rest @ ..] if top == "metadata" => match rest {
            [Step::Name(field), ..] if field == "name" || field == "namespace" => Err(format!(
                "{shown}: metadata.name and metadata.namespace are ferry's to map; a rule cannot touch them"
            )),
            [Step::Name(field), Step::Name(_)] if field == "annotations" || field == "labels" => {
                if *rule == Rule::OwnerSuper {
                    return Err(format!(
                        "{shown}: owner: super flows a field up, and only status and spec fields flow up (metadata is ferry's)"
                    ));
                }
                Ok(())
            }
            _ => Err(format!(
                "{shown}: under metadata a rule names one annotation or label (metadata.annotations['key'])"
            )),
        },
        _ => Ok(()),
    }
}

/// Adds `rule` at `path` below `node`. A wildcard over an object's members marks the named
/// ones too (in a plan, `values` covers only the members `fields` does not name).
fn insert(node: &mut Node, path: &[Step], rule: &Annotated) -> std::result::Result<(), String> {
    match path.split_first() {
        None => add(node, rule),
        Some((Step::Name(name), rest)) => {
            if !node.fields.contains_key(name) {
                // A member no rule named yet is one of the map's values: it keeps what the
                // schema (or a wildcard rule) says of every value.
                let seeded = node.values.as_deref().cloned().unwrap_or_default();
                node.fields.insert(name.clone(), seeded);
            }
            insert(node.fields.get_mut(name).expect("inserted"), rest, rule)
        }
        Some((Step::Items, rest)) => {
            insert(node.items.get_or_insert_with(Default::default), rest, rule)
        }
        Some((Step::Keyed(keyed), rest)) => {
            insert(node.keyed.entry(keyed.clone()).or_default(), rest, rule)
        }
        Some((Step::Members, rest)) => {
            insert(node.values.get_or_insert_with(Default::default), rest, rule)?;
            for child in node.fields.values_mut() {
                insert(child, rest, rule)?;
            }
            Ok(())
        }
    }
}

/// `rule` on `node`: once (a rule the schema already gives the field is not applied twice),
/// and never beside its contradiction.
fn add(node: &mut Node, rule: &Annotated) -> std::result::Result<(), String> {
    if node.rules.iter().any(|r| r.rule == rule.rule) {
        return Ok(());
    }
    // One reference per field: the same one again (as a schema annotation says it, which
    // also knows the field's type) is applied once; another would rewrite it twice.
    if let Rule::Ref(new) = &rule.rule {
        if let Some(existing) = node.rules.iter().find(|r| matches!(r.rule, Rule::Ref(_))) {
            let Rule::Ref(old) = &existing.rule else {
                unreachable!()
            };
            if same_target(old, new) {
                return Ok(());
            }
            return Err(format!(
                "the field already has a reference ({}); a second would rewrite it twice",
                existing.describe()
            ));
        }
    }
    let (drop, owner) = (
        |r: &Rule| matches!(r, Rule::Drop),
        |r: &Rule| matches!(r, Rule::OwnerSuper),
    );
    if (drop(&rule.rule) && node.has(owner)) || (owner(&rule.rule) && node.has(drop)) {
        let other = node
            .rules
            .iter()
            .find(|r| drop(&r.rule) || owner(&r.rule))
            .map(Annotated::describe)
            .unwrap_or_default();
        return Err(format!(
            "drop and owner: super contradict each other (one keeps the field in the tenant, the other in the super cluster); the field already has {other}"
        ));
    }
    if let Rule::Ref(r) = &rule.rule {
        if r.format == RefFormat::NamespacedName && node.has(|x| matches!(x, Rule::Namespace)) {
            return Err(
                "a namespacedName reference maps its own namespace; the field is also a namespace"
                    .into(),
            );
        }
    }
    node.rules.push(rule.clone());
    Ok(())
}

/// Whether two reference rules name the same target the same way (whatever each knows of the
/// field's type).
fn same_target(a: &crate::schema::RefRule, b: &crate::schema::RefRule) -> bool {
    a.api_version == b.api_version
        && a.kind == b.kind
        && a.api_version_field == b.api_version_field
        && a.kind_field == b.kind_field
        && a.name_field == b.name_field
        && a.namespace_field == b.namespace_field
        && a.passthrough == b.passthrough
        && a.format == b.format
        && a.produced == b.produced
}

mod path;

#[cfg(test)]
mod tests;
