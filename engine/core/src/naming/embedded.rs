//! Names that embed a namespace or lie under a tenant's domain: in-cluster host names
//! (`db-0.db.prod.svc.cluster.local`), external host names (`shop.team-a.apps.example.com`),
//! workload identities (`spiffe://cluster.local/ns/prod/sa/api`) and namespace globs
//! (`prod-*`). Pure string functions: the translator maps with them, the guard checks what is
//! written with them, so both read a name the same way.
//!
//! ```text
//!  <pod>.<name>.<ns>.svc.cluster.local      in-cluster: <ns> is a namespace
//!  <name>.<ns>  <name>.<ns>.svc  *.<ns>.svc  (short names: <name>, stay)
//!  *.team-a.apps.example.com                external: under one of the tenant's domains
//!  spiffe://<td>/ns/<ns>/sa/<sa>            identity: <ns> is a namespace
//!  prod-*                                   glob over namespaces: <tenant>-prod-*
//! ```

use super::{dns_label_problem, dns_subdomain_problem, MAX_LABEL_LEN, MAX_SUBDOMAIN_LEN};

/// The cluster domain whose `svc` names are in-cluster (Kubernetes' default; a cluster with
/// another domain writes the short `.svc` form).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// A host name as DNS compares it: lower-case, without the trailing dot; refused when it is
/// not ASCII (an internationalised name is written in its ASCII `xn--` form, the form every
/// Kubernetes API and DNS compare), has an empty or invalid label, or a wildcard anywhere but
/// as the whole first label.
pub fn normalize_host(host: &str) -> Result<String, String> {
    if !host.is_ascii() {
        return Err(format!(
            "{host:?} is not ASCII: write an internationalised name in its ASCII (xn--) form"
        ));
    }
    let lower = host.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() {
        return Err("an empty host name".into());
    }
    if name.len() > MAX_SUBDOMAIN_LEN {
        return Err(format!(
            "{host:?} is longer than {MAX_SUBDOMAIN_LEN} characters"
        ));
    }
    for (i, label) in name.split('.').enumerate() {
        if label == "*" && i == 0 {
            continue;
        }
        if let Some(why) = dns_label_problem(label) {
            let why = if label.contains('*') {
                "a wildcard stands only as the whole first label (*.example.com)".to_string()
            } else {
                why
            };
            return Err(format!("{host:?}: label {label:?}: {why}"));
        }
    }
    Ok(name.to_string())
}

/// An in-cluster DNS name whose namespace label can be mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceHost {
    /// The labels before the namespace (`db-0.db`, `reviews`, `*`).
    pub prefix: String,
    /// The namespace label.
    pub namespace: String,
    /// What follows the namespace: empty, `.svc` or `.svc.cluster.local`.
    pub suffix: String,
}

impl ServiceHost {
    /// The same name in namespace `namespace`.
    pub fn with_namespace(&self, namespace: &str) -> String {
        format!("{}.{namespace}{}", self.prefix, self.suffix)
    }
}

/// How a (normalised) host name reads as an in-cluster name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InCluster {
    /// `<name>`: resolved in the object's own namespace; stays.
    Short,
    /// `<name>.<ns>` and the longer forms: the namespace label is mapped.
    Namespaced(ServiceHost),
    /// A dotted name without `.svc` of more than three labels: not an in-cluster name.
    NotService,
}

/// Reads a normalised host name as an in-cluster DNS name: `<name>`, `[<pod>.]<name>.<ns>`,
/// `[<pod>.]<name>.<ns>.svc[.cluster.local]`, each with an optional leading `*` label. A
/// bare `*`, a wildcard in the namespace's place (`*.svc.cluster.local`) or a `svc` name
/// without a namespace is refused: each reaches beyond one namespace.
pub fn in_cluster(host: &str) -> Result<InCluster, String> {
    let labels: Vec<&str> = host.split('.').collect();
    if labels == ["*"] {
        return Err("a bare * names every host in the mesh".into());
    }
    if labels.len() == 1 {
        return Ok(InCluster::Short);
    }
    let cluster: Vec<&str> = CLUSTER_DOMAIN.split('.').collect();
    let suffix_len = if labels.ends_with(&[&["svc"][..], &cluster].concat()) {
        1 + cluster.len()
    } else if labels.ends_with(&["svc"]) {
        1
    } else {
        0
    };
    let core = &labels[..labels.len() - suffix_len];
    match (core.len(), suffix_len) {
        (2 | 3, _) => {}
        (_, 0) => return Ok(InCluster::NotService),
        _ => {
            return Err(format!(
                "{host:?} is not an in-cluster name (<name>.<namespace>.svc, with an optional <pod>. before it)"
            ))
        }
    }
    let namespace = core[core.len() - 1];
    if namespace == "*" || dns_label_problem(namespace).is_some() {
        return Err(format!(
            "{host:?}: a wildcard in the namespace's place reaches every namespace"
        ));
    }
    let suffix = labels[core.len()..].iter().fold(String::new(), |mut s, l| {
        s.push('.');
        s.push_str(l);
        s
    });
    Ok(InCluster::Namespaced(ServiceHost {
        prefix: core[..core.len() - 1].join("."),
        namespace: namespace.to_string(),
        suffix,
    }))
}

/// Whether a normalised host name ends in `.svc` or `.svc.<cluster domain>` (or has no dot):
/// with `x-ferry-host: [service, external]` such a name is in-cluster, any other external.
pub fn looks_in_cluster(host: &str) -> bool {
    !host.contains('.')
        || host.ends_with(".svc")
        || host.ends_with(&format!(".svc.{CLUSTER_DOMAIN}"))
}

/// Whether the normalised host name (or `*.` wildcard) lies under one of `domains`
/// (normalised): equal to one, or a subdomain of one.
pub fn under_domain(host: &str, domains: &[String]) -> bool {
    let name = host.strip_prefix("*.").unwrap_or(host);
    domains.iter().any(|d| {
        name == d
            || name
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.'))
    })
}

/// A tenant domain as written in a policy's `spec.domains` (with `{tenant}` substituted) or
/// a SyncConfig tenant's `domains`: a DNS name of at least two labels, no wildcard.
pub fn domain_problem(domain: &str) -> Option<String> {
    match normalize_host(domain) {
        Err(why) => Some(why),
        Ok(d) if d.contains('*') => {
            Some("a domain is a plain name; every name under it is the tenant's".into())
        }
        Ok(d) if !d.contains('.') => Some(format!(
            "{d:?} is a single label; a tenant's domain has at least two (team-a.apps.example.com)"
        )),
        Ok(_) => None,
    }
}

/// A workload identity: a SPIFFE ID `spiffe://<trust-domain>/ns/<ns>/sa/<sa>` or a mesh
/// principal `<trust-domain>/ns/<ns>/sa/<sa>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity<'a> {
    /// `spiffe://` or nothing.
    pub scheme: &'a str,
    /// The trust domain.
    pub trust_domain: &'a str,
    /// The namespace.
    pub namespace: &'a str,
    /// The service account (`*`: every one in the namespace).
    pub service_account: &'a str,
}

impl Identity<'_> {
    /// The same identity in namespace `namespace`.
    pub fn with_namespace(&self, namespace: &str) -> String {
        format!(
            "{}{}/ns/{namespace}/sa/{}",
            self.scheme, self.trust_domain, self.service_account
        )
    }
}

/// Reads a workload identity; any other shape (another path, a wildcard outside the service
/// account's place, a prefix or suffix match) is refused, since ferry could not tell which
/// namespace it names.
pub fn identity(text: &str) -> Result<Identity<'_>, String> {
    let (scheme, rest) = match text.strip_prefix("spiffe://") {
        Some(rest) => ("spiffe://", rest),
        None => ("", text),
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [trust_domain, "ns", namespace, "sa", service_account] = parts[..] else {
        return Err(format!(
            "{text:?} is not a workload identity ([spiffe://]<trust-domain>/ns/<namespace>/sa/<service-account>)"
        ));
    };
    if let Some(why) = dns_subdomain_problem(trust_domain) {
        return Err(format!("{text:?}: trust domain {trust_domain:?}: {why}"));
    }
    if let Some(why) = dns_label_problem(namespace) {
        return Err(format!("{text:?}: namespace {namespace:?}: {why}"));
    }
    if service_account != "*" {
        if let Some(why) = dns_subdomain_problem(service_account) {
            return Err(format!(
                "{text:?}: service account {service_account:?}: {why}"
            ));
        }
    }
    Ok(Identity {
        scheme,
        trust_domain,
        namespace,
        service_account,
    })
}

/// Why `pattern` is not a glob over namespace names: lower-case letters, digits, `-`, and
/// the wildcards `*` and `?` only (no classes or alternatives, whose reach ferry could not
/// bound), at most a label long.
pub fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        return Some("an empty pattern".into());
    }
    if pattern.len() > MAX_LABEL_LEN {
        return Some(format!("longer than {MAX_LABEL_LEN} characters"));
    }
    pattern
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '*' | '?'))
        .map(|c| {
            format!("{c:?} is not allowed (a namespace glob has a-z, 0-9, -, and the wildcards * and ?)")
        })
}

/// Whether `pattern` has a wildcard (without one it is a plain namespace name).
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_normalised_as_dns_compares_them() {
        assert_eq!(
            normalize_host("Shop.Team-A.example.com.").unwrap(),
            "shop.team-a.example.com"
        );
        assert!(normalize_host("bücher.example.com").is_err());
        assert!(normalize_host("a..b").is_err());
        assert!(normalize_host("a.*.b").is_err());
        assert!(normalize_host("*foo.example.com").is_err());
        assert_eq!(normalize_host("*.example.com").unwrap(), "*.example.com");
    }

    #[test]
    fn in_cluster_names_give_their_namespace_label() {
        let ns = |h: &str| match in_cluster(h).unwrap() {
            InCluster::Namespaced(s) => Some((s.prefix, s.namespace, s.suffix)),
            _ => None,
        };
        assert_eq!(
            ns("reviews.prod"),
            Some(("reviews".into(), "prod".into(), "".into()))
        );
        assert_eq!(
            ns("db-0.db.prod.svc.cluster.local"),
            Some(("db-0.db".into(), "prod".into(), ".svc.cluster.local".into()))
        );
        assert_eq!(
            ns("*.prod.svc"),
            Some(("*".into(), "prod".into(), ".svc".into()))
        );
        assert_eq!(in_cluster("reviews").unwrap(), InCluster::Short);
        assert_eq!(in_cluster("a.b.c.d").unwrap(), InCluster::NotService);
        for bad in ["*", "*.svc.cluster.local", "prod.svc", "a.b.c.prod.svc"] {
            assert!(in_cluster(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_domain_holds_itself_and_its_subdomains_only() {
        let domains = vec!["team-a.apps.example.com".to_string()];
        assert!(under_domain("team-a.apps.example.com", &domains));
        assert!(under_domain("*.team-a.apps.example.com", &domains));
        assert!(under_domain("x.y.team-a.apps.example.com", &domains));
        assert!(!under_domain("evilteam-a.apps.example.com", &domains));
        assert!(!under_domain("*.apps.example.com", &domains));
        assert!(!under_domain("apps.example.com", &domains));
    }

    #[test]
    fn identities_have_one_shape() {
        let id = identity("spiffe://cluster.local/ns/prod/sa/api").unwrap();
        assert_eq!(
            id.with_namespace("team-a-prod"),
            "spiffe://cluster.local/ns/team-a-prod/sa/api"
        );
        assert!(identity("cluster.local/ns/prod/sa/*").is_ok());
        for bad in [
            "*",
            "cluster.local/ns/*/sa/api",
            "cluster.local/ns/prod",
            "spiffe://cluster.local/ns/prod/sa/api/x",
            "cluster.local/ns/prod/*",
        ] {
            assert!(identity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_are_plain_globs() {
        assert!(pattern_problem("prod-*").is_none());
        assert!(pattern_problem("p?od").is_none());
        for bad in ["", "[a-z]*", "{a,b}", "Prod", "a/b", "!x"] {
            assert!(pattern_problem(bad).is_some(), "{bad}");
        }
    }
}
