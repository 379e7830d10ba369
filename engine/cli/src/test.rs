//! `ferry test`: runs the cases in `tests/*.yaml` beside policies and reports what differs.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ferry_core::cases::{self, Actual};
use ferry_core::policy::Policy;
use ferry_core::sandbox::Sandbox;

use crate::translate::one_line;

/// `ferry test` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Directories (or case files) to test; each is also the policy its cases run against,
    /// unless --policy names one.
    #[arg(default_value = ".")]
    paths: Vec<PathBuf>,
    /// The policy every case runs against (a file, or a directory tree), instead of each path.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Rewrite each case's expect, refused and explain to what ferry does now.
    #[arg(long)]
    update: bool,
}

/// What a run counted.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    updated: usize,
}

pub fn run(args: Args) -> Result<u8> {
    let sandbox = crate::translate::sandbox()?;
    let mut tally = Tally::default();
    for path in &args.paths {
        let policy_path = args.policy.as_deref().unwrap_or(path);
        let policy = match ferry_core::policy::load(policy_path) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(1);
            }
        };
        let files = match case_files(path) {
            Ok(files) if files.is_empty() => {
                eprintln!(
                    "error: {}: no tests/*.yaml case files below it",
                    path.display()
                );
                return Ok(1);
            }
            Ok(files) => files,
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return Ok(1);
            }
        };
        for file in files {
            if let Err(e) = run_file(&file, &policy, &sandbox, args.update, &mut tally) {
                eprintln!("error: {e}");
                return Ok(1);
            }
        }
    }
    if args.update {
        println!(
            "{} passed, {} failed, {} updated",
            tally.passed, tally.failed, tally.updated
        );
    } else {
        println!("{} passed, {} failed", tally.passed, tally.failed);
    }
    Ok(u8::from(tally.failed > 0))
}

/// Runs every case of one file, printing the failures; with `update`, rewrites the file.
fn run_file(
    file: &Path,
    policy: &Policy,
    sandbox: &Sandbox,
    update: bool,
    tally: &mut Tally,
) -> Result<()> {
    let loaded = cases::load(file)?;
    let mut rewrites: Vec<Option<Actual>> = Vec::new();
    for located in &loaded.cases {
        let case = &located.case;
        let (actual, failure) = match cases::run(case, policy, sandbox) {
            Ok(actual) => {
                let failure = cases::compare(case, &actual);
                (Some(actual), failure)
            }
            Err(e) => (None, Some(format!("  {e}\n"))),
        };
        match (failure, update) {
            (None, _) => {
                tally.passed += 1;
                rewrites.push(None);
            }
            (Some(_), true) if actual.is_some() => {
                tally.updated += 1;
                println!("updated {}: {}", located.at, one_line(&case.name));
                rewrites.push(actual);
            }
            (Some(diff), _) => {
                tally.failed += 1;
                println!("FAIL {}: {}", located.at, one_line(&case.name));
                print!("{diff}");
                rewrites.push(None);
            }
        }
    }
    if rewrites.iter().any(Option::is_some) {
        // Only the case file itself is rewritten, never what a link points at.
        if std::fs::symlink_metadata(file)?.file_type().is_symlink() {
            anyhow::bail!(
                "{}: a link; --update rewrites only regular case files",
                file.display()
            );
        }
        let text = cases::update(&loaded, &rewrites)?;
        std::fs::write(file, text)?;
    }
    Ok(())
}

/// The case files below `path`: `path` itself when it is a file, else every `*.yaml` in a
/// directory named `tests` in the tree (or `path` itself when it is one; hidden directories
/// skipped, a link to a directory followed once), in name order.
fn case_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let tests = path
        .canonicalize()?
        .file_name()
        .is_some_and(|n| n == "tests");
    walk(
        path,
        tests,
        &mut out,
        &mut std::collections::BTreeSet::new(),
    )?;
    Ok(out)
}

fn walk(
    dir: &Path,
    in_tests: bool,
    out: &mut Vec<PathBuf>,
    visited: &mut std::collections::BTreeSet<PathBuf>,
) -> std::io::Result<()> {
    if !visited.insert(dir.canonicalize()?) {
        return Ok(());
    }
    for entry in ferry_core::locate::visible_entries(dir)? {
        if entry.is_dir() {
            let tests = entry.file_name().is_some_and(|n| n == "tests");
            walk(&entry, tests, out, visited)?;
        } else if in_tests
            && matches!(
                entry.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        {
            out.push(entry);
        }
    }
    Ok(())
}
