//! Translation without clusters, as `ferry translate` and `ferry test` run it: what live
//! knows from the clusters (the tenant's namespaces, other tenants, domains) is given instead.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::naming::{NameMap, Tenant};
use crate::policy::Policy;
use crate::sandbox::Sandbox;
use crate::translate::{Published, Refusal, Translated, Translator};

/// Which side an offline translation is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Side {
    /// Tenant objects in, the objects ferry would apply in the super cluster out.
    #[default]
    Super,
    /// Super objects in, what ferry would write back into the tenant out.
    Tenant,
}

/// What live would know, given by hand.
#[derive(Clone, Debug, Default)]
pub struct Setting {
    /// The tenant the objects belong to.
    pub tenant: String,
    /// Which side to translate for.
    pub side: Side,
    /// More of the tenant's namespaces (the input's own are always included).
    pub tenant_namespaces: Vec<String>,
    /// Other tenants: up, their super namespaces in free text are redacted, as live redacts
    /// every super namespace ferry made for someone else.
    pub other_tenants: Vec<String>,
    /// The tenant's DNS domains, beside the policy's `spec.domains`.
    pub domains: Vec<String>,
}

/// Why a setting cannot be used (a usage error, not a refusal).
#[derive(Debug, thiserror::Error)]
#[error("{option}{}: {why}", value.as_ref().map(|v| format!(" {v:?}")).unwrap_or_default())]
pub struct SettingError {
    /// The option or field at fault.
    pub option: &'static str,
    /// Its value, when `why` does not name it.
    pub value: Option<String>,
    /// What is wrong.
    pub why: String,
}

/// Other tenants named offline: a word shaped like one of their super namespaces is one.
struct OtherTenants(Vec<Tenant>);

impl Published for OtherTenants {
    fn published(&self, _group: &str, _kind: &str, _namespace: &str, _name: &str) -> bool {
        false
    }

    fn live(&self) -> bool {
        false
    }

    fn super_namespace(&self, namespace: &str) -> bool {
        self.0.iter().any(|t| {
            namespace
                .strip_prefix(t.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| !rest.is_empty())
        })
    }
}

/// Translates `inputs` as `setting` says: each input's output or refusal, in order.
pub fn translate(
    policy: &Policy,
    sandbox: &Sandbox,
    setting: &Setting,
    inputs: Vec<Value>,
    explain: bool,
) -> Result<Vec<Result<Translated, Refusal>>, SettingError> {
    let tenant = Tenant::new(&setting.tenant).map_err(|e| SettingError {
        option: "tenant",
        value: None,
        why: e.to_string(),
    })?;
    if let Some((domain, why)) = setting
        .domains
        .iter()
        .find_map(|d| crate::naming::embedded::domain_problem(d).map(|why| (d, why)))
    {
        return Err(SettingError {
            option: "domain",
            value: Some(domain.clone()),
            why,
        });
    }
    let mut others = Vec::new();
    for other in &setting.other_tenants {
        let t = Tenant::new(other).map_err(|e| SettingError {
            option: "other-tenants",
            value: None,
            why: e.to_string(),
        })?;
        if t.as_str() == tenant.as_str() {
            return Err(SettingError {
                option: "other-tenants",
                value: Some(other.clone()),
                why: "this is the tenant being translated".into(),
            });
        }
        others.push(t);
    }
    if let Some(ns) = policy.placement_owned_by(tenant.as_str()) {
        return Err(SettingError {
            option: "tenant",
            value: Some(setting.tenant.clone()),
            why: format!("one of its namespaces would map onto {ns:?}, where the policy places copies of every tenant's objects (ferry run refuses such a tenant)"),
        });
    }
    let everyone: Vec<&Tenant> = std::iter::once(&tenant).chain(&others).collect();
    if let Err(e) = crate::naming::check_tenant_set(everyone) {
        return Err(SettingError {
            option: "other-tenants",
            value: None,
            why: e.to_string(),
        });
    }
    // Offline there is no SyncConfig: the platform's namespaces are the documented defaults,
    // as live without a `platformNamespaces` list.
    let platform = crate::config::PlatformNamespaces::default();
    let names = NameMap::new(tenant)
        .with_domains(
            policy
                .domains_of(&setting.tenant)
                .iter()
                .chain(&setting.domains),
        )
        .with_platform(platform.patterns());
    let namespaces = tenant_namespaces(&inputs, setting, &names);
    let others = OtherTenants(others);
    let mut translator = Translator::new(policy, Some(sandbox)).with_namespaces(&namespaces);
    if !others.0.is_empty() {
        translator = translator.with_published(&others);
    }
    Ok(inputs
        .into_iter()
        .map(|input| {
            let note = explain
                && setting.side == Side::Tenant
                && others.0.is_empty()
                && has_text(policy, &input);
            let dependency = explain
                && setting.side == Side::Super
                && kind_of(policy, &input).any(|r| r.dependency);
            let mut result = match setting.side {
                Side::Super => translator.to_super(input, &names, explain),
                Side::Tenant => translator.to_tenant(&input, &names, explain),
            };
            if let (true, Some(t)) = (dependency, result.as_mut().ok()) {
                t.changes.push(crate::translate::Change {
                    path: String::new(),
                    before: None,
                    after: None,
                    rule: "a dependency: live, it crosses only while a synced object names it".into(),
                });
            }
            if let (true, Ok(t)) = (note, result.as_mut()) {
                t.changes.push(crate::translate::Change {
                    path: String::new(),
                    before: None,
                    after: None,
                    rule: "offline, free text keeps other tenants' super namespaces; live redacts every one ferry made (name tenants with --other-tenants)".into(),
                });
            }
            result
        })
        .collect())
}

/// The policy entries of `object`'s kind.
fn kind_of<'p>(
    policy: &'p Policy,
    object: &'p Value,
) -> impl Iterator<Item = &'p crate::policy::Resource> {
    let group = crate::schema::load::group_of(object["apiVersion"].as_str().unwrap_or(""));
    let kind = object["kind"].as_str().unwrap_or("");
    policy
        .resources
        .iter()
        .filter(move |r| r.group_kind.group == group && r.group_kind.kind == kind)
}

/// Whether `object`'s kind has free text (`x-ferry-text`) that live would also redact.
fn has_text(policy: &Policy, object: &Value) -> bool {
    kind_of(policy, object).any(|r| {
        r.plan
            .rules()
            .iter()
            .any(|(_, a)| matches!(a.rule, crate::schema::Rule::Text))
    })
}

/// Offline, the tenant's namespaces are those of the input (unmapped when it is a super
/// object) and those the setting names.
fn tenant_namespaces(inputs: &[Value], setting: &Setting, names: &NameMap) -> Vec<String> {
    let mut out: BTreeSet<String> = setting
        .tenant_namespaces
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    for input in inputs {
        let Some(ns) = input.pointer("/metadata/namespace").and_then(Value::as_str) else {
            continue;
        };
        // A copy in an operator's namespace (`placement`) names its tenant namespace in
        // ferry's annotation.
        let placed = input
            .pointer("/metadata/annotations/ferry.dev~1tenant-namespace")
            .and_then(Value::as_str);
        let ns = match setting.side {
            Side::Super => Some(ns.to_string()),
            Side::Tenant => names.to_tenant(ns).or(placed.map(str::to_string)),
        };
        out.extend(ns.filter(|n| !n.is_empty()));
    }
    out.into_iter().collect()
}
