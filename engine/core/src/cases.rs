//! `ferry test` cases: a policy author's expectations of what ferry writes, or refuses, for
//! given objects. A case file (`tests/*.yaml` beside policies) is a YAML list of [`Case`]s.
//!
//! ```text
//!  tests/x.yaml ─▶ load (strict, file:line) ─▶ run each case offline ─▶ compare ─▶ diff
//!                                                                    └─▶ --update: rewrite
//!                                                                        expect/refused/explain
//! ```

mod diff;
mod update;

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::locate::{Location, Positions};
use crate::offline::{Setting, SettingError, Side};
use crate::policy::Policy;
use crate::sandbox::Sandbox;

pub use update::update;

/// Which side a case translates for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum To {
    /// Tenant objects in; the objects ferry would apply in the super cluster out.
    #[default]
    Super,
    /// Super objects in; what ferry would write back into the tenant out.
    Tenant,
}

/// A refusal a case expects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedRefusal {
    /// The short reason (`NotApproved`, `UnapprovedReference`, `TransformFailed`,
    /// `OutsideTenant`, `Forbidden`, `Invalid`, …; docs/reference/events-and-metrics.md).
    pub reason: String,
    /// The field the refusal names first (`spec.hosts[0]`), when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Words the refusal's message must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One refusal, or several (one per refused input, in input order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Refusals {
    /// The one refused input's refusal.
    One(ExpectedRefusal),
    /// One per refused input, in order.
    Many(Vec<ExpectedRefusal>),
}

impl Refusals {
    fn as_slice(&self) -> &[ExpectedRefusal] {
        match self {
            Refusals::One(one) => std::slice::from_ref(one),
            Refusals::Many(many) => many,
        }
    }
}

/// One test case: objects in, and what ferry should write or refuse.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "ferry test case")]
pub struct Case {
    /// What the case shows (printed when it fails).
    pub name: String,
    /// The tenant the objects belong to.
    pub tenant: String,
    /// Which side to translate for: `super` (tenant objects in, the default) or `tenant`
    /// (super objects in, as status, public and produced copies flow up).
    #[serde(default)]
    pub to: To,
    /// More of the tenant's namespaces (the inputs' own are always included), as live knows
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenant_namespaces: Vec<String>,
    /// Other tenants: up, their super namespaces named in free text are redacted, as live
    /// redacts every super namespace made for someone else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_tenants: Vec<String>,
    /// The tenant's DNS domains, beside the policy's `spec.domains` (SyncConfig's
    /// `tenants[].domains`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// The objects in (tenant objects with `to: super`, super objects with `to: tenant`).
    pub input: Vec<Value>,
    /// What ferry writes for every input that is not refused, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Vec<Value>>,
    /// The refusal expected (or one per refused input). Without it, a refusal fails the case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusals>,
    /// `--explain` lines the translation must give: each matches a line that equals it or
    /// starts with it (`spec.secretName: "tls" -> "tls"` without the rule in brackets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<String>>,
}

/// The JSON Schema of a case file (`docs/schemas/ferry-test.json`).
pub fn json_schema() -> Value {
    let schema = schemars::schema_for!(Vec<Case>);
    let mut value = serde_json::to_value(schema).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("title".into(), "ferry test cases".into());
        obj.insert(
            "description".into(),
            "A list of ferry test cases (tests/*.yaml beside policies).".into(),
        );
    }
    value
}

/// Why a case file cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct Error {
    /// Where.
    pub at: Location,
    /// What was expected and found.
    pub message: String,
}

/// A case and where it starts.
#[derive(Clone, Debug)]
pub struct Located {
    /// The case.
    pub case: Case,
    /// Where it starts.
    pub at: Location,
}

/// A case file, read.
#[derive(Debug)]
pub struct CaseFile {
    /// The file.
    pub path: PathBuf,
    /// Its text (for `--update`).
    pub text: String,
    /// Its cases.
    pub cases: Vec<Located>,
}

/// Reads a case file strictly: a syntax error, an unknown field or a missing one names its
/// line and column.
pub fn load(path: &Path) -> Result<CaseFile, Error> {
    let text = crate::locate::read_text(path).map_err(|e| Error {
        at: Location::file(path),
        message: e.to_string(),
    })?;
    if let Some((at, message)) = crate::locate::duplicate_key(path, &text, 0) {
        return Err(Error { at, message });
    }
    let cases: Vec<Case> = serde_yaml::from_str(&text).map_err(|e| Error {
        at: Location::of_yaml_error(path, &e, 0),
        message: format!(
            "{} (a test file is a list of cases: name, tenant, input, expect or refused)",
            crate::locate::yaml_message(&e)
        ),
    })?;
    let positions = Positions::index(path, &text);
    let mut located = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        let mut at = positions.at(&format!("[{i}]"));
        at.column = key_column(&text, at.line);
        if case.expect.is_none() && case.refused.is_none() {
            return Err(Error {
                at,
                message: format!(
                    "case {:?}: expected `expect` (the objects ferry writes) or `refused` (reason and field); run `ferry test --update` to write what ferry does now",
                    case.name
                ),
            });
        }
        located.push(Located { case, at });
    }
    Ok(CaseFile {
        path: path.to_path_buf(),
        text,
        cases: located,
    })
}

/// The column of the first key of the case starting on `line` (after its `- `).
fn key_column(text: &str, line: usize) -> usize {
    let Some(l) = text.lines().nth(line.saturating_sub(1)) else {
        return 1;
    };
    let indent = l.len() - l.trim_start().len();
    let rest = l.trim_start();
    let after_dash = rest
        .strip_prefix('-')
        .map_or(0, |r| 1 + (r.len() - r.trim_start().len()));
    indent + after_dash + 1
}

/// A refusal ferry gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActualRefusal {
    /// The short reason.
    pub reason: String,
    /// The field the message names first, if it names one.
    pub field: Option<String>,
    /// The whole message.
    pub message: String,
}

/// What ferry did with a case's inputs.
#[derive(Clone, Debug, Default)]
pub struct Actual {
    /// The outputs of the inputs not refused, in order.
    pub outputs: Vec<Value>,
    /// The refusals, in input order.
    pub refusals: Vec<ActualRefusal>,
    /// Every `--explain` line.
    pub explain: Vec<String>,
}

/// Runs one case offline under `policy`.
pub fn run(case: &Case, policy: &Policy, sandbox: &Sandbox) -> Result<Actual, SettingError> {
    let setting = Setting {
        tenant: case.tenant.clone(),
        side: match case.to {
            To::Super => Side::Super,
            To::Tenant => Side::Tenant,
        },
        tenant_namespaces: case.tenant_namespaces.clone(),
        other_tenants: case.other_tenants.clone(),
        domains: case.domains.clone(),
    };
    let explain = case.explain.is_some();
    let results =
        crate::offline::translate(policy, sandbox, &setting, case.input.clone(), explain)?;
    let mut actual = Actual::default();
    for result in results {
        match result {
            Ok(t) => {
                actual
                    .explain
                    .extend(t.changes.iter().map(|c| c.to_string()));
                actual.outputs.push(t.object);
            }
            Err(refusal) => actual.refusals.push(ActualRefusal {
                reason: refusal.reason.as_str().to_string(),
                field: field_of(&refusal.message),
                message: refusal.message,
            }),
        }
    }
    Ok(actual)
}

/// The field a refusal's message names first: its first word (up to `": "` or a space
/// outside brackets) when that is a field path (`spec.hosts[0]`, `metadata.annotations["a"]`,
/// `spec.x refers to …`), or the path a transform's guard names after `fail: `.
pub fn field_of(message: &str) -> Option<String> {
    let message = match message.split_once(": fail: ") {
        Some((_, after)) => after,
        None => message,
    };
    let mut depth = 0usize;
    let mut end = message.len();
    for (i, c) in message.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ':' if depth == 0 && message[i..].starts_with(": ") => {
                end = i;
                break;
            }
            c if c.is_whitespace() && depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &message[..end];
    let path_like = head.starts_with(|c: char| c.is_ascii_lowercase() || c == '[')
        && (head.contains(['.', '[']) || ["spec", "status", "metadata", "data"].contains(&head))
        && !head.contains("://");
    path_like.then(|| head.to_string())
}

/// Compares what ferry did with what the case expects: `None` when they agree, else what
/// differs, as a diff a reader can act on.
pub fn compare(case: &Case, actual: &Actual) -> Option<String> {
    let mut out = String::new();
    let expected_refusals = case.refused.as_ref().map_or(&[][..], Refusals::as_slice);
    if !refusals_match(expected_refusals, &actual.refusals) {
        out.push_str("refused:\n");
        let expected: Vec<String> = expected_refusals.iter().map(show_expected).collect();
        let found: Vec<String> = actual.refusals.iter().map(show_actual).collect();
        out.push_str(&diff::lines(&expected.join("\n"), &found.join("\n")));
    }
    let expected_outputs = case.expect.as_deref().unwrap_or(&[]);
    if expected_outputs != actual.outputs.as_slice() {
        out.push_str("expect:\n");
        out.push_str(&diff::lines(
            &yaml_of(expected_outputs),
            &yaml_of(&actual.outputs),
        ));
    }
    if let Some(expected) = &case.explain {
        let missing: Vec<&String> = expected
            .iter()
            .filter(|e| {
                !actual
                    .explain
                    .iter()
                    .any(|a| a == *e || a.starts_with(e.as_str()))
            })
            .collect();
        if !missing.is_empty() {
            out.push_str("explain: no line starts with\n");
            for m in missing {
                out.push_str(&format!("  - {m}\n"));
            }
            out.push_str("  the translation explained\n");
            for a in &actual.explain {
                out.push_str(&format!("    {a}\n"));
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

fn refusals_match(expected: &[ExpectedRefusal], actual: &[ActualRefusal]) -> bool {
    expected.len() == actual.len()
        && expected.iter().zip(actual).all(|(e, a)| {
            e.reason == a.reason
                && e.field.as_ref().is_none_or(|f| Some(f) == a.field.as_ref())
                && e.message
                    .as_ref()
                    .is_none_or(|m| a.message.contains(m.as_str()))
        })
}

fn show_expected(e: &ExpectedRefusal) -> String {
    let mut s = e.reason.clone();
    if let Some(f) = &e.field {
        s.push_str(&format!(" at {f}"));
    }
    if let Some(m) = &e.message {
        s.push_str(&format!(" containing {m:?}"));
    }
    s
}

fn show_actual(a: &ActualRefusal) -> String {
    format!("{}: {}", a.reason, a.message)
}

/// The YAML of `values`, one document each.
fn yaml_of(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| crate::yaml::to_yaml(v).unwrap_or_else(|e| format!("# {e}\n")))
        .collect::<Vec<_>>()
        .join("---\n")
}

#[cfg(test)]
mod tests {
    use super::field_of;

    #[test]
    fn the_field_a_refusal_names() {
        for (message, field) in [
            ("spec.hosts[0]: \"a.b\" is not under", Some("spec.hosts[0]")),
            (
                "metadata.annotations[\"x: y\"]: refused",
                Some("metadata.annotations[\"x: y\"]"),
            ),
            (
                "spec.secretRef.name refers to Secret \"x\", a kind",
                Some("spec.secretRef.name"),
            ),
            ("spec: expected an object", Some("spec")),
            (
                "transform x failed: a.star:3:5: fail: spec.tier: expected",
                Some("spec.tier"),
            ),
            ("transform attack failed: to_super returned data", None),
            ("the document has no apiVersion and kind", None),
        ] {
            assert_eq!(field_of(message).as_deref(), field, "{message}");
        }
    }
}
