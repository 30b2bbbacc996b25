//! The models mnemo runs: a sentence embedder and a cross-encoder reranker.
//!
//! [`runtime`] loads the ONNX Runtime shared library from a configured path, once per process
//! (mnemo never downloads it at build or run time). [`Embedder`] wraps a sentence-embedding
//! model in the all-MiniLM-L6-v2 format (ONNX graph plus Hugging Face tokenizer files, mean
//! pooling, L2-normalised output); a text longer than the model was trained on is read in
//! windows whose vectors are averaged. [`Reranker`] wraps a cross-encoder in the
//! ms-marco-MiniLM-L-6-v2 format (a sequence-classification graph that reads a query and a
//! document as one pair and outputs `logits`). Both run through `fastembed` on the same
//! runtime. The embedder may instead be an OpenAI-compatible `/v1/embeddings` endpoint
//! ([`api`]): the same [`Embedder`] type, so nothing past it knows which.
//!
//! A missing library or model file is an [`EmbedError::Missing`] naming the path and the
//! set-up command, never a panic.

pub mod api;
mod embedder;
mod error;
mod files;
mod recent;
mod reranker;
pub mod runtime;
mod windows;

pub use api::ApiEmbeddingsConfig;
pub use embedder::{cosine, Embedder, EmbedderConfig, TOKENS_PER_RUN};
pub use error::{EmbedError, SETUP_COMMAND};
pub use recent::Recent;
pub use reranker::{Reranker, RerankerConfig};
