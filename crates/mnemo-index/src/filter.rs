//! [`Filter`]: mnemo's own filter language for points, independent of any backend.
//!
//! A filter is a conjunction of [`Condition`]s on payload fields (equality, membership, ranges,
//! and alternatives through [`Condition::Either`]), plus conditions that must not hold. It is
//! translated to Qdrant's JSON filter language here (`to_qdrant_json`), which the embedded
//! backend and a Qdrant server both read. Keys name payload fields as
//! [`PointPayload`](crate::PointPayload) stores them; a metadata key is `metadata.<key>`.

use serde_json::{json, Value};

/// A payload condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `key` equals `value` (string, integer or bool).
    Equals {
        /// The payload field, e.g. `role` or `metadata.topic`.
        key: String,
        /// The value it must equal.
        value: Value,
    },
    /// `key` equals one of `values`.
    AnyOf {
        /// The payload field.
        key: String,
        /// The values it may equal.
        values: Vec<Value>,
    },
    /// `key` lies in a range: numbers, or RFC 3339 times (then compared as times).
    Range {
        /// The payload field.
        key: String,
        /// The bounds it must lie within (boxed to keep the enum small).
        bounds: Box<Bounds>,
    },
    /// At least one of these filters holds.
    Either(Vec<Filter>),
}

/// Bounds of a [`Condition::Range`]; each is a number or an RFC 3339 string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    /// Strictly greater than this.
    pub gt: Option<Value>,
    /// Greater than or equal to this.
    pub gte: Option<Value>,
    /// Strictly less than this.
    pub lt: Option<Value>,
    /// Less than or equal to this.
    pub lte: Option<Value>,
}

impl Condition {
    /// `key` equals `value`.
    pub fn equals(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Condition::Equals {
            key: key.into(),
            value: value.into(),
        }
    }

    /// `key` equals one of `values`.
    pub fn any_of<V: Into<Value>>(
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Condition::AnyOf {
            key: key.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// `key` lies within `bounds`.
    pub fn range(key: impl Into<String>, bounds: Bounds) -> Self {
        Condition::Range {
            key: key.into(),
            bounds: Box::new(bounds),
        }
    }

    /// The condition in Qdrant's JSON filter language.
    pub(crate) fn to_qdrant_json(&self) -> Value {
        match self {
            Condition::Equals { key, value } => json!({"key": key, "match": {"value": value}}),
            Condition::AnyOf { key, values } => json!({"key": key, "match": {"any": values}}),
            Condition::Range { key, bounds } => {
                let mut range = serde_json::Map::new();
                for (op, bound) in [
                    ("gt", &bounds.gt),
                    ("gte", &bounds.gte),
                    ("lt", &bounds.lt),
                    ("lte", &bounds.lte),
                ] {
                    if let Some(bound) = bound {
                        range.insert(op.to_owned(), bound.clone());
                    }
                }
                json!({"key": key, "range": range})
            }
            Condition::Either(filters) => {
                let any: Vec<Value> = filters.iter().map(Filter::to_qdrant_json).collect();
                json!({"should": any})
            }
        }
    }
}

/// All of `must` hold and none of `must_not` does. The empty filter matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Conditions that must all hold.
    pub must: Vec<Condition>,
    /// Conditions none of which may hold.
    pub must_not: Vec<Condition>,
}

impl Filter {
    /// The empty filter, which matches every point.
    pub fn all() -> Self {
        Self::default()
    }

    /// The same filter, also requiring `condition`.
    pub fn must(mut self, condition: Condition) -> Self {
        self.must.push(condition);
        self
    }

    /// The same filter, also excluding points that meet `condition`.
    pub fn must_not(mut self, condition: Condition) -> Self {
        self.must_not.push(condition);
        self
    }

    /// Both filters must hold.
    pub fn and(mut self, other: Filter) -> Self {
        self.must.extend(other.must);
        self.must_not.extend(other.must_not);
        self
    }

    /// Whether the filter has no conditions, and so matches everything.
    pub fn is_empty(&self) -> bool {
        self.must.is_empty() && self.must_not.is_empty()
    }

    /// The filter in Qdrant's JSON filter language, understood by every Qdrant backend.
    pub(crate) fn to_qdrant_json(&self) -> Value {
        let list = |conds: &[Condition]| {
            conds
                .iter()
                .map(Condition::to_qdrant_json)
                .collect::<Vec<_>>()
        };
        json!({"must": list(&self.must), "must_not": list(&self.must_not)})
    }
}
