//! `ferry test --update`: rewrites each case's `expect`, `refused` and (when the case has one)
//! `explain` to what ferry does now, keeping the rest of the file (comments, order) as written.

use super::{Actual, Case, CaseFile, Error, ExpectedRefusal, Refusals};

/// The keys `--update` writes.
const KEYS: [&str; 3] = ["expect", "refused", "explain"];

/// The text of `file` with every case `actuals` gives (`None` leaves a case as it is)
/// rewritten.
pub fn update(file: &CaseFile, actuals: &[Option<Actual>]) -> Result<String, Error> {
    let mut lines: Vec<String> = file.text.lines().map(str::to_string).collect();
    let starts: Vec<usize> = file
        .cases
        .iter()
        .map(|c| c.at.line.saturating_sub(1))
        .collect();
    // From the last case up, so that edits do not move the cases not yet edited.
    for (i, located) in file.cases.iter().enumerate().rev() {
        let Some(actual) = actuals.get(i).and_then(Option::as_ref) else {
            continue;
        };
        let start = starts[i];
        let end = starts.get(i + 1).copied().unwrap_or(lines.len());
        let indent = located.at.column.saturating_sub(1);
        let case_lines = &lines[start..end];
        let edited = edit_case(case_lines, indent, &located.case, actual).ok_or_else(|| Error {
            at: located.at.clone(),
            message: format!(
                "case {:?}: cannot rewrite it in place; write the case in block style (one key a line, `- name:` first)",
                located.case.name
            ),
        })?;
        lines.splice(start..end, edited);
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(text)
}

/// The lines of one case with its expectation keys replaced; `None` when the case is not
/// written in block style.
fn edit_case(lines: &[String], indent: usize, case: &Case, actual: &Actual) -> Option<Vec<String>> {
    let first = lines.first()?;
    // Byte offsets: a line whose first `indent` bytes are not all ASCII has no key there.
    fn head(line: &str, indent: usize) -> Option<&str> {
        line.get(..indent)
    }
    fn tail(line: &str, indent: usize) -> &str {
        line.get(indent..).unwrap_or("")
    }
    if indent > 0 && !head(first, indent)?.trim_start().starts_with('-') {
        return None;
    }
    let is_key = |line: &str| {
        KEYS.iter()
            .any(|k| tail(line, indent).starts_with(&format!("{k}:")))
    };
    if is_key(first) {
        return None;
    }
    let mut kept: Vec<String> = Vec::new();
    let mut j = 0;
    while j < lines.len() {
        let line = &lines[j];
        let key_here = j > 0
            && line.len() > indent
            && head(line, indent).is_some_and(|h| h.trim().is_empty())
            && is_key(line);
        if !key_here {
            kept.push(line.clone());
            j += 1;
            continue;
        }
        j += 1;
        while j < lines.len() && continues(&lines[j], indent) {
            j += 1;
        }
    }
    // New keys go after the case's last line of content.
    let mut tail = Vec::new();
    while kept
        .last()
        .is_some_and(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        && kept.len() > 1
    {
        tail.push(kept.pop()?);
    }
    kept.extend(new_keys(case, actual, indent));
    kept.extend(tail.into_iter().rev());
    Some(kept)
}

/// Whether `line` still belongs to a key's value at `indent`: deeper, a sequence item at the
/// key's own indent, or a blank line or comment followed by more of it (a trailing one is
/// left to whatever follows; see the caller).
fn continues(line: &str, indent: usize) -> bool {
    let depth = line.len() - line.trim_start().len();
    let content = line.trim_start();
    if content.is_empty() {
        return false;
    }
    depth > indent
        || (depth == indent && content.starts_with("- "))
        || (depth == indent && content == "-")
}

/// The `expect`, `refused` and `explain` keys for what ferry did, indented for the case.
fn new_keys(case: &Case, actual: &Actual, indent: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    let mut out = Vec::new();
    let mut key = |name: &str, value: serde_json::Value| {
        let text = crate::yaml::to_yaml(&value).unwrap_or_default();
        if text.trim() == "[]" || text.trim() == "{}" {
            out.push(format!("{pad}{name}: {}", text.trim()));
            return;
        }
        out.push(format!("{pad}{name}:"));
        let inner = if text.starts_with("- ") {
            pad.clone()
        } else {
            format!("{pad}  ")
        };
        out.extend(text.lines().map(|l| format!("{inner}{l}")));
    };
    let refusals: Vec<ExpectedRefusal> = actual
        .refusals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let before = case
                .refused
                .as_ref()
                .and_then(|r| r.as_slice().get(i).cloned());
            ExpectedRefusal {
                reason: a.reason.clone(),
                field: a.field.clone(),
                message: before
                    .and_then(|b| b.message)
                    .filter(|m| a.message.contains(m.as_str())),
            }
        })
        .collect();
    if !actual.outputs.is_empty() || refusals.is_empty() {
        key("expect", serde_json::Value::Array(actual.outputs.clone()));
    }
    match refusals.len() {
        0 => {}
        1 => key("refused", json(&Refusals::One(refusals[0].clone()))),
        _ => key("refused", json(&Refusals::Many(refusals))),
    }
    if case.explain.is_some() {
        let lines: Vec<String> = actual.explain.iter().map(|l| without_rule(l)).collect();
        key("explain", json(&lines));
    }
    out
}

/// An explain line without its rule in brackets (which names schema lines that move as the
/// schema is edited); a case's line matches any line it starts.
fn without_rule(line: &str) -> String {
    match line.rfind("  [") {
        Some(cut) if !line.starts_with("note: ") => line[..cut].to_string(),
        _ => line.to_string(),
    }
}

/// A serialisable value as JSON (what `--update` writes is YAML made from it).
fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}
