//! A scripted OpenAI-compatible HTTP server for deterministic tests of mnemo: real HTTP on
//! 127.0.0.1, answers decided by the test, faults injected on demand.
//!
//! - [`ScriptedLlm`]: the server. It binds a free port, serves until dropped, and records every
//!   request it receives ([`RecordedRequest`]).
//! - `POST /v1/chat/completions` is answered by a handler, a closure from the parsed
//!   [`ChatRequest`] to a [`Reply`]: text or JSON (as a `chat.completion`, or as
//!   `chat.completion.chunk` events when the request streams), error statuses, malformed
//!   bodies, delays, hangs, and streams whose pieces arrive at set times. The default handler
//!   is [`echo`]; [`sequence`] and [`fail_first`] script calls in order. How each stream
//!   ended — whole, or cut short when the client went away — is recorded ([`StreamEnd`]).
//! - `GET /v1/models` lists one model; any other request is echoed back as JSON
//!   (`path`, `method`, `query`, `headers`, `body`) so pass-through tests see what arrived.
//!
//! ```
//! use mnemo_scripted_llm::{fail_first, ChatRequest, Reply, ScriptedLlm};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // "500 once, then answer extraction calls with facts".
//! let llm = ScriptedLlm::with_handler(fail_first(1, Reply::status(500, "boom"), |req: &ChatRequest| {
//!     match req.schema_name() {
//!         Some("facts") => Reply::Json(serde_json::json!({ "facts": ["Anne is my wife"] })),
//!         _ => Reply::text(format!("you said: {}", req.last_user_message().unwrap_or_default())),
//!     }
//! }))
//! .await;
//! let url = format!("{}/chat/completions", llm.base_url()); // http://127.0.0.1:PORT/v1/...
//! let body = serde_json::json!({ "model": "m", "messages": [{ "role": "user", "content": "hi" }] });
//! let http = reqwest::Client::new();
//! assert_eq!(http.post(&url).json(&body).send().await.unwrap().status(), 500);
//! assert_eq!(http.post(&url).json(&body).send().await.unwrap().status(), 200);
//! assert_eq!(llm.requests()[1].body.as_ref().unwrap()["model"], "m");
//! # }
//! ```
//!
//! The `mnemo-scripted-llm` binary runs the echo server as a process for tests outside Rust.

pub mod embeddings;
mod reply;
mod request;
mod server;

pub use axum::http;
pub use reply::{add_every_fact, echo, fail_first, learns_nothing, sequence, Reply, StreamEnd};
pub use request::{ChatRequest, RecordedRequest};
pub use server::{Handler, ScriptedLlm};
