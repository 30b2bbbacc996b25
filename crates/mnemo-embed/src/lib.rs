//! The ONNX models mnemo runs: a sentence embedder and a cross-encoder reranker.
//!
//! [`runtime`] loads the ONNX Runtime shared library from a configured path, once per process
//! (mnemo never downloads it at build or run time). [`Embedder`] wraps a sentence-embedding
//! model in the all-MiniLM-L6-v2 format (ONNX graph plus Hugging Face tokenizer files, mean
//! pooling, L2-normalised output). [`Reranker`] wraps a cross-encoder in the
//! ms-marco-MiniLM-L-6-v2 format (a sequence-classification graph that reads a query and a
//! document as one pair and outputs `logits`). Both run through `fastembed` on the same
//! runtime.
//!
//! A missing library or model file is an [`EmbedError::Missing`] naming the path and the
//! set-up command, never a panic.

mod embedder;
mod files;
mod reranker;
pub mod runtime;

pub use embedder::{cosine, Embedder, EmbedderConfig};
pub use reranker::{Reranker, RerankerConfig};

/// The command that installs the files this crate needs.
pub const SETUP_COMMAND: &str = "scripts/setup";

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("{what} not found at {path}; run `{SETUP_COMMAND}` to install it")]
    Missing {
        what: String,
        path: std::path::PathBuf,
    },
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot load the model in {path}: {message}")]
    Model {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("inference failed: {0}")]
    Inference(String),
}
