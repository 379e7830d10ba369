//! The editor schemas and the reference pages of the SyncPolicy and SyncConfig files are
//! generated from the Rust types that read the files; this fails when one is stale
//! (`FERRY_BLESS=1 cargo xtask test` regenerates them).

use std::path::Path;

fn check(path: &str, expected: &str, stale: &mut Vec<String>) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    if std::env::var_os("FERRY_BLESS").is_some() {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, expected).unwrap();
        return;
    }
    if std::fs::read_to_string(&file).ok().as_deref() != Some(expected) {
        stale.push(path.to_string());
    }
}

#[test]
fn schemas_and_references_are_current() {
    let policy = ferry_core::policy::model::json_schema();
    let config = ferry_core::config::json_schema();
    let json = |v: &serde_json::Value| format!("{}\n", serde_json::to_string_pretty(v).unwrap());
    let mut stale = Vec::new();
    check("docs/schemas/sync-policy.json", &json(&policy), &mut stale);
    check("docs/schemas/sync-config.json", &json(&config), &mut stale);
    let cases = ferry_core::cases::json_schema();
    check("docs/schemas/ferry-test.json", &json(&cases), &mut stale);
    check(
        "docs/reference/ferry-test.md",
        &ferry_core::reference::markdown(
            &cases,
            "ferry test case reference",
            "Every field of a `ferry test` case. A case file (`tests/*.yaml` beside policies) is a YAML list of cases; `ferry test [PATH...]` runs them against the policy tree at each PATH (or `--policy`), prints a diff for each failing case and `N passed, M failed`, and exits 1 on any failure; `--update` rewrites `expect`, `refused` and `explain` to what ferry does now, keeping comments. How to write them: [writing a policy](../writing-a-policy.md). Editors validate with `# yaml-language-server: $schema=../docs/schemas/ferry-test.json`.",
        ),
        &mut stale,
    );
    check(
        "docs/reference/sync-policy.md",
        &ferry_core::reference::markdown(
            &policy,
            "SyncPolicy reference",
            "Every field of a policy file (`policies/*.yaml`). What the schema annotations and field rules mean: [annotations](annotations.md). Editors validate with `# yaml-language-server: $schema=../docs/schemas/sync-policy.json` (a path relative to the file, or a URL).",
        ),
        &mut stale,
    );
    check(
        "docs/reference/sync-config.md",
        &ferry_core::reference::markdown(
            &config,
            "SyncConfig reference",
            "Every field of `ferry run --config FILE`. Paths are relative to the file. Tenants (`tenants`, `tenantSecrets`), super labels, cordons and placement rules apply live; other changes need a restart.",
        ),
        &mut stale,
    );
    assert!(
        stale.is_empty(),
        "stale: {stale:?}; regenerate with FERRY_BLESS=1 cargo xtask test and review the diff"
    );
}
