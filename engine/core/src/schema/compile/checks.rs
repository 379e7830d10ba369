//! Checks across schema nodes: the fields a reference names exist and are mapped once,
//! nothing removes a field inside arrays and maps, annotations below what is compiled, and the
//! lints of `ferry check`.

use indexmap::IndexMap;
use openapiv3::{AdditionalProperties, ReferenceOr, Schema, SchemaKind, Type};

use super::{join, shape_of, Compiler, Shape};
use crate::schema::{Annotated, Error, Node, Result, Rule};

impl Compiler<'_> {
    /// The fields a reference names exist, and a namespace field is mapped once:
    /// `x-ferry-namespace` on the namespace field of a reference (its own, or a string
    /// reference's sibling), or one sibling serving two string references, would map it twice.
    /// `properties` are those of `node`'s object (a reference object's own fields, or the
    /// siblings of its string references); an object without declared properties is open.
    pub(super) fn reference_fields(
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
    pub(super) fn no_removal_below(
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

    /// Whether `schema` or anything below it (through `$ref`s, each followed once) carries an
    /// `x-ferry-` annotation.
    pub(super) fn has_annotations(&self, schema: &Schema, seen: &mut Vec<String>) -> bool {
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
    pub(super) fn lint(&mut self, schema: &Schema, name: &str, yaml_path: &str, field: &str) {
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
