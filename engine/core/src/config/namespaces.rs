//! Which super namespaces belong to the platform and which tenant namespace labels reach super
//! namespaces (DESIGN.md "Names a tenant owns beyond namespaces"): `platformNamespaces` and
//! `namespaceLabels` of a SyncConfig.

use schemars::JsonSchema;
use serde::Deserialize;

use super::Error;
use crate::glob::Glob;
use crate::locate::Positions;
use crate::naming::MAX_LABEL_LEN;
use crate::translate::{reserved_namespace_label, NamespaceLabels};

/// The platform namespaces when a SyncConfig lists none: Kubernetes' own, ferry's, and those
/// the usual platform projects install into (a service mesh, certificates, ingress,
/// monitoring, GitOps, policy engines, backups, autoscaling, infrastructure, CI).
pub const DEFAULT_PLATFORM_NAMESPACES: &[&str] = &[
    "kube-*",
    "default",
    "ferry-*",
    "istio-system",
    "cert-manager",
    "ingress-nginx",
    "monitoring",
    "flux-system",
    "argocd",
    "gatekeeper-system",
    "kyverno",
    "velero",
    "keda",
    "crossplane-system",
    "tekton-pipelines",
];

/// Which labels of tenant namespaces their super namespaces carry.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceLabelsEntry {
    /// Label keys (or globs: `*` any characters, `?` one) of tenant namespaces that super
    /// namespaces carry; every other label stays in the tenant, and one that stops being
    /// allowed (or that the tenant removes) is removed from the super namespace. Keys under
    /// `ferry.dev/`, `kubernetes.io/` and `k8s.io/` (and their subdomains) never cross.
    #[serde(default)]
    allow: Vec<String>,
}

/// Super namespaces ferry never creates, labels or writes into: a name or glob each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformNamespaces(Vec<Glob>);

impl Default for PlatformNamespaces {
    /// [`DEFAULT_PLATFORM_NAMESPACES`].
    fn default() -> Self {
        Self(
            DEFAULT_PLATFORM_NAMESPACES
                .iter()
                .filter_map(|p| namespace_glob(p).ok())
                .collect(),
        )
    }
}

impl PlatformNamespaces {
    /// Exactly `patterns` (none: no namespace is the platform's).
    pub fn new(patterns: Vec<Glob>) -> Self {
        Self(patterns)
    }

    /// The first pattern `namespace` matches, if it is a platform namespace.
    pub fn matching(&self, namespace: &str) -> Option<&Glob> {
        self.0.iter().find(|g| g.matches(namespace))
    }

    /// The patterns, in the file's order.
    pub fn patterns(&self) -> &[Glob] {
        &self.0
    }
}

/// `spec.platformNamespaces`, checked: absent gives the defaults, a list is exactly what it
/// says (an empty one: no platform namespaces).
pub(super) fn platform_namespaces(
    positions: &Positions,
    entry: Option<Vec<String>>,
) -> Result<PlatformNamespaces, Error> {
    let Some(entry) = entry else {
        return Ok(PlatformNamespaces::default());
    };
    globs(positions, "spec.platformNamespaces", &entry, namespace_glob).map(PlatformNamespaces::new)
}

/// `spec.namespaceLabels`, checked. A key ferry never copies named exactly (`ferry.dev/…`,
/// `kubernetes.io/metadata.name`) is an error: the entry would promise what cannot happen.
pub(super) fn namespace_labels(
    positions: &Positions,
    entry: Option<NamespaceLabelsEntry>,
) -> Result<NamespaceLabels, Error> {
    let Some(entry) = entry else {
        return Ok(NamespaceLabels::default());
    };
    let at = "spec.namespaceLabels.allow";
    let allow = globs(positions, at, &entry.allow, Glob::new)?;
    if let Some((i, g)) = allow
        .iter()
        .enumerate()
        .find(|(_, g)| !g.as_str().contains(['*', '?']) && reserved_namespace_label(g.as_str()))
    {
        return Err(Error {
            at: positions.at(&format!("{at}[{i}]")),
            message: format!(
                "namespaceLabels.allow: {:?} is never copied to a super namespace (ferry's own keys and those under kubernetes.io/ and k8s.io/ are the platform's or set by the API server); remove it",
                g.as_str()
            ),
        });
    }
    Ok(NamespaceLabels::new(allow))
}

/// The patterns of the list at `at`, each read by `glob` and checked with its location.
fn globs(
    positions: &Positions,
    at: &str,
    entry: &[String],
    glob: fn(&str) -> Result<Glob, String>,
) -> Result<Vec<Glob>, Error> {
    let field = at.trim_start_matches("spec.");
    entry
        .iter()
        .enumerate()
        .map(|(i, text)| {
            glob(text).map_err(|why| Error {
                at: positions.at(&format!("{at}[{i}]")),
                message: format!("{field}[{i}]: {why}"),
            })
        })
        .collect()
}

/// A glob over namespace names: a key glob (`crate::glob`) whose other characters are those
/// of a DNS label, and no longer than one.
fn namespace_glob(text: &str) -> Result<Glob, String> {
    let glob = Glob::new(text)?;
    let fine =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '*' | '?');
    if let Some(c) = text.chars().find(|&c| !fine(c)) {
        return Err(format!(
            "{text:?}: {c:?} is in no namespace name (lower-case letters, digits and '-'; * and ? are the only patterns)"
        ));
    }
    let literal = text.chars().filter(|c| !matches!(c, '*' | '?')).count();
    if literal > MAX_LABEL_LEN {
        return Err(format!(
            "{text:?}: {literal} characters besides * and ?, and a namespace name has at most {MAX_LABEL_LEN}"
        ));
    }
    Ok(glob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_list() {
        let defaults = PlatformNamespaces::default();
        assert_eq!(defaults.patterns().len(), DEFAULT_PLATFORM_NAMESPACES.len());
        for ns in [
            "kube-system",
            "default",
            "ferry-system",
            "cert-manager",
            "keda",
        ] {
            assert!(defaults.matching(ns).is_some(), "{ns}");
        }
        for ns in ["team-a-default", "defaults", "cert-manager-x", "kube"] {
            assert!(defaults.matching(ns).is_none(), "{ns}");
        }
        assert!(PlatformNamespaces::new(Vec::new())
            .matching("kube-system")
            .is_none());
    }

    #[test]
    fn namespace_globs_match_names_and_refuse_what_no_namespace_holds() {
        let glob = |p: &str| namespace_glob(p).unwrap();
        assert!(glob("team-?-x").matches("team-a-x"));
        assert!(!glob("team-?-x").matches("team-ab-x"));
        assert!(!glob("team-?-x").matches("team--x"));
        assert!(glob("*-system").matches("istio-system"));
        assert!(!glob("*-system").matches("system"));
        assert!(!glob("kube-*").matches("kube"));
        assert!(!glob("kube-*").matches("team-a-kube-system"));
        let bad = |p: &str| namespace_glob(p).unwrap_err();
        assert!(
            bad("kube-[a-z]*").contains("only * (any characters)"),
            "{}",
            bad("kube-[a-z]*")
        );
        assert!(
            bad("Kube-*").contains("'K' is in no namespace name"),
            "{}",
            bad("Kube-*")
        );
        assert!(bad("team_a").contains("'_' is in no namespace name"));
        assert!(bad("a.b").contains("'.' is in no namespace name"));
        assert!(bad(&"a".repeat(64)).contains("at most 63"));
        assert!(namespace_glob(&format!("{}*", "a".repeat(63))).is_ok());
    }
}
