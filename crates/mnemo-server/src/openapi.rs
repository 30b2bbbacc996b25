//! `GET /openapi.json`: the API described as OpenAPI 3.1.
//!
//! The document is assembled from the routes themselves (each handler's `#[utoipa::path]`,
//! registered with `utoipa-axum`'s `routes!`) and the Rust types of their bodies; this module
//! adds the frame ([`ApiDoc`]) and the shape of a chat request, whose body mnemo reads as
//! free JSON.

use axum::extract::State;
use axum::Json;
use mnemo_engine::chat::ChatMemoryFields;
use serde_json::Value;
use utoipa::ToSchema;

use crate::AppState;

/// The document's frame: title, version and description; the paths come from the router.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "mnemo",
        description = "Long-term memory for LLM agents: an OpenAI-compatible proxy that remembers, and a REST API for the memories (Markdown files). Every path not described here is passed through to the upstream LLM unchanged."
    ),
    tags(
        (name = "chat", description = "The OpenAI-compatible chat endpoint, through memory"),
        (name = "memories", description = "The memories themselves"),
        (name = "conversations", description = "Per-conversation settings: the context strategy"),
        (name = "sessions", description = "Chat sessions: full logs, forks, compaction, context usage, archive search"),
        (name = "agents", description = "Agents' own notes (MEMORY.md)"),
        (name = "service", description = "The service's own state and description"),
    )
)]
pub struct ApiDoc;

/// An OpenAI chat completion request, plus mnemo's `memory_*` fields; every other field goes
/// upstream untouched.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatRequest {
    /// The upstream model.
    model: Option<String>,
    /// The conversation so far, as OpenAI chat messages.
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Value>,
    /// Stream the answer as server-sent events.
    stream: Option<bool>,
    /// mnemo's fields, taken out before forwarding.
    #[schema(inline)]
    #[serde(flatten)]
    memory: ChatMemoryFields,
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    responses((status = 200, description = "The OpenAPI document", body = Object))
)]
pub(crate) async fn document(State(state): State<AppState>) -> Json<utoipa::openapi::OpenApi> {
    Json(state.openapi.as_ref().clone())
}
