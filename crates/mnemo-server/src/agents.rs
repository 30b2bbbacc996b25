//! `/v1/agents/{agent}/memory`: an agent's own notes (`agents/<agent>/MEMORY.md`), read whole,
//! appended to, updated by find-and-replace; every change is committed to git.
//!
//! A chat request with `memory_agent` carries the notes' first 200 lines in its system prompt.
//!
//! With bearer tokens, a token uses only the notes of the agents its `agents` list names.

use axum::extract::{Path, State};
use axum::Json;
use mnemo_engine::Access as _;
use mnemo_engine::AgentMemory;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::auth::Grant;
use crate::body::JsonBody;
use crate::error::shared_answers::{BodyTooLarge, InvalidRequest, MayNotUseAgent};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// Text to append.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// Appended on a line of its own.
    pub text: String,
}

/// A find-and-replace.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// The passage to replace; it must occur exactly once.
    pub old_text: String,
    /// What replaces it.
    pub new_text: String,
}

/// An agent's notes.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent}/memory",
    tag = "agents",
    params(("agent" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, description = "The notes", body = AgentMemory),
        (status = 400, description = "Not an agent name", body = ErrorBody),
        MayNotUseAgent,
        (status = 500, description = "The file cannot be read; the message says why", body = ErrorBody),
    )
)]
pub(crate) async fn read(
    State(state): State<AppState>,
    grant: Grant,
    Path(agent): Path<String>,
) -> Result<Json<AgentMemory>, ApiError> {
    Ok(Json(state.caller(&grant).agent_memory(&agent).await?))
}

/// Append to an agent's notes.
#[utoipa::path(
    post,
    path = "/v1/agents/{agent}/memory",
    tag = "agents",
    params(("agent" = String, Path, description = "The agent's name")),
    request_body = AppendRequest,
    responses(
        (status = 200, description = "The notes after the change", body = AgentMemory),
        InvalidRequest,
        MayNotUseAgent,
        BodyTooLarge,
    )
)]
pub(crate) async fn append(
    State(state): State<AppState>,
    grant: Grant,
    Path(agent): Path<String>,
    JsonBody(request): JsonBody<AppendRequest>,
) -> Result<Json<AgentMemory>, ApiError> {
    grant.check_agent(&agent)?;
    Ok(Json(
        state
            .caller(&grant)
            .append_agent_memory(&agent, &request.text)
            .await?,
    ))
}

/// Replace one passage of an agent's notes; a passage that is absent or occurs more than once
/// is a 400 and nothing is written.
#[utoipa::path(
    patch,
    path = "/v1/agents/{agent}/memory",
    tag = "agents",
    params(("agent" = String, Path, description = "The agent's name")),
    request_body = UpdateRequest,
    responses(
        (status = 200, description = "The notes after the change", body = AgentMemory),
        (status = 400, description = "The passage is absent or ambiguous, or an invalid request", body = ErrorBody),
        MayNotUseAgent,
        BodyTooLarge,
    )
)]
pub(crate) async fn update(
    State(state): State<AppState>,
    grant: Grant,
    Path(agent): Path<String>,
    JsonBody(request): JsonBody<UpdateRequest>,
) -> Result<Json<AgentMemory>, ApiError> {
    grant.check_agent(&agent)?;
    Ok(Json(
        state
            .caller(&grant)
            .update_agent_memory(&agent, &request.old_text, &request.new_text)
            .await?,
    ))
}
