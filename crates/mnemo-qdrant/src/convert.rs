//! mnemo's points, filters and hits in `qdrant-client`'s gRPC types, and back.

use std::collections::HashMap;

use mnemo_core::MemoryId;
use mnemo_index::{Bounds, Condition, Filter, Hit, IndexError, Point, PointPayload, SparseVector};
use qdrant_client::qdrant::{
    self, r#match::MatchValue, vector_output, DatetimeRange, NamedVectors, PointStruct, Range,
    VectorsOutput,
};
use qdrant_client::Payload;
use serde_json::Value;
use uuid::Uuid;

fn backend(message: String) -> IndexError {
    IndexError::Backend(message)
}

/// Name of the dense vector in the collection (as in the embedded index).
pub const DENSE: &str = mnemo_index::DENSE_VECTOR;
/// Name of the sparse (lexical) vector in the collection, with IDF weighting.
pub const SPARSE: &str = mnemo_index::LEXICAL_VECTOR;
/// Payload field holding the id of the store a point belongs to.
pub const STORE_FIELD: &str = "store_id";
/// Payload field holding the point's memory id (the point id is derived from it).
pub const MEMORY_FIELD: &str = "memory_id";

/// A point's id in the collection: derived from its store and memory, so two stores holding
/// the same memory (one copied from the other) keep a point each.
pub(crate) fn point_id(store: Uuid, memory: MemoryId) -> qdrant::PointId {
    Uuid::new_v5(&store, memory.as_uuid().as_bytes())
        .to_string()
        .into()
}

/// What the index adds to every payload it writes.
pub(crate) struct PointPayloadFields {
    pub store_id: Uuid,
}

pub(crate) fn sparse(v: SparseVector) -> qdrant::Vector {
    qdrant::Vector::new_sparse(v.indices, v.values)
}

pub(crate) fn named_vectors(vectors: Vec<(&str, qdrant::Vector)>) -> NamedVectors {
    vectors
        .into_iter()
        .fold(NamedVectors::default(), |named, (name, v)| {
            named.add_vector(name, v)
        })
}

pub(crate) fn point_struct(
    fields: &PointPayloadFields,
    point: &Point,
) -> Result<PointStruct, IndexError> {
    let mut vectors = vec![(DENSE, qdrant::Vector::new_dense(point.vector.clone()))];
    if !point.lexical.is_empty() {
        vectors.push((SPARSE, sparse(point.lexical.clone())));
    }
    let mut payload = match serde_json::to_value(&point.payload) {
        Ok(Value::Object(map)) => map,
        Ok(_) => unreachable!("a PointPayload serialises to an object"),
        Err(e) => {
            return Err(backend(format!(
                "cannot encode the payload of {}: {e}",
                point.id
            )))
        }
    };
    payload.insert(STORE_FIELD.into(), fields.store_id.to_string().into());
    payload.insert(MEMORY_FIELD.into(), point.id.to_string().into());
    Ok(PointStruct::new(
        point_id(fields.store_id, point.id),
        named_vectors(vectors),
        Payload::from(payload),
    ))
}

/// The memory id a point's payload names.
pub(crate) fn memory_id(payload: &HashMap<String, qdrant::Value>) -> Result<MemoryId, IndexError> {
    let raw = payload
        .get(MEMORY_FIELD)
        .and_then(|v| v.as_str())
        .ok_or_else(|| backend(format!("a point has no {MEMORY_FIELD:?} in its payload")))?;
    raw.parse::<Uuid>().map(MemoryId::from_uuid).map_err(|e| {
        backend(format!(
            "a point's {MEMORY_FIELD:?} {raw:?} is not a UUID: {e}"
        ))
    })
}

/// A found point as mnemo's hit; a payload that does not read is an error naming the memory
/// (the next `reindex --full` rewrites it).
pub(crate) fn hit(
    mut payload: HashMap<String, qdrant::Value>,
    score: f32,
    vectors: Option<VectorsOutput>,
) -> Result<Hit, IndexError> {
    let id = memory_id(&payload)?;
    payload.remove(MEMORY_FIELD);
    payload.remove(STORE_FIELD);
    let json = Value::from(Payload::from(payload));
    let payload: PointPayload = serde_json::from_value(json)
        .map_err(|e| backend(format!("point {id} has an unreadable payload: {e}")))?;
    let vector = vectors
        .and_then(|v| v.get_vector_by_name(DENSE))
        .and_then(|v| match v {
            vector_output::Vector::Dense(d) => Some(d.data),
            _ => None,
        });
    Ok(Hit {
        id,
        score,
        payload,
        vector,
    })
}

/// mnemo's filter in gRPC terms, with the semantics of the JSON filter the embedded index
/// reads (`Filter::to_qdrant_json`).
pub(crate) fn filter(filter: &Filter) -> Result<qdrant::Filter, IndexError> {
    let all = |conditions: &[Condition]| {
        conditions
            .iter()
            .map(condition)
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(qdrant::Filter {
        must: all(&filter.must)?,
        must_not: all(&filter.must_not)?,
        ..Default::default()
    })
}

fn condition(condition: &Condition) -> Result<qdrant::Condition, IndexError> {
    match condition {
        Condition::Equals { key, value } => {
            Ok(qdrant::Condition::matches(key, one_value(key, value)?))
        }
        Condition::AnyOf { key, values } => {
            Ok(qdrant::Condition::matches(key, any_value(key, values)?))
        }
        Condition::Range { key, bounds } => range(key, bounds),
        Condition::Either(filters) => {
            let any = filters
                .iter()
                .map(|f| filter(f).map(qdrant::Condition::from))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(qdrant::Filter::should(any).into())
        }
    }
}

fn one_value(key: &str, value: &Value) -> Result<MatchValue, IndexError> {
    match value {
        Value::String(s) => Ok(s.clone().into()),
        Value::Bool(b) => Ok((*b).into()),
        Value::Number(n) => n.as_i64().map(MatchValue::from).ok_or_else(|| {
            backend(format!(
                "{key}: only whole numbers can be matched exactly, not {n}"
            ))
        }),
        other => Err(backend(format!(
            "{key}: cannot match {other}; match a string, a whole number or true/false"
        ))),
    }
}

fn any_value(key: &str, values: &[Value]) -> Result<MatchValue, IndexError> {
    let strings: Option<Vec<String>> = values
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect();
    if let Some(strings) = strings {
        return Ok(MatchValue::from(strings));
    }
    let numbers: Option<Vec<i64>> = values.iter().map(Value::as_i64).collect();
    if let Some(numbers) = numbers {
        return Ok(MatchValue::from(numbers));
    }
    Err(backend(format!(
        "{key}: a list to match must hold only strings or only whole numbers"
    )))
}

fn range(key: &str, bounds: &Bounds) -> Result<qdrant::Condition, IndexError> {
    let all = [&bounds.gt, &bounds.gte, &bounds.lt, &bounds.lte];
    if all.iter().any(|b| matches!(b, Some(Value::String(_)))) {
        let time = |b: &Option<Value>| b.as_ref().map(|v| timestamp(key, v)).transpose();
        return Ok(qdrant::Condition::datetime_range(
            key,
            DatetimeRange {
                gt: time(&bounds.gt)?,
                gte: time(&bounds.gte)?,
                lt: time(&bounds.lt)?,
                lte: time(&bounds.lte)?,
            },
        ));
    }
    let number = |b: &Option<Value>| {
        b.as_ref()
            .map(|v| {
                v.as_f64().ok_or_else(|| {
                    backend(format!(
                        "{key}: a range bound must be a number or a time, not {v}"
                    ))
                })
            })
            .transpose()
    };
    Ok(qdrant::Condition::range(
        key,
        Range {
            gt: number(&bounds.gt)?,
            gte: number(&bounds.gte)?,
            lt: number(&bounds.lt)?,
            lte: number(&bounds.lte)?,
        },
    ))
}

fn timestamp(key: &str, value: &Value) -> Result<prost_types::Timestamp, IndexError> {
    let time = value
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .ok_or_else(|| {
            backend(format!(
                "{key}: a range bound must be an RFC 3339 time when another one is, not {value}"
            ))
        })?;
    Ok(prost_types::Timestamp {
        seconds: time.timestamp(),
        nanos: time.timestamp_subsec_nanos() as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_memory_in_two_stores_gets_two_points() {
        let memory = MemoryId::random();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert_ne!(point_id(a, memory), point_id(b, memory));
        assert_eq!(point_id(a, memory), point_id(a, memory));
    }

    #[test]
    fn times_and_numbers_make_different_ranges() {
        let times = Bounds {
            gte: Some("2026-03-02T18:40:05+00:00".into()),
            ..Bounds::default()
        };
        let c = range("created_at", &times).unwrap();
        assert!(format!("{c:?}").contains("DatetimeRange"), "{c:?}");
        let numbers = Bounds {
            lt: Some(3.5.into()),
            ..Bounds::default()
        };
        let c = range("metadata.weight", &numbers).unwrap();
        assert!(format!("{c:?}").contains("lt: Some(3.5)"), "{c:?}");
        let mixed = Bounds {
            gt: Some("2026-03-02T18:40:05+00:00".into()),
            lt: Some(3.into()),
            ..Bounds::default()
        };
        let err = range("created_at", &mixed).unwrap_err().to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }

    #[test]
    fn lists_to_match_hold_one_kind_of_value() {
        assert!(any_value("k", &["a".into(), "b".into()]).is_ok());
        assert!(any_value("k", &[1.into(), 2.into()]).is_ok());
        let err = any_value("k", &["a".into(), 2.into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("only strings or only whole numbers"), "{err}");
        let err = one_value("k", &1.5.into()).unwrap_err().to_string();
        assert!(err.contains("whole numbers"), "{err}");
    }
}
