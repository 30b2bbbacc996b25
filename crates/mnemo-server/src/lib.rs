//! mnemo's HTTP API: an OpenAI-compatible memory proxy plus a REST API for memories.
//!
//! - `POST /v1/chat/completions` goes through [`MemoryClient::chat`] (or `chat_stream`):
//!   memories injected, turns stored, the answer passed back (streamed chunk by chunk when
//!   asked), with `memory_hits` on non-streamed answers.
//! - `/v1/memories...` ([`memories`]): add, search, list (paged), get, delete, history.
//! - `GET /health` and `GET /openapi.json` ([`openapi`]) describe the service.
//! - Every other request is passed to the upstream LLM unchanged ([`passthrough`]).
//!
//! Errors are OpenAI-shaped JSON (`{"error": {"message", "type", "code"}}`, [`ApiError`]):
//! 400 for bad input, 404, 413 for oversized bodies, 502/504 when the upstream fails.
//! [`serve`] runs the router until a shutdown signal, then lets queued background writes
//! finish.

mod error;
mod handlers;
pub mod memories;
pub mod openapi;
mod passthrough;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::routing::{get, post};
use axum::Router;
use mnemo_engine::MemoryClient;
use tokio::net::TcpListener;
use tracing::info;

pub use error::ApiError;

/// Limits and facts the server needs beyond the memory client.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Largest JSON body accepted, in bytes (chat requests, memory calls).
    pub max_body_bytes: usize,
    /// What the upstream is, for `/health` ("local LLM", or its URL).
    pub upstream_label: String,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            upstream_label: String::new(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub client: MemoryClient,
    pub options: Arc<ServerOptions>,
    pub started: Instant,
}

/// The whole API as an axum router.
pub fn router(client: MemoryClient, options: ServerOptions) -> Router {
    let state = AppState {
        client,
        options: Arc::new(options),
        started: Instant::now(),
    };
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/health", get(handlers::health))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/memories", post(memories::add).get(memories::list))
        .route("/v1/memories/search", post(memories::search))
        .route(
            "/v1/memories/{id}",
            get(memories::get_one).delete(memories::delete),
        )
        .route("/v1/memories/{id}/history", get(memories::history))
        .fallback(passthrough::forward)
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves; requests in flight finish, then
/// the client's queued background writes.
pub async fn serve(
    listener: TcpListener,
    client: MemoryClient,
    options: ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(client.clone(), options);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    info!("finishing queued memory writes");
    client.wait_idle().await;
    Ok(())
}
