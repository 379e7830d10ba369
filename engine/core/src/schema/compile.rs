//! Compiles an OpenAPI v3 schema with `x-ferry-*` annotations into a [`Plan`].

use std::path::Path;

use indexmap::IndexMap;
use openapiv3::{AdditionalProperties, ReferenceOr, Schema, SchemaKind, Type};
use serde_json::Value;

use super::{Annotated, Error, Node, Plan, RefRule, Result, Rule};
use crate::locate::{Location, Positions};

/// The annotations ferry reads; any other `x-ferry-` key is an error.
pub const EXTENSIONS: &[&str] = &[
    "x-ferry-namespace",
    "x-ferry-ref",
    "x-ferry-selector",
    "x-ferry-namespace-selector",
    "x-ferry-text",
    "x-ferry-owner",
    "x-ferry-drop",
];

const KUSTOMIZE_API_VERSION: &str = "x-kubernetes-object-ref-api-version";
const KUSTOMIZE_KIND: &str = "x-kubernetes-object-ref-kind";
const KUSTOMIZE_NAME_KEY: &str = "x-kubernetes-object-ref-name-key";

const REF_KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "apiVersionField",
    "kindField",
    "nameField",
    "namespaceField",
    "passthrough",
];

/// Deepest schema nesting followed; recursive schemas stop here.
const MAX_DEPTH: usize = 64;

/// Most schema nodes one kind's schema may expand to through `$ref`s. The largest real CRDs
/// (Gateway API, cert-manager's Certificate, Argo CD's Application) have a few thousand; a
/// hostile chain of definitions each referring twice to the previous one doubles per level.
const MAX_NODES: usize = 200_000;

/// Where a schema comes from, for positions and `$ref` resolution.
pub struct Source<'a> {
    /// The schema file.
    pub file: &'a Path,
    /// Node positions of the file.
    pub positions: &'a Positions,
    /// `components.schemas` of an OpenAPI document, for `$ref`.
    pub components: Option<&'a IndexMap<String, ReferenceOr<Schema>>>,
}

/// The broad type of a schema node, enough to check where an annotation may stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    String,
    Object,
    Array,
    Other(&'static str),
    Unknown,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::String => "string",
            Shape::Object => "object",
            Shape::Array => "array",
            Shape::Other(n) => n,
            Shape::Unknown => "untyped",
        }
    }
}

/// A schema held directly or boxed, as openapiv3 does in different places.
trait AsSchema {
    fn as_schema(&self) -> &Schema;
}

impl AsSchema for Schema {
    fn as_schema(&self) -> &Schema {
        self
    }
}

impl AsSchema for Box<Schema> {
    fn as_schema(&self) -> &Schema {
        self
    }
}

struct Compiler<'a> {
    src: &'a Source<'a>,
    ref_stack: Vec<String>,
    known_paths: Vec<String>,
    open_paths: Vec<String>,
    suspicious: Vec<(String, Location)>,
    warnings: Vec<(Location, String)>,
    visited: usize,
}

/// Compiles `schema`, found at `yaml_path` in the source file.
pub fn compile(schema: &Schema, yaml_path: &str, src: &Source<'_>) -> Result<Plan> {
    let mut compiler = Compiler {
        src,
        ref_stack: Vec::new(),
        known_paths: Vec::new(),
        open_paths: Vec::new(),
        suspicious: Vec::new(),
        warnings: Vec::new(),
        visited: 0,
    };
    let root = compiler.schema(schema, yaml_path, "", 0)?;
    for key in ["apiVersion", "kind", "metadata"] {
        if let Some((path, rule)) = root.fields.get(key).and_then(|n| {
            let mut rules = Vec::new();
            n.walk(key, &mut rules);
            rules.into_iter().next()
        }) {
            return Err(Error::Annotation {
                at: rule.origin.clone(),
                field: path,
                message: format!(
                    "{} on {key}: ferry sets the type and metadata of what it writes itself (names, namespaces, ownership), annotations may not change them",
                    rule.rule.name()
                ),
            });
        }
    }
    Ok(Plan {
        has_text: root.leads_to(&|r| matches!(r, Rule::Text)),
        file: src.file.display().to_string(),
        root,
        known_paths: compiler.known_paths,
        open_paths: compiler.open_paths,
        suspicious: compiler.suspicious,
        warnings: compiler.warnings,
        plural: None,
        has_status_subresource: false,
        crd_scope: None,
    })
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_string()
    } else {
        format!("{path}.{seg}")
    }
}

impl Compiler<'_> {
    fn at(&self, yaml_path: &str) -> Location {
        self.src.positions.at(yaml_path)
    }

    fn annotation_error(&self, yaml_path: &str, field: &str, message: String) -> Error {
        Error::Annotation {
            at: self.at(yaml_path),
            field: if field.is_empty() {
                "(root)".into()
            } else {
                field.into()
            },
            message,
        }
    }

    fn reference<T: AsSchema>(
        &mut self,
        r: &ReferenceOr<T>,
        yaml_path: &str,
        field: &str,
        depth: usize,
    ) -> Result<Node> {
        match r {
            ReferenceOr::Item(s) => self.schema(s.as_schema(), yaml_path, field, depth),
            ReferenceOr::Reference { reference } => {
                let Some(name) = reference.strip_prefix("#/components/schemas/") else {
                    return Err(Error::Parse {
                        at: self.at(yaml_path),
                        message: format!(
                            "$ref {reference:?}: only local references (#/components/schemas/NAME) are supported"
                        ),
                    });
                };
                if self.ref_stack.iter().any(|r| r == name) {
                    // A recursive schema (JSONSchemaProps): it is not unrolled, so an annotation
                    // inside it would hold only at the first level. Refuse rather than
                    // silently leave deeper levels unmapped.
                    let target = self.src.components.and_then(|c| c.get(name));
                    if let Some(ReferenceOr::Item(s)) = target {
                        if self.has_annotations(s, &mut Vec::new()) {
                            return Err(self.annotation_error(
                                yaml_path,
                                field,
                                format!("{name} refers to itself (through $ref) and carries x-ferry-* annotations; annotations inside a recursive schema are not supported (they would hold only at the first level)"),
                            ));
                        }
                    }
                    return Ok(Node::default());
                }
                let target = self.src.components.and_then(|c| c.get(name));
                let Some(target) = target else {
                    return Err(Error::Parse {
                        at: self.at(yaml_path),
                        message: format!(
                            "$ref {reference:?} names no schema in components.schemas"
                        ),
                    });
                };
                self.ref_stack.push(name.to_string());
                let target_path = format!("components.schemas.{name}");
                let node = self.reference(target, &target_path, field, depth);
                self.ref_stack.pop();
                node
            }
        }
    }

    fn schema(
        &mut self,
        schema: &Schema,
        yaml_path: &str,
        field: &str,
        depth: usize,
    ) -> Result<Node> {
        self.visited += 1;
        if self.visited > MAX_NODES {
            return Err(Error::Parse {
                at: self.at(yaml_path),
                message: format!("the schema expands to more than {MAX_NODES} nodes through $ref (a chain of references that multiplies); simplify it"),
            });
        }
        if depth > MAX_DEPTH {
            if self.has_annotations(schema, &mut Vec::new()) {
                return Err(self.annotation_error(
                    yaml_path,
                    field,
                    format!("x-ferry-* annotations deeper than {MAX_DEPTH} levels are not supported (they would be ignored)"),
                ));
            }
            return Ok(Node::default());
        }
        let mut node = Node::default();
        let shape = shape_of(schema);
        self.rules(schema, shape, yaml_path, field, &mut node)?;
        if schema
            .schema_data
            .extensions
            .get("x-kubernetes-preserve-unknown-fields")
            == Some(&Value::Bool(true))
        {
            self.open_paths.push(field.to_string());
        }

        let mut properties = None;
        let mut additional = None;
        let mut items = None;
        let mut branches: Vec<(&'static str, &Vec<ReferenceOr<Schema>>)> = Vec::new();
        match &schema.schema_kind {
            SchemaKind::Type(Type::Object(o)) => {
                properties = Some(&o.properties);
                additional = o.additional_properties.as_ref();
            }
            SchemaKind::Type(Type::Array(a)) => items = a.items.as_ref(),
            SchemaKind::AllOf { all_of } => branches.push(("allOf", all_of)),
            SchemaKind::AnyOf { any_of } => branches.push(("anyOf", any_of)),
            SchemaKind::OneOf { one_of } => branches.push(("oneOf", one_of)),
            SchemaKind::Any(any) => {
                properties = Some(&any.properties);
                additional = any.additional_properties.as_ref();
                items = any.items.as_ref();
                branches.push(("allOf", &any.all_of));
                branches.push(("anyOf", &any.any_of));
                branches.push(("oneOf", &any.one_of));
            }
            _ => {}
        }
        let is_ref = schema.schema_data.extensions.contains_key("x-ferry-ref")
            || schema.schema_data.extensions.contains_key(KUSTOMIZE_KIND);
        let ref_without_namespace = node
            .rules
            .iter()
            .any(|a| matches!(&a.rule, Rule::Ref(r) if r.namespace_field.is_none()));
        if let Some(properties) = properties {
            for (name, prop) in properties {
                let child_yaml = format!("{yaml_path}.properties.{name}");
                let child_field = join(field, name);
                self.known_paths.push(child_field.clone());
                // The fields of an annotated reference are its name, kind and namespace.
                if let (ReferenceOr::Item(s), false) = (prop, is_ref) {
                    self.lint(s, name, &child_yaml, &child_field);
                }
                if ref_without_namespace && name.to_ascii_lowercase().contains("namespace") {
                    let how = if name == "namespace" {
                        "ferry maps it as the reference's namespace; say so with namespaceField: namespace"
                    } else {
                        "it is not mapped: name it in the annotation's namespaceField if it holds the target's namespace"
                    };
                    self.warnings.push((
                        self.at(&child_yaml),
                        format!("{child_field} is a namespace field of a reference whose x-ferry-ref has no namespaceField; {how}"),
                    ));
                }
                let child = self.reference(prop, &child_yaml, &child_field, depth + 1)?;
                if !child.is_empty() {
                    node.fields.entry(name.clone()).or_default().merge(child);
                }
            }
        }
        self.reference_fields(&node, field, properties)?;
        if let Some(AdditionalProperties::Schema(s)) = additional {
            self.known_paths.push(join(field, "*"));
            let child_yaml = format!("{yaml_path}.additionalProperties");
            let child = self.reference(s.as_ref(), &child_yaml, &join(field, "*"), depth + 1)?;
            self.no_removal_below(&child, &child_yaml, &join(field, "*"), "a map's values")?;
            if !child.is_empty() {
                node.values = Some(Box::new(child));
            }
        }
        if let Some(item) = items {
            let child_yaml = format!("{yaml_path}.items");
            let child_field = format!("{field}[*]");
            self.known_paths.push(child_field.clone());
            let child = self.reference(item, &child_yaml, &child_field, depth + 1)?;
            self.no_removal_below(&child, &child_yaml, &child_field, "an array's items")?;
            if !child.is_empty() {
                node.items = Some(Box::new(child));
            }
        }
        for (key, list) in branches {
            for (i, branch) in list.iter().enumerate() {
                let child =
                    self.reference(branch, &format!("{yaml_path}.{key}[{i}]"), field, depth + 1)?;
                node.merge(child);
            }
        }
        Ok(node)
    }

    /// The fields a reference names exist, and a namespace field is mapped once:
    /// `x-ferry-namespace` on the namespace field of a reference (its own, or a string
    /// reference's sibling), or one sibling serving two string references, would map it twice.
    /// `properties` are those of `node`'s object (a reference object's own fields, or the
    /// siblings of its string references); an object without declared properties is open.
    fn reference_fields(
        &self,
        node: &Node,
        field: &str,
        properties: Option<&IndexMap<String, ReferenceOr<Box<Schema>>>>,
    ) -> Result<()> {
        let refs = node
            .rules
            .iter()
            .filter_map(|a| match &a.rule {
                Rule::Ref(r) if !r.on_string => Some((a, r, r.namespace_key(true))),
                _ => None,
            })
            .chain(node.fields.values().flat_map(|child| {
                child.rules.iter().filter_map(|a| match &a.rule {
                    Rule::Ref(r) if r.on_string => Some((a, r, r.sibling_namespace())),
                    _ => None,
                })
            }));
        let mut sibling_namespaces: Vec<(&str, &Annotated)> = Vec::new();
        for (annotated, rule, key) in refs {
            let declared = [
                ("apiVersionField", &rule.api_version_field),
                ("kindField", &rule.kind_field),
                ("namespaceField", &rule.namespace_field),
            ];
            let missing = declared
                .iter()
                .filter_map(|(what, key)| Some((what, key.as_deref()?)))
                .chain((!rule.on_string).then_some((&"nameField", rule.name_field.as_str())))
                .find(|(_, key)| {
                    properties.is_some_and(|p| !p.is_empty() && !p.contains_key(*key))
                });
            if let Some((what, key)) = missing {
                return Err(Error::Annotation {
                    at: annotated.origin.clone(),
                    field: field.to_string(),
                    message: format!(
                        "x-ferry-ref.{what} names {key:?}, which is not a field here (a typo would leave the real field unmapped)"
                    ),
                });
            }
            let Some(key) = key else { continue };
            if rule.on_string {
                if let Some((_, first)) = sibling_namespaces.iter().find(|(k, _)| *k == key) {
                    return Err(Error::Annotation {
                        at: annotated.origin.clone(),
                        field: join(field, key),
                        message: format!(
                            "{key} is the namespaceField of two references (also the one at {}); it would be mapped twice",
                            first.origin
                        ),
                    });
                }
                sibling_namespaces.push((key, annotated));
            }
            if let Some(ns) = node
                .fields
                .get(key)
                .and_then(|c| c.rules.iter().find(|a| matches!(a.rule, Rule::Namespace)))
            {
                return Err(Error::Annotation {
                    at: ns.origin.clone(),
                    field: join(field, key),
                    message: format!(
                        "x-ferry-namespace on the namespace field of the x-ferry-ref at {} would map it twice; the reference maps it already, so remove x-ferry-namespace",
                        annotated.origin
                    ),
                });
            }
        }
        Ok(())
    }

    /// `x-ferry-owner` and `x-ferry-drop` remove a field; inside arrays and maps that would
    /// need per-element merging on the way up, so they must be put on the array or map.
    fn no_removal_below(
        &self,
        node: &Node,
        yaml_path: &str,
        field: &str,
        what: &str,
    ) -> Result<()> {
        let mut rules = Vec::new();
        node.walk(field, &mut rules);
        if let Some((path, rule)) = rules
            .iter()
            .find(|(_, a)| matches!(a.rule, Rule::OwnerSuper | Rule::Drop))
        {
            return Err(Error::Annotation {
                at: rule.origin.clone(),
                field: path.clone(),
                message: format!(
                    "{} is not supported inside {what} ({yaml_path}); annotate the whole field instead",
                    rule.rule.name()
                ),
            });
        }
        Ok(())
    }

    fn rules(
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
                node.rules.push(Annotated {
                    rule: Rule::Namespace,
                    origin: origin("x-ferry-namespace"),
                });
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
            node.rules.push(Annotated {
                rule,
                origin: origin(key),
            });
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
                node.rules.push(Annotated {
                    rule: Rule::Text,
                    origin: origin("x-ferry-text"),
                });
            }
        }
        if let Some(v) = ext.get("x-ferry-drop") {
            if expect_true("x-ferry-drop", v)? {
                node.rules.push(Annotated {
                    rule: Rule::Drop,
                    origin: origin("x-ferry-drop"),
                });
            }
        }
        if let Some(v) = ext.get("x-ferry-owner") {
            match v.as_str() {
                Some("super") => node.rules.push(Annotated {
                    rule: Rule::OwnerSuper,
                    origin: origin("x-ferry-owner"),
                }),
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
            node.rules.push(Annotated {
                rule: Rule::Ref(rule),
                origin: origin("x-ferry-ref"),
            });
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
            node.rules.push(Annotated {
                rule: Rule::Ref(rule),
                origin: origin(KUSTOMIZE_KIND),
            });
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

    fn ref_rule(&self, v: &Value, yaml_path: &str, field: &str) -> Result<RefRule> {
        let err = |m: String| self.annotation_error(yaml_path, field, m);
        let Value::Object(map) = v else {
            return Err(err(format!(
                "x-ferry-ref expects a mapping with keys {}, found {v}",
                REF_KEYS.join(", ")
            )));
        };
        for key in map.keys() {
            if !REF_KEYS.contains(&key.as_str()) {
                return Err(self.annotation_error(
                    &format!("{yaml_path}.{key}"),
                    field,
                    format!(
                        "unknown x-ferry-ref key {key:?}; expected one of {}",
                        REF_KEYS.join(", ")
                    ),
                ));
            }
        }
        let text = |key: &str| -> Result<Option<String>> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(other) => Err(self.annotation_error(
                    &format!("{yaml_path}.{key}"),
                    field,
                    format!("x-ferry-ref.{key} expects a non-empty string, found {other}"),
                )),
            }
        };
        let passthrough = match map.get("passthrough") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(err(format!(
                    "x-ferry-ref.passthrough expects true or false, found {other}"
                )))
            }
        };
        let rule = RefRule {
            api_version: text("apiVersion")?,
            kind: text("kind")?,
            api_version_field: text("apiVersionField")?,
            kind_field: text("kindField")?,
            name_field: text("nameField")?.unwrap_or_else(|| "name".into()),
            namespace_field: text("namespaceField")?,
            passthrough,
            on_string: false,
            api_version_default: None,
            kind_default: None,
            on_object: false,
        };
        if rule.kind.is_none() && rule.kind_field.is_none() {
            return Err(err(
                "x-ferry-ref needs kind or kindField (which kind of object does it point at?)"
                    .into(),
            ));
        }
        if rule.api_version.is_none() && rule.api_version_field.is_none() {
            return Err(err(
                "x-ferry-ref needs apiVersion or apiVersionField (use \"v1\" for core kinds)"
                    .into(),
            ));
        }
        Ok(rule)
    }

    /// Whether `schema` or anything below it (through `$ref`s, each followed once) carries an
    /// `x-ferry-` annotation.
    fn has_annotations(&self, schema: &Schema, seen: &mut Vec<String>) -> bool {
        if schema
            .schema_data
            .extensions
            .keys()
            .any(|k| k.starts_with("x-ferry-"))
        {
            return true;
        }
        let mut children: Vec<&ReferenceOr<Schema>> = Vec::new();
        let mut boxed: Vec<&ReferenceOr<Box<Schema>>> = Vec::new();
        let mut additional = None;
        match &schema.schema_kind {
            SchemaKind::Type(Type::Object(o)) => {
                boxed.extend(o.properties.values());
                additional = o.additional_properties.as_ref();
            }
            SchemaKind::Type(Type::Array(a)) => boxed.extend(a.items.as_ref()),
            SchemaKind::AllOf { all_of: l }
            | SchemaKind::AnyOf { any_of: l }
            | SchemaKind::OneOf { one_of: l } => children.extend(l),
            SchemaKind::Any(any) => {
                boxed.extend(any.properties.values());
                boxed.extend(any.items.as_ref());
                additional = any.additional_properties.as_ref();
                children.extend(any.all_of.iter().chain(&any.any_of).chain(&any.one_of));
            }
            _ => {}
        }
        if let Some(AdditionalProperties::Schema(s)) = additional {
            children.push(s);
        }
        let follow = |reference: &str, seen: &mut Vec<String>| -> bool {
            let Some(name) = reference.strip_prefix("#/components/schemas/") else {
                return false;
            };
            if seen.iter().any(|s| s == name) {
                return false;
            }
            seen.push(name.to_string());
            match self.src.components.and_then(|c| c.get(name)) {
                Some(ReferenceOr::Item(s)) => self.has_annotations(s, seen),
                _ => false,
            }
        };
        children.into_iter().any(|c| match c {
            ReferenceOr::Item(s) => self.has_annotations(s, seen),
            ReferenceOr::Reference { reference } => follow(reference, seen),
        }) || boxed.into_iter().any(|c| match c {
            ReferenceOr::Item(s) => self.has_annotations(s, seen),
            ReferenceOr::Reference { reference } => follow(reference, seen),
        })
    }

    /// Notes unannotated string fields whose names suggest a namespace or a reference.
    fn lint(&mut self, schema: &Schema, name: &str, yaml_path: &str, field: &str) {
        let ext = &schema.schema_data.extensions;
        let annotated = ext
            .keys()
            .any(|k| k.starts_with("x-ferry-") || k.starts_with("x-kubernetes-object-ref"));
        if annotated {
            return;
        }
        let lower = name.to_ascii_lowercase();
        let looks_like_ns = lower.contains("namespace") && shape_of(schema) == Shape::String;
        // An object reference to a Kubernetes object has a name (external-secrets' remoteRef,
        // a key in a vault, has not).
        let has_name = match &schema.schema_kind {
            SchemaKind::Type(Type::Object(o)) => o.properties.contains_key("name"),
            SchemaKind::Any(a) => a.properties.contains_key("name"),
            _ => false,
        };
        let looks_like_ref = name.ends_with("Ref")
            && match shape_of(schema) {
                Shape::String => true,
                Shape::Object => has_name,
                _ => false,
            };
        if looks_like_ns || looks_like_ref {
            self.suspicious
                .push((field.to_string(), self.at(yaml_path)));
        }
    }
}

/// The properties of an object schema (none for other shapes).
fn properties_of(schema: &Schema) -> Option<&IndexMap<String, ReferenceOr<Box<Schema>>>> {
    match &schema.schema_kind {
        SchemaKind::Type(Type::Object(o)) => Some(&o.properties),
        SchemaKind::Any(a) => Some(&a.properties),
        _ => None,
    }
}

/// The string `default` of property `name` of an object schema.
fn property_default(schema: &Schema, name: Option<&str>) -> Option<String> {
    match properties_of(schema)?.get(name?)? {
        ReferenceOr::Item(s) => s.schema_data.default.as_ref()?.as_str().map(str::to_string),
        ReferenceOr::Reference { .. } => None,
    }
}

fn shape_of(schema: &Schema) -> Shape {
    match &schema.schema_kind {
        SchemaKind::Type(Type::String(_)) => Shape::String,
        SchemaKind::Type(Type::Object(_)) => Shape::Object,
        SchemaKind::Type(Type::Array(_)) => Shape::Array,
        SchemaKind::Type(Type::Integer(_)) => Shape::Other("integer"),
        SchemaKind::Type(Type::Number(_)) => Shape::Other("number"),
        SchemaKind::Type(Type::Boolean(_)) => Shape::Other("boolean"),
        SchemaKind::Any(any) => match any.typ.as_deref() {
            Some("string") => Shape::String,
            Some("object") => Shape::Object,
            Some("array") => Shape::Array,
            Some("integer") => Shape::Other("integer"),
            Some("number") => Shape::Other("number"),
            Some("boolean") => Shape::Other("boolean"),
            _ if !any.properties.is_empty() => Shape::Object,
            _ => Shape::Unknown,
        },
        _ => Shape::Unknown,
    }
}
