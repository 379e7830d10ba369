//! Developer tasks for ferry (`cargo xtask <task>`, the alias is in `.cargo/config.toml`).
//!
//! ```text
//!  cargo xtask test              fmt + clippy + tidy, then unit + golden + sandbox + e2e + faults,
//!                                then `ferry test policies`
//!                                (starts the control planes)
//!  cargo xtask bench [--translate|--sync|--shard] [--record]
//!                                ratios side by side, target/bench/*.json, beside bench/*.json
//!  cargo xtask demo [--keep]     live sync between local tenant and super control planes
//!  cargo xtask image [--debug]   OCI image archive of a static ferry (no container daemon)
//!  cargo xtask cluster up [--supers a,b] [--tenants c,d] [--audit] | down | restart NAME
//!  cargo xtask tidy              file docs and sizes, no size allows, module layers
//! ```

mod bench;
mod controlplane;
mod demo;
mod image;
mod restart;
mod tidy;

use std::process::Command;

use anyhow::{bail, Result};

fn usage() -> ! {
    eprintln!(
        "usage: cargo xtask <task>\n\n\
         tasks:\n  \
         test                           run every test (starts local control planes)\n  \
         bench [--translate|--sync|--shard] [--record]\n                                   run benchmarks, write target/bench/*.json, print them\n                                   beside the committed run (bench/*.json; --record: replace it)\n  \
         demo [--keep]                  live sync between local control planes, explained\n  \
         image [--debug]                OCI image archive of a static ferry: target/image/ferry-<version>.tar\n  \
         cluster up [--supers a,b] [--tenants c,d] [--audit]\n                                   start etcd + kube-apiservers on 127.0.0.1\n                                   (--audit: audit logs in target/clusters/audit/)\n  \
         cluster restart NAME           restart etcd or one API server (super, a tenant), data kept\n  \
         tidy                           shape checks: file docs and sizes, no size allows, module layers\n  \
         cluster down                   stop them and remove their data"
    );
    std::process::exit(1);
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["test", rest @ ..] => test(rest),
        ["bench", rest @ ..] => bench::run(rest),
        ["demo", rest @ ..] => demo::run(rest),
        ["image", rest @ ..] => image::run(rest),
        ["cluster", "up", rest @ ..] => {
            let audit = rest.contains(&"--audit");
            let rest: Vec<&str> = rest.iter().copied().filter(|a| *a != "--audit").collect();
            let (supers, tenants) = topology(&rest)?;
            controlplane::up(&supers, &tenants, audit)
        }
        ["cluster", "down"] => controlplane::down(),
        ["cluster", "restart", name] => restart::restart(name),
        ["tidy"] => tidy::run(),
        _ => usage(),
    }
}

/// The super clusters and tenants of `cluster up [--supers a,b] [--tenants c,d]`.
fn topology(args: &[&str]) -> Result<(Vec<String>, Vec<String>)> {
    let list = |l: &str| -> Vec<String> {
        l.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut supers = vec![controlplane::DEFAULT_SUPER.to_string()];
    let mut tenants: Vec<String> = controlplane::DEFAULT_TENANTS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut rest = args;
    loop {
        match rest {
            [] => break,
            ["--supers", l, more @ ..] => (supers, rest) = (list(l), more),
            ["--tenants", l, more @ ..] => (tenants, rest) = (list(l), more),
            other => bail!(
                "cluster up: unexpected arguments {other:?} (expected --supers a,b and --tenants c,d)"
            ),
        }
    }
    if supers.is_empty() {
        bail!("cluster up: --supers names no super cluster");
    }
    Ok((supers, tenants))
}

pub(crate) fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(controlplane::root())
        .status()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `ferry test policies`: every case beside the shipped policies; its `N passed, M failed`.
fn policy_cases() -> Result<(u64, u64)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "-p",
            "ferry-cli",
            "--",
            "test",
            "policies",
        ])
        .current_dir(controlplane::root())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    let summary = text.lines().rev().find_map(|l| {
        let (p, rest) = l.split_once(" passed, ")?;
        let f = rest.strip_suffix(" failed")?;
        Some((p.parse().ok()?, f.parse().ok()?))
    });
    match summary {
        Some((p, f)) => Ok((p, if out.status.success() { f } else { f.max(1) })),
        None => Ok((0, 1)),
    }
}

/// Every test: the control planes first (the e2e tests need them), then the whole workspace.
/// Ends with one `summary: N passed, M failed` line over every test binary.
fn test(extra: &[&str]) -> Result<()> {
    use std::io::{BufRead, BufReader};
    let start = std::time::Instant::now();
    println!("== cargo fmt --check, cargo clippy -D warnings, tidy");
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--quiet",
        "--",
        "-D",
        "warnings",
    ])?;
    // Functions are what is measured: no function of the libraries and binaries over ~100
    // lines or 7 parameters.
    cargo(&[
        "clippy",
        "--workspace",
        "--lib",
        "--bins",
        "--quiet",
        "--",
        "-D",
        "warnings",
        "-D",
        "clippy::too_many_lines",
        "-D",
        "clippy::too_many_arguments",
    ])?;
    tidy::run()?;
    println!("== control planes (super, team-a, team-b)");
    // A second super cluster for the tests of several supers.
    let (_, tenants) = topology(&[])?;
    // Audit logs: the sharding tests count who wrote what.
    controlplane::up(
        &[controlplane::DEFAULT_SUPER.to_string(), "west".to_string()],
        &tenants,
        true,
    )?;
    println!("== cargo test --workspace");
    let mut args = vec!["test", "--workspace"];
    args.extend_from_slice(extra);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut child = Command::new(cargo)
        .args(&args)
        .current_dir(controlplane::root())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let (mut passed, mut failed) = (0u64, 0u64);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line?;
            println!("{line}");
            if let Some(rest) = line.strip_prefix("test result: ") {
                let (p, f) = counts(rest);
                passed += p;
                failed += f;
            }
        }
    }
    let status = child.wait()?;
    // The policy library's own cases, as a platform team's CI runs them.
    println!("== ferry test policies");
    let (p, f) = policy_cases()?;
    passed += p;
    failed += f;
    // The image: a static binary in an OCI archive, read back as a runtime would.
    println!("== cargo xtask image --debug");
    match image::build(true).and_then(|path| image::verify(&path)) {
        Ok(()) => {
            println!("test image::archive_runs ... ok");
            passed += 1;
        }
        Err(e) => {
            println!("test image::archive_runs ... FAILED: {e:#}");
            failed += 1;
        }
    }
    println!(
        "== {:.0}s; the control planes stay up for the next run (cargo xtask cluster down stops them)",
        start.elapsed().as_secs_f64()
    );
    println!("summary: {passed} passed, {failed} failed");
    if !status.success() || failed > 0 {
        bail!("tests failed");
    }
    Ok(())
}

/// Passed and failed counts of a libtest `test result:` line.
fn counts(rest: &str) -> (u64, u64) {
    let count = |word: &str| -> u64 {
        rest.split(';')
            .find_map(|part| {
                part.trim()
                    .trim_start_matches("ok. ")
                    .trim_start_matches("FAILED. ")
                    .strip_suffix(word)
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    (count(" passed"), count(" failed"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_libtest_lines() {
        assert_eq!(
            super::counts("ok. 14 passed; 0 failed; 0 ignored; 0 measured"),
            (14, 0)
        );
        assert_eq!(
            super::counts("FAILED. 5 passed; 1 failed; 0 ignored"),
            (5, 1)
        );
    }

    #[test]
    fn supers_and_tenants_in_either_order_with_defaults() {
        let (s, t) = super::topology(&[]).unwrap();
        assert_eq!(
            (s, t),
            (vec!["super".into()], vec!["team-a".into(), "team-b".into()])
        );
        let (s, t) = super::topology(&["--tenants", "team-a", "--supers", "east,west"]).unwrap();
        assert_eq!(s, ["east", "west"]);
        assert_eq!(t, ["team-a"]);
        assert!(super::topology(&["--supers", ""]).is_err());
        assert!(super::topology(&["--gpus", "1"]).is_err());
    }
}
