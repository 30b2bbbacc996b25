//! Compacting a session: its older messages summarised by the upstream, now or on the way
//! of its next request when asked.

use chrono::Utc;
use mnemo_context::summarize::{cut, prefix_hashes, SummaryAsk, SummaryCall};
use mnemo_context::tokens::messages_tokens;
use mnemo_context::{DirSummaryStore, Summariser};
use mnemo_core::ConversationId;
use mnemo_session::{Record, SessionError, SessionId};
use serde::Serialize;
use serde_json::Value;
use tracing::warn;

use crate::blocking::blocking;
use crate::error::EngineError;
use crate::sessions::{loaded, stored_conversation, SessionWing};

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

/// Where the latest turn (the last user message and what followed) starts.
fn latest_turn_start(messages: &[Value]) -> usize {
    messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(messages.len())
}

impl SessionWing {
    pub(crate) async fn compact_session(
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
        let counter = self.engine.context().counter(&model);
        let window = self
            .engine
            .context()
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
        let summarised = match self.engine.llm().as_ref() {
            Some(llm) => {
                let summaries = DirSummaryStore::new(self.log_store().summaries_dir(id));
                let summariser = crate::conversation_settings::UpstreamSummariser { llm };
                let hashes = prefix_hashes(&messages[..covers]);
                let call = SummaryCall {
                    summariser: &summariser as &dyn Summariser,
                    store: &summaries,
                    counter: counter.as_ref(),
                    chunk_tokens: crate::state::governance::summary_chunk_tokens(window.tokens),
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
        let store = self.log_store().clone();
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
        let key = crate::conversation_settings::CompactTarget::Session(id.clone()).key();
        if !self.engine.context().compact_requested(&key) {
            return Ok(None);
        }
        let Ok(meta) = self.log_store().existing_meta(id) else {
            return Ok(None);
        };
        Ok(Some((stored_conversation(id, &meta)?, meta.agent)))
    }

    /// Runs the compaction asked for session `id`'s next request. A failure is logged and
    /// the request goes on: it asked for an answer.
    pub(crate) async fn run_asked_compaction(&self, id: &SessionId) {
        let key = crate::conversation_settings::CompactTarget::Session(id.clone()).key();
        let Some(focus) = self.engine.context().take_compact_request(&key) else {
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
}
