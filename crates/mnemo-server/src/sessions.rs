//! `/v1/sessions...`: chat sessions (their logs, forks, compaction, context usage and
//! offloaded tool outputs) and `/v1/history/search`, archive search over their logs.
//!
//! A session is created by a chat request with `memory_session` (on its first user message);
//! these routes read and manage what it logged.
//!
//! A session belongs to a conversation: with bearer tokens, reading a session (its messages,
//! context, outputs, history) needs a token that may read that conversation; changing it
//! (delete, fork, compact), one that may write it. Listings show only what the token may read.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use mnemo_core::ConversationId;
use mnemo_engine::{
    CompactReport, HistoryResults, MessagePage, SessionContext, SessionExport, SessionInfo,
    ToolOutputSlice,
};
use mnemo_engine::{HistoryScope, SessionId, SessionMeta};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Grant;
use crate::body::{read_bytes, OptionalJsonBody, QueryParams};
use crate::error::shared_answers::{
    BodyTooLarge, InvalidRequest, MayNotReadConversation, MayNotReadSession,
    MayNotWriteConversation, MayNotWriteSession, NoSuchSession,
};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

fn session_id(raw: &str) -> Result<SessionId, ApiError> {
    SessionId::new(raw).map_err(ApiError::invalid)
}

/// A session in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionListItem {
    /// The session's id.
    pub id: String,
    /// Seconds since its last message.
    pub age_seconds: i64,
    /// Its settings.
    #[serde(flatten)]
    pub meta: SessionMeta,
}

/// Every session, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// The sessions.
    pub sessions: Vec<SessionListItem>,
}

/// Which sessions to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Deleted sessions too.
    #[serde(default)]
    include_deleted: bool,
    /// Only the sessions of this conversation.
    conversation: Option<String>,
}

/// List sessions, newest first: title, message count, age, tokens; only those of
/// conversations the token may read.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    params(ListQuery),
    responses(
        (status = 200, description = "The sessions, newest first", body = SessionList),
        InvalidRequest,
        MayNotReadConversation,
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let now = Utc::now();
    let sessions = state
        .caller(&grant)
        .sessions()
        .list(q.conversation.as_deref(), q.include_deleted)
        .await?
        .into_iter()
        .map(|(id, meta)| SessionListItem {
            id: id.to_string(),
            age_seconds: (now - meta.updated_at).num_seconds(),
            meta,
        })
        .collect();
    Ok(Json(SessionList { sessions }))
}

/// A session: its settings and the state of its log.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session", body = SessionInfo),
        (status = 400, description = "Not a session id", body = ErrorBody),
        MayNotReadSession,
        NoSuchSession,
    )
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<SessionInfo>, ApiError> {
    let id = session_id(&id)?;
    Ok(Json(state.caller(&grant).sessions().get(&id).await?))
}

/// What deleting a session did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    /// The session.
    pub id: String,
    /// When it was marked deleted.
    pub deleted_at: Option<DateTime<Utc>>,
}

/// Delete a session (softly: it leaves listings and takes no more messages; its log stays on
/// disk).
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "Marked deleted", body = Deleted),
        MayNotWriteSession,
        NoSuchSession,
        (status = 409, description = "Deleted already", body = ErrorBody),
    )
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    let id = session_id(&id)?;
    let meta = state.caller(&grant).sessions().delete(&id).await?;
    Ok(Json(Deleted {
        id: id.to_string(),
        deleted_at: meta.deleted_at,
    }))
}

/// Which messages to show.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// How many to skip.
    #[serde(default)]
    offset: usize,
    /// How many to return, 1..1000 (100 when unset).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// Every message ever logged (abandoned branches included), not just the current branch.
    #[serde(default)]
    all: bool,
}

/// A session's messages, oldest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/messages",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id"), MessagesQuery),
    responses(
        (status = 200, description = "A page of messages", body = MessagePage),
        InvalidRequest,
        MayNotReadSession,
        NoSuchSession,
    )
)]
pub(crate) async fn messages(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<MessagesQuery>,
) -> Result<Json<MessagePage>, ApiError> {
    let id = session_id(&id)?;
    let limit = mnemo_core::page_size(q.limit, 100, "limit").map_err(ApiError::invalid)?;
    let page = state
        .caller(&grant)
        .sessions()
        .messages(&id, q.offset, limit, q.all)
        .await?;
    Ok(Json(page))
}

/// How to fork.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The new session's id; generated when unset.
    pub id: Option<String>,
}

/// The new session.
#[derive(Debug, Serialize, ToSchema)]
pub struct Forked {
    /// Its id.
    pub id: String,
    /// Its settings (`parent` is the session forked).
    #[serde(flatten)]
    pub meta: SessionMeta,
}

/// Fork a session: a new session with a copy of its log (and its kept summaries and offloaded
/// outputs), `parent` set. The original is not touched.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/fork",
    tag = "sessions",
    params(("id" = String, Path, description = "The session to fork")),
    request_body(content = ForkRequest, description = "Optional: the new id"),
    responses(
        (status = 201, description = "The new session", body = Forked),
        InvalidRequest,
        MayNotWriteSession,
        NoSuchSession,
        (status = 409, description = "The session is deleted, or the new id is taken", body = ErrorBody),
    )
)]
pub(crate) async fn fork(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    OptionalJsonBody(request): OptionalJsonBody<ForkRequest>,
) -> Result<Response, ApiError> {
    let id = session_id(&id)?;
    let new_id = request.id.as_deref().map(session_id).transpose()?;
    // The fork is a new session of the same conversation: writing it.
    let (new_id, meta) = state.caller(&grant).sessions().fork(&id, new_id).await?;
    let forked = Forked {
        id: new_id.to_string(),
        meta,
    };
    Ok((StatusCode::CREATED, Json(forked)).into_response())
}

/// Export a session as one JSON document: its settings and every record of its log
/// (abandoned branches and compactions included). `POST /v1/sessions` takes it back.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/export",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session", body = SessionExport),
        InvalidRequest,
        MayNotReadSession,
        NoSuchSession,
    )
)]
pub(crate) async fn export(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<SessionExport>, ApiError> {
    let id = session_id(&id)?;
    Ok(Json(state.caller(&grant).sessions().export(&id).await?))
}

/// Where an imported session goes.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ImportQuery {
    /// The id to import it as; the exported id when unset (a new one for another system's
    /// session).
    #[serde(rename = "as")]
    as_id: Option<String>,
    /// For another system's session: the conversation whose memories feed it
    /// (default `default`); a mnemo export names its own.
    conversation: Option<String>,
}

/// Import a session: an exported one (`GET /v1/sessions/{id}/export`) under its id or
/// `?as=`, or another system's under `?as=` or a new id, in `?conversation=`: a pydantic-ai
/// message list (pydantic-deep's `messages.json`) or a co-cli transcript (JSON lines). The
/// document is checked as any store file is: its format and version, a free session id, its
/// conversation and agent names, chat messages in its records. A deleted session comes back
/// live. Needs write on its conversation (and its agent, if it has one).
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    params(ImportQuery),
    request_body(content = SessionExport, description = "An exported session, a pydantic-ai message list or a co-cli transcript"),
    responses(
        (status = 201, description = "The imported session", body = Forked),
        InvalidRequest,
        MayNotWriteConversation,
        BodyTooLarge,
        (status = 409, description = "A session has that id already", body = ErrorBody),
    )
)]
pub(crate) async fn import(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(query): QueryParams<ImportQuery>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let as_id = query.as_id.as_deref().map(session_id).transpose()?;
    let requested = query.conversation.as_deref().unwrap_or("default");
    ConversationId::new(requested)
        .map_err(|e| ApiError::invalid(format!("the conversation: {e}")))?;
    let bytes = read_bytes(body, state.options.max_body_bytes).await?;
    let new_id = as_id.clone().unwrap_or_else(SessionId::generate);
    let (_, export) = mnemo_session::foreign::read_document(&bytes, new_id.as_str(), requested)
        .map_err(|e| ApiError::invalid(format!("the body is {e}")))?;
    let (id, meta) = state
        .caller(&grant)
        .sessions()
        .import(export, as_id)
        .await?;
    let imported = Forked {
        id: id.to_string(),
        meta,
    };
    Ok((StatusCode::CREATED, Json(imported)).into_response())
}

/// What to focus a compaction on.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactRequest {
    /// What the summary should keep above all.
    pub focus: Option<String>,
    /// Compact at the session's next chat request instead of now (answered with a 202).
    #[serde(default)]
    pub deferred: bool,
}

/// A compaction asked for the next request.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactRequested {
    /// `session` or `conversation`.
    pub target: &'static str,
    /// The session's or the conversation's id.
    pub id: String,
    /// The focus the summary will be asked for.
    pub focus: Option<String>,
}

/// Compact a session: now, or with `deferred` at its next chat request. A summary stands in
/// upstream for its older messages (the log keeps them all); when none can be written, the
/// branch is cut to its last 10 messages behind a marker (`unsummarised` says why).
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/compact",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    request_body(content = CompactRequest, description = "Optional: a focus"),
    responses(
        (status = 200, description = "What the compaction did", body = CompactReport),
        (status = 202, description = "Deferred: the next chat request of the session compacts first", body = CompactRequested),
        (status = 400, description = "Nothing to compact, or an invalid request", body = ErrorBody),
        MayNotWriteSession,
        NoSuchSession,
        (status = 409, description = "The session is deleted", body = ErrorBody),
        (status = 502, description = "No summary could be written and the session is too short to cut; nothing changed", body = ErrorBody),
    )
)]
pub(crate) async fn compact(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
    OptionalJsonBody(request): OptionalJsonBody<CompactRequest>,
) -> Result<Response, ApiError> {
    let id = session_id(&id)?;
    let caller = state.caller(&grant);
    if request.deferred {
        let focus = caller
            .sessions()
            .request_compact(&id, request.focus)
            .await?;
        let requested = CompactRequested {
            target: "session",
            id: id.to_string(),
            focus,
        };
        return Ok((StatusCode::ACCEPTED, Json(requested)).into_response());
    }
    let report = caller.sessions().compact(&id, request.focus).await?;
    Ok(Json(report).into_response())
}

/// How full a session's context is: tokens against the window and the threshold, messages,
/// compressions, log size.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/context",
    tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session's context usage", body = SessionContext),
        MayNotReadSession,
        NoSuchSession,
    )
)]
pub(crate) async fn context(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<SessionContext>, ApiError> {
    let id = session_id(&id)?;
    Ok(Json(state.caller(&grant).sessions().context(&id).await?))
}

/// Which part of an output to read.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutputQuery {
    /// The first character to read.
    #[serde(default)]
    pub(crate) offset: usize,
    /// Characters to read, at most 1 MiB (64 KiB when unset).
    pub(crate) limit: Option<usize>,
}

/// Read a tool output that governance offloaded for a session, by offset and limit.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/tool-outputs/{call_id}",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id"),
        ("call_id" = String, Path, description = "The tool call whose output was offloaded"),
        OutputQuery,
    ),
    responses(
        (status = 200, description = "The characters read and the output's length", body = ToolOutputSlice),
        MayNotReadSession,
        (status = 404, description = "No such session or output", body = ErrorBody),
    )
)]
pub(crate) async fn tool_output(
    State(state): State<AppState>,
    grant: Grant,
    Path((id, call_id)): Path<(String, String)>,
    QueryParams(q): QueryParams<OutputQuery>,
) -> Result<Json<ToolOutputSlice>, ApiError> {
    let scope = HistoryScope::Session(session_id(&id)?);
    let slice = state
        .caller(&grant)
        .tool_output(&scope, &call_id, q.offset, q.limit)
        .await?;
    Ok(Json(slice))
}

/// What to search.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// The words to find (case-insensitive): at most 4096 bytes.
    #[param(max_length = 4096)]
    q: String,
    /// One session's log.
    session: Option<String>,
    /// Every session of this conversation (`default` when neither is given).
    conversation: Option<String>,
    /// Excerpts, at most 10 (10 when unset).
    #[param(minimum = 1, maximum = 10)]
    limit: Option<usize>,
}

/// Search the full logs of a session, or of every session of a conversation.
#[utoipa::path(
    get,
    path = "/v1/history/search",
    tag = "sessions",
    params(HistoryQuery),
    responses(
        (status = 200, description = "Excerpts, best first", body = HistoryResults),
        InvalidRequest,
        (status = 403, description = "The token may not read the conversation searched (or the session's)", body = ErrorBody),
        NoSuchSession,
    )
)]
pub(crate) async fn search_history(
    State(state): State<AppState>,
    grant: Grant,
    QueryParams(q): QueryParams<HistoryQuery>,
) -> Result<Json<HistoryResults>, ApiError> {
    let scope = HistoryScope::named(q.session.as_deref(), q.conversation.as_deref())?;
    Ok(Json(
        state
            .caller(&grant)
            .search_history(scope, &q.q, q.limit)
            .await?,
    ))
}
