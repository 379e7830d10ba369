//! Which of a tenant object's annotations its super copy carries (a resource's
//! `annotations: {allow: [...]}`).
//!
//! Controllers in the super cluster act on annotations: Reflector copies a Secret annotated
//! `reflector.v1.k8s.emberstack.com/reflection-allowed` into other namespaces, kubed syncs
//! ConfigMaps by `kubed.appscode.com/sync`. A tenant's Secret or ConfigMap reaches the super
//! cluster only because something synced refers to it (`dependency: true`), so by default it
//! carries none of its annotations there: only ferry's own `ferry.dev/` ones. A kind approved
//! for its own sake keeps every annotation unless its entry gives an allow-list, since its
//! annotations usually configure the operator it is synced for.
//!
//! Annotations a field rule (or schema annotation) of the kind maps, such as
//! `$.metadata.annotations['nginx.ingress.kubernetes.io/auth-secret']` with `ref`, are allowed
//! implicitly: the rule says how the value crosses, and its mapped value is checked by the
//! guard like any other. A `drop` rule allows nothing.

use super::model::AnnotationsEntry;
use super::{Direction, Error, Result};
use crate::glob::Glob;
use crate::keys::RESERVED_PREFIX;
use crate::locate::Location;

use crate::schema::{Plan, Rule};

/// Which tenant annotations go down with a toSuper kind's objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Annotations {
    /// Every annotation (a kind approved without `annotations`, not a dependency).
    #[default]
    All,
    /// Only annotations matching `allow`, and those the kind's rules map (`marked`).
    Only {
        /// The entry's `annotations.allow` (empty for a dependency without one).
        allow: Vec<Glob>,
        /// Keys a field rule or schema annotation of the kind maps.
        marked: Vec<String>,
    },
}

impl Annotations {
    /// Whether the super copy may carry the tenant annotation `key` (ferry's own `ferry.dev/`
    /// keys are decided elsewhere: a tenant's are always stripped).
    pub fn allows(&self, key: &str) -> bool {
        match self {
            Annotations::All => true,
            Annotations::Only { allow, marked } => {
                marked.iter().any(|m| m == key) || allow.iter().any(|g| g.matches(key))
            }
        }
    }

    /// Why an annotation not allowed stays in the tenant, for `--explain` and refusals.
    pub fn why_not(&self) -> &'static str {
        match self {
            Annotations::Only { allow, .. } if allow.is_empty() => {
                "no tenant annotation crosses with this kind unless its annotations.allow names it (super-side controllers act on annotations; a dependency carries none by default)"
            }
            Annotations::All | Annotations::Only { .. } => {
                "the kind's annotations.allow does not name this annotation"
            }
        }
    }
}

/// The annotations policy of a resource entry: `entry` as written (`at` locates its fields,
/// `annotations.allow[0]`), for a kind approved in `direction`, a dependency or not, whose
/// compiled `plan` holds its field rules.
pub(super) fn load(
    entry: Option<&AnnotationsEntry>,
    direction: Direction,
    dependency: bool,
    plan: &Plan,
    at: &dyn Fn(&str) -> Location,
) -> Result<Annotations> {
    let Some(entry) = entry else {
        return Ok(if dependency {
            Annotations::Only {
                allow: Vec::new(),
                marked: marked(plan),
            }
        } else {
            Annotations::All
        });
    };
    if direction != Direction::ToSuper {
        return Err(Error::Invalid {
            at: at("annotations"),
            message: format!(
                "annotations: says which tenant annotations go down with a toSuper kind; a {direction} kind's objects are the super cluster's"
            ),
        });
    }
    let mut allow = Vec::with_capacity(entry.allow.len());
    for (j, pattern) in entry.allow.iter().enumerate() {
        let invalid = |message: String| Error::Invalid {
            at: at(&format!("annotations.allow[{j}]")),
            message: format!("annotations.allow[{j}]: {message}"),
        };
        let glob = Glob::new(pattern).map_err(invalid)?;
        // A broader pattern (`*`) may match ferry's keys too: harmless, a tenant's are always
        // stripped. One that names them is a misunderstanding worth stopping.
        if glob.literal_prefix().starts_with(RESERVED_PREFIX) {
            return Err(invalid(format!(
                "{pattern:?} names ferry's own keys ({RESERVED_PREFIX}); ferry sets those, a tenant's never cross"
            )));
        }
        allow.push(glob);
    }
    Ok(Annotations::Only {
        allow,
        marked: marked(plan),
    })
}

/// The annotation keys `plan` maps: a rule other than `drop` on
/// `metadata.annotations['key']`.
fn marked(plan: &Plan) -> Vec<String> {
    plan.root
        .fields
        .get("metadata")
        .and_then(|m| m.fields.get("annotations"))
        .map(|annotations| {
            annotations
                .fields
                .iter()
                .filter(|(_, node)| {
                    node.rules
                        .iter()
                        .any(|a| !matches!(a.rule, Rule::Drop | Rule::OwnerSuper))
                })
                .map(|(key, _)| key.clone())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{load, Annotations};
    use crate::locate::Location;
    use crate::policy::model::AnnotationsEntry;
    use crate::policy::Direction;
    use crate::schema::Plan;

    fn at(_: &str) -> Location {
        Location::file(Path::new("policy.yaml"))
    }

    fn allow(patterns: &[&str]) -> AnnotationsEntry {
        AnnotationsEntry {
            allow: patterns.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn a_dependency_carries_none_by_default_a_kind_all() {
        let plan = Plan::default();
        let dependency = load(None, Direction::ToSuper, true, &plan, &at).unwrap();
        assert!(!dependency.allows("reflector.v1.k8s.emberstack.com/reflection-allowed"));
        assert!(!dependency.allows("example.com/owner"));
        let kind = load(None, Direction::ToSuper, false, &plan, &at).unwrap();
        assert_eq!(kind, Annotations::All);
        assert!(kind.allows("reflector.v1.k8s.emberstack.com/reflection-allowed"));
    }

    #[test]
    fn an_allow_list_lets_through_what_it_matches() {
        let entry = allow(&["example.com/*", "backup.example.com/schedule"]);
        for dependency in [true, false] {
            let only = load(
                Some(&entry),
                Direction::ToSuper,
                dependency,
                &Plan::default(),
                &at,
            )
            .unwrap();
            assert!(only.allows("example.com/owner"));
            assert!(only.allows("backup.example.com/schedule"));
            assert!(!only.allows("backup.example.com/retention"));
            assert!(!only.allows("kubed.appscode.com/sync"));
        }
    }

    #[test]
    fn bad_patterns_and_directions_are_load_errors() {
        let plan = Plan::default();
        for bad in [&["a[b]"][..], &["ferry.dev/*"][..], &[""][..]] {
            let e = load(Some(&allow(bad)), Direction::ToSuper, true, &plan, &at);
            assert!(e.is_err(), "{bad:?}");
        }
        let e = load(
            Some(&allow(&["a"])),
            Direction::FromSuper,
            false,
            &plan,
            &at,
        )
        .expect_err("fromSuper");
        assert!(e.to_string().contains("toSuper"), "{e}");
    }
}
