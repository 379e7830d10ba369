//! Compiles an OpenAPI v3 schema with `x-ferry-*` annotations into a [`Plan`].

use std::path::Path;

use indexmap::IndexMap;
use openapiv3::{AdditionalProperties, ReferenceOr, Schema, SchemaKind, Type};
use serde_json::Value;

use super::{Error, Node, Plan, Result, Rule};
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
    "x-ferry-host",
    "x-ferry-identity",
    "x-ferry-forbid",
    "x-ferry-secret-template",
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
    "format",
    "produced",
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
        if let Some(properties) = properties {
            self.properties(&mut node, properties, (yaml_path, field), depth, is_ref)?;
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
            // Rules of a list annotation stand on its elements already.
            match (&mut node.items, child.is_empty()) {
                (_, true) => {}
                (Some(items), false) => items.merge(child),
                (None, false) => node.items = Some(Box::new(child)),
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

    /// The fields of an object schema at `yaml_path` (data path `field`) into `node`;
    /// `is_ref`: the object is an annotated reference (its fields are its name, kind and
    /// namespace).
    fn properties(
        &mut self,
        node: &mut Node,
        properties: &IndexMap<String, ReferenceOr<Box<Schema>>>,
        (yaml_path, field): (&str, &str),
        depth: usize,
        is_ref: bool,
    ) -> Result<()> {
        let ref_without_namespace = node
            .rules
            .iter()
            .any(|a| matches!(&a.rule, Rule::Ref(r) if r.namespace_field.is_none()));
        for (name, prop) in properties {
            let child_yaml = format!("{yaml_path}.properties.{name}");
            let child_field = join(field, name);
            self.known_paths.push(child_field.clone());
            // The fields of an annotated reference are its name, kind and namespace.
            if let (ReferenceOr::Item(s), false) = (prop, is_ref) {
                self.lint(s, name, &child_yaml, &child_field);
            }
            let templated = field
                .rsplit('.')
                .next()
                .is_some_and(|last| last.to_ascii_lowercase().ends_with("template"));
            if name == "type" && templated && !node.has(|r| matches!(r, Rule::SecretTemplate)) {
                self.warnings.push((
                    self.at(&child_yaml),
                    format!("{child_field} may template the type of a Secret a super-side controller writes (a service-account token would be filled with a credential for the super cluster): mark {field} x-ferry-secret-template: true if it does"),
                ));
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
        Ok(())
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

mod checks;
mod rules;

pub use rules::{parse_forbid, parse_names, parse_ref, selector_over, NameRules, PATTERN_GLOB};
