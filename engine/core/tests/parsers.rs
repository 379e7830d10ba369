//! Parsers never panic or hang on any input (DESIGN.md, "Faults ferry survives"): policies,
//! SyncConfigs and schemas mutated from the real examples (bytes cut, tokens inserted, lines
//! repeated), arbitrary text, and arbitrary JSON schemas with `x-ferry-*` keys. Every call
//! runs on a thread of its own and must return, `Ok` or `Err`, within a deadline.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};

/// A parser that takes longer than this on a few KB of input hangs.
const DEADLINE: Duration = Duration::from_secs(20);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `f` on its own thread: fails if it panics or does not return within [`DEADLINE`].
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(true) => {}
        Ok(false) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: no answer within {DEADLINE:?}"),
    }
}

/// Tokens that mean something to YAML or to ferry.
const TOKENS: &[&str] = &[
    ":",
    "- ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\n",
    "\n  ",
    "\n    ",
    "---\n",
    "&a ",
    "*a",
    "<<: *a",
    "!!binary ",
    "!!str ",
    "? ",
    "|\n  ",
    ">-\n  ",
    "\"",
    "'",
    "#",
    "\t",
    "~",
    "null",
    "true",
    "1e999",
    "-0",
    "0x1F",
    "99999999999999999999",
    "apiVersion",
    "kind",
    "spec",
    "resources",
    "schema",
    "transforms",
    "sha256",
    "direction",
    "toSuper",
    "fromSuper",
    "scope",
    "Cluster",
    "x-ferry-ref",
    "x-ferry-namespace",
    "x-ferry-selector",
    "x-ferry-drop",
    "x-ferry-owner",
    "x-ferry-text",
    "$ref",
    "#/components/schemas/A",
    "properties",
    "items",
    "type",
    "object",
    "array",
    "tenants",
    "name",
    "kubeconfig",
    "patrolInterval",
    "5m",
    "-1s",
    "\u{0}",
    "\u{202e}",
    "é",
    "🦀",
];

/// `text` with a few edits: a range cut, a token inserted, a line repeated.
fn mutated(text: &'static str) -> impl Strategy<Value = String> {
    let edits = prop::collection::vec(
        (
            0usize..3,
            any::<prop::sample::Index>(),
            0usize..64,
            prop::sample::select(TOKENS),
        ),
        1..6,
    );
    edits.prop_map(move |edits| {
        let mut out = text.to_string();
        for (kind, at, len, token) in edits {
            let mut at = at.index(out.len().max(1)).min(out.len());
            while !out.is_char_boundary(at) {
                at -= 1;
            }
            match kind {
                0 => {
                    let mut end = (at + len).min(out.len());
                    while !out.is_char_boundary(end) {
                        end -= 1;
                    }
                    out.replace_range(at..end, "");
                }
                1 => out.insert_str(at, token),
                _ => {
                    let start = out[..at].rfind('\n').map_or(0, |i| i + 1);
                    let end = out[at..].find('\n').map_or(out.len(), |i| at + i + 1);
                    let line = out[start..end].to_string();
                    out.insert_str(start, &line.repeat(1 + len % 3));
                }
            }
        }
        out
    })
}

/// Text made of tokens, or of any characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(TOKENS), 0..120).prop_map(|t| t.concat()),
        "\\PC{0,400}",
    ]
}

/// A scratch file under `target/fuzz/<dir>` (beside `schemas/` and `transforms/` holding
/// links to the example's and the Gateway API's files, so that a policy's relative
/// references still resolve).
fn scratch(dir: &str, name: &str, text: &str) -> PathBuf {
    let dir = root().join("target/fuzz").join(dir);
    for (sub, file) in [
        (
            "schemas",
            "policies/examples/schemas/databases.example.com.yaml",
        ),
        (
            "schemas",
            "policies/library/gateway-api/schemas/gateway.networking.k8s.io.yaml",
        ),
        ("transforms", "policies/examples/transforms/db-tier.star"),
        (
            "transforms",
            "policies/library/gateway-api/transforms/gateway-routes.star",
        ),
    ] {
        let target = root().join(file);
        let link = dir.join(sub).join(target.file_name().unwrap());
        if dir.join(sub).is_symlink() {
            // A link to a whole directory, as earlier trees made.
            std::fs::remove_file(dir.join(sub)).unwrap();
        }
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        if !link.exists() {
            let _ = std::os::unix::fs::symlink(target, link);
        }
    }
    let path = dir.join(format!("{name}-{:?}.yaml", std::thread::current().id()));
    std::fs::write(&path, text).unwrap();
    path
}

const POLICY: &str = include_str!("../../../policies/examples/databases.yaml");
const GATEWAY_POLICY: &str = include_str!("../../../policies/library/gateway-api/gateway-api.yaml");
const SCHEMA: &str = include_str!("../../../policies/examples/schemas/databases.example.com.yaml");
const CONFIG: &str = "apiVersion: ferry.dev/v1alpha1\nkind: SyncConfig\nspec:\n  policy: ../policies\n  super: {kubeconfig: super.kubeconfig}\n  tenants:\n  - {name: team-a, kubeconfig: a.kubeconfig}\n  - name: team-b\n    kubeconfig: b.kubeconfig\n  patrolInterval: 60s\n  leaderElection: {enabled: true, namespace: ferry-system, lease: ferry}\n  metrics: {address: \"127.0.0.1:9090\"}\n";

/// JSON schemas with ferry's annotations in odd places.
fn schema_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": "string", "x-ferry-namespace": true})),
        Just(json!({"type": "string", "x-ferry-ref": {"kind": "Secret"}})),
        Just(json!({"type": "object", "x-ferry-selector": {}})),
        Just(json!({"x-ferry-ref": "nonsense", "x-ferry-owner": 3})),
        Just(json!({"$ref": "#/definitions/loop"})),
        Just(json!({"type": "array", "items": {"x-ferry-drop": true}})),
        Just(json!(null)),
        Just(json!([1, 2])),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-z]{1,6}|x-ferry-[a-z]{1,8}", inner.clone(), 0..5)
                .prop_map(|fields| json!({"type": "object", "properties": fields})),
            inner.prop_map(|items| json!({"type": "array", "items": items})),
        ]
    })
}

proptest! {
    // 48 cases each in CI; `PROPTEST_CASES` asks for more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn policies_never_panic_or_hang(text in prop_oneof![mutated(POLICY), mutated(GATEWAY_POLICY), text()]) {
        let path = scratch("policies", "policy", &text);
        returns("policy::load", move || ferry_core::policy::load(&path).map(drop));
    }

    #[test]
    fn configs_never_panic_or_hang(text in prop_oneof![mutated(CONFIG), text()]) {
        let path = scratch("configs", "config", &text);
        returns("config::load", move || ferry_core::config::load(&path).map(drop));
    }

    #[test]
    fn schema_files_never_panic_or_hang(text in prop_oneof![mutated(SCHEMA), text()]) {
        let path = scratch("schemas-mutated", "schema", &text);
        returns("schema plan", move || {
            ferry_core::schema::PlanCache::default()
                .get(&path, "example.com/v1", "Database")
                .map(drop)
        });
    }

    #[test]
    fn json_schemas_never_panic_or_hang(schema in schema_json()) {
        returns("plan_from_json", move || {
            ferry_core::schema::load::plan_from_json("fuzz", &schema).map(drop)
        });
    }

    #[test]
    fn objects_never_panic_or_hang(text in prop_oneof![mutated(POLICY), mutated(SCHEMA), text()]) {
        returns("objects", move || objects(&text));
    }
}

/// What `ferry translate` does with its input: documents split, duplicate keys and merge
/// keys refused, each document parsed.
fn objects(text: &str) -> usize {
    let mut parsed = 0;
    for (offset, chunk) in ferry_core::schema::load::split_documents(text) {
        if ferry_core::locate::duplicate_key(Path::new("fuzz"), chunk, offset).is_none()
            && serde_yaml::from_str::<Value>(chunk).is_ok()
        {
            parsed += 1;
        }
    }
    parsed
}

#[test]
fn alias_bombs_end() {
    let mut bomb = String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
    let mut previous = 'a';
    for name in 'b'..='j' {
        bomb.push_str(&format!(
            "{name}: &{name} [*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous}]\n"
        ));
        previous = name;
    }
    let text = bomb.clone();
    returns("an alias bomb as objects", move || objects(&text));
    let policy = format!("{POLICY}\n---\n{bomb}");
    let path = scratch("policies", "bomb", &policy);
    returns("an alias bomb in a policy", move || {
        ferry_core::policy::load(&path).map(drop)
    });
}
