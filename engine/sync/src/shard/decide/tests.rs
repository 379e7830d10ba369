//! Decisions of a sharded replica from Leases it read, on a clock the test moves.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::leases::member_lease;
use super::*;

const LEASE: Duration = Duration::from_secs(15);

fn lease(name: &str, role: &str, holder: &str, version: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: Some(version.into()),
            labels: Some([("ferry.dev/shard".to_string(), role.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
            ..LeaseSpec::default()
        }),
    }
}

fn member(id: &str, version: &str) -> Lease {
    lease(&member_lease(id), "member", id, version)
}

fn tenant(t: &str, holder: &str) -> Lease {
    lease(&tenant_lease(t), "tenant", holder, "1")
}

fn round<'a>(
    me: &'a str,
    candidates: &'a [String],
    taken_with: &'a BTreeMap<String, Vec<String>>,
    now: Instant,
) -> Round<'a> {
    Round {
        me,
        renewed: true,
        candidates,
        digest: "d",
        taken_with,
        now,
    }
}

fn tenants(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i}")).collect()
}

#[test]
fn free_tenants_go_to_their_winner_only() {
    let candidates = tenants(40);
    let none = BTreeMap::new();
    let leases = vec![member("a", "1"), member("b", "1")];
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    let d = a.decide(&leases, &round("a", &candidates, &none, t0));
    let members = ["a", "b"];
    for t in &candidates {
        let mine = ferry_core::shard::owner(t, &members) == Some("a");
        assert_eq!(d.take.iter().any(|(x, _)| x == t), mine, "{t}");
    }
    assert!(d.take.iter().all(|(_, from)| from.is_none()));
}

#[test]
fn a_member_is_stale_only_after_a_lease_unchanged_on_the_observers_clock() {
    let none = BTreeMap::new();
    // A tenant that b wins over a.
    let t = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| ferry_core::shard::owner(t, &["a", "b"]) == Some("b"))
        .unwrap();
    let candidates = vec![t.clone()];
    let leases = vec![member("a", "1"), member("b", "7"), tenant(&t, "b")];
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    let d = a.decide(
        &leases,
        &round("a", &candidates, &none, t0 + LEASE - Duration::from_secs(1)),
    );
    assert!(d.take.is_empty(), "b is live: {d:?}");
    let d = a.decide(&leases, &round("a", &candidates, &none, t0 + LEASE));
    assert_eq!(d.take, vec![(t.clone(), Some(Move::Failover))]);
    // b renewed meanwhile (its resourceVersion changed): live again.
    let renewed = vec![member("a", "1"), member("b", "8"), tenant(&t, "b")];
    a.observe(&renewed, t0 + LEASE);
    let d = a.decide(&renewed, &round("a", &candidates, &none, t0 + LEASE));
    assert!(d.take.is_empty());
}

#[test]
fn a_lower_rank_waits_its_turn() {
    let members = ["a", "b", "c"];
    let t = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| ferry_core::shard::rank(t, "a", &members) == Some(2))
        .unwrap();
    let candidates = vec![t.clone()];
    let none = BTreeMap::new();
    let leases = vec![member("a", "1"), member("b", "1"), member("c", "1")];
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    assert!(a
        .decide(&leases, &round("a", &candidates, &none, t0))
        .take
        .is_empty());
    let later = t0 + LEASE * 2 - Duration::from_millis(1);
    // Memberships were renewed all along.
    let renewed = vec![member("a", "2"), member("b", "2"), member("c", "2")];
    a.observe(&renewed, later);
    assert!(a
        .decide(&renewed, &round("a", &candidates, &none, later))
        .take
        .is_empty());
    let d = a.decide(&renewed, &round("a", &candidates, &none, t0 + LEASE * 2));
    assert_eq!(d.take, vec![(t, Some(Move::Fallback))]);
}

#[test]
fn a_holder_releases_to_a_new_winner_once_members_change() {
    let candidates = tenants(60);
    let mut taken_with = BTreeMap::new();
    let mut leases = vec![member("a", "1")];
    for t in &candidates {
        leases.push(tenant(t, "a"));
        taken_with.insert(t.clone(), vec!["a".to_string()]);
    }
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    let d = a.decide(&leases, &round("a", &candidates, &taken_with, t0));
    assert_eq!(d.keep.len(), 60);
    leases.push(member("b", "1"));
    a.observe(&leases, t0);
    // Nothing is handed to a member that just joined: it takes nothing yet.
    let d = a.decide(&leases, &round("a", &candidates, &taken_with, t0));
    assert_eq!(d.keep.len(), 60, "{:?}", d.release);
    let settled = t0 + a.settle();
    leases[0] = member("a", "2");
    let last = leases.len() - 1;
    leases[last] = member("b", "2");
    a.observe(&leases, settled);
    let d = a.decide(&leases, &round("a", &candidates, &taken_with, settled));
    for t in &d.release {
        assert_eq!(ferry_core::shard::owner(t, &["a", "b"]), Some("b"));
    }
    assert_eq!(d.release.len() + d.keep.len(), 60);
    assert!(!d.release.is_empty());
}

#[test]
fn released_and_unowned_tenants() {
    let t = "t0".to_string();
    let candidates = vec![t.clone()];
    let none = BTreeMap::new();
    let mut released = tenant(&t, "");
    released.metadata.annotations =
        Some([(ANN_RELEASED.to_string(), "shutdown".to_string())].into());
    let leases = vec![member("a", "1"), released];
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    let d = a.decide(&leases, &round("a", &candidates, &none, t0));
    assert_eq!(d.take, vec![(t.clone(), Some(Move::Release))]);
    // Not renewed: not a member, takes nothing, counts the tenant unowned after 2 leases.
    let mut r = round("a", &candidates, &none, t0 + LEASE * 3);
    r.renewed = false;
    let d = a.decide(&leases, &r);
    assert!(d.take.is_empty());
    assert_eq!(d.unowned, 1);
}

#[test]
fn a_lower_rank_waits_again_after_the_lease_changed() {
    let members = ["a", "b"];
    let t = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| ferry_core::shard::rank(t, "a", &members) == Some(1))
        .unwrap();
    let candidates = vec![t.clone()];
    let none = BTreeMap::new();
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    let free = vec![member("a", "1"), member("b", "1"), tenant(&t, "")];
    a.observe(&free, t0);
    assert!(a
        .decide(&free, &round("a", &candidates, &none, t0))
        .take
        .is_empty());
    // Taken and released again by another replica meanwhile (a new resourceVersion).
    let mut again = vec![member("a", "2"), member("b", "2"), tenant(&t, "")];
    again[2].metadata.resource_version = Some("9".into());
    let later = t0 + LEASE;
    a.observe(&again, later);
    let d = a.decide(&again, &round("a", &candidates, &none, later));
    assert!(d.take.is_empty(), "the wait starts again: {d:?}");
    // b keeps renewing.
    let mut renewed = vec![member("a", "3"), member("b", "3"), tenant(&t, "")];
    renewed[2].metadata.resource_version = Some("9".into());
    a.observe(&renewed, later + LEASE);
    let d = a.decide(&renewed, &round("a", &candidates, &none, later + LEASE));
    assert_eq!(d.take, vec![(t, Some(Move::Fallback))]);
}

/// A tenant `b` wins over `a`.
fn won_by_b() -> String {
    (0..)
        .map(|i| format!("t{i}"))
        .find(|t| ferry_core::shard::owner(t, &["a", "b"]) == Some("b"))
        .unwrap()
}

#[test]
fn a_member_lasts_the_longer_of_both_leases() {
    let t = won_by_b();
    let candidates = vec![t.clone()];
    let none = BTreeMap::new();
    let mut b = member("b", "1");
    b.spec.as_mut().unwrap().lease_duration_seconds = Some(30);
    let leases = vec![member("a", "1"), b, tenant(&t, "b")];
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&leases, t0);
    let later = t0 + Duration::from_secs(20);
    assert!(a
        .decide(&leases, &round("a", &candidates, &none, later))
        .take
        .is_empty());
    let d = a.decide(
        &leases,
        &round("a", &candidates, &none, t0 + Duration::from_secs(30)),
    );
    assert_eq!(d.take, vec![(t, Some(Move::Failover))]);
}

#[test]
fn a_deleted_or_cleared_membership_is_live_until_stale_a_released_one_is_gone() {
    let t = won_by_b();
    let candidates = vec![t.clone()];
    let none = BTreeMap::new();
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    a.observe(&[member("a", "1"), member("b", "1"), tenant(&t, "b")], t0);
    // Deleted by an admin: b may still be writing.
    let deleted = vec![member("a", "2"), tenant(&t, "b")];
    a.observe(&deleted, t0 + Duration::from_secs(1));
    let soon = t0 + Duration::from_secs(2);
    assert!(a
        .decide(&deleted, &round("a", &candidates, &none, soon))
        .take
        .is_empty());
    let stale = t0 + LEASE;
    assert_eq!(
        a.decide(&deleted, &round("a", &candidates, &none, stale))
            .take
            .len(),
        1
    );
    // Holder cleared by hand: still b's until stale.
    let mut b = Observer::new(LEASE);
    let cleared = vec![
        member("a", "1"),
        lease(&member_lease("b"), "member", "", "2"),
        tenant(&t, "b"),
    ];
    b.observe(&cleared, t0);
    assert!(b
        .decide(&cleared, &round("a", &candidates, &none, soon))
        .take
        .is_empty());
    // Released by ferry (SIGTERM): gone at once.
    let mut released = lease(&member_lease("b"), "member", "", "3");
    released.metadata.annotations =
        Some([(ANN_RELEASED.to_string(), "shutdown".to_string())].into());
    let leases = vec![member("a", "1"), released, tenant(&t, "b")];
    let mut c = Observer::new(LEASE);
    c.observe(&leases, t0);
    assert_eq!(
        c.decide(&leases, &round("a", &candidates, &none, t0))
            .take
            .len(),
        1
    );
}

#[test]
fn a_fallback_holder_hands_over_once_the_winner_has_its_tenants() {
    let t = won_by_b();
    let candidates = vec![t.clone()];
    let taken_with: BTreeMap<String, Vec<String>> =
        [(t.clone(), vec!["a".to_string(), "b".to_string()])].into();
    let with_digest = |version: &str, digest: &str| {
        let mut b = member("b", version);
        b.metadata.annotations = Some(
            [(
                ferry_core::keys::ANN_TENANTS_SHA256.to_string(),
                digest.to_string(),
            )]
            .into(),
        );
        b
    };
    let t0 = Instant::now();
    let mut a = Observer::new(LEASE);
    let leases = vec![member("a", "1"), with_digest("1", "other"), tenant(&t, "a")];
    a.observe(&leases, t0);
    let later = t0 + a.settle();
    let leases = vec![member("a", "2"), with_digest("2", "other"), tenant(&t, "a")];
    a.observe(&leases, later);
    // b, live all along, lacks the tenant: a keeps it.
    let d = a.decide(&leases, &round("a", &candidates, &taken_with, later));
    assert!(d.keep.contains(&t), "{d:?}");
    // b's configuration caught up (same digest as a's): handed over.
    let leases = vec![member("a", "3"), with_digest("3", "d"), tenant(&t, "a")];
    a.observe(&leases, later);
    let d = a.decide(&leases, &round("a", &candidates, &taken_with, later));
    assert_eq!(d.release, vec![t]);
}
