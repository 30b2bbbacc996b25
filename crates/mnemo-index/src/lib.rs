//! The vector index: a rebuildable cache of the Markdown store, for fast filtered search.
//!
//! [`VectorIndex`] is the narrow interface the engine uses: upsert points (id, dense vector,
//! payload mirroring the front matter), delete, filtered top-k that can return vectors,
//! retrieve by id, count. [`EdgeIndex`] implements it in-process on `qdrant-edge`; a Qdrant
//! server backend can implement the same trait.
//!
//! [`Filter`] is mnemo's own small filter language (conjunctions of payload conditions), so the
//! engine does not depend on any backend's types.

mod edge;
mod filter;

use mnemo_core::MemoryId;

pub use edge::{EdgeIndex, EdgeIndexOptions};
pub use filter::{Condition, Filter};

/// Payload stored with each point: JSON fields mirroring the memory's front matter.
pub type Payload = serde_json::Map<String, serde_json::Value>;

/// One memory as the index holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub id: MemoryId,
    pub vector: Vec<f32>,
    pub payload: Payload,
}

/// A nearest-neighbour query.
#[derive(Debug, Clone)]
pub struct Query {
    pub vector: Vec<f32>,
    pub filter: Filter,
    pub limit: usize,
    /// Return each hit's stored vector (MMR needs them).
    pub with_vectors: bool,
}

/// A point found by a query (or by [`VectorIndex::retrieve`], with score 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: MemoryId,
    /// Cosine similarity to the query vector.
    pub score: f32,
    pub payload: Payload,
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

/// What mnemo needs from a vector index. Writes are durable when the call returns.
pub trait VectorIndex: Send + Sync {
    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError>;
    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError>;
    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError>;
    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError>;
    fn count(&self, filter: &Filter) -> Result<usize, IndexError>;
    /// Every point id in the index (for consistency checks).
    fn ids(&self) -> Result<Vec<MemoryId>, IndexError>;
    /// Dimension of the dense vectors this index holds.
    fn dimension(&self) -> usize;
}
