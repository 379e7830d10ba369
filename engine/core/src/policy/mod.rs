//! The policy: which kinds may cross, in which direction, with which schema and transforms.
//!
//! ```text
//!  policies/x.yaml | policies/ ─▶ load::load (strict serde + positions) ─▶ Policy
//!                                      ├─ schema plans (schema::PlanCache)
//!                                      └─ transform scripts (sha256-verified, parsed)
//! ```

// Load errors carry every location a user needs to fix the file; they happen once per load,
// so their size costs nothing worth boxing for.

pub mod annotations;
mod fields;
pub mod load;
pub mod model;
pub mod options;
pub mod pin;
mod scripts;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use annotations::Annotations;
pub use load::load;
pub use model::{Direction, LabelSelector, Scope, SelectorRequirement};
pub use options::LoadOptions;

use crate::locate::Location;
use crate::naming::NameMap;
use crate::sandbox::script::Hooks;
use crate::sandbox::Script;
use crate::schema::Plan;

/// The label a fromSuper object must carry when its rule has no selector.
pub const DEFAULT_PUBLIC_LABEL: &str = "tenancy.x-k8s.io/super.public";

/// A problem loading a policy. Every variant says where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read.
    #[error("{at}: cannot read: {message}")]
    Read {
        /// The path.
        at: Location,
        /// The I/O error.
        message: String,
    },
    /// Syntax, an unknown field, a wrong type, or a value out of range.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What was expected and found.
        message: String,
    },
    /// The same kind approved twice in one direction.
    #[error("{at}: {kind} is approved twice in the same direction (first at {first}); a kind may be approved once toSuper and once fromSuper")]
    Duplicate {
        /// The second approval.
        at: Location,
        /// The first approval.
        first: Location,
        /// `group/Kind`.
        kind: String,
    },
    /// A transform file's bytes do not match its pin.
    #[error("{at}: transform {name}: sha256 of {file} is {actual}, but the policy pins {expected} (review the change, then run `ferry policy pin`)")]
    PinMismatch {
        /// The pin.
        at: Location,
        /// The transform.
        name: String,
        /// Its file.
        file: String,
        /// The pinned digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// A schema referenced by the policy is invalid.
    #[error("{at}: schema: {source}")]
    Schema {
        /// The `schema:` entry.
        at: Location,
        /// The schema's own error (with its file and line).
        source: Box<crate::schema::Error>,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A group and kind: what the policy approves (one version each).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    /// The API group, empty for core.
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl std::fmt::Display for GroupKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// One approved kind.
#[derive(Clone, Debug)]
pub struct Resource {
    /// `group/version` (or `v1`).
    pub api_version: String,
    /// Group and kind.
    pub group_kind: GroupKind,
    /// Which way objects flow.
    pub direction: Direction,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// The compiled schema annotations (empty when the entry names no schema).
    pub plan: Arc<Plan>,
    /// The transforms, in order.
    pub transforms: Vec<Arc<Script>>,
    /// Synced only while referenced.
    pub dependency: bool,
    /// Which objects of the kind cross.
    pub selector: Option<LabelSelector>,
    /// Which tenant annotations the super copies carry.
    pub annotations: Annotations,
    /// The kind is approved both ways (this entry and another of the other direction).
    pub both_ways: bool,
    /// The operator's namespace every super copy goes to (`placement.namespace`), instead of
    /// the tenant's super namespaces.
    pub placement: Option<String>,
    /// Where the entry is written.
    pub at: Location,
}

impl Resource {
    /// Where the copy of the tenant object `namespace`/`name` lives in a super cluster:
    /// the tenant's super namespace and the same name, or (a placed kind) the operator's
    /// namespace and `map(tenant, namespace-name)`; a cluster-scoped object is renamed.
    pub fn super_key(&self, names: &NameMap, namespace: &str, name: &str) -> (String, String) {
        match (&self.placement, self.scope) {
            (_, Scope::Cluster) => (String::new(), names.to_super(name)),
            (Some(fixed), Scope::Namespaced) => (
                fixed.clone(),
                crate::naming::placed(names.tenant().as_str(), namespace, name),
            ),
            (None, Scope::Namespaced) => (names.to_super(namespace), name.to_string()),
        }
    }

    /// The version of `api_version`.
    pub fn version(&self) -> &str {
        crate::schema::load::split_api_version(&self.api_version).1
    }
}

/// A transform declared in `spec.transforms`.
#[derive(Clone, Debug)]
pub struct Transform {
    /// The script, ready for the sandbox.
    pub script: Arc<Script>,
    /// The file.
    pub file: PathBuf,
    /// The hooks it defines.
    pub hooks: Hooks,
    /// Where it is declared.
    pub at: Location,
}

/// A loaded, validated policy: the union of one or more policy files.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Approved kinds, in file order.
    pub resources: Vec<Resource>,
    /// Declared transforms by name.
    pub transforms: BTreeMap<String, Transform>,
    /// The files read.
    pub files: Vec<PathBuf>,
    /// `spec.domains` of every file: each tenant's DNS domains, `{tenant}` standing for its
    /// name.
    pub domains: Vec<String>,
}

/// What stands for the tenant's name in a policy's `spec.domains`.
pub const TENANT_PLACEHOLDER: &str = "{tenant}";

impl Policy {
    /// The operator namespaces placed kinds' copies go to (`placement.namespace`).
    pub fn placement_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .resources
            .iter()
            .filter_map(|r| r.placement.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The operator namespace a tenant `tenant` could own as one of its super namespaces,
    /// if any: such a tenant must not run beside this policy.
    pub fn placement_owned_by(&self, tenant: &str) -> Option<String> {
        let prefix = format!("{tenant}-");
        self.placement_namespaces()
            .into_iter()
            .find(|ns| ns.starts_with(&prefix))
    }

    /// The DNS domains `spec.domains` gives `tenant`.
    pub fn domains_of(&self, tenant: &str) -> Vec<String> {
        self.domains
            .iter()
            .map(|d| d.replace(TENANT_PLACEHOLDER, tenant))
            .collect()
    }

    /// The rule approving `group`/`kind` (any version), if any; for a kind approved both ways,
    /// the toSuper one (a tenant's reference names its own object unless proven otherwise).
    pub fn resource(&self, group: &str, kind: &str) -> Option<&Resource> {
        self.resource_in(group, kind, Direction::ToSuper)
    }

    /// The rule approving `group`/`kind` as produced in the super cluster, if any.
    pub fn produced(&self, group: &str, kind: &str) -> Option<&Resource> {
        self.resource_in(group, kind, Direction::Produced)
    }

    /// The rule approving `group`/`kind` in `direction`, else in the other one (toSuper and
    /// fromSuper; a produced rule is found only as such).
    pub fn resource_in(&self, group: &str, kind: &str, direction: Direction) -> Option<&Resource> {
        let produced = direction == Direction::Produced;
        let mut found = self
            .resources
            .iter()
            // Kinds differ more often than groups: compare them first.
            .filter(|r| r.group_kind.kind == kind && r.group_kind.group == group)
            .filter(|r| (r.direction == Direction::Produced) == produced);
        let first = found.next()?;
        if first.direction == direction {
            return Some(first);
        }
        Some(found.next().unwrap_or(first))
    }
}
