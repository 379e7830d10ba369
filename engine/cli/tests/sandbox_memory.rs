//! A transform worker's address space after a large call: a worker's memory limit is set
//! from its address space (`sandbox/worker.rs`), so memory a call freed must leave it, or
//! every later call would be allowed more. Alone in its test binary, one test at a time: its
//! workers are the only children of this process.

use ferry_core::sandbox::Limits;
use serde_json::json;

mod sandbox_support;
use sandbox_support::{call, sandbox, script};

/// The address space of every live process this one started, in bytes, and their pids.
fn children() -> (u64, Vec<u32>) {
    let me = std::process::id().to_string();
    let (mut total, mut pids) = (0, Vec::new());
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let mut fields = after.split_whitespace();
        if fields.next() == Some("Z") || fields.next() != Some(me.as_str()) {
            continue;
        }
        let statm = std::fs::read_to_string(path.join("statm")).unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        total += pages * 4096;
        pids.extend(
            entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok()),
        );
    }
    (total, pids)
}

/// The tests count every child of this process: one at a time.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Generous limits for calls that allocate a lot on purpose.
fn roomy() -> Limits {
    Limits {
        max_heap_bytes: 512 << 20,
        max_steps: 10_000_000,
        timeout_ms: 10_000,
    }
}

/// A script setting `data.n` to the string of `expression`.
fn setting(expression: &str) -> String {
    format!("def to_super(obj, ctx):\n    obj['data']['n'] = str({expression})\n    return obj\n")
}

/// The workers' address space after three calls of `large` does not keep what they freed.
fn gives_back(expression: &str, expected: &str) {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let sandbox = sandbox();
    let call = |source: &str| {
        call(&sandbox, &script("large", source, roomy()))
            .0
            .expect("the call succeeds")
            .expect("to_super is defined")
    };
    let small = setting("len([0] * 10)");
    call(&small);
    let (before, _) = children();
    assert!(before > 0, "the worker is a child of this process");
    for _ in 0..3 {
        assert_eq!(call(&setting(expression))["data"]["n"], json!(expected));
    }
    call(&small);
    let (after, _) = children();
    assert!(
        after < before + (64 << 20),
        "the workers' address space grew from {} MB to {} MB",
        before >> 20,
        after >> 20
    );
}

#[test]
fn a_worker_gives_back_the_address_space_of_one_large_list() {
    // 160 MB of list, freed when the call ends.
    gives_back("len([0] * 20000000)", "20000000");
}

#[test]
fn a_worker_gives_back_the_address_space_of_many_small_values() {
    gives_back("len([{'a': str(i)} for i in range(500000)])", "500000");
}

/// A call that used a large heap is its worker's last (`LARGE_CALL`): it answers, exits, and
/// the next call goes to a fresh worker without failing; small calls keep their worker.
#[test]
fn a_large_call_retires_its_worker_and_the_next_call_gets_a_fresh_one() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let sandbox = sandbox();
    let call = |expression: &str| {
        let source = setting(expression);
        call(&sandbox, &script("retire", &source, roomy()))
            .0
            .expect("the call succeeds")
            .expect("to_super is defined")["data"]["n"]
            .clone()
    };
    assert_eq!(call("len([0] * 10)"), json!("10"));
    let (_, first) = children();
    assert_eq!(call("len([0] * 10)"), json!("10"));
    assert_eq!(children().1, first, "a small call keeps its worker");
    assert_eq!(call("len([0] * 4000000)"), json!("4000000"));
    assert!(
        children().1.is_empty(),
        "the retired worker is gone: {:?}",
        children().1
    );
    assert_eq!(call("len([0] * 10)"), json!("10"));
    let (_, second) = children();
    assert_eq!(second.len(), 1);
    assert_ne!(second, first, "a fresh worker");
}
