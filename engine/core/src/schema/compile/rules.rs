//! Reading the `x-ferry-*` (and kustomize object-ref) extensions of one schema node into
//! rules, each checked against the shape of the field it is on.

use openapiv3::Schema;
use serde_json::Value;

use super::{
    properties_of, property_default, Compiler, Shape, EXTENSIONS, KUSTOMIZE_API_VERSION,
    KUSTOMIZE_KIND, KUSTOMIZE_NAME_KEY, REF_KEYS,
};
use crate::naming::RESERVED_PREFIX;
use crate::schema::{Annotated, Node, RefFormat, RefRule, Result, Rule};

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
        let mut defaulted = Vec::new();
        let origin = |key: &str| self.at(&format!("{yaml_path}.{key}"));
        let expect_true = |key: &str, v: &Value| -> Result<bool> {
            match v {
                Value::Bool(b) => Ok(*b),
                other => Err(self.annotation_error(
                    &format!("{yaml_path}.{key}"),
                    field,
                    format!("{key} expects true or false, found {other}"),
                )),
            }
        };
        let need_shape = |key: &str, want: &[Shape]| -> Result<()> {
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
        };
        if let Some(v) = ext.get("x-ferry-namespace") {
            if expect_true("x-ferry-namespace", v)? {
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
        for (key, rule) in [
            ("x-ferry-selector", Rule::Selector),
            ("x-ferry-namespace-selector", Rule::NamespaceSelector),
        ] {
            let Some(v) = ext.get(key) else { continue };
            if !expect_true(key, v)? {
                continue;
            }
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
        if let Some(v) = ext.get("x-ferry-ref") {
            need_shape("x-ferry-ref", &[Shape::String, Shape::Object])?;
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
    if rule.produced && (rule.namespace_field.is_some() || format == RefFormat::NamespacedName) {
        return Err((
            Some("produced".into()),
            format!("{what}.produced: what is produced for an object is in the object's own namespace; a produced reference takes no namespaceField or namespacedName"),
        ));
    }
    if format == RefFormat::NamespacedName
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
    Ok(rule)
}
