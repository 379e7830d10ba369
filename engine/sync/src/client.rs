//! Clients for the clusters ferry talks to, from their kubeconfigs. Requests (reads and writes)
//! time out, so that a hung API server holds a worker for a bounded time; watches do not (the
//! API server ends them itself).

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

/// How long a read or write may take before it fails (and is retried with backoff).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

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
    /// For reads and writes, with [`REQUEST_TIMEOUT`].
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

fn client(kubeconfig: &Path, config: kube::Config) -> Result<Client, Error> {
    Client::try_from(config).map_err(|e| Error {
        path: kubeconfig.display().to_string(),
        message: e.to_string(),
    })
}

/// A client for the cluster of `kubeconfig`, with the library's default timeouts.
pub async fn connect(kubeconfig: &Path) -> Result<Client, Error> {
    client(kubeconfig, config(kubeconfig).await?)
}

/// The watch and request clients for the cluster of `kubeconfig`.
pub async fn clients(kubeconfig: &Path) -> Result<Clients, Error> {
    let config = config(kubeconfig).await?;
    let mut timed = config.clone();
    timed.read_timeout = Some(REQUEST_TIMEOUT);
    // The time a pooled connection sat idle must not count against the next request.
    timed.reset_reader_on_write = true;
    timed.write_timeout = Some(REQUEST_TIMEOUT);
    timed.connect_timeout = Some(REQUEST_TIMEOUT);
    Ok(Clients {
        watch: client(kubeconfig, config)?,
        requests: client(kubeconfig, timed)?,
    })
}
