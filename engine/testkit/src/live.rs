//! Running `ferry run` in tests and the demo: configuration files, the restricted identity of
//! `ferry rbac`, the process itself, its metrics, and waiting for conditions.
//!
//! ```text
//!  Identity::Admin | Identity::Rbac ─▶ kubeconfigs (Rbac: impersonate user ferry-e2e, bound
//!                                      to exactly the roles `ferry rbac` prints)
//!  SyncConfig ─▶ Ferry::start (child process) ─▶ /readyz, /metrics ─▶ Ferry::stop (SIGTERM)
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{clusters_dir, root, unique};

mod rbac;
pub use rbac::install_rbac;

/// The user ferry runs as under [`Identity::Rbac`].
pub const RBAC_USER: &str = "ferry-e2e";

/// ferry's own namespace in the super cluster, where its Lease is (`leaderElection.namespace`).
pub const FERRY_NAMESPACE: &str = "ferry-system";

/// Whom ferry runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The harness's admin (system:masters).
    Admin,
    /// A user bound only to the roles `ferry rbac --policy policies` prints.
    Rbac,
}

/// A scratch directory under `target/` for one test's files.
pub fn scratch(prefix: &str) -> Result<PathBuf> {
    let dir = root().join("target/e2e").join(unique(prefix));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The kubeconfig of `cluster` for `identity`, written into `dir` when it must differ from
/// the harness's.
pub fn kubeconfig(cluster: &str, identity: Identity, dir: &Path) -> Result<PathBuf> {
    let admin = clusters_dir().join(format!("{cluster}.kubeconfig"));
    if identity == Identity::Admin {
        return Ok(admin);
    }
    let text =
        std::fs::read_to_string(&admin).with_context(|| format!("reading {}", admin.display()))?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text)?;
    let users = config
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .context("kubeconfig has no users")?;
    for user in users {
        if let Some(u) = user.get_mut("user").and_then(|u| u.as_mapping_mut()) {
            u.insert("as".into(), RBAC_USER.into());
        }
    }
    let path = dir.join(format!("{cluster}-{RBAC_USER}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// A free loopback port.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// What goes into a SyncConfig.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The policy file or directory.
    pub policy: PathBuf,
    /// Tenant names (each with a kubeconfig in the clusters directory).
    pub tenants: Vec<String>,
    /// The patrol interval, as the file writes it.
    pub patrol: String,
    /// Leader election on.
    pub leader_election: bool,
    /// The Lease's name (tests use their own).
    pub lease: String,
    /// Whom ferry runs as.
    pub identity: Identity,
    /// Tenants whose control plane is another's (`name` → the cluster whose kubeconfig it
    /// uses): many tenant names on few API servers.
    pub clusters: std::collections::BTreeMap<String, String>,
    /// Several super clusters: `supers` entries whose `kubeconfig` is the name of a cluster
    /// (replaced by its kubeconfig); empty: `super: {kubeconfig}` of the cluster `super`.
    pub supers: Vec<serde_json::Value>,
    /// Placement rules, as the file writes them.
    pub placement: Vec<serde_json::Value>,
    /// More of `spec`, merged over what the fields above write (a null removes a key).
    pub spec: serde_json::Map<String, serde_json::Value>,
    /// A command `ferry` runs under (its arguments follow), and environment variables for it.
    pub launcher: Vec<String>,
    /// Environment variables for ferry.
    pub env: Vec<(String, String)>,
    /// `--verbose` (debug logs: every write, every list), as tests want them; the benchmark
    /// runs ferry as deployed, at its default level.
    pub verbose: bool,
    /// More arguments of `ferry run` (`--identity r0`).
    pub args: Vec<String>,
}

impl Settings {
    /// `policies/`, the given tenants, a 10 s patrol, no leader election.
    pub fn new(tenants: &[&str], identity: Identity) -> Self {
        Self {
            policy: root().join("policies"),
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
            patrol: "10s".into(),
            leader_election: false,
            lease: unique("ferry"),
            identity,
            clusters: Default::default(),
            supers: Vec::new(),
            placement: Vec::new(),
            spec: Default::default(),
            launcher: Vec::new(),
            env: Vec::new(),
            verbose: true,
            args: Vec::new(),
        }
    }
}

/// Writes a SyncConfig into `dir` (as `ferry.yaml`) serving metrics on `port`.
pub fn write_config(dir: &Path, settings: &Settings, port: u16) -> Result<PathBuf> {
    let super_kubeconfig = kubeconfig("super", settings.identity, dir)?;
    let mut tenants = Vec::new();
    for t in &settings.tenants {
        let cluster = settings.clusters.get(t).unwrap_or(t);
        tenants
            .push(json!({"name": t, "kubeconfig": kubeconfig(cluster, settings.identity, dir)?}));
    }
    let mut supers = Vec::new();
    for s in &settings.supers {
        let mut entry = s.clone();
        let cluster = s["kubeconfig"].as_str().unwrap_or("super").to_string();
        entry["kubeconfig"] = json!(kubeconfig(&cluster, settings.identity, dir)?);
        supers.push(entry);
    }
    let mut config = json!({
        "apiVersion": "ferry.dev/v1alpha1",
        "kind": "SyncConfig",
        "spec": {
            "policy": settings.policy,
            "super": {"kubeconfig": super_kubeconfig},
            "tenants": tenants,
            "patrolInterval": settings.patrol,
            "leaderElection": {"enabled": settings.leader_election, "namespace": FERRY_NAMESPACE, "lease": settings.lease},
            "metrics": {"address": format!("127.0.0.1:{port}")},
        }
    });
    if !supers.is_empty() {
        let spec = config["spec"].as_object_mut().context("spec")?;
        spec.remove("super");
        spec.insert("supers".into(), json!(supers));
        spec.insert("placement".into(), json!(settings.placement));
    }
    let spec = config["spec"].as_object_mut().context("spec")?;
    for (key, value) in &settings.spec {
        match value {
            serde_json::Value::Null => spec.remove(key),
            v => spec.insert(key.clone(), v.clone()),
        };
    }
    let path = dir.join("ferry.yaml");
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// A running `ferry run`.
pub struct Ferry {
    child: Option<Child>,
    /// Where its metrics are served.
    pub address: SocketAddr,
    /// Its configuration file.
    pub config: PathBuf,
    log: PathBuf,
}

impl Ferry {
    /// Starts `ferry run --config <dir>/ferry.yaml` (written from `settings`), logging into
    /// `<dir>/<log_name>`.
    pub fn start(ferry: &Path, dir: &Path, settings: &Settings, log_name: &str) -> Result<Self> {
        let port = free_port()?;
        let config = write_config(dir, settings, port)?;
        let log = dir.join(log_name);
        let out = std::fs::File::create(&log)?;
        // The sync benchmark pins ferry to the super cluster's CPU.
        let mut command = match (
            std::env::var("FERRY_BENCH_FERRY_CPUS"),
            settings.launcher.split_first(),
        ) {
            (Ok(cpus), _) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpus]);
                // `FERRY_BENCH_WRAP="heaptrack -o /tmp/ferry-heap"`: a profiler around ferry.
                if let Ok(wrap) = std::env::var("FERRY_BENCH_WRAP") {
                    c.args(wrap.split_whitespace());
                }
                c.arg(ferry);
                c
            }
            (Err(_), Some((launcher, args))) => {
                let mut c = Command::new(launcher);
                c.args(args).arg(ferry);
                c
            }
            (Err(_), None) => Command::new(ferry),
        };
        command.envs(settings.env.iter().map(|(k, v)| (k, v)));
        command.arg("run");
        if settings.verbose {
            command.arg("--verbose");
        }
        let child = command
            .args(&settings.args)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", ferry.display()))?;
        Ok(Self {
            child: Some(child),
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            config,
            log,
        })
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GETs `path` from the metrics endpoint: status code and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(self.address).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: ferry\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok((code, body.to_string()))
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "ferry exited ({status}) before it was ready:\n{}",
                        self.log()
                    );
                }
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("ferry not ready after 60s:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The sum of every sample of metric `name` whose labels include `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
        let (_, body) = self.get("/metrics").await?;
        Ok(sum_metric(&body, name, labels))
    }

    /// Its resident memory in bytes (Linux), if it is running.
    pub fn rss(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves it running after this handle is gone; returns its pid.
    pub fn detach(mut self) -> u32 {
        self.child.take().map_or(0, |c| c.id())
    }

    /// Stops it with SIGTERM and waits for a clean exit.
    pub fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("ferry exited with {status}:\n{}", self.log());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("ferry did not stop within 20s of SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Ferry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sums the samples of `name` in Prometheus text whose labels include every pair of `labels`.
pub fn sum_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, r)) => (m, r),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            all.then(|| value.parse::<f64>().ok()).flatten()
        })
        // A float sum starts at -0.0; a metric with no sample reads 0.
        .fold(0.0, |a, b| a + b)
}

/// Polls `check` until it returns `Some`, or fails after `timeout` saying what it waited for.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() > deadline {
            match last_error {
                Some(e) => bail!("{what}: not within {timeout:?} (last error: {e:#})"),
                None => bail!("{what}: not within {timeout:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A dynamic API for `kind` of `group/version` in `namespace` (empty: cluster-wide).
pub fn api(client: &Client, api_version: &str, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    // Kubernetes' own guess for the kinds the tests use (StorageClass, GatewayClass, Policy).
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower
        .strip_suffix('y')
        .filter(|stem| !stem.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    };
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    }
}
