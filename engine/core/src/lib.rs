//! ferry's pure engine.
//!
//! ```text
//!  policies/*.yaml ─▶ policy::load ─▶ Policy ─┬─▶ schema::Plan per kind (cached by digest)
//!  schemas/*.yaml  ─▶ schema::load ───────────┘        │
//!  transforms/*.star (sha256-pinned) ─▶ sandbox ───────┤
//!                                                      ▼
//!  tenant object ─▶ translate::down ─▶ super object     (naming, metadata, fields, transforms)
//!  super object  ─▶ translate::up   ─▶ tenant status    (the exact inverse for what flows up)
//! ```
//!
//! Everything a user can do offline (`ferry translate`, `ferry check`, `ferry policy pin`,
//! `ferry schema init`) is built on this crate alone. It talks to no API server and opens no
//! network connection; its only I/O is reading policy, schema and transform files and
//! running transform worker processes.

pub mod cases;
pub mod check;
pub mod config;
pub mod glob;
pub mod keys;
pub mod locate;
pub mod manifests;
pub mod naming;
pub mod offline;
pub mod path;
pub mod policy;
pub mod rbac;
pub mod reference;
pub mod sandbox;
pub mod scaffold;
pub mod schema;
pub mod shard;
pub mod translate;
pub mod yaml;
