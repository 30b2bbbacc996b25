use serde_json::{json, Value};

/// A payload condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `key` equals `value` (string, integer or bool).
    Equals { key: String, value: Value },
    /// `key` equals one of `values`.
    AnyOf { key: String, values: Vec<Value> },
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

    /// The condition in Qdrant's JSON filter language.
    pub(crate) fn to_qdrant_json(&self) -> Value {
        match self {
            Condition::Equals { key, value } => json!({"key": key, "match": {"value": value}}),
            Condition::AnyOf { key, values } => json!({"key": key, "match": {"any": values}}),
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
