//! Every `ferry …` command in the code blocks of the README, the tutorial and the guide to
//! writing a policy runs as written and succeeds.

use std::path::Path;
use std::process::Command;

#[test]
fn readme_commands_run_as_written() {
    commands_run_as_written("README.md", 5);
}

#[test]
fn tutorial_commands_run_as_written() {
    commands_run_as_written("docs/tutorial.md", 6);
}

#[test]
fn guide_commands_run_as_written() {
    commands_run_as_written("docs/writing-a-policy.md", 4);
}

fn commands_run_as_written(page: &str, at_least: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join(page)).unwrap();
    let mut in_code = false;
    let mut ran = 0;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(command) = line.strip_prefix("ferry ").filter(|_| in_code) else {
            continue;
        };
        // Drop a trailing comment and an output redirection; run the command itself.
        let command = command.split(" #").next().unwrap_or(command);
        let command = command.split(" > ").next().unwrap_or(command);
        let args: Vec<&str> = command.split_whitespace().collect();
        // `ferry run` runs until stopped; tests/live/ runs it against real clusters.
        if args.first() == Some(&"run") {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(&args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{page}: `ferry {command}` exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(
        ran >= at_least,
        "expected {page} to show at least {at_least} ferry commands, found {ran}"
    );
}
