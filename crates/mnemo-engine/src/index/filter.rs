//! The metadata filter language of `search` and chat requests, compiled to an index [`Filter`]
//! so that filtering happens inside the index, before ranking.
//!
//! A filter is a JSON object whose clauses must all hold:
//!
//! ```json
//! {"topic": "family",                      // equals (string, integer or boolean)
//!  "weight": {"gte": 3, "lt": 10},         // ranges: numbers, or RFC 3339 times
//!  "mood": {"ne": "sad"},
//!  "tag": {"in": ["a", "b"]}, "lang": {"nin": ["de"]},
//!  "$or": [{"topic": "work"}, {"urgent": true}]}
//! ```
//!
//! Operators may be written with or without a leading `$` (`$gte`). Keys name fields of a
//! memory's `metadata`, except `role` and `created_at`, which name the front matter fields.

use mnemo_index::{Bounds, Condition, Filter};
use serde_json::{Map, Value};

use crate::error::EngineError;

/// Front matter fields a filter can name directly; every other key is a metadata field.
const FRONT_MATTER_KEYS: [&str; 2] = ["role", "created_at"];

/// Compiles a filter object; a malformed filter is an [`EngineError::InvalidInput`] that says
/// which clause is wrong and why.
pub fn compile(filter: &Value) -> Result<Filter, EngineError> {
    match filter {
        Value::Null => Ok(Filter::all()),
        Value::Object(clauses) => compile_object(clauses),
        other => Err(invalid(format!(
            "a filter must be a JSON object of clauses, not {}",
            kind(other)
        ))),
    }
}

fn compile_object(clauses: &Map<String, Value>) -> Result<Filter, EngineError> {
    let mut filter = Filter::all();
    for (key, value) in clauses {
        if key == "$or" {
            let Value::Array(alternatives) = value else {
                return Err(invalid(format!(
                    "\"$or\" takes a list of filter objects, not {}",
                    kind(value)
                )));
            };
            if alternatives.is_empty() {
                return Err(invalid("\"$or\" needs at least one filter object".into()));
            }
            let alternatives = alternatives
                .iter()
                .map(compile)
                .collect::<Result<Vec<_>, _>>()?;
            filter = filter.must(Condition::Either(alternatives));
            continue;
        }
        filter = filter.and(compile_clause(&field_path(key)?, key, value)?);
    }
    Ok(filter)
}

/// The payload path of a user's key.
fn field_path(key: &str) -> Result<String, EngineError> {
    let valid = !key.is_empty()
        && key.len() <= 128
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !key.starts_with('.')
        && !key.ends_with('.')
        && !key.contains("..");
    if !valid {
        return Err(invalid(format!(
            "filter key {key:?} is not a field name (letters, digits, '_', '-', and '.' between parts)"
        )));
    }
    Ok(if FRONT_MATTER_KEYS.contains(&key) {
        key.to_owned()
    } else {
        format!("metadata.{key}")
    })
}

fn compile_clause(path: &str, key: &str, value: &Value) -> Result<Filter, EngineError> {
    let Value::Object(ops) = value else {
        return Ok(Filter::all().must(Condition::equals(path, matchable(key, "eq", value)?)));
    };
    if ops.is_empty() {
        return Err(invalid(format!(
            "filter on {key:?} has no operator; use eq, ne, gt, gte, lt, lte, in or nin"
        )));
    }
    let mut filter = Filter::all();
    let mut bounds = Bounds::default();
    for (op, operand) in ops {
        let op_name = op.strip_prefix('$').unwrap_or(op);
        match op_name {
            "eq" => {
                filter = filter.must(Condition::equals(path, matchable(key, op_name, operand)?))
            }
            "ne" => {
                filter =
                    filter.must_not(Condition::equals(path, matchable(key, op_name, operand)?))
            }
            "in" => filter = filter.must(Condition::any_of(path, list(key, op_name, operand)?)),
            "nin" => {
                filter = filter.must_not(Condition::any_of(path, list(key, op_name, operand)?))
            }
            "gt" | "gte" | "lt" | "lte" => {
                let bound = Some(bound(key, op_name, operand)?);
                match op_name {
                    "gt" => bounds.gt = bound,
                    "gte" => bounds.gte = bound,
                    "lt" => bounds.lt = bound,
                    _ => bounds.lte = bound,
                }
            }
            _ => {
                return Err(invalid(format!(
                    "unknown filter operator {op:?} on {key:?}; expected eq, ne, gt, gte, lt, lte, in or nin"
                )))
            }
        }
    }
    if bounds != Bounds::default() {
        filter = filter.must(Condition::range(path, bounds));
    }
    Ok(filter)
}

/// A value equality can match: a string, an integer or a boolean.
fn matchable(key: &str, op: &str, value: &Value) -> Result<Value, EngineError> {
    match value {
        Value::String(_) | Value::Bool(_) => Ok(value.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(value.clone()),
        Value::Number(_) => Err(invalid(format!(
            "{op} on {key:?} needs a string, integer or boolean; compare decimals with gte/lte"
        ))),
        other => Err(invalid(format!(
            "{op} on {key:?} needs a string, integer or boolean, not {}",
            kind(other)
        ))),
    }
}

fn list(key: &str, op: &str, value: &Value) -> Result<Vec<Value>, EngineError> {
    let Value::Array(items) = value else {
        return Err(invalid(format!(
            "{op} on {key:?} needs a list, not {}",
            kind(value)
        )));
    };
    items.iter().map(|item| matchable(key, op, item)).collect()
}

fn bound(key: &str, op: &str, value: &Value) -> Result<Value, EngineError> {
    match value {
        Value::Number(_) => Ok(value.clone()),
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => Ok(value.clone()),
        other => Err(invalid(format!(
            "{op} on {key:?} needs a number or an RFC 3339 time, not {}",
            kind(other)
        ))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn invalid(message: String) -> EngineError {
    EngineError::InvalidInput(format!("filter: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clauses_compile_to_index_conditions() {
        let filter = compile(&json!({
            "topic": "family",
            "weight": {"$gte": 3, "lt": 10},
            "mood": {"ne": "sad"},
            "tag": {"in": ["a", "b"]},
            "role": "memory",
        }))
        .unwrap();
        assert!(filter
            .must
            .contains(&Condition::equals("metadata.topic", "family")));
        assert!(filter.must.contains(&Condition::equals("role", "memory")));
        assert!(filter
            .must
            .contains(&Condition::any_of("metadata.tag", ["a", "b"])));
        assert!(filter
            .must_not
            .contains(&Condition::equals("metadata.mood", "sad")));
        assert!(filter.must.contains(&Condition::range(
            "metadata.weight",
            Bounds {
                gte: Some(json!(3)),
                lt: Some(json!(10)),
                ..Bounds::default()
            }
        )));
    }

    #[test]
    fn alternatives_nest() {
        let filter = compile(&json!({"$or": [{"a": 1}, {"b": {"nin": [2]}}]})).unwrap();
        let [Condition::Either(alternatives)] = filter.must.as_slice() else {
            panic!("{filter:?}");
        };
        assert_eq!(alternatives.len(), 2);
        assert_eq!(
            alternatives[1].must_not,
            [Condition::any_of("metadata.b", [2])]
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (filter, expected) in [
            (json!([1]), "must be a JSON object"),
            (json!({"w": {"gtx": 1}}), "unknown filter operator \"gtx\""),
            (json!({"w": {}}), "has no operator"),
            (json!({"w": 1.5}), "compare decimals"),
            (json!({"w": {"in": 3}}), "needs a list"),
            (json!({"w": {"gt": "soon"}}), "RFC 3339"),
            (json!({"$or": []}), "at least one"),
            (json!({"a/../b": 1}), "not a field name"),
            (json!({"w": {"eq": {"x": 1}}}), "not an object"),
        ] {
            let err = compile(&filter).unwrap_err().to_string();
            assert!(err.contains(expected), "{filter}: {err}");
            assert!(err.starts_with("filter: "), "{err}");
        }
    }
}
