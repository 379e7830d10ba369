//! The Starlark sandbox: transforms run in worker processes under per-call limits.
//!
//! ```text
//!  translate ──▶ Sandbox::call ──▶ Pool ──frame──▶ worker process (RLIMIT_AS, steps, heap)
//!                     ▲                │  deadline passes: kill, start a fresh worker
//!                     └── Ok(object) / Error::{Limit, Script, Worker} ◀──┘
//! ```
//!
//! A transform sees tenant-controlled data, so its limits must hold on any input: the
//! interpreter's own step, heap and clock checks give clean errors for ordinary overruns, and
//! the process boundary enforces the rest (a native allocation of gigabytes, a native call that
//! cannot be interrupted) without taking the engine down.

mod json;
pub mod pool;
pub mod protocol;
pub mod script;
pub mod worker;

use serde::{Deserialize, Serialize};

pub use pool::{Pool, WorkerCommand};
pub use protocol::Hook;

/// Deepest nesting a transform's output may have.
pub const MAX_OUTPUT_DEPTH: usize = 100;

/// Largest JSON a transform may return: what etcd accepts for one object.
pub const MAX_OUTPUT_BYTES: usize = 1536 * 1024;

/// Per-call limits of a transform (`limits:` in the policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Statements executed, counted across the call.
    pub max_steps: u64,
    /// Bytes on the Starlark heap; the process limit is this plus an interpreter allowance.
    pub max_heap_bytes: u64,
    /// Wall time of the call in milliseconds.
    pub timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: 100_000,
            max_heap_bytes: 16 * 1024 * 1024,
            timeout_ms: 100,
        }
    }
}

/// Why a transform call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A limit stopped the transform.
    #[error("transform {name} ({file}) stopped: {message}")]
    Limit {
        /// The transform's name in the policy.
        name: String,
        /// Its file.
        file: String,
        /// `steps`, `heap`, `time`, `memory` or `output`.
        limit: String,
        /// What happened.
        message: String,
    },
    /// The script failed: a Starlark error, a wrong return type, a missing hook.
    #[error("transform {name} failed: {message}")]
    Script {
        /// The transform's name in the policy.
        name: String,
        /// The error, with the script location where known.
        message: String,
    },
    /// No worker could be started or talked to.
    #[error("transform worker: {0}")]
    Worker(String),
}

impl Error {
    /// The limit that stopped the call, if one did.
    pub fn limit(&self) -> Option<&str> {
        match self {
            Error::Limit { limit, .. } => Some(limit),
            _ => None,
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the engine needs to call one transform.
#[derive(Clone, Debug)]
pub struct Script {
    /// The transform's name in the policy.
    pub name: String,
    /// Its file, for messages.
    pub file: String,
    /// The file's bytes as text.
    pub source: std::sync::Arc<str>,
    /// sha256 of `source`, hex.
    pub digest: String,
    /// The limits of each call.
    pub limits: Limits,
}

impl Script {
    /// Whether the script asks for `ctx.tenant_namespaces()`: only then does a call carry the
    /// tenant's namespaces (a list the size of the tenant, not worth sending otherwise).
    pub fn uses_tenant_namespaces(&self) -> bool {
        self.source.contains("tenant_namespaces")
    }
}

/// The tenant side of a call: who, the hashed names it knows, and its namespaces.
#[derive(Clone, Debug)]
pub struct CallContext<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// Hashed super namespace -> tenant namespace pairs.
    pub learnt: &'a std::collections::BTreeMap<String, String>,
    /// `ctx.tenant_namespaces()`: the tenant's namespaces (sent only to scripts that ask).
    pub namespaces: &'a [String],
}

/// Runs transforms in a pool of worker processes.
#[derive(Debug)]
pub struct Sandbox {
    pool: Pool,
}

impl Sandbox {
    /// A sandbox whose workers are started with `command`.
    pub fn new(command: WorkerCommand) -> Self {
        Self {
            pool: Pool::new(command),
        }
    }

    /// Calls `hook` of `script` on `object`. `Ok(None)` when the script does not define the
    /// hook (only `to_tenant` may be missing; the caller decides).
    pub fn call(
        &self,
        script: &Script,
        hook: Hook,
        object: &serde_json::Value,
        ctx: &CallContext<'_>,
    ) -> Result<Option<serde_json::Value>> {
        let call = pool::Call {
            script,
            hook,
            object,
            tenant: ctx.tenant,
            learnt: ctx.learnt,
            namespaces: if script.uses_tenant_namespaces() {
                ctx.namespaces
            } else {
                &[]
            },
        };
        match self.pool.call(&call)? {
            protocol::Response::Ok(value) => Ok(Some(value)),
            protocol::Response::Missing => Ok(None),
            protocol::Response::NeedSource | protocol::Response::Compiled => {
                Err(Error::Worker("the worker did not get the script".into()))
            }
            protocol::Response::Failed {
                limit: Some(limit),
                message,
            } => Err(Error::Limit {
                name: script.name.clone(),
                file: script.file.clone(),
                limit,
                message,
            }),
            protocol::Response::Failed {
                limit: None,
                message,
            } => Err(Error::Script {
                name: script.name.clone(),
                message,
            }),
        }
    }
}
