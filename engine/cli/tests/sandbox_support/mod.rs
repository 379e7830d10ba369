//! What the sandbox tests share: a sandbox of real worker processes (this build's `ferry`), a
//! pinned script, and one call with a fixed object.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::sandbox::{CallContext, Error, Hook, Limits, Sandbox, Script, WorkerCommand};
use serde_json::json;

pub fn sandbox() -> Sandbox {
    Sandbox::new(WorkerCommand {
        program: env!("CARGO_BIN_EXE_ferry").into(),
        args: vec!["__sandbox-worker".into()],
    })
}

pub fn script(name: &str, source: &str, limits: Limits) -> Script {
    use sha2::Digest;
    Script {
        name: name.into(),
        file: format!("{name}.star"),
        source: Arc::from(source),
        digest: format!("{:x}", sha2::Sha256::digest(source.as_bytes())),
        limits,
    }
}

pub fn call(sandbox: &Sandbox, s: &Script) -> (Result<Option<serde_json::Value>, Error>, Duration) {
    let learnt = BTreeMap::new();
    let ctx = CallContext {
        tenant: "team-a",
        learnt: &learnt,
        namespaces: &[],
    };
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "team-a-prod"}, "data": {}});
    let start = Instant::now();
    let result = sandbox.call(s, Hook::ToSuper, &object, &ctx);
    (result, start.elapsed())
}
