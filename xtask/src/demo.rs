//! `cargo xtask demo`: the main job. Starts the local control planes (super clusters `super`
//! and `gpu`, tenants team-a and team-b),
//! builds ferry, then runs the demo driver (`engine/testkit/src/bin/ferry-demo.rs`), which
//! installs the sample CRDs, starts `ferry run` with `policies/`, creates sample objects and
//! shows what crosses. `--keep` leaves the control planes and ferry running to explore.

use anyhow::{bail, Result};

use crate::controlplane::{self, root};

pub fn run(args: &[&str]) -> Result<()> {
    let keep = match args {
        [] => false,
        ["--keep"] => true,
        other => bail!("demo: unexpected arguments {other:?} (expected --keep)"),
    };
    println!("ferry demo: live sync between two tenant control planes and a super cluster");
    println!("\nbuilding ferry and the demo driver…");
    crate::cargo(&[
        "build",
        "-q",
        "-p",
        "ferry-cli",
        "-p",
        "ferry-testkit",
        "--bins",
    ])?;
    controlplane::up(
        &[controlplane::DEFAULT_SUPER.to_string(), "gpu".to_string()],
        &["team-a".to_string(), "team-b".to_string()],
        false,
    )?;
    let target = root().join("target/debug");
    let mut driver = std::process::Command::new(target.join("ferry-demo"));
    driver.arg("--ferry").arg(target.join("ferry"));
    if keep {
        driver.arg("--keep");
    }
    let status = driver.current_dir(root()).status()?;
    if !keep {
        println!("\nstopping the control planes (keep them with `cargo xtask demo --keep`)");
        controlplane::down()?;
    }
    if !status.success() {
        bail!("the demo failed ({status}); ferry's log is target/demo/ferry.log");
    }
    Ok(())
}
