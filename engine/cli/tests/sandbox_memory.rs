//! A transform worker's address space after a large call: a worker's memory limit is set
//! from its address space (`sandbox/worker.rs`), so memory a call freed must leave it, or
//! every later call would be allowed more. Alone in its test binary: its workers are the only
//! children of this process.

use ferry_core::sandbox::Limits;
use serde_json::json;

mod sandbox_support;
use sandbox_support::{call, sandbox, script};

/// The address space of every process this one started, in bytes.
fn children_address_space() -> u64 {
    let me = std::process::id().to_string();
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1) != Some(me.as_str()) {
            continue;
        }
        let statm = std::fs::read_to_string(path.join("statm")).unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        total += pages * 4096;
    }
    total
}

#[test]
fn a_worker_gives_back_the_address_space_of_a_large_call() {
    let sandbox = sandbox();
    let limits = Limits {
        max_heap_bytes: 512 << 20,
        timeout_ms: 10_000,
        ..Limits::default()
    };
    let call = |source: &str| {
        call(&sandbox, &script("large", source, limits))
            .0
            .expect("the call succeeds")
            .expect("to_super is defined")
    };
    let small =
        "def to_super(obj, ctx):\n    obj['data']['n'] = str(len([0] * 10))\n    return obj\n";
    // 160 MB of list, freed when the call ends.
    let large = "def to_super(obj, ctx):\n    obj['data']['n'] = str(len([0] * 20000000))\n    return obj\n";
    call(small);
    let before = children_address_space();
    assert!(before > 0, "the worker is a child of this process");
    for _ in 0..3 {
        assert_eq!(call(large)["data"]["n"], json!("20000000"));
    }
    call(small);
    let after = children_address_space();
    assert!(
        after < before + (64 << 20),
        "the workers' address space grew from {} MB to {} MB",
        before >> 20,
        after >> 20
    );
}
