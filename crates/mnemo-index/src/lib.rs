//! The vector index: a rebuildable cache of the Markdown store, for fast filtered search.
//!
//! [`VectorIndex`] is the narrow interface the engine uses: upsert points (id, dense vector,
//! lexical sparse vector, payload mirroring the front matter), delete, filtered top-k by
//! either vector that can return the dense vectors, retrieve by id, count. [`EdgeIndex`]
//! implements it in-process on `qdrant-edge`; a Qdrant server backend can implement the same
//! trait.
//!
//! Lexical search is BM25 split in two: [`LexicalEncoder`] turns text into term weights
//! (tokenising, stemming, term-frequency saturation), and the index multiplies them by each
//! term's inverse document frequency at query time, so IDF always reflects what the index
//! holds now.
//!
//! [`Filter`] is mnemo's own small filter language (conjunctions of payload conditions, ranges
//! and alternatives), so the engine does not depend on any backend's types.

mod edge;
mod filter;
mod lexical;
mod payload;

use mnemo_core::MemoryId;

pub use edge::{EdgeIndex, EdgeIndexOptions};
pub use filter::{Bounds, Condition, Filter};
pub use lexical::{LexicalEncoder, LexicalOptions};
pub use payload::PointPayload;

/// Term weights of a text: term ids (hashes) and their weights, ids ascending.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseVector {
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// One memory as the index holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub id: MemoryId,
    /// The dense embedding.
    pub vector: Vec<f32>,
    /// Lexical term weights ([`LexicalEncoder::document`]); empty for a text of stop words.
    pub lexical: SparseVector,
    /// The memory's front matter, content and file.
    pub payload: PointPayload,
}

/// What a query ranks by.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryVector {
    /// Cosine similarity to this dense vector.
    Dense(Vec<f32>),
    /// BM25 score of these query terms ([`LexicalEncoder::query`]).
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
    pub vector: QueryVector,
    pub filter: Filter,
    pub limit: usize,
    /// Return each hit's stored dense vector (MMR needs them).
    pub with_vectors: bool,
}

/// A point found by a query (or by [`VectorIndex::retrieve`], with score 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: MemoryId,
    /// Cosine similarity to a dense query, or BM25 score for a lexical one.
    pub score: f32,
    /// The memory's front matter, content and file.
    pub payload: PointPayload,
    /// The stored dense vector, when the query asked for it.
    pub vector: Option<Vec<f32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("vector index at {path}: {message}")]
    Open {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("vector has {got} dimensions, the index holds {expected}-dimensional vectors")]
    Dimension { expected: usize, got: usize },
    #[error("vector index operation failed: {0}")]
    Backend(String),
}

/// What mnemo needs from a vector index. Writes are visible to queries when the call
/// returns, and durable once [`flush`](VectorIndex::flush) returns (or the index is closed).
pub trait VectorIndex: Send + Sync {
    /// Makes every write so far durable.
    fn flush(&self) -> Result<(), IndexError>;
    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError>;
    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError>;
    /// Replaces the lexical vectors of existing points, keeping their dense vectors and
    /// payloads (a memory's lexical key also holds its neighbours' words, which change
    /// without the memory changing). An empty vector removes the point's lexical vector.
    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError>;
    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError>;
    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError>;
    fn count(&self, filter: &Filter) -> Result<usize, IndexError>;
    /// Every point id in the index (for consistency checks).
    fn ids(&self) -> Result<Vec<MemoryId>, IndexError>;
    /// Dimension of the dense vectors this index holds.
    fn dimension(&self) -> usize;
}
