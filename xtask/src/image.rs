//! `cargo xtask image [--debug]`: an OCI image archive of a statically linked ferry, written
//! directly (no container daemon): `target/image/ferry-<version>.tar`, an OCI image layout
//! that also carries Docker's `manifest.json`, so `docker load` and `kind load
//! image-archive` both take it. One layer: `/ferry` (static, musl) and an empty `/tmp`; no
//! shell; user 65532.
//!
//! ```text
//!  cargo build --target x86_64-unknown-linux-musl ─▶ static? ─▶ layer.tar ─▶ config ─▶
//!  manifest ─▶ index.json + oci-layout + manifest.json + blobs/sha256/* ─▶ ferry-<v>.tar
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::controlplane::root;

const TARGET: &str = "x86_64-unknown-linux-musl";
/// The user the image runs as (not root; the Deployment of `ferry manifests` says the same).
pub const USER: &str = "65532:65532";

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The archive `build` writes.
pub fn archive() -> PathBuf {
    root()
        .join("target/image")
        .join(format!("ferry-{}.tar", version()))
}

/// `cargo xtask image [--debug]`.
pub fn run(args: &[&str]) -> Result<()> {
    let debug = match args {
        [] => false,
        ["--debug"] => true,
        other => bail!("image: unexpected arguments {other:?} (expected --debug)"),
    };
    let path = build(debug)?;
    verify(&path)?;
    println!("{}: ferry:{} ({})", path.display(), version(), USER);
    println!(
        "load it: docker load -i {0}  |  kind load image-archive {0}",
        path.display()
    );
    Ok(())
}

/// Makes sure the musl target, its C compiler and make are there (ring compiles C; jemalloc
/// compiles C with make).
fn toolchain() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running rustup")?;
    if !String::from_utf8_lossy(&installed.stdout).contains(TARGET) {
        println!("== rustup target add {TARGET}");
        let ok = Command::new("rustup")
            .args(["target", "add", TARGET])
            .status()?;
        if !ok.success() {
            bail!("rustup target add {TARGET} failed");
        }
    }
    for (tool, package, why) in [
        ("musl-gcc", "musl-tools", "for ring's and jemalloc's C code"),
        ("make", "make", "for jemalloc's build"),
    ] {
        let has = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()?
            .status
            .success();
        if has {
            continue;
        }
        println!("== apt-get install {package} ({tool}, {why})");
        let install = format!("apt-get install -y -qq {package} >/dev/null || (apt-get update -qq && apt-get install -y -qq {package})");
        let ok = Command::new("sh").args(["-c", &install]).status()?;
        if !ok.success() {
            bail!("{tool} is missing and apt-get could not install {package}");
        }
    }
    Ok(())
}

/// Builds the static binary and writes the archive; returns its path.
pub fn build(debug: bool) -> Result<PathBuf> {
    toolchain()?;
    let mut args = vec!["build", "-q", "-p", "ferry-cli", "--target", TARGET];
    if !debug {
        args.push("--release");
    }
    println!("== cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(&args)
        .current_dir(root())
        .env("CC_x86_64_unknown_linux_musl", "musl-gcc")
        .status()?;
    if !ok.success() {
        bail!("building the static binary failed");
    }
    let profile = if debug { "debug" } else { "release" };
    let built = root().join(format!("target/{TARGET}/{profile}/ferry"));
    // Without symbols and debug info: a fraction of the size.
    let binary = root().join("target/image/ferry-stripped");
    std::fs::create_dir_all(root().join("target/image"))?;
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&binary)
        .arg(&built)
        .status()
        .context("running strip (binutils)")?;
    if !ok.success() {
        bail!("strip {} failed", built.display());
    }
    let bytes = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    if has_interpreter(&bytes) {
        bail!("{} is dynamically linked", binary.display());
    }
    let layer = tar(&[
        Entry::dir("tmp/", 0o1777),
        Entry::file("ferry", 0o755, bytes),
    ]);
    let layer_digest = sha256(&layer);
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": ["/ferry"],
            "Cmd": ["--help"],
            "Env": ["PATH=/"],
            "WorkingDir": "/",
            "Labels": {"org.opencontainers.image.title": "ferry", "org.opencontainers.image.version": version()},
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
        "history": [{"created_by": "cargo xtask image", "comment": "static ferry"}],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = sha256(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{layer_digest}"), "size": layer.len()}],
    }))?;
    let manifest_digest = sha256(&manifest);
    let tag = format!("ferry:{}", version());
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": version()},
        }],
    }))?;
    let docker = serde_json::to_vec(&json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": [tag],
        "Layers": [format!("blobs/sha256/{layer_digest}")],
    }]))?;
    let archive_bytes = tar(&[
        Entry::file(
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        Entry::file("index.json", 0o644, index),
        Entry::file("manifest.json", 0o644, docker),
        Entry::dir("blobs/", 0o755),
        Entry::dir("blobs/sha256/", 0o755),
        Entry::file(&format!("blobs/sha256/{config_digest}"), 0o644, config),
        Entry::file(&format!("blobs/sha256/{manifest_digest}"), 0o644, manifest),
        Entry::file(&format!("blobs/sha256/{layer_digest}"), 0o644, layer),
    ]);
    let path = archive();
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&path, archive_bytes)?;
    Ok(path)
}

/// Checks an archive as a runtime would read it: index → manifest → config (a non-root user,
/// the entrypoint) → the layer's `/ferry`, which must run `--version`.
pub fn verify(path: &Path) -> Result<()> {
    let archive = std::fs::read(path)?;
    let files = untar(&archive)?;
    let get = |name: &str| {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
            .with_context(|| format!("{name} is not in the archive"))
    };
    let blob = |digest: &str| {
        get(&format!(
            "blobs/sha256/{}",
            digest.trim_start_matches("sha256:")
        ))
    };
    let index: Value = serde_json::from_slice(get("index.json")?)?;
    let manifest_digest = index["manifests"][0]["digest"]
        .as_str()
        .context("index digest")?;
    let manifest_bytes = blob(manifest_digest)?;
    if sha256(manifest_bytes) != manifest_digest.trim_start_matches("sha256:") {
        bail!("the manifest blob does not match its digest");
    }
    let manifest: Value = serde_json::from_slice(manifest_bytes)?;
    let config: Value = serde_json::from_slice(blob(
        manifest["config"]["digest"].as_str().context("config")?,
    )?)?;
    let user = config["config"]["User"].as_str().unwrap_or("");
    if user.is_empty() || user.starts_with("0") || user.starts_with("root") {
        bail!("the image runs as {user:?}, not a non-root user");
    }
    if config["config"]["Entrypoint"] != json!(["/ferry"]) {
        bail!(
            "the entrypoint is {}, not /ferry",
            config["config"]["Entrypoint"]
        );
    }
    let layer = blob(manifest["layers"][0]["digest"].as_str().context("layer")?)?;
    let inside = untar(layer)?;
    if inside
        .iter()
        .any(|(n, _)| n.starts_with("bin/") || n == "sh")
    {
        bail!("the image holds a shell");
    }
    let binary = &inside
        .iter()
        .find(|(n, _)| n == "ferry")
        .context("/ferry is not in the layer")?
        .1;
    let extracted = root().join("target/image/ferry-extracted");
    std::fs::write(&extracted, binary)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&extracted, std::fs::Permissions::from_mode(0o755))?;
    }
    let out = Command::new(&extracted).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains(version()) {
        bail!("the extracted binary's --version said {text:?}");
    }
    skopeo_reads(path, &config)?;
    println!("image: user {user}, entrypoint /ferry, {}", text.trim());
    Ok(())
}

/// A real OCI client (skopeo, Debian's package) reads the archive: the config it finds is the
/// one written, with the one layer.
fn skopeo_reads(path: &Path, written: &Value) -> Result<()> {
    let inspect = |args: &[&str]| -> Result<Value> {
        let out = Command::new("skopeo")
            .arg("inspect")
            .args(args)
            .arg(format!("oci-archive:{}", path.display()))
            .output()
            .context("skopeo (Debian's skopeo package; .ci/run installs it)")?;
        if !out.status.success() {
            bail!(
                "skopeo inspect {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let config = inspect(&["--config"])?;
    if config["config"] != written["config"] || config["rootfs"] != written["rootfs"] {
        bail!("skopeo reads another config than the one written: {config}");
    }
    let image = inspect(&[])?;
    let layers = image["Layers"].as_array().map_or(0, Vec::len);
    if layers != 1 || image["Os"] != "linux" {
        bail!(
            "skopeo reads {layers} layers and os {}: {image}",
            image["Os"]
        );
    }
    Ok(())
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether an ELF file names a program interpreter (is dynamically linked).
fn has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap_or([0; 8])) as usize;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" {
        return true;
    }
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        at + 4 <= elf.len()
            && u32::from_le_bytes([elf[at], elf[at + 1], elf[at + 2], elf[at + 3]]) == 3
    })
}

/// One entry of a tar archive.
struct Entry {
    name: String,
    mode: u32,
    data: Option<Vec<u8>>,
}

impl Entry {
    fn file(name: &str, mode: u32, data: Vec<u8>) -> Self {
        Self {
            name: name.into(),
            mode,
            data: Some(data),
        }
    }

    fn dir(name: &str, mode: u32) -> Self {
        Self {
            name: name.into(),
            mode,
            data: None,
        }
    }
}

/// A ustar archive of `entries` (owned by root, dated at the epoch: reproducible).
fn tar(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut header = [0u8; 512];
        let put = |h: &mut [u8; 512], at: usize, bytes: &[u8]| {
            h[at..at + bytes.len()].copy_from_slice(bytes)
        };
        put(&mut header, 0, e.name.as_bytes());
        let size = e.data.as_ref().map_or(0, Vec::len);
        put(&mut header, 100, format!("{:07o}\0", e.mode).as_bytes());
        put(&mut header, 108, b"0000000\0");
        put(&mut header, 116, b"0000000\0");
        put(&mut header, 124, format!("{size:011o}\0").as_bytes());
        put(&mut header, 136, b"00000000000\0");
        put(&mut header, 156, if e.data.is_some() { b"0" } else { b"5" });
        put(&mut header, 257, b"ustar\0");
        put(&mut header, 263, b"00");
        put(&mut header, 148, b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        put(&mut header, 148, format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&header);
        if let Some(data) = &e.data {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// The files of a ustar archive (names and contents; directories left out).
fn untar(mut bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    while bytes.len() >= 512 && bytes[..512].iter().any(|&b| b != 0) {
        let header = &bytes[..512];
        let name_end = header[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8_lossy(&header[..name_end]).into_owned();
        let size_text = String::from_utf8_lossy(&header[124..135]);
        let size = usize::from_str_radix(size_text.trim_matches(char::from(0)).trim(), 8)
            .with_context(|| format!("size of {name}"))?;
        let body = bytes.get(512..512 + size).context("truncated archive")?;
        if header[156] == b'0' || header[156] == 0 {
            out.push((name, body.to_vec()));
        }
        let next = 512 + size.div_ceil(512) * 512;
        bytes = bytes.get(next..).unwrap_or(&[]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_round_trips() {
        let archive = tar(&[
            Entry::dir("tmp/", 0o1777),
            Entry::file("a", 0o644, b"hello".to_vec()),
            Entry::file("blobs/sha256/x", 0o644, vec![7; 1000]),
        ]);
        assert_eq!(archive.len() % 512, 0);
        let files = untar(&archive).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0], ("a".to_string(), b"hello".to_vec()));
        assert_eq!(files[1].1.len(), 1000);
    }

    #[test]
    fn dynamic_binaries_are_told_apart() {
        let this = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(
            has_interpreter(&this),
            "test binaries are dynamically linked"
        );
        assert!(has_interpreter(
            b"not an ELF file at all, long enough to have a header........"
        ));
    }
}
