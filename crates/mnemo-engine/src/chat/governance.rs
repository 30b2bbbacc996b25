//! Context governance in the proxy: `mnemo-context`'s pipeline on the outgoing copy of every
//! chat request, after memories are injected.
//!
//! - The strategy is merged field by field: the request's `memory_strategy`, over the
//!   conversation's stored one (`conversations/<id>/strategy.yaml`, hand-editable and
//!   versioned), over the agent's (`[context.agents.NAME]`, chosen by `memory_agent`), over
//!   `[context]`'s defaults.
//! - Tokens are counted exactly for OpenAI's model families, by the local LLM's own
//!   tokenizer (llama.cpp's `/tokenize`) for the local model, else estimated; counts are
//!   cached, since clients resend their whole history every turn.
//! - Offloaded tool outputs and summaries are kept under `conversations/<id>/` (unversioned),
//!   or under `sessions/<id>/` for a request of a session, so a resent history reuses its
//!   summary instead of paying for it again; summaries come from the configured upstream.
//! - Each conversation (and session) has an inflation guard, so a history governance cannot shrink is not
//!   tried (and paid for) again until it grows.
//! - A request is planned (`MemoryClient::plan_governance`) before anything is searched:
//!   its strategy, model, window and the tokens reserved for the answer (`max_tokens` or
//!   `max_completion_tokens`, a whole number that must leave room in the window, else a 400
//!   naming it), and a first pre-flight refuses what no governance could make fit, so a
//!   request that will be refused costs no retrieval.
//! - Every folder of context state (`conversations/<id>/`, its `tool_outputs/` and
//!   `summaries/`) is a [`StoreDir`], checked at every level each time it is read or written.

use std::sync::Arc;

use mnemo_context::messages::{head_len, strip_internal_fields};
use mnemo_context::strategy::{Mode, ResolvedStrategy};
use mnemo_context::tokens::message_tokens;
use mnemo_context::window::Window;
use mnemo_context::{
    ContextLengthExceeded, ContextReport, DirOutputStore, DirSummaryStore, Governor, Strategy,
    Summariser, TokenCounter,
};
use mnemo_core::{ConversationId, LOCAL_LLM_ALIAS};
use mnemo_store::layout;
use serde_json::Value;
use tracing::debug;

use crate::chat::ChatWing;
use crate::conversation_settings::{owned_history_default, UpstreamSummariser};
use crate::error::EngineError;

/// How one chat request is governed, decided before anything is searched.
pub(crate) struct GovernPlan {
    strategy: ResolvedStrategy,
    model: String,
    counter: Arc<dyn TokenCounter>,
    window: Window,
    /// Tokens reserved for the answer.
    reserve: u64,
}

impl GovernPlan {
    /// Makes this request summarise its history now, with `focus` if given: the mode
    /// becomes `summarize` (`auto` stays, it summarises too) and every history is over the
    /// message limit.
    pub(crate) fn summarise_now(&mut self, focus: Option<String>) {
        if self.strategy.mode != Mode::Auto {
            self.strategy.mode = Mode::Summarize;
        }
        self.strategy.max_history_messages = 1;
        if focus.is_some() {
            self.strategy.focus = focus;
        }
    }
}

/// The fields that reserve tokens for the answer, in the order they count.
const RESERVE_FIELDS: [&str; 2] = ["max_completion_tokens", "max_tokens"];

/// The tokens `body` reserves for the answer, and the field that says so (`None`: the
/// configured default). A field that is there must be a whole number of tokens.
fn reserved_output(body: &Value, default: u64) -> Result<(Option<&'static str>, u64), EngineError> {
    for field in RESERVE_FIELDS {
        match body.get(field) {
            None | Some(Value::Null) => continue,
            Some(value) => {
                return value.as_u64().map(|n| (Some(field), n)).ok_or_else(|| {
                    EngineError::InvalidInput(format!(
                        "{field} must be a whole number of tokens, 0 or more, not {value}"
                    ))
                })
            }
        }
    }
    Ok((None, default))
}

/// The settings that choose a request's strategy.
#[derive(Debug, Clone, Default)]
pub struct StrategyChoice {
    /// The request's own `memory_strategy`.
    pub request: Option<Strategy>,
    /// The agent whose defaults apply (`memory_agent`).
    pub agent: Option<String>,
    /// Whether mnemo keeps the history the request goes on: then its mode is `auto` unless a
    /// strategy sets one.
    pub owns_history: bool,
}

impl ChatWing {
    /// Decides how a chat request of `conversation` is governed: its strategy (request over
    /// stored over agent over defaults), model, counter, window, and the tokens reserved
    /// for the answer. A `max_tokens` (or `max_completion_tokens`) that is not a whole
    /// number, or that with the margin leaves no room in the window, is a 400 naming it:
    /// every sum is checked, so no value can overflow into one that fits.
    pub(crate) async fn plan_governance(
        &self,
        conversation: &ConversationId,
        choice: &StrategyChoice,
        body: &Value,
    ) -> Result<GovernPlan, EngineError> {
        let config = &self.engine.config().context;
        let (field, reserve) = reserved_output(body, config.reserve_output_tokens)?;
        let stored = self
            .engine
            .settings()
            .conversation_strategy(conversation)
            .await?;
        let agent = config.agent_strategy(choice.agent.as_deref());
        let strategy = match &choice.request {
            Some(request) => request.over(&stored.over(&agent)),
            None => stored.over(&agent),
        };
        let strategy = if choice.owns_history {
            owned_history_default(strategy)
        } else {
            strategy
        }
        .resolve();
        let model = body["model"]
            .as_str()
            .unwrap_or(&self.engine.config().llm_model)
            .to_owned();
        let window = self
            .engine
            .context()
            .window(&model, strategy.context_window_tokens);
        let fits = reserve
            .checked_add(config.margin_tokens)
            .is_some_and(|needed| needed < window.tokens);
        if let (Some(field), false) = (field, fits) {
            return Err(EngineError::InvalidInput(format!(
                "{field} is {reserve}: reserved for the answer, with {} tokens of margin, it leaves no room for the prompt in the context window of {model} ({} tokens)",
                config.margin_tokens, window.tokens
            )));
        }
        let counter = self.engine.context().counter(&model);
        Ok(GovernPlan {
            strategy,
            model,
            counter,
            window,
            reserve,
        })
    }

    /// The pre-flight that runs before retrieval: what governance can never take out of
    /// `body`'s messages must fit the window with the reserve and margin, or the request is
    /// refused now, before anything is searched. With mode `none` that is every message;
    /// otherwise the leading instructions and the latest user message (no stage changes
    /// either: offloading, compaction and trimming touch tool messages, and a summary keeps
    /// the head and the current turn). Memories and notes injected later only add.
    pub(crate) async fn preflight_before_retrieval(
        &self,
        plan: &GovernPlan,
        body: &Value,
    ) -> Result<(), EngineError> {
        let Some(messages) = body["messages"].as_array() else {
            return Ok(());
        };
        let kept: Vec<&Value> = if plan.strategy.mode == Mode::None {
            messages.iter().collect()
        } else {
            let head = head_len(messages);
            let last_user = messages.iter().rposition(|m| m["role"] == "user");
            messages[..head]
                .iter()
                .chain(last_user.filter(|&i| i >= head).map(|i| &messages[i]))
                .collect()
        };
        if plan.model == LOCAL_LLM_ALIAS {
            let owned: Vec<Value> = kept.iter().map(|m| (*m).clone()).collect();
            self.count_locally(&plan.model, &owned).await;
        }
        let counter = plan.counter.as_ref();
        let prompt = kept
            .iter()
            .map(|m| message_tokens(counter, m) as u64)
            .fold(3u64, u64::saturating_add);
        let margin = self.engine.config().context.margin_tokens;
        let needed = prompt
            .checked_add(plan.reserve)
            .and_then(|n| n.checked_add(margin));
        if needed.is_some_and(|n| n <= plan.window.tokens) {
            return Ok(());
        }
        let governed = if plan.strategy.mode == Mode::None {
            "; a memory_strategy (mode \"auto\", \"summarize\" or \"compact\") can make the history fit".to_owned()
        } else {
            " (the instructions and the latest user message alone, which governance keeps whole)"
                .to_owned()
        };
        Err(ContextLengthExceeded {
            needed: needed.unwrap_or(u64::MAX),
            prompt,
            reserved: plan.reserve,
            margin,
            window: plan.window.tokens,
            governed,
        }
        .into())
    }

    /// Governs `body`'s messages in place (docs/context.md: repair, offload, compact or trim,
    /// summarise, guard, pre-flight) as `plan` says, and reports what was done.
    /// A request of a session keeps its summaries and offloaded outputs in the session's
    /// folder; others in the conversation's.
    pub(crate) async fn govern(
        &self,
        conversation: &ConversationId,
        session: Option<&mnemo_session::SessionId>,
        plan: &GovernPlan,
        body: &mut Value,
    ) -> Result<ContextReport, EngineError> {
        let config = &self.engine.config().context;
        let GovernPlan {
            strategy,
            model,
            counter,
            window,
            reserve,
        } = plan;
        // Taken, not copied: a resent history can be megabytes, and the governed messages
        // are put back below.
        let messages = match body["messages"].take() {
            Value::Array(messages) => messages,
            _ => Vec::new(),
        };
        self.count_locally(model, &messages).await;
        let (outputs, summaries, guard_key) = match session {
            Some(id) => {
                let sessions = &self.engine.session_state().store;
                (
                    DirOutputStore::new(sessions.tool_outputs_dir(id)),
                    DirSummaryStore::new(sessions.summaries_dir(id)),
                    format!("s/{id}"),
                )
            }
            None => {
                let dir = self.engine.settings().settings_dir(conversation);
                (
                    DirOutputStore::new(dir.child(layout::TOOL_OUTPUTS_DIR)),
                    DirSummaryStore::new(dir.child(layout::CONTEXT_SUMMARIES_DIR)),
                    format!("c/{conversation}"),
                )
            }
        };
        let summariser = self
            .engine
            .llm()
            .as_ref()
            .map(|llm| UpstreamSummariser { llm });
        let guard = self.engine.context().guard(guard_key);
        let governor = Governor {
            counter: counter.as_ref(),
            window: *window,
            model,
            summariser: summariser.as_ref().map(|s| s as &dyn Summariser),
            summaries: Some(&summaries),
            outputs: Some(&outputs),
            guard: Some(&guard),
            callbacks: None,
            summary_chunk_tokens: crate::state::governance::summary_chunk_tokens(window.tokens),
            reserve_output: *reserve,
            margin: config.margin_tokens,
        };
        let mut governed = governor.govern(messages, strategy).await?;
        strip_internal_fields(&mut governed.messages);
        debug!(
            conversation = %conversation,
            before = governed.report.tokens_before,
            after = governed.report.tokens_after,
            stages = ?governed.report.stages,
            "context governed"
        );
        body["messages"] = Value::Array(governed.messages);
        Ok(governed.report)
    }

    /// Counts `messages` by the local LLM's own tokenizer when `model` is the local model
    /// (and an upstream serves it); other models' counters need no server.
    pub(crate) async fn count_locally(&self, model: &str, messages: &[Value]) {
        if let (LOCAL_LLM_ALIAS, Some(llm)) = (model, self.engine.llm().as_ref()) {
            self.engine
                .context()
                .count_on_the_server(llm, messages)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_reserve_for_the_answer_is_a_whole_number_named_when_it_is_not() {
        assert_eq!(reserved_output(&json!({}), 512).unwrap(), (None, 512));
        assert_eq!(
            reserved_output(&json!({"max_tokens": null}), 512).unwrap(),
            (None, 512)
        );
        assert_eq!(
            reserved_output(&json!({"max_tokens": 9, "max_completion_tokens": 7}), 512).unwrap(),
            (Some("max_completion_tokens"), 7)
        );
        assert_eq!(
            reserved_output(&json!({"max_tokens": u64::MAX}), 512).unwrap(),
            (Some("max_tokens"), u64::MAX)
        );
        for (body, field) in [
            (json!({"max_tokens": -1}), "max_tokens"),
            (json!({"max_tokens": 1.5}), "max_tokens"),
            (json!({"max_tokens": 18446744073709551616.0}), "max_tokens"),
            (
                json!({"max_completion_tokens": "10"}),
                "max_completion_tokens",
            ),
        ] {
            let err = reserved_output(&body, 512).unwrap_err();
            assert!(err.is_invalid_input());
            assert!(
                err.to_string()
                    .starts_with(&format!("{field} must be a whole number of tokens")),
                "{err}"
            );
        }
    }
}
