//! The guard's checks of values whatever their place: how deep maps and lists nest, numbers
//! Kubernetes can hold, string maps and strings.

use crate::keys::UNREAD;
use serde_json::{Map, Number, Value};

use super::shown;
use crate::naming::SERDE_JSON_PRIVATE;
use crate::translate::path::Path;
use crate::translate::{Reason, Refusal, Result};

/// How deep an object ferry writes may nest maps and lists (the object itself is level 1).
/// serde_json, ferry's reader, stops at 128 levels, and a written object is read again deeper
/// than it is written: as a list item (two levels more) and in its `managedFields`, whose field
/// sets repeat every path four levels down (and a leaf field as `{}`, one more). A copy deep
/// enough to fail there would break the list of its kind for every tenant in the super
/// cluster, so it is refused before it is written.
pub const MAX_DEPTH: usize = 64;

/// How many keys and indexes below an object ferry reads maps and lists (`spec` is 1). A
/// list item sits two levels into the list and a watch event's object one, and serde_json stops
/// at 128 levels: where a cluster sends a map or list deeper than this, ferry reads it as an
/// empty one (its content skipped unparsed, so that the object does not break the list of its
/// kind), and such an object is refused, never translated from what was read.
pub const READ_DEPTH: usize = 100;

/// Refuses an object holding a map or list more than [`READ_DEPTH`] keys and indexes below
/// it, or a map [`map_keys`] refuses: read from a cluster, what is there was not read. What a
/// transform is given; the guard's own walks check the keys as they go.
pub(crate) fn readable(value: &Value) -> Result<()> {
    fn walk(value: &Value, path: &Path<'_>, depth: usize) -> Result<()> {
        match value {
            Value::Object(_) | Value::Array(_) if depth > READ_DEPTH => Err(Refusal::new(
                Reason::Invalid,
                format!("{path}: nested deeper than {READ_DEPTH} levels of maps and lists (ferry reads maps and lists at most {READ_DEPTH} deep from a cluster, so it cannot translate what is below)"),
            )),
            Value::Object(map) => {
                map_keys(map, path, Reason::Invalid)?;
                map.iter()
                    .try_for_each(|(k, v)| walk(v, &path.key(k), depth + 1))
            }
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| walk(v, &path.index(i), depth + 1)),
            _ => Ok(()),
        }
    }
    walk(value, &Path::Root, 0)
}

/// Refuses the map at `path`, blaming `blame`, if it is an [`UNREAD`] map (saying why) or
/// holds a key serde_json reserves (what it says depends on where the key lands when the
/// object is parsed again).
pub(super) fn map_keys(map: &Map<String, Value>, path: &Path<'_>, blame: Reason) -> Result<()> {
    let at = || match path.to_string() {
        at if at.is_empty() => "the object".to_string(),
        at => at,
    };
    if let Some(why) = map.get(UNREAD) {
        let why = why.as_str().unwrap_or("not read");
        return Err(Refusal::new(blame, format!("{}: {why}", at())));
    }
    if map.keys().any(|k| k.starts_with(SERDE_JSON_PRIVATE)) {
        return Err(Refusal::new(
            blame,
            format!("{}: a key under {SERDE_JSON_PRIVATE}, which serde_json reads as something else (a number, or text as JSON)", at()),
        ));
    }
    Ok(())
}

/// Refuses a map or list past [`MAX_DEPTH`] levels at `path` (the object is level 1), blaming
/// `blame` (a transform, when it had the last word).
pub(super) fn nested(value: &Value, path: &Path<'_>, blame: Reason) -> Result<()> {
    if !matches!(value, Value::Object(_) | Value::Array(_)) || path.depth() < MAX_DEPTH {
        return Ok(());
    }
    Err(Refusal::new(
        blame,
        format!("{path}: nested deeper than {MAX_DEPTH} levels of maps and lists (ferry writes objects at most {MAX_DEPTH} deep, so that a copy stays readable in a list and in its managedFields)"),
    ))
}

/// Kubernetes (Go) holds numbers as 64-bit signed integers or floats; with arbitrary
/// precision a 30-digit integer is neither, and would print differently as YAML and as JSON.
/// An integer past `i64::MAX` (serde_json reads it as a u64) is refused too: an API server
/// would reject it or read it as a float, so the copy would not hold what was sent.
pub(super) fn number(n: &Number, path: &Path<'_>) -> Result<()> {
    if n.is_i64() || (n.is_f64() && n.as_f64().is_some_and(f64::is_finite)) {
        return Ok(());
    }
    let why = if n.is_u64() {
        format!(
            "the integer {n} is above {}, the largest integer Kubernetes holds (int64)",
            i64::MAX
        )
    } else {
        format!("the number {n} cannot be represented (expected a 64-bit signed integer or a finite float)")
    };
    Err(Refusal::new(Reason::Invalid, format!("{path}: {why}")))
}

/// `metadata.<field>` (labels or annotations), once every value is checked to be a string
/// (the API server would reject anything else, and a label must not be half-written).
pub(super) fn string_map<'m>(
    meta: &'m Map<String, Value>,
    field: &str,
) -> Result<Option<&'m Map<String, Value>>> {
    match meta.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => match m.iter().find(|(_, v)| !v.is_string()) {
            Some((k, v)) => Err(Refusal::new(
                Reason::Invalid,
                format!(
                    "metadata.{field}[{k:?}]: expected a string, found {}",
                    shown(v)
                ),
            )),
            None => Ok(Some(m)),
        },
        Some(other) => Err(Refusal::new(
            Reason::Invalid,
            format!(
                "metadata.{field}: expected an object, found {}",
                shown(other)
            ),
        )),
    }
}

/// The string `value` holds (`""` when it is absent or null); any other value is refused.
pub(super) fn optional_str<'v>(
    value: Option<&'v Value>,
    path: &Path<'_>,
    what: &str,
) -> Result<&'v str> {
    match value {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(Refusal::new(
            Reason::Invalid,
            format!("{path}: expected {what} string, found {}", shown(other)),
        )),
    }
}

pub(super) fn get_str<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    map.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::Number;

    use super::number;
    use crate::translate::path::Path;

    fn checked(text: &str) -> Result<(), String> {
        let n: Number = serde_json::from_str(text).expect("a JSON number");
        number(&n, &Path::Root.key("replicas")).map_err(|e| e.message)
    }

    #[test]
    fn numbers_kubernetes_holds_pass() {
        for ok in [
            "0",
            "-1",
            "9223372036854775807",
            "-9223372036854775808",
            "1.5",
            "-2e10",
        ] {
            assert_eq!(checked(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn integers_past_int64_are_refused_with_where_and_why() {
        for big in ["9223372036854775808", "18446744073709551615"] {
            let e = checked(big).expect_err(big);
            assert!(e.starts_with("replicas: the integer"), "{e}");
            assert!(e.contains("int64"), "{e}");
        }
        for huge in [
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1e400",
        ] {
            let e = checked(huge).expect_err(huge);
            assert!(e.contains("cannot be represented"), "{e}");
        }
    }
}
