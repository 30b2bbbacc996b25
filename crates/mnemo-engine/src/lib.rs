//! The memory engine: what `mnemo` does with the store, the embedder and the index together.
//!
//! [`MemoryClient`] is the library entry point (`add`, `search`, `list`). Opening one loads
//! the embedding model, opens the vector index under `<memory_path>/index/` and runs a
//! [`sync`] pass that brings the index in step with the Markdown files, which are the source
//! of truth: new or changed files are embedded, points whose files are gone are deleted, and
//! `memory_index.json` records what the index holds.

pub mod chat;
mod client;
mod error;
pub mod filter;
pub mod inject;
pub mod keys;
pub mod prompts;
pub mod retrieval;
pub mod sync;
pub mod timeline;
pub mod watcher;
mod write;

pub use client::{Consistency, MemoryClient, OpenOptions};
pub use error::EngineError;
pub use retrieval::{SearchHit, SearchOptions, StageScores};
pub use sync::{SyncProgress, SyncReport};
pub use watcher::WatcherHandle;
pub use write::WriteReport;
