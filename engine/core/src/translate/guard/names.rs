//! The guard's check of names a tenant owns beyond namespaces, in what is written: host
//! names, workload identities and namespace globs inside the tenant's space (down), lists
//! that mean "everything" present, forbidden fields absent, no service-account token; up,
//! every namespace-bearing value one of the tenant's namespaces or a redacted name.

use serde_json::{Map, Value};

use super::{shown, Guard};
use crate::naming::dns_label_problem;
use crate::naming::embedded::{
    identity, in_cluster, looks_in_cluster, normalize_host, pattern_problem, under_domain,
    InCluster,
};
use crate::schema::{Hosts, Node, Rule};
use crate::translate::fields::names::{
    forbidden, is_empty_value, outside_domains, qualified, requires_below, secret_template, text,
    token_secret,
};
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result};

/// What ferry shows a tenant in place of a namespace that is not its own.
const REDACTED_PREFIX: &str = "redacted-";

impl Guard<'_> {
    /// Down, the rules of names on one value: `Ok(true)` when the rule was one of them.
    pub(super) fn name_rule(&self, rule: &Rule, value: &Value, path: &Path<'_>) -> Result<bool> {
        match rule {
            Rule::Pattern => self.pattern(value, path)?,
            Rule::Host(hosts) => self.host(*hosts, value, path)?,
            Rule::Identity => self.identity(value, path)?,
            Rule::Qualified => qualified(value, path)?,
            Rule::Required(_) if is_empty_value(value) => {
                return Err(Refusal::new(
                    Reason::OutsideTenant,
                    format!("{path}: empty, which the operator reads as every namespace or host"),
                ))
            }
            Rule::Forbid(forbid) => forbidden(forbid, value, path)?,
            Rule::SecretTemplate => secret_template(value, path)?,
            Rule::Required(_) | Rule::Keep(_) => {}
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Down, `""` among names (the element of a list under a name rule) is refused.
    pub(super) fn empty_name(&self, node: &Node, value: &Value, path: &Path<'_>) -> Result<()> {
        let empty = value.is_null() || value.as_str() == Some("");
        if empty && node.has(Rule::bears_name) {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: \"\" in a list of names means every namespace or host to some operators"),
            ));
        }
        Ok(())
    }

    /// Down, a field absent (or null) that is, or leads through objects to, a list the
    /// operator reads as "everything" when absent.
    pub(super) fn absent_required(
        &self,
        node: &Node,
        map: &Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        for (key, child) in &node.fields {
            if map.get(key).is_none_or(Value::is_null) && requires_below(child) {
                return Err(Refusal::new(
                    Reason::OutsideTenant,
                    format!(
                        "{}: absent, which the operator reads as every namespace or host",
                        path.key(key)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn pattern(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        let Some(pattern) = text(value, path, "a namespace glob")? else {
            return Ok(());
        };
        let prefix = format!("{}-", self.names.tenant());
        // A glob in the tenant's space may still match a platform namespace named in it
        // (tenant istio's `*` is `istio-*`, which matches istio-system).
        if let Some(platform) = self.names.platform_in_glob(pattern) {
            return Err(Refusal::new(
                Reason::OutsideTenant,
                format!("{path}: the glob {pattern:?} matches the platform namespace {platform:?} (platformNamespaces)"),
            ));
        }
        match pattern.strip_prefix(&prefix) {
            Some(rest) if !rest.is_empty() && pattern_problem(rest).is_none() => Ok(()),
            _ => Err(Refusal::new(
                Reason::OutsideTenant,
                format!(
                    "{path}: the glob {pattern:?} reaches beyond tenant {}'s namespaces ({prefix}…)",
                    self.names.tenant()
                ),
            )),
        }
    }

    fn host(&self, hosts: Hosts, value: &Value, path: &Path<'_>) -> Result<()> {
        let Some(host) = text(value, path, "a host name")? else {
            return Ok(());
        };
        let normal = normalize_host(host)
            .map_err(|why| Refusal::new(Reason::Invalid, format!("{path}: {why}")))?;
        let in_cluster_name = match hosts {
            Hosts::Service => true,
            Hosts::External => false,
            Hosts::Both => looks_in_cluster(&normal),
        };
        if !in_cluster_name {
            return match under_domain(&normal, self.names.domains()) {
                true => Ok(()),
                false => Err(outside_domains(&normal, self.names, path)),
            };
        }
        match in_cluster(&normal) {
            Ok(InCluster::Short) => match self.placed {
                Some(fixed) => Err(super::placed_unqualified(
                    path,
                    &format!("the short name {host:?}"),
                    fixed,
                )),
                None => Ok(()),
            },
            Ok(InCluster::Namespaced(service)) => {
                self.own_namespace(&service.namespace, host, path)
            }
            Ok(InCluster::NotService) => Err(Refusal::new(
                Reason::OutsideTenant,
                format!("{path}: {host:?} is not an in-cluster name of the tenant's"),
            )),
            Err(why) => Err(Refusal::new(
                Reason::OutsideTenant,
                format!("{path}: {why}"),
            )),
        }
    }

    fn identity(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        let Some(text) = text(value, path, "a workload identity")? else {
            return Ok(());
        };
        let id = identity(text)
            .map_err(|why| Refusal::new(Reason::OutsideTenant, format!("{path}: {why}")))?;
        self.own_namespace(id.namespace, text, path)
    }

    fn own_namespace(&self, namespace: &str, whole: &str, path: &Path<'_>) -> Result<()> {
        if let Some(pattern) = self.names.platform(namespace) {
            return Err(super::platform_namespace(namespace, pattern, path));
        }
        if dns_label_problem(namespace).is_none() && self.names.in_tenant_space(namespace) {
            return Ok(());
        }
        Err(Refusal::new(
            Reason::OutsideTenant,
            format!(
                "{path}: {whole:?} names namespace {namespace:?}, which is not tenant {}'s",
                self.names.tenant()
            ),
        ))
    }

    /// A Secret (a dependency going down, a produced or public copy coming up) never carries
    /// a service-account token.
    pub(super) fn credential(&self, object: &Map<String, Value>) -> Result<()> {
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        let kind = object.get("kind").and_then(Value::as_str);
        if (api_version, kind) != (Some("v1"), Some("Secret")) {
            return Ok(());
        }
        let annotations = object.get("metadata").and_then(|m| m.get("annotations"));
        match token_secret(object.get("type"), annotations) {
            Some(why) => Err(Refusal::new(
                Reason::Forbidden,
                format!("a Secret with {why}; service-account tokens never cross"),
            )),
            None => Ok(()),
        }
    }

    /// Up, every namespace-bearing value below `node` (namespaces, reference namespaces,
    /// in-cluster host names, identities) is one of the tenant's namespaces, a published
    /// object's, or a redacted name.
    pub(super) fn up_names(
        &self,
        node: &Node,
        value: &Value,
        parent: Option<&Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        if !node.kept(value) {
            for annotated in &node.rules {
                self.up_rule(&annotated.rule, value, parent, path)?;
            }
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if let Some(n) = node.fields.get(key).or(node.values.as_deref()) {
                        self.up_names(n, child, Some(map), &path.key(key))?;
                    }
                }
            }
            Value::Array(items) => {
                for (i, element) in items.iter().enumerate() {
                    if let Some(n) = node.element(element) {
                        self.up_names(&n, element, None, &path.index(i))?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn up_rule(
        &self,
        rule: &Rule,
        value: &Value,
        parent: Option<&Map<String, Value>>,
        path: &Path<'_>,
    ) -> Result<()> {
        let Some(text) = value.as_str().filter(|s| !s.is_empty()) else {
            if let (Rule::Ref(r), Value::Object(own)) = (rule, value) {
                if let Some(key) = r.namespace_key(true) {
                    self.up_value(own.get(key), &path.key(key))?;
                }
            }
            return Ok(());
        };
        match rule {
            Rule::Namespace => self.up_namespace(text, path),
            Rule::Ref(r) => match (r.sibling_namespace(), parent) {
                (Some(key), Some(parent)) => {
                    self.up_value(parent.get(key), &path.parent().key(key))
                }
                _ => Ok(()),
            },
            Rule::Host(hosts @ (Hosts::Service | Hosts::Both)) => {
                let normal = normalize_host(text)
                    .map_err(|why| Refusal::new(Reason::Invalid, format!("{path}: {why}")))?;
                if *hosts == Hosts::Both && !looks_in_cluster(&normal) {
                    return Ok(());
                }
                match in_cluster(&normal) {
                    Ok(InCluster::Short) => Ok(()),
                    Ok(InCluster::Namespaced(s)) => self.up_namespace(&s.namespace, path),
                    // What ferry cannot read as a name of one namespace never flows up.
                    Ok(InCluster::NotService) | Err(_) => Err(Refusal::new(
                        Reason::OutsideTenant,
                        format!("{path}: {text:?} is not an in-cluster name ferry can check"),
                    )),
                }
            }
            Rule::Identity => match identity(text) {
                Ok(id) => self.up_namespace(id.namespace, path),
                Err(why) => Err(Refusal::new(
                    Reason::OutsideTenant,
                    format!("{path}: {why}"),
                )),
            },
            _ => Ok(()),
        }
    }

    fn up_value(&self, value: Option<&Value>, path: &Path<'_>) -> Result<()> {
        match value {
            Some(Value::String(ns)) if !ns.is_empty() => self.up_namespace(ns, path),
            _ => Ok(()),
        }
    }

    fn up_namespace(&self, ns: &str, path: &Path<'_>) -> Result<()> {
        let redacted = ns
            .strip_prefix(REDACTED_PREFIX)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let own = self.namespaces.iter().any(|n| n == ns);
        let public = self.published.is_some_and(|p| p.public_namespace(ns));
        if redacted || own || public {
            return Ok(());
        }
        Err(Refusal::new(
            Reason::OutsideTenant,
            format!(
                "{path}: {} is not one of tenant {}'s namespaces (up, every other namespace is shown redacted)",
                shown(&Value::String(ns.to_string())),
                self.names.tenant()
            ),
        ))
    }
}
