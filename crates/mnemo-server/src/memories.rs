//! The REST API for memories (`/v1/memories`), JSON in and out; described in `/openapi.json`.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mnemo_core::{ConversationId, MemoryId, Role};
use mnemo_engine::SearchOptions;
use mnemo_store::StoredMemory;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::handlers::read_json;
use crate::{ApiError, AppState};

/// Most memories one list page may hold.
pub const MAX_PAGE: usize = 1000;

/// A memory as the API shows it; `path` is relative to the store.
pub fn memory_json(memory: &StoredMemory, root: &std::path::Path) -> Value {
    let r = &memory.record;
    json!({
        "id": r.id,
        "conversation_id": r.conversation_id,
        "role": r.role,
        "created_at": r.created_at,
        "content": r.content,
        "metadata": r.metadata,
        "source_id": r.source_id,
        "replaced_by": r.replaced_by,
        "path": memory.path.strip_prefix(root).unwrap_or(&memory.path),
    })
}

fn conversation(raw: Option<&str>) -> Result<ConversationId, ApiError> {
    match raw {
        None => Ok(ConversationId::default_conversation()),
        Some(raw) => ConversationId::new(raw).map_err(|e| ApiError::invalid(e.to_string())),
    }
}

fn memory_id(raw: &str) -> Result<MemoryId, ApiError> {
    raw.parse::<MemoryId>()
        .map_err(|e| ApiError::invalid(e.to_string()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    #[serde(default)]
    texts: Vec<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    conversation_id: Option<String>,
}

/// `POST /v1/memories`: remember texts as facts (reconciled with what is known).
pub(crate) async fn add(State(state): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let request: AddRequest = parse(read_json(body, state.options.max_body_bytes).await?)?;
    let conversation = conversation(request.conversation_id.as_deref())?;
    let mut texts = request.texts;
    texts.extend(request.content);
    if texts.is_empty() {
        return Err(ApiError::invalid(
            "give the memory as \"content\" or \"texts\"",
        ));
    }
    let report = state.client.add(texts, &conversation).await?;
    let root = state.client.store().root();
    let body = json!({
        "conversation_id": conversation,
        "added": report.added.iter().map(|m| memory_json(m, root)).collect::<Vec<_>>(),
        "updated": report.updated.iter().map(|(old, new)| json!({"old": old, "new": new})).collect::<Vec<_>>(),
        "deleted": report.deleted,
        "commit": report.commit,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchRequest {
    query: String,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    top_k: Option<usize>,
    #[serde(default)]
    recency_weight: Option<f32>,
    #[serde(default)]
    mmr_lambda: Option<f32>,
    #[serde(default)]
    score_threshold: Option<f32>,
    #[serde(default)]
    filter: Option<Value>,
}

/// `POST /v1/memories/search`: the read path, with every stage's scores.
pub(crate) async fn search(
    State(state): State<AppState>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let request: SearchRequest = parse(read_json(body, state.options.max_body_bytes).await?)?;
    let conversation = conversation(request.conversation_id.as_deref())?;
    let top_k = request.top_k.unwrap_or(state.client.config().default_top_k);
    if top_k > MAX_PAGE {
        return Err(ApiError::invalid(format!(
            "top_k may be at most {MAX_PAGE}"
        )));
    }
    let options = SearchOptions {
        top_k,
        recency_weight: request.recency_weight,
        mmr_lambda: request.mmr_lambda,
        score_threshold: request.score_threshold,
        filter: request.filter,
        now: None,
    };
    let hits = state
        .client
        .search(&request.query, &conversation, options)
        .await?;
    Ok(Json(
        json!({ "conversation_id": conversation, "hits": hits }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    conversation_id: Option<String>,
    role: Option<String>,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

/// `GET /v1/memories`: live memories, oldest first, a page at a time.
pub(crate) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let conversation = query
        .conversation_id
        .as_deref()
        .map(|c| conversation(Some(c)))
        .transpose()?;
    let role = query
        .role
        .as_deref()
        .map(|r| {
            r.parse::<Role>()
                .map_err(|e| ApiError::invalid(e.to_string()))
        })
        .transpose()?;
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let memories: Vec<StoredMemory> = state
        .client
        .list(conversation)
        .await?
        .into_iter()
        .filter(|m| role.is_none_or(|r| m.record.role == r))
        .collect();
    let root = state.client.store().root();
    let items: Vec<Value> = memories
        .iter()
        .skip(query.offset)
        .take(limit)
        .map(|m| memory_json(m, root))
        .collect();
    Ok(Json(json!({
        "total": memories.len(),
        "offset": query.offset,
        "limit": limit,
        "items": items,
    })))
}

/// `GET /v1/memories/{id}`.
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = memory_id(&id)?;
    let memory = state
        .client
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no memory {id}")))?;
    Ok(Json(memory_json(&memory, state.client.store().root())))
}

/// `DELETE /v1/memories/{id}`: a soft delete; the file moves under `deleted/`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = memory_id(&id)?;
    let tombstone = state
        .client
        .delete(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no memory {id}")))?;
    let root = state.client.store().root();
    Ok(Json(json!({
        "deleted": id,
        "tombstone": tombstone.strip_prefix(root).unwrap_or(&tombstone),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    limit: Option<usize>,
}

/// `GET /v1/memories/{id}/history`: every version of the memory in git, newest first.
pub(crate) async fn history(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let id = memory_id(&id)?;
    let versions = state
        .client
        .history(id, query.limit.unwrap_or(50).min(MAX_PAGE))
        .await?;
    if versions.is_empty() {
        return Err(ApiError::not_found(format!("no history for memory {id}")));
    }
    Ok(Json(json!({ "id": id, "versions": versions })))
}

fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
}
