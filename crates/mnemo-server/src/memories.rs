//! The REST API for memories (`/v1/memories`), JSON in and out; described in `/openapi.json`.
//!
//! Each call checks its token's scope: the conversation named (add, search, list), or, for a
//! call by memory id, the conversation the memory belongs to, looked up first.

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, Metadata, Role};
use mnemo_engine::{SearchHit, SearchRequest};
use mnemo_git::FileVersion;
use mnemo_store::{FileStore, StoredMemory};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Grant;
use crate::body::{read_typed, QueryParams};
use crate::{ApiError, AppState, ErrorBody};

/// A memory as the API shows it; `path` is relative to the store.
#[derive(Debug, Serialize, ToSchema)]
pub struct Memory {
    /// The memory's id.
    #[schema(value_type = String, format = Uuid)]
    pub id: MemoryId,
    /// Its conversation.
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// `memory` (a fact), `user`, `assistant` or `summary`.
    #[schema(value_type = String)]
    pub role: Role,
    /// When it was said or learned.
    pub created_at: DateTime<Utc>,
    /// Its text.
    pub content: String,
    /// Its free-form metadata.
    #[schema(value_type = Object)]
    pub metadata: Metadata,
    /// The turn a fact was extracted from.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub source_id: Option<MemoryId>,
    /// On a tombstone of an updated fact: the fact that replaced it.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub replaced_by: Option<MemoryId>,
    /// Its file, relative to the store.
    #[schema(value_type = String)]
    pub path: PathBuf,
}

impl Memory {
    /// `memory` as the API shows it, its path made relative to the store.
    pub fn of(memory: &StoredMemory, store: &FileStore) -> Self {
        let r = &memory.record;
        Self {
            id: r.id,
            conversation_id: r.conversation_id.clone(),
            role: r.role,
            created_at: r.created_at,
            content: r.content.clone(),
            metadata: r.metadata.clone(),
            source_id: r.source_id,
            replaced_by: r.replaced_by,
            path: store.relative(&memory.path).as_ref().into(),
        }
    }
}

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
}

/// An updated fact: the old id, tombstoned, and the new one.
#[derive(Debug, Serialize, ToSchema)]
pub struct Updated {
    /// The fact that no longer holds.
    #[schema(value_type = String, format = Uuid)]
    pub old: MemoryId,
    /// The fact that replaced it.
    #[schema(value_type = String, format = Uuid)]
    pub new: MemoryId,
}

/// What remembering changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct AddResult {
    /// The conversation written to.
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// Facts written (new ones, and the new versions of updated ones).
    pub added: Vec<Memory>,
    /// Facts replaced by newer ones.
    pub updated: Vec<Updated>,
    /// Facts tombstoned because they no longer hold.
    #[schema(value_type = Vec<String>)]
    pub deleted: Vec<MemoryId>,
    /// Texts not written because the conversation already knows them (the reconciler said
    /// so). A text that retracts a fact shows as that fact in `deleted`; every other text is
    /// in `added` or `updated`.
    pub not_stored: Vec<String>,
    /// The git commit recording it, when versioning is on.
    pub commit: Option<String>,
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
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 403, description = "The token may not write this conversation", body = ErrorBody),
        (status = 413, description = "Request body too large", body = ErrorBody),
    )
)]
pub(crate) async fn add(
    State(state): State<AppState>,
    grant: Grant,
    body: Body,
) -> Result<Response, ApiError> {
    let request: AddRequest = read_typed(body, state.options.max_body_bytes).await?;
    let conversation = request.conversation_id.unwrap_or_default();
    grant.check_write(conversation.as_str())?;
    let mut texts = request.texts;
    texts.extend(request.content);
    if texts.is_empty() {
        return Err(ApiError::invalid(
            "give the memory as \"content\" or \"texts\"",
        ));
    }
    let report = state.client.add(texts, &conversation).await?;
    let store = state.client.store();
    let result = AddResult {
        conversation_id: conversation,
        added: report.added.iter().map(|m| Memory::of(m, store)).collect(),
        updated: report
            .updated
            .iter()
            .map(|&(old, new)| Updated { old, new })
            .collect(),
        deleted: report.deleted,
        not_stored: report.not_stored,
        commit: report.commit,
    };
    Ok((StatusCode::CREATED, Json(result)).into_response())
}

/// The answer to a search.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResult {
    /// The conversation searched (besides `global`).
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// The memories found, best first, with each stage's scores; paths relative to the store.
    pub hits: Vec<SearchHit>,
}

/// Search the memories of a conversation and of `global` (unless the token may not read
/// `global`).
#[utoipa::path(
    post,
    path = "/v1/memories/search",
    tag = "memories",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Results, best first, with each stage's scores", body = SearchResult),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 403, description = "The token may not read this conversation", body = ErrorBody),
        (status = 413, description = "Request body too large", body = ErrorBody),
    )
)]
pub(crate) async fn search(
    State(state): State<AppState>,
    grant: Grant,
    body: Body,
) -> Result<Json<SearchResult>, ApiError> {
    let mut request: SearchRequest = read_typed(body, state.options.max_body_bytes).await?;
    grant.check_read(request.conversation_id.as_str())?;
    request.without_global = !grant.reads_global();
    let conversation_id = request.conversation_id.clone();
    let store = state.client.store();
    // Store-relative paths only: an answer carries no server paths.
    let hits = state
        .client
        .search(request)
        .await?
        .into_iter()
        .map(|hit| SearchHit {
            path: store.relative(&hit.path).as_ref().into(),
            ..hit
        })
        .collect();
    Ok(Json(SearchResult {
        conversation_id,
        hits,
    }))
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

/// A page of memories.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryPage {
    /// Memories matching, in all.
    pub total: usize,
    /// How many were skipped.
    pub offset: usize,
    /// The page size asked for.
    pub limit: usize,
    /// This page, oldest first.
    pub items: Vec<Memory>,
}

/// List live memories, oldest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/memories",
    tag = "memories",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of memories", body = MemoryPage),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 403, description = "The token may not read this conversation", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<MemoryPage>, ApiError> {
    if let Some(conversation) = &query.conversation_id {
        grant.check_read(conversation.as_str())?;
    }
    let role = query
        .role
        .as_deref()
        .map(|r| {
            r.parse::<Role>()
                .map_err(|e| ApiError::invalid(e.to_string()))
        })
        .transpose()?;
    let limit = mnemo_core::page_size(query.limit, 50, "limit").map_err(ApiError::invalid)?;
    let memories: Vec<StoredMemory> = state
        .client
        .list(query.conversation_id)
        .await?
        .into_iter()
        .filter(|m| role.is_none_or(|r| m.record.role == r))
        .filter(|m| grant.can_read(m.record.conversation_id.as_str()))
        .collect();
    let store = state.client.store();
    let items = memories
        .iter()
        .skip(query.offset)
        .take(limit)
        .map(|m| Memory::of(m, store))
        .collect();
    Ok(Json(MemoryPage {
        total: memories.len(),
        offset: query.offset,
        limit,
        items,
    }))
}

/// One live memory.
#[utoipa::path(
    get,
    path = "/v1/memories/{id}",
    tag = "memories",
    params(("id" = String, Path, description = "The memory's id (a UUID)", format = Uuid)),
    responses(
        (status = 200, description = "The memory", body = Memory),
        (status = 400, description = "Not a memory id", body = ErrorBody),
        (status = 403, description = "The token may not read the memory's conversation", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
    )
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Memory>, ApiError> {
    let id = memory_id(&id)?;
    let memory = state
        .client
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no memory {id}")))?;
    grant.check_read(memory.record.conversation_id.as_str())?;
    Ok(Json(Memory::of(&memory, state.client.store())))
}

/// What a delete did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    /// The memory deleted.
    #[schema(value_type = String, format = Uuid)]
    pub deleted: MemoryId,
    /// Where its file went, relative to the store.
    #[schema(value_type = String)]
    pub tombstone: PathBuf,
}

/// Soft-delete a memory: its file moves under `deleted/`, and a commit records it.
#[utoipa::path(
    delete,
    path = "/v1/memories/{id}",
    tag = "memories",
    params(("id" = String, Path, description = "The memory's id (a UUID)", format = Uuid)),
    responses(
        (status = 200, description = "Deleted", body = Deleted),
        (status = 400, description = "Not a memory id", body = ErrorBody),
        (status = 403, description = "The token may not write the memory's conversation", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
    )
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    let id = memory_id(&id)?;
    if !grant.is_unrestricted() {
        let memory = state
            .client
            .get(id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no memory {id}")))?;
        // A memory never changes conversation (its folder decides it), so this still holds
        // when the delete runs.
        grant.check_write(memory.record.conversation_id.as_str())?;
    }
    let tombstone = state
        .client
        .delete(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no memory {id}")))?;
    Ok(Json(Deleted {
        deleted: id,
        tombstone: state.client.store().relative(&tombstone).as_ref().into(),
    }))
}

/// How much history to show.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// How many versions, newest first (50 when unset, at most 1000).
    #[param(minimum = 1)]
    limit: Option<usize>,
}

/// A memory's versions.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// The memory.
    #[schema(value_type = String, format = Uuid)]
    pub id: MemoryId,
    /// Its versions in git, newest first.
    pub versions: Vec<FileVersion>,
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
        (status = 400, description = "Not a memory id", body = ErrorBody),
        (status = 403, description = "The token may not read the memory's conversation", body = ErrorBody),
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
    // A live memory is checked before git is walked for it.
    if !grant.is_unrestricted() {
        if let Some(memory) = state.client.get(id).await? {
            grant.check_read(memory.record.conversation_id.as_str())?;
        }
    }
    let mut versions = state
        .client
        .history(id, query.limit.unwrap_or(50).min(mnemo_core::MAX_PAGE))
        .await?;
    if !grant.is_unrestricted() {
        versions = readable_versions(&grant, versions)?;
    }
    if versions.is_empty() {
        return Err(ApiError::not_found(state.client.no_history(id)));
    }
    Ok(Json(History { id, versions }))
}

/// The versions `grant` may read. A deleted memory is found in git only, so its conversation
/// is read off its versions' paths (`entries/<conversation>/...`: the folder decides). When
/// none is readable but one is in a conversation the token may not read, that is a 403
/// naming it; a version whose path names no conversation is shown to no restricted token.
fn readable_versions(
    grant: &Grant,
    versions: Vec<FileVersion>,
) -> Result<Vec<FileVersion>, ApiError> {
    let mut refused = None;
    let mut readable = Vec::with_capacity(versions.len());
    for version in versions {
        match mnemo_store::Location::parse(&version.path).map(|l| l.conversation) {
            Some(c) if grant.can_read(c.as_str()) => readable.push(version),
            Some(c) => refused = refused.or(Some(c)),
            None => {}
        }
    }
    if let (true, Some(conversation)) = (readable.is_empty(), refused) {
        grant.check_read(conversation.as_str())?;
    }
    Ok(readable)
}
