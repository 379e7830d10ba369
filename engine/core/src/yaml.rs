//! YAML text of JSON values. Numbers are converted one by one: serde_json is built with
//! arbitrary precision (Starlark needs it), whose numbers serde_yaml cannot print directly
//! (it would write serde_json's private wrapper). A number that is not a 64-bit integer or a
//! finite float is an error, never a string (the translator refuses such objects before they
//! get here).

use serde_json::Value;

/// The YAML text of `value`.
pub fn to_yaml(value: &Value) -> Result<String, String> {
    serde_yaml::to_string(&yaml_value(value)?).map_err(|e| e.to_string())
}

fn yaml_value(value: &Value) -> Result<serde_yaml::Value, String> {
    use serde_yaml::Value as Y;
    Ok(match value {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Y::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Y::Number(u.into())
            } else if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.is_finite()) {
                Y::Number(f.into())
            } else {
                return Err(format!(
                    "the number {n} cannot be represented (expected a 64-bit integer or a finite float)"
                ));
            }
        }
        Value::String(s) => Y::String(s.clone()),
        Value::Array(a) => Y::Sequence(a.iter().map(yaml_value).collect::<Result<_, _>>()?),
        Value::Object(m) => Y::Mapping(
            m.iter()
                .map(|(k, v)| Ok((Y::String(k.clone()), yaml_value(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_print_as_numbers() {
        let v: serde_json::Value = serde_json::from_str(r#"{"a": 1, "b": 2.5, "c": [3]}"#).unwrap();
        assert_eq!(super::to_yaml(&v).unwrap(), "a: 1\nb: 2.5\nc:\n- 3\n");
    }
}
