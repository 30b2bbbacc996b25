//! One checked door per caller for sessions, conversation settings and files:
//! [`ScopedClient::sessions`] and [`ScopedClient::conversation`], and the doors through
//! which a front end reads the store for a view of its own
//! ([`ScopedClient::read_readable_conversations`], [`ScopedClient::memory_file`]). Each call
//! checks the caller's [`Access`](crate::Access) against the conversation it touches (a
//! session's conversation is looked up first) and only then calls the engine, so a front
//! end cannot check one thing and call another.

use std::collections::HashSet;

use serde_json::Value;

use mnemo_context::Strategy;
use mnemo_core::{ConversationId, MemoryId};
use mnemo_git::CommitInfo;
use mnemo_session::{SessionExport, SessionId, SessionMeta};
use mnemo_store::FileStore;

use crate::access::{no_memory, SessionUse};
use crate::client::scoped::ScopedClient;
use crate::conversation_settings::CompactTarget;
use crate::error::EngineError;
use crate::sessions::compaction::CompactReport;
use crate::sessions::{MessagePage, SessionContext, SessionInfo};
use crate::state::usage::UsageTotals;

/// The chat sessions as one caller may use them ([`ScopedClient::sessions`]).
pub struct ScopedSessions<'a> {
    scoped: &'a ScopedClient,
}

/// One conversation's settings and files as one caller may use them ([`ScopedClient::conversation`]).
pub struct ScopedConversation<'a> {
    scoped: &'a ScopedClient,
    id: &'a ConversationId,
}

impl ScopedClient {
    /// The chat sessions, each call checked against this caller.
    pub fn sessions(&self) -> ScopedSessions<'_> {
        ScopedSessions { scoped: self }
    }

    /// Conversation `id`'s settings and files, each call checked against this caller.
    pub fn conversation<'a>(&'a self, id: &'a ConversationId) -> ScopedConversation<'a> {
        ScopedConversation { scoped: self, id }
    }

    /// Runs `read` off the async runtime over the store and the conversations in it this
    /// caller may read: how a front end builds a view of its own across conversations (the
    /// web view's list) without reaching a conversation it may not read.
    pub async fn read_readable_conversations<T: Send + 'static>(
        &self,
        read: impl FnOnce(&FileStore, Vec<ConversationId>) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        let access = self.access.clone();
        self.client
            .engine
            .blocking(move |engine| {
                let store = engine.store();
                let readable = store
                    .conversation_ids()
                    .into_iter()
                    .filter(|c| access.can_read(c.as_str()))
                    .collect();
                Ok(read(store, readable))
            })
            .await
    }

    /// The bytes of live memory `id`'s file as they are on disk (front matter and all),
    /// when this caller may read its conversation.
    pub async fn memory_file(&self, id: MemoryId) -> Result<Vec<u8>, EngineError> {
        let memory = self.client.get(id).await?.ok_or_else(|| no_memory(id))?;
        self.access
            .check_read(memory.record.conversation_id.as_str())?;
        self.client
            .engine
            .blocking(move |engine| Ok(engine.store().read_bytes(&memory.path)?))
            .await
    }
}

impl ScopedSessions<'_> {
    /// The sessions this caller may read (of `conversation` only, when given; it must be
    /// readable), with deleted ones when asked.
    pub async fn list(
        &self,
        conversation: Option<&str>,
        include_deleted: bool,
    ) -> Result<Vec<(SessionId, SessionMeta)>, EngineError> {
        if let Some(conversation) = conversation {
            self.scoped.access.check_read(conversation)?;
        }
        let mut sessions = self.scoped.client.list_sessions(include_deleted).await?;
        sessions.retain(|(_, meta)| {
            conversation.is_none_or(|c| c == meta.conversation)
                && self.scoped.access.can_read(&meta.conversation)
        });
        Ok(sessions)
    }

    /// Which of `call_ids` had their tool outputs offloaded for session `id`; needs read.
    pub async fn offloaded_calls(
        &self,
        id: &SessionId,
        call_ids: Vec<String>,
    ) -> Result<HashSet<String>, EngineError> {
        self.scoped.check_session(id, SessionUse::Read).await?;
        self.scoped.client.offloaded_calls(id, call_ids).await
    }

    /// Session `id` with its settings; needs read on its conversation.
    pub async fn get(&self, id: &SessionId) -> Result<SessionInfo, EngineError> {
        let info = self.scoped.client.session(id).await?;
        self.scoped.access.check_read(&info.meta.conversation)?;
        Ok(info)
    }

    /// Marks session `id` deleted; needs write.
    pub async fn delete(&self, id: &SessionId) -> Result<SessionMeta, EngineError> {
        self.scoped.check_session(id, SessionUse::Write).await?;
        self.scoped.client.delete_session(id).await
    }

    /// A page of session `id`'s messages; needs read.
    pub async fn messages(
        &self,
        id: &SessionId,
        offset: usize,
        limit: usize,
        all: bool,
    ) -> Result<MessagePage, EngineError> {
        self.scoped.check_session(id, SessionUse::Read).await?;
        self.scoped
            .client
            .session_messages(id, offset, limit, all)
            .await
    }

    /// A copy of session `id` under `new_id` (else a new id); needs write.
    pub async fn fork(
        &self,
        id: &SessionId,
        new_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        self.scoped.check_session(id, SessionUse::Write).await?;
        self.scoped.client.fork_session(id, new_id).await
    }

    /// Session `id` as one document; needs read.
    pub async fn export(&self, id: &SessionId) -> Result<SessionExport, EngineError> {
        self.scoped.check_session(id, SessionUse::Read).await?;
        self.scoped.client.export_session(id).await
    }

    /// Imports `export` under `as_id` (else its own id); needs write on its conversation and
    /// its agent, if it names one.
    pub async fn import(
        &self,
        export: SessionExport,
        as_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        let conversation = ConversationId::new(&export.meta.conversation)
            .map_err(|e| EngineError::InvalidInput(format!("the export's conversation: {e}")))?;
        self.scoped
            .access
            .check_chat(&conversation, export.meta.agent.as_deref())?;
        self.scoped.client.import_session(export, as_id).await
    }

    /// Compacts session `id` now; needs write.
    pub async fn compact(
        &self,
        id: &SessionId,
        focus: Option<String>,
    ) -> Result<CompactReport, EngineError> {
        self.scoped.check_session(id, SessionUse::Write).await?;
        self.scoped.client.compact_session(id, focus).await
    }

    /// Asks session `id`'s next chat request to compact first; the focus kept. Needs write.
    pub async fn request_compact(
        &self,
        id: &SessionId,
        focus: Option<String>,
    ) -> Result<Option<String>, EngineError> {
        self.scoped.check_session(id, SessionUse::Write).await?;
        let target = CompactTarget::Session(id.clone());
        self.scoped.client.request_compact(target, focus).await
    }

    /// How full session `id`'s context is; needs read.
    pub async fn context(&self, id: &SessionId) -> Result<SessionContext, EngineError> {
        self.scoped.check_session(id, SessionUse::Read).await?;
        self.scoped.client.session_context(id).await
    }
}

impl ScopedConversation<'_> {
    /// Runs `read` off the async runtime over the store, once this caller may read the
    /// conversation: how a front end reads the conversation's files for a view of its own
    /// (the web view's pages of facts, turns and tombstones).
    pub async fn read_files<T: Send + 'static>(
        &self,
        read: impl FnOnce(&FileStore, &ConversationId) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        self.scoped.access.check_read(self.id.as_str())?;
        let id = self.id.clone();
        self.scoped
            .client
            .engine
            .blocking(move |engine| Ok(read(engine.store(), &id)))
            .await
    }

    /// The conversation's stored context strategy; needs read.
    pub async fn strategy(&self) -> Result<Strategy, EngineError> {
        self.scoped.access.check_read(self.id.as_str())?;
        self.scoped.client.conversation_strategy(self.id).await
    }

    /// Merges `patch` into the stored strategy (a `null` field goes back to its default);
    /// needs write.
    pub async fn patch_strategy(&self, patch: Value) -> Result<Strategy, EngineError> {
        self.scoped.access.check_write(self.id.as_str())?;
        self.scoped
            .client
            .patch_conversation_strategy(self.id, patch)
            .await
    }

    /// Asks the conversation's next chat request to compact first; needs write.
    pub async fn request_compact(
        &self,
        focus: Option<String>,
    ) -> Result<Option<String>, EngineError> {
        self.scoped.access.check_write(self.id.as_str())?;
        let target = CompactTarget::Conversation(self.id.clone());
        self.scoped.client.request_compact(target, focus).await
    }

    /// The conversation's git history, newest first, at most `limit` commits; needs read.
    pub async fn log(&self, limit: usize) -> Result<Vec<CommitInfo>, EngineError> {
        self.scoped.access.check_read(self.id.as_str())?;
        self.scoped.client.log(Some(self.id.clone()), limit).await
    }

    /// What the conversation's answers took and cost; needs read.
    pub async fn usage(&self) -> Result<UsageTotals, EngineError> {
        self.scoped.access.check_read(self.id.as_str())?;
        self.scoped.client.conversation_usage(self.id).await
    }
}
