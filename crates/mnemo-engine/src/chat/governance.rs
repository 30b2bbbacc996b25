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

use futures_util::future::BoxFuture;
use mnemo_context::messages::{head_len, strip_internal_fields};
use mnemo_context::strategy::{Mode, ResolvedStrategy};
use mnemo_context::summarize::{prompt, SummaryRequest};
use mnemo_context::tokens::message_tokens;
use mnemo_context::window::Window;
use mnemo_context::{
    ContextLengthExceeded, ContextReport, DirOutputStore, DirSummaryStore, Governor, StoreDir,
    Strategy, Summariser, TokenCounter,
};
use mnemo_core::{ConversationId, LOCAL_LLM_ALIAS};
use mnemo_llm::LlmClient;
use mnemo_store::layout;
use serde_json::{json, Value};
use tracing::debug;

use crate::engine::MemoryClient;
use crate::error::EngineError;

/// The largest strategy file read; anything larger is refused, not parsed.
const MAX_STRATEGY_BYTES: u64 = 64 * 1024;

/// Summaries from the upstream LLM: one chat call, no tools.
pub(crate) struct UpstreamSummariser<'a> {
    pub(crate) llm: &'a LlmClient,
}

impl Summariser for UpstreamSummariser<'_> {
    fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let body = json!({
                "model": request.model,
                "messages": prompt(&request),
                "temperature": 0,
            });
            let answer = self.llm.chat(&body).await.map_err(|e| e.to_string())?;
            answer["choices"][0]["message"]["content"]
                .as_str()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| "the summariser's answer has no text".to_owned())
        })
    }
}

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

/// Whose next chat request a deferred compaction is for ([`MemoryClient::request_compact`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactTarget {
    /// A conversation's next request outside any session: its outgoing history is
    /// summarised (everything before the current turn), whatever the triggers say.
    Conversation(ConversationId),
    /// A session's next request: the session is compacted first, as
    /// [`MemoryClient::compact_session`] does, and the request continues the result.
    Session(mnemo_session::SessionId),
}

impl CompactTarget {
    /// The key governance state keeps it under (the inflation guard's).
    pub(crate) fn key(&self) -> String {
        match self {
            CompactTarget::Conversation(conversation) => format!("c/{conversation}"),
            CompactTarget::Session(id) => format!("s/{id}"),
        }
    }
}

/// The mode of a request whose history mnemo keeps (a session's, sent as new messages only,
/// as `mnemo chat` does) when no strategy sets one: the history grows with every turn and
/// only mnemo can make it fit the window, as pydantic-deep and co-cli compress theirs at
/// `compress_threshold` (0.9) of it with no set-up. A request carrying its own history keeps
/// the documented `none`.
pub const OWNED_HISTORY_MODE: Mode = Mode::Auto;

/// `strategy` with [`OWNED_HISTORY_MODE`] where it sets no mode.
pub(crate) fn owned_history_default(mut strategy: Strategy) -> Strategy {
    strategy.mode.get_or_insert(OWNED_HISTORY_MODE);
    strategy
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

impl MemoryClient {
    /// Asks that the next chat request of `target` compact first, with `focus` (over the
    /// strategy's own), instead of compacting now: the summary is then written on the way
    /// of a request that is sent anyway. A later ask replaces an earlier one; the ask is
    /// kept in memory until that request comes (a restart forgets it). A focus is checked
    /// as a strategy's `focus` is; a session must exist and not be deleted. Returns the focus
    /// as kept (trimmed; none when blank).
    pub async fn request_compact(
        &self,
        target: CompactTarget,
        focus: Option<String>,
    ) -> Result<Option<String>, EngineError> {
        let focus = focus.map(|f| f.trim().to_owned()).filter(|f| !f.is_empty());
        if let Some(focus) = &focus {
            Strategy::from_json(json!({ "focus": focus }))
                .map_err(|e| EngineError::InvalidInput(e.to_string()))?;
        }
        if let CompactTarget::Session(id) = &target {
            let meta = self.engine.sessions.store.existing_meta(id)?;
            if let Some(at) = meta.deleted_at {
                return Err(mnemo_session::SessionError::Deleted {
                    id: id.to_string(),
                    at: at.to_rfc3339(),
                }
                .into());
            }
        }
        self.engine
            .context
            .request_compact(target.key(), focus.clone());
        Ok(focus)
    }

    /// Whether a compaction was asked for `target`'s next request.
    pub fn compact_requested(&self, target: &CompactTarget) -> bool {
        self.engine.context.compact_requested(&target.key())
    }

    /// The strategy stored for `conversation` (empty when none is).
    pub async fn conversation_strategy(
        &self,
        conversation: &ConversationId,
    ) -> Result<Strategy, EngineError> {
        let dir = self.settings_dir(conversation);
        let relative = self.relative(&dir.file(layout::STRATEGY_FILE));
        crate::blocking::blocking(move || read_strategy(&dir, &relative)).await
    }

    /// Applies `patch` (a JSON merge patch: a value sets a field, `null` removes it) to the
    /// strategy stored for `conversation`, writes it and commits it; returns the result.
    pub async fn patch_conversation_strategy(
        &self,
        conversation: &ConversationId,
        patch: Value,
    ) -> Result<Strategy, EngineError> {
        let dir = self.settings_dir(conversation);
        let relative = self.relative(&dir.file(layout::STRATEGY_FILE));
        let engine = self.engine.clone();
        let conversation = conversation.clone();
        // One writer at a time per conversation, like its write path.
        let lock = self.engine.conversation_lock(&conversation);
        let _held = lock.lock().await;
        crate::blocking::blocking(move || {
            let current = read_strategy(&dir, &relative)?;
            let patched = current
                .patch(patch)
                .map_err(|e| EngineError::InvalidInput(e.to_string()))?;
            let yaml = strategy_yaml(&patched)?;
            let path = dir.file(layout::STRATEGY_FILE);
            dir.create().map_err(|e| folder_fault(&relative, e))?;
            mnemo_store::atomic::write_atomic(&path, yaml.as_bytes()).map_err(|source| {
                EngineError::Io {
                    action: "cannot write",
                    path: path.clone(),
                    source,
                }
            })?;
            if let Some(git) = &engine.git {
                git.note_changed([&path]);
            }
            engine.commit(&format!("strategy of conversation {conversation}"));
            Ok(patched)
        })
        .await
    }

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
        let config = &self.engine.config.context;
        let (field, reserve) = reserved_output(body, config.reserve_output_tokens)?;
        let stored = self.conversation_strategy(conversation).await?;
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
            .unwrap_or(&self.engine.config.llm_model)
            .to_owned();
        let window = self
            .engine
            .context
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
        let counter = self.engine.context.counter(&model);
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
        let margin = self.engine.config.context.margin_tokens;
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
        let config = &self.engine.config.context;
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
                let sessions = &self.engine.sessions.store;
                (
                    DirOutputStore::new(sessions.tool_outputs_dir(id)),
                    DirSummaryStore::new(sessions.summaries_dir(id)),
                    format!("s/{id}"),
                )
            }
            None => {
                let dir = self.settings_dir(conversation);
                (
                    DirOutputStore::new(dir.child(layout::TOOL_OUTPUTS_DIR)),
                    DirSummaryStore::new(dir.child(layout::CONTEXT_SUMMARIES_DIR)),
                    format!("c/{conversation}"),
                )
            }
        };
        let summariser = self
            .engine
            .llm
            .as_ref()
            .map(|llm| UpstreamSummariser { llm });
        let guard = self.engine.context.guard(guard_key);
        let governor = Governor {
            counter: counter.as_ref(),
            window: *window,
            model,
            summariser: summariser.as_ref().map(|s| s as &dyn Summariser),
            summaries: Some(&summaries),
            outputs: Some(&outputs),
            guard: Some(&guard),
            callbacks: None,
            summary_chunk_tokens: crate::governance_state::summary_chunk_tokens(window.tokens),
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
        if let (LOCAL_LLM_ALIAS, Some(llm)) = (model, self.engine.llm.as_ref()) {
            self.engine.context.count_on_the_server(llm, messages).await;
        }
    }

    /// `conversations/<id>/`, checked at every level whenever it is used.
    pub(crate) fn settings_dir(&self, conversation: &ConversationId) -> StoreDir {
        let root = self.store().root();
        StoreDir::new(root, layout::conversation_settings_dir(root, conversation))
    }

    fn relative(&self, path: &std::path::Path) -> String {
        self.store().relative(path).into_owned()
    }
}

/// A folder of the store refused on the way to `relative` (a link, a file).
fn folder_fault(relative: &str, refusal: mnemo_store::untrusted::Refusal) -> EngineError {
    EngineError::StoredStrategy {
        path: relative.to_owned(),
        message: format!("not read or written: {refusal}"),
    }
}

/// Reads the stored strategy in `dir`: absent is empty; anything else must be a small,
/// valid YAML mapping of strategy fields (the file is hand-edited, so the message names the
/// fault), in a real folder of the store.
fn read_strategy(dir: &StoreDir, relative: &str) -> Result<Strategy, EngineError> {
    let fault = |message: String| EngineError::StoredStrategy {
        path: relative.to_owned(),
        message,
    };
    let bytes = match dir.read(layout::STRATEGY_FILE, MAX_STRATEGY_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(Strategy::default()),
        Err(e) => return Err(fault(format!("not read: {e}"))),
    };
    let text = String::from_utf8(bytes).map_err(|_| fault("not UTF-8 text".into()))?;
    let value: Value = mnemo_store::untrusted::from_yaml(&text)
        .map_err(|e| fault(format!("not valid YAML: {e}")))?;
    if value.is_null() {
        // Empty, or comments only.
        return Ok(Strategy::default());
    }
    Strategy::from_json(value).map_err(|e| fault(e.to_string()))
}

/// A strategy as its hand-editable file: a comment, then one field a line.
fn strategy_yaml(strategy: &Strategy) -> Result<String, EngineError> {
    let body = serde_saphyr::to_string(strategy)
        .map_err(|e| EngineError::Task(format!("cannot write a strategy as YAML: {e}")))?;
    let body = if strategy.is_empty() {
        String::new()
    } else {
        body
    };
    Ok(format!(
        "# Context strategy of this conversation; see docs/context.md for the fields.\n\
         # A request's memory_strategy overrides it field by field; it overrides the agent's.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folder holding `path`, as its own store's root.
    fn folder_of(path: &std::path::Path) -> StoreDir {
        let dir = path.parent().unwrap();
        StoreDir::new(dir, dir)
    }

    fn read(text: &str) -> Result<Strategy, EngineError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strategy.yaml");
        std::fs::write(&path, text).unwrap();
        read_strategy(&folder_of(&path), "conversations/c/strategy.yaml")
    }

    #[test]
    fn stored_strategies_are_read_as_untrusted_files() {
        assert!(read("").unwrap().is_empty());
        assert!(read("# nothing set\n").unwrap().is_empty());
        assert_eq!(
            read("mode: trim\n").unwrap().mode,
            Some(mnemo_context::Mode::Trim)
        );
        for (text, expected) in [
            ("mode: [unclosed", "not valid YAML"),
            ("mdoe: trim", "mdoe: unknown field"),
            ("- a list", "not a list"),
            (
                "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n",
                "conversations/c/strategy.yaml",
            ),
        ] {
            let err = read(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.starts_with("conversations/c/strategy.yaml: "), "{err}");
        }
        let big = format!("focus: \"{}\"\n", "x".repeat(MAX_STRATEGY_BYTES as usize));
        assert!(read(&big).unwrap_err().to_string().contains("more than"));

        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere.yaml");
        std::fs::write(&target, "mode: auto\n").unwrap();
        let link = dir.path().join("strategy.yaml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = read_strategy(&folder_of(&link), "s")
            .unwrap_err()
            .to_string();
        assert!(err.contains("a symbolic link"), "{err}");
    }

    #[test]
    fn a_linked_conversation_folder_is_not_read() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("strategy.yaml"), "mode: auto\n").unwrap();
        std::fs::create_dir(root.path().join("conversations")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("conversations/c")).unwrap();
        let dir = StoreDir::new(root.path(), root.path().join("conversations/c"));
        let err = read_strategy(&dir, "conversations/c/strategy.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("conversations/c is a symbolic link, not a real folder"),
            "{err}"
        );
    }

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

    #[test]
    fn the_example_store_strategy_is_valid() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../memory_db.example/conversations/trip-japan/strategy.yaml");
        let strategy = read_strategy(&folder_of(&path), "example").unwrap();
        assert_eq!(strategy.mode, Some(mnemo_context::Mode::Auto));
        assert_eq!(strategy.compact_keep, Some(3));
    }

    #[test]
    fn a_strategy_file_reads_back_as_written() {
        let strategy = Strategy::from_json(
            json!({"mode": "auto", "keep": {"tokens": 900}, "focus": "the \"parser\": bugs"}),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strategy.yaml");
        std::fs::write(&path, strategy_yaml(&strategy).unwrap()).unwrap();
        assert_eq!(read_strategy(&folder_of(&path), "s").unwrap(), strategy);
        std::fs::write(&path, strategy_yaml(&Strategy::default()).unwrap()).unwrap();
        assert!(read_strategy(&folder_of(&path), "s").unwrap().is_empty());
    }
}
