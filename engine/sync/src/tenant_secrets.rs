//! Tenants from kubeconfig Secrets (`tenantSecrets`): a watch on the selected Secrets of one
//! namespace of the first super cluster. Each Secret's kubeconfig is vetted (whoever can write
//! a Secret there must not make ferry run a command, read its files, skip TLS or use a proxy
//! unless the config allows it), named, and merged with the static tenants; a Secret that is
//! refused gets a Warning Event and the others keep running.
//!
//! ```text
//!  Secrets (namespace, selector) ─watch─▶ read + vet ─▶ SecretTenants (generation++)
//!  follow (every second) ─▶ merge(static, secrets) ─▶ Running::apply ─▶ Events on refused
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_core::config::{TenantConfig, TenantSecrets};
use ferry_core::naming::{check_tenant_set, Tenant};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::config::Kubeconfig;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use sha2::{Digest, Sha256};

use crate::watch::selector_string;

/// Where a tenant's kubeconfig comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file named in the configuration.
    File(std::path::PathBuf),
    /// A Secret (`namespace/name`), at a version of its kubeconfig (sha256).
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The sha256 of the kubeconfig it holds: rotated credentials restart the tenant.
        digest: String,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Secret {
                namespace, name, ..
            } => write!(f, "Secret {namespace}/{name}"),
        }
    }
}

/// A tenant to run: its name, where its kubeconfig comes from, and the kubeconfig itself when
/// it came from a Secret.
#[derive(Clone, Debug)]
pub struct Wanted {
    /// The tenant.
    pub name: Tenant,
    /// Where its kubeconfig comes from.
    pub source: Source,
    /// The vetted kubeconfig of a Secret.
    pub kubeconfig: Option<Arc<Kubeconfig>>,
    /// Its DNS domains from the configuration file (a Secret's tenant has only the
    /// policy's).
    pub domains: Vec<String>,
}

impl Wanted {
    /// A static tenant of the configuration file.
    pub fn file(t: &TenantConfig) -> Self {
        Self {
            name: t.name.clone(),
            source: Source::File(t.kubeconfig.clone()),
            kubeconfig: None,
            domains: t.domains.clone(),
        }
    }
}

/// What one Secret gives: a tenant, or why not.
#[derive(Clone, Debug)]
enum Read {
    Tenant(Wanted),
    Refused(String),
}

/// The tenants the Secrets give, kept current by [`watch`].
#[derive(Default)]
pub struct SecretTenants {
    by_secret: Mutex<BTreeMap<String, (Read, Secret)>>,
    generation: AtomicU64,
    /// The refusal last published for each Secret (an Event only when it changes).
    published: Mutex<BTreeMap<String, String>>,
}

impl SecretTenants {
    /// Counts up with every change of the Secrets.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn set(&self, secrets: BTreeMap<String, (Read, Secret)>) {
        *self.by_secret.lock().unwrap_or_else(|e| e.into_inner()) = secrets;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The tenants to run: the static ones, then every Secret's that fits beside them, and the
/// refusals by Secret (with the Secret, for its Event). A name taken, one that would make the
/// set invalid, or one whose super namespaces would include `owned` (ferry's own namespaces)
/// refuses the Secret's tenant only. Secrets whose tenant runs already (`running`) come first,
/// then the oldest: a new Secret never displaces a running tenant.
pub fn merge(
    statics: &[TenantConfig],
    secrets: &SecretTenants,
    running: &[(Arc<str>, Source)],
    owned: &[String],
) -> (Vec<Wanted>, Vec<(Secret, String)>) {
    let mut wanted: Vec<Wanted> = statics.iter().map(Wanted::file).collect();
    let mut refused = Vec::new();
    let mut by_secret: Vec<(String, (Read, Secret))> = secrets
        .by_secret
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .into_iter()
        .collect();
    let runs = |name: &str, read: &Read| match read {
        Read::Tenant(t) => running.iter().any(|(n, source)| {
            **n == *t.name.as_str() && matches!(source, Source::Secret { name: s, .. } if s == name)
        }),
        Read::Refused(_) => false,
    };
    by_secret.sort_by_key(|(name, (read, secret))| {
        (
            !runs(name, read),
            secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
            name.clone(),
        )
    });
    for (name, (read, secret)) in by_secret {
        let tenant = match read {
            Read::Refused(why) => {
                refused.push((secret, why));
                continue;
            }
            Read::Tenant(t) => t,
        };
        if let Some(other) = wanted.iter().find(|w| w.name == tenant.name) {
            let from = match &other.source {
                Source::File(_) => "the configuration file".to_string(),
                Source::Secret { name, .. } => format!("Secret {name}"),
            };
            refused.push((
                secret,
                format!(
                    "tenant {:?} of Secret {name} already runs from {from}; the Secret's tenant is not started",
                    tenant.name.as_str()
                ),
            ));
            continue;
        }
        let names: Vec<&Tenant> = wanted
            .iter()
            .map(|w| &w.name)
            .chain([&tenant.name])
            .collect();
        if let Err(e) = check_tenant_set(names) {
            refused.push((
                secret,
                format!("the tenant of Secret {name} cannot join the others: {e}"),
            ));
            continue;
        }
        let prefix = format!("{}-", tenant.name.as_str());
        if let Some(own) = owned.iter().find(|own| own.starts_with(&prefix)) {
            refused.push((
                secret,
                format!(
                    "tenant {:?} of Secret {name} could own ferry's namespace {own:?}; the Secret's tenant is not started",
                    tenant.name.as_str()
                ),
            ));
            continue;
        }
        wanted.push(tenant);
    }
    (wanted, refused)
}

/// Watches the Secrets `config` selects in the super cluster of `client`, keeping `into`
/// current. Runs until aborted.
pub async fn watch(client: Client, config: TenantSecrets, into: Arc<SecretTenants>) {
    let api: Api<Secret> = Api::namespaced(client, &config.namespace);
    let selector = selector_string(&config.selector);
    let watch_config = watcher::Config::default().labels(&selector);
    let mut stream = watcher(api, watch_config).boxed();
    let mut known: BTreeMap<String, (Read, Secret)> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, (Read, Secret)>> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(secret)) => {
                if let Some(listing) = listing.as_mut() {
                    let name = secret.metadata.name.clone().unwrap_or_default();
                    listing.insert(name, (read(&config, &secret), secret));
                }
            }
            Ok(watcher::Event::InitDone) => {
                known = listing.take().unwrap_or_default();
                into.set(known.clone());
            }
            Ok(watcher::Event::Apply(secret)) => {
                let name = secret.metadata.name.clone().unwrap_or_default();
                known.insert(name, (read(&config, &secret), secret));
                into.set(known.clone());
            }
            Ok(watcher::Event::Delete(secret)) => {
                known.remove(&secret.metadata.name.clone().unwrap_or_default());
                into.set(known.clone());
            }
            Err(e) => {
                tracing::warn!(namespace = %config.namespace, error = %e, "watching tenant kubeconfig Secrets; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

/// Reads one Secret: its tenant's name and vetted kubeconfig, or why not.
fn read(config: &TenantSecrets, secret: &Secret) -> Read {
    let meta = &secret.metadata;
    let secret_name = meta.name.clone().unwrap_or_default();
    let name = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(&config.name_label))
        .cloned()
        .unwrap_or_else(|| secret_name.clone());
    let tenant = match Tenant::new(&name) {
        Ok(t) => t,
        Err(e) => return Read::Refused(format!("tenant name {name:?}: {e}")),
    };
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&config.key)) else {
        return Read::Refused(format!(
            "the Secret has no data key {:?} (tenantSecrets.key)",
            config.key
        ));
    };
    let text = match std::str::from_utf8(&bytes.0) {
        Ok(t) => t,
        Err(_) => return Read::Refused(format!("data key {:?} is not UTF-8 text", config.key)),
    };
    let kubeconfig = match Kubeconfig::from_yaml(text) {
        Ok(k) => k,
        // The parser's message quotes the offending line, credentials and all: only where.
        Err(e) => {
            return Read::Refused(format!(
                "data key {:?} is not a kubeconfig{}",
                config.key,
                position(&e.to_string())
            ))
        }
    };
    if let Err(why) = vet(&kubeconfig, config) {
        return Read::Refused(format!("kubeconfig refused: {why}"));
    }
    Read::Tenant(Wanted {
        name: tenant,
        source: Source::Secret {
            namespace: config.namespace.clone(),
            name: secret_name,
            digest: ferry_core::naming::hex(&Sha256::digest(text.as_bytes())),
        },
        kubeconfig: Some(Arc::new(kubeconfig)),
        domains: Vec::new(),
    })
}

/// ` (at line L column C)` from a parser's message, and nothing else of it.
fn position(message: &str) -> String {
    let number = |key: &str| {
        let at = message.find(key)? + key.len();
        let digits: String = message[at..]
            .chars()
            .skip_while(|c| *c == ' ')
            .take_while(char::is_ascii_digit)
            .collect();
        (!digits.is_empty()).then_some(digits)
    };
    match (number("line"), number("column")) {
        (Some(l), Some(c)) => format!(" (at line {l} column {c})"),
        (Some(l), None) => format!(" (at line {l})"),
        _ => String::new(),
    }
}

/// Why a kubeconfig from a Secret may not be used: anything that reads local files, runs a
/// command (exec, auth providers), skips TLS or talks plain http (unless `allowInsecure`), or
/// goes through a proxy (unless `allowProxy`); and a current context that names nothing.
pub fn vet(kubeconfig: &Kubeconfig, config: &TenantSecrets) -> Result<(), String> {
    for named in &kubeconfig.clusters {
        let Some(c) = &named.cluster else { continue };
        let at = format!("cluster {:?}", named.name);
        if c.certificate_authority.is_some() {
            return Err(format!(
                "{at}: certificate-authority reads a local file (use certificate-authority-data)"
            ));
        }
        if c.proxy_url.is_some() && !config.allow_proxy {
            return Err(format!(
                "{at}: proxy-url is not allowed (tenantSecrets.allowProxy)"
            ));
        }
        if c.insecure_skip_tls_verify == Some(true) && !config.allow_insecure {
            return Err(format!(
                "{at}: insecure-skip-tls-verify is not allowed (tenantSecrets.allowInsecure)"
            ));
        }
        let server = c.server.as_deref().unwrap_or("");
        let plain = config.allow_insecure && server.starts_with("http://");
        if !(server.starts_with("https://") || plain) {
            return Err(format!("{at}: the server is not an https:// URL"));
        }
    }
    for named in &kubeconfig.auth_infos {
        let Some(u) = &named.auth_info else { continue };
        let at = format!("user {:?}", named.name);
        let refused = [
            (
                u.client_certificate.is_some(),
                "client-certificate reads a local file (use client-certificate-data)",
            ),
            (
                u.client_key.is_some(),
                "client-key reads a local file (use client-key-data)",
            ),
            (
                u.token_file.is_some(),
                "tokenFile reads a local file (use token)",
            ),
            (u.exec.is_some(), "exec runs a command"),
            (u.auth_provider.is_some(), "auth-provider runs a plugin"),
        ];
        if let Some((_, why)) = refused.iter().find(|(set, _)| *set) {
            return Err(format!("{at}: {why}"));
        }
    }
    let current = kubeconfig.current_context.as_deref().unwrap_or("");
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("current-context {current:?} names no context"))?;
    let user = context.user.as_deref().unwrap_or("");
    if !kubeconfig
        .clusters
        .iter()
        .any(|c| c.name == context.cluster)
        || !kubeconfig.auth_infos.iter().any(|u| u.name == user)
    {
        return Err(format!(
            "context {current:?} names cluster {:?} and user {user:?}, which the kubeconfig does not hold",
            context.cluster
        ));
    }
    Ok(())
}

/// Publishes, once per change, a Warning Event on each refused Secret.
pub async fn report(
    client: &Client,
    identity: &str,
    secrets: &SecretTenants,
    refused: &[(Secret, String)],
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "ferry".into(),
            instance: Some(identity.to_string()),
        },
    );
    secrets
        .published
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|name, _| {
            refused
                .iter()
                .any(|(s, _)| s.metadata.name.as_deref() == Some(name))
        });
    for (secret, why) in refused {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let new = secrets
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), why.clone())
            .as_deref()
            != Some(why.as_str());
        if !new {
            continue;
        }
        tracing::warn!(secret = %name, "tenant not started: {why}");
        let event = Event {
            type_: EventType::Warning,
            reason: "TenantRefused".into(),
            note: Some(why.chars().take(1000).collect()),
            action: "Connect".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &secret.object_ref(&())).await {
            tracing::warn!(secret = %name, error = %e, "could not publish the Event");
        }
    }
}

#[cfg(test)]
mod tests;
