//! Loads policy files strictly: every error names the file, line and column, and what was
//! expected.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::model::{Direction, LabelSelector, PolicyFile, Scope};
use super::options::{relative, LoadOptions};
use super::{Error, GroupKind, Policy, Resource, Result, DEFAULT_PUBLIC_LABEL};
use crate::locate::{Location, Positions};
use crate::schema::Plan;

/// The only apiVersion and kind of a policy file.
pub const API_VERSION: &str = "ferry.dev/v1alpha1";
/// The kind of a policy file.
pub const KIND: &str = "SyncPolicy";

/// Loads a policy file or directory and verifies every transform pin.
pub fn load(path: &Path) -> Result<Policy> {
    load_with(path, &LoadOptions::default())
}

/// One parsed file and its positions.
struct Parsed {
    file: PathBuf,
    positions: Positions,
    doc: PolicyFile,
}

/// The policy files `path` names: itself, or every `kind: SyncPolicy` file in the tree below
/// it (other YAML, such as schema overlays and `ferry test` cases, is skipped; so are hidden
/// directories; a link to a directory is followed once).
pub fn policy_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::Read {
        at: Location::file(path),
        message: e.to_string(),
    })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut visited = std::collections::BTreeSet::new();
    collect_policy_files(path, &mut files, &mut visited)?;
    if files.is_empty() {
        return Err(Error::Invalid {
            at: Location::file(path),
            message: "the directory tree holds no kind: SyncPolicy file".into(),
        });
    }
    Ok(files)
}

/// Appends the policy files of `dir` and its subdirectories to `out`, in name order;
/// `visited` holds the directories read (by their real path), so that links loop nowhere.
fn collect_policy_files(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    visited: &mut std::collections::BTreeSet<PathBuf>,
) -> Result<()> {
    let read_error = |at: &Path, e: std::io::Error| Error::Read {
        at: Location::file(at),
        message: e.to_string(),
    };
    let real = dir.canonicalize().map_err(|e| read_error(dir, e))?;
    if !visited.insert(real) {
        return Ok(());
    }
    let entries = crate::locate::visible_entries(dir).map_err(|e| read_error(dir, e))?;
    for entry in entries {
        // Test cases live in `tests/`: never a policy, whatever their inputs say.
        if entry.is_dir() && entry.file_name().is_some_and(|n| n == "tests") {
            continue;
        }
        if entry.is_dir() {
            collect_policy_files(&entry, out, visited)?;
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) && entry.is_file()
        {
            let text = crate::locate::read_text(&entry).map_err(|e| read_error(&entry, e))?;
            if is_policy_text(&text) {
                out.push(entry);
            }
        }
    }
    Ok(())
}

/// Whether a YAML file found in a directory is meant as a policy: one of its documents has
/// `kind: SyncPolicy`, or it is a `ferry.dev` document that is no other ferry kind (so that a
/// misspelt kind is reported, not skipped). A file that does not parse is a policy when a line
/// says `kind: SyncPolicy`, so that its syntax error is reported.
fn is_policy_text(text: &str) -> bool {
    use serde::Deserialize;
    let says_policy = text.lines().any(|l| {
        l.trim() == format!("kind: {KIND}") || l.trim() == format!("\"kind\": \"{KIND}\",")
    });
    if says_policy {
        return true;
    }
    // serde_yaml's documents go on failing after a syntax error: stop at the first.
    for doc in serde_yaml::Deserializer::from_str(text).take(MAX_DOCUMENTS) {
        let Ok(value) = serde_yaml::Value::deserialize(doc) else {
            return false;
        };
        let field = |key: &str| value.get(key).and_then(serde_yaml::Value::as_str);
        let policy = match (field("apiVersion"), field("kind")) {
            (_, Some(KIND)) => true,
            (Some(api), kind) => {
                api.starts_with("ferry.dev/") && !matches!(kind, Some("SyncConfig"))
            }
            (None, _) => false,
        };
        if policy {
            return true;
        }
    }
    false
}

/// How many documents of a file in a policy tree are looked at to tell whether it is a
/// policy (a policy file holds one).
const MAX_DOCUMENTS: usize = 1000;

/// Loads with explicit options.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Policy> {
    let mut parsed = Vec::new();
    for file in policy_files(path)? {
        parsed.push(parse_file(&file)?);
    }
    let mut policy = Policy {
        files: parsed.iter().map(|p| p.file.clone()).collect(),
        ..Policy::default()
    };
    for p in &parsed {
        super::scripts::load_transforms(
            &p.file,
            &p.positions,
            &p.doc.spec.transforms,
            options,
            &mut policy,
        )?;
    }
    for p in &parsed {
        for (i, domain) in p.doc.spec.domains.iter().enumerate() {
            if let Some(why) = domain_template_problem(domain) {
                return Err(Error::Invalid {
                    at: p.positions.at(&format!("spec.domains[{i}]")),
                    message: format!("spec.domains[{i}]: {domain:?}: {why}"),
                });
            }
            if !policy.domains.contains(domain) {
                policy.domains.push(domain.clone());
            }
        }
    }
    let mut first_seen: BTreeMap<(GroupKind, String), Location> = BTreeMap::new();
    for p in &parsed {
        for (i, entry) in p.doc.spec.resources.iter().enumerate() {
            let resource = load_resource(p, i, entry, options, &policy)?;
            // `produced: true` beside toSuper: one kind both ways, as two rules.
            let produced =
                (entry.produced && resource.direction == Direction::ToSuper).then(|| Resource {
                    direction: Direction::Produced,
                    dependency: false,
                    placement: None,
                    ..resource.clone()
                });
            for resource in std::iter::once(resource).chain(produced) {
                // One kind may be approved once in each direction.
                let seen = (resource.group_kind.clone(), resource.direction.to_string());
                if let Some(first) = first_seen.get(&seen) {
                    return Err(Error::Duplicate {
                        at: p.positions.at(&format!("spec.resources[{i}].kind")),
                        first: first.clone(),
                        kind: resource.group_kind.to_string(),
                    });
                }
                let other = match resource.direction {
                    Direction::FromSuper => Direction::Produced,
                    Direction::Produced => Direction::FromSuper,
                    Direction::ToSuper => Direction::ToSuper,
                };
                if let Some(first) = first_seen
                    .get(&(resource.group_kind.clone(), other.to_string()))
                    .filter(|_| other != Direction::ToSuper)
                {
                    return Err(Error::Invalid {
                        at: p.positions.at(&format!("spec.resources[{i}]")),
                        message: format!(
                            "{} is approved fromSuper and produced (first at {first}): a tenant's copies of both would look alike; approve one",
                            resource.group_kind
                        ),
                    });
                }
                first_seen.insert(seen, resource.at.clone());
                policy.resources.push(resource);
            }
        }
    }
    let both: Vec<bool> = policy
        .resources
        .iter()
        .map(|r| {
            policy.resources.iter().any(|o| {
                o.group_kind == r.group_kind
                    && matches!(
                        (r.direction, o.direction),
                        (Direction::ToSuper, Direction::FromSuper)
                            | (Direction::FromSuper, Direction::ToSuper)
                    )
            })
        })
        .collect();
    for (r, both) in policy.resources.iter_mut().zip(both) {
        r.both_ways = both;
    }
    Ok(policy)
}

fn parse_file(file: &Path) -> Result<Parsed> {
    let text = crate::locate::read_text(file).map_err(|e| Error::Read {
        at: Location::file(file),
        message: e.to_string(),
    })?;
    let positions = Positions::index(file, &text);
    let doc = parse_policy_text(file, &text)?;
    let invalid = |path: &str, message: String| Error::Invalid {
        at: positions.at(path),
        message,
    };
    if doc.api_version != API_VERSION {
        return Err(invalid(
            "apiVersion",
            format!(
                "apiVersion: expected {API_VERSION:?}, found {:?}",
                doc.api_version
            ),
        ));
    }
    if doc.kind != KIND {
        return Err(invalid(
            "kind",
            format!("kind: expected {KIND:?}, found {:?}", doc.kind),
        ));
    }
    Ok(Parsed {
        file: file.to_path_buf(),
        positions,
        doc,
    })
}

/// Deserializes a policy file strictly; a syntax error, an unknown field or a wrong type names
/// its line and column.
pub fn parse_policy_text(file: &Path, text: &str) -> Result<PolicyFile> {
    if let Some((at, message)) = crate::locate::duplicate_key(file, text, 0) {
        return Err(Error::Invalid { at, message });
    }
    serde_yaml::from_str(text).map_err(|e| Error::Invalid {
        at: Location::of_yaml_error(file, &e, 0),
        message: crate::locate::yaml_message(&e),
    })
}

/// Whether `v` is a Kubernetes version string (`v1`, `v1beta2`, `v2alpha1`).
fn is_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|stage| {
            tail.strip_prefix(stage)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The entry's apiVersion and kind, checked: its group.
fn checked_type<'e>(
    entry: &'e super::model::ResourceEntry,
    here: &dyn Fn(&str) -> Location,
) -> Result<&'e str> {
    let invalid = |field: &str, message: String| Error::Invalid {
        at: here(field),
        message,
    };
    let (group, version) = crate::schema::load::split_api_version(&entry.api_version);
    if !is_version(version)
        || entry.api_version.matches('/').count() > 1
        || (entry.api_version.contains('/') && group.is_empty())
    {
        return Err(invalid(
            "apiVersion",
            format!(
                "apiVersion: expected group/version with exactly one version (like example.com/v1, or v1 for core kinds), found {:?}",
                entry.api_version
            ),
        ));
    }
    let kind_ok = entry
        .kind
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase())
        && entry.kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(invalid(
            "kind",
            format!(
                "kind: expected a CamelCase kind like Database, found {:?}",
                entry.kind
            ),
        ));
    }
    Ok(group)
}

/// The entry's direction (`produced: true` is one), checked against its other fields.
fn direction(
    p: &Parsed,
    i: usize,
    entry: &super::model::ResourceEntry,
    here: &dyn Fn(&str) -> Location,
) -> Result<Direction> {
    let invalid = |field: &str, message: String| Error::Invalid {
        at: here(field),
        message,
    };
    let direction = match (entry.direction, entry.produced) {
        (Some(Direction::FromSuper), true) => {
            return Err(invalid(
                "produced",
                "produced: true flows up what super-side controllers make for a tenant's object; with direction fromSuper (the platform's objects, copied into every tenant) it is an error".into(),
            ))
        }
        (Some(direction), _) => direction,
        (None, true) => Direction::Produced,
        (None, false) => {
            return Err(Error::Invalid {
                at: p.positions.at(&format!("spec.resources[{i}]")),
                message: format!(
                    "spec.resources[{i}]: missing field `direction` (toSuper or fromSuper), or produced: true for objects super-side controllers produce"
                ),
            })
        }
    };
    if entry.produced && entry.scope == Scope::Cluster {
        return Err(invalid(
            "scope",
            "produced: true needs scope Namespaced: produced objects are found in the super namespace of the object they are produced for".into(),
        ));
    }
    if entry.dependency && direction != Direction::ToSuper {
        return Err(invalid(
            "dependency",
            "dependency: true needs direction toSuper (dependencies are tenant objects synced down while referenced)".into(),
        ));
    }
    Ok(direction)
}

/// The entry's compiled schema plan (cached in `options.plans`) with its JSONPath field
/// rules.
fn plan(
    p: &Parsed,
    i: usize,
    entry: &super::model::ResourceEntry,
    options: &LoadOptions,
    here: &dyn Fn(&str) -> Location,
) -> Result<Arc<Plan>> {
    let plan = match &entry.schema {
        Some(schema) => {
            let file = relative(&p.file, schema);
            options
                .plans
                .get(&file, &entry.api_version, &entry.kind)
                .map_err(|source| Error::Schema {
                    at: here("schema"),
                    source: Box::new(source),
                })?
        }
        None => Arc::new(Plan::default()),
    };
    let plan = if entry.fields.is_empty() {
        plan
    } else {
        let at = format!("spec.resources[{i}]");
        Arc::new(super::fields::compile(
            &plan,
            &entry.fields,
            &p.positions,
            &at,
        )?)
    };
    Ok(plan)
}

fn load_resource(
    p: &Parsed,
    i: usize,
    entry: &super::model::ResourceEntry,
    options: &LoadOptions,
    policy: &Policy,
) -> Result<Resource> {
    let here = |field: &str| p.positions.at(&format!("spec.resources[{i}].{field}"));
    let invalid = |field: &str, message: String| Error::Invalid {
        at: here(field),
        message,
    };
    let group = checked_type(entry, &here)?;
    let direction = direction(p, i, entry, &here)?;
    let selector = match (&entry.selector, direction) {
        (Some(s), _) => {
            if let Some(problem) = s.problem() {
                return Err(invalid("selector", format!("selector: {problem}")));
            }
            Some(s.clone())
        }
        (None, Direction::FromSuper) => Some(LabelSelector {
            match_labels: [(DEFAULT_PUBLIC_LABEL.to_string(), "true".to_string())].into(),
            match_expressions: Vec::new(),
        }),
        (None, Direction::ToSuper | Direction::Produced) => None,
    };
    let transforms = transforms(entry, direction, policy, &here)?;
    let plan = plan(p, i, entry, options, &here)?;
    let annotations = super::annotations::load(
        entry.annotations.as_ref(),
        direction,
        entry.dependency,
        &plan,
        &here,
    )?;
    if let Some(crd_scope) = &plan.crd_scope {
        let approved = format!("{:?}", entry.scope);
        if *crd_scope != approved {
            return Err(invalid(
                if entry.scope == Scope::default() { "kind" } else { "scope" },
                format!(
                    "scope: the entry says {approved}{}, but the CRD in {} is {crd_scope} (a cluster-scoped kind synced as Namespaced would keep its global name in the super cluster); set scope: {crd_scope}",
                    if entry.scope == Scope::default() { " (the default)" } else { "" },
                    plan.file
                ),
            ));
        }
    }
    Ok(Resource {
        api_version: entry.api_version.clone(),
        group_kind: GroupKind {
            group: group.to_string(),
            kind: entry.kind.clone(),
        },
        direction,
        scope: entry.scope,
        plan,
        transforms,
        dependency: entry.dependency,
        selector,
        annotations,
        both_ways: false,
        placement: placement(entry, direction, &here)?,
        at: p.positions.at(&format!("spec.resources[{i}]")),
    })
}

/// A resource's `placement.namespace`, checked: toSuper and namespaced only, a namespace name,
/// never a system namespace. (That it is no tenant's space is checked against the tenants
/// of a SyncConfig.)
fn placement(
    entry: &super::model::ResourceEntry,
    direction: Direction,
    here: &dyn Fn(&str) -> Location,
) -> Result<Option<String>> {
    let Some(placement) = &entry.placement else {
        return Ok(None);
    };
    let invalid = |message: String| Error::Invalid {
        at: here("placement.namespace"),
        message: format!("placement.namespace: {message}"),
    };
    let ns = placement.namespace.as_str();
    if direction != Direction::ToSuper || entry.produced || entry.dependency {
        return Err(invalid(
            "a fixed namespace takes the copies of a toSuper kind's own objects (not fromSuper, produced or dependency kinds)".into(),
        ));
    }
    if entry.scope == Scope::Cluster {
        return Err(invalid(
            "a cluster-scoped kind has no namespace to place its copies in".into(),
        ));
    }
    if let Some(why) = crate::naming::dns_label_problem(ns) {
        return Err(invalid(format!("{ns:?} is not a namespace name: {why}")));
    }
    if crate::naming::is_system_namespace(ns) || ns == "default" {
        return Err(invalid(format!(
            "{ns:?} is a Kubernetes system namespace, never an operator's to share with tenants"
        )));
    }
    Ok(Some(ns.to_string()))
}

/// Why a `spec.domains` entry is not a domain template: `{tenant}` a whole label (so that
/// two tenants' domains never nest), the rest a DNS name.
fn domain_template_problem(domain: &str) -> Option<String> {
    use super::TENANT_PLACEHOLDER;
    if !domain.split('.').any(|label| label == TENANT_PLACEHOLDER) {
        return Some(format!(
            "a policy's domain names {TENANT_PLACEHOLDER} as a whole label (team domains such as {TENANT_PLACEHOLDER}.apps.example.com); without it every tenant would own the same names"
        ));
    }
    if domain.replace(TENANT_PLACEHOLDER, "").contains(['{', '}']) {
        return Some(format!("only {TENANT_PLACEHOLDER} may stand in braces"));
    }
    crate::naming::embedded::domain_problem(&domain.replace(TENANT_PLACEHOLDER, "tenant"))
}

/// The scripts of `entry`'s transforms, each declared in `spec.transforms` and defining the
/// hook `direction` calls (`here` locates the entry's fields).
fn transforms(
    entry: &super::model::ResourceEntry,
    direction: Direction,
    policy: &Policy,
    here: &dyn Fn(&str) -> Location,
) -> Result<Vec<Arc<crate::sandbox::Script>>> {
    let invalid = |field: &str, message: String| Error::Invalid {
        at: here(field),
        message,
    };
    let needed = match direction {
        Direction::ToSuper => crate::sandbox::Hook::ToSuper,
        Direction::FromSuper | Direction::Produced => crate::sandbox::Hook::ToTenant,
    };
    let mut transforms = Vec::new();
    for (j, name) in entry.transforms.iter().enumerate() {
        let Some(t) = policy.transforms.get(name) else {
            let known: Vec<_> = policy.transforms.keys().map(String::as_str).collect();
            return Err(invalid(
                &format!("transforms[{j}]"),
                format!(
                    "unknown transform {name:?}; spec.transforms declares {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        if !t.hooks.has(needed) {
            return Err(invalid(
                &format!("transforms[{j}]"),
                format!(
                    "transform {name} ({}) does not define {}(obj, ctx), which {} kinds need",
                    t.file.display(),
                    needed.function(),
                    direction
                ),
            ));
        }
        transforms.push(t.script.clone());
    }
    Ok(transforms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_yaml_file_is_not_read_forever() {
        assert!(!is_policy_text("a:\n    XX\n    b: c\n"));
        assert!(!is_policy_text("---\n- [\n"));
        assert!(is_policy_text(
            "x: 1\n---\napiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\n"
        ));
        assert!(!is_policy_text(
            "apiVersion: ferry.dev/v1alpha1\nkind: SyncConfig\n"
        ));
    }

    #[test]
    fn versions() {
        for ok in ["v1", "v1beta1", "v2alpha3", "v10"] {
            assert!(is_version(ok), "{ok}");
        }
        for bad in ["", "1", "v", "v0", "v1beta", "v1gamma1", "V1"] {
            assert!(!is_version(bad), "{bad}");
        }
    }
}
