//! Conversation settings through the client: stored strategies and compactions asked for.

use mnemo_context::Strategy;
use mnemo_core::ConversationId;
use serde_json::Value;

use crate::client::MemoryClient;
use crate::conversation_settings::CompactTarget;
use crate::error::EngineError;

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
        self.engine.settings().request_compact(target, focus).await
    }

    /// Whether a compaction was asked for `target`'s next request.
    pub fn compact_requested(&self, target: &CompactTarget) -> bool {
        self.engine.settings().compact_requested(target)
    }

    /// The strategy stored for `conversation` (empty when none is).
    pub async fn conversation_strategy(
        &self,
        conversation: &ConversationId,
    ) -> Result<Strategy, EngineError> {
        self.engine
            .settings()
            .conversation_strategy(conversation)
            .await
    }

    /// Applies `patch` (a JSON merge patch: a value sets a field, `null` removes it) to the
    /// strategy stored for `conversation`, writes it and commits it; returns the result.
    pub async fn patch_conversation_strategy(
        &self,
        conversation: &ConversationId,
        patch: Value,
    ) -> Result<Strategy, EngineError> {
        self.engine
            .settings()
            .patch_conversation_strategy(conversation, patch)
            .await
    }
}
