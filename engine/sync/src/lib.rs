//! ferry's live part: the only crate that talks to API servers.
//!
//! ```text
//!             tenant API servers                         super API server
//!  watchers ─▶ caches ─┐                       ┌─ caches ◀─ watchers (ferry's copies,
//!                      ▼                       ▼             public objects, namespaces)
//!            routing ─▶ per-tenant queues (round-robin, backoff) ─▶ workers ─▶ reconcile
//!                                                     decide (pure) ◀─┤  ferry-core translate
//!                                                                     ▼
//!                                    writes (SSA field manager `ferry`, leader only)
//! ```
//!
//! Layers, lowest first: a module imports only from its own layer or those below, and no two
//! modules import each other (`cargo xtask tidy` checks both):
//!
//! 1. vocabulary: key, object, compare, refs, metrics, namespace_labels
//! 2. clusters: client, binding, cache, watch, write, queue, ledger
//! 3. sources: public, routing, tenant_secrets, supers, placement
//! 4. state: state
//! 5. decisions: decide, deps
//! 6. executors: reconcile
//! 7. drivers: workers, tenants, leader, shard, against
//! 8. process: run
//!
//! `against` checks a policy against the CRDs of a live cluster for `ferry check --against`.

pub mod against;
pub mod binding;
pub mod cache;
pub mod client;
pub mod compare;
pub mod decide;
pub mod deps;
pub mod key;
pub mod leader;
pub mod ledger;
pub mod metrics;
pub mod namespace_labels;
pub mod object;
pub mod placement;
pub mod public;
pub mod queue;
pub mod reconcile;
pub mod refs;
pub mod routing;
pub mod run;
pub mod shard;
pub mod state;
pub mod supers;
pub mod tenant_secrets;
pub mod tenants;
pub mod watch;
pub mod workers;
pub mod write;
