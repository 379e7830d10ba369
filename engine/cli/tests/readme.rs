//! Every `ferry …` command in the README's code blocks runs as written and succeeds.

use std::path::Path;
use std::process::Command;

#[test]
fn readme_commands_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
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
            "README: `ferry {command}` exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(
        ran >= 5,
        "expected the README to show at least 5 ferry commands, found {ran}"
    );
}
