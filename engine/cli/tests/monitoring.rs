//! The alerts `ferry manifests` prints, run by `promtool test rules` (Debian's prometheus
//! package) against the series of `testdata/alerts/ferry-test.yaml`: each fires when it
//! should, with its labels and text, and not before.

use std::process::Command;

#[test]
fn alerts_fire_as_their_tests_say() {
    let dir = std::env::temp_dir().join(format!("ferry-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = serde_yaml::to_string(&ferry_core::manifests::rule_groups()).unwrap();
    std::fs::write(dir.join("rules.yaml"), rules).unwrap();
    let root = ferry_testkit::root();
    std::fs::copy(
        root.join("testdata/alerts/ferry-test.yaml"),
        dir.join("ferry-test.yaml"),
    )
    .unwrap();
    let promtool = |args: &[&str]| {
        Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (Debian's prometheus package; .ci/run installs it)")
    };
    let check = promtool(&["check", "rules", "rules.yaml"]);
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = promtool(&["test", "rules", "ferry-test.yaml"]);
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
