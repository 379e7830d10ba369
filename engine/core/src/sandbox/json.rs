//! JSON straight into and out of the Starlark heap, without building a `serde_json::Value`
//! on the way: the conversion is most of a transform call's cost.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::{self, SerializeMap, SerializeSeq};
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value, ValueLike};

use super::MAX_OUTPUT_DEPTH;
use crate::path::Path;

/// Parses JSON text into a Starlark value on `heap`.
pub fn to_starlark<'v>(heap: Heap<'v>, json: &str) -> Result<Value<'v>, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value = Seed { heap }
        .deserialize(&mut de)
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Writes `value` as JSON into `out`; fails past [`MAX_OUTPUT_DEPTH`] levels, on a dict key
/// that is not a string, on a value JSON cannot hold (a function, a set), and on a number
/// Kubernetes cannot hold (an int outside int64, an infinite or NaN float), saying where.
pub fn write_json(value: Value<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    let mut ser = serde_json::Serializer::new(out);
    let out = Out {
        value,
        path: Path::Root,
        depth: 0,
    };
    ser::Serialize::serialize(&out, &mut ser).map_err(|e| e.to_string())
}

#[derive(Clone, Copy)]
struct Seed<'v> {
    heap: Heap<'v>,
}

impl<'de, 'v> DeserializeSeed<'de> for Seed<'v> {
    type Value = Value<'v>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value<'v>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'v> Visitor<'de> for Seed<'v> {
    type Value = Value<'v>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_unit<E>(self) -> Result<Value<'v>, E> {
        Ok(Value::new_none())
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value<'v>, E> {
        Ok(Value::new_bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value<'v>, E> {
        Ok(self.heap.alloc(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value<'v>, E> {
        match i64::try_from(v) {
            Ok(i) => Ok(self.heap.alloc(i)),
            Err(_) => Err(E::custom(outside_int64(v))),
        }
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value<'v>, E> {
        Ok(self.heap.alloc(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value<'v>, E> {
        Ok(self.heap.alloc_str(v).to_value())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value<'v>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(self.heap.alloc(AllocList(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value<'v>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if entries.is_empty() && key == crate::naming::SERDE_JSON_NUMBER {
                // serde_json (`arbitrary_precision`) hands a float or an integer past 64 bits
                // over as a map of its text.
                let text = map.next_value::<std::borrow::Cow<'de, str>>()?;
                return number(self.heap, &text).map_err(de::Error::custom);
            }
            let value = map.next_value_seed(self)?;
            entries.push((self.heap.alloc_str(&key).to_value(), value));
        }
        Ok(self.heap.alloc(AllocDict(entries)))
    }
}

/// A number's JSON text as Starlark holds it: a 64-bit signed integer or a finite float;
/// anything else is refused (the guard would refuse it in an object written without a
/// transform, and Kubernetes holds no integer past int64).
fn number<'v>(heap: Heap<'v>, text: &str) -> Result<Value<'v>, String> {
    if let Ok(i) = text.parse::<i64>() {
        return Ok(heap.alloc(i));
    }
    let float = text.contains(['.', 'e', 'E']);
    match text.parse::<f64>() {
        Ok(f) if float && f.is_finite() => Ok(heap.alloc(f)),
        _ if !float => Err(outside_int64(text)),
        _ => Err(format!(
            "the number {text} cannot be represented (expected a 64-bit integer or a finite float)"
        )),
    }
}

/// Why an integer outside int64 is refused, going into a transform or coming out of one.
fn outside_int64(text: impl std::fmt::Display) -> String {
    format!(
        "the integer {text} is outside int64 ({} to {}), the integers Kubernetes holds",
        i64::MIN,
        i64::MAX
    )
}

/// `key`, unless serde_json reserves it: the engine reads the output with serde_json, which
/// would read a map with such a key first as something else (a number, or a string as JSON).
fn reserved<E: ser::Error>(key: &str) -> Result<&str, E> {
    if key.starts_with(crate::naming::SERDE_JSON_PRIVATE) {
        return Err(E::custom(format!(
            "dict key {key:?}: keys under {} are serde_json's own and cannot be written",
            crate::naming::SERDE_JSON_PRIVATE
        )));
    }
    Ok(key)
}

/// A value being written, where it is in the output (said when it cannot be written), and
/// how deep.
struct Out<'v, 'p> {
    value: Value<'v>,
    path: Path<'p>,
    depth: usize,
}

impl<'v> Out<'v, '_> {
    fn child<'c>(&self, value: Value<'v>, path: Path<'c>) -> Out<'v, 'c> {
        Out {
            value,
            path,
            depth: self.depth + 1,
        }
    }

    /// Where the value is, for a message (`the output` at the top).
    fn at(&self) -> String {
        match self.path.to_string() {
            at if at.is_empty() => "the output".to_string(),
            at => format!("output {at}"),
        }
    }
}

impl ser::Serialize for Out<'_, '_> {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.depth > MAX_OUTPUT_DEPTH {
            return Err(ser::Error::custom(format!(
                "output is nested deeper than {MAX_OUTPUT_DEPTH} levels"
            )));
        }
        let v = self.value;
        if v.is_none() {
            return s.serialize_unit();
        }
        if let Some(b) = v.unpack_bool() {
            return s.serialize_bool(b);
        }
        // An int that is not an i64 is a big one: JSON would carry it, Kubernetes would not.
        match i64::unpack_value(v) {
            Ok(Some(i)) => return s.serialize_i64(i),
            Ok(None) => {}
            Err(_) => {
                return Err(ser::Error::custom(format!(
                    "{}: {}",
                    self.at(),
                    outside_int64(v)
                )))
            }
        }
        if let Some(text) = v.unpack_str() {
            return s.serialize_str(text);
        }
        if let Some(f) = v.downcast_ref::<StarlarkFloat>() {
            // serde_json writes a non-finite float as null, silently changing the field.
            if !f.0.is_finite() {
                return Err(ser::Error::custom(format!(
                    "{}: the float {v} is not a finite number, which JSON and Kubernetes cannot hold",
                    self.at()
                )));
            }
            return s.serialize_f64(f.0);
        }
        if let Some(list) = ListRef::from_value(v) {
            let mut seq = s.serialize_seq(Some(list.len()))?;
            for (i, item) in list.iter().enumerate() {
                seq.serialize_element(&self.child(item, self.path.index(i)))?;
            }
            return seq.end();
        }
        if let Some(tuple) = TupleRef::from_value(v) {
            let mut seq = s.serialize_seq(Some(tuple.len()))?;
            for (i, item) in tuple.iter().enumerate() {
                seq.serialize_element(&self.child(item, self.path.index(i)))?;
            }
            return seq.end();
        }
        if let Some(dict) = DictRef::from_value(v) {
            let mut map = s.serialize_map(Some(dict.len()))?;
            for (k, item) in dict.iter() {
                let Some(key) = k.unpack_str() else {
                    return Err(ser::Error::custom(format!(
                        "dict keys must be strings in an object, found {} {k}",
                        k.get_type()
                    )));
                };
                map.serialize_entry(reserved(key)?, &self.child(item, self.path.key(key)))?;
            }
            return map.end();
        }
        if let Some(st) = StructRef::from_value(v) {
            let mut map = s.serialize_map(None)?;
            for (k, item) in st.iter() {
                let key = k.as_str();
                map.serialize_entry(reserved(key)?, &self.child(item, self.path.key(key)))?;
            }
            return map.end();
        }
        // Big integers and anything else Starlark itself knows how to write as JSON.
        match v.to_json_value() {
            Ok(json) => ser::Serialize::serialize(&json, s),
            Err(e) => Err(ser::Error::custom(format!(
                "{} is not JSON data: {e}",
                v.get_type()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use starlark::values::dict::AllocDict;
    use starlark::values::list::AllocList;
    use starlark::values::{Heap, Value};

    use super::{to_starlark, write_json};

    fn written(value: Value<'_>) -> Result<String, String> {
        let mut out = Vec::new();
        write_json(value, &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// `{"spec": {"limits": [1, value]}}` on `heap`.
    fn nested<'v>(heap: Heap<'v>, value: Value<'v>) -> Value<'v> {
        let list = heap.alloc(AllocList([heap.alloc(1), value]));
        let limits = heap.alloc(AllocDict([(heap.alloc_str("limits").to_value(), list)]));
        heap.alloc(AllocDict([(heap.alloc_str("spec").to_value(), limits)]))
    }

    #[test]
    fn non_finite_floats_are_refused_with_their_place() {
        Heap::temp(|heap| {
            for f in [f64::NEG_INFINITY, f64::INFINITY, f64::NAN] {
                let e = written(nested(heap, heap.alloc(f))).expect_err("refused");
                assert!(e.contains("output spec.limits[1]"), "{e}");
                assert!(e.contains("not a finite number"), "{e}");
            }
            assert_eq!(
                written(nested(heap, heap.alloc(2.5))).as_deref(),
                Ok(r#"{"spec":{"limits":[1,2.5]}}"#)
            );
        });
    }

    #[test]
    fn integers_outside_int64_are_refused_both_ways() {
        Heap::temp(|heap| {
            let big = heap.alloc(i64::MAX as u64 + 1);
            let e = written(nested(heap, big)).expect_err("refused");
            assert!(
                e.contains("output spec.limits[1]") && e.contains("int64"),
                "{e}"
            );
            assert_eq!(
                written(heap.alloc(i64::MIN)).as_deref(),
                Ok("-9223372036854775808")
            );
            for text in ["18446744073709551615", r#"{"a": [9223372036854775808]}"#] {
                let e = to_starlark(heap, text).expect_err(text);
                assert!(e.contains("int64"), "{e}");
            }
            let max = to_starlark(heap, "9223372036854775807").expect("int64 fits");
            assert_eq!(max.to_str(), "9223372036854775807");
        });
    }
}
