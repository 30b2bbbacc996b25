//! A chat request's part in its session: matched against the log, logged before it goes
//! upstream, its answer logged before the client sees its end, the session titled.

use chrono::Utc;
use mnemo_context::summarize::SummaryOutcome;
use mnemo_core::{ConversationId, SessionTitles};
use mnemo_session::history::{split, HistoryStyle};
use mnemo_session::{History, LoadedSession, Record, SessionError, SessionId, SessionMeta};
use serde_json::{json, Value};
use tokio::sync::OwnedMutexGuard;
use tracing::warn;

use crate::blocking::blocking;
use crate::error::EngineError;
use crate::sessions::{stored_conversation, SessionWing};
use crate::state::sessions::Slot;
use mnemo_context::ContextReport;

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

impl SessionTurn {
    /// The session's lock, if nobody holds it: taken when a streamed answer ends, so the
    /// answer is logged before a next request of the session can be matched.
    pub(crate) fn try_lock(&self) -> Option<OwnedMutexGuard<Option<LoadedSession>>> {
        self.slot.clone().try_lock_owned().ok()
    }
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

impl SessionWing {
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
        let store = self.log_store().clone();
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
        self.engine.background().spawn(async move {
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
            let by_llm = client.engine.config().session_titles == SessionTitles::Llm;
            if let (true, Some(prompt)) = (by_llm, titled_from) {
                client.title_by_llm(&id, &prompt, &answer).await;
            }
        })
    }

    /// Asks the LLM for a title of the session that `prompt` began and `answer` answered,
    /// and sets it if the title is still the one the prompt gave (an edit or a rename since
    /// wins). A failure leaves the prompt's title, with a warning.
    async fn title_by_llm(&self, id: &SessionId, prompt: &str, answer: &str) {
        let Some(llm) = self.engine.llm().as_ref() else {
            return;
        };
        let body = json!({
            "model": self.engine.config().llm_model,
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
        let store = self.log_store().clone();
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
        let store = self.log_store().clone();
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
