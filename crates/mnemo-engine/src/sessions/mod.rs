//! The session wing: chat sessions and agents' notes in the engine, `mnemo-session`'s logs
//! with locking, caching and git. [`SessionWing`] is its handle ([`Engine::sessions`]).
//!
//! - [`turns`]: a chat request with `memory_session` is matched against the session's log
//!   ([`mnemo_session::history::split`]): its new messages are appended and fsynced before
//!   anything goes upstream (after governance, so a refused request logs nothing), and the
//!   session's history goes upstream in the client's place when the client sends only new
//!   messages. The answer is appended before the client sees its end.
//! - One async lock per session orders its appends; the parsed log is cached under that lock
//!   (`crate::state::sessions`) and read again when the file's size is not what mnemo last
//!   wrote (a hand edit, a fork by another tool).
//! - [`admin`]: sessions as the API lists, pages, forks, exports, imports and deletes them;
//!   their context, offloaded outputs and archive search.
//! - [`compaction`]: a session's older messages summarised, now or before its next request.
//!   Governance keeps a session's summaries and offloaded tool outputs in its own folder.
//! - [`notes`]: `agents/<agent>/MEMORY.md`, read for every request that names the agent
//!   (hand edits are seen at once) and committed to git on every change through the API.

pub(crate) mod admin;
pub(crate) mod compaction;
pub(crate) mod notes;
pub(crate) mod turns;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use mnemo_core::ConversationId;
use mnemo_session::{LoadedSession, SessionError, SessionId, SessionMeta, SessionStore};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::OwnedMutexGuard;

use crate::blocking::blocking;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::state::sessions::{Slot, CACHED_LOG_BYTES};

/// Characters of an offloaded output one read returns, at most.
pub const MAX_OUTPUT_READ: usize = 1 << 20;

/// One message of a session, with when it was logged.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LoggedMessage {
    /// Its position (0-based) in the branch, or in the whole log with `all`.
    pub index: usize,
    /// When it was logged.
    pub at: DateTime<Utc>,
    /// The chat message, as sent or answered.
    #[schema(value_type = Object)]
    pub message: Value,
}

/// A page of a session's messages.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MessagePage {
    /// Messages there are in all (in the branch, or the whole log with `all`).
    pub total: usize,
    /// The first message's index.
    pub offset: usize,
    /// The messages.
    pub messages: Vec<LoggedMessage>,
}

/// A session: its settings and the state of its log.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SessionInfo {
    /// The session's id.
    #[schema(value_type = String)]
    pub id: SessionId,
    /// Its settings (`session.yaml`).
    #[serde(flatten)]
    pub meta: SessionMeta,
    /// Messages in the current branch.
    pub branch_messages: usize,
    /// The log's size in bytes.
    pub log_bytes: u64,
    /// Lines of the log skipped as unreadable (a torn last line after a crash, a bad edit).
    pub skipped_lines: Vec<String>,
}

/// How full a session's context is: what its next request would send upstream.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SessionContext {
    /// The session.
    #[schema(value_type = String)]
    pub id: SessionId,
    /// The model its requests go to.
    pub model: String,
    /// Tokens of its history as it would go upstream (instructions, agent notes, the
    /// compaction's summary, the messages after it).
    pub tokens: usize,
    /// The model's context window.
    pub window: u64,
    /// Tokens past which governance summarises (`compress_threshold` of the window).
    pub threshold: u64,
    /// Messages in the current branch.
    pub messages: usize,
    /// Messages ever logged (abandoned branches included).
    pub logged_messages: usize,
    /// Summaries written for it.
    pub compressions: usize,
    /// Messages the latest compaction stands for.
    pub compacted_messages: usize,
    /// The latest compaction's summary, as it goes upstream in their place.
    pub summary: Option<String>,
    /// The summary governance sent its last request with, in place of its older messages.
    pub governed_summary: Option<mnemo_session::store::GovernedSummary>,
    /// Tokens of its last request as it went upstream, governed.
    pub sent_tokens: Option<usize>,
    /// How its requests are governed (`auto` unless a strategy says otherwise: mnemo keeps
    /// a session's history).
    pub mode: String,
    /// The log's size in bytes.
    pub log_bytes: u64,
    /// The log's path, relative to the store (`sessions/<id>/messages.jsonl`): a client
    /// learns where to read it, not where the server keeps the store.
    pub log: String,
    /// What counted the tokens.
    pub counter: String,
    /// What the session's answers took and cost upstream, over its life.
    pub usage: crate::state::usage::UsageTotals,
}

/// A slice of an offloaded tool output.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct ToolOutputSlice {
    /// The tool call whose output it is.
    pub call_id: String,
    /// The first character's offset.
    pub offset: usize,
    /// The output's length in characters.
    pub total_chars: usize,
    /// The characters read.
    pub text: String,
}

/// What archive search looks through: one session, or every session of a conversation.
#[derive(Debug, Clone)]
pub enum HistoryScope {
    /// One session's log.
    Session(SessionId),
    /// The logs of every live session of a conversation.
    Conversation(ConversationId),
}

/// The session wing's handle on the engine ([`Engine::sessions`]).
#[derive(Clone)]
pub(crate) struct SessionWing {
    engine: Arc<Engine>,
}

impl Engine {
    /// Lends the session wing.
    pub(crate) fn sessions(self: &Arc<Self>) -> SessionWing {
        SessionWing {
            engine: self.clone(),
        }
    }
}

impl SessionWing {
    fn log_store(&self) -> &SessionStore {
        &self.engine.session_state().store
    }

    /// Takes session `id`'s lock and makes sure its cached log is current.
    async fn lock_session(
        &self,
        id: &SessionId,
    ) -> Result<(Slot, OwnedMutexGuard<Option<LoadedSession>>), EngineError> {
        let slot = self.engine.session_state().slot(id);
        let mut guard = slot.clone().lock_owned().await;
        self.refresh(id, &mut guard).await?;
        Ok((slot, guard))
    }

    async fn refresh(
        &self,
        id: &SessionId,
        guard: &mut OwnedMutexGuard<Option<LoadedSession>>,
    ) -> Result<(), EngineError> {
        let store = self.log_store().clone();
        let current = guard.as_ref().map(|loaded| loaded.log_bytes);
        let id = id.clone();
        let reloaded = blocking(move || {
            if current.is_some_and(|bytes| bytes == store.log_bytes(&id)) {
                return Ok(None);
            }
            Ok(Some(store.load(&id)?))
        })
        .await?;
        if let Some(loaded) = reloaded {
            **guard = loaded;
            // What was read stays cached: idle sessions give way past the budget.
            self.engine.session_state().trim_cache(CACHED_LOG_BYTES);
        }
        Ok(())
    }
}

/// The conversation a session's settings name; a bad one is a fault of the file.
fn stored_conversation(id: &SessionId, meta: &SessionMeta) -> Result<ConversationId, EngineError> {
    ConversationId::new(&meta.conversation).map_err(|e| {
        SessionError::BadFile {
            path: format!(
                "{}/{id}/{}",
                mnemo_session::store::SESSIONS_DIR,
                mnemo_session::store::META_FILE
            ),
            message: format!("conversation: {e}"),
        }
        .into()
    })
}

/// The session a lock guards, which must exist.
fn loaded<'a>(
    guard: &'a Option<LoadedSession>,
    id: &SessionId,
) -> Result<&'a LoadedSession, SessionError> {
    guard
        .as_ref()
        .ok_or_else(|| SessionError::NotFound(id.to_string()))
}
