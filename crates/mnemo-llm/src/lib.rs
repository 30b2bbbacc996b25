//! mnemo's client for the upstream LLM: any OpenAI-compatible `/v1/chat/completions` endpoint
//! (OpenAI, Ollama, llama.cpp server, vLLM).
//!
//! - [`LlmConfig`]: where the LLM is and how patient to be with it; validated once.
//! - [`LlmClient`]: the four ways mnemo talks upstream.
//!   [`chat`](LlmClient::chat) and [`chat_stream`](LlmClient::chat_stream) carry the agent's own
//!   requests, retrying transient failures (connection errors, timeouts, 429, 5xx) with
//!   exponential backoff; a stream is retried only until its response starts.
//!   [`complete_json`](LlmClient::complete_json) is for mnemo's own structured calls (fact
//!   extraction, reconciliation): it asks for a JSON schema, falls back to plain JSON mode on
//!   servers that refuse schemas, and turns anything unusable into
//!   [`LlmError::InvalidOutput`] so the engine can fall back.
//!   [`forward`](LlmClient::forward) passes every other request through unchanged.
//! - [`SseParser`] and [`DeltaAccumulator`]: read a streamed body as it is passed through, so
//!   the assistant's turn can be stored when the stream ends.
//! - [`end_to_end_headers`]: the headers a proxy may pass on (used by `forward`, and by
//!   mnemo's server on the way back).
//! - [`extract_json`]: find the one JSON value in a model's reply, fences and prose around it
//!   tolerated.
//!
//! - [`LocalLlm`]: the local LLM (llama.cpp through `xllamacpp`), started as a child process
//!   when no upstream is configured.
//!
//! Every error is one line naming the URL, the status and what came back.

mod client;
mod config;
mod error;
mod json;
mod local;
mod sse;

pub use client::{end_to_end_headers, ByteStream, ChatStream, LlmClient, MAX_ANSWER_BYTES};
pub use config::LlmConfig;
pub use error::LlmError;
/// The `http` types of this crate's API (headers, methods, status codes).
pub use http;
pub use json::{extract_json, ChatMessage, JsonSchema};
pub use local::{LocalLlm, LocalLlmOptions};
pub use sse::{DeltaAccumulator, SseEvent, SseParser};
