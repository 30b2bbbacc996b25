//! Chat sessions and agent notes in the engine: `mnemo-session`'s logs put into the chat path,
//! with locking, caching and git.
//!
//! - A chat request with `memory_session` is matched against the session's log
//!   ([`mnemo_session::history::split`]): its new messages are appended and fsynced before
//!   anything goes upstream (after governance, so a refused request logs nothing), and the
//!   session's history goes upstream in the client's place when the client sends only new
//!   messages. The answer is appended before the client sees its end.
//! - One async lock per session orders its appends; the parsed log is cached under that lock
//!   and read again when the file's size is not what mnemo last wrote (a hand edit, a fork
//!   by another tool).
//! - Governance keeps a session's summaries and offloaded tool outputs in its own folder.
//! - `agents/<agent>/MEMORY.md` is read for every request that names the agent (hand edits
//!   are seen at once) and committed to git on every change through the API.

use chrono::{DateTime, Utc};
use mnemo_context::summarize::SummaryOutcome;
use mnemo_context::summarize::{cut, prefix_hashes, SummaryAsk, SummaryCall};
use mnemo_context::tokens::messages_tokens;
use mnemo_context::{DirOutputStore, DirSummaryStore, OutputStore, Summariser};
use mnemo_core::{ConversationId, SessionTitles};
use mnemo_session::agent::INJECTED_LINES;
use mnemo_session::history::{split, HistoryStyle};
use mnemo_session::{
    AgentNotes, Excerpt, History, LoadedSession, Record, SessionError, SessionExport, SessionId,
    SessionMeta, SessionStore,
};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::OwnedMutexGuard;
use tracing::warn;

use crate::blocking::blocking;
use crate::engine::MemoryClient;
use crate::error::EngineError;
use crate::session_cache::{Slot, CACHED_LOG_BYTES};
use mnemo_context::ContextReport;

/// Characters of an offloaded output one read returns, at most.
pub const MAX_OUTPUT_READ: usize = 1 << 20;

/// A session's part in one chat request, from its logged request to its logged answer.
#[derive(Debug)]
pub(crate) struct SessionTurn {
    pub id: SessionId,
    slot: Slot,
    /// Where the answer goes in the branch: after the request's messages.
    answer_at: usize,
    model: String,
    tokens: usize,
    window: u64,
    /// Whether governance wrote a summary for this request.
    summarised: bool,
    /// The summary the request went upstream with, if any.
    summary: Option<mnemo_session::store::GovernedSummary>,
    /// The first prompt of a session this request created: its title is written once the
    /// answer is in, when the LLM titles sessions.
    titled_from: Option<String>,
}

/// A request matched against its session, before anything is written.
pub(crate) struct PendingSession {
    id: SessionId,
    slot: Slot,
    guard: OwnedMutexGuard<Option<LoadedSession>>,
    records: Vec<Record>,
    next: History,
    /// The session's settings; `None` when it does not exist yet.
    meta: Option<SessionMeta>,
    /// The first user message of the request, which titles a new session.
    first_prompt: Option<String>,
    /// Whether the request's last user message is new to the log.
    pub user_message_is_new: bool,
    /// Whether mnemo keeps the history the request goes on (it sent only new messages):
    /// then nobody else can make it fit, and governance is on unless a strategy says
    /// otherwise ([`crate::chat::governance::OWNED_HISTORY_MODE`]).
    pub owns_history: bool,
}

impl PendingSession {
    /// The conversation the session's settings name; `None` for a session not created yet.
    pub(crate) fn conversation(&self) -> Result<Option<ConversationId>, EngineError> {
        self.meta
            .as_ref()
            .map(|meta| stored_conversation(&self.id, meta))
            .transpose()
    }

    /// Refused when the session was deleted, or belongs to another conversation than the
    /// one the request named. Asked only once the caller's scope allows the session's
    /// conversation: before that, neither may be told.
    pub(crate) fn check_usable(&self, named: Option<&ConversationId>) -> Result<(), EngineError> {
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        if let Some(at) = meta.deleted_at {
            return Err(SessionError::Deleted {
                id: self.id.to_string(),
                at: at.to_rfc3339(),
            }
            .into());
        }
        match named {
            Some(asked) if asked.as_str() != meta.conversation => {
                Err(EngineError::InvalidInput(format!(
                    "session {:?} belongs to another conversation than {:?}; leave memory_id out to use the session's own",
                    self.id.as_str(),
                    asked.as_str(),
                )))
            }
            _ => Ok(()),
        }
    }
}

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
    pub usage: crate::usage::UsageTotals,
}

/// What a compaction did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CompactReport {
    /// The session.
    #[schema(value_type = String)]
    pub id: SessionId,
    /// Messages the summary now stands for.
    pub compacted_messages: usize,
    /// Messages kept as they are after it.
    pub kept_messages: usize,
    /// Tokens of the history before and after.
    pub tokens_before: usize,
    /// Tokens of the history after.
    pub tokens_after: usize,
    /// The summary (with `unsummarised`, the earlier compaction's, if any).
    pub summary: String,
    /// The model that wrote it (empty with `unsummarised`).
    pub model: String,
    /// Set when no summary could be written: why. The history was then cut to its last
    /// [`UNSUMMARISED_KEEP`] messages, the others standing upstream as a marker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsummarised: Option<String>,
}

/// Messages a compaction keeps when no summary can be written.
pub const UNSUMMARISED_KEEP: usize = 10;

/// Where a compaction without a summary cuts `messages`: before the last
/// [`UNSUMMARISED_KEEP`], moved back so no tool result loses its call; `None` when that
/// drops nothing past the `done` already compacted.
fn unsummarised_cut(messages: &[Value], done: usize) -> Option<usize> {
    let mut at = messages.len().saturating_sub(UNSUMMARISED_KEEP);
    while at > 0 && messages[at]["role"] == "tool" {
        at -= 1;
    }
    (at > done).then_some(at)
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

impl MemoryClient {
    fn sessions(&self) -> &SessionStore {
        &self.engine.sessions.store
    }

    /// Takes session `id`'s lock and makes sure its cached log is current.
    async fn lock_session(
        &self,
        id: &SessionId,
    ) -> Result<(Slot, OwnedMutexGuard<Option<LoadedSession>>), EngineError> {
        let slot = self.engine.sessions.slot(id);
        let mut guard = slot.clone().lock_owned().await;
        self.refresh(id, &mut guard).await?;
        Ok((slot, guard))
    }

    async fn refresh(
        &self,
        id: &SessionId,
        guard: &mut OwnedMutexGuard<Option<LoadedSession>>,
    ) -> Result<(), EngineError> {
        let store = self.sessions().clone();
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
            self.engine.sessions.trim_cache(CACHED_LOG_BYTES);
        }
        Ok(())
    }

    /// Matches a chat request's `messages` against session `id`: the request's agent defaults
    /// to the session's, and `body["messages"]` becomes what goes upstream (instructions,
    /// then the session's branch with the request's new messages). Nothing about the session
    /// is refused here: the caller checks its scope against the session's conversation
    /// ([`PendingSession::conversation`]) first, then [`PendingSession::check_usable`], so a
    /// caller who may not see the session learns nothing of it.
    pub(crate) async fn match_session(
        &self,
        id: &SessionId,
        style: HistoryStyle,
        agent: &mut Option<String>,
        body: &mut Value,
    ) -> Result<PendingSession, EngineError> {
        let (slot, guard) = self.lock_session(id).await?;
        let meta = guard.as_ref().map(|s| s.meta.clone());
        if let Some(meta) = &meta {
            if agent.is_none() {
                agent.clone_from(&meta.agent);
            }
        }
        let empty = History::default();
        let history = guard.as_ref().map_or(&empty, |s| &s.history);
        let messages = match body["messages"].take() {
            Value::Array(messages) => messages,
            _ => Vec::new(),
        };
        let split = split(history, &messages, style);
        let records = split.records(history);
        // The one copy of the branch a request makes: it becomes the cached history once
        // logged.
        let mut next = history.clone();
        for record in &records {
            next.apply(record);
        }
        let mut upstream = if split.instructions.is_empty() {
            next.instructions.clone()
        } else {
            split.instructions.clone()
        };
        upstream.extend(next.upstream_messages());
        body["messages"] = Value::Array(upstream);
        let first_prompt = split
            .new
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| mnemo_session::history::content_text(&m["content"]));
        let user_message_is_new = split.new.iter().any(|m| m["role"] == "user");
        let owns_history = split.style == HistoryStyle::Server;
        Ok(PendingSession {
            id: id.clone(),
            slot,
            guard,
            records,
            next,
            meta,
            first_prompt,
            user_message_is_new,
            owns_history,
        })
    }

    /// Logs a matched request (creating the session on its first user message) and returns
    /// the turn its answer will be logged against.
    pub(crate) async fn log_request(
        &self,
        pending: PendingSession,
        conversation: &ConversationId,
        agent: Option<&str>,
        model: &str,
        report: &ContextReport,
    ) -> Result<SessionTurn, EngineError> {
        let PendingSession {
            id,
            slot,
            mut guard,
            records,
            next,
            meta,
            first_prompt,
            ..
        } = pending;
        let mut turn = SessionTurn {
            id: id.clone(),
            slot,
            answer_at: next.messages.len(),
            model: model.to_owned(),
            tokens: report.tokens_after,
            window: report.window,
            summarised: matches!(
                report.summary,
                Some(SummaryOutcome::New | SummaryOutcome::Extended)
            ),
            summary: report
                .summary_text
                .as_deref()
                .filter(|_| !report.rolled_back)
                .map(|text| {
                    mnemo_session::store::GovernedSummary::new(report.summarised_messages, text)
                }),
            titled_from: None,
        };
        let meta = match (meta, first_prompt) {
            (Some(meta), _) => meta,
            (None, Some(prompt)) => {
                let meta = SessionMeta::new(conversation.as_str(), agent, &prompt);
                turn.titled_from = Some(prompt);
                meta
            }
            // No user message yet: the session is not created.
            (None, None) => return Ok(turn),
        };
        let store = self.sessions().clone();
        // The write and the cache update run in a task that owns the lock: a client that
        // goes away mid-request must not free the session while its append still runs.
        let write = tokio::spawn(async move {
            let created = guard.is_none();
            // Lines skipped before stay skipped, but for the torn last line an append cuts
            // off.
            let (skipped, torn) = match guard.as_ref() {
                Some(loaded) if !records.is_empty() => (loaded.skipped_after_append(), false),
                Some(loaded) => (loaded.skipped.clone(), loaded.torn),
                None => (Vec::new(), false),
            };
            let (bytes, meta) = {
                let id = id.clone();
                blocking(move || {
                    if created {
                        store.write_meta(&id, &meta)?;
                    }
                    let bytes = if records.is_empty() {
                        store.log_bytes(&id)
                    } else {
                        store.append(&id, &records)?
                    };
                    Ok((bytes, meta))
                })
                .await?
            };
            *guard = Some(LoadedSession {
                id,
                meta: SessionMeta {
                    messages: next.logged_messages,
                    ..meta
                },
                history: next,
                log_bytes: bytes,
                skipped,
                torn,
            });
            Ok::<(), EngineError>(())
        });
        write
            .await
            .map_err(|e| EngineError::Task(e.to_string()))??;
        Ok(turn)
    }

    /// Logs the answer of `turn` (without waiting for the session's lock when `guard` is
    /// given) and brings `session.yaml` up to date, in a background task of its own (for the
    /// reason given in `log_request`); await the handle to wait for it. Errors are logged:
    /// the answer has gone to the client already.
    pub(crate) fn spawn_log_answer(
        &self,
        turn: SessionTurn,
        guard: Option<OwnedMutexGuard<Option<LoadedSession>>>,
        message: Value,
        incomplete: bool,
    ) -> tokio::task::JoinHandle<()> {
        let client = self.clone();
        self.engine.background.spawn(async move {
            let id = turn.id.clone();
            let titled_from = turn.titled_from.clone();
            let answer = message["content"].as_str().unwrap_or_default().to_owned();
            if let Err(e) = client
                .log_answer_inner(turn, guard, message, incomplete)
                .await
            {
                warn!(session = %id, "cannot log the answer: {e}");
                return;
            }
            let by_llm = client.engine.config.session_titles == SessionTitles::Llm;
            if let (true, Some(prompt)) = (by_llm, titled_from) {
                client.title_by_llm(&id, &prompt, &answer).await;
            }
        })
    }

    /// Asks the LLM for a title of the session that `prompt` began and `answer` answered,
    /// and sets it if the title is still the one the prompt gave (an edit or a rename since
    /// wins). A failure leaves the prompt's title, with a warning.
    async fn title_by_llm(&self, id: &SessionId, prompt: &str, answer: &str) {
        let Some(llm) = self.engine.llm.as_ref() else {
            return;
        };
        let body = json!({
            "model": self.engine.config.llm_model,
            "messages": titling_prompt(prompt, answer),
            "temperature": 0,
            "max_tokens": 32,
        });
        let written = match llm.chat(&body).await {
            Ok(answer) => answer["choices"][0]["message"]["content"]
                .as_str()
                .and_then(clean_title),
            Err(e) => {
                warn!(session = %id, "no title from the LLM ({e}); the first message's stays");
                return;
            }
        };
        let Some(title) = written else {
            warn!(session = %id, "the LLM's title was empty; the first message's stays");
            return;
        };
        if let Err(e) = self.retitle(id, prompt, title).await {
            warn!(session = %id, "cannot set the session's title: {e}");
        }
    }

    /// Sets session `id`'s title to `title` if it is still the one `prompt` gave.
    async fn retitle(
        &self,
        id: &SessionId,
        prompt: &str,
        title: String,
    ) -> Result<(), EngineError> {
        let (_slot, mut guard) = self.lock_session(id).await?;
        let Some(loaded) = guard.as_mut() else {
            return Ok(());
        };
        if loaded.meta.title != mnemo_session::store::title_of(prompt) {
            return Ok(());
        }
        let meta = SessionMeta {
            title,
            ..loaded.meta.clone()
        };
        let store = self.sessions().clone();
        let (sid, written) = (id.clone(), meta.clone());
        blocking(move || Ok(store.write_meta(&sid, &written)?)).await?;
        loaded.meta = meta;
        Ok(())
    }

    async fn log_answer_inner(
        &self,
        turn: SessionTurn,
        guard: Option<OwnedMutexGuard<Option<LoadedSession>>>,
        message: Value,
        incomplete: bool,
    ) -> Result<(), EngineError> {
        let mut guard = match guard {
            Some(guard) => guard,
            None => turn.slot.clone().lock_owned().await,
        };
        self.refresh(&turn.id, &mut guard).await?;
        let Some(loaded) = guard.as_mut() else {
            return Ok(());
        };
        let branch = &loaded.history.messages;
        // The client may have sent the answer back before it was logged (a fast next
        // request): it is in the branch already.
        let logged_already = branch
            .get(turn.answer_at)
            .is_some_and(|m| mnemo_session::history::same_message(m, &message));
        let mut records = Vec::new();
        if !logged_already && has_content(&message) {
            records.push(Record::Message {
                at: Utc::now(),
                message,
                incomplete,
            });
            if branch.len() != turn.answer_at {
                // The branch moved on before the answer could be logged (a rewrite, another
                // request): the answer is kept in the log, off the branch.
                records.push(Record::Rewind {
                    at: Utc::now(),
                    to: branch.len(),
                });
            }
        }
        let mut meta = loaded.meta.clone();
        meta.updated_at = Utc::now();
        meta.messages = loaded.history.logged_messages.saturating_add(records.len());
        meta.tokens = Some(turn.tokens);
        meta.window = Some(turn.window);
        meta.model = Some(turn.model.clone());
        meta.summary.clone_from(&turn.summary);
        // Counts from a hand-editable file: checked, never overflowed.
        meta.compressions = meta
            .compressions
            .saturating_add(usize::from(turn.summarised));
        let store = self.sessions().clone();
        let id = turn.id.clone();
        let (bytes, meta, records) = blocking(move || {
            let bytes = if records.is_empty() {
                store.log_bytes(&id)
            } else {
                store.append(&id, &records)?
            };
            store.write_meta(&id, &meta)?;
            Ok((bytes, meta, records))
        })
        .await?;
        for record in &records {
            loaded.history.apply(record);
        }
        if !records.is_empty() {
            loaded.skipped = loaded.skipped_after_append();
            loaded.torn = false;
        }
        loaded.meta = meta;
        loaded.log_bytes = bytes;
        Ok(())
    }

    /// Every session, newest first; deleted ones only when asked.
    pub async fn list_sessions(
        &self,
        include_deleted: bool,
    ) -> Result<Vec<(SessionId, SessionMeta)>, EngineError> {
        let store = self.sessions().clone();
        blocking(move || Ok(store.list(include_deleted)?)).await
    }

    /// Session `id`: its settings and the state of its log.
    pub async fn session(&self, id: &SessionId) -> Result<SessionInfo, EngineError> {
        let (_slot, guard) = self.lock_session(id).await?;
        let loaded = loaded(&guard, id)?;
        Ok(SessionInfo {
            id: id.clone(),
            meta: loaded.meta.clone(),
            branch_messages: loaded.history.messages.len(),
            log_bytes: loaded.log_bytes,
            skipped_lines: loaded.skipped.clone(),
        })
    }

    /// A page of session `id`'s messages: its current branch, or every message ever logged
    /// with `all`.
    pub async fn session_messages(
        &self,
        id: &SessionId,
        offset: usize,
        limit: usize,
        all: bool,
    ) -> Result<MessagePage, EngineError> {
        // The log on disk: the cache holds the branch only, not every record.
        let store = self.sessions().clone();
        let sid = id.clone();
        let records = blocking(move || {
            store.existing_meta(&sid)?;
            Ok(store.read_log(&sid)?.records)
        })
        .await?;
        let messages = mnemo_session::history::timed_messages(&records, all);
        let total = messages.len();
        let page = messages
            .into_iter()
            .enumerate()
            .skip(offset)
            .take(limit.min(mnemo_core::MAX_PAGE))
            .map(|(index, (at, message))| LoggedMessage {
                index,
                at,
                message: message.clone(),
            })
            .collect();
        Ok(MessagePage {
            total,
            offset,
            messages: page,
        })
    }

    /// Forks session `id` under `new_id` (a generated id when `None`): its log, summaries and
    /// offloaded outputs are copied and `parent` set; the original is not touched.
    pub async fn fork_session(
        &self,
        id: &SessionId,
        new_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        let new_id = new_id.unwrap_or_else(SessionId::generate);
        if new_id == *id {
            return Err(SessionError::Exists(new_id.to_string()).into());
        }
        // Only the new session's lock: the source's log is read in whole lines, so an
        // append running meanwhile is copied whole or not at all, and two forks in opposite
        // directions cannot wait on each other. Its folder is claimed atomically.
        let (_slot, mut guard) = self.lock_session(&new_id).await?;
        let store = self.sessions().clone();
        let (from, to) = (id.clone(), new_id.clone());
        let meta = blocking(move || Ok(store.fork(&from, &to)?)).await?;
        *guard = None;
        Ok((new_id, meta))
    }

    /// Session `id` as one JSON document: its settings and every record of its log.
    pub async fn export_session(&self, id: &SessionId) -> Result<SessionExport, EngineError> {
        let store = self.sessions().clone();
        let id = id.clone();
        blocking(move || Ok(store.export(&id)?)).await
    }

    /// Creates a session from an exported one, under `as_id` or its exported id (which must
    /// be free). Its conversation and agent must be names mnemo accepts: the document is as
    /// untrusted as any file of the store.
    pub async fn import_session(
        &self,
        export: SessionExport,
        as_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        let invalid = |field: &str, e: mnemo_core::IdError, what: &str| {
            EngineError::InvalidInput(format!("the export's {field}: {}", e.describe(what)))
        };
        ConversationId::new(&export.meta.conversation)
            .map_err(|e| invalid("conversation", e, "conversation id"))?;
        if let Some(agent) = &export.meta.agent {
            ConversationId::new(agent).map_err(|e| invalid("agent", e, "agent name"))?;
        }
        let target = match &as_id {
            Some(id) => id.clone(),
            None => SessionId::new(&export.id)
                .map_err(|e| EngineError::InvalidInput(format!("the export's id: {e}")))?,
        };
        let (_slot, mut guard) = self.lock_session(&target).await?;
        let store = self.sessions().clone();
        let imported = blocking(move || Ok(store.import(export, Some(target))?)).await?;
        *guard = None;
        Ok(imported)
    }

    /// Deletes session `id` softly: it is marked deleted, leaves listings and takes no more
    /// messages; its folder stays.
    pub async fn delete_session(&self, id: &SessionId) -> Result<SessionMeta, EngineError> {
        let (_slot, mut guard) = self.lock_session(id).await?;
        let store = self.sessions().clone();
        let id = id.clone();
        let meta = blocking(move || Ok(store.delete(&id)?)).await?;
        *guard = None;
        Ok(meta)
    }

    /// Compacts session `id` now: a summary (by the session's model, or the strategy's
    /// `summarization_model`, with `focus`) stands in upstream for everything before what
    /// `keep` keeps — at least everything before the latest turn. When no summary can be
    /// written (no upstream, the call fails), the history is cut to its last
    /// [`UNSUMMARISED_KEEP`] messages behind a marker, and the report says why; with too few
    /// messages for that, it is an error and the history is unchanged.
    pub async fn compact_session(
        &self,
        id: &SessionId,
        focus: Option<String>,
    ) -> Result<CompactReport, EngineError> {
        // The history is read under the session's lock, which is then let go: the summary
        // call may take long, and the session's chats go on meanwhile.
        let (history, meta) = {
            let (_slot, guard) = self.lock_session(id).await?;
            let loaded = loaded(&guard, id)?;
            (loaded.history.clone(), loaded.meta.clone())
        };
        if let Some(at) = meta.deleted_at {
            return Err(SessionError::Deleted {
                id: id.to_string(),
                at: at.to_rfc3339(),
            }
            .into());
        }
        let (strategy, model) = self.session_strategy(id, &meta).await?;
        let model = strategy.summarization_model.clone().unwrap_or(model);
        let counter = self.engine.context.counter(&model);
        let window = self
            .engine
            .context
            .window(&model, strategy.context_window_tokens);
        let messages = &history.messages;
        let previous = history.compaction().cloned();
        let done = previous.as_ref().map_or(0, |c| c.covers);
        let mut covers = cut(messages, strategy.keep, window.tokens, counter.as_ref()).tail;
        if covers <= done {
            covers = latest_turn_start(messages);
        }
        if covers <= done {
            return Err(EngineError::InvalidInput(format!(
                "nothing to compact in session {:?}: {} message(s), {} already compacted, the latest turn is kept",
                id.as_str(),
                messages.len(),
                done
            )));
        }
        let tokens_before = messages_tokens(counter.as_ref(), &history.upstream_messages());
        let focus = focus
            .map(|f| f.trim().to_owned())
            .filter(|f| !f.is_empty())
            .or_else(|| strategy.focus.clone());
        let summarised = match self.engine.llm.as_ref() {
            Some(llm) => {
                let summaries = DirSummaryStore::new(self.sessions().summaries_dir(id));
                let summariser = crate::chat::governance::UpstreamSummariser { llm };
                let hashes = prefix_hashes(&messages[..covers]);
                let call = SummaryCall {
                    summariser: &summariser as &dyn Summariser,
                    store: &summaries,
                    counter: counter.as_ref(),
                    chunk_tokens: crate::governance_state::summary_chunk_tokens(window.tokens),
                    asked: SummaryAsk {
                        focus: focus.as_deref(),
                        instructions: strategy.summary_prompt.as_deref(),
                    },
                    model: &model,
                };
                // A summary that skipped messages is not built on: all are summarised anew.
                let kept = previous
                    .as_ref()
                    .filter(|c| !c.unsummarised)
                    .map(|c| (c.covers, c.summary.clone()));
                call.extend(&messages[..covers], &hashes, kept)
                    .await
                    .map(|(summary, _)| summary)
                    .map_err(|e| format!("the summary call failed: {e}"))
            }
            None => Err("no upstream LLM is configured to write a summary".to_owned()),
        };
        // Without a summary the history still shrinks, as co-cli's does: to its last
        // messages, behind a marker that says what went.
        let (summary, unsummarised) = match summarised {
            Ok(summary) => (summary, None),
            Err(why) => {
                let Some(dropped) = unsummarised_cut(messages, done) else {
                    return Err(EngineError::SummaryFailed(format!(
                        "{why}; session {:?} has too few messages to drop any without a summary",
                        id.as_str()
                    )));
                };
                tracing::warn!(
                    session = id.as_str(),
                    dropped,
                    "compacting without a summary: {why}"
                );
                covers = dropped;
                let earlier = previous.as_ref().map(|c| c.summary.clone());
                (earlier.unwrap_or_default(), Some(why))
            }
        };
        let model = if unsummarised.is_some() {
            String::new()
        } else {
            model
        };
        let record = Record::Compaction {
            at: Utc::now(),
            covers,
            summary: summary.clone(),
            focus,
            model: model.clone(),
            unsummarised: unsummarised.clone(),
        };
        let middle = &messages[..covers];
        let mut next = history.clone();
        next.apply(&record);
        let tokens_after = messages_tokens(counter.as_ref(), &next.upstream_messages());
        let report = CompactReport {
            id: id.clone(),
            compacted_messages: covers,
            kept_messages: messages.len() - covers,
            tokens_before,
            tokens_after,
            summary,
            model,
            unsummarised,
        };

        // Locked again: the summary applies only if what it covers is still the branch's
        // start and no other compaction came first.
        let (_slot, mut guard) = self.lock_session(id).await?;
        let current = loaded(&guard, id)?;
        let branch = &current.history.messages;
        let unchanged = branch.len() >= covers
            && branch[..covers]
                .iter()
                .zip(middle)
                .all(|(a, b)| mnemo_session::history::same_message(a, b))
            && current.history.compaction() == previous.as_ref();
        if current.meta.deleted_at.is_some() || !unchanged {
            return Err(SessionError::Changed(format!(
                "session {:?} changed while its summary was written; compact it again",
                id.as_str()
            ))
            .into());
        }
        let mut meta = current.meta.clone();
        meta.compressions = meta.compressions.saturating_add(1);
        meta.updated_at = Utc::now();
        let store = self.sessions().clone();
        let sid = id.clone();
        // As in `log_request`: the task owns the lock until the append is done.
        let write = tokio::spawn(async move {
            blocking(move || {
                store.append(&sid, &[record])?;
                store.write_meta(&sid, &meta)?;
                Ok(())
            })
            .await?;
            *guard = None;
            Ok::<(), EngineError>(())
        });
        write
            .await
            .map_err(|e| EngineError::Task(e.to_string()))??;
        Ok(report)
    }

    /// The conversation and agent of session `id` when a compaction is asked for its next
    /// request ([`MemoryClient::request_compact`]): the caller must be allowed to chat there
    /// before [`run_asked_compaction`](Self::run_asked_compaction). `None` when none is
    /// asked, or the session cannot be read (what is wrong with it is for the request to
    /// say).
    pub(crate) fn compaction_asked(
        &self,
        id: &SessionId,
    ) -> Result<Option<(ConversationId, Option<String>)>, EngineError> {
        let key = crate::chat::governance::CompactTarget::Session(id.clone()).key();
        if !self.engine.context.compact_requested(&key) {
            return Ok(None);
        }
        let Ok(meta) = self.sessions().existing_meta(id) else {
            return Ok(None);
        };
        Ok(Some((stored_conversation(id, &meta)?, meta.agent)))
    }

    /// Runs the compaction asked for session `id`'s next request. A failure is logged and
    /// the request goes on: it asked for an answer.
    pub(crate) async fn run_asked_compaction(&self, id: &SessionId) {
        let key = crate::chat::governance::CompactTarget::Session(id.clone()).key();
        let Some(focus) = self.engine.context.take_compact_request(&key) else {
            return;
        };
        match self.compact_session(id, focus).await {
            Ok(report) => tracing::info!(
                session = %id,
                compacted = report.compacted_messages,
                "compacted as asked before this request"
            ),
            Err(e) => warn!(session = %id, "the compaction asked for could not run: {e}"),
        }
    }

    /// How full session `id`'s context is.
    pub async fn session_context(&self, id: &SessionId) -> Result<SessionContext, EngineError> {
        let (_slot, guard) = self.lock_session(id).await?;
        let loaded = loaded(&guard, id)?;
        let (strategy, model) = self.session_strategy(id, &loaded.meta).await?;
        let counter = self.engine.context.counter(&model);
        let window = match loaded.meta.window {
            Some(tokens) if strategy.context_window_tokens.is_none() => tokens,
            _ => {
                self.engine
                    .context
                    .window(&model, strategy.context_window_tokens)
                    .tokens
            }
        };
        let mut body = json!({"messages": loaded.history.instructions.clone()});
        if let Some(agent) = &loaded.meta.agent {
            self.inject_agent_notes(agent, &mut body).await?;
        }
        let mut upstream = match body["messages"].take() {
            Value::Array(messages) => messages,
            _ => Vec::new(),
        };
        upstream.extend(loaded.history.upstream_messages());
        let folder = self.sessions().dir(id);
        let log = self.sessions().relative(&self.sessions().log_path(id));
        let usage = blocking(move || Ok(crate::usage::read_totals(&folder))).await?;
        Ok(SessionContext {
            log,
            id: id.clone(),
            tokens: messages_tokens(counter.as_ref(), &upstream),
            window,
            threshold: (strategy.compress_threshold * window as f64) as u64,
            messages: loaded.history.messages.len(),
            logged_messages: loaded.history.logged_messages,
            compressions: loaded.meta.compressions.max(loaded.history.compressions),
            compacted_messages: loaded.history.compaction().map_or(0, |c| c.covers),
            summary: loaded.history.compaction().map(|c| c.summary.clone()),
            governed_summary: loaded.meta.summary.clone(),
            sent_tokens: loaded.meta.tokens,
            mode: strategy.mode.as_str().to_owned(),
            log_bytes: loaded.log_bytes,
            counter: counter.name(),
            model,
            usage,
        })
    }

    /// Up to `limit` characters, from `offset`, of a tool output governance offloaded for
    /// session `id`.
    pub async fn session_tool_output(
        &self,
        id: &SessionId,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<ToolOutputSlice, EngineError> {
        self.sessions().existing_meta(id)?;
        let outputs = DirOutputStore::new(self.sessions().tool_outputs_dir(id));
        read_output(
            outputs,
            call_id,
            offset,
            limit,
            format!("session {:?}", id.as_str()),
        )
        .await
    }

    /// Which of `call_ids` had their tool outputs offloaded by governance for session `id`
    /// (kept on disk, readable with [`session_tool_output`](Self::session_tool_output)).
    pub async fn offloaded_calls(
        &self,
        id: &SessionId,
        call_ids: Vec<String>,
    ) -> Result<std::collections::HashSet<String>, EngineError> {
        self.sessions().existing_meta(id)?;
        let outputs = DirOutputStore::new(self.sessions().tool_outputs_dir(id));
        blocking(move || {
            Ok(call_ids
                .into_iter()
                .filter(|call| outputs.has(call))
                .collect())
        })
        .await
    }

    /// Up to `limit` characters, from `offset`, of a tool output governance offloaded for a
    /// request of `conversation` outside any session.
    pub async fn conversation_tool_output(
        &self,
        conversation: &ConversationId,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<ToolOutputSlice, EngineError> {
        let outputs = DirOutputStore::new(
            self.settings_dir(conversation)
                .child(mnemo_store::layout::TOOL_OUTPUTS_DIR),
        );
        read_output(
            outputs,
            call_id,
            offset,
            limit,
            format!("conversation {conversation:?}"),
        )
        .await
    }

    /// Searches whole session logs (abandoned branches and compacted messages included) for
    /// `query`: at most `limit` (≤ 10) labelled excerpts, best first.
    pub async fn search_history(
        &self,
        scope: HistoryScope,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Excerpt>, EngineError> {
        if query.trim().is_empty() {
            return Err(EngineError::InvalidInput("the query is empty".into()));
        }
        if query.len() > mnemo_core::MAX_QUERY_BYTES {
            return Err(EngineError::InvalidInput(format!(
                "query is {} bytes; a query holds at most {}",
                query.len(),
                mnemo_core::MAX_QUERY_BYTES
            )));
        }
        let store = self.sessions().clone();
        let query = query.to_owned();
        blocking(move || {
            let ids: Vec<SessionId> = match scope {
                HistoryScope::Session(id) => {
                    store.existing_meta(&id)?;
                    vec![id]
                }
                HistoryScope::Conversation(conversation) => store
                    .list(false)?
                    .into_iter()
                    .filter(|(_, meta)| meta.conversation == conversation.as_str())
                    .map(|(id, _)| id)
                    .collect(),
            };
            // One log in memory at a time: each is searched as it is read, and only its
            // best excerpts are kept.
            let mut excerpts = Vec::new();
            for id in ids {
                let records = store.read_log(&id)?.records;
                excerpts.extend(mnemo_session::search::search(
                    [(id.as_str(), records.as_slice())],
                    &query,
                    limit,
                ));
            }
            Ok(mnemo_session::search::best(excerpts, limit))
        })
        .await
    }

    /// The strategy and model a session's requests are governed with.
    async fn session_strategy(
        &self,
        id: &SessionId,
        meta: &SessionMeta,
    ) -> Result<(mnemo_context::strategy::ResolvedStrategy, String), EngineError> {
        let conversation = stored_conversation(id, meta)?;
        let stored = self.conversation_strategy(&conversation).await?;
        let agent = self
            .engine
            .config
            .context
            .agent_strategy(meta.agent.as_deref());
        let model = meta
            .model
            .clone()
            .unwrap_or_else(|| self.engine.config.llm_model.clone());
        let strategy = crate::chat::governance::owned_history_default(stored.over(&agent));
        Ok((strategy.resolve(), model))
    }

    /// The whole of `agent`'s notes (`agents/<agent>/MEMORY.md`); empty when none.
    pub async fn agent_memory(&self, agent: &str) -> Result<String, EngineError> {
        let notes = AgentNotes::new(self.store().root(), agent)?;
        blocking(move || Ok(notes.read()?)).await
    }

    /// Appends `text` to `agent`'s notes and commits it; returns the whole notes.
    pub async fn append_agent_memory(
        &self,
        agent: &str,
        text: &str,
    ) -> Result<String, EngineError> {
        let text = text.to_owned();
        self.change_agent_memory(agent, "append to", move |notes| notes.append(&text))
            .await
    }

    /// Replaces `old` (which must occur exactly once) by `new` in `agent`'s notes and commits
    /// it; returns the whole notes.
    pub async fn update_agent_memory(
        &self,
        agent: &str,
        old: &str,
        new: &str,
    ) -> Result<String, EngineError> {
        let (old, new) = (old.to_owned(), new.to_owned());
        self.change_agent_memory(agent, "update", move |notes| notes.update(&old, &new))
            .await
    }

    async fn change_agent_memory(
        &self,
        agent: &str,
        verb: &'static str,
        change: impl FnOnce(&AgentNotes) -> Result<String, SessionError> + Send + 'static,
    ) -> Result<String, EngineError> {
        let notes = AgentNotes::new(self.store().root(), agent)?;
        let lock = self.engine.agent_lock.clone();
        let _held = lock.lock().await;
        let engine = self.engine.clone();
        let agent = agent.to_owned();
        blocking(move || {
            let text = change(&notes)?;
            if let Some(git) = &engine.git {
                git.note_changed([notes.path()]);
            }
            engine.commit(&format!("{verb} the notes of agent {agent}"));
            Ok(text)
        })
        .await
    }

    /// Puts the first 200 lines of `agent`'s notes into `body`'s system prompt, as an
    /// `## Agent Memory` section (a system message is added when there is none).
    pub(crate) async fn inject_agent_notes(
        &self,
        agent: &str,
        body: &mut Value,
    ) -> Result<(), EngineError> {
        let notes = AgentNotes::new(self.store().root(), agent)?;
        let Some(head) = blocking(move || Ok(notes.head(INJECTED_LINES)?)).await? else {
            return Ok(());
        };
        let section = format!("## Agent Memory\n{head}");
        let Some(messages) = body["messages"].as_array_mut() else {
            return Ok(());
        };
        match messages.first_mut() {
            Some(first) if first["role"] == "system" && first["content"].is_string() => {
                let text = first["content"].as_str().unwrap_or_default();
                first["content"] = Value::String(format!("{text}\n\n{section}"));
            }
            _ => messages.insert(0, json!({"role": "system", "content": section})),
        }
        Ok(())
    }
}

impl SessionTurn {
    /// The session's lock, if nobody holds it: taken when a streamed answer ends, so the
    /// answer is logged before a next request of the session can be matched.
    pub(crate) fn try_lock(&self) -> Option<OwnedMutexGuard<Option<LoadedSession>>> {
        self.slot.clone().try_lock_owned().ok()
    }
}

/// Reads a slice of an offloaded output kept in `dir`; `owner` names where, for the 404.
async fn read_output(
    outputs: DirOutputStore,
    call_id: &str,
    offset: usize,
    limit: usize,
    owner: String,
) -> Result<ToolOutputSlice, EngineError> {
    let call = call_id.to_owned();
    let limit = limit.min(MAX_OUTPUT_READ);
    let read = blocking(move || {
        let path = outputs.path_of(&call);
        outputs
            .read(&call, offset, limit)
            .map_err(|source| EngineError::Io {
                action: "cannot read an offloaded output in",
                path: path.parent().map(Into::into).unwrap_or(path),
                source,
            })
    })
    .await?;
    let (text, total_chars) = read.ok_or_else(|| {
        EngineError::NotFound(format!(
            "{owner} has no offloaded output of tool call {call_id:?}"
        ))
    })?;
    Ok(ToolOutputSlice {
        call_id: call_id.to_owned(),
        offset,
        total_chars,
        text,
    })
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

/// Where the latest turn (the last user message and what followed) starts.
fn latest_turn_start(messages: &[Value]) -> usize {
    messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(messages.len())
}

fn has_content(message: &Value) -> bool {
    message["content"]
        .as_str()
        .is_some_and(|t| !t.trim().is_empty())
        || message["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
}

/// The assistant message of a non-streamed answer, as the log keeps it: role, content and
/// tool calls (an SDK's null extras left out).
pub(crate) fn answer_message(answer: &Value) -> Value {
    let message = &answer["choices"][0]["message"];
    let mut out = json!({"role": "assistant", "content": message["content"].clone()});
    if let Some(calls) = message["tool_calls"].as_array().filter(|c| !c.is_empty()) {
        out["tool_calls"] = Value::Array(calls.clone());
    }
    out
}

/// What the LLM is asked for a session's title: the first exchange, each side cut to 1,000
/// characters (a title needs the topic, not the whole paste).
fn titling_prompt(prompt: &str, answer: &str) -> Value {
    let cut = |text: &str| text.chars().take(1000).collect::<String>();
    json!([
        {"role": "system", "content": "You title chat sessions. Given the first exchange of a session, answer with a title of at most eight words that says what it is about. Answer with the title alone: no quotes, no full stop, no preamble."},
        {"role": "user", "content": format!("User: {}\n\nAssistant: {}", cut(prompt), cut(answer))},
    ])
}

/// A title from the LLM's answer: its first line, without quotes, a `Title:` label or a
/// closing full stop, cut to the title length; `None` when nothing is left.
fn clean_title(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .strip_prefix("Title:")
        .or_else(|| line.strip_prefix("title:"))
        .unwrap_or(line)
        .trim()
        .trim_matches(|c| matches!(c, '"' | '\'' | '*' | '`' | '“' | '”'))
        .trim_end_matches('.')
        .trim();
    let title = mnemo_session::store::title_of(line);
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_line_without_quotes_labels_or_full_stop() {
        assert_eq!(
            clean_title("\n  \"Planning a Trip to Lisbon.\"\nBecause you asked").as_deref(),
            Some("Planning a Trip to Lisbon")
        );
        assert_eq!(
            clean_title("Title: Fixing the parser").as_deref(),
            Some("Fixing the parser")
        );
        assert_eq!(clean_title(" \n\"\" ").as_deref(), None);
        let long = "word ".repeat(60);
        assert!(clean_title(&long).unwrap().chars().count() <= mnemo_session::store::TITLE_CHARS);
    }
}
