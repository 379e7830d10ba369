//! The guard's check of scoped selectors: they select only the tenant's objects, or only the
//! tenant's namespaces.

use serde_json::Value;

use super::{shown, Guard};
use crate::translate::fields::selector::not_a_selector;
use crate::translate::fields::NAMESPACE_NAME_LABEL;
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result, LABEL_TENANT, RESERVED_PREFIX};

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

    /// A scoped LabelSelector: it still selects only this tenant's objects.
    pub(super) fn selector(&self, value: &Value, path: &Path<'_>) -> Result<()> {
        let selector = match value {
            Value::Null => return Ok(()),
            Value::Object(m) => m,
            other => return Err(not_a_selector(path, other)),
        };
        // Anything beside matchLabels and matchExpressions (a schema checks this when it
        // annotates; a field rule cannot) would select beside the tenant's scope.
        if let Some(key) = selector
            .keys()
            .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
        {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("{path}.{key}: a scoped LabelSelector holds only matchLabels and matchExpressions"),
            ));
        }
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
        Ok(())
    }

    /// A selector of namespaces names only this tenant's namespaces.
    pub(super) fn selected_namespaces(&self, value: &Value, path: &Path<'_>) -> Result<()> {
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
}
