//! How a policy is loaded: the options, and paths named in a policy file resolved against
//! it. Below `load.rs` and `scripts.rs`, which both use them.

use std::path::{Path, PathBuf};

use crate::schema::PlanCache;

/// How to load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Refuse transforms whose bytes do not match their pin (off only for `ferry policy pin`).
    pub verify_pins: bool,
    /// Where compiled plans are cached.
    pub plans: PlanCache,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            verify_pins: true,
            plans: PlanCache::default(),
        }
    }
}

/// `target` resolved against the policy file's directory, with `.` and `..` folded so that
/// messages show `schemas/x.yaml` rather than `policies/../schemas/x.yaml`.
pub fn relative(policy_file: &Path, target: &str) -> PathBuf {
    use std::path::Component;
    let base = policy_file.parent().unwrap_or(Path::new("."));
    let mut out = PathBuf::new();
    for part in base.join(target).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                let last = out.components().next_back();
                if matches!(last, Some(Component::Normal(_))) {
                    out.pop();
                } else {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}
