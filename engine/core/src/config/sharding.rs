//! `sharding` of a SyncConfig (DESIGN.md "Sharding across replicas"): tenants spread over
//! ferry's replicas through Leases in the first super cluster.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{parse_duration, Error};
use crate::locate::Positions;

/// The shortest lease: renewals every third of it must fit a slow API server's answer.
pub const MIN_LEASE: Duration = Duration::from_secs(3);
/// The longest lease: a dead replica's tenants wait this long for a new owner.
pub const MAX_LEASE: Duration = Duration::from_secs(300);

/// `sharding` as written.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ShardingEntry {
    /// Whether tenants are spread over the replicas (each tenant synced by exactly one).
    #[serde(default)]
    enabled: bool,
    /// The namespace of the membership and tenant Leases (default `ferry-system`).
    #[serde(default)]
    namespace: Option<String>,
    /// How long a replica's membership lasts without renewal (`15s`; 3s to 5m). Renewed every
    /// third of it; a replica writes only while its last renewal is younger than two thirds.
    #[serde(default)]
    lease_duration: Option<String>,
}

/// Validated sharding settings (present only when enabled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    /// The Leases' namespace.
    pub namespace: String,
    /// How long a membership lasts without renewal.
    pub lease_duration: Duration,
}

/// Reads `spec.sharding`; `None` unless enabled. `leader_election` says whether leader
/// election is enabled too (a load error: the two are exclusive).
pub(super) fn sharding(
    positions: &Positions,
    entry: Option<ShardingEntry>,
    leader_election: bool,
) -> Result<Option<Sharding>, Error> {
    let invalid = |at: &str, message: String| Error {
        at: positions.at(at),
        message,
    };
    let Some(entry) = entry.filter(|e| e.enabled) else {
        return Ok(None);
    };
    if leader_election {
        return Err(invalid(
            "spec.sharding.enabled",
            "sharding and leaderElection are exclusive: with sharding every replica writes for its own tenants; turn leaderElection off".into(),
        ));
    }
    let namespace = entry.namespace.unwrap_or_else(|| "ferry-system".into());
    if crate::naming::dns_label_problem(&namespace).is_some() {
        return Err(invalid(
            "spec.sharding.namespace",
            format!(
                "sharding.namespace: expected a namespace name (a DNS label), found {namespace:?}"
            ),
        ));
    }
    let lease_duration = match &entry.lease_duration {
        None => Duration::from_secs(15),
        Some(text) => match parse_duration(text) {
            Some(d) if (MIN_LEASE..=MAX_LEASE).contains(&d) => d,
            _ => {
                return Err(invalid(
                    "spec.sharding.leaseDuration",
                    format!("sharding.leaseDuration: expected a duration from 3s to 5m like 15s, found {text:?}"),
                ))
            }
        },
    };
    Ok(Some(Sharding {
        namespace,
        lease_duration,
    }))
}
