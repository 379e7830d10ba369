//! Golden tests: every `testdata/<case>/cmd` is run through the `ferry` binary from the
//! repository root and its exit code, stderr and stdout compared with `expected.txt`.
//!
//! `$CASE` in `cmd` stands for `testdata/<case>`; `stdin.yaml`, when present, is fed to stdin.
//! Regenerate with `FERRY_BLESS=1 cargo xtask test` and review the diff like code.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn run_case(root: &Path, case: &str) -> String {
    let dir = format!("testdata/{case}");
    let cmd = std::fs::read_to_string(root.join(&dir).join("cmd")).expect("cmd");
    let args: Vec<String> = cmd
        .split_whitespace()
        .map(|a| a.replace("$CASE", &dir))
        .collect();
    let stdin = root.join(&dir).join("stdin.yaml");
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .args(&args)
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.stdin(if stdin.exists() {
        Stdio::from(std::fs::File::open(&stdin).expect("stdin.yaml"))
    } else {
        Stdio::null()
    });
    let out = command.output().expect("run ferry");
    format!(
        "# ferry {}\n# exit: {}\n# stderr:\n{}# stdout:\n{}",
        cmd.trim(),
        out.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

#[test]
fn golden_cases() {
    let root = root();
    let bless = std::env::var_os("FERRY_BLESS").is_some();
    let mut cases: Vec<String> = std::fs::read_dir(root.join("testdata"))
        .expect("testdata")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("cmd").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 30,
        "expected at least 30 golden cases, found {}",
        cases.len()
    );
    let mut failed = Vec::new();
    for case in &cases {
        let actual = run_case(&root, case);
        let expected_path = root.join("testdata").join(case).join("expected.txt");
        if bless {
            std::fs::write(&expected_path, &actual).expect("write expected.txt");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failed.push(format!(
                "--- {case}: expected\n{expected}\n--- {case}: actual\n{actual}"
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} golden cases differ (FERRY_BLESS=1 regenerates):\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// Every exit code the contract names is exercised by some case.
#[test]
fn cases_cover_every_exit_code() {
    let root = root();
    let mut codes = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root.join("testdata"))
        .expect("testdata")
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(entry.path().join("expected.txt")) {
            if let Some(line) = text.lines().find(|l| l.starts_with("# exit: ")) {
                codes.insert(line["# exit: ".len()..].to_string());
            }
        }
    }
    for code in ["0", "1", "3"] {
        assert!(
            codes.contains(code),
            "no golden case exits {code}: {codes:?}"
        );
    }
}

/// Every refusal reason is exercised by some case.
#[test]
fn cases_cover_every_refusal_reason() {
    let root = root();
    let mut all = String::new();
    for entry in std::fs::read_dir(root.join("testdata"))
        .expect("testdata")
        .flatten()
    {
        all.push_str(
            &std::fs::read_to_string(entry.path().join("expected.txt")).unwrap_or_default(),
        );
    }
    for reason in [
        "NotApproved",
        "NotSelected",
        "UnapprovedReference",
        "TransformFailed",
        "SyncConflict",
        "Invalid",
    ] {
        assert!(
            all.contains(&format!(": {reason}: ")),
            "no golden case is refused with {reason}"
        );
    }
}
