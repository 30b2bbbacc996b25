//! mnemo's HTTP API: an OpenAI-compatible memory proxy plus a REST API for memories.
//!
//! - `POST /v1/chat/completions` ([`chat`]) goes through the caller's
//!   `ScopedClient::chat` (`client.as_caller(access)`): memories injected, turns stored, the answer passed back (streamed chunk by
//!   chunk when asked), with `memory_hits` on non-streamed answers.
//! - `/v1/memories...` ([`memories`]): add, search, list (paged), get, delete, history.
//! - `/v1/conversations/{id}/memory` ([`conversations`]): a conversation's stored context
//!   strategy.
//! - `/v1/sessions...` ([`sessions`]): chat sessions' logs, forks, compaction, context usage,
//!   offloaded tool outputs; `/v1/history/search` searches their logs.
//! - `/v1/agents/{agent}/memory` ([`agents`]): an agent's own notes (`MEMORY.md`).
//! - `/mcp` ([`mcp`]): the same memory as MCP tools and resources, over streamable HTTP.
//! - `/ui/` (`web`, [`mnemo_web`]): the web view, HTML pages of the same memory; `GET /`
//!   sends a browser there.
//! - `GET /health` ([`health`]) and `GET /openapi.json` ([`openapi`]) describe the service;
//!   `GET /metrics` exposes Prometheus metrics (`metrics`).
//! - Every other request is passed to the upstream LLM unchanged (`passthrough`).
//!
//! Every route is registered together with its OpenAPI description (`utoipa-axum`'s
//! `routes!`), and request and response bodies are Rust types the schemas derive from, so the
//! document cannot drift from what is served.
//!
//! Before any handler, the `guard` module refuses requests for hosts mnemo does not serve (DNS
//! rebinding), from foreign browser origins, and bodies not declared `application/json`; then,
//! when tokens are configured, [`auth`] asks for a bearer token and hands the handlers its
//! scope, which each checks against the conversations and agents it touches.
//!
//! Handlers take the router's state (`state`: the memory client, the [`ServerOptions`], the
//! metrics, the web view's sign-ins) or only the part they need: the layers and the service
//! routes (`/health`, `/metrics`, `/openapi.json`, the web view's sign-in, the pass-through)
//! each take their own, so none of them reaches for the whole. Each module imports what it
//! uses from the module that defines it, never from this root.
//!
//! Errors are OpenAI-shaped JSON (`{"error": {"message", "type", "code"}}`, [`ApiError`]):
//! 400 for bad input, 401 without a known token, 403 out of its scope, 404, 409 for a deleted
//! session, 413 for oversized bodies, 502/504 when the upstream fails.
//! [`serve`] runs the router until a shutdown signal, then lets queued background writes
//! finish.

pub mod agents;
pub mod auth;
mod body;
pub mod chat;
pub mod conversations;
mod error;
mod guard;
pub mod health;
pub mod mcp;
pub mod memories;
mod metrics;
pub mod openapi;
mod options;
mod passthrough;
pub mod sessions;
mod state;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use mnemo_engine::MemoryClient;
use tokio::net::TcpListener;
use tracing::info;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::Auth;
pub use error::{ApiError, ErrorBody, ErrorCode};
pub use options::ServerOptions;

use body::BodyLimit;
use state::AppState;

/// The routes mnemo serves itself, each with its description.
fn documented_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(chat::chat_completions))
        .routes(routes!(health::health))
        .routes(routes!(openapi::document))
        .routes(routes!(memories::add, memories::list))
        .routes(routes!(memories::search))
        .routes(routes!(memories::get_one, memories::delete))
        .routes(routes!(memories::history))
        .routes(routes!(
            conversations::get_strategy,
            conversations::patch_strategy
        ))
        .routes(routes!(conversations::compact))
        .routes(routes!(conversations::usage))
        .routes(routes!(conversations::conflicts))
        .routes(routes!(conversations::resolve_conflict))
        .routes(routes!(conversations::tool_output))
        .routes(routes!(sessions::list, sessions::import))
        .routes(routes!(sessions::get_one, sessions::delete))
        .routes(routes!(sessions::messages))
        .routes(routes!(sessions::fork))
        .routes(routes!(sessions::export))
        .routes(routes!(sessions::compact))
        .routes(routes!(sessions::context))
        .routes(routes!(sessions::tool_output))
        .routes(routes!(sessions::search_history))
        .routes(routes!(agents::read, agents::append, agents::update))
        .routes(routes!(metrics::metrics))
}

/// The OpenAPI document of every route [`router`] serves.
pub fn api_document() -> utoipa::openapi::OpenApi {
    documented_routes().into_openapi()
}

/// The whole API as an axum router.
pub fn router(client: MemoryClient, options: ServerOptions) -> Router {
    let (routes, openapi) = documented_routes().split_for_parts();
    let state = AppState {
        client,
        options: Arc::new(options),
        started: Instant::now(),
        openapi: Arc::new(openapi),
        metrics: metrics::Metrics::new(),
        upstream_probe: health::ProbeCache::default(),
        web_sessions: Arc::default(),
    };
    // The last layer added runs first: the web view's headers, metrics, then the guard,
    // the web view's sign-in sessions, then authentication.
    let routes = mcp::mount(
        routes,
        state.client.clone(),
        BodyLimit(state.options.max_body_bytes),
    );
    web::mount(routes, state.client.clone())
        .fallback(passthrough::forward)
        .layer(axum::middleware::from_fn_with_state(
            state.options.auth.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            <web::WebSignIn as axum::extract::FromRef<AppState>>::from_ref(&state),
            web::sign_in_by_session,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.options.clone(),
            guard::check_request,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::time_requests,
        ))
        .layer(axum::middleware::from_fn(web::secure_web_answers))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves; requests in flight finish, then
/// the client's queued background writes, for at most `options.shutdown_grace` (what is left
/// stays journaled for the next start).
pub async fn serve(
    listener: TcpListener,
    client: MemoryClient,
    options: ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grace = options.shutdown_grace;
    let app = router(client.clone(), options);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    // The engines of searches as of a revision, and their folders, go now.
    client.close_revisions();
    info!(?grace, "finishing queued memory writes");
    if !client.wait_idle_for(grace).await {
        // Stopped before the caller stops the LLM they run on: a pass finishing against a
        // dead LLM would learn nothing and still be taken off the queue.
        client.stop_background_passes();
        client
            .wait_idle_for(std::time::Duration::from_secs(5))
            .await;
        tracing::warn!(
            passes = client.pending_passes(),
            "write-path passes left queued after the grace period; the next start resumes them"
        );
    }
    Ok(())
}
