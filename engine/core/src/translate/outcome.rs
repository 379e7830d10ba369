//! What a translation gives: the object and its explanations, or a refusal with its reason.

use std::fmt;

use serde_json::Value;

/// Why a document was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The kind (or this version of it, or this direction) is not approved.
    NotApproved,
    /// The object does not match the kind's selector.
    NotSelected,
    /// A reference names a kind the policy neither syncs nor lets pass.
    UnapprovedReference,
    /// A transform failed, hit a limit, or broke an invariant.
    TransformFailed,
    /// The super object belongs to someone else.
    SyncConflict,
    /// The object itself is malformed.
    Invalid,
    /// A public CustomResourceDefinition's copy stays in a tenant that holds instances of it.
    CrdInUse,
    /// A value names something outside the tenant's space: another tenant's or the
    /// platform's namespace, host name, workload identity or cluster.
    OutsideTenant,
    /// The policy forbids a field or value (`x-ferry-forbid`, a `forbid` field rule), or the
    /// object would carry a credential ferry never copies.
    Forbidden,
}

impl Reason {
    /// The name used for Events, metrics and stderr.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotApproved => "NotApproved",
            Reason::NotSelected => "NotSelected",
            Reason::UnapprovedReference => "UnapprovedReference",
            Reason::TransformFailed => "TransformFailed",
            Reason::SyncConflict => "SyncConflict",
            Reason::Invalid => "Invalid",
            Reason::CrdInUse => "CRDInUse",
            Reason::OutsideTenant => "OutsideTenant",
            Reason::Forbidden => "Forbidden",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused object: the reason and a one-line explanation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Refusal {
    /// The short reason.
    pub reason: Reason,
    /// What and where (field path, expected and found).
    pub message: String,
}

impl Refusal {
    /// A refusal for `reason`, explained by `message`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// One field a translation changed, and the rule that changed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The field path (`spec.secretRef.namespace`, `metadata.labels["ferry.dev/tenant"]`).
    pub path: String,
    /// The value before, `None` when the field was added.
    pub before: Option<Value>,
    /// The value after, `None` when the field was removed.
    pub after: Option<Value>,
    /// The rule: an annotation and where it is written, a metadata rule, or a transform.
    pub rule: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Value| {
            let s = v.to_string();
            if s.len() > 100 {
                format!(
                    "{}…",
                    &s[..s.char_indices().nth(97).map_or(s.len(), |(i, _)| i)]
                )
            } else {
                s
            }
        };
        match (&self.before, &self.after) {
            (None, None) if self.path.is_empty() => return write!(f, "note: {}", self.rule),
            (Some(b), Some(a)) => write!(f, "{}: {} -> {}", self.path, show(b), show(a))?,
            (None, Some(a)) => write!(f, "{}: added {}", self.path, show(a))?,
            (Some(_), None) => write!(f, "{}: removed", self.path)?,
            (None, None) => write!(f, "{}", self.path)?,
        }
        write!(f, "  [{}]", self.rule)
    }
}

/// An object another object refers to, found while translating down.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    /// Target group (empty for core).
    pub group: String,
    /// Target kind.
    pub kind: String,
    /// Target tenant namespace (empty for cluster-scoped or unknown).
    pub namespace: String,
    /// Target tenant name.
    pub name: String,
    /// The target is produced in the super cluster for the referrer (it flows up, never down).
    pub produced: bool,
}

/// The result of a translation.
#[derive(Clone, Debug, PartialEq)]
pub struct Translated {
    /// The object to write.
    pub object: Value,
    /// What changed, in order (recorded only when explaining).
    pub changes: Vec<Change>,
    /// References found (down only), for dependency tracking.
    pub references: Vec<Reference>,
}
