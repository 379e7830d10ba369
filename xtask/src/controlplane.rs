//! Local control planes: etcd and one kube-apiserver per cluster (super + tenants), built from
//! their Go modules and run as plain processes on 127.0.0.1.
//!
//! ```text
//!  xtask/controlplane/go.mod ─ go build ─▶ target/controlplane/<pins>/{etcd,kube-apiserver,ferry-pki}
//!  cluster up ─▶ ferry-pki certs ─▶ etcd ─▶ kube-apiserver × (super + tenants) ─▶ ferry-pki wait
//!            ─▶ kube-controller-manager (super: namespace + garbage collector controllers)
//!            ─▶ target/clusters/<name>.kubeconfig, state.json (pid and arguments of each), logs/
//!  cluster restart NAME ─▶ SIGTERM ─▶ same arguments, port and data ─▶ ferry-pki wait
//! ```
//!
//! Every cluster keeps its data under its own etcd prefix (`/registry-<name>`), so one etcd
//! serves them all. `up` is idempotent: running clusters are reused and missing ones added;
//! a stale state (processes gone after a crash) is cleaned up first.

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The default tenants of `cluster up`.
pub const DEFAULT_TENANTS: &[&str] = &["team-a", "team-b"];

/// Seconds an API server gets to become ready.
const READY_TIMEOUT_SECS: u64 = 120;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

/// `target/clusters`, or `FERRY_CLUSTERS_DIR` (the sync benchmark keeps its own).
pub fn clusters_dir() -> PathBuf {
    std::env::var_os("FERRY_CLUSTERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/clusters"))
}

/// With `FERRY_PIN` set (the sync benchmark), the tenants' etcd and API servers run on CPU 0
/// and the super cluster's (with its own etcd) on CPU 1: the `taskset -c` list of a process.
fn cpus(super_side: bool) -> Option<&'static str> {
    std::env::var_os("FERRY_PIN").map(|_| if super_side { "1" } else { "0" })
}

/// `k8s-v1.36.3_etcd-v3.6.8`, read from the pins in go.mod.
fn pins() -> Result<String> {
    let gomod = fs::read_to_string(root().join("xtask/controlplane/go.mod"))?;
    let version = |module: &str| {
        gomod
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(module) && !l.contains("=>"))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(str::to_string)
    };
    match (version("k8s.io/kubernetes "), version("go.etcd.io/etcd/server/v3 ")) {
        (Some(k), Some(e)) => Ok(format!("k8s-{k}_etcd-{e}")),
        _ => bail!("xtask/controlplane/go.mod does not pin k8s.io/kubernetes and go.etcd.io/etcd/server/v3"),
    }
}

/// Builds kube-apiserver, kube-controller-manager, etcd and ferry-pki once per set of pins; returns their directory.
pub fn build() -> Result<PathBuf> {
    let pins = pins()?;
    let out = root().join("target/controlplane").join(&pins);
    let binaries = [
        "kube-apiserver",
        "kube-controller-manager",
        "etcd",
        "ferry-pki",
    ];
    if binaries.iter().all(|b| out.join(b).exists()) {
        return Ok(out);
    }
    let k8s = pins
        .split('_')
        .next()
        .unwrap_or("")
        .trim_start_matches("k8s-")
        .to_string();
    let (major, minor) = {
        let mut parts = k8s.trim_start_matches('v').split('.');
        (
            parts.next().unwrap_or("1").to_string(),
            parts.next().unwrap_or("0").to_string(),
        )
    };
    println!(
        "building kube-apiserver, etcd and ferry-pki from Go modules ({pins}) into {}",
        out.display()
    );
    println!("  the first build downloads the modules and compiles Kubernetes: several minutes on 2 cores");
    let start = Instant::now();
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={k8s} -X k8s.io/component-base/version.gitMajor={major} -X k8s.io/component-base/version.gitMinor={minor} -X k8s.io/client-go/pkg/version.gitVersion={k8s}"
    );
    let mut child = Command::new("go")
        .args([
            "build",
            "-trimpath",
            "-buildvcs=false",
            "-ldflags",
            &ldflags,
            "-o",
        ])
        .arg(format!("{}/", out.display()))
        .arg("./cmd/...")
        .current_dir(root().join("xtask/controlplane"))
        .spawn()
        .context("running go (is Go installed and on PATH?)")?;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("go build failed ({status}); see the output above");
            }
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        let secs = start.elapsed().as_secs();
        if secs.is_multiple_of(30) {
            println!("  still building… {secs}s");
        }
    }
    println!("built in {:.0}s", start.elapsed().as_secs_f64());
    Ok(out)
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

pub fn read_state() -> Option<Value> {
    serde_json::from_str(&fs::read_to_string(clusters_dir().join("state.json")).ok()?).ok()
}

pub fn write_state(state: &Value) -> Result<()> {
    fs::write(
        clusters_dir().join("state.json"),
        serde_json::to_string_pretty(state)?,
    )?;
    Ok(())
}

/// Starts `program` detached from this process (its own process group, output appended to
/// `log`, so that a restart keeps what came before).
pub fn spawn(program: &Path, args: &[String], log: &Path, cpus: Option<&str>) -> Result<u64> {
    use std::os::unix::process::CommandExt;
    let out = fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut command = match cpus {
        Some(list) => {
            let mut c = Command::new("taskset");
            c.args(["-c", list]).arg(program);
            c
        }
        None => Command::new(program),
    };
    let child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    Ok(u64::from(child.id()))
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn kubeconfig(name: &str, port: u16, pki: &Path) -> Result<String> {
    let data = |f: &str| -> Result<String> { Ok(base64(&fs::read(pki.join(f))?)) };
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {}\nusers:\n- name: {name}-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: {name}\n  context: {{cluster: {name}, user: {name}-admin}}\ncurrent-context: {name}\n",
        data("ca.crt")?,
        data("admin.crt")?,
        data("admin.key")?
    ))
}

/// The super cluster of `cargo xtask cluster up` without `--supers`.
pub const DEFAULT_SUPER: &str = "super";

/// What every audited API server logs: every write, at Metadata level (who, what, which
/// object; no bodies). Reads are left out: tests count writes.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
";

/// The audit flags of API server `name` (`target/clusters/audit/<name>.log`, JSON lines).
fn audit_args(dir: &Path, name: &str) -> Result<Vec<String>> {
    let audit = dir.join("audit");
    fs::create_dir_all(&audit)?;
    let policy = audit.join("policy.yaml");
    fs::write(&policy, AUDIT_POLICY)?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!(
            "--audit-log-path={}",
            audit.join(format!("{name}.log")).display()
        ),
        "--audit-log-format=json".into(),
        "--audit-log-mode=blocking".into(),
    ])
}

/// `cargo xtask cluster up`: starts (or reuses) etcd, an API server per super cluster (with
/// its controllers) and one per tenant; with `audit`, each API server writes an audit log
/// (one already running without one is started again).
pub fn up(supers: &[String], tenants: &[String], audit: bool) -> Result<()> {
    if let Some(both) = supers.iter().find(|s| tenants.contains(s)) {
        bail!("cluster up: {both:?} is named both a super cluster and a tenant");
    }
    let bin = build()?;
    let dir = clusters_dir();
    let mut state = match read_state() {
        Some(s) if s["etcd"]["pid"].as_u64().is_some_and(alive) => s,
        Some(_) => {
            println!("cleaning up control planes left by an earlier run");
            down()?;
            json!({})
        }
        None => json!({}),
    };
    fs::create_dir_all(dir.join("logs"))?;
    let pki = dir.join("pki");
    let status = Command::new(bin.join("ferry-pki"))
        .arg("certs")
        .arg(&pki)
        .status()?;
    if !status.success() {
        bail!("ferry-pki certs failed");
    }
    if state.get("etcd").is_none() {
        state["etcd"] = start_etcd(&bin, "etcd", cpus(true))?;
        state["clusters"] = json!({});
        write_state(&state)?;
    }
    if cpus(false).is_some() && state.get("etcd-tenants").is_none() {
        state["etcd-tenants"] = start_etcd(&bin, "etcd-tenants", cpus(false))?;
        write_state(&state)?;
    }
    let mut wanted = supers.to_vec();
    wanted.extend(tenants.iter().cloned());
    let mut started = Vec::new();
    for name in &wanted {
        let running = state["clusters"][name]["pid"].as_u64().is_some_and(alive);
        let audited = state["clusters"][name]["args"].as_array().is_some_and(|a| {
            a.iter().any(|x| {
                x.as_str()
                    .is_some_and(|x| x.starts_with("--audit-log-path"))
            })
        });
        if running && audit && !audited {
            println!("{name:<14} running without an audit log; starting it again with one");
            terminate(state["clusters"][name]["pid"].as_u64().unwrap_or(0));
        } else if running {
            println!(
                "{name:<14} running (pid {})",
                state["clusters"][name]["pid"]
            );
            continue;
        }
        // Started again (for an audit log): on its port, which its controllers know.
        let port = match state["clusters"][name]["port"].as_u64() {
            Some(port) if running => u16::try_from(port)?,
            _ => free_port()?,
        };
        let super_side = supers.contains(name);
        let etcd = if super_side || state.get("etcd-tenants").is_none() {
            "etcd"
        } else {
            "etcd-tenants"
        };
        let etcd_port = state[etcd]["port"].as_u64().unwrap_or(0);
        let mut args = apiserver_args(&pki, name, port, etcd_port);
        if audit {
            args.extend(audit_args(&dir, name)?);
        }
        let pinned = cpus(super_side);
        let pid = spawn(
            &bin.join("kube-apiserver"),
            &args,
            &dir.join(format!("logs/{name}.log")),
            pinned,
        )?;
        println!("{name:<14} pid {pid:<7} https://127.0.0.1:{port}");
        state["clusters"][name] =
            json!({"pid": pid, "port": port, "args": args, "cpus": pinned, "super": super_side});
        write_state(&state)?;
        fs::write(
            dir.join(format!("{name}.kubeconfig")),
            kubeconfig(name, port, &pki)?,
        )?;
        started.push((name.clone(), port));
    }
    for (name, port) in &started {
        wait_ready(&bin, name, *port)?;
    }
    for name in supers {
        start_controllers(&bin, &mut state, name)?;
    }
    let names: BTreeMap<_, _> = wanted
        .iter()
        .map(|n| (n.clone(), dir.join(format!("{n}.kubeconfig"))))
        .collect();
    for (name, path) in names {
        println!("  {name:<12} KUBECONFIG={}", path.display());
    }
    Ok(())
}

/// The arguments of `name`'s kube-apiserver on `port`, its etcd on `etcd_port`, its
/// certificates in `pki`.
fn apiserver_args(pki: &Path, name: &str, port: u16, etcd_port: u64) -> Vec<String> {
    let dir = clusters_dir();
    let p = |f: &str| pki.join(f).display().to_string();
    vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        format!("--etcd-prefix=/registry-{name}"),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--tls-cert-file={}", p("serving.crt")),
        format!("--tls-private-key-file={}", p("serving.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--authorization-mode=Node,RBAC".into(),
        // No controllers run here: nothing would reconcile endpoints. API Priority and
        // Fairness stays on, as on any real cluster: the benchmark measures ferry's flow
        // control objects on it (the harness's admin is exempt).
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
        format!("--cert-dir={}", dir.join(format!("certs-{name}")).display()),
    ]
}

/// Starts an etcd named `name` (its data in `<clusters>/<name>`, log in `logs/<name>.log`).
fn start_etcd(bin: &Path, name: &str, cpus: Option<&str>) -> Result<Value> {
    let dir = clusters_dir();
    let (client, peer) = (free_port()?, free_port()?);
    let args: Vec<String> = vec![
        format!("--name={name}"),
        format!("--data-dir={}", dir.join(name).display()),
        format!("--listen-client-urls=http://127.0.0.1:{client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-cluster={name}=http://127.0.0.1:{peer}"),
        // Test data: durability is not worth an fsync per write on a shared disk.
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ];
    let pid = spawn(
        &bin.join("etcd"),
        &args,
        &dir.join(format!("logs/{name}.log")),
        cpus,
    )?;
    println!("{name:<14} pid {pid:<7} http://127.0.0.1:{client}");
    Ok(json!({"pid": pid, "port": client, "args": args, "cpus": cpus}))
}

/// The process name of super cluster `name`'s controllers: `controllers` for the default super,
/// `controllers-<name>` for others.
pub fn controllers(name: &str) -> String {
    if name == DEFAULT_SUPER {
        "controllers".into()
    } else {
        format!("controllers-{name}")
    }
}

/// Starts super cluster `name`'s namespace and garbage-collector controllers (a deleted
/// namespace is emptied and removed, as in a real cluster), unless they run.
fn start_controllers(bin: &Path, state: &mut Value, name: &str) -> Result<()> {
    let process = controllers(name);
    if state[&process]["pid"].as_u64().is_some_and(alive) {
        return Ok(());
    }
    let dir = clusters_dir();
    let args: Vec<String> = vec![
        format!(
            "--kubeconfig={}",
            dir.join(format!("{name}.kubeconfig")).display()
        ),
        "--controllers=namespace,garbagecollector".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--concurrent-namespace-syncs=4".into(),
    ];
    let pid = spawn(
        &bin.join("kube-controller-manager"),
        &args,
        &dir.join(format!("logs/{process}.log")),
        cpus(true),
    )?;
    println!("{process:<14} pid {pid:<7} namespace, garbage collector ({name})");
    state[&process] = json!({"pid": pid, "args": args, "cpus": cpus(true)});
    write_state(state)
}

/// Waits until the API server of `name` on `port` answers `/readyz`.
pub fn wait_ready(bin: &Path, name: &str, port: u16) -> Result<()> {
    let dir = clusters_dir();
    let start = Instant::now();
    let status = Command::new(bin.join("ferry-pki"))
        .args(["wait", &format!("https://127.0.0.1:{port}")])
        .arg(dir.join("pki"))
        .arg(READY_TIMEOUT_SECS.to_string())
        .status()?;
    if !status.success() {
        bail!(
            "{name} did not become ready; see {}",
            dir.join(format!("logs/{name}.log")).display()
        );
    }
    println!("{name:<14} ready in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Stops `pid` (SIGTERM, then SIGKILL after 10 s) and waits until it is gone.
pub fn terminate(pid: u64) {
    let _ = Command::new("kill").arg(pid.to_string()).status();
    // A stopped process (SIGSTOP by a fault test) handles SIGTERM only once continued.
    let _ = Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if alive(pid) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        while alive(pid) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `cargo xtask cluster down`: stops everything `up` started and removes its data.
pub fn down() -> Result<()> {
    let dir = clusters_dir();
    let mut pids = Vec::new();
    // A ferry left running by `cargo xtask demo --keep` goes first.
    let demo = root().join("target/demo/ferry.pid");
    if let Some(pid) = fs::read_to_string(&demo)
        .ok()
        .and_then(|p| p.trim().parse::<u64>().ok())
    {
        pids.push(pid);
        let _ = fs::remove_file(&demo);
    }
    if let Some(state) = read_state() {
        // etcd, etcd-tenants and every super's controllers.
        if let Some(processes) = state.as_object() {
            pids.extend(
                processes
                    .iter()
                    .filter(|(k, _)| *k != "clusters")
                    .filter_map(|(_, p)| p["pid"].as_u64()),
            );
        }
        if let Some(clusters) = state["clusters"].as_object() {
            pids.extend(clusters.values().filter_map(|c| c["pid"].as_u64()));
        }
    }
    for pid in &pids {
        if alive(*pid) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in pids.iter().filter(|p| alive(**p)) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    println!("control planes stopped; {} removed", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }
}
