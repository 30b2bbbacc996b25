//! A chat completion through memory: what `POST /v1/chat/completions` does.
//!
//! 1. The `memory_*` fields are taken out of the request ([`take_memory_fields`]); everything
//!    else goes upstream untouched. With `memory_session`, the messages are matched against
//!    the session's log ([`crate::sessions`]): the session's history goes upstream, and the
//!    agent's notes (`memory_agent`) join the system prompt.
//!    The request is then planned before any work: `max_tokens` must be a whole number
//!    that leaves room in the window, and what no governance can shrink (the instructions
//!    and the latest user message; everything with mode `none`) must fit, or it is refused
//!    now, before anything is searched.
//! 2. The memories of the conversation (and `global`) that answer the latest user message are
//!    retrieved and injected with the rolling summary ([`crate::inject`]); retrieval reads
//!    the message's first [`MAX_QUERY_BYTES`](mnemo_core::MAX_QUERY_BYTES).
//! 3. The outgoing copy is governed ([`crate::chat::governance`]): repaired, tool outputs offloaded,
//!    compacted or trimmed, the middle summarised, checked against the model's window. A
//!    request that cannot fit is refused here, before any upstream call and before its turn
//!    is stored (the client will send it again in another form).
//! 4. The session's new messages are appended to its log (fsynced).
//! 5. The request goes to the upstream LLM, streamed or not. Once the upstream has taken
//!    it (an answer, or a stream begun), the user's message is written to disk as a turn,
//!    before the client sees anything; it is indexed in the background, so the request
//!    waits for the file, not the embedding. A chat the upstream refuses (down, failing,
//!    timed out) stores no turn: the client's retry stores it once.
//! 6. When the answer is complete, it is appended to the session's log before the client
//!    sees its end; the assistant's turn is written and the write path
//!    ([`crate::write`]) runs in the background, one pass at a time per conversation.
//!
//! A client that disconnects in the middle of a stream stops mnemo reading the upstream; the
//! part of the answer received so far is stored as the assistant's turn, marked
//! `incomplete: true`, and the write path still runs for the user's message.
//!
//! There is one way in, [`ScopedClient::chat`] (and [`crate::MemoryClient::chat`], the same for the
//! store's owner), whose reply is whole or streamed as the request's `stream` asks. A front
//! end that checks who may touch what (the HTTP server with bearer tokens) calls it on
//! `client.as_caller(access)`: the [`Access`] is asked once the request's conversation and agent are known — after
//! step 1, since a session decides both — and before anything is searched, logged or
//! written, or anything is said about the session (that it was deleted, or is another
//! conversation's).

//!
//! The parts: [`governance`] fits a request to the model's window, [`inject`] puts the
//! memories and the summary into it, [`sessions`] keeps sessions' logs and agents' notes.

pub mod governance;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use mnemo_core::{stored_turn, ConversationId, MemoryRecord, Role};
use mnemo_llm::{ByteStream, DeltaAccumulator, LlmError};
use mnemo_store::StoredMemory;
use serde_json::{json, Map, Value};
use tracing::{debug, warn};

use crate::access::Access;
use crate::chat::governance::StrategyChoice;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::inject;
use crate::retrieval::SearchHit;
use crate::retrieval::{SearchRequest, Searched};
use crate::sessions::turns::{answer_message, SessionTurn};
use crate::state::usage::{TurnUsage, UsageTotals};
use mnemo_context::ContextReport;
use mnemo_session::{HistoryStyle, SessionId};

/// The memory settings of one chat request: the search that finds its memories, whose query
/// is filled in from the latest user message.
#[derive(Debug, Clone)]
pub struct MemoryFields {
    /// The conversation the turn belongs to.
    pub conversation: ConversationId,
    /// Whether the request named the conversation (`memory_id`), or it is the default.
    pub conversation_named: bool,
    /// The chat session the request continues.
    pub session: Option<SessionId>,
    /// How the request carries the session's history.
    pub history: HistoryStyle,
    /// How to search its memories; `top_k` 0 turns retrieval off.
    pub search: SearchRequest,
    /// How to govern what goes upstream.
    pub strategy: StrategyChoice,
    /// Whether the exchange is stored (the user's turn, the answer and the facts drawn
    /// from them); `memory_learn: false` asks without leaving a trace in memory.
    pub learn: bool,
}

/// The `memory_*` fields a chat request may carry; mnemo takes them out before forwarding.
/// `take_memory_fields` parses them (with messages that name the field); this type is what
/// the API documents, and a test keeps the two in step.
#[derive(Debug, Default, utoipa::ToSchema)]
pub struct ChatMemoryFields {
    /// The conversation (`[A-Za-z0-9._-]{1,128}`, not starting with `.`); `default` when unset.
    #[schema(pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub memory_id: Option<String>,
    /// Memories to inject, 0 to 100; 0 turns retrieval off.
    #[schema(minimum = 0, maximum = 100)]
    pub memory_top_k: Option<i64>,
    /// Weight of recency, 0..1, for queries about the present.
    #[schema(minimum = 0, maximum = 1)]
    pub memory_recency_weight: Option<f32>,
    /// Drop memories whose relevance (0..1) is below this.
    #[schema(minimum = 0, maximum = 1)]
    pub memory_score_threshold: Option<f32>,
    /// Inject no memory when the best found is less similar to the message than this
    /// (cosine, 0..1); 0 turns the floor off. Default `relevance_floor` (0.25).
    #[schema(minimum = 0, maximum = 1)]
    pub memory_relevance_floor: Option<f32>,
    /// Drop memories whose cross-encoder score (0..1, absolute) is below this.
    #[schema(minimum = 0, maximum = 1)]
    pub memory_min_rerank_score: Option<f32>,
    /// Metadata filter (eq, ne, gt, gte, lt, lte, in, nin, `$or`).
    #[schema(value_type = Option<Object>)]
    pub memory_filter: Option<Value>,
    /// How to govern what this request sends upstream; over the conversation's stored
    /// strategy and the agent's, field by field. An unknown field or a value out of range is
    /// a 400 that names it.
    pub memory_strategy: Option<mnemo_context::Strategy>,
    /// The agent: its default strategy applies (`[context.agents.NAME]` in the config) and
    /// the first 200 lines of its notes (`agents/NAME/MEMORY.md`) join the system prompt.
    #[schema(pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub memory_agent: Option<String>,
    /// The chat session this request continues (created on its first user message): every
    /// message is logged, and a request may send only its new messages.
    #[schema(pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub memory_session: Option<String>,
    /// How the request carries the session's history: `client` (the whole history, resent),
    /// `server` (only new messages) or `auto` (told from the messages; the default).
    #[schema(pattern = "^(auto|client|server)$")]
    pub memory_history: Option<String>,
    /// `false`: the exchange is not stored in long-term memory (no turns, no facts, no
    /// summary), for a question that must not change what it asks about (a probe, a
    /// benchmark). Retrieval, governance and a session's log are as usual. Default `true`.
    pub memory_learn: Option<bool>,
}

const KNOWN_FIELDS: [&str; 12] = [
    "memory_id",
    "memory_top_k",
    "memory_recency_weight",
    "memory_score_threshold",
    "memory_relevance_floor",
    "memory_min_rerank_score",
    "memory_filter",
    "memory_strategy",
    "memory_agent",
    "memory_session",
    "memory_history",
    "memory_learn",
];

/// Takes the `memory_*` fields out of `body` and checks them. An unknown `memory_*` field is
/// an error (a typo would otherwise silently do nothing); other fields are the upstream's.
pub fn take_memory_fields(body: &mut Map<String, Value>) -> Result<MemoryFields, EngineError> {
    let invalid = |m: String| EngineError::InvalidInput(m);
    let names: Vec<String> = body
        .keys()
        .filter(|k| k.starts_with("memory_"))
        .cloned()
        .collect();
    let mut fields = Map::new();
    for name in names {
        if !KNOWN_FIELDS.contains(&name.as_str()) {
            return Err(invalid(format!(
                "unknown field {name:?}; mnemo understands {}",
                KNOWN_FIELDS.join(", ")
            )));
        }
        if let Some(value) = body.remove(&name) {
            fields.insert(name, value);
        }
    }
    let (conversation, conversation_named) = match fields.get("memory_id") {
        None | Some(Value::Null) => (ConversationId::default_conversation(), false),
        Some(Value::String(id)) => (
            ConversationId::new(id).map_err(|e| invalid(format!("memory_id: {e}")))?,
            true,
        ),
        Some(other) => return Err(invalid(format!("memory_id must be a string, not {other}"))),
    };
    let session = match fields.get("memory_session") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => {
            Some(SessionId::new(id).map_err(|e| invalid(format!("memory_session: {e}")))?)
        }
        Some(other) => {
            return Err(invalid(format!(
                "memory_session must be a string, not {other}"
            )))
        }
    };
    let history = match fields.get("memory_history") {
        None | Some(Value::Null) => HistoryStyle::Auto,
        Some(value) => value
            .as_str()
            .and_then(HistoryStyle::parse)
            .ok_or_else(|| {
                invalid(format!(
                    "memory_history must be \"auto\", \"client\" or \"server\", not {value}"
                ))
            })?,
    };
    // `memory_top_k: 0` turns retrieval off; a negative one is a mistake, said as such. The
    // engine caps the other end.
    let top_k = match fields.get("memory_top_k") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(k) if k < 0 => {
                return Err(invalid(format!(
                    "memory_top_k must be 0 (no memories) or more, not {k}"
                )))
            }
            Some(k) => Some(usize::try_from(k).unwrap_or(usize::MAX)),
            None => return Err(invalid(format!("memory_top_k must be an integer, not {v}"))),
        },
    };
    let number = |name: &str| -> Result<Option<f32>, EngineError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| invalid(format!("{name} must be a number, not {v}"))),
        }
    };
    let search = SearchRequest {
        top_k,
        recency_weight: number("memory_recency_weight")?,
        score_threshold: number("memory_score_threshold")?,
        relevance_floor: number("memory_relevance_floor")?,
        min_rerank_score: number("memory_min_rerank_score")?,
        filter: fields
            .get("memory_filter")
            .filter(|v| !v.is_null())
            .cloned(),
        ..SearchRequest::new("", conversation.clone())
    };
    search
        .validate()
        .map_err(|e| invalid(format!("memory_{e}")))?;
    let request = match fields.get("memory_strategy") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            mnemo_context::Strategy::from_json(value.clone())
                .map_err(|e| invalid(format!("memory_strategy: {e}")))?,
        ),
    };
    // Agent names follow the conversation-id rules: they name config tables and, later,
    // folders.
    let agent = match fields.get("memory_agent") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(
            ConversationId::new(name)
                .map_err(|e| invalid(format!("memory_agent: {}", e.describe("agent name"))))?
                .as_str()
                .to_owned(),
        ),
        Some(other) => {
            return Err(invalid(format!(
                "memory_agent must be a string, not {other}"
            )))
        }
    };
    let learn = match fields.get("memory_learn") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(learn)) => *learn,
        Some(other) => {
            return Err(invalid(format!(
                "memory_learn must be true or false, not {other}"
            )))
        }
    };
    Ok(MemoryFields {
        conversation,
        conversation_named,
        session,
        history,
        search,
        strategy: StrategyChoice {
            request,
            agent,
            owns_history: false,
        },
        learn,
    })
}

/// A chat request made ready for the upstream: memories injected, the user's turn on disk.
#[derive(Debug)]
pub struct PreparedChat {
    /// The conversation the turn belongs to.
    pub conversation: ConversationId,
    /// The request to send upstream.
    pub body: Value,
    /// The memories injected, best first.
    pub hits: Vec<SearchHit>,
    /// The user's message as a turn, written once the upstream takes the request: a chat
    /// the upstream refuses stores nothing, and the client's retry stores it once.
    pub user_turn: Option<MemoryRecord>,
    /// Whether the exchange is stored (`memory_learn`).
    pub learn: bool,
    /// What context governance did to the request.
    pub context: ContextReport,
    /// How long retrieval and governance took.
    pub timings: ChatTimings,
    /// The session the request was logged in, whose answer is logged next.
    pub(crate) session: Option<SessionTurn>,
}

/// A streamed answer: the upstream's status and headers, and its body passed through chunk
/// by chunk while the assistant's words are collected for its turn.
pub struct ChatStreamReply {
    /// The upstream's status.
    pub status: u16,
    /// The upstream's headers, less hop-by-hop ones.
    pub headers: mnemo_llm::http::HeaderMap,
    /// The memories injected, best first.
    pub hits: Vec<SearchHit>,
    /// What context governance did to the request.
    pub context: ContextReport,
    /// The answer, as the upstream sends it.
    pub body: ByteStream,
}

/// A chat's reply, as the request's `stream` asked.
pub enum ChatReply {
    /// The whole answer at once.
    Answer(ChatAnswer),
    /// The answer as the upstream streams it.
    Stream(ChatStreamReply),
}

/// A whole (non-streamed) answer.
#[derive(Debug)]
pub struct ChatAnswer {
    /// The upstream's answer as it was, plus `memory_hits` (the memories that were injected)
    /// and `memory_context` (what governance did).
    pub body: Value,
    /// What context governance did to the request (for metrics).
    pub context: ContextReport,
    /// Where the time went.
    pub timings: ChatTimings,
}

/// Where a chat answer's time went (a benchmark reads them; the answer's JSON does not carry
/// them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChatTimings {
    /// Searching the memories (with the query's embedding) and reading the summary.
    pub retrieval: std::time::Duration,
    /// Context governance: counting, offloading, compaction, summaries.
    pub governance: std::time::Duration,
    /// The upstream call, until the whole answer was in.
    pub upstream: std::time::Duration,
}

impl std::fmt::Debug for ChatReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answer(answer) => f.debug_tuple("Answer").field(answer).finish(),
            Self::Stream(stream) => f
                .debug_struct("Stream")
                .field("status", &stream.status)
                .finish_non_exhaustive(),
        }
    }
}

impl ChatReply {
    /// What context governance did to the request.
    pub fn context(&self) -> &ContextReport {
        match self {
            Self::Answer(answer) => &answer.context,
            Self::Stream(stream) => &stream.context,
        }
    }

    /// The whole answer's body; `None` for a streamed reply, which is read as a stream.
    pub fn into_json(self) -> Option<Value> {
        match self {
            Self::Answer(answer) => Some(answer.body),
            Self::Stream(_) => None,
        }
    }
}

/// The chat wing's handle on the engine ([`Engine::chat`]).
#[derive(Clone)]
pub(crate) struct ChatWing {
    pub(crate) engine: Arc<Engine>,
}

impl Engine {
    /// Lends the chat wing.
    pub(crate) fn chat(self: &Arc<Self>) -> ChatWing {
        ChatWing {
            engine: self.clone(),
        }
    }
}

impl ChatWing {
    /// A chat completion through memory, the reply whole or streamed as the body's
    /// `stream` asks ([`crate::ScopedClient::chat`]). A whole answer is awaited in a task of
    /// its own, which the engine waits for at shutdown, so the turn is finished even when the
    /// caller stops waiting; a streamed turn is finished when its stream ends or is dropped.
    pub(crate) async fn chat(
        &self,
        body: Value,
        access: Arc<dyn Access>,
    ) -> Result<ChatReply, EngineError> {
        if body["stream"].as_bool().unwrap_or(false) {
            let reply = self.answer_streamed(body, &*access).await?;
            return Ok(ChatReply::Stream(reply));
        }
        let wing = self.clone();
        let answer = self
            .engine
            .detached_chats()
            .spawn(async move { wing.answer_whole(body, &*access).await })
            .await
            .map_err(|e| EngineError::Task(e.to_string()))??;
        Ok(ChatReply::Answer(answer))
    }

    /// `hits` and, for each fact a later fact holds over (`conflicts_with`) that retrieval
    /// left out, that later fact: a superseded value is never shown without what holds now.
    /// A lookup that fails leaves the hits as they were; the mark still shows.
    async fn with_what_holds_now(&self, mut hits: Vec<SearchHit>) -> Vec<SearchHit> {
        let mut wanted: Vec<(mnemo_core::MemoryId, ConversationId)> = Vec::new();
        for hit in &hits {
            let Some(later) = hit.conflicts_with else {
                continue;
            };
            if !hits.iter().any(|h| h.id == later) && !wanted.iter().any(|(id, _)| *id == later) {
                wanted.push((later, hit.conversation_id.clone()));
            }
        }
        for (later, conversation) in wanted {
            match self.engine.memories().get(later).await {
                Ok(Some(fact))
                    if fact.record.role == Role::Memory
                        && fact.record.conversation_id == conversation =>
                {
                    hits.push(SearchHit::unranked(fact));
                }
                Ok(_) => {}
                Err(e) => warn!(%later, "the fact that holds now could not be read ({e})"),
            }
        }
        hits
    }

    /// Steps 1-4 of a chat: memory fields out, memories in, the request governed, the
    /// user's turn written; `access` checked once the request's conversation and agent are
    /// known.
    async fn prepare_chat(
        &self,
        body: Value,
        access: &dyn Access,
    ) -> Result<PreparedChat, EngineError> {
        let Value::Object(mut body) = body else {
            return Err(EngineError::InvalidInput(
                "the request body must be a JSON object".into(),
            ));
        };
        if !body.get("messages").is_some_and(Value::is_array) {
            return Err(EngineError::InvalidInput(
                "\"messages\" must be a list of chat messages".into(),
            ));
        }
        let mut fields = take_memory_fields(&mut body)?;
        let mut body = Value::Object(body);
        if let Some(id) = &fields.session {
            if let Some((conversation, agent)) = self.engine.sessions().compaction_asked(id)? {
                access.check_chat(&conversation, agent.as_deref())?;
                self.engine.sessions().run_asked_compaction(id).await;
            }
        }
        let pending = match fields.session.clone() {
            Some(id) => Some(
                self.engine
                    .sessions()
                    .match_session(&id, fields.history, &mut fields.strategy.agent, &mut body)
                    .await?,
            ),
            None => None,
        };
        // A session's conversation is its own. The caller's scope is checked against it before
        // anything about the session is said (deleted, another conversation's): a caller who
        // may not see it learns nothing of it.
        let session_conversation = match &pending {
            Some(pending) => pending.conversation()?,
            None => None,
        };
        let named = fields
            .conversation_named
            .then(|| fields.conversation.clone());
        if let Some(conversation) = session_conversation {
            fields.search.conversation_id = conversation.clone();
            fields.conversation = conversation;
        }
        // Nothing has been searched, logged or written yet; a refusal leaves no trace.
        access.check_chat(&fields.conversation, fields.strategy.agent.as_deref())?;
        if let Some(pending) = &pending {
            pending.check_usable(named.as_ref())?;
            fields.strategy.owns_history = pending.owns_history;
        }
        fields.search.without_global = !access.reads_global();
        // The cheap checks before any work: the reserve for the answer, and whether what no
        // governance can shrink fits the window at all.
        let mut plan = self
            .plan_governance(&fields.conversation, &fields.strategy, &body)
            .await?;
        if fields.session.is_none() {
            let target = crate::conversation_settings::CompactTarget::Conversation(
                fields.conversation.clone(),
            );
            if let Some(focus) = self.engine.context().take_compact_request(&target.key()) {
                plan.summarise_now(focus);
            }
        }
        self.preflight_before_retrieval(&plan, &body).await?;
        // A resent message of a session is not a new turn.
        let user_text = inject::last_user_text(&body)
            .filter(|t| !t.trim().is_empty())
            .filter(|_| pending.as_ref().is_none_or(|p| p.user_message_is_new));
        if fields.learn {
            // Before retrieval, so what was learnt meanwhile is found.
            self.engine
                .write()
                .wait_for_room(&fields.conversation)
                .await;
        }

        let started = std::time::Instant::now();
        let searched = match &user_text {
            Some(text) => {
                let search = SearchRequest {
                    query: retrieval_query(text).to_owned(),
                    relevance_floor: fields
                        .search
                        .relevance_floor
                        .or(Some(self.engine.config().relevance_floor)),
                    ..fields.search.clone()
                };
                match self.engine.memories().search_judged(search).await {
                    Ok(searched) => searched,
                    Err(e @ EngineError::InvalidInput(_)) => return Err(e),
                    // The user's message matters more than the memories it would have had:
                    // it is answered and stored without them.
                    Err(e) => {
                        warn!(conversation = %fields.conversation, "retrieval failed ({e}); answering without memories");
                        Searched::default()
                    }
                }
            }
            None => Searched::default(),
        };
        let nothing_relevant = searched.below_floor > 0;
        let hits = self.with_what_holds_now(searched.hits).await;
        let summary = {
            let conversation = fields.conversation.clone();
            self.engine
                .blocking(move |engine| Ok(engine.summary(&conversation)))
                .await?
        };
        let found = inject::Found {
            memories: &hits,
            nothing_relevant,
        };
        let mut body = inject::inject(&body, summary.as_deref(), found).unwrap_or(body);
        if let Some(agent) = &fields.strategy.agent {
            if let Some(notes) = self.engine.sessions().agent_notes_head(agent).await? {
                crate::inject::agent_notes(&mut body, &notes);
            }
        }
        let retrieved = started.elapsed();
        let context = self
            .govern(
                &fields.conversation,
                fields.session.as_ref(),
                &plan,
                &mut body,
            )
            .await?;
        let timings = ChatTimings {
            retrieval: retrieved,
            governance: started.elapsed().saturating_sub(retrieved),
            upstream: std::time::Duration::ZERO,
        };
        let session = match pending {
            Some(pending) => {
                let model = body["model"]
                    .as_str()
                    .unwrap_or(&self.engine.config().llm_model)
                    .to_owned();
                let agent = fields.strategy.agent.as_deref();
                Some(
                    self.engine
                        .sessions()
                        .log_request(pending, &fields.conversation, agent, &model, &context)
                        .await?,
                )
            }
            None => None,
        };

        let user_turn = user_text.filter(|_| fields.learn).map(|text| {
            let mut record =
                MemoryRecord::new(fields.conversation.clone(), Role::User, stored_turn(text));
            if let Some(name) = last_user_name(&body) {
                record
                    .metadata
                    .insert(crate::index::keys::SPEAKER_FIELD.into(), name.into());
            }
            record
        });
        debug!(
            retrieval_ms = retrieved.as_secs_f64() * 1e3,
            governance_ms = (started.elapsed() - retrieved).as_secs_f64() * 1e3,
            "chat request prepared"
        );
        Ok(PreparedChat {
            conversation: fields.conversation,
            body,
            hits,
            user_turn,
            learn: fields.learn,
            context,
            timings,
            session,
        })
    }

    /// A whole answer: the chat prepared, sent upstream, logged, and its turn finished.
    async fn answer_whole(
        &self,
        body: Value,
        access: &dyn Access,
    ) -> Result<ChatAnswer, EngineError> {
        let mut prepared = self.prepare_chat(body, access).await?;
        let llm = self.engine.llm().as_ref().ok_or(EngineError::NoUpstream)?;
        let asked = std::time::Instant::now();
        let mut answer = llm.chat(&prepared.body).await?;
        let timings = ChatTimings {
            upstream: asked.elapsed(),
            ..prepared.timings
        };
        let user_turn = self.write_user_turn(prepared.user_turn.take()).await?;
        let text = answer["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned);
        let spent = UsageOfAnswer::of(&prepared);
        let turn = spent.turn(self, answer.get("usage"), &answer_message(&answer));
        self.record_usage(&prepared.conversation, spent.session.as_ref(), turn);
        if let Some(turn) = prepared.session {
            let logged =
                self.engine
                    .sessions()
                    .spawn_log_answer(turn, None, answer_message(&answer), false);
            if let Err(e) = logged.await {
                warn!("cannot log the answer: {e}");
            }
        }
        if let Value::Object(map) = &mut answer {
            map.insert("memory_hits".into(), hits_json(&prepared.hits));
            map.insert("memory_context".into(), context_json(&prepared.context));
        }
        if prepared.learn {
            self.finish_turn(prepared.conversation, user_turn, text, false);
        }
        Ok(ChatAnswer {
            body: answer,
            context: prepared.context,
            timings,
        })
    }

    /// A streamed answer: the chat prepared and sent upstream; the turn is finished as the
    /// stream ends.
    async fn answer_streamed(
        &self,
        body: Value,
        access: &dyn Access,
    ) -> Result<ChatStreamReply, EngineError> {
        let mut prepared = self.prepare_chat(body, access).await?;
        let llm = self.engine.llm().as_ref().ok_or(EngineError::NoUpstream)?;
        let upstream = llm.chat_stream(&prepared.body).await?;
        let user_turn = self.write_user_turn(prepared.user_turn.take()).await?;
        let spent = UsageOfAnswer::of(&prepared);
        let recorder = RecordingStream {
            upstream: upstream.body,
            words: DeltaAccumulator::new(),
            spent,
            session: prepared.session,
            finish: Some(TurnEnd {
                client: self.clone(),
                conversation: prepared.conversation,
                user_turn,
                learn: prepared.learn,
            }),
        };
        Ok(ChatStreamReply {
            status: upstream.status.as_u16(),
            headers: upstream.headers,
            hits: prepared.hits,
            context: prepared.context,
            body: Box::pin(recorder),
        })
    }

    /// Step 4, once the upstream has taken the request: the user's message written as a
    /// turn, durable before the answer reaches the client (indexed in the background).
    async fn write_user_turn(
        &self,
        record: Option<MemoryRecord>,
    ) -> Result<Option<StoredMemory>, EngineError> {
        match record {
            Some(record) => Ok(Some(self.engine.memories().write_then_index(record).await?)),
            None => Ok(None),
        }
    }

    /// Adds an answer's usage to its conversation's totals and its session's, in the
    /// background ([`crate::state::usage`]).
    fn record_usage(
        &self,
        conversation: &ConversationId,
        session: Option<&SessionId>,
        turn: TurnUsage,
    ) {
        let mut folders = vec![self.engine.settings().settings_dir(conversation)];
        folders.extend(session.map(|id| self.engine.session_state().store.dir(id)));
        let engine = self.engine.clone();
        self.engine.background().spawn(async move {
            let recorded = crate::blocking::blocking(move || {
                engine.usage().record(&folders, &turn);
                Ok(())
            });
            if let Err(e) = recorded.await {
                warn!("cannot record the answer's usage: {e}");
            }
        });
    }

    pub(crate) async fn conversation_usage(
        &self,
        conversation: &ConversationId,
    ) -> Result<UsageTotals, EngineError> {
        let folder = self.engine.settings().settings_dir(conversation);
        crate::blocking::blocking(move || Ok(crate::state::usage::read_totals(&folder))).await
    }

    pub(crate) fn context_window(&self, model: &str) -> u64 {
        self.engine.context().window(model, None).tokens
    }

    pub(crate) async fn count_message_tokens(&self, model: &str, messages: &[Value]) -> usize {
        self.count_locally(model, messages).await;
        let counter = self.engine.context().counter(model);
        mnemo_context::tokens::messages_tokens(counter.as_ref(), messages)
    }

    pub(crate) fn usage_since_start(&self) -> UsageTotals {
        self.engine.usage().overall()
    }

    /// Step 5, in the background: the assistant's turn, then the write path, queued and
    /// journaled ([`crate::write::queue`]).
    fn finish_turn(
        &self,
        conversation: ConversationId,
        user_turn: Option<StoredMemory>,
        assistant_text: Option<String>,
        incomplete: bool,
    ) {
        let pass = crate::state::pass_queue::PendingPass {
            conversation,
            user_turn: user_turn
                .map(|t| PathBuf::from(self.engine.store().relative(&t.path).as_ref())),
            assistant_text: assistant_text.filter(|t| !t.trim().is_empty()),
            incomplete,
        };
        self.engine.write().queue_pass(pass);
    }
}

/// What retrieval reads of a chat's latest user message: its first
/// [`MAX_QUERY_BYTES`](mnemo_core::MAX_QUERY_BYTES), cut at a character boundary. A pasted
/// document is not embedded and scored whole; its opening says what it is about.
pub(crate) fn retrieval_query(text: &str) -> &str {
    let mut cut = text.len().min(mnemo_core::MAX_QUERY_BYTES);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// The name the last user message gives its author, if any (OpenAI's `name` field).
fn last_user_name(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?
        .get("name")?
        .as_str()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        // OpenAI allows 64 characters; a longer "name" is not one, and must not make the
        // turn's metadata too large to read back.
        .map(|n| n.chars().take(MAX_SPEAKER_CHARS).collect())
}

/// The longest speaker name kept from a message's `name`.
const MAX_SPEAKER_CHARS: usize = 128;

/// The injected memories, as a response's `memory_hits`.
pub fn hits_json(hits: &[SearchHit]) -> Value {
    Value::Array(
        hits.iter()
            .map(|h| {
                json!({
                    "id": h.id,
                    "conversation_id": h.conversation_id,
                    "role": h.role,
                    "content": h.content,
                    "created_at": h.created_at,
                    "score": h.score,
                })
            })
            .collect(),
    )
}

/// What governance did, as a response's `memory_context`.
pub fn context_json(report: &ContextReport) -> Value {
    serde_json::to_value(report).unwrap_or(Value::Null)
}

/// What an answer's usage is counted against, and what mnemo counts when the upstream
/// reports none: the model it went to, the prompt as governance counted it.
struct UsageOfAnswer {
    conversation: ConversationId,
    session: Option<SessionId>,
    model: String,
    prompt_tokens: u64,
}

impl UsageOfAnswer {
    fn of(prepared: &PreparedChat) -> Self {
        Self {
            conversation: prepared.conversation.clone(),
            session: prepared.session.as_ref().map(|turn| turn.id.clone()),
            model: prepared.body["model"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            prompt_tokens: prepared.context.tokens_after as u64,
        }
    }

    /// The answer's usage: `reported`, or the prompt's count and `answer`'s.
    fn turn(&self, client: &ChatWing, reported: Option<&Value>, answer: &Value) -> TurnUsage {
        TurnUsage::new(&self.model, reported, || {
            let counter = client.engine.context().counter(&self.model);
            let completion = mnemo_context::tokens::message_tokens(counter.as_ref(), answer);
            (self.prompt_tokens, completion as u64)
        })
    }
}

/// What to do when a stream ends, however it ends.
struct TurnEnd {
    client: ChatWing,
    conversation: ConversationId,
    user_turn: Option<StoredMemory>,
    /// Whether the exchange is stored (`memory_learn`).
    learn: bool,
}

/// The upstream's stream, passed through while the assistant's words are collected.
struct RecordingStream {
    upstream: ByteStream,
    words: DeltaAccumulator,
    /// What the answer's usage counts against.
    spent: UsageOfAnswer,
    /// The session whose answer this is, until the answer is logged.
    session: Option<SessionTurn>,
    finish: Option<TurnEnd>,
}

impl RecordingStream {
    /// Logs the answer in its session. Called when the answer is complete, before its last
    /// bytes go to the client: the session's lock is taken here, so a next request of the
    /// session waits for the answer to be in the log.
    fn log_answer(&mut self, complete: bool) {
        let (Some(turn), Some(end)) = (self.session.take(), self.finish.as_ref()) else {
            return;
        };
        let guard = turn.try_lock();
        end.client
            .engine
            .sessions()
            .spawn_log_answer(turn, guard, self.words.message(), !complete);
    }

    fn end(&mut self, complete: bool) {
        self.log_answer(complete);
        if let Some(end) = self.finish.take() {
            let answer = self.words.message();
            let turn = self.spent.turn(&end.client, self.words.usage(), &answer);
            let spent = &self.spent;
            end.client
                .record_usage(&spent.conversation, spent.session.as_ref(), turn);
            if end.learn {
                let text = self.words.text().to_owned();
                end.client
                    .finish_turn(end.conversation, end.user_turn, Some(text), !complete);
            }
        }
    }
}

impl Stream for RecordingStream {
    type Item = Result<Bytes, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.upstream.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => {
                self.words.feed(bytes);
                if self.words.is_complete() {
                    self.log_answer(true);
                }
            }
            Poll::Ready(None) => {
                let complete = self.words.is_complete();
                self.end(complete);
            }
            Poll::Ready(Some(Err(_))) => self.end(false),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for RecordingStream {
    /// The client went away before the end: keep what was said so far.
    fn drop(&mut self) {
        self.end(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chat request bodies nobody wrote by hand: a body with every `memory_*` field,
    /// mutated. Whatever parses as a JSON object has its fields taken out or refused as
    /// invalid input naming a `memory_*` field (or `messages`), never a panic.
    #[test]
    fn hostile_memory_fields_are_taken_out_or_refused_by_name() {
        use mnemo_test_support::hostile;
        use proptest::prelude::*;
        let base = serde_json::to_vec(&json!({
            "model": "m", "messages": [{"role": "user", "content": "Where do I live?"}],
            "memory_id": "trip", "memory_session": "s-1", "memory_history": "server",
            "memory_top_k": 3, "memory_recency_weight": 0.5, "memory_mmr_lambda": 0.7,
            "memory_filter": {"topic": "food", "n": {"gte": 2}}, "memory_min_rerank_score": 0.35,
            "memory_strategy": {"mode": "auto", "keep": {"tokens": 900}}, "memory_agent": "a",
            "memory_learn": false, "memory_score_threshold": 0.1
        }))
        .unwrap();
        proptest::test_runner::TestRunner::new(hostile::config())
            .run(&hostile::mutated(base), |bytes| {
                let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&bytes) else {
                    return Ok(());
                };
                if let Err(e) = take_memory_fields(&mut body) {
                    prop_assert!(e.is_invalid_input(), "{e}");
                    let message = e.to_string();
                    prop_assert!(
                        message.contains("memory_") || message.contains("messages"),
                        "{message}"
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn retrieval_reads_the_first_bytes_of_a_long_message() {
        assert_eq!(retrieval_query("Where do I live?"), "Where do I live?");
        let long = format!("{}{}", "a", "é".repeat(10_000));
        let query = retrieval_query(&long);
        assert!(query.len() <= mnemo_core::MAX_QUERY_BYTES);
        assert!(query.len() >= mnemo_core::MAX_QUERY_BYTES - 1);
        assert!(long.starts_with(query));
    }

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn memory_fields_are_taken_out_and_checked() {
        let mut b = body(json!({
            "model": "m", "messages": [], "temperature": 0.1,
            "memory_id": "trip", "memory_top_k": 3, "memory_recency_weight": 0.5,
            "memory_filter": {"topic": "food"}, "memory_min_rerank_score": 0.35
        }));
        let f = take_memory_fields(&mut b).unwrap();
        assert_eq!(f.conversation.as_str(), "trip");
        assert_eq!(f.search.min_rerank_score, Some(0.35));
        assert_eq!(f.search.top_k, Some(3));
        assert_eq!(f.search.recency_weight, Some(0.5));
        assert!(f.search.filter.is_some());
        assert_eq!(b.len(), 3, "only the upstream's fields are left: {b:?}");

        let mut b = body(json!({"messages": [], "memory_top_k": 0}));
        assert_eq!(take_memory_fields(&mut b).unwrap().search.top_k, Some(0));
        let mut b = body(json!({"messages": []}));
        let f = take_memory_fields(&mut b).unwrap();
        assert_eq!(
            (f.conversation.as_str(), f.search.top_k),
            ("default", None),
            "the engine fills in the configured default"
        );
    }

    #[test]
    fn the_documented_fields_are_the_parsed_ones() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(ChatMemoryFields::schema()).unwrap();
        let mut documented: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        documented.sort();
        let mut parsed = KNOWN_FIELDS.to_vec();
        parsed.sort();
        assert_eq!(documented, parsed);
    }

    #[test]
    fn bad_memory_fields_say_what_is_wrong() {
        for (fields, expected) in [
            (json!({"memory_id": "../etc"}), "memory_id"),
            (json!({"memory_id": 7}), "must be a string"),
            (json!({"memory_top_k": "five"}), "must be an integer"),
            (json!({"memory_top_k": 1000}), "at most 100"),
            (
                json!({"memory_top_k": -5}),
                "0 (no memories) or more, not -5",
            ),
            (json!({"memory_recency_weight": 2}), "between 0 and 1"),
            (
                json!({"memory_min_rerank_score": -0.1}),
                "min_rerank_score must be between 0 and 1",
            ),
            (json!({"memory_topk": 3}), "unknown field \"memory_topk\""),
            (
                json!({"memory_learn": "no"}),
                "memory_learn must be true or false",
            ),
        ] {
            let mut b = body(fields.clone());
            let err = take_memory_fields(&mut b).unwrap_err();
            assert!(err.is_invalid_input(), "{fields}");
            assert!(err.to_string().contains(expected), "{fields}: {err}");
        }
    }
}
