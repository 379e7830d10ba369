//! `ferry policy pin`: rewrites the `sha256` pins of transforms in place, keeping the rest of
//! the file (comments, order, style) as written.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::load::policy_files;
use super::{Error, Result};
use crate::locate::{Location, Positions};
use crate::naming::hex;

/// One pin that `pin` looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinChange {
    /// The policy file.
    pub policy: PathBuf,
    /// The transform's name.
    pub name: String,
    /// The pin before (`None` when absent).
    pub before: Option<String>,
    /// The pin written.
    pub after: String,
}

impl PinChange {
    /// Whether the file changed for this transform.
    pub fn changed(&self) -> bool {
        self.before.as_deref() != Some(self.after.as_str())
    }
}

/// Computes and writes every pin under `path` (file or directory); returns what it saw.
pub fn pin(path: &Path) -> Result<Vec<PinChange>> {
    let mut changes = Vec::new();
    for file in policy_files(path)? {
        let text = crate::locate::read_text(&file).map_err(|e| Error::Read {
            at: Location::file(&file),
            message: e.to_string(),
        })?;
        let (new_text, mut file_changes) = pin_text(&file, &text)?;
        if new_text != text {
            std::fs::write(&file, new_text).map_err(|e| Error::Read {
                at: Location::file(&file),
                message: format!("cannot write: {e}"),
            })?;
        }
        changes.append(&mut file_changes);
    }
    Ok(changes)
}

/// The pinned text of one policy file and the pins it changed.
pub fn pin_text(file: &Path, text: &str) -> Result<(String, Vec<PinChange>)> {
    let doc = super::load::parse_policy_text(file, text)?;
    let positions = Positions::index(file, text);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut changes = Vec::new();
    // Edit from the last transform up, so that inserted lines do not move the ones not yet
    // edited.
    for (i, entry) in doc.spec.transforms.iter().enumerate().rev() {
        let script = super::options::relative(file, &entry.file);
        let bytes = crate::locate::read_file(&script).map_err(|e| Error::Read {
            at: positions.at(&format!("spec.transforms[{i}].file")),
            message: format!("transform file {}: {e}", script.display()),
        })?;
        let digest = hex(&Sha256::digest(&bytes));
        let change = PinChange {
            policy: file.to_path_buf(),
            name: entry.name.clone(),
            before: entry.sha256.clone(),
            after: digest.clone(),
        };
        if change.changed() {
            let edit_failed = |what: &str| Error::Invalid {
                at: positions.at(&format!("spec.transforms[{i}]")),
                message: format!("cannot rewrite the pin of transform {}: {what}", entry.name),
            };
            if entry.sha256.is_some() {
                let at = positions.at(&format!("spec.transforms[{i}].sha256"));
                replace_scalar(&mut lines, &at, &digest)
                    .ok_or_else(|| edit_failed("sha256 value not found"))?;
            } else {
                let flow = is_flow_mapping(&lines, &positions.at(&format!("spec.transforms[{i}]")));
                let at = positions.at(&format!("spec.transforms[{i}].file"));
                insert_after_scalar(&mut lines, &at, &digest, flow)
                    .ok_or_else(|| edit_failed("file value not found"))?;
            }
        }
        changes.push(change);
    }
    changes.reverse();
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    // The edit is textual: prove it kept the file a policy whose pins are the new digests,
    // or refuse to write it.
    let reread = super::load::parse_policy_text(file, &out).map_err(|e| Error::Invalid {
        at: Location::file(file),
        message: format!("cannot rewrite the pins in place without breaking the file ({e}); write the sha256 keys by hand"),
    })?;
    for (entry, change) in reread.spec.transforms.iter().zip(&changes) {
        if entry.sha256.as_deref() != Some(change.after.as_str()) {
            return Err(Error::Invalid {
                at: positions.at("spec.transforms"),
                message: format!(
                    "cannot rewrite the pin of transform {} in place; set sha256: {} by hand",
                    entry.name, change.after
                ),
            });
        }
    }
    Ok((out, changes))
}

/// The byte range of the scalar starting at `col` (1-based) on `line`.
fn scalar_span(line: &str, col: usize) -> Option<(usize, usize)> {
    let start = line.char_indices().nth(col.checked_sub(1)?)?.0;
    let rest = &line[start..];
    let len = match rest.chars().next()? {
        q @ ('"' | '\'') => rest[1..].find(q)? + 2,
        _ => rest.find([',', '}', ']', ' ', '#']).unwrap_or(rest.len()),
    };
    Some((start, start + len))
}

fn replace_scalar(lines: &mut [String], at: &Location, digest: &str) -> Option<()> {
    let line = lines.get_mut(at.line.checked_sub(1)?)?;
    let (start, end) = scalar_span(line, at.column)?;
    line.replace_range(start..end, digest);
    Some(())
}

/// Inserts `sha256: <digest>` after the `file:` scalar at `at`; `flow` when the transform's
/// entry is a flow mapping (`{name: x, file: y}`, possibly over several lines), where the pin
/// goes on the same line after a comma.
fn insert_after_scalar(
    lines: &mut Vec<String>,
    at: &Location,
    digest: &str,
    flow: bool,
) -> Option<()> {
    let index = at.line.checked_sub(1)?;
    let line = lines.get_mut(index)?;
    let (start, end) = scalar_span(line, at.column)?;
    if flow {
        line.insert_str(end, &format!(", sha256: {digest}"));
        return Some(());
    }
    // Block style: a new key at the indentation of `file:`.
    let key_col = line[..start].rfind("file:")?;
    let indent = " ".repeat(line[..key_col].chars().count());
    lines.insert(index + 1, format!("{indent}sha256: {digest}"));
    Some(())
}

/// Whether the YAML node at `at` is a flow mapping (`{...}`).
fn is_flow_mapping(lines: &[String], at: &Location) -> bool {
    let Some(line) = at.line.checked_sub(1).and_then(|i| lines.get(i)) else {
        return false;
    };
    line.chars().nth(at.column.saturating_sub(1)) == Some('{')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(policy: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        std::fs::write(
            dir.path().join("t.star"),
            "def to_super(obj, ctx):\n    return obj\n",
        )
        .unwrap();
        let file = dir.path().join("p.yaml");
        std::fs::write(&file, policy).unwrap();
        (dir, file)
    }

    const HEAD: &str = "apiVersion: ferry.dev/v1alpha1\nkind: SyncPolicy\nspec:\n  transforms:\n";

    #[test]
    fn inserts_missing_pins_in_block_style() {
        let (_dir, file) = setup(&format!(
            "{HEAD}  - name: t\n    file: t.star # the script\n    limits: {{timeoutMs: 50}}\n"
        ));
        let changes = pin(&file).unwrap();
        assert_eq!(changes.len(), 1);
        assert!(changes[0].changed());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!(
                "    file: t.star # the script\n    sha256: {}\n",
                changes[0].after
            )),
            "{text}"
        );
        // A second run changes nothing.
        assert!(!pin(&file).unwrap()[0].changed());
    }

    #[test]
    fn replaces_stale_pins_in_flow_style() {
        let stale = "0".repeat(64);
        let (_dir, file) = setup(&format!(
            "{HEAD}  - {{name: t, file: t.star, sha256: \"{stale}\"}}\n"
        ));
        let changes = pin(&file).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(changes[0].before.as_deref(), Some(stale.as_str()));
        assert!(
            text.contains(&format!("sha256: {}}}", changes[0].after)),
            "{text}"
        );
    }

    #[test]
    fn multibyte_names_and_multi_line_flow_mappings_stay_parseable() {
        let (_dir, file) = setup(&format!(
            "{HEAD}  - {{name: é-tränsform, file: t.star}}\n  - {{name: two,\n     file: t.star\n    }}\n"
        ));
        let changes = pin(&file).unwrap();
        assert_eq!(changes.len(), 2);
        let text = std::fs::read_to_string(&file).unwrap();
        let doc = super::super::load::parse_policy_text(&file, &text).unwrap();
        for (entry, change) in doc.spec.transforms.iter().zip(&changes) {
            assert_eq!(
                entry.sha256.as_deref(),
                Some(change.after.as_str()),
                "{text}"
            );
        }
    }

    #[test]
    fn inserts_in_flow_style() {
        let (_dir, file) = setup(&format!("{HEAD}  - {{name: t, file: t.star}}\n"));
        let changes = pin(&file).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!(
                "{{name: t, file: t.star, sha256: {}}}",
                changes[0].after
            )),
            "{text}"
        );
    }
}

/// A temporary directory for tests, removed on drop.
#[cfg(test)]
pub(crate) mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "ferry-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
