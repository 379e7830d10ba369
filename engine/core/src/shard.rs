//! Which replica syncs which tenant (DESIGN.md "Sharding across replicas"): rendezvous
//! hashing of `tenant|identity` over the live members, as pure functions (`ferry shard plan`
//! and the live engine share them).
//!
//! The hash is the first eight bytes of SHA-256 of `tenant|identity`, read big-endian: stable
//! across builds, platforms and versions (a golden test pins it). A tenant goes to the member
//! with the highest hash; ties (never seen) go to the smaller identity. Adding a member moves
//! only the tenants it now wins, about 1/(N+1) of them, and only to it.

use sha2::{Digest, Sha256};

/// The rendezvous weight of `member` for `tenant`.
pub fn weight(tenant: &str, member: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update(b"|");
    hasher.update(member.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// `members` ranked for `tenant`: the owner first, then who takes over if it is gone.
pub fn ranked<'a>(tenant: &str, members: &[&'a str]) -> Vec<&'a str> {
    let mut ranked: Vec<(u64, &str)> = members.iter().map(|m| (weight(tenant, m), *m)).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    ranked.dedup_by(|a, b| a.1 == b.1);
    ranked.into_iter().map(|(_, m)| m).collect()
}

/// The member that syncs `tenant`, if any member is live.
pub fn owner<'a>(tenant: &str, members: &[&'a str]) -> Option<&'a str> {
    ranked(tenant, members).into_iter().next()
}

/// The rank of `member` for `tenant` (0: the owner), if it is among `members`.
pub fn rank(tenant: &str, member: &str, members: &[&str]) -> Option<usize> {
    ranked(tenant, members).iter().position(|m| *m == member)
}

/// Every tenant with its owner, in the order given.
pub fn plan<'a>(tenants: &'a [String], members: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    tenants
        .iter()
        .filter_map(|t| owner(t, members).map(|m| (t.as_str(), m)))
        .collect()
}

/// Whether `identity` can name a replica: a Lease name part (`ferry-member-<identity>`), so
/// lowercase letters, digits, `-` and `.`, starting and ending alphanumeric, at most 240
/// characters. Gives why not.
pub fn identity_problem(identity: &str) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if identity.is_empty() || identity.len() > 240 {
        return Some(format!(
            "expected 1 to 240 characters, found {}",
            identity.len()
        ));
    }
    // `ferry-member-<identity>` must be a DNS subdomain: labels of 1 to 63 characters.
    let bad = identity.split('.').any(|label| {
        label.is_empty()
            || label.len() > 63
            || !label.chars().all(ok_char)
            || !edge(label.chars().next())
            || !edge(label.chars().last())
    });
    if bad {
        return Some(format!("expected dot-separated labels of lowercase letters, digits and '-' (each 1 to 63 characters, starting and ending with a letter or digit), found {identity:?}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is part of the contract: replicas of different builds must agree.
    #[test]
    fn weights_are_pinned() {
        // Computed apart from this code: the first 8 bytes of `sha256sum` of the text.
        assert_eq!(weight("team-a", "ferry-0"), 0xced8_2405_491b_781b);
        assert_eq!(weight("team-b", "ferry-1"), 0x9869_1bb5_8260_2ea3);
        assert_eq!(weight("", ""), 0xcbe5_cfdf_7c21_18a9);
    }

    #[test]
    fn adding_a_member_moves_tenants_only_to_it() {
        let tenants: Vec<String> = (0..2000).map(|i| format!("t{i}")).collect();
        let three = ["a", "b", "c"];
        let four = ["a", "b", "c", "d"];
        let mut moved = 0;
        for t in &tenants {
            let before = owner(t, &three).unwrap();
            let after = owner(t, &four).unwrap();
            if before != after {
                assert_eq!(after, "d", "{t} moved from {before} to {after}");
                moved += 1;
            }
        }
        // About a quarter: 500 expected.
        assert!((400..600).contains(&moved), "{moved} moved");
    }

    #[test]
    fn spread_is_even() {
        let tenants: Vec<String> = (0..4000).map(|i| format!("tenant-{i}")).collect();
        let members = ["ferry-0", "ferry-1", "ferry-2", "ferry-3"];
        for m in members {
            let n = plan(&tenants, &members)
                .iter()
                .filter(|(_, o)| *o == m)
                .count();
            assert!((850..1150).contains(&n), "{m} owns {n}");
        }
    }

    #[test]
    fn ranks_order_every_member_once() {
        let members = ["a", "b", "b", "c"];
        let r = ranked("t", &members);
        assert_eq!(r.len(), 3);
        assert_eq!(rank("t", r[1], &members), Some(1));
        assert_eq!(rank("t", "z", &members), None);
    }

    #[test]
    fn identities() {
        assert!(identity_problem("ferry-0").is_none());
        assert!(identity_problem("host.example-123").is_none());
        let long_label = "a".repeat(64);
        let long = "a".repeat(241);
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a/b",
            "a..b",
            "a.-b",
            "a-.b",
            ".a",
            &long_label,
            &long,
        ] {
            assert!(identity_problem(bad).is_some(), "{bad}");
        }
    }
}
