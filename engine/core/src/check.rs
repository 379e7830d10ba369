//! `ferry check`: lints a loaded policy for likely mistakes that are not errors.

use crate::policy::{Direction, Policy};
use crate::schema::load::group_of;
use crate::schema::Rule;

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Where (file:line:column).
    pub at: String,
    /// What looks wrong and what to do.
    pub message: String,
}

/// Warnings for a policy that loaded without errors.
pub fn warnings(policy: &Policy) -> Vec<Finding> {
    let mut out = Vec::new();
    for resource in &policy.resources {
        // Core kinds (Secret, ConfigMap) hold data, not references; a custom kind without a
        // schema is more likely an oversight.
        let custom = !resource.group_kind.group.is_empty();
        let no_rules = resource.plan.file.is_empty() && resource.plan.root.is_empty();
        if custom && no_rules && resource.direction == Direction::ToSuper {
            out.push(Finding {
                at: resource.at.to_string(),
                message: format!(
                    "{} has no schema and no field rules: no field is rewritten, so namespaces and references in its spec would cross unchanged",
                    resource.group_kind
                ),
            });
        }
        // A fromSuper kind's fields are the platform's: nothing of the tenant's is rewritten
        // in them, so unannotated namespace-like fields are no mistake there.
        let suspicious = match resource.direction {
            Direction::ToSuper => resource.plan.suspicious.as_slice(),
            Direction::FromSuper | Direction::Produced => &[],
        };
        for (field, at) in suspicious {
            out.push(Finding {
                at: at.to_string(),
                message: format!(
                    "{}: {field} looks like a namespace or a reference but has no x-ferry-* annotation",
                    resource.group_kind
                ),
            });
        }
        for (at, message) in &resource.plan.warnings {
            out.push(Finding {
                at: at.to_string(),
                message: format!("{}: {message}", resource.group_kind),
            });
        }
        for (path, annotated) in resource.plan.rules() {
            let Rule::Ref(r) = &annotated.rule else {
                continue;
            };
            if r.kind_field.is_some() || r.api_version_field.is_some() || r.passthrough {
                continue;
            }
            let (Some(kind), Some(api)) = (&r.kind, &r.api_version) else {
                continue;
            };
            let group = group_of(api);
            if r.produced && policy.produced(group, kind).is_none() {
                out.push(Finding {
                    at: annotated.origin.to_string(),
                    message: format!(
                        "{}: {path} refers to a produced {kind} ({api}), which the policy does not approve produced: true: every object that sets it will be refused",
                        resource.group_kind
                    ),
                });
            } else if !r.produced && policy.resource(group, kind).is_none() {
                out.push(Finding {
                    at: annotated.origin.to_string(),
                    message: format!(
                        "{}: {path} refers to {kind} ({api}), which the policy does not sync: every object that sets it will be refused (approve {kind}, or mark the reference passthrough: true)",
                        resource.group_kind
                    ),
                });
            }
        }
        let schema = !resource.plan.file.is_empty();
        let unknown = unknown_field_rules(&resource.plan, |p| !schema || resource.plan.knows(p));
        for (at, jsonpath) in unknown {
            out.push(Finding {
                at,
                message: format!(
                    "{}: field rule {jsonpath} names no field of the schema in {} (a typo, or a field the schema file leaves out)",
                    resource.group_kind, resource.plan.file
                ),
            });
        }
        if resource.direction == Direction::FromSuper
            && resource.scope == crate::policy::Scope::Namespaced
        {
            out.push(Finding {
                at: resource.at.to_string(),
                message: format!(
                    "{} is fromSuper and namespaced: copies keep their namespace name in every tenant, which each tenant must have",
                    resource.group_kind
                ),
            });
        }
    }
    out
}

/// `path` with each keyed element (`[?@.name=='x']`) read as any element (`[*]`), as the
/// schema knows its fields.
fn any_element(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.contains("[?") {
        return path.into();
    }
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(start) = rest.find("[?") {
        out.push_str(&rest[..start]);
        // The filter ends at the first `]` outside a quoted literal.
        let mut quote = None;
        let mut end = rest.len();
        for (i, c) in rest[start..].char_indices() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, ']') => {
                    end = start + i + 1;
                    break;
                }
                _ => {}
            }
        }
        out.push_str("[*]");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.into()
}

/// The field rules of `plan` none of whose paths `knows`, as
/// `(file:line:column, JSONPath)`. Rules under `metadata` are left out: every object has it.
pub fn unknown_field_rules(
    plan: &crate::schema::Plan,
    knows: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let mut verdicts: Vec<(String, String, bool)> = Vec::new();
    for (path, annotated) in plan.rules() {
        let Some(jsonpath) = &annotated.jsonpath else {
            continue;
        };
        if path == "metadata" || path.starts_with("metadata.") {
            continue;
        }
        let at = annotated.origin.to_string();
        let known = knows(&any_element(&path));
        match verdicts.iter_mut().find(|(a, _, _)| *a == at) {
            Some(entry) => entry.2 |= known,
            None => verdicts.push((at, jsonpath.clone(), known)),
        }
    }
    verdicts
        .into_iter()
        .filter(|(_, _, known)| !known)
        .map(|(at, jsonpath, _)| (at, jsonpath))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keyed_elements_are_any_element() {
        assert_eq!(
            super::any_element("spec.when[?@.key=='a]b'].values[*]"),
            "spec.when[*].values[*]"
        );
        assert_eq!(super::any_element("spec.x"), "spec.x");
    }
}
