//! [`VectorIndex`], the narrow interface every backend implements, and the types it speaks:
//! points, queries, hits, sparse vectors, errors, and the names of the two vectors.

use mnemo_core::MemoryId;

use crate::filter::Filter;
use crate::payload::PointPayload;

/// Name of the dense vector, in every backend.
pub const DENSE_VECTOR: &str = "dense";
/// Name of the sparse (lexical) vector, weighted by IDF at query time, in every backend.
pub const LEXICAL_VECTOR: &str = "lexical";

/// Term weights of a text: term ids (hashes) and their weights, ids ascending.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVector {
    /// Term ids, ascending and distinct.
    pub indices: Vec<u32>,
    /// The weight of each term in `indices`, in the same order.
    pub values: Vec<f32>,
}

impl SparseVector {
    /// Whether the text had no terms (empty, or stop words only).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Adds the terms of `other` that `self` lacks, each at `weight` times its own weight;
    /// the terms `self` has keep their weights. At weight 0 nothing is added: a term in a
    /// query matches whatever its weight, even at 0.
    pub fn add_missing_terms(&mut self, other: &SparseVector, weight: f32) {
        if weight <= 0.0 {
            return;
        }
        let mut terms: std::collections::BTreeMap<u32, f32> = self
            .indices
            .iter()
            .copied()
            .zip(self.values.iter().copied())
            .collect();
        for (&term, &value) in other.indices.iter().zip(&other.values) {
            terms.entry(term).or_insert(weight * value);
        }
        (self.indices, self.values) = terms.into_iter().unzip();
    }
}

/// One memory as the index holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The memory's id, which is the point's id.
    pub id: MemoryId,
    /// The dense embedding.
    pub vector: Vec<f32>,
    /// Lexical term weights ([`crate::LexicalEncoder::document`]); empty for a text of stop words.
    pub lexical: SparseVector,
    /// The memory's front matter, content and file.
    pub payload: PointPayload,
}

/// What a query ranks by.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryVector {
    /// Cosine similarity to this dense vector.
    Dense(Vec<f32>),
    /// BM25 score of these query terms ([`crate::LexicalEncoder::query`]).
    Lexical(SparseVector),
}

impl From<Vec<f32>> for QueryVector {
    fn from(v: Vec<f32>) -> Self {
        QueryVector::Dense(v)
    }
}

/// A filtered top-k query.
#[derive(Debug, Clone)]
pub struct Query {
    /// What to rank by: a dense embedding or lexical query terms.
    pub vector: QueryVector,
    /// Only points matching this are considered.
    pub filter: Filter,
    /// At most this many hits, best first.
    pub limit: usize,
    /// Return each hit's stored dense vector (MMR needs them).
    pub with_vectors: bool,
}

/// A point found by a query (or by [`VectorIndex::retrieve`], with score 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The memory's id.
    pub id: MemoryId,
    /// Cosine similarity to a dense query, or BM25 score for a lexical one.
    pub score: f32,
    /// The memory's front matter, content and file.
    pub payload: PointPayload,
    /// The stored dense vector, when the query asked for it.
    pub vector: Option<Vec<f32>>,
}

/// Why an index operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The index could not be opened or created (a damaged folder, or one built for another
    /// embedding dimension).
    #[error("vector index at {path}: {message}")]
    Open {
        /// The index's folder.
        path: std::path::PathBuf,
        /// What went wrong, with what to do about it where known.
        message: String,
    },
    /// A vector's dimension differs from the index's: the embedding model changed.
    #[error("vector has {got} dimensions, the index holds {expected}-dimensional vectors")]
    Dimension {
        /// The dimension of the index's dense vectors.
        expected: usize,
        /// The dimension of the vector given.
        got: usize,
    },
    /// The index's server does not answer (down, unreachable, or too slow): the operation
    /// may succeed if tried again later.
    #[error("the vector index at {url} does not answer: {message}")]
    Unavailable {
        /// The server's URL.
        url: String,
        /// What the client saw.
        message: String,
    },
    /// The index's disk has no room for a write: it was not tried.
    #[error("no room on the disk of the vector index in {path} ({free} bytes free): {source}")]
    NoRoom {
        /// The index's folder.
        path: std::path::PathBuf,
        /// Bytes free there.
        free: u64,
        /// The error a write would have met (storage full).
        source: std::io::Error,
    },
    /// The backend refused an operation; holds its message.
    #[error("vector index operation failed: {0}")]
    Backend(String),
}

/// What mnemo needs from a vector index. Writes are visible to queries when the call
/// returns, and durable once [`flush`](VectorIndex::flush) returns (or the index is closed).
pub trait VectorIndex: Send + Sync {
    /// Makes every write so far durable.
    fn flush(&self) -> Result<(), IndexError>;
    /// Gives back what deleted and rewritten points leave behind, where the backend leaves
    /// that to its user (the embedded engine; a Qdrant server does it by itself). Cheap
    /// when there is nothing to do; returns whether anything was rewritten. Searches and
    /// writes go on meanwhile.
    fn compact(&self) -> Result<bool, IndexError> {
        Ok(false)
    }
    /// Inserts the points, replacing any with the same id (vectors and payload alike).
    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError>;
    /// Removes the points with these ids; ids not in the index are ignored.
    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError>;
    /// Replaces the lexical vectors of existing points, keeping their dense vectors and
    /// payloads (a memory's lexical key also holds its neighbours' words, which change
    /// without the memory changing). An empty vector removes the point's lexical vector.
    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError>;
    /// The best `query.limit` points matching `query.filter`, best first. A lexical query with
    /// no terms finds nothing.
    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError>;
    /// The points with these ids (those not in the index are left out), each with score 0;
    /// with `with_vectors`, their dense vectors too.
    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError>;
    /// How many points match `filter`, exactly.
    fn count(&self, filter: &Filter) -> Result<usize, IndexError>;
    /// Every point id in the index (for consistency checks).
    fn ids(&self) -> Result<Vec<MemoryId>, IndexError>;
    /// Dimension of the dense vectors this index holds.
    fn dimension(&self) -> usize;
}

#[cfg(test)]
mod tests {
    use super::SparseVector;

    #[test]
    fn added_terms_are_weighted_and_kept_in_order() {
        let mut query = SparseVector {
            indices: vec![3, 9],
            values: vec![1.0, 2.0],
        };
        let words = SparseVector {
            indices: vec![1, 9, 12],
            values: vec![1.0, 1.0, 2.0],
        };
        query.add_missing_terms(&words, 0.25);
        assert_eq!(query.indices, vec![1, 3, 9, 12]);
        assert_eq!(
            query.values,
            vec![0.25, 1.0, 2.0, 0.5],
            "term 9 keeps its own weight"
        );
        let before = query.clone();
        query.add_missing_terms(
            &SparseVector {
                indices: vec![5],
                values: vec![1.0],
            },
            0.0,
        );
        assert_eq!(query, before);
    }
}
