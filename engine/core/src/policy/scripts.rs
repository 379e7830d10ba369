//! Loading `spec.transforms`: names, limits, files read and pinned by sha256, hooks found.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::model::TransformEntry;
use super::options::{relative, LoadOptions};
use super::{Error, Policy, Result, Transform};
use crate::locate::Positions;
use crate::naming::hex;
use crate::sandbox::{script, Script};

/// Loads the transforms `entries` of `policy_file` into `policy`.
pub(super) fn load_transforms(
    policy_file: &Path,
    positions: &Positions,
    entries: &[TransformEntry],
    options: &LoadOptions,
    policy: &mut Policy,
) -> Result<()> {
    for (i, entry) in entries.iter().enumerate() {
        let here = |field: &str| positions.at(&format!("spec.transforms[{i}].{field}"));
        if let Some(problem) = crate::naming::dns_label_problem(&entry.name) {
            return Err(Error::Invalid {
                at: here("name"),
                message: format!(
                    "transform name {:?} must be a DNS label: {problem}",
                    entry.name
                ),
            });
        }
        if let Some(existing) = policy.transforms.get(&entry.name) {
            return Err(Error::Invalid {
                at: here("name"),
                message: format!(
                    "transform {:?} is declared twice (first at {})",
                    entry.name, existing.at
                ),
            });
        }
        let limits = limits(entry, &here)?;
        let file = relative(policy_file, &entry.file);
        let bytes = crate::locate::read_file(&file).map_err(|e| Error::Read {
            at: here("file"),
            message: format!("transform file {}: {e}", file.display()),
        })?;
        let digest = hex(&Sha256::digest(&bytes));
        match &entry.sha256 {
            Some(pin) if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) => {
                return Err(Error::Invalid {
                    at: here("sha256"),
                    message: format!("sha256: expected 64 hex digits, found {pin:?}"),
                })
            }
            Some(pin) if options.verify_pins && !pin.eq_ignore_ascii_case(&digest) => {
                return Err(Error::PinMismatch {
                    at: here("sha256"),
                    name: entry.name.clone(),
                    file: file.display().to_string(),
                    expected: pin.to_ascii_lowercase(),
                    actual: digest,
                })
            }
            None if options.verify_pins => {
                return Err(Error::Invalid {
                    at: positions.at(&format!("spec.transforms[{i}]")),
                    message: format!(
                        "transform {}: no sha256 pin; review {} and run `ferry policy pin {}` (its sha256 is {digest})",
                        entry.name,
                        file.display(),
                        policy_file.display()
                    ),
                })
            }
            _ => {}
        }
        let source: Arc<str> = String::from_utf8(bytes)
            .map_err(|_| Error::Invalid {
                at: here("file"),
                message: format!("transform file {} is not UTF-8 text", file.display()),
            })?
            .into();
        let hooks = script::inspect(&file.display().to_string(), &source).map_err(|message| {
            Error::Invalid {
                at: here("file"),
                message: format!("transform {}: {message}", entry.name),
            }
        })?;
        policy.transforms.insert(
            entry.name.clone(),
            Transform {
                script: Arc::new(Script {
                    name: entry.name.clone(),
                    file: file.display().to_string(),
                    source,
                    digest,
                    limits,
                }),
                file,
                hooks,
                at: positions.at(&format!("spec.transforms[{i}]")),
            },
        );
    }
    Ok(())
}

/// The limits of `entry`, checked.
fn limits(
    entry: &TransformEntry,
    here: &dyn Fn(&str) -> crate::locate::Location,
) -> Result<crate::sandbox::Limits> {
    let limits = entry.limits;
    for (field, value) in [
        ("maxSteps", limits.max_steps),
        ("maxHeapBytes", limits.max_heap_bytes),
        ("timeoutMs", limits.timeout_ms),
    ] {
        if value == 0 {
            return Err(Error::Invalid {
                at: here(&format!("limits.{field}")),
                message: format!("limits.{field}: expected a positive number, found 0"),
            });
        }
    }
    if limits.timeout_ms > 60_000 {
        return Err(Error::Invalid {
            at: here("limits.timeoutMs"),
            message: format!(
                "limits.timeoutMs: at most 60000 is allowed, found {}",
                limits.timeout_ms
            ),
        });
    }
    Ok(limits)
}
