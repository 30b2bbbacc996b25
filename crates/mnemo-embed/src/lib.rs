//! The models mnemo runs: a sentence embedder and a cross-encoder reranker.
//!
//! [`runtime`] loads the ONNX Runtime shared library from a configured path, once per process
//! (mnemo never downloads it at build or run time). [`Embedder`] wraps a sentence-embedding
//! model in the all-MiniLM-L6-v2 format (ONNX graph plus Hugging Face tokenizer files, mean
//! pooling, L2-normalised output). [`Reranker`] wraps a cross-encoder in the
//! ms-marco-MiniLM-L-6-v2 format (a sequence-classification graph that reads a query and a
//! document as one pair and outputs `logits`). Both run through `fastembed` on the same
//! runtime. The embedder may instead be an OpenAI-compatible `/v1/embeddings` endpoint
//! ([`api`]): the same [`Embedder`] type, so nothing past it knows which.
//!
//! A missing library or model file is an [`EmbedError::Missing`] naming the path and the
//! set-up command, never a panic.

pub mod api;
mod embedder;
mod files;
mod reranker;
pub mod runtime;

pub use api::ApiEmbeddingsConfig;
pub use embedder::{cosine, Embedder, EmbedderConfig};
pub use reranker::{Reranker, RerankerConfig};

/// The command that installs the files this crate needs.
pub const SETUP_COMMAND: &str = "scripts/setup";

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A file the models need is not there: set-up has not run, or a path is misconfigured.
    #[error("{what} not found at {path}; run `{SETUP_COMMAND}` to install it")]
    Missing {
        /// What is missing, in words (`"the embedding model (tokenizer.json)"`).
        what: String,
        /// Where it was looked for.
        path: std::path::PathBuf,
    },
    /// The ONNX Runtime library would not load, or this process already loaded another one.
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime {
        /// The library asked for.
        path: std::path::PathBuf,
        /// Why it did not load.
        message: String,
    },
    /// The model's files are there, but the model does not load or does not run as expected.
    #[error("cannot load the model in {path}: {message}")]
    Model {
        /// The model's folder.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Running a loaded model failed; holds ONNX Runtime's message.
    #[error("inference failed: {0}")]
    Inference(String),
    /// An embeddings endpoint did not answer, or not with vectors.
    #[error("embeddings from {url}: {message}")]
    Api {
        /// The endpoint asked.
        url: String,
        /// What went wrong.
        message: String,
    },
}
