//! `cargo xtask demo`: the ferry tour. Until the live engine lands this is the offline tour:
//! the example policies are checked, then examples are translated down and up with
//! `--explain`, a refused object shown, and a summary printed.

use std::process::Command;

use anyhow::{bail, Result};

use crate::controlplane::root;

struct Step {
    title: &'static str,
    args: Vec<&'static str>,
}

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
    let steps = [
        Step {
            title: "Check every policy, schema and transform",
            args: vec!["check", "--policy", "policies"],
        },
        Step {
            title: "A tenant Database goes down to the super cluster",
            args: vec![
                "translate",
                "--policy",
                "policies",
                "--tenant",
                "team-a",
                "-f",
                "testdata/database-down/input.yaml",
                "--explain",
            ],
        },
        Step {
            title: "Istio hosts rewritten by a Starlark transform",
            args: vec![
                "translate",
                "--policy",
                "policies",
                "--tenant",
                "team-a",
                "-f",
                "testdata/virtualservice/input.yaml",
                "--explain",
            ],
        },
        Step {
            title: "Status flows back up, unmapped",
            args: vec![
                "translate",
                "--policy",
                "policies",
                "--tenant",
                "team-a",
                "--to",
                "tenant",
                "-f",
                "testdata/database-up/input.yaml",
                "--explain",
            ],
        },
        Step {
            title: "A public StorageClass is copied into every tenant",
            args: vec![
                "translate",
                "--policy",
                "policies",
                "--tenant",
                "team-b",
                "--to",
                "tenant",
                "-f",
                "testdata/storageclass-from-super/input.yaml",
            ],
        },
        Step {
            title: "Refused: a kind nobody approved (the other documents still translate)",
            args: vec![
                "translate",
                "--policy",
                "policies",
                "--tenant",
                "team-a",
                "-f",
                "testdata/multi-doc-one-refused/input.yaml",
            ],
        },
        Step {
            title: "Refused: a transform that tries to allocate gigabytes",
            args: vec![
                "translate",
                "--policy",
                "testdata/hostile",
                "--tenant",
                "team-a",
                "-f",
                "testdata/transform-memory/input.yaml",
            ],
        },
    ];
    let mut summary = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        println!("\n── {}/{} {} ──", i + 1, steps.len(), step.title);
        println!("$ ferry {}", step.args.join(" "));
        let status = Command::new(&ferry)
            .args(&step.args)
            .current_dir(root())
            .status()?;
        let code = status.code().unwrap_or(-1);
        summary.push((step.title, code));
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
