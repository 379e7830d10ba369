//! Hostile transforms against the real worker processes: every limit stops its transform
//! within one second beyond the configured limit, with a clear error, and the engine (this
//! test process) and the pool stay usable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::sandbox::{CallContext, Hook, Limits, Sandbox};
use serde_json::json;

mod sandbox_support;
use sandbox_support::{call, sandbox, script};

const IDENTITY: &str = "def to_super(obj, ctx):\n    obj['data']['ok'] = ctx.super_namespace('prod')\n    return obj\n";

/// The pool still answers after a failure.
fn still_works(sandbox: &Sandbox) {
    let (result, _) = call(sandbox, &script("identity", IDENTITY, Limits::default()));
    let out = result
        .expect("a healthy call succeeds")
        .expect("to_super is defined");
    assert_eq!(out["data"]["ok"], json!("team-a-prod"));
}

fn expect_limit(source: &str, limits: Limits, limit: &str) -> String {
    let sandbox = sandbox();
    let (result, elapsed) = call(&sandbox, &script("hostile", source, limits));
    let err = result.expect_err("the hostile transform fails");
    assert_eq!(err.limit(), Some(limit), "{err}");
    let bound = Duration::from_millis(limits.timeout_ms) + Duration::from_secs(1);
    assert!(
        elapsed < bound,
        "stopped after {elapsed:?}, more than {bound:?}: {err}"
    );
    still_works(&sandbox);
    err.to_string()
}

#[test]
fn unbounded_loop_stops_at_max_steps() {
    let src = "def to_super(obj, ctx):\n    n = 0\n    for i in range(100000):\n        for j in range(100000):\n            n += 1\n    return obj\n";
    // A generous clock, so that steps are what stops it even on a loaded machine.
    let msg = expect_limit(
        src,
        Limits {
            timeout_ms: 10_000,
            ..Limits::default()
        },
        "steps",
    );
    assert!(msg.contains("maxSteps=100000"), "{msg}");
}

#[test]
fn empty_loop_body_is_stopped_by_the_clock() {
    // `pass` compiles to nothing, so no statement is counted: the clock is the backstop.
    let src = "def to_super(obj, ctx):\n    for i in range(100000):\n        for j in range(100000):\n            pass\n    return obj\n";
    expect_limit(
        src,
        Limits {
            timeout_ms: 200,
            ..Limits::default()
        },
        "time",
    );
}

#[test]
fn busy_loop_with_plenty_of_steps_stops_at_timeout() {
    let src = "def to_super(obj, ctx):\n    for i in range(100000):\n        for j in range(100000):\n            pass\n    return obj\n";
    let limits = Limits {
        max_steps: u64::MAX / 2,
        timeout_ms: 200,
        ..Limits::default()
    };
    let msg = expect_limit(src, limits, "time");
    assert!(msg.contains("timeoutMs=200"), "{msg}");
}

#[test]
fn native_operation_is_killed_at_the_deadline() {
    // One statement spending seconds inside native code: no statement boundary to check.
    let src = "def to_super(obj, ctx):\n    h = list(range(100000))\n    x = [1 for _ in range(100000) if -1 in h]\n    return obj\n";
    let limits = Limits {
        timeout_ms: 100,
        ..Limits::default()
    };
    let msg = expect_limit(src, limits, "time");
    assert!(msg.contains("worker killed"), "{msg}");
}

#[test]
fn gigabyte_list_is_stopped_by_the_process_memory_limit() {
    let src = "def to_super(obj, ctx):\n    obj['data']['x'] = [0] * 2000000000\n    return obj\n";
    let msg = expect_limit(
        src,
        Limits {
            timeout_ms: 10_000,
            ..Limits::default()
        },
        "memory",
    );
    assert!(msg.contains("memory limit"), "{msg}");
}

#[test]
fn gigabyte_string_is_stopped_by_a_memory_limit() {
    let src = "def to_super(obj, ctx):\n    obj['data']['x'] = 'x' * 2000000000\n    return obj\n";
    let sandbox = sandbox();
    let (result, elapsed) = call(&sandbox, &script("hostile", src, Limits::default()));
    let err = result.expect_err("fails");
    assert!(matches!(err.limit(), Some("memory" | "heap")), "{err}");
    assert!(elapsed < Duration::from_millis(1100), "{elapsed:?}");
    still_works(&sandbox);
}

#[test]
fn growing_heap_stops_at_max_heap_bytes() {
    let src = "def to_super(obj, ctx):\n    xs = []\n    for i in range(100000):\n        xs.append('y' * 10000 + str(i))\n    return obj\n";
    let msg = expect_limit(
        src,
        Limits {
            max_heap_bytes: 4 << 20,
            ..Limits::default()
        },
        "heap",
    );
    assert!(msg.contains("maxHeapBytes=4194304"), "{msg}");
}

/// An answer just under the output limit crosses the pipe in many reads and arrives whole.
#[test]
fn large_output_arrives_whole() {
    let src =
        "def to_super(obj, ctx):\n    obj['data']['x'] = 'z' * (1024 * 1024)\n    return obj\n";
    let sandbox = sandbox();
    let limits = Limits {
        timeout_ms: 10_000,
        ..Limits::default()
    };
    let (result, _) = call(&sandbox, &script("large", src, limits));
    let out = result
        .expect("the call succeeds")
        .expect("to_super is defined");
    let x = out["data"]["x"].as_str().expect("a string");
    assert_eq!(x.len(), 1024 * 1024);
    assert!(x.bytes().all(|b| b == b'z'));
    still_works(&sandbox);
}

#[test]
fn huge_output_is_refused() {
    let src =
        "def to_super(obj, ctx):\n    obj['data']['x'] = 'z' * (3 * 1024 * 1024)\n    return obj\n";
    let msg = expect_limit(
        src,
        Limits {
            timeout_ms: 10_000,
            ..Limits::default()
        },
        "output",
    );
    assert!(msg.contains("bytes of JSON"), "{msg}");
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let src = "def to_super(obj, ctx):\n    n = {}\n    for i in range(50000):\n        n = {'a': n}\n    obj['data']['n'] = n\n    return obj\n";
    let msg = expect_limit(
        src,
        Limits {
            max_steps: 1_000_000,
            ..Limits::default()
        },
        "output",
    );
    assert!(msg.contains("nested deeper than 100"), "{msg}");
}

#[test]
fn deeply_nested_input_does_not_crash_the_worker() {
    let sandbox = sandbox();
    let mut nested = json!("leaf");
    // Deeper than any parser of the engine accepts (serde_json and serde_yaml stop at 128).
    for _ in 0..200 {
        nested = json!([nested]);
    }
    let learnt = BTreeMap::new();
    let ctx = CallContext {
        tenant: "team-a",
        learnt: &learnt,
        namespaces: &[],
    };
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"deep": nested}});
    let result = sandbox.call(
        &script("identity", IDENTITY, Limits::default()),
        Hook::ToSuper,
        &object,
        &ctx,
    );
    assert!(result.is_err(), "a 200-deep object is refused, not echoed");
    still_works(&sandbox);
}

/// serde_json (with `arbitrary_precision`) hands a float over as a map of its text: a
/// transform sees a float, and 64-bit integers as integers; a number Starlark cannot hold as
/// sent is refused, not passed on as something else.
#[test]
fn numbers_reach_a_transform_as_numbers() {
    let sandbox = sandbox();
    let learnt = BTreeMap::new();
    let ctx = CallContext {
        tenant: "team-a",
        learnt: &learnt,
        namespaces: &[],
    };
    let types = "def to_super(obj, ctx):\n    obj[\"data\"] = {k: type(v) for k, v in obj[\"spec\"].items()}\n    obj[\"spec\"][\"half\"] = obj[\"spec\"][\"half\"] * 2\n    return obj\n";
    let types = script("types", types, Limits::default());
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
        "spec": {"half": 0.5, "big": i64::MAX, "small": -3, "tiny": 1.5e-300}});
    let out = sandbox
        .call(&types, Hook::ToSuper, &object, &ctx)
        .unwrap()
        .unwrap();
    assert_eq!(
        out["data"],
        json!({"half": "float", "big": "int", "small": "int", "tiny": "float"})
    );
    assert_eq!(out["spec"]["half"], json!(1.0));
    // Integers past int64 (Kubernetes holds none) never reach a transform.
    for huge in ["18446744073709551615", "123456789012345678901234567890"] {
        let huge: serde_json::Value = serde_json::from_str(&format!(r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "x"}}, "spec": {{"huge": {huge}}}}}"#)).unwrap();
        let e = sandbox
            .call(&types, Hook::ToSuper, &huge, &ctx)
            .unwrap_err();
        assert!(e.to_string().contains("outside int64"), "{e}");
    }
    // Nor does a transform write one, or a float JSON cannot hold.
    for (value, expected) in [
        ("float(\"-inf\")", "the float -inf is not a finite number"),
        ("float(\"nan\")", "not a finite number"),
        ("9223372036854775807 + 1", "outside int64"),
    ] {
        let source = format!("def to_super(obj, ctx):\n    obj[\"spec\"] = {{\"limits\": [1, {value}]}}\n    return obj\n");
        let out = script("out", &source, Limits::default());
        let e = sandbox
            .call(&out, Hook::ToSuper, &object, &ctx)
            .unwrap_err();
        assert!(
            e.to_string().contains("output spec.limits[1]") && e.to_string().contains(expected),
            "{e}"
        );
    }
    // A key serde_json reserves, made from a tenant's string, is not written.
    let keyed = "def to_super(obj, ctx):\n    obj[\"data\"] = {obj[\"spec\"][\"k\"]: \"[1]\"}\n    return obj\n";
    let keyed = script("keyed", keyed, Limits::default());
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
        "spec": {"k": "$serde_json::private::RawValue"}});
    let e = sandbox
        .call(&keyed, Hook::ToSuper, &object, &ctx)
        .unwrap_err();
    assert!(e.to_string().contains("serde_json's own"), "{e}");
    still_works(&sandbox);
}

#[test]
fn no_load_no_io_no_clock() {
    let sandbox = sandbox();
    for (src, what) in [
        (
            "load('x.star', 'y')\ndef to_super(obj, ctx):\n    return obj\n",
            "load() is not allowed",
        ),
        (
            "def to_super(obj, ctx):\n    return open('/etc/passwd')\n",
            "open",
        ),
        ("def to_super(obj, ctx):\n    return time.now()\n", "time"),
        (
            "def to_super(obj, ctx):\n    return random.random()\n",
            "random",
        ),
    ] {
        let (result, _) = call(&sandbox, &script("forbidden", src, Limits::default()));
        let err = result.expect_err(what).to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
    still_works(&sandbox);
}

#[test]
fn recursion_and_wrong_results_are_script_errors() {
    let sandbox = sandbox();
    for (src, what) in [
        (
            "def f(n):\n    return f(n + 1)\ndef to_super(obj, ctx):\n    return f(0)\n",
            "stack overflow",
        ),
        (
            "def to_super(obj, ctx):\n    return [obj]\n",
            "must return an object",
        ),
        (
            "def to_super(obj, ctx):\n    fail('spec.size: too big')\n",
            "spec.size: too big",
        ),
    ] {
        let (result, _) = call(&sandbox, &script("bad", src, Limits::default()));
        let err = result.expect_err(what);
        assert!(err.limit().is_none(), "{err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    still_works(&sandbox);
}

#[test]
fn ctx_unmaps_learnt_hashed_namespaces_and_missing_to_tenant_is_none() {
    let sandbox = sandbox();
    let long = "n".repeat(60);
    let hashed = ferry_core::naming::map("team-a", &long);
    let learnt = BTreeMap::from([(hashed.clone(), long.clone())]);
    let ctx = CallContext {
        tenant: "team-a",
        learnt: &learnt,
        namespaces: &[],
    };
    let src = "def to_super(obj, ctx):\n    obj['data'] = {'t': ctx.tenant, 'd': ctx.direction, 'back': ctx.tenant_namespace(obj['data']['ns']), 'other': ctx.tenant_namespace('kube-system')}\n    return obj\n";
    let object = json!({"data": {"ns": hashed}});
    let out = sandbox
        .call(
            &script("ctx", src, Limits::default()),
            Hook::ToSuper,
            &object,
            &ctx,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        out["data"],
        json!({"t": "team-a", "d": "toSuper", "back": long, "other": null})
    );
    let missing = sandbox
        .call(
            &script("ctx", src, Limits::default()),
            Hook::ToTenant,
            &object,
            &ctx,
        )
        .unwrap();
    assert!(missing.is_none());
}

#[test]
fn parallel_tenants_do_not_wait_for_a_stuck_transform() {
    let sandbox = Arc::new(sandbox());
    let stuck = script(
        "stuck",
        "def to_super(obj, ctx):\n    h = list(range(100000))\n    x = [1 for _ in range(100000) if -1 in h]\n    return obj\n",
        Limits { timeout_ms: 2000, ..Limits::default() },
    );
    let s = sandbox.clone();
    let slow = std::thread::spawn(move || call(&s, &stuck));
    std::thread::sleep(Duration::from_millis(100));
    // While one worker is busy, another serves the other tenant at once.
    let start = Instant::now();
    still_works(&sandbox);
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "blocked for {:?}",
        start.elapsed()
    );
    let (result, _) = slow.join().unwrap();
    assert_eq!(result.unwrap_err().limit(), Some("time"));
}
