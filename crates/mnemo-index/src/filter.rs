use serde_json::{json, Value};

/// A payload condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `key` equals `value` (string, integer or bool).
    Equals { key: String, value: Value },
    /// `key` equals one of `values`.
    AnyOf { key: String, values: Vec<Value> },
    /// `key` lies in a range: numbers, or RFC 3339 times (then compared as times).
    Range { key: String, bounds: Box<Bounds> },
    /// At least one of these filters holds.
    Either(Vec<Filter>),
}

/// Bounds of a [`Condition::Range`]; each is a number or an RFC 3339 string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    pub gt: Option<Value>,
    pub gte: Option<Value>,
    pub lt: Option<Value>,
    pub lte: Option<Value>,
}

impl Condition {
    pub fn equals(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Condition::Equals {
            key: key.into(),
            value: value.into(),
        }
    }

    pub fn any_of<V: Into<Value>>(
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Condition::AnyOf {
            key: key.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

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
    pub must: Vec<Condition>,
    pub must_not: Vec<Condition>,
}

impl Filter {
    pub fn all() -> Self {
        Self::default()
    }

    pub fn must(mut self, condition: Condition) -> Self {
        self.must.push(condition);
        self
    }

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
