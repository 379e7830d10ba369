//! Names a tenant owns beyond namespaces: host names, workload identities and namespace
//! globs mapped (down) or unmapped and redacted (up); lists that mean "everything" when empty
//! refused or filled; forbidden fields and Secret templates refused.

use serde_json::{Map, Value};

use super::{Fields, Way};
use crate::naming::embedded::{
    identity, in_cluster, is_glob, looks_in_cluster, normalize_host, pattern_problem, under_domain,
    InCluster,
};
use crate::schema::{Annotated, Empty, Forbid, Hosts, Node, Rule};
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result};

/// The Secret type whose data the super cluster's token controller fills with a credential
/// for the super cluster's API server.
pub const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";
/// The annotation that names the service account such a Secret's token is for.
pub const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

/// Whether `node` requires a value somewhere below it through object fields alone (an absent
/// object on the way means the list below it is absent too).
pub(crate) fn requires_below(node: &Node) -> bool {
    node.has(|r| matches!(r, Rule::Required(_))) || node.fields.values().any(requires_below)
}

/// Whether a list element or a string holds nothing: `""`, `[]` or null.
pub(crate) fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Why a Secret (or a Secret's template: its `type` and `metadata.annotations`) would carry
/// a service-account token: the super cluster's token controller fills such a Secret with a
/// credential for the super cluster's own API server.
pub(crate) fn token_secret(
    secret_type: Option<&Value>,
    annotations: Option<&Value>,
) -> Option<String> {
    if secret_type.and_then(Value::as_str) == Some(SERVICE_ACCOUNT_TOKEN) {
        return Some(format!(
            "type {SERVICE_ACCOUNT_TOKEN}: the super cluster would fill it with a credential for its own API server"
        ));
    }
    let named = annotations
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(SERVICE_ACCOUNT_NAME));
    named.then(|| {
        format!("annotation {SERVICE_ACCOUNT_NAME}: it asks for a service-account token of the super cluster")
    })
}

impl Fields<'_> {
    /// A namespace glob: down `prod-*` becomes `<tenant>-prod-*` (a glob without a wildcard
    /// is a namespace, mapped as one); up the tenant's prefix goes, another's is redacted.
    pub(super) fn map_pattern(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Some(pattern) = text(value, path, "a namespace glob")?.map(str::to_string) else {
            return Ok(());
        };
        let mapped = match self.way {
            Way::Down => {
                if let Some(why) = pattern_problem(&pattern) {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!("{path}: {pattern:?} is not a namespace glob: {why}"),
                    ));
                }
                if is_glob(&pattern) {
                    format!("{}-{pattern}", self.names.tenant())
                } else {
                    self.names.to_super(&pattern)
                }
            }
            Way::Up => match pattern.strip_prefix(&format!("{}-", self.names.tenant())) {
                Some(rest) if is_glob(rest) && !rest.is_empty() => rest.to_string(),
                _ => match self.tenant_namespace(&pattern) {
                    Some(ns) => ns,
                    None => self.redact(&pattern),
                },
            },
        };
        self.replace(rule, value, pattern, mapped, path);
        Ok(())
    }

    /// A host name: in-cluster names have their namespace label mapped (down) or unmapped
    /// (up, another's redacted); external names must lie under the tenant's domains (down).
    pub(super) fn map_host(
        &mut self,
        rule: &Annotated,
        hosts: Hosts,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Some(host) = text(value, path, "a host name")?.map(str::to_string) else {
            return Ok(());
        };
        let normal = normalize_host(&host).map_err(|why| {
            Refusal::new(Reason::Invalid, format!("{path}: not a host name: {why}"))
        })?;
        let in_cluster_name = match hosts {
            Hosts::Service => true,
            Hosts::External => false,
            Hosts::Both => looks_in_cluster(&normal),
        };
        if !in_cluster_name {
            if self.way == Way::Down && !under_domain(&normal, self.names.domains()) {
                return Err(outside_domains(&normal, self.names, path));
            }
            return Ok(());
        }
        let parsed = in_cluster(&normal)
            .map_err(|why| Refusal::new(Reason::OutsideTenant, format!("{path}: {why}")))?;
        let service = match parsed {
            InCluster::Short => return Ok(()),
            InCluster::NotService => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{path}: {normal:?} is not an in-cluster name (<name>.<namespace>[.svc[.cluster.local]])"),
                ))
            }
            InCluster::Namespaced(service) => service,
        };
        let namespace = match self.way {
            Way::Down => self.names.to_super(&service.namespace),
            Way::Up => match self.tenant_namespace(&service.namespace) {
                Some(ns) => ns,
                None => self.redact(&service.namespace),
            },
        };
        self.replace(rule, value, host, service.with_namespace(&namespace), path);
        Ok(())
    }

    /// A workload identity: its namespace mapped (down), unmapped or redacted (up).
    pub(super) fn map_identity(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Some(text) = text(value, path, "a workload identity")?.map(str::to_string) else {
            return Ok(());
        };
        let id = identity(&text)
            .map_err(|why| Refusal::new(Reason::Invalid, format!("{path}: {why}")))?;
        let namespace = match self.way {
            Way::Down => self.names.to_super(id.namespace),
            Way::Up => match self.tenant_namespace(id.namespace) {
                Some(ns) => ns,
                None => self.redact(id.namespace),
            },
        };
        let mapped = id.with_namespace(&namespace);
        self.replace(rule, value, text, mapped, path);
        Ok(())
    }

    /// A present list (or string) the operator reads as "everything" when empty: refused,
    /// or (down, `empty: tenant`) the tenant's namespaces.
    pub(super) fn required(
        &mut self,
        rule: &Annotated,
        empty: Empty,
        node: &Node,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        if self.way == Way::Up || !is_empty_value(value) {
            return Ok(());
        }
        let filled = self.fill(empty, node, path)?;
        self.record(path, Some(value.clone()), Some(filled.clone()), rule);
        *value = filled;
        Ok(())
    }

    /// Down, an absent field that is (or leads through objects to) a list the operator reads
    /// as "everything": refused, or created holding the tenant's namespaces.
    pub(super) fn absent_required(
        &mut self,
        node: &Node,
        map: &mut Map<String, Value>,
        key: &str,
        path: &Path<'_>,
    ) -> Result<()> {
        if self.way == Way::Up || !requires_below(node) {
            return Ok(());
        }
        let field_path = path.key(key);
        // The rules run on what is filled in, as on what a tenant writes.
        let seed = match node.rules.iter().find_map(|a| match a.rule {
            Rule::Required(empty) => Some((a, empty)),
            _ => None,
        }) {
            Some((rule, empty)) => {
                let filled = self.fill(empty, node, &field_path)?;
                self.record(&field_path, None, Some(filled.clone()), rule);
                filled
            }
            None => Value::Object(Map::new()),
        };
        map.insert(key.to_string(), seed);
        self.field(node, map, key, &field_path)
    }

    /// What an empty list becomes: refused, or the tenant's namespaces (tenant names, which
    /// the element rules then map), or with a glob the tenant's whole space (`*`).
    fn fill(&self, empty: Empty, node: &Node, path: &Path<'_>) -> Result<Value> {
        if empty == Empty::Refuse {
            return Err(Refusal::new(
                Reason::OutsideTenant,
                format!("{path}: absent or empty, which the operator reads as every namespace or host; name the tenant's own"),
            ));
        }
        let glob = node
            .items
            .as_deref()
            .is_some_and(|items| items.has(|r| matches!(r, Rule::Pattern)));
        if glob {
            return Ok(Value::Array(vec![Value::String("*".into())]));
        }
        if self.namespaces.is_empty() {
            return Err(Refusal::new(
                Reason::OutsideTenant,
                format!("{path}: absent or empty means every namespace, and the tenant's namespaces are not known to fill it in (offline: --tenant-namespaces)"),
            ));
        }
        Ok(Value::Array(
            self.namespaces.iter().cloned().map(Value::String).collect(),
        ))
    }

    /// Down, a forbidden field set (to anything but the values still allowed) refuses the
    /// object with the policy's reason.
    pub(super) fn forbid(&self, forbid: &Forbid, value: &Value, path: &Path<'_>) -> Result<()> {
        forbidden(forbid, value, path)
    }

    /// Down, a Secret template must not make the super cluster mint a service-account token.
    pub(super) fn secret_template(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        if self.way == Way::Up {
            return Ok(());
        }
        secret_template(value, path)
    }

    /// Up, the tenant name of a super namespace when it is one of the tenant's namespaces.
    pub(super) fn tenant_namespace(&self, super_ns: &str) -> Option<String> {
        self.names
            .to_tenant(super_ns)
            .filter(|t| self.namespaces.iter().any(|n| n == t))
    }

    fn replace(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        before: String,
        after: String,
        path: &Path<'_>,
    ) {
        if after != before {
            self.record(
                path,
                Some(Value::String(before)),
                Some(Value::String(after.clone())),
                rule,
            );
            *value = Value::String(after);
        }
    }
}

/// The refusal of an external host outside the tenant's domains.
pub(crate) fn outside_domains(
    host: &str,
    names: &crate::naming::NameMap,
    path: &Path<'_>,
) -> Refusal {
    let message = match names.domains() {
        [] => format!(
            "{path}: {host:?} is an external host name, and tenant {} has no domains (SyncConfig tenants[].domains, the policy's spec.domains, offline --domain)",
            names.tenant()
        ),
        domains => format!(
            "{path}: {host:?} is not under tenant {}'s domains ({})",
            names.tenant(),
            domains.join(", ")
        ),
    };
    Refusal::new(Reason::OutsideTenant, message)
}

/// A forbidden field set to a value not allowed.
pub(crate) fn forbidden(forbid: &Forbid, value: &Value, path: &Path<'_>) -> Result<()> {
    if value.is_null() || forbid.unless.contains(value) {
        return Ok(());
    }
    Err(Refusal::new(
        Reason::Forbidden,
        format!("{path}: {}", forbid.reason),
    ))
}

/// A Secret template (its `type` and `metadata.annotations`) that asks for a token.
pub(crate) fn secret_template(value: &Value, path: &Path<'_>) -> Result<()> {
    let Value::Object(template) = value else {
        return Ok(());
    };
    let annotations = template.get("metadata").and_then(|m| m.get("annotations"));
    match token_secret(template.get("type"), annotations) {
        Some(why) => Err(Refusal::new(
            Reason::Forbidden,
            format!("{path}: a template of a Secret with {why}"),
        )),
        None => Ok(()),
    }
}

/// The string of a value that holds one; `None` for null and `""`.
pub(crate) fn text<'v>(value: &'v Value, path: &Path<'_>, what: &str) -> Result<Option<&'v str>> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(Refusal::new(
            Reason::Invalid,
            format!(
                "{path}: expected {what}, found {}",
                crate::translate::fields::selector::shown(other)
            ),
        )),
    }
}

/// A host name without a dot where the rule refuses short names: resolved in whichever
/// namespace reads it, it names no namespace of the tenant's (`kubernetes`, `vault`).
pub(crate) fn qualified(value: &Value, path: &Path<'_>) -> Result<()> {
    match text(value, path, "a host name")? {
        Some(host) if !host.trim_end_matches('.').contains('.') => Err(Refusal::new(
            Reason::OutsideTenant,
            format!("{path}: {host:?} has no domain: it names no namespace or domain of the tenant's (write <name>.<namespace>.svc or a name under its domains)"),
        )),
        _ => Ok(()),
    }
}
