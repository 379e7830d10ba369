//! ferry's live part: the only crate that talks to API servers.
//!
//! ```text
//!  Policy (ferry-core) ──▶ against::check ──▶ CRDs of a live cluster ──▶ findings
//! ```
//!
//! Today it checks a policy against the CRDs installed in a cluster (`ferry check --against`);
//! the watchers, queues, appliers and patrol of `ferry run` will live here too.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod against;
