//! `cargo xtask demo`: the ferry tour. Until the live engine lands this is the offline tour:
//! the example policies are checked, then examples are translated down and up with
//! `--explain`, a refused object shown, and a summary printed.

use std::process::Command;

use anyhow::{bail, Result};

use crate::controlplane::root;

/// The tour: a title and the `ferry` arguments of each step.
const STEPS: &[(&str, &str)] = &[
    ("Check every policy, schema and transform", "check --policy policies"),
    (
        "A tenant Database goes down to the super cluster",
        "translate --policy policies --tenant team-a -f testdata/database-down/input.yaml --explain",
    ),
    (
        "Istio hosts rewritten by a Starlark transform",
        "translate --policy policies --tenant team-a -f testdata/virtualservice/input.yaml --explain",
    ),
    (
        "Status flows back up, unmapped",
        "translate --policy policies --tenant team-a --to tenant -f testdata/database-up/input.yaml --explain",
    ),
    (
        "A public StorageClass is copied into every tenant",
        "translate --policy policies --tenant team-b --to tenant -f testdata/storageclass-from-super/input.yaml",
    ),
    (
        "Refused: a kind nobody approved (the other documents still translate)",
        "translate --policy policies --tenant team-a -f testdata/multi-doc-one-refused/input.yaml",
    ),
    (
        "Refused: a transform that tries to allocate gigabytes",
        "translate --policy testdata/hostile --tenant team-a -f testdata/transform-memory/input.yaml",
    ),
    ("The ClusterRoles ferry needs on each side", "rbac --policy policies"),
];

pub fn run(args: &[&str]) -> Result<()> {
    if !args.is_empty() {
        bail!("demo: unexpected arguments {args:?}");
    }
    println!(
        "ferry demo: the offline tour (live sync into local control planes comes with `ferry run`)"
    );
    println!("building ferry…");
    crate::cargo(&["build", "-q", "-p", "ferry-cli"])?;
    let ferry = root().join("target/debug/ferry");
    let mut summary = Vec::new();
    for (i, (title, args)) in STEPS.iter().enumerate() {
        println!("\n── {}/{} {title} ──", i + 1, STEPS.len());
        println!("$ ferry {args}");
        let status = Command::new(&ferry)
            .args(args.split_whitespace())
            .current_dir(root())
            .status()?;
        summary.push((*title, status.code().unwrap_or(-1)));
    }
    println!("\n{:<70} exit", "step");
    for (title, code) in &summary {
        let meaning = match code {
            0 => "0 ok",
            1 => "1 load error",
            3 => "3 refused (as intended)",
            _ => "unexpected",
        };
        println!("{title:<70} {meaning}");
    }
    if summary.iter().any(|(_, c)| !matches!(c, 0 | 3)) {
        bail!("a demo step failed");
    }
    Ok(())
}
