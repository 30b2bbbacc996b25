//! The REST API for memories (`/v1/memories`), JSON in and out; described in `/openapi.json`.
//!
//! Each call checks its token's scope: the conversation named (add, search, list), or, for a
//! call by memory id, the conversation the memory belongs to, looked up first.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mnemo_core::{ConversationId, MemoryId, Metadata, Role};
use mnemo_engine::{AddResult, Deleted, History, Memory, MemoryPage, SearchResult};
use mnemo_engine::{MemoryListing, SearchRequest};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Grant;
use crate::body::{JsonBody, QueryParams};
use crate::error::shared_answers::{
    BodyTooLarge, DiskFull, InvalidRequest, MayNotReadConversation, MayNotReadMemory,
    MayNotWriteConversation, NoSuchMemory, NotAMemoryId,
};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

fn memory_id(raw: &str) -> Result<MemoryId, ApiError> {
    raw.parse::<MemoryId>()
        .map_err(|e| ApiError::invalid(e.to_string()))
}

/// What to remember: one text (`content`) or several (`texts`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    /// Several texts, one fact each.
    #[serde(default)]
    pub texts: Vec<String>,
    /// One text.
    #[serde(default)]
    pub content: Option<String>,
    /// The conversation; `default` when unset.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub conversation_id: Option<ConversationId>,
    /// Metadata for every fact the add writes (at most 16 levels and 16 KiB), for filters.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Metadata,
}

/// Remember texts as facts.
///
/// Each text is reconciled with the conversation's facts (ADD/UPDATE/DELETE), then the
/// summary is updated and the change committed.
#[utoipa::path(
    post,
    path = "/v1/memories",
    tag = "memories",
    request_body = AddRequest,
    responses(
        (status = 201, description = "What changed", body = AddResult),
        InvalidRequest,
        MayNotWriteConversation,
        BodyTooLarge,
        DiskFull,
    )
)]
pub(crate) async fn add(
    State(state): State<AppState>,
    grant: Grant,
    JsonBody(request): JsonBody<AddRequest>,
) -> Result<Response, ApiError> {
    let conversation = request.conversation_id.unwrap_or_default();
    let mut texts = request.texts;
    texts.extend(request.content);
    let result = state
        .caller(&grant)
        .add(texts, &conversation, request.metadata)
        .await?;
    Ok((StatusCode::CREATED, Json(result)).into_response())
}

/// Where in the store's history a search looks.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// Answer from the memories as they were at this git revision: a commit hash or a
    /// prefix of one, `HEAD~3`, a branch. The first search as of a revision indexes that
    /// revision's memories (seconds for a large store); the last two revisions asked about
    /// stay ready. Unset: the memories as they are.
    #[param(max_length = 256)]
    as_of: Option<String>,
}

/// Search the memories of a conversation and of `global` (unless the token may not read
/// `global`), as they are or, with `as_of`, as they were at a git revision.
#[utoipa::path(
    post,
    path = "/v1/memories/search",
    tag = "memories",
    params(SearchQuery),
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Results, best first, with each stage's scores; with `as_of`, the commit they are as of", body = SearchResult),
        (status = 400, description = "Invalid request, or `as_of` on a store without git versioning", body = ErrorBody),
        MayNotReadConversation,
        (status = 404, description = "`as_of` names no commit of the store's history", body = ErrorBody),
        BodyTooLarge,
    )
)]
pub(crate) async fn search(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(query): QueryParams<SearchQuery>,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Json<SearchResult>, ApiError> {
    let caller = state.caller(&grant);
    let result = match query.as_of {
        Some(rev) => caller.search_as_of(&rev, request).await?,
        None => caller.search(request).await?,
    };
    Ok(Json(result))
}

/// Which memories to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this conversation; unset, every conversation the token may read.
    #[param(value_type = Option<String>)]
    conversation_id: Option<ConversationId>,
    /// Only this role: `memory`, `user`, `assistant` or `summary`.
    role: Option<String>,
    /// How many to skip.
    #[serde(default)]
    offset: usize,
    /// How many to return, 1..1000 (50 when unset).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// List live memories, oldest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/memories",
    tag = "memories",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of memories", body = MemoryPage),
        InvalidRequest,
        MayNotReadConversation,
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<MemoryPage>, ApiError> {
    let role = query
        .role
        .as_deref()
        .map(|r| {
            r.parse::<Role>()
                .map_err(|e| ApiError::invalid(e.to_string()))
        })
        .transpose()?;
    let listing = MemoryListing {
        conversation: query.conversation_id,
        role,
        offset: query.offset,
        limit: query.limit,
    };
    Ok(Json(state.caller(&grant).list(listing).await?))
}

/// One live memory.
#[utoipa::path(
    get,
    path = "/v1/memories/{id}",
    tag = "memories",
    params(("id" = String, Path, description = "The memory's id (a UUID)", format = Uuid)),
    responses(
        (status = 200, description = "The memory", body = Memory),
        NotAMemoryId,
        MayNotReadMemory,
        NoSuchMemory,
    )
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Memory>, ApiError> {
    let id = memory_id(&id)?;
    Ok(Json(state.caller(&grant).get(id).await?))
}

/// Soft-delete a memory: its file moves under `deleted/`, and a commit records it.
#[utoipa::path(
    delete,
    path = "/v1/memories/{id}",
    tag = "memories",
    params(("id" = String, Path, description = "The memory's id (a UUID)", format = Uuid)),
    responses(
        (status = 200, description = "Deleted", body = Deleted),
        NotAMemoryId,
        (status = 403, description = "The token may not write the memory's conversation", body = ErrorBody),
        NoSuchMemory,
    )
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    let id = memory_id(&id)?;
    Ok(Json(state.caller(&grant).delete(id).await?))
}

/// How much history to show.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// How many versions, newest first (50 when unset, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// Every version of a memory in git, newest first.
#[utoipa::path(
    get,
    path = "/v1/memories/{id}/history",
    tag = "memories",
    params(
        ("id" = String, Path, description = "The memory's id (a UUID)", format = Uuid),
        HistoryQuery,
    ),
    responses(
        (status = 200, description = "Versions", body = History),
        NotAMemoryId,
        MayNotReadMemory,
        (status = 404, description = "No history", body = ErrorBody),
    )
)]
pub(crate) async fn history(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<History>, ApiError> {
    let id = memory_id(&id)?;
    Ok(Json(state.caller(&grant).history(id, query.limit).await?))
}
