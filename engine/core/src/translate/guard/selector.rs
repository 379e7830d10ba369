//! The guard's check of scoped selectors: they select only the tenant's objects, or only the
//! tenant's namespaces.

use crate::keys::{LABEL_TENANT, RESERVED_PREFIX};
use serde_json::Value;

use super::{shown, Guard};
use crate::policy::DEFAULT_PUBLIC_LABEL;
use crate::translate::fields::selector::{not_a_copy_requirement, not_a_selector};
use crate::translate::fields::NAMESPACE_NAME_LABEL;
use crate::translate::path::Path;
use crate::translate::{reserved_namespace_label, Reason, Refusal, Result};

impl Guard<'_> {
    /// The `matchLabels` of a scoped selector: its values are strings, and the only
    /// ferry.dev/ key is the tenant label (checked by [`Guard::selector`]).
    pub(super) fn walk_scoped_labels(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        super::nested(value, path, self.blame)?;
        if let Value::Object(labels) = value {
            for (k, v) in labels {
                if k.starts_with(RESERVED_PREFIX) && k != LABEL_TENANT {
                    return Err(self.refuse(format!(
                        "{}: keys under ferry.dev/ are ferry's",
                        path.key(k)
                    )));
                }
                if !v.is_string() {
                    return Err(self.refuse(format!(
                        "{}: expected a label value string, found {v}",
                        path.key(k)
                    )));
                }
            }
        }
        Ok(())
    }

    /// A selector over the platform's objects must require the public label, so that it
    /// selects only what the platform publishes.
    pub(super) fn published_selector(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        let Some(selector) = selector_fields(value, path)? else {
            return Ok(());
        };
        let found = selector
            .get("matchLabels")
            .and_then(|m| m.get(DEFAULT_PUBLIC_LABEL))
            .and_then(Value::as_str);
        if found != Some("true") {
            return Err(self.refuse(format!(
                "{path}.matchLabels[{DEFAULT_PUBLIC_LABEL:?}]: expected \"true\", found {} (a selector over the platform's objects selects only published ones)",
                found.map_or("nothing".to_string(), |f| format!("{f:?}"))
            )));
        }
        let expressions = match selector.get("matchExpressions") {
            Some(Value::Array(e)) => e.as_slice(),
            _ => &[],
        };
        if !expressions.contains(&not_a_copy_requirement()) {
            return Err(self.refuse(format!(
                "{path}.matchExpressions: expected {{key: {LABEL_TENANT}, operator: DoesNotExist}} (a selector over the platform's objects selects no tenant's copy)"
            )));
        }
        self.expressions(selector, path)
    }

    /// A selector's `matchExpressions`: a list of requirements, none over a key of ferry's
    /// but the one ferry adds.
    fn expressions(
        &self,
        selector: &serde_json::Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        let exprs_path = path.key("matchExpressions");
        let expressions = match selector.get("matchExpressions") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(e)) => e,
            Some(other) => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!(
                        "{exprs_path}: expected a list of requirements, found {}",
                        shown(other)
                    ),
                ))
            }
        };
        for (i, e) in expressions.iter().enumerate() {
            let Some(key) = e.get("key").and_then(Value::as_str) else {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{}: expected a requirement with a key", exprs_path.index(i)),
                ));
            };
            if key.starts_with(RESERVED_PREFIX) && *e != not_a_copy_requirement() {
                return Err(self.refuse(format!(
                    "{}.key: {key:?} is ferry's; a selector cannot choose among ferry's labels",
                    exprs_path.index(i)
                )));
            }
        }
        Ok(())
    }

    /// A scoped LabelSelector: it still selects only this tenant's objects.
    pub(super) fn selector(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        let Some(selector) = selector_fields(value, path)? else {
            return Ok(());
        };
        let tenant = self.names.tenant().as_str();
        let found = selector
            .get("matchLabels")
            .and_then(|m| m.get(LABEL_TENANT))
            .and_then(Value::as_str);
        if found != Some(tenant) {
            return Err(self.refuse(format!(
                "{path}.matchLabels[{LABEL_TENANT:?}]: expected {tenant:?}, found {} (a scoped selector must select only the tenant's objects)",
                found.map_or("nothing".to_string(), |f| format!("{f:?}"))
            )));
        }
        self.expressions(selector, path)
    }

    /// A selector of namespaces names only this tenant's namespaces, and (live) selects by
    /// no label key super namespaces do not carry from their tenant namespace.
    pub(super) fn selected_namespaces(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        self.namespace_label_keys(value, path)?;
        let labels_path = path.key("matchLabels");
        if let Some(v) = value
            .get("matchLabels")
            .and_then(|m| m.get(NAMESPACE_NAME_LABEL))
        {
            self.namespace(v, &labels_path.key(NAMESPACE_NAME_LABEL))?;
        }
        let exprs_path = path.key("matchExpressions");
        match value.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, expr) in exprs.iter().enumerate() {
                    if expr.get("key").and_then(Value::as_str) != Some(NAMESPACE_NAME_LABEL) {
                        continue;
                    }
                    let expr_path = exprs_path.index(i);
                    let values_path = expr_path.key("values");
                    match expr.get("values") {
                        None | Some(Value::Null) => {}
                        Some(Value::Array(values)) => {
                            for (j, v) in values.iter().enumerate() {
                                self.namespace(v, &values_path.index(j))?;
                            }
                        }
                        Some(other) => {
                            return Err(Refusal::new(
                                Reason::Invalid,
                                format!("{values_path}: expected a list, found {}", shown(other)),
                            ))
                        }
                    }
                }
            }
            Some(other) => {
                return Err(Refusal::new(
                    Reason::Invalid,
                    format!("{exprs_path}: expected a list, found {}", shown(other)),
                ))
            }
        }
        Ok(())
    }

    /// Live, every key a selector of namespaces selects by is one super namespaces carry
    /// from their tenant namespace (`namespaceLabels.allow`), the tenant label, or
    /// `kubernetes.io/metadata.name`: any other key would match labels the platform puts on
    /// super namespaces, never the tenant's. Offline (no SyncConfig) nothing is known.
    fn namespace_label_keys(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        // Each key with where it is: a key of matchLabels (`None`), or expression `i`.
        let labels = value.get("matchLabels").and_then(Value::as_object);
        let label_keys = labels
            .into_iter()
            .flat_map(|m| m.keys())
            .map(|k| (k.as_str(), None));
        let exprs = value.get("matchExpressions").and_then(Value::as_array);
        let expr_keys = exprs
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, e)| Some((e.get("key").and_then(Value::as_str)?, Some(i))));
        for (key, index) in label_keys.chain(expr_keys) {
            if key == LABEL_TENANT || key == NAMESPACE_NAME_LABEL {
                continue;
            }
            let allowed = match self.names.namespace_label_allowed(key) {
                None => continue,
                Some(allowed) => allowed && !reserved_namespace_label(key),
            };
            if !allowed {
                let at = match index {
                    None => path.key("matchLabels").key(key).to_string(),
                    Some(i) => path.key("matchExpressions").index(i).key("key").to_string(),
                };
                return Err(Refusal::new(
                    Reason::OutsideTenant,
                    format!(
                        "{at}: {key:?} is not a label super namespaces carry (namespaceLabels.allow), so the selector would match the platform's labels, not the tenant's"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A scoped selector's fields (`None` for null). Anything beside matchLabels and
/// matchExpressions (a schema checks this when it annotates; a field rule cannot) would
/// select beside the scope.
fn selector_fields<'v>(
    value: &'v Value,
    path: &Path<'_>,
) -> Result<Option<&'v serde_json::Map<String, Value>>> {
    let selector = match value {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        other => return Err(not_a_selector(path, other)),
    };
    if let Some(key) = selector
        .keys()
        .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
    {
        return Err(Refusal::new(
            Reason::Invalid,
            format!(
                "{path}.{key}: a scoped LabelSelector holds only matchLabels and matchExpressions"
            ),
        ));
    }
    Ok(Some(selector))
}
