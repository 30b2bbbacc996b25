//! `/v1/conversations/{id}/...`: a conversation's stored context strategy, its usage totals,
//! a compaction asked for its next request, its offloaded tool outputs, and its conflicts
//! (pairs of facts about the same thing that say different things) with their resolution.
//!
//! The strategy is a hand-editable file in the store (`conversations/<id>/strategy.yaml`,
//! versioned in git). A chat request's own `memory_strategy` overrides it field by field, and
//! it overrides the agent's defaults from the configuration.
//!
//! Reading needs a token that may read the conversation; changing it, one that may write it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mnemo_core::ConversationId;
use mnemo_core::MemoryId;
use mnemo_engine::{Conflicts, HistoryScope, Resolution, Resolved, Strategy, UsageTotals};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Grant;
use crate::body::{JsonBody, OptionalJsonBody, QueryParams};
use crate::error::shared_answers::{
    BodyTooLarge, InvalidRequest, MayNotReadConversation, MayNotWriteConversation,
};
use crate::error::{ApiError, ErrorBody};
use crate::sessions::{CompactRequested, OutputQuery};
use crate::state::AppState;

/// A conversation's stored strategy.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationMemory {
    /// The conversation.
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// The fields it sets; unset fields fall back to the agent's strategy and the defaults.
    pub strategy: Strategy,
}

fn conversation(id: &str) -> Result<ConversationId, ApiError> {
    ConversationId::new(id).map_err(|e| ApiError::invalid(format!("conversation id: {e}")))
}

/// A conversation's stored context strategy.
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/memory",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    responses(
        (status = 200, description = "The stored strategy (empty when none is stored)", body = ConversationMemory),
        (status = 400, description = "Not a conversation id", body = ErrorBody),
        MayNotReadConversation,
        (status = 500, description = "The stored file cannot be used; the message says why", body = ErrorBody),
    )
)]
pub(crate) async fn get_strategy(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<ConversationMemory>, ApiError> {
    let conversation_id = conversation(&id)?;
    let strategy = state
        .caller(&grant)
        .conversation(&conversation_id)
        .strategy()
        .await?;
    Ok(Json(ConversationMemory {
        conversation_id,
        strategy,
    }))
}

/// Changes a conversation's stored context strategy.
///
/// The body is a JSON merge patch of strategy fields: a value sets a field, `null` removes it
/// (it then falls back to the agent's strategy and the defaults), fields not named stay. The
/// result is validated as a whole: an unknown field or a value out of range is a 400 naming
/// it, and nothing is written.
#[utoipa::path(
    patch,
    path = "/v1/conversations/{id}/memory",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    request_body(content = Strategy, description = "Strategy fields to set (null removes one)"),
    responses(
        (status = 200, description = "The stored strategy after the change", body = ConversationMemory),
        (status = 400, description = "Invalid id or strategy", body = ErrorBody),
        MayNotWriteConversation,
        BodyTooLarge,
    )
)]
pub(crate) async fn patch_strategy(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<ConversationMemory>, ApiError> {
    let conversation_id = conversation(&id)?;
    let strategy = state
        .caller(&grant)
        .conversation(&conversation_id)
        .patch_strategy(patch)
        .await?;
    Ok(Json(ConversationMemory {
        conversation_id,
        strategy,
    }))
}

/// Ask that the conversation's next chat request (outside any session) summarise its history
/// before it goes upstream, with an optional focus. The history is the client's, resent with
/// each request, so there is nothing to compact now: the summary is written on the way of
/// that request, whatever its strategy's triggers say.
#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/compact",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    request_body(content = ConversationCompactRequest, description = "Optional: a focus"),
    responses(
        (status = 202, description = "The next request compacts first", body = CompactRequested),
        InvalidRequest,
        MayNotWriteConversation,
        BodyTooLarge,
    )
)]
pub(crate) async fn compact(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    OptionalJsonBody(request): OptionalJsonBody<ConversationCompactRequest>,
) -> Result<Response, ApiError> {
    let conversation_id = conversation(&id)?;
    let focus = state
        .caller(&grant)
        .conversation(&conversation_id)
        .request_compact(request.focus)
        .await?;
    let requested = CompactRequested {
        target: "conversation",
        id: conversation_id.to_string(),
        focus,
    };
    Ok((StatusCode::ACCEPTED, Json(requested)).into_response())
}

/// What a conversation's chat answers took and cost upstream.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationUsage {
    /// The conversation.
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// Its answers' totals, its sessions' included.
    pub usage: UsageTotals,
}

/// The tokens and cost of a conversation's chat answers upstream, over its life (its
/// sessions' answers included): as the upstream reported them, or counted by mnemo where it
/// reported none; the cost where genai-prices knows the model.
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/usage",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    responses(
        (status = 200, description = "The totals (zero before the first answer)", body = ConversationUsage),
        InvalidRequest,
        MayNotReadConversation,
    )
)]
pub(crate) async fn usage(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<ConversationUsage>, ApiError> {
    let conversation_id = conversation(&id)?;
    let usage = state
        .caller(&grant)
        .conversation(&conversation_id)
        .usage()
        .await?;
    Ok(Json(ConversationUsage {
        conversation_id,
        usage,
    }))
}

/// What the next request's summary should focus on.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationCompactRequest {
    /// What the summary should keep above all.
    pub focus: Option<String>,
}

/// Read a tool output that governance offloaded for a request of this conversation (outside
/// any session), by offset and limit.
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/tool-outputs/{call_id}",
    tag = "conversations",
    params(
        ("id" = String, Path, description = "The conversation id"),
        ("call_id" = String, Path, description = "The tool call whose output was offloaded"),
        OutputQuery,
    ),
    responses(
        (status = 200, description = "The characters read and the output's length", body = mnemo_engine::ToolOutputSlice),
        InvalidRequest,
        MayNotReadConversation,
        (status = 404, description = "No such output", body = ErrorBody),
    )
)]
pub(crate) async fn tool_output(
    State(state): State<AppState>,
    grant: Grant,
    Path((id, call_id)): Path<(String, String)>,
    QueryParams(query): QueryParams<OutputQuery>,
) -> Result<Json<mnemo_engine::ToolOutputSlice>, ApiError> {
    let conversation_id = conversation(&id)?;
    let slice = state
        .caller(&grant)
        .tool_output(
            &HistoryScope::Conversation(conversation_id),
            &call_id,
            query.offset,
            query.limit,
        )
        .await?;
    Ok(Json(slice))
}

/// The open conflicts of a conversation: pairs of live facts about the same thing of the
/// same person that say different things, each with its days and the turns it came from.
/// Until a pair is resolved, the later fact holds when memories are injected.
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/conflicts",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    responses(
        (status = 200, description = "The open conflicts, earliest first", body = Conflicts),
        InvalidRequest,
        MayNotReadConversation,
    )
)]
pub(crate) async fn conflicts(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Conflicts>, ApiError> {
    let conversation_id = conversation(&id)?;
    Ok(Json(
        state.caller(&grant).conflicts(&conversation_id).await?,
    ))
}

/// How a person resolves one conflict.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveConflict {
    /// The earlier fact of the pair.
    #[schema(value_type = String, format = Uuid)]
    pub earlier: MemoryId,
    /// The later fact of the pair.
    #[schema(value_type = String, format = Uuid)]
    pub later: MemoryId,
    /// `keep_later` (the earlier is retired), `keep_earlier` (the later is) or `both_hold`.
    pub resolution: Resolution,
}

/// Resolve one conflict: keep the later fact, keep the earlier one, or say both hold. The
/// fact not kept is tombstoned with `replaced_by` the other and a `reason`; the change is
/// committed to git like any edit.
#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/conflicts/resolve",
    tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    request_body = ResolveConflict,
    responses(
        (status = 200, description = "Resolved", body = Resolved),
        InvalidRequest,
        MayNotWriteConversation,
        (status = 404, description = "No such open conflict in this conversation", body = ErrorBody),
        BodyTooLarge,
    )
)]
pub(crate) async fn resolve_conflict(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<ResolveConflict>,
) -> Result<Json<Resolved>, ApiError> {
    let conversation_id = conversation(&id)?;
    let resolved = state
        .caller(&grant)
        .resolve_conflict(
            &conversation_id,
            request.earlier,
            request.later,
            request.resolution,
        )
        .await?;
    Ok(Json(resolved))
}
