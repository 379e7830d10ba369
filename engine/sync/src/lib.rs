//! ferry's live part: the only crate that talks to API servers.
//!
//! ```text
//!             tenant API servers                         super API server
//!  watchers ─▶ caches ─┐                       ┌─ caches ◀─ watchers (ferry's copies,
//!                      ▼                       ▼             public objects, namespaces)
//!                 per-tenant queues (round-robin) ─▶ workers ─▶ reconcile
//!                                                              │  ferry-core translate
//!                                                              ▼
//!                                    writes (SSA field manager `ferry`, leader only)
//! ```
//!
//! `run` wires it together for `ferry run`; `against` checks a policy against the CRDs of a
//! live cluster for `ferry check --against`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod against;
pub mod cache;
pub mod compare;
pub mod engine;
pub mod leader;
pub mod metrics;
pub mod namespace_labels;
pub mod public;
pub mod queue;
pub mod reconcile;
pub mod refs;
pub mod run;
pub mod write;
