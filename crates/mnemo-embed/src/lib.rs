//! Text embeddings on ONNX Runtime.
//!
//! [`runtime`] loads the ONNX Runtime shared library from a configured path, once per process
//! (mnemo never downloads it at build or run time). [`Embedder`] wraps a sentence-embedding
//! model in the all-MiniLM-L6-v2 format (ONNX graph plus Hugging Face tokenizer files, mean
//! pooling, L2-normalised output) through `fastembed`.
//!
//! A missing library or model file is an [`EmbedError::Missing`] naming the path and the
//! set-up command, never a panic.

mod embedder;
pub mod runtime;

pub use embedder::{cosine, Embedder, EmbedderConfig};

/// The command that installs the files this crate needs.
pub const SETUP_COMMAND: &str = "scripts/setup";

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("{what} not found at {path}; run `{SETUP_COMMAND}` to install it")]
    Missing {
        what: &'static str,
        path: std::path::PathBuf,
    },
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot load the embedding model from {path}: {message}")]
    Model {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("embedding failed: {0}")]
    Inference(String),
}
