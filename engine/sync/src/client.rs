//! Clients for the clusters ferry talks to, from their kubeconfigs. Requests (reads and writes)
//! time out, so that a hung API server holds a worker for a bounded time; watches do not (the
//! API server ends them itself).

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

/// How long a read or write may take before it fails (and is retried with backoff).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// What every client made after [`identify`] carries.
struct Identity {
    user_agent: http::HeaderValue,
    timeout: Duration,
}

static IDENTITY: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();

/// Names this process on every request from now on (`User-Agent: ferry/<version>
/// (<identity>)`) and bounds requests by `timeout` (at most [`REQUEST_TIMEOUT`]: a sharded
/// replica's writes time out before its membership can expire). Once per process.
pub fn identify(identity: &str, timeout: Duration) {
    let text = format!("ferry/{} ({identity})", env!("CARGO_PKG_VERSION"));
    if let Ok(user_agent) = http::HeaderValue::from_str(&text) {
        let _ = IDENTITY.set(Identity {
            user_agent,
            timeout: timeout.min(REQUEST_TIMEOUT),
        });
    }
}

/// The request timeout ([`identify`]'s, else [`REQUEST_TIMEOUT`]).
pub fn request_timeout() -> Duration {
    IDENTITY.get().map_or(REQUEST_TIMEOUT, |i| i.timeout)
}

/// `config` with this process's User-Agent.
fn named(mut config: kube::Config) -> kube::Config {
    if let Some(identity) = IDENTITY.get() {
        config
            .headers
            .push((http::header::USER_AGENT, identity.user_agent.clone()));
    }
    config
}

/// Creates namespace `name` unless it exists (ferry's own, for its Leases).
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    if namespaces.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.to_string());
    match namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A kubeconfig that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {path}: {message}")]
pub struct Error {
    /// The file.
    pub path: String,
    /// Why.
    pub message: String,
}

/// The two clients of one cluster.
#[derive(Clone)]
pub struct Clients {
    /// For watches.
    pub watch: Client,
    /// For reads and writes, with [`request_timeout`].
    pub requests: Client,
}

async fn config(kubeconfig: &Path) -> Result<kube::Config, Error> {
    let fail = |message: String| Error {
        path: kubeconfig.display().to_string(),
        message,
    };
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))
}

/// The pod's service account: its token and CA under
/// `/var/run/secrets/kubernetes.io/serviceaccount`, `KUBERNETES_SERVICE_HOST` and `_PORT`.
fn in_cluster() -> Result<kube::Config, Error> {
    let fail = |message: String| Error {
        path: "(in-cluster service account)".into(),
        message,
    };
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return Err(fail("no kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST is not set); give the super cluster a kubeconfig".into()));
    }
    kube::Config::incluster().map_err(|e| fail(e.to_string()))
}

fn client(what: &str, config: kube::Config) -> Result<Client, Error> {
    Client::try_from(named(config)).map_err(|e| Error {
        path: what.to_string(),
        message: e.to_string(),
    })
}

/// A client for the cluster of `kubeconfig`, with the library's default timeouts.
pub async fn connect(kubeconfig: &Path) -> Result<Client, Error> {
    client(&kubeconfig.display().to_string(), config(kubeconfig).await?)
}

/// The watch and request clients for the cluster of `kubeconfig`.
pub async fn clients(kubeconfig: &Path) -> Result<Clients, Error> {
    pair(&kubeconfig.display().to_string(), config(kubeconfig).await?)
}

/// The clients of a super cluster: its kubeconfig, or the pod's service account (`None`).
pub async fn super_clients(kubeconfig: Option<&Path>) -> Result<Clients, Error> {
    match kubeconfig {
        Some(path) => clients(path).await,
        None => pair("(in-cluster service account)", in_cluster()?),
    }
}

/// The clients of a kubeconfig held in memory (a tenant's, from a Secret: `what` names it).
/// It must not read files or run commands (checked by `tenant_secrets::vet` first).
pub async fn clients_from(what: &str, kubeconfig: Kubeconfig) -> Result<Clients, Error> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error {
            path: what.to_string(),
            message: e.to_string(),
        })?;
    pair(what, config)
}

/// The watch client and the request client (with timeouts) of one cluster.
fn pair(what: &str, config: kube::Config) -> Result<Clients, Error> {
    let mut timed = config.clone();
    let timeout = request_timeout();
    timed.read_timeout = Some(timeout);
    // The time a pooled connection sat idle must not count against the next request.
    timed.reset_reader_on_write = true;
    timed.write_timeout = Some(timeout);
    timed.connect_timeout = Some(timeout);
    Ok(Clients {
        watch: client(what, config)?,
        requests: client(what, timed)?,
    })
}
