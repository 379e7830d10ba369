//! Reading the `x-ferry-*` (and kustomize object-ref) extensions of one schema node into
//! rules, each checked against the shape of the field it is on.

use crate::keys::RESERVED_PREFIX;
use openapiv3::Schema;
use serde_json::Value;

use super::{
    properties_of, property_default, Compiler, Shape, EXTENSIONS, KUSTOMIZE_API_VERSION,
    KUSTOMIZE_KIND, KUSTOMIZE_NAME_KEY, REF_KEYS,
};

use crate::schema::{Annotated, Empty, Forbid, Hosts, Node, RefFormat, RefRule, Result, Rule};

impl Compiler<'_> {
    pub(super) fn rules(
        &mut self,
        schema: &Schema,
        shape: Shape,
        yaml_path: &str,
        field: &str,
        node: &mut Node,
    ) -> Result<()> {
        let ext = &schema.schema_data.extensions;
        for key in ext.keys() {
            if key.starts_with("x-ferry-") && !EXTENSIONS.contains(&key.as_str()) {
                return Err(self.annotation_error(
                    &format!("{yaml_path}.{key}"),
                    field,
                    format!(
                        "unknown annotation {key:?}; expected one of {}",
                        EXTENSIONS.join(", ")
                    ),
                ));
            }
        }
        self.name_rules(schema, shape, yaml_path, field, node)?;
        let mut defaulted = Vec::new();
        let origin = |key: &str| self.at(&format!("{yaml_path}.{key}"));
        let expect_true = |key: &str, v: &Value| self.expect_true(key, v, (yaml_path, field));
        let need_shape =
            |key: &str, want: &[Shape]| self.need_shape(key, (shape, want), (yaml_path, field));
        if let Some(v) = ext.get("x-ferry-namespace").filter(|v| !v.is_object()) {
            if expect_true("x-ferry-namespace", v)? && shape != Shape::Array {
                need_shape("x-ferry-namespace", &[Shape::String])?;
                if let Some(default) = &schema.schema_data.default {
                    defaulted.push((
                        self.at(&format!("{yaml_path}.default")),
                        format!("{field} is x-ferry-namespace and has a schema default ({default}): when a tenant leaves it out, the super API server fills in the default unmapped, outside the tenant's namespaces; remove the default or have a transform set the field"),
                    ));
                }
                node.rules
                    .push(Annotated::new(Rule::Namespace, origin("x-ferry-namespace")));
            }
        }
        self.selector_rules(schema, shape, (yaml_path, field), node)?;
        if let Some(v) = ext.get("x-ferry-text") {
            if expect_true("x-ferry-text", v)? {
                need_shape("x-ferry-text", &[Shape::String])?;
                node.rules
                    .push(Annotated::new(Rule::Text, origin("x-ferry-text")));
            }
        }
        if let Some(v) = ext.get("x-ferry-drop") {
            if expect_true("x-ferry-drop", v)? {
                node.rules
                    .push(Annotated::new(Rule::Drop, origin("x-ferry-drop")));
            }
        }
        if let Some(v) = ext.get("x-ferry-owner") {
            match v.as_str() {
                Some("super") => node
                    .rules
                    .push(Annotated::new(Rule::OwnerSuper, origin("x-ferry-owner"))),
                _ => {
                    return Err(self.annotation_error(
                        &format!("{yaml_path}.x-ferry-owner"),
                        field,
                        format!("x-ferry-owner expects \"super\", found {v}"),
                    ))
                }
            }
        }
        self.ref_rules(schema, shape, (yaml_path, field), node)?;
        if node.has(|r| matches!(r, Rule::Drop)) && node.has(|r| matches!(r, Rule::OwnerSuper)) {
            return Err(self.annotation_error(
                yaml_path,
                field,
                "x-ferry-drop and x-ferry-owner: super contradict each other (one keeps the field in the tenant, the other in the super cluster)".into(),
            ));
        }
        self.warnings.append(&mut defaulted);
        Ok(())
    }

    /// `v`, the value of annotation `key`, as a boolean.
    fn expect_true(&self, key: &str, v: &Value, (yaml_path, field): (&str, &str)) -> Result<bool> {
        match v {
            Value::Bool(b) => Ok(*b),
            other => Err(self.annotation_error(
                &format!("{yaml_path}.{key}"),
                field,
                format!("{key} expects true or false, found {other}"),
            )),
        }
    }

    /// The selector rules of a schema node (`x-ferry-selector`, `x-ferry-namespace-selector`)
    /// into `node`: on LabelSelectors only, never both.
    fn selector_rules(
        &self,
        schema: &Schema,
        shape: Shape,
        (yaml_path, field): (&str, &str),
        node: &mut Node,
    ) -> Result<()> {
        let ext = &schema.schema_data.extensions;
        let origin = |key: &str| self.at(&format!("{yaml_path}.{key}"));
        let expect_true = |key: &str, v: &Value| self.expect_true(key, v, (yaml_path, field));
        let need_shape =
            |key: &str, want: &[Shape]| self.need_shape(key, (shape, want), (yaml_path, field));
        for (key, rule) in [
            ("x-ferry-selector", Rule::Selector),
            ("x-ferry-namespace-selector", Rule::NamespaceSelector),
        ] {
            let Some(v) = ext.get(key) else { continue };
            let rule = match (&rule, v) {
                (Rule::Selector, Value::Object(_)) => selector_over(v).map_err(|message| {
                    self.annotation_error(&format!("{yaml_path}.{key}.over"), field, message)
                })?,
                _ if !expect_true(key, v)? => continue,
                _ => rule,
            };
            need_shape(key, &[Shape::Object])?;
            // A LabelSelector has matchLabels or matchExpressions and nothing else (another
            // field, such as ServiceMonitor's matchNames, would select beside the scope).
            let is_selector = properties_of(schema).is_some_and(|p| {
                (p.contains_key("matchLabels") || p.contains_key("matchExpressions"))
                    && p.keys()
                        .all(|k| k == "matchLabels" || k == "matchExpressions")
            });
            if !is_selector {
                return Err(self.annotation_error(
                    &format!("{yaml_path}.{key}"),
                    field,
                    format!("{key} expects a LabelSelector (an object with matchLabels or matchExpressions and no other field); scoping anything else would leave it selecting beside the tenant's scope, or add a matchLabels the schema does not have"),
                ));
            }
            node.rules.push(Annotated::new(rule, origin(key)));
        }
        if node.has(|r| matches!(r, Rule::Selector))
            && node.has(|r| matches!(r, Rule::NamespaceSelector))
        {
            return Err(self.annotation_error(
                yaml_path,
                field,
                "x-ferry-selector and x-ferry-namespace-selector contradict each other (a selector selects either objects or namespaces)".into(),
            ));
        }
        Ok(())
    }

    /// `key` stands on a field of type `shape`, which must be one of `want`.
    fn need_shape(
        &self,
        key: &str,
        (shape, want): (Shape, &[Shape]),
        (yaml_path, field): (&str, &str),
    ) -> Result<()> {
        if shape == Shape::Unknown || want.contains(&shape) {
            return Ok(());
        }
        let names: Vec<_> = want.iter().map(|s| s.name()).collect();
        Err(self.annotation_error(
            &format!("{yaml_path}.{key}"),
            field,
            format!(
                "{key} expects a field of type {}, found type {}",
                names.join(" or "),
                shape.name()
            ),
        ))
    }

    /// The reference rule of a schema node (`x-ferry-ref`, or kustomize's object-ref
    /// extensions) into `node`.
    fn ref_rules(
        &self,
        schema: &Schema,
        shape: Shape,
        (yaml_path, field): (&str, &str),
        node: &mut Node,
    ) -> Result<()> {
        let ext = &schema.schema_data.extensions;
        let origin = |key: &str| self.at(&format!("{yaml_path}.{key}"));
        if let Some(v) = ext.get("x-ferry-ref") {
            self.need_shape(
                "x-ferry-ref",
                (shape, &[Shape::String, Shape::Object]),
                (yaml_path, field),
            )?;
            let mut rule = self.ref_rule(v, &format!("{yaml_path}.x-ferry-ref"), field)?;
            rule.on_string = shape == Shape::String;
            rule.on_object = shape == Shape::Object;
            rule.api_version_default = property_default(schema, rule.api_version_field.as_deref());
            rule.kind_default = property_default(schema, rule.kind_field.as_deref());
            node.rules
                .push(Annotated::new(Rule::Ref(rule), origin("x-ferry-ref")));
        } else if ext.contains_key(KUSTOMIZE_KIND) || ext.contains_key(KUSTOMIZE_API_VERSION) {
            let text = |key: &str| ext.get(key).and_then(Value::as_str).map(str::to_string);
            let rule = RefRule {
                api_version: text(KUSTOMIZE_API_VERSION),
                kind: text(KUSTOMIZE_KIND),
                api_version_field: None,
                kind_field: None,
                name_field: text(KUSTOMIZE_NAME_KEY).unwrap_or_else(|| "name".into()),
                namespace_field: None,
                passthrough: false,
                on_string: shape == Shape::String,
                api_version_default: None,
                kind_default: None,
                on_object: shape == Shape::Object,
                format: RefFormat::Name,
                produced: false,
            };
            if rule.api_version.is_none() || rule.kind.is_none() {
                return Err(self.annotation_error(
                    yaml_path,
                    field,
                    format!(
                        "{KUSTOMIZE_API_VERSION} and {KUSTOMIZE_KIND} must both be set to strings"
                    ),
                ));
            }
            node.rules
                .push(Annotated::new(Rule::Ref(rule), origin(KUSTOMIZE_KIND)));
        }
        Ok(())
    }

    /// The annotations of names a tenant owns: `x-ferry-namespace` as a mapping (or on a
    /// list), `x-ferry-host`, `x-ferry-identity`, `x-ferry-forbid` and
    /// `x-ferry-secret-template`. On a list, what a value holds applies to its elements and
    /// `empty` to the list itself.
    fn name_rules(
        &mut self,
        schema: &Schema,
        shape: Shape,
        yaml_path: &str,
        field: &str,
        node: &mut Node,
    ) -> Result<()> {
        let ext = &schema.schema_data.extensions;
        let error = |key: &str, sub: Option<String>, message: String| {
            let at = match sub {
                Some(sub) => format!("{yaml_path}.{key}.{sub}"),
                None => format!("{yaml_path}.{key}"),
            };
            self.annotation_error(&at, field, message)
        };
        for key in ["x-ferry-namespace", "x-ferry-host", "x-ferry-identity"] {
            let Some(v) = ext.get(key) else { continue };
            // `x-ferry-namespace: true` on a string is read with the other flags.
            if key == "x-ferry-namespace" && v.is_boolean() && shape != Shape::Array {
                continue;
            }
            let parsed = parse_names(key, v).map_err(|(sub, m)| error(key, sub, m))?;
            let Some(parsed) = parsed else { continue };
            let list = shape == Shape::Array;
            if !list && !matches!(shape, Shape::String | Shape::Unknown) {
                return Err(error(
                    key,
                    None,
                    format!(
                        "{key} expects a string or a list of strings, found type {}",
                        shape.name()
                    ),
                ));
            }
            if parsed.empty == Some(Empty::Tenant) && !list {
                return Err(error(
                    key,
                    Some("empty".into()),
                    "empty: tenant makes an empty list the tenant's namespaces; on a single string use empty: refuse".into(),
                ));
            }
            let origin = self.at(&format!("{yaml_path}.{key}"));
            let values = match list {
                true => &mut node.items.get_or_insert_with(Default::default).rules,
                false => &mut node.rules,
            };
            values.extend(
                parsed
                    .rules
                    .into_iter()
                    .map(|r| Annotated::new(r, origin.clone())),
            );
            if let Some(empty) = parsed.empty {
                node.rules
                    .push(Annotated::new(Rule::Required(empty), origin));
            }
        }
        if let Some(v) = ext.get("x-ferry-forbid") {
            let forbid = parse_forbid(v, "x-ferry-forbid")
                .map_err(|(sub, m)| error("x-ferry-forbid", sub, m))?;
            let origin = self.at(&format!("{yaml_path}.x-ferry-forbid"));
            node.rules
                .push(Annotated::new(Rule::Forbid(forbid), origin));
        }
        if let Some(v) = ext.get("x-ferry-secret-template") {
            if v != &Value::Bool(true) {
                return Err(error(
                    "x-ferry-secret-template",
                    None,
                    format!("x-ferry-secret-template expects true, found {v}"),
                ));
            }
            if !matches!(shape, Shape::Object | Shape::Unknown) {
                return Err(error(
                    "x-ferry-secret-template",
                    None,
                    format!("x-ferry-secret-template marks an object (a Secret's template), found type {}", shape.name()),
                ));
            }
            let origin = self.at(&format!("{yaml_path}.x-ferry-secret-template"));
            node.rules
                .push(Annotated::new(Rule::SecretTemplate, origin));
        }
        Ok(())
    }

    pub(super) fn ref_rule(&self, v: &Value, yaml_path: &str, field: &str) -> Result<RefRule> {
        parse_ref(v, "x-ferry-ref").map_err(|(key, message)| {
            let at = match key {
                Some(key) => format!("{yaml_path}.{key}"),
                None => yaml_path.to_string(),
            };
            self.annotation_error(&at, field, message)
        })
    }
}

/// Reads a reference rule (`x-ferry-ref`, or a field rule's `ref`, called `what` in messages);
/// an error names the key it is about, if any, and what was expected.
pub fn parse_ref(v: &Value, what: &str) -> std::result::Result<RefRule, (Option<String>, String)> {
    let Value::Object(map) = v else {
        return Err((
            None,
            format!(
                "{what} expects a mapping with keys {}, found {v}",
                REF_KEYS.join(", ")
            ),
        ));
    };
    if let Some(key) = map.keys().find(|k| !REF_KEYS.contains(&k.as_str())) {
        return Err((
            Some(key.clone()),
            format!(
                "unknown {what} key {key:?}; expected one of {}",
                REF_KEYS.join(", ")
            ),
        ));
    }
    let text = |key: &str| match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(other) => Err((
            Some(key.to_string()),
            format!("{what}.{key} expects a non-empty string, found {other}"),
        )),
    };
    let flag = |key: &str| match map.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err((
            Some(key.to_string()),
            format!("{what}.{key} expects true or false, found {other}"),
        )),
    };
    let format = match text("format")?.as_deref() {
        None | Some("name") => RefFormat::Name,
        Some("namespacedName") => RefFormat::NamespacedName,
        Some(other) => {
            return Err((
                Some("format".into()),
                format!("{what}.format expects name or namespacedName, found {other:?}"),
            ))
        }
    };
    let rule = RefRule {
        api_version: text("apiVersion")?,
        kind: text("kind")?,
        api_version_field: text("apiVersionField")?,
        kind_field: text("kindField")?,
        name_field: text("nameField")?.unwrap_or_else(|| "name".into()),
        namespace_field: text("namespaceField")?,
        passthrough: flag("passthrough")?,
        on_string: false,
        api_version_default: None,
        kind_default: None,
        on_object: false,
        format,
        produced: flag("produced")?,
    };
    check_ref(&rule, what)?;
    Ok(rule)
}

/// A reference rule's fields, checked together.
fn check_ref(rule: &RefRule, what: &str) -> std::result::Result<(), (Option<String>, String)> {
    if rule.kind.is_none() && rule.kind_field.is_none() {
        return Err((
            None,
            format!("{what} needs kind or kindField (which kind of object does it point at?)"),
        ));
    }
    if rule.api_version.is_none() && rule.api_version_field.is_none() {
        return Err((
            None,
            format!("{what} needs apiVersion or apiVersionField (use \"v1\" for core kinds)"),
        ));
    }
    let fields = [
        ("apiVersionField", &rule.api_version_field),
        ("kindField", &rule.kind_field),
        ("namespaceField", &rule.namespace_field),
        ("nameField", &Some(rule.name_field.clone())),
    ];
    if let Some((key, Some(value))) = fields
        .iter()
        .find(|(_, v)| v.as_deref().is_some_and(|v| v.starts_with(RESERVED_PREFIX)))
    {
        return Err((
            Some(key.to_string()),
            format!("{what}.{key}: {value:?} is under {RESERVED_PREFIX}, whose keys are ferry's"),
        ));
    }
    if rule.produced && rule.format == RefFormat::NamespacedName {
        return Err((
            Some("produced".into()),
            format!("{what}.produced: a produced reference names its namespace in a namespaceField (mapped like any reference's), not as namespace/name"),
        ));
    }
    if rule.format == RefFormat::NamespacedName
        && (rule.api_version.is_none()
            || rule.kind.is_none()
            || rule.api_version_field.is_some()
            || rule.kind_field.is_some()
            || rule.namespace_field.is_some())
    {
        return Err((
            Some("format".into()),
            format!("{what}.format namespacedName reads the namespace from the string itself: it takes a fixed apiVersion and kind, and no apiVersionField, kindField or namespaceField"),
        ));
    }
    Ok(())
}

/// What `x-ferry-namespace` (as a mapping), `x-ferry-host` or `x-ferry-identity` (or the
/// field rule action of the same name) says: the rules of each value, and what an absent or
/// empty list means.
#[derive(Debug, PartialEq, Eq)]
pub struct NameRules {
    /// Rules on each value (each element of a list).
    pub rules: Vec<Rule>,
    /// `empty`: on the list (or string) itself.
    pub empty: Option<Empty>,
}

/// The glob syntax `pattern` accepts: Velero's, Kyverno's and most operators' `*` and `?`.
pub const PATTERN_GLOB: &str = "glob";

/// Reads `x-ferry-namespace`, `x-ferry-host` or `x-ferry-identity` (`what`); `None` for
/// `false`. An error names the key it is about, if any, and what was expected.
pub fn parse_names(
    what: &str,
    v: &Value,
) -> std::result::Result<Option<NameRules>, (Option<String>, String)> {
    let base = |v: &Value| -> std::result::Result<Option<Rule>, String> {
        match (what, v) {
            (_, Value::Bool(false)) => Ok(None),
            ("x-ferry-namespace", Value::Bool(true)) => Ok(Some(Rule::Namespace)),
            ("x-ferry-identity", Value::Bool(true)) => Ok(Some(Rule::Identity)),
            ("x-ferry-host", v) => hosts(v).map(|h| Some(Rule::Host(h))),
            (_, other) => Err(format!("{what} expects true, or a mapping, found {other}")),
        }
    };
    let Value::Object(map) = v else {
        return base(v)
            .map(|r| {
                r.map(|r| NameRules {
                    rules: vec![r],
                    empty: None,
                })
            })
            .map_err(|m| (None, m));
    };
    let keys: &[&str] = match what {
        "x-ferry-namespace" => &["empty", "pattern", "keep"],
        "x-ferry-host" => &["type", "empty", "short"],
        _ => &["empty"],
    };
    if let Some(key) = map.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err((
            Some(key.clone()),
            format!(
                "unknown {what} key {key:?}; expected one of {}",
                keys.join(", ")
            ),
        ));
    }
    let empty = match map.get("empty").map(|v| v.as_str()) {
        None => None,
        Some(Some("refuse")) => Some(Empty::Refuse),
        Some(Some("tenant")) if what == "x-ferry-namespace" => Some(Empty::Tenant),
        Some(_) => {
            let expected = match what {
                "x-ferry-namespace" => "refuse or tenant",
                _ => "refuse",
            };
            return Err((
                Some("empty".into()),
                format!("{what}.empty expects {expected}, found {}", map["empty"]),
            ));
        }
    };
    let mut rules = Vec::new();
    match (what, map.get("pattern")) {
        (_, None) => {}
        (_, Some(Value::String(p))) if p == PATTERN_GLOB => rules.push(Rule::Pattern),
        (_, Some(other)) => {
            return Err((
                Some("pattern".into()),
                format!("{what}.pattern expects {PATTERN_GLOB:?} (`*` and `?`), found {other}"),
            ))
        }
    }
    if rules.is_empty() {
        let plain = match what {
            "x-ferry-host" => map.get("type").ok_or((
                None,
                "x-ferry-host as a mapping needs type: service, external or [service, external]"
                    .to_string(),
            ))?,
            _ => &Value::Bool(true),
        };
        rules.extend(base(plain).map_err(|m| (Some("type".to_string()), m))?);
    }
    match map.get("short").map(|v| v.as_str()) {
        None | Some(Some("keep")) => {}
        Some(Some("refuse")) => rules.push(Rule::Qualified),
        Some(_) => {
            return Err((
                Some("short".into()),
                format!(
                    "{what}.short expects refuse or keep, found {}",
                    map["short"]
                ),
            ))
        }
    }
    if let Some(keep) = map.get("keep") {
        let literals = keep_literals(keep).map_err(|m| (Some("keep".to_string()), m))?;
        rules.insert(0, Rule::Keep(literals));
    }
    Ok(Some(NameRules { rules, empty }))
}

/// `keep`: a list of literals that are not namespace names (otherwise they would be one of
/// the tenant's namespaces left unmapped).
fn keep_literals(v: &Value) -> std::result::Result<Vec<String>, String> {
    let Some(items) = v.as_array() else {
        return Err(format!("keep expects a list of strings, found {v}"));
    };
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(s) if crate::naming::dns_label_problem(s).is_none() => Err(format!(
                "keep: {s:?} is a namespace name, which would pass unmapped; keep takes only values that are not namespaces (\".\")"
            )),
            Some(s) if s.is_empty() || s.contains('*') => Err(format!(
                "keep: {s:?} would let a tenant reach every namespace; keep takes literals such as \".\""
            )),
            Some(s) => Ok(s.to_string()),
            None => Err(format!("keep expects strings, found {item}")),
        })
        .collect()
}

/// The `type` of `x-ferry-host`: `service`, `external` or both.
fn hosts(v: &Value) -> std::result::Result<Hosts, String> {
    let one = |v: &Value| match v.as_str() {
        Some("service") => Ok(Hosts::Service),
        Some("external") => Ok(Hosts::External),
        _ => Err(format!(
            "x-ferry-host expects service, external or [service, external], found {v}"
        )),
    };
    match v {
        Value::Array(items) if !items.is_empty() && items.len() <= 2 => {
            let kinds = items
                .iter()
                .map(one)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(
                match (
                    kinds.contains(&Hosts::Service),
                    kinds.contains(&Hosts::External),
                ) {
                    (true, true) => Hosts::Both,
                    (true, false) => Hosts::Service,
                    _ => Hosts::External,
                },
            )
        }
        other => one(other),
    }
}

/// Reads `x-ferry-forbid` (a reason, or `{reason, unless}`) or a field rule's `forbid`.
pub fn parse_forbid(
    v: &Value,
    what: &str,
) -> std::result::Result<Forbid, (Option<String>, String)> {
    let reason = |v: &Value| {
        match v.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
        _ => Err((
            None,
            format!("{what} expects the reason the field is forbidden (a tenant reads it in the refusal), found {v}"),
        )),
    }
    };
    match v {
        Value::Object(map) => {
            if let Some(key) = map.keys().find(|k| *k != "reason" && *k != "unless") {
                return Err((
                    Some(key.clone()),
                    format!("unknown {what} key {key:?}; expected reason, unless"),
                ));
            }
            let reason = reason(map.get("reason").unwrap_or(&Value::Null))
                .map_err(|(_, m)| (Some("reason".to_string()), m))?;
            let unless = match map.get("unless") {
                None => Vec::new(),
                Some(Value::Array(values)) => values.clone(),
                Some(other) => {
                    return Err((
                        Some("unless".into()),
                        format!(
                        "{what}.unless expects a list of the values still allowed, found {other}"
                    ),
                    ))
                }
            };
            Ok(Forbid { reason, unless })
        }
        other => Ok(Forbid {
            reason: reason(other)?,
            unless: Vec::new(),
        }),
    }
}

/// The rule of `x-ferry-selector: {over: tenant|published}` (a field rule's `selector: {...}`).
pub fn selector_over(value: &Value) -> std::result::Result<Rule, String> {
    let Some(map) = value.as_object() else {
        return Err(format!(
            "expected true or {{over: tenant|published}}, found {value}"
        ));
    };
    if let Some(key) = map.keys().find(|k| *k != "over") {
        return Err(format!(
            "unknown key {key:?}; the one key is over: tenant|published"
        ));
    }
    match map.get("over").and_then(Value::as_str) {
        Some("tenant") => Ok(Rule::Selector),
        Some("published") => Ok(Rule::PublishedSelector),
        _ => Err(format!(
            "over: expected tenant (the tenant's own objects) or published (the platform's published objects), found {}",
            map.get("over").map_or("nothing".to_string(), Value::to_string)
        )),
    }
}
