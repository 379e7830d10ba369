//! The naming map between tenant and super names (DESIGN.md "Naming").
//!
//! `map(t, x)` is `t-x` when that fits in a DNS label, otherwise its first 54 characters, a
//! dash and the first 8 hex digits of `sha256(t/x)`. Short names invert by stripping the
//! prefix; hashed names cannot be inverted from the string alone, so [`NameMap`] also carries
//! the pairs ferry has already seen (from `ferry.dev/` annotations on super objects).

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::glob::Glob;

/// The prefix of the keys serde_json reserves (`$serde_json::private::Number`, `…RawValue`):
/// in the first place of a map, serde_json reads that map as something else.
pub const SERDE_JSON_PRIVATE: &str = "$serde_json::private::";
/// serde_json's key for a number kept as text (`arbitrary_precision`): a float, or an integer
/// past 64 bits, comes as a map of it to the number's text.
pub const SERDE_JSON_NUMBER: &str = "$serde_json::private::Number";

/// Longest tenant name: leaves room for `-` and a useful part of the tenant namespace.
pub const MAX_TENANT_LEN: usize = 20;

/// Longest DNS label, and so the longest namespace name.
pub const MAX_LABEL_LEN: usize = 63;

/// How many characters of `t-x` a hashed name keeps before `-` and the digest.
const HASHED_KEEP: usize = 54;

/// Longest DNS subdomain, and so the longest name of most Kubernetes objects.
pub const MAX_SUBDOMAIN_LEN: usize = 253;

/// Namespaces starting with this belong to Kubernetes itself; no tenant name may map into it.
pub const RESERVED_NAMESPACE_PREFIX: &str = "kube-";

/// Tenant names that would map into the platform's own namespaces: Kubernetes' (`kube-system`),
/// ferry's (`ferry-system`) and OpenShift's (`openshift-etcd`). A tenant may not be called
/// one of these or start with one of them and `-`.
pub const RESERVED_TENANT_PREFIXES: &[&str] = &["kube", "ferry", "openshift"];

/// A problem with a tenant name or a set of tenant names.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The name is not an RFC 1123 DNS label of at most 20 characters.
    #[error("tenant name {name:?} is invalid: {why}")]
    InvalidTenant {
        /// The rejected name.
        name: String,
        /// What rule it breaks.
        why: String,
    },
    /// Two tenants whose super namespaces could collide.
    #[error("tenant names {short:?} and {long:?} collide: \"{short}-\" is a prefix of {long:?}, so their super namespaces could be equal")]
    PrefixCollision {
        /// The shorter name.
        short: String,
        /// The longer name that starts with `short-`.
        long: String,
    },
    /// The same tenant listed twice.
    #[error("tenant {0:?} is listed twice")]
    DuplicateTenant(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A validated tenant name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// Validates `name` as a tenant name: a DNS label of at most 20 characters.
    pub fn new(name: &str) -> Result<Self> {
        let invalid = |why: &str| Error::InvalidTenant {
            name: name.to_string(),
            why: why.to_string(),
        };
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.len() > MAX_TENANT_LEN {
            return Err(invalid(&format!(
                "it has {} characters, at most {MAX_TENANT_LEN} are allowed",
                name.len()
            )));
        }
        if let Some(why) = dns_label_problem(name) {
            return Err(invalid(&why));
        }
        if let Some(system) = RESERVED_TENANT_PREFIXES
            .iter()
            .find(|p| name == **p || name.starts_with(&format!("{p}-")))
        {
            return Err(invalid(&format!(
                "its super namespaces would start with \"{system}-\", which the platform reserves for its own namespaces ({system}-system, ...)"
            )));
        }
        Ok(Self(name.to_string()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Says why `s` is not an RFC 1123 DNS label, or `None` when it is one.
pub fn dns_label_problem(s: &str) -> Option<String> {
    let fine = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let bytes = s.as_bytes();
    if (1..=MAX_LABEL_LEN).contains(&bytes.len())
        && bytes.iter().all(fine)
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
    {
        return None;
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    if s.len() > MAX_LABEL_LEN {
        return Some(format!("it is longer than {MAX_LABEL_LEN} characters"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!(
            "it contains {c:?}; only lower-case letters, digits and '-' are allowed"
        ));
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("it must start and end with a letter or digit".into());
    }
    None
}

/// Says why `s` is not an RFC 1123 DNS subdomain (what most Kubernetes object names must be:
/// dot-separated DNS labels, at most 253 characters), or `None` when it is one.
pub fn dns_subdomain_problem(s: &str) -> Option<String> {
    if is_subdomain(s.as_bytes()) {
        // The common case, a valid name: one pass, no allocation.
        return None;
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    if s.len() > MAX_SUBDOMAIN_LEN {
        return Some(format!("it is longer than {MAX_SUBDOMAIN_LEN} characters"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Some(format!(
            "it contains {c:?}; only lower-case letters, digits, '-' and '.' are allowed"
        ));
    }
    if s.split('.')
        .any(|part| part.is_empty() || part.starts_with('-') || part.ends_with('-'))
    {
        return Some("each dot-separated part must start and end with a letter or digit".into());
    }
    None
}

/// Whether `b` is an RFC 1123 DNS subdomain, in one pass.
fn is_subdomain(b: &[u8]) -> bool {
    if b.is_empty() || b.len() > MAX_SUBDOMAIN_LEN {
        return false;
    }
    // A name starts as if after a dot: a part may not start with '-' or '.'.
    let mut prev = b'.';
    for &c in b {
        match c {
            b'a'..=b'z' | b'0'..=b'9' => {}
            b'-' if prev != b'.' => {}
            b'.' if prev != b'.' && prev != b'-' => {}
            _ => return false,
        }
        prev = c;
    }
    prev != b'.' && prev != b'-'
}

/// Says why `key` is not a valid label or annotation key (`[prefix/]name`: an optional DNS
/// subdomain prefix, a name of at most 63 letters, digits, `-`, `_` and `.` that starts and
/// ends with a letter or digit), or `None` when it is one.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    if !name.is_empty()
        && label_value_problem(name).is_none()
        && (prefix.is_empty() && !key.contains('/') || dns_subdomain_problem(prefix).is_none())
    {
        // The common case, a valid key: no allocation.
        return None;
    }
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(why) = prefix.and_then(dns_subdomain_problem) {
        return Some(format!("its prefix is not a DNS subdomain: {why}"));
    }
    label_value_problem(name).or_else(|| name.is_empty().then(|| "its name is empty".to_string()))
}

/// Says why `value` is not a valid label value (empty, or at most 63 letters, digits, `-`,
/// `_` and `.` that starts and ends with a letter or digit), or `None` when it is one.
pub fn label_value_problem(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if bytes.is_empty()
        || (bytes.len() <= MAX_LABEL_LEN
            && bytes.iter().all(inner)
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric())
    {
        return None;
    }
    if value.len() > MAX_LABEL_LEN {
        return Some(format!("it is longer than {MAX_LABEL_LEN} characters"));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!("it contains {c:?}"));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| !c.is_ascii_alphanumeric());
    if edge(value.chars().next()) || edge(value.chars().last()) {
        return Some("it must start and end with a letter or digit".into());
    }
    None
}

/// Whether `namespace` is one of Kubernetes' own (`kube-system`, `kube-public`, ...).
pub fn is_system_namespace(namespace: &str) -> bool {
    namespace == "kube" || namespace.starts_with(RESERVED_NAMESPACE_PREFIX)
}

/// Checks a set of tenants: no duplicates and no `a-` prefix of `b` (their namespaces could
/// collide: tenant `a` namespace `b-x` and tenant `a-b` namespace `x` both map to `a-b-x`).
pub fn check_tenant_set<'a>(tenants: impl IntoIterator<Item = &'a Tenant>) -> Result<()> {
    let mut names: Vec<&str> = tenants.into_iter().map(Tenant::as_str).collect();
    names.sort_unstable();
    for pair in names.windows(2) {
        if pair[0] == pair[1] {
            return Err(Error::DuplicateTenant(pair[0].to_string()));
        }
    }
    for short in &names {
        let prefix = format!("{short}-");
        if let Some(long) = names.iter().find(|n| n.starts_with(&prefix)) {
            return Err(Error::PrefixCollision {
                short: short.to_string(),
                long: long.to_string(),
            });
        }
    }
    Ok(())
}

/// `map(t, x)` from DESIGN.md: the super name of tenant `t`'s namespace or cluster-scoped
/// object `x`.
pub fn map(tenant: &str, name: &str) -> String {
    let joined = format!("{tenant}-{name}");
    if joined.len() <= MAX_LABEL_LEN {
        return joined;
    }
    let digest = Sha256::digest(format!("{tenant}/{name}").as_bytes());
    let hex = hex(&digest[..4]);
    // Names are ASCII when they are valid Kubernetes names; cut on a char boundary anyway so
    // that an invalid name gives an invalid (and rejected) result rather than a panic.
    let mut cut = HASHED_KEEP;
    while !joined.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hex}", &joined[..cut])
}

/// The name of the copy of tenant `t`'s object `namespace`/`name` in an operator's fixed
/// namespace (a resource's `placement`): `map(t, namespace + "-" + name)`. Two objects of one
/// tenant can share it (`a-b`/`c` and `a`/`b-c`); their ownership annotations tell them
/// apart, and the second is refused as a conflict.
pub fn placed(tenant: &str, namespace: &str, name: &str) -> String {
    map(tenant, &format!("{namespace}-{name}"))
}

/// Whether `candidate == map(tenant, name)`, without allocating when the name is not hashed.
pub fn is_map_of(tenant: &str, name: &str, candidate: &str) -> bool {
    if tenant.len() + 1 + name.len() <= MAX_LABEL_LEN {
        return candidate.len() == tenant.len() + 1 + name.len()
            && candidate.starts_with(tenant)
            && candidate[tenant.len()..].starts_with('-')
            && &candidate[tenant.len() + 1..] == name;
    }
    candidate == map(tenant, name)
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The inverse of [`map`] where it can be computed from the strings alone: `Some(x)` when
/// `map(tenant, x) == super_name` with `x` unhashed. A hashed name also reads as the unhashed
/// name of a 56-character `x`; only a learnt pair ([`NameMap`]) tells them apart.
pub fn unmap_unhashed(tenant: &str, super_name: &str) -> Option<String> {
    let rest = super_name.strip_prefix(tenant)?.strip_prefix('-')?;
    if rest.is_empty() {
        // `map(t, "")` is `t-`, but no tenant object or namespace has an empty name.
        return None;
    }
    (map(tenant, rest) == super_name).then(|| rest.to_string())
}

/// The naming map of one tenant, plus the hashed pairs it has learnt, so that it can invert
/// names that [`unmap_unhashed`] cannot.
#[derive(Clone, Debug)]
pub struct NameMap {
    tenant: Tenant,
    known: BTreeMap<String, String>,
    domains: Vec<String>,
    platform: Vec<Glob>,
    namespace_labels: Option<Vec<Glob>>,
}

impl NameMap {
    /// The map of `tenant` with no learnt pairs.
    pub fn new(tenant: Tenant) -> Self {
        Self {
            tenant,
            known: BTreeMap::new(),
            domains: Vec::new(),
            platform: Vec::new(),
            namespace_labels: None,
        }
    }

    /// The map with the super namespaces of the platform (SyncConfig `platformNamespaces`),
    /// which no namespace-bearing value of the tenant may name even when its name lies in the
    /// tenant's space (tenant `cert`, namespace `manager`: `cert-manager`). Offline, without a
    /// SyncConfig, there are none.
    pub fn with_platform(mut self, patterns: &[Glob]) -> Self {
        self.platform = patterns.to_vec();
        self
    }

    /// The map with the label keys super namespaces carry from tenant namespaces (SyncConfig
    /// `namespaceLabels.allow`), which are all a selector of namespaces may select by. Offline,
    /// without a SyncConfig, they are not known and not checked.
    pub fn with_namespace_labels(mut self, allow: &[Glob]) -> Self {
        self.namespace_labels = Some(allow.to_vec());
        self
    }

    /// Whether super namespaces carry the tenant namespace label `key` (before the keys they
    /// never carry); `None` when not known (offline).
    pub fn namespace_label_allowed(&self, key: &str) -> Option<bool> {
        let allow = self.namespace_labels.as_ref()?;
        Some(allow.iter().any(|g| g.matches(key)))
    }

    /// A platform namespace written as a plain name that the namespace glob `glob` (`*` and
    /// `?`) matches, if any.
    pub fn platform_in_glob(&self, glob: &str) -> Option<&str> {
        let glob = crate::glob::Glob::new(glob).ok()?;
        self.platform
            .iter()
            .map(crate::glob::Glob::as_str)
            .find(|name| !name.contains(['*', '?']) && glob.matches(name))
    }

    /// The platform pattern the super namespace `super_ns` matches, if it is the platform's.
    pub fn platform(&self, super_ns: &str) -> Option<&Glob> {
        self.platform.iter().find(|g| g.matches(super_ns))
    }

    /// The map with the tenant's DNS domains (external host names must lie under one); each
    /// normalised, invalid ones left out (they are refused where they are configured).
    pub fn with_domains<S: AsRef<str>>(mut self, domains: impl IntoIterator<Item = S>) -> Self {
        for domain in domains {
            if let Ok(d) = embedded::normalize_host(domain.as_ref()) {
                if embedded::domain_problem(&d).is_none() && !self.domains.contains(&d) {
                    self.domains.push(d);
                }
            }
        }
        self
    }

    /// The tenant's DNS domains, normalised.
    pub fn domains(&self) -> &[String] {
        &self.domains
    }

    /// The tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Records that `tenant_name` maps to its super name, so that the super name can be
    /// inverted even when hashed. Ignored when the pair does not match the map.
    pub fn learn(&mut self, tenant_name: &str) {
        let super_name = map(self.tenant.as_str(), tenant_name);
        if unmap_unhashed(self.tenant.as_str(), &super_name).as_deref() != Some(tenant_name) {
            self.known.insert(super_name, tenant_name.to_string());
        }
    }

    /// The learnt hashed pairs, super name to tenant name.
    pub fn learnt(&self) -> &BTreeMap<String, String> {
        &self.known
    }

    /// The super name of `name`.
    pub fn to_super(&self, name: &str) -> String {
        map(self.tenant.as_str(), name)
    }

    /// Whether `super_name` lies in this tenant's part of the super cluster's names: it is
    /// `map(tenant, x)` for some name `x`, hashed or not. Every such name starts with
    /// `tenant-`, and no other tenant's does (a valid tenant set has no `a-` prefix of `b`).
    pub fn in_tenant_space(&self, super_name: &str) -> bool {
        super_name
            .strip_prefix(self.tenant.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| !rest.is_empty())
    }

    /// The tenant name of `super_name`, or `None` when it is not a name of this tenant.
    pub fn to_tenant(&self, super_name: &str) -> Option<String> {
        // Learnt pairs first: a hashed name also reads as the unhashed name of a 56-character
        // namespace, and the learnt pair is the one that exists.
        self.known
            .get(super_name)
            .cloned()
            .or_else(|| unmap_unhashed(self.tenant.as_str(), super_name))
    }
}

pub mod embedded;

#[cfg(test)]
mod tests;
