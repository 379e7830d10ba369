//! Several super clusters (DESIGN.md "Multiple super clusters"): the `supers` and `placement`
//! entries of a SyncConfig, and the placement decision for one tenant namespace, a pure
//! function of the configuration, the namespace and what is placed already.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::Error;
use crate::locate::Positions;
use crate::naming::{dns_label_problem, Tenant};
use crate::policy::options::relative;
use crate::policy::LabelSelector;

/// The name the single super of `super: {kubeconfig}` gets.
pub const DEFAULT_SUPER: &str = "super";

/// One super cluster of `supers`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SuperEntry {
    /// Its name (a DNS label): metrics label `cluster`, `ferry.dev/super` on tenant namespaces.
    name: String,
    /// Its kubeconfig file, relative to this file.
    #[serde(default)]
    kubeconfig: Option<String>,
    /// The pod's service account (also when `kubeconfig` is absent).
    #[serde(default)]
    in_cluster: Option<bool>,
    /// Labels placement rules select it by.
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Receives no new namespaces; those placed there move away.
    #[serde(default)]
    cordoned: bool,
}

/// A placement rule: for the tenant namespaces it matches, which supers are candidates.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RuleEntry {
    /// The tenants it applies to (default: every tenant).
    #[serde(default)]
    tenants: Option<Vec<String>>,
    /// The tenant namespaces it applies to, by their labels (default: every namespace).
    #[serde(default)]
    namespace_selector: Option<LabelSelector>,
    /// Which supers are candidates, by their labels (required).
    supers: Option<LabelSelector>,
}

/// One super cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperConfig {
    /// Its name: metrics label `cluster`, `ferry.dev/super` on tenant namespaces.
    pub name: String,
    /// Its kubeconfig, resolved against the config file; `None`: the pod's service account
    /// (`inCluster`).
    pub kubeconfig: Option<PathBuf>,
    /// Labels placement rules select it by.
    pub labels: BTreeMap<String, String>,
    /// A cordoned super receives no new namespaces, and those placed there move away.
    pub cordoned: bool,
}

/// A placement rule: for the tenant namespaces it matches, which supers are candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementRule {
    /// The tenants it applies to (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
    /// The tenant namespaces it applies to, by their labels (`None`: every namespace).
    pub namespace_selector: Option<LabelSelector>,
    /// The candidate supers, by their labels.
    pub supers: LabelSelector,
}

impl PlacementRule {
    /// Whether the rule applies to namespace `labels` of `tenant`.
    pub fn applies(&self, tenant: &str, labels: &BTreeMap<String, String>) -> bool {
        self.tenants
            .as_ref()
            .is_none_or(|t| t.iter().any(|t| t == tenant))
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(labels))
    }
}

/// The supers a namespace with `labels` of `tenant` may run in (indexes into `supers`): those
/// the first applying rule selects, else every super; cordoned ones never.
pub fn candidates(
    supers: &[SuperConfig],
    rules: &[PlacementRule],
    tenant: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<usize> {
    let rule = rules.iter().find(|r| r.applies(tenant, labels));
    supers
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.cordoned && rule.is_none_or(|r| r.supers.matches(&s.labels)))
        .map(|(i, _)| i)
        .collect()
}

/// Where a tenant namespace runs: `current` (where its super namespace is) while that is a
/// candidate, else the candidate holding the fewest placed namespaces (`placed[i]` for super
/// `i`; ties: config order). `None` when no super is a candidate.
pub fn place(candidates: &[usize], current: Option<usize>, placed: &[usize]) -> Option<usize> {
    if let Some(c) = current.filter(|c| candidates.contains(c)) {
        return Some(c);
    }
    candidates
        .iter()
        .copied()
        .min_by_key(|&i| (placed.get(i).copied().unwrap_or(0), i))
}

/// The supers of a config: `super` (one, named [`DEFAULT_SUPER`]) or `supers`, checked.
pub(super) fn supers(
    path: &Path,
    positions: &Positions,
    single: Option<super::Cluster>,
    entries: Option<Vec<SuperEntry>>,
) -> Result<Vec<SuperConfig>, Error> {
    let invalid = |at: &str, message: String| Error {
        at: positions.at(at),
        message,
    };
    // A kubeconfig, or the pod's service account (inCluster, or no kubeconfig at all).
    let source = |at: &str, kubeconfig: Option<String>, in_cluster: bool| match kubeconfig {
        Some(_) if in_cluster => Err(invalid(
            at,
            "kubeconfig and inCluster: true: expected one of them, found both".into(),
        )),
        Some(k) => Ok(Some(relative(path, &k))),
        None => Ok(None),
    };
    // `inCluster: false` without a kubeconfig says neither.
    let source = |at: &str, kubeconfig: Option<String>, in_cluster: Option<bool>| match in_cluster {
        Some(false) if kubeconfig.is_none() => Err(invalid(
            at,
            "inCluster: false and no kubeconfig: give a kubeconfig, or inCluster: true".into(),
        )),
        _ => source(at, kubeconfig, in_cluster == Some(true)),
    };
    let entries =
        match (single, entries) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "spec.supers",
                    "super and supers: expected one of them, found both".into(),
                ))
            }
            (None, None) => return Err(invalid(
                "spec",
                "expected super: {kubeconfig: FILE} (or {inCluster: true}) or supers: [{name, kubeconfig}], found neither"
                    .into(),
            )),
            (Some(cluster), None) => {
                return Ok(vec![SuperConfig {
                    name: DEFAULT_SUPER.into(),
                    kubeconfig: source("spec.super", cluster.kubeconfig, cluster.in_cluster)?,
                    labels: BTreeMap::new(),
                    cordoned: false,
                }])
            }
            (None, Some(entries)) => entries,
        };
    if entries.is_empty() {
        return Err(invalid(
            "spec.supers",
            "supers: expected at least one super, found none".into(),
        ));
    }
    let mut out: Vec<SuperConfig> = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if let Some(problem) = dns_label_problem(&e.name) {
            return Err(invalid(
                &format!("spec.supers[{i}].name"),
                format!("super name {:?}: {problem}", e.name),
            ));
        }
        if out.iter().any(|s| s.name == e.name) {
            return Err(invalid(
                &format!("spec.supers[{i}].name"),
                format!("super {:?} is named twice", e.name),
            ));
        }
        out.push(SuperConfig {
            kubeconfig: source(&format!("spec.supers[{i}]"), e.kubeconfig, e.in_cluster)?,
            name: e.name,
            labels: e.labels,
            cordoned: e.cordoned,
        });
    }
    Ok(out)
}

/// The placement rules, checked against the supers and tenants.
pub(super) fn rules(
    positions: &Positions,
    entries: Vec<RuleEntry>,
    supers: &[SuperConfig],
    tenants: &[Tenant],
) -> Result<Vec<PlacementRule>, Error> {
    let invalid = |at: String, message: String| Error {
        at: positions.at(&at),
        message,
    };
    let mut out = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        let Some(selector) = e.supers else {
            return Err(invalid(
                format!("spec.placement[{i}]"),
                "placement rule: expected supers (a label selector on the supers), found none"
                    .into(),
            ));
        };
        for (what, s) in [
            ("supers", Some(&selector)),
            ("namespaceSelector", e.namespace_selector.as_ref()),
        ] {
            if let Some(problem) = s.and_then(LabelSelector::problem) {
                return Err(invalid(format!("spec.placement[{i}].{what}"), problem));
            }
        }
        if !supers.iter().any(|s| selector.matches(&s.labels)) {
            return Err(invalid(
                format!("spec.placement[{i}].supers"),
                format!(
                    "placement rule selects no super (supers: {})",
                    supers
                        .iter()
                        .map(|s| format!("{} {:?}", s.name, s.labels))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for (j, t) in e.tenants.iter().flatten().enumerate() {
            if !tenants.iter().any(|known| known.as_str() == t) {
                return Err(invalid(
                    format!("spec.placement[{i}].tenants[{j}]"),
                    format!("tenant {t:?} is not in spec.tenants"),
                ));
            }
        }
        out.push(PlacementRule {
            tenants: e.tenants,
            namespace_selector: e.namespace_selector,
            supers: selector,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, labels: &[(&str, &str)], cordoned: bool) -> SuperConfig {
        SuperConfig {
            name: name.into(),
            kubeconfig: Some(PathBuf::new()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cordoned,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn gpu_rule(tenants: Option<Vec<String>>) -> PlacementRule {
        PlacementRule {
            tenants,
            namespace_selector: Some(LabelSelector {
                match_labels: labels(&[("accelerator", "gpu")]),
                ..LabelSelector::default()
            }),
            supers: LabelSelector {
                match_labels: labels(&[("gpu", "true")]),
                ..LabelSelector::default()
            },
        }
    }

    #[test]
    fn the_first_applying_rule_names_the_candidates() {
        let supers = [
            s("east", &[("region", "east")], false),
            s("west", &[("gpu", "true")], false),
        ];
        let rules = [gpu_rule(Some(vec!["team-a".into()]))];
        let gpu = labels(&[("accelerator", "gpu")]);
        assert_eq!(candidates(&supers, &rules, "team-a", &gpu), vec![1]);
        // Another tenant, or another namespace: no rule applies, every super is a candidate.
        assert_eq!(candidates(&supers, &rules, "team-b", &gpu), vec![0, 1]);
        assert_eq!(
            candidates(&supers, &rules, "team-a", &labels(&[])),
            vec![0, 1]
        );
    }

    #[test]
    fn cordoned_supers_are_never_candidates() {
        let supers = [s("east", &[], true), s("west", &[("gpu", "true")], true)];
        assert!(candidates(&supers, &[], "t", &labels(&[])).is_empty());
        assert!(candidates(
            &supers,
            &[gpu_rule(None)],
            "t",
            &labels(&[("accelerator", "gpu")])
        )
        .is_empty());
    }

    #[test]
    fn the_fewest_placed_wins_ties_go_to_config_order_and_placement_sticks() {
        assert_eq!(place(&[0, 1], None, &[0, 0]), Some(0));
        assert_eq!(place(&[0, 1], None, &[2, 1]), Some(1));
        assert_eq!(place(&[0, 1, 2], None, &[1, 1, 1]), Some(0));
        // Sticky while still a candidate, whatever the counts.
        assert_eq!(place(&[0, 1], Some(0), &[9, 0]), Some(0));
        // No longer a candidate: placed anew.
        assert_eq!(place(&[1], Some(0), &[0, 5]), Some(1));
        assert_eq!(place(&[], Some(0), &[0]), None);
    }
}
