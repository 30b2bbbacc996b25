//! The vector index: a rebuildable cache of the Markdown store, for fast filtered search.
//!
//! [`VectorIndex`] is the narrow interface the engine uses: upsert points (id, dense vector,
//! lexical sparse vector, payload mirroring the front matter), delete, filtered top-k by
//! either vector that can return the dense vectors, retrieve by id, count. [`EdgeIndex`]
//! implements it in-process on `qdrant-edge`; `mnemo-qdrant` implements it on a Qdrant server
//! or cluster, with the same vectors ([`DENSE_VECTOR`], [`LEXICAL_VECTOR`]) and payload.
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
mod vector_index;

pub use edge::{EdgeIndex, EdgeIndexOptions};

pub use filter::{Bounds, Condition, Filter};
pub use lexical::{LexicalEncoder, LexicalOptions};
pub use payload::PointPayload;
pub use vector_index::{
    Hit, IndexError, Point, Query, QueryVector, SparseVector, VectorIndex, DENSE_VECTOR,
    LEXICAL_VECTOR,
};
