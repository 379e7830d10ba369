//! `cargo xtask bench --translate`: translation cost as ratios to serde_json parse+serialize
//! of the same ~2 KB object, measured side by side in one run (interleaved rounds, medians),
//! so that a noisy machine moves both sides alike. Writes `target/bench/report.json`.

use std::path::Path;
use std::time::Instant;

use ferry_core::naming::{NameMap, Tenant};
use ferry_core::sandbox::{Sandbox, WorkerCommand};
use ferry_core::translate::Translator;
use serde_json::{json, Value};

const ROUNDS: usize = 15;
const PER_ROUND: usize = 2000;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Nanoseconds per call of `f`, one round.
fn round(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..PER_ROUND {
        f();
    }
    start.elapsed().as_nanos() as f64 / PER_ROUND as f64
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let yaml = std::fs::read_to_string(root.join("testdata/bench/database-2k.yaml"))
        .expect("bench object");
    let object: Value = serde_yaml::from_str(&yaml).expect("bench object parses");
    let text = serde_json::to_string(&object).expect("json");
    let policy = ferry_core::policy::load(&root.join("policies")).expect("example policies");
    let mut schema_only = policy.clone();
    for r in &mut schema_only.resources {
        r.transforms.clear();
    }
    let sandbox = Sandbox::new(WorkerCommand {
        program: env!("CARGO_BIN_EXE_ferry").into(),
        args: vec!["__sandbox-worker".into()],
    });
    let names = NameMap::new(Tenant::new("team-a").expect("tenant"));
    let plain = Translator::new(&schema_only, None);
    let with_transform = Translator::new(&policy, Some(&sandbox));

    let baseline = || {
        let v: Value = serde_json::from_str(&text).expect("parse");
        std::hint::black_box(serde_json::to_string(&v).expect("serialize"));
    };
    let schema = || {
        let v: Value = serde_json::from_str(&text).expect("parse");
        let out = plain.to_super(v, &names, false).expect("translates");
        std::hint::black_box(serde_json::to_string(&out.object).expect("serialize"));
    };
    let transform = || {
        let v: Value = serde_json::from_str(&text).expect("parse");
        let out = with_transform
            .to_super(v, &names, false)
            .expect("translates");
        std::hint::black_box(serde_json::to_string(&out.object).expect("serialize"));
    };
    // The sandbox alone: one call of the same transform on the same object, for the report's
    // breakdown (process round trip plus Starlark).
    let script = policy
        .resource("example.com", "Database")
        .expect("Database")
        .transforms[0]
        .clone();
    let learnt = std::collections::BTreeMap::new();
    let ctx = ferry_core::sandbox::CallContext {
        tenant: "team-a",
        learnt: &learnt,
        namespaces: &[],
    };
    let sandbox_only = || {
        std::hint::black_box(
            sandbox
                .call(&script, ferry_core::sandbox::Hook::ToSuper, &object, &ctx)
                .expect("call"),
        );
    };
    let noop = ferry_core::sandbox::Script {
        name: "noop".into(),
        file: "noop.star".into(),
        source: std::sync::Arc::from("def to_super(obj, ctx):\n    return obj\n"),
        digest: "noop".into(),
        limits: Default::default(),
    };
    let round_trip = || {
        std::hint::black_box(
            sandbox
                .call(&noop, ferry_core::sandbox::Hook::ToSuper, &json!({}), &ctx)
                .expect("call"),
        );
    };
    // For profiling one side: FERRY_BENCH_ONLY=schema|transform loops on it alone.
    if let Ok(only) = std::env::var("FERRY_BENCH_ONLY") {
        for _ in 0..ROUNDS {
            match only.as_str() {
                "schema" => round(schema),
                "sandbox" => round(sandbox_only),
                _ => round(transform),
            };
        }
        return;
    }
    // Warm up: caches, the worker process, the CPU frequency.
    for _ in 0..3 {
        round(baseline);
        round(schema);
        round(transform);
    }
    let (mut b, mut s, mut t, mut c, mut r) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        b.push(round(baseline));
        s.push(round(schema));
        t.push(round(transform));
        c.push(round(sandbox_only));
        r.push(round(round_trip));
        eprint!("\rbench translate: round {}/{ROUNDS}", i + 1);
    }
    eprintln!();
    let (b, s, t, c, r) = (median(b), median(s), median(t), median(c), median(r));
    let report = json!({
        "object_bytes": text.len(),
        "rounds": ROUNDS,
        "calls_per_round": PER_ROUND,
        "serde_parse_serialize_ns": b.round(),
        "translate_schema_ns": s.round(),
        "translate_transform_ns": t.round(),
        "sandbox_call_ns": c.round(),
        "sandbox_empty_round_trip_ns": r.round(),
        "translate_schema_ratio": (s / b * 100.0).round() / 100.0,
        "translate_transform_ratio": (t / b * 100.0).round() / 100.0,
        "targets": {"translate_schema_ratio": 1.5, "translate_transform_ratio": 4.0},
    });
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir).expect("target/bench");
    let path = out_dir.join("report.json");
    let mut merged: serde_json::Map<String, Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if let Value::Object(r) = &report {
        for (k, v) in r {
            merged.insert(k.clone(), v.clone());
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&merged).expect("json"))
        .expect("write report");
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
}
