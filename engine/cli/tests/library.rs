//! The policy library (`policies/library/<project>/`): every entry has a README saying what a
//! tenant may do and what is refused, and test cases — at least five for each kind it
//! approves, a third of them refusals. Its index (`policies/library/README.md`) and a page per
//! entry (`docs/library/<project>.md`) are generated from the entries; this fails when one is
//! stale (`FERRY_BLESS=1 cargo xtask test` regenerates them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferry_core::cases::Refusals;
use serde_json::Value;

/// Cases each approved kind needs, and the share of them that must be refusals.
const CASES_PER_KIND: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One approved kind of an entry.
struct Approved {
    api_version: String,
    kind: String,
    how: String,
}

/// One case of an entry.
struct Case {
    file: String,
    name: String,
    kinds: Vec<(String, String)>,
    refused: Vec<String>,
}

/// An entry of the library.
struct Entry {
    name: String,
    readme: String,
    approved: Vec<Approved>,
    cases: Vec<Case>,
    upstream: Option<String>,
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    out.sort();
    out
}

/// The kinds the entry's policy files approve, and how.
fn approved(dir: &Path) -> Vec<Approved> {
    let mut out = Vec::new();
    for file in yaml_files(dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let Ok(doc) = serde_yaml::from_str::<Value>(&text) else {
            continue;
        };
        if doc["kind"] != "SyncPolicy" {
            continue;
        }
        for r in doc["spec"]["resources"].as_array().into_iter().flatten() {
            let text = |k: &str| r[k].as_str().unwrap_or("").to_string();
            let mut how = vec![
                match (text("direction").as_str(), r["produced"].as_bool()) {
                    ("", Some(true)) => "produced".to_string(),
                    (d, Some(true)) => format!("{d}, produced"),
                    (d, _) => d.to_string(),
                },
            ];
            if r["scope"] == "Cluster" {
                how.push("cluster-scoped".into());
            }
            if r["dependency"] == true {
                how.push("while referenced".into());
            }
            if let Some(ns) = r["placement"]["namespace"].as_str() {
                how.push(format!("copies in `{ns}`"));
            }
            if r.get("schema").is_none() {
                how.push("no schema file".into());
            }
            out.push(Approved {
                api_version: text("apiVersion"),
                kind: text("kind"),
                how: how.join(", "),
            });
        }
    }
    out
}

fn cases(dir: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    for file in yaml_files(&dir.join("tests")) {
        let loaded =
            ferry_core::cases::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for located in loaded.cases {
            let case = located.case;
            let kinds = case
                .input
                .iter()
                .map(|o| {
                    let api = o["apiVersion"].as_str().unwrap_or("");
                    let group = api.rsplit_once('/').map_or("", |(g, _)| g);
                    (
                        group.to_string(),
                        o["kind"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let refused = match &case.refused {
                None => Vec::new(),
                Some(Refusals::One(r)) => vec![r.reason.clone()],
                Some(Refusals::Many(rs)) => rs.iter().map(|r| r.reason.clone()).collect(),
            };
            out.push(Case {
                file: file.file_name().unwrap().to_string_lossy().into_owned(),
                name: case.name,
                kinds,
                refused,
            });
        }
    }
    out
}

/// The release an entry was written against: the first table row of its upstream SOURCE.md.
fn upstream(name: &str) -> Option<String> {
    let text = std::fs::read_to_string(
        root()
            .join("testdata/upstream")
            .join(name)
            .join("SOURCE.md"),
    )
    .ok()?;
    text.lines().filter(|l| l.starts_with("| `")).find_map(|l| {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        (cells.len() > 3).then(|| format!("{} {}", cells[1], cells[2]))
    })
}

fn entries() -> Vec<Entry> {
    let library = root().join("policies/library");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&library)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            Entry {
                readme: std::fs::read_to_string(dir.join("README.md")).unwrap_or_default(),
                approved: approved(dir),
                cases: cases(dir),
                upstream: upstream(&name),
                name,
            }
        })
        .collect()
}

/// What is wrong with an entry: a README without its sections, a kind with too few cases
/// or too few refusals.
fn problems(entry: &Entry) -> Vec<String> {
    let mut out = Vec::new();
    for section in ["## What crosses", "## What is refused"] {
        if !entry.readme.contains(section) {
            out.push(format!(
                "{}: README.md has no {section:?} section",
                entry.name
            ));
        }
    }
    for a in &entry.approved {
        let group = a.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let of_kind: Vec<&Case> = entry
            .cases
            .iter()
            .filter(|c| c.kinds.iter().any(|(g, k)| g == group && *k == a.kind))
            .collect();
        let refused = of_kind.iter().filter(|c| !c.refused.is_empty()).count();
        if of_kind.len() < CASES_PER_KIND || refused * 3 < of_kind.len() {
            out.push(format!(
                "{}: {} {} has {} case(s), {refused} refused (at least {CASES_PER_KIND}, a third refused)",
                entry.name, a.api_version, a.kind, of_kind.len()
            ));
        }
    }
    out
}

/// The index of the library.
fn index(entries: &[Entry]) -> String {
    let mut out = String::from(
        "# The policy library\n\n<!-- Generated from the entries below it (FERRY_BLESS=1 cargo xtask test regenerates it). -->\n\n\
         Reviewed policies, schema overlays and transforms for the CRDs platforms run, each with\n\
         `ferry test` cases (hostile ones among them). Load the whole library as one policy\n\
         (`ferry run` with `policy: policies/library`, or `--policy policies/library`), or copy\n\
         the entries you need with `core/`, which approves the Secrets and ConfigMaps the others\n\
         name. Each entry's README says what a tenant may do, what is refused and why, and what\n\
         the platform must set up. Run the cases with `ferry test policies/library`. Writing a\n\
         new entry: [docs/writing-a-policy.md](../../docs/writing-a-policy.md).\n\n\
         | entry | approves | cases (refused) | written against |\n|---|---|---|---|\n",
    );
    for e in entries {
        let kinds: Vec<String> = e
            .approved
            .iter()
            .map(|a| format!("{} ({})", a.kind, a.how))
            .collect();
        let refused = e.cases.iter().filter(|c| !c.refused.is_empty()).count();
        out.push_str(&format!(
            "| [{0}]({0}/README.md) | {1} | {2} ({refused}) | {3} |\n",
            e.name,
            kinds.join("; "),
            e.cases.len(),
            e.upstream.as_deref().unwrap_or("—"),
        ));
    }
    out
}

/// The docs page of one entry: its README, then what it approves and its cases.
fn page(e: &Entry) -> String {
    let mut out = format!(
        "<!-- Generated from policies/library/{0}/ (FERRY_BLESS=1 cargo xtask test regenerates it). -->\n\n",
        e.name
    );
    // The README's links are relative to the entry's folder.
    let base = format!("../../policies/library/{}/", e.name);
    out.push_str(
        &e.readme
            .replace("](", &format!("]({base}"))
            .replace(&format!("]({base}http"), "](http")
            .replace(&format!("]({base}#"), "](#"),
    );
    out.push_str(&format!(
        "\n## Approved kinds\n\nFiles: [`policies/library/{0}/`]({base}).\n\n| apiVersion | kind | how |\n|---|---|---|\n",
        e.name
    ));
    for a in &e.approved {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            a.api_version, a.kind, a.how
        ));
    }
    out.push_str(&format!(
        "\n## Test cases\n\n`ferry test policies/library/{}` runs these {} cases.\n\n| file | case | refused |\n|---|---|---|\n",
        e.name,
        e.cases.len()
    ));
    for c in &e.cases {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.file,
            c.name.replace('|', "\\|"),
            c.refused.join(", ")
        ));
    }
    out
}

fn check(path: &Path, expected: &str, stale: &mut Vec<String>) {
    if std::env::var_os("FERRY_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, expected).unwrap();
        return;
    }
    if std::fs::read_to_string(path).ok().as_deref() != Some(expected) {
        stale.push(path.display().to_string());
    }
}

#[test]
fn every_entry_is_documented_and_tested() {
    let entries = entries();
    assert!(entries.len() >= 16, "{} entries", entries.len());
    let problems: Vec<String> = entries.iter().flat_map(problems).collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn index_and_pages_are_current() {
    let entries = entries();
    let mut stale = Vec::new();
    check(
        &root().join("policies/library/README.md"),
        &index(&entries),
        &mut stale,
    );
    let mut pages = BTreeMap::new();
    for e in &entries {
        pages.insert(e.name.clone(), page(e));
    }
    for (name, text) in &pages {
        check(
            &root().join("docs/library").join(format!("{name}.md")),
            text,
            &mut stale,
        );
    }
    assert!(
        stale.is_empty(),
        "stale: {stale:?}; regenerate with FERRY_BLESS=1 cargo xtask test and review the diff"
    );
}
