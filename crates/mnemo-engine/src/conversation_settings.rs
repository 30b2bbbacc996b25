//! What a conversation or a session is governed with, below the chat and session wings
//! that both read it: the conversation's stored strategy
//! (`conversations/<id>/strategy.yaml`, hand-editable, versioned, read as an untrusted
//! file), a compaction asked for the next request of a conversation or a session
//! ([`CompactTarget`]), the default mode of a history mnemo keeps, and the upstream LLM
//! as governance's summariser.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use mnemo_context::strategy::Mode;
use mnemo_context::summarize::{prompt, SummaryRequest};
use mnemo_context::{StoreDir, Strategy, Summariser};
use mnemo_core::ConversationId;
use mnemo_llm::LlmClient;
use mnemo_store::layout;
use serde_json::{json, Value};

use crate::engine::Engine;
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

/// Whose next chat request a deferred compaction is for ([`crate::MemoryClient::request_compact`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactTarget {
    /// A conversation's next request outside any session: its outgoing history is
    /// summarised (everything before the current turn), whatever the triggers say.
    Conversation(ConversationId),
    /// A session's next request: the session is compacted first, as
    /// [`crate::MemoryClient::compact_session`] does, and the request continues the result.
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

/// The conversation settings' handle on the engine ([`Engine::settings`]).
pub(crate) struct ConversationSettings {
    engine: Arc<Engine>,
}

impl Engine {
    /// Lends the conversations' settings: strategies and compactions asked for.
    pub(crate) fn settings(self: &Arc<Self>) -> ConversationSettings {
        ConversationSettings {
            engine: self.clone(),
        }
    }
}

impl ConversationSettings {
    pub(crate) async fn request_compact(
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
            let meta = self.engine.session_state().store.existing_meta(id)?;
            if let Some(at) = meta.deleted_at {
                return Err(mnemo_session::SessionError::Deleted {
                    id: id.to_string(),
                    at: at.to_rfc3339(),
                }
                .into());
            }
        }
        self.engine
            .context()
            .request_compact(target.key(), focus.clone());
        Ok(focus)
    }

    pub(crate) fn compact_requested(&self, target: &CompactTarget) -> bool {
        self.engine.context().compact_requested(&target.key())
    }

    pub(crate) async fn conversation_strategy(
        &self,
        conversation: &ConversationId,
    ) -> Result<Strategy, EngineError> {
        let dir = self.settings_dir(conversation);
        let relative = self.relative(&dir.file(layout::STRATEGY_FILE));
        crate::blocking::blocking(move || read_strategy(&dir, &relative)).await
    }

    pub(crate) async fn patch_conversation_strategy(
        &self,
        conversation: &ConversationId,
        patch: Value,
    ) -> Result<Strategy, EngineError> {
        let dir = self.settings_dir(conversation);
        let relative = self.relative(&dir.file(layout::STRATEGY_FILE));
        let conversation = conversation.clone();
        // One writer at a time per conversation, like its write path.
        let lock = self.engine.conversation_lock(&conversation);
        let _held = lock.lock().await;
        self.engine
            .blocking(move |engine| {
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
                if let Some(git) = &engine.git() {
                    git.note_changed([&path]);
                }
                engine.commit(&format!("strategy of conversation {conversation}"));
                Ok(patched)
            })
            .await
    }

    /// `conversations/<id>/`, checked at every level whenever it is used.
    pub(crate) fn settings_dir(&self, conversation: &ConversationId) -> StoreDir {
        let root = self.engine.store().root();
        StoreDir::new(root, layout::conversation_settings_dir(root, conversation))
    }

    fn relative(&self, path: &std::path::Path) -> String {
        self.engine.store().relative(path).into_owned()
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
