//! Selectors scoped to the tenant (of objects, or of namespaces) and free text that names
//! namespaces.

use crate::keys::LABEL_TENANT;
use serde_json::{Map, Value};

use super::{Fields, Way, NAMESPACE_NAME_LABEL};
use crate::policy::DEFAULT_PUBLIC_LABEL;
use crate::schema::{Annotated, Rule};
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result};

impl Fields<'_> {
    pub(super) fn selector(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        // The requirement ferry adds: the tenant's label, or (over published objects) the
        // public label.
        let (label, wanted) = match rule.rule {
            Rule::PublishedSelector => (DEFAULT_PUBLIC_LABEL, "true".to_string()),
            _ => (LABEL_TENANT, self.names.tenant().as_str().to_string()),
        };
        let selector = match value {
            Value::Null => return Ok(()),
            Value::Object(m) => m,
            other => return Err(not_a_selector(path, other)),
        };
        let match_labels = path.key("matchLabels");
        let label_path = match_labels.key(label);
        match self.way {
            Way::Down => {
                let labels = selector
                    .entry("matchLabels")
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(labels) = labels else {
                    return Err(Refusal::new(
                        Reason::Invalid,
                        format!("{path}.matchLabels: expected an object"),
                    ));
                };
                let before = labels.insert(label.into(), Value::String(wanted.clone()));
                self.record(&label_path, before, Some(Value::String(wanted)), rule);
                if rule.rule == Rule::PublishedSelector {
                    self.not_a_copy(rule, selector, path)?;
                }
            }
            Way::Up => {
                let Some(Value::Object(labels)) = selector.get_mut("matchLabels") else {
                    return Ok(());
                };
                // ferry's scope never shows in a tenant, whoever's it is (a public object's
                // selector may scope to another tenant).
                if labels.contains_key(label) {
                    let before = labels.remove(label);
                    if labels.is_empty() {
                        selector.remove("matchLabels");
                    }
                    self.record(&label_path, before, None, rule);
                }
            }
        }
        Ok(())
    }

    /// A selector over published objects also requires `ferry.dev/tenant` absent: no tenant's
    /// copy is among them, whatever labels it carries.
    fn not_a_copy(
        &mut self,
        rule: &Annotated,
        selector: &mut Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<()> {
        let expressions = selector
            .entry("matchExpressions")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(expressions) = expressions else {
            return Err(Refusal::new(
                Reason::Invalid,
                format!("{path}.matchExpressions: expected a list"),
            ));
        };
        let requirement = not_a_copy_requirement();
        if !expressions.contains(&requirement) {
            let list = path.key("matchExpressions");
            let at = list.index(expressions.len());
            expressions.push(requirement.clone());
            self.record(&at, None, Some(requirement), rule);
        }
        Ok(())
    }

    /// The namespace names a selector of namespaces names (`kubernetes.io/metadata.name` in
    /// `matchLabels` and in `matchExpressions` values), mapped like any namespace.
    pub(super) fn selected_namespaces(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Value::Object(selector) = value else {
            return Ok(());
        };
        let labels_path = path.key("matchLabels");
        if let Some(Value::Object(labels)) = selector.get_mut("matchLabels") {
            if let Some(v) = labels.get_mut(NAMESPACE_NAME_LABEL) {
                self.map_namespace(rule, v, &labels_path.key(NAMESPACE_NAME_LABEL))?;
            }
        }
        let exprs_path = path.key("matchExpressions");
        if let Some(Value::Array(exprs)) = selector.get_mut("matchExpressions") {
            for (i, expr) in exprs.iter_mut().enumerate() {
                if expr.get("key").and_then(Value::as_str) != Some(NAMESPACE_NAME_LABEL) {
                    continue;
                }
                let expr_path = exprs_path.index(i);
                let values_path = expr_path.key("values");
                if let Some(Value::Array(values)) = expr.get_mut("values") {
                    for (j, v) in values.iter_mut().enumerate() {
                        self.map_namespace(rule, v, &values_path.index(j))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Up, free text: every word that is one of this tenant's super namespaces becomes its
    /// tenant name; a word that is another tenant's super namespace (known live) is redacted.
    /// Words are runs of the characters of a namespace name, so `team-a-shop/orders` and
    /// `in team-a-shop.` are found, and a longer name that merely starts like one is not.
    /// DNS names and URLs (a token holding a `.` or `://` once surrounding punctuation is
    /// set aside) are left whole: a host is not a namespace, and a rewritten one would name
    /// another host.
    pub(super) fn text(
        &mut self,
        rule: &Annotated,
        value: &mut Value,
        path: &Path<'_>,
    ) -> Result<()> {
        let Value::String(text) = value else {
            return Ok(());
        };
        if self.way == Way::Down {
            return Ok(());
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let space = rest.len() - rest.trim_start().len();
            out.push_str(&rest[..space]);
            rest = &rest[space..];
            let token_len = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let token = &rest[..token_len];
            if is_host_or_url(token) {
                out.push_str(token);
            } else {
                self.text_words(token, &mut out);
            }
            rest = &rest[token_len..];
        }
        if out != *text {
            self.record(
                path,
                Some(Value::String(text.clone())),
                Some(Value::String(out.clone())),
                rule,
            );
            *text = out;
        }
        Ok(())
    }

    /// Appends `token` to `out` with its words that are super namespaces unmapped or
    /// redacted.
    fn text_words(&mut self, token: &str, out: &mut String) {
        let is_word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        let mut rest = token;
        while let Some(start) = rest.find(is_word) {
            out.push_str(&rest[..start]);
            let word_len = rest[start..]
                .find(|c| !is_word(c))
                .unwrap_or(rest.len() - start);
            let word = &rest[start..start + word_len];
            let tenant_name = self
                .namespaces
                .iter()
                .find(|ns| crate::naming::is_map_of(self.names.tenant().as_str(), ns, word));
            match tenant_name {
                Some(ns) => out.push_str(ns),
                None if self.published.is_some_and(|p| p.super_namespace(word)) => {
                    let shown = self.redact(word);
                    out.push_str(&shown)
                }
                None => out.push_str(word),
            }
            rest = &rest[start + word_len..];
        }
        out.push_str(rest);
    }
}

/// Whether a whitespace-separated token of free text is a DNS name or a URL, once the
/// punctuation around it (`(`, quotes, a sentence's closing `.`, `,`, `:`) is set aside: a
/// `scheme://` URL, or dot-separated DNS labels (a `:port` allowed). Anything else holding a
/// dot (`team-b-shop/app.v2`, `ns=team-b-prod,v=1.2`) is prose, its words read as any.
fn is_host_or_url(token: &str) -> bool {
    let core = token
        .trim_start_matches(['(', '[', '<', '"', '\'', '`', '\u{201c}', '\u{2018}'])
        .trim_end_matches([
            '.', ',', ';', ':', '!', '?', ')', ']', '>', '"', '\'', '`', '\u{201d}', '\u{2019}',
        ]);
    if let Some((scheme, _)) = core.split_once("://") {
        return !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    }
    let host = match core.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => core,
    };
    host.contains('.')
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The requirement that selects no copy of a tenant's: `ferry.dev/tenant` does not exist.
pub(in crate::translate) fn not_a_copy_requirement() -> Value {
    serde_json::json!({"key": LABEL_TENANT, "operator": "DoesNotExist"})
}

/// The refusal of a LabelSelector field holding something else than an object.
pub(in crate::translate) fn not_a_selector(path: &Path<'_>, found: &Value) -> Refusal {
    Refusal::new(
        Reason::Invalid,
        format!(
            "{path}: expected a LabelSelector object, found {}",
            shown(found)
        ),
    )
}

/// A value as a message shows it: short, on one line.
pub(in crate::translate) fn shown(value: &Value) -> String {
    let s = value.to_string();
    match s.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_and_urls_only() {
        for whole in [
            "web.team-a-shop.svc",
            "https://x.team-b-shop.svc:8080/a?b=1",
            "(db.team-b.svc:5432),",
            "s3+https://b/x",
        ] {
            assert!(super::is_host_or_url(whole), "{whole}");
        }
        for prose in [
            "team-b-shop/app.v2",
            "ns=team-b-prod,version=1.2",
            "team-b-db.*",
            "{\"namespace\":\"team-b-shop\"}",
            "team-b-x.}",
            "path=/backups/team-b-shop/x.tar.gz;team-b-shop.",
        ] {
            assert!(!super::is_host_or_url(prose), "{prose}");
        }
    }
}
