//! Chat sessions and agents' notes through the client (the session wing).

use mnemo_core::ConversationId;
use mnemo_session::{Excerpt, SessionExport, SessionId, SessionMeta};

use crate::client::MemoryClient;
use crate::error::EngineError;
use crate::sessions::compaction::CompactReport;
use crate::sessions::{HistoryScope, MessagePage, SessionContext, SessionInfo, ToolOutputSlice};

impl MemoryClient {
    /// Every session, newest first; deleted ones only when asked.
    pub async fn list_sessions(
        &self,
        include_deleted: bool,
    ) -> Result<Vec<(SessionId, SessionMeta)>, EngineError> {
        self.engine.sessions().list_sessions(include_deleted).await
    }

    /// Session `id`: its settings and the state of its log.
    pub async fn session(&self, id: &SessionId) -> Result<SessionInfo, EngineError> {
        self.engine.sessions().session(id).await
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
        self.engine
            .sessions()
            .session_messages(id, offset, limit, all)
            .await
    }

    /// Forks session `id` under `new_id` (a generated id when `None`): its log, summaries and
    /// offloaded outputs are copied and `parent` set; the original is not touched.
    pub async fn fork_session(
        &self,
        id: &SessionId,
        new_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        self.engine.sessions().fork_session(id, new_id).await
    }

    /// Session `id` as one JSON document: its settings and every record of its log.
    pub async fn export_session(&self, id: &SessionId) -> Result<SessionExport, EngineError> {
        self.engine.sessions().export_session(id).await
    }

    /// Creates a session from an exported one, under `as_id` or its exported id (which must
    /// be free). Its conversation and agent must be names mnemo accepts: the document is as
    /// untrusted as any file of the store.
    pub async fn import_session(
        &self,
        export: SessionExport,
        as_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        self.engine.sessions().import_session(export, as_id).await
    }

    /// Deletes session `id` softly: it is marked deleted, leaves listings and takes no more
    /// messages; its folder stays.
    pub async fn delete_session(&self, id: &SessionId) -> Result<SessionMeta, EngineError> {
        self.engine.sessions().delete_session(id).await
    }

    /// Compacts session `id` now: a summary (by the session's model, or the strategy's
    /// `summarization_model`, with `focus`) stands in upstream for everything before what
    /// `keep` keeps — at least everything before the latest turn. When no summary can be
    /// written (no upstream, the call fails), the history is cut to its last
    /// [`crate::UNSUMMARISED_KEEP`] messages behind a marker, and the report says why; with too few
    /// messages for that, it is an error and the history is unchanged.
    pub async fn compact_session(
        &self,
        id: &SessionId,
        focus: Option<String>,
    ) -> Result<CompactReport, EngineError> {
        self.engine.sessions().compact_session(id, focus).await
    }

    /// How full session `id`'s context is.
    pub async fn session_context(&self, id: &SessionId) -> Result<SessionContext, EngineError> {
        self.engine.sessions().session_context(id).await
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
        self.engine
            .sessions()
            .session_tool_output(id, call_id, offset, limit)
            .await
    }

    /// Which of `call_ids` had their tool outputs offloaded by governance for session `id`
    /// (kept on disk, readable with [`session_tool_output`](Self::session_tool_output)).
    pub async fn offloaded_calls(
        &self,
        id: &SessionId,
        call_ids: Vec<String>,
    ) -> Result<std::collections::HashSet<String>, EngineError> {
        self.engine.sessions().offloaded_calls(id, call_ids).await
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
        self.engine
            .sessions()
            .conversation_tool_output(conversation, call_id, offset, limit)
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
        self.engine
            .sessions()
            .search_history(scope, query, limit)
            .await
    }

    /// The whole of `agent`'s notes (`agents/<agent>/MEMORY.md`); empty when none.
    pub async fn agent_memory(&self, agent: &str) -> Result<String, EngineError> {
        self.engine.sessions().agent_memory(agent).await
    }

    /// Appends `text` to `agent`'s notes and commits it; returns the whole notes.
    pub async fn append_agent_memory(
        &self,
        agent: &str,
        text: &str,
    ) -> Result<String, EngineError> {
        self.engine
            .sessions()
            .append_agent_memory(agent, text)
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
        self.engine
            .sessions()
            .update_agent_memory(agent, old, new)
            .await
    }
}
