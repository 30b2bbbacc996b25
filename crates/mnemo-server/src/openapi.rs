//! `GET /openapi.json`: the API described as OpenAPI 3.1.
//!
//! The document is assembled from the routes themselves (each handler's `#[utoipa::path]`,
//! registered with `utoipa-axum`'s `routes!`) and the Rust types of their bodies; this module
//! adds the frame ([`ApiDoc`]), the bearer-token scheme, and the shape of a chat request,
//! whose body mnemo reads as free JSON.

use axum::extract::State;
use axum::Json;
use mnemo_engine::ChatMemoryFields;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, ToSchema};

/// The document's frame: title, version and description; the paths come from the router.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "mnemo",
        description = "Long-term memory for LLM agents: an OpenAI-compatible proxy that remembers, and a REST API for the memories (Markdown files). Every path not described here is passed through to the upstream LLM unchanged."
    ),
    modifiers(&BearerToken),
    // Either a token or none: which one a server wants depends on its configuration.
    security(("bearer" = []), ()),
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

/// Declares the `bearer` security scheme the document's `security` names.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "Required when the server is configured with tokens ([[server.tokens]] or MNEMO_API_TOKEN); \
                 GET /health and GET /openapi.json never need one. A token sees only the conversations \
                 and agents of its scope (403 otherwise).",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

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
    security(()),
    responses((status = 200, description = "The OpenAPI document", body = Object))
)]
pub(crate) async fn document(
    State(document): State<std::sync::Arc<utoipa::openapi::OpenApi>>,
) -> Json<utoipa::openapi::OpenApi> {
    Json(document.as_ref().clone())
}
