//! The audit logs `cargo xtask cluster up --audit` makes each API server write
//! (`<clusters>/audit/<name>.log`, JSON lines, Metadata level, writes only): who wrote which
//! object, by user agent.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::Value;

/// One write an API server recorded.
#[derive(Clone, Debug)]
pub struct Write {
    /// `create`, `update`, `patch`, `delete`, …
    pub verb: String,
    /// The request's User-Agent.
    pub user_agent: String,
    /// The resource (plural), with its subresource after a `/` when there is one.
    pub resource: String,
    /// The object's namespace (empty: cluster-scoped).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The HTTP status answered.
    pub code: u64,
    /// When the API server received it.
    pub time: Option<k8s_openapi::jiff::Timestamp>,
}

/// An API server's audit log, read from where it was when this was made.
pub struct Log {
    path: PathBuf,
    from: u64,
}

impl Log {
    /// The log of cluster `name`, from its current end on.
    pub fn of(name: &str) -> Result<Self> {
        let path = crate::clusters_dir().join(format!("audit/{name}.log"));
        let from = std::fs::metadata(&path)
            .with_context(|| format!("{} (start the control planes with --audit)", path.display()))?
            .len();
        Ok(Self { path, from })
    }

    /// The writes recorded since.
    pub fn writes(&self) -> Result<Vec<Write>> {
        let text = std::fs::read(&self.path)?;
        let start = usize::try_from(self.from)
            .unwrap_or(usize::MAX)
            .min(text.len());
        let text = String::from_utf8_lossy(&text[start..]);
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or("").to_string();
                let object = &e["objectRef"];
                let mut resource = s(&object["resource"]);
                if let Some(sub) = object["subresource"].as_str() {
                    resource = format!("{resource}/{sub}");
                }
                Write {
                    verb: s(&e["verb"]),
                    user_agent: s(&e["userAgent"]),
                    resource,
                    namespace: s(&object["namespace"]),
                    name: s(&object["name"]),
                    code: e["responseStatus"]["code"].as_u64().unwrap_or(0),
                    time: e["requestReceivedTimestamp"]
                        .as_str()
                        .and_then(|t| t.parse().ok()),
                }
            })
            .collect())
    }
}
