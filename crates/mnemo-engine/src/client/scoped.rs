//! The engine as one caller may use it ([`ScopedClient`]): each call checks the caller's
//! [`Access`] (looking up first the conversation of a memory or session named only by its
//! id) and answers with the types of [`crate::api_types`]; see [`crate::access`].

use std::sync::Arc;

use mnemo_core::{ConversationId, MemoryId, Metadata, Role};
use mnemo_session::SessionId;
use mnemo_store::StoredMemory;

use crate::access::{
    agent_answer, no_memory, output_read_limit, readable_versions, Access, MemoryListing,
    SessionUse, DEFAULT_PAGE, MAX_EXCERPTS,
};
use crate::api_types::{
    AddResult, AgentMemory, Deleted, History, HistoryResults, Memory, MemoryPage, SearchResult,
};
use crate::client::MemoryClient;
use crate::error::EngineError;
use crate::retrieval::{SearchHit, SearchRequest};
use crate::sessions::{HistoryScope, ToolOutputSlice};
use crate::write::conflicts::{Conflicts, Resolution, Resolved};

/// The engine as one caller may use it: every call checked against its [`Access`]. Cheap to
/// make and to clone (a client and an `Arc`), and `'static`, so a call can outlive the
/// request that made it (a chat finished after its client left).
#[derive(Clone)]
pub struct ScopedClient {
    pub(crate) client: MemoryClient,
    pub(crate) access: Arc<dyn Access>,
}

impl MemoryClient {
    /// This engine as the caller with `access` may use it.
    pub fn as_caller(&self, access: Arc<dyn Access>) -> ScopedClient {
        ScopedClient {
            client: self.clone(),
            access,
        }
    }
}

/// Refused unless `access` may write the conversation of `memory`.
fn writable(access: &dyn Access, memory: &StoredMemory) -> Result<(), EngineError> {
    access.check_write(memory.record.conversation_id.as_str())
}

impl ScopedClient {
    /// [`search`](MemoryClient::search) for this caller: the conversation must be readable, and
    /// `global` is left out unless this caller reads it. Paths are made relative to the store.
    pub async fn search(&self, mut request: SearchRequest) -> Result<SearchResult, EngineError> {
        self.access.check_read(request.conversation_id.as_str())?;
        request.without_global |= !self.access.reads_global();
        let conversation_id = request.conversation_id.clone();
        let store = self.client.store();
        let hits = self
            .client
            .search(request)
            .await?
            .into_iter()
            .map(|hit| SearchHit {
                path: store.relative(&hit.path).as_ref().into(),
                ..hit
            })
            .collect();
        Ok(SearchResult {
            conversation_id,
            hits,
            as_of: None,
        })
    }

    /// [`search_as_of`](MemoryClient::search_as_of) for this caller, checked as
    /// [`search`](Self::search) is: the memories as they were at git revision `rev`.
    pub async fn search_as_of(
        &self,
        rev: &str,
        mut request: SearchRequest,
    ) -> Result<SearchResult, EngineError> {
        self.access.check_read(request.conversation_id.as_str())?;
        request.without_global |= !self.access.reads_global();
        let conversation_id = request.conversation_id.clone();
        let found = self.client.search_as_of(rev, request).await?;
        Ok(SearchResult {
            conversation_id,
            hits: found.hits,
            as_of: Some(found.as_of),
        })
    }

    /// [`add_with_metadata`](MemoryClient::add_with_metadata) for this caller, which must be allowed
    /// to write `conversation`.
    pub async fn add(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
        metadata: Metadata,
    ) -> Result<AddResult, EngineError> {
        self.access.check_write(conversation.as_str())?;
        if texts.is_empty() {
            return Err(EngineError::InvalidInput(
                "give the memory as \"content\" or \"texts\"".into(),
            ));
        }
        let report = self
            .client
            .add_with_metadata(texts, conversation, metadata)
            .await?;
        Ok(AddResult::of(report, self.client.store()))
    }

    /// A page of the live memories `listing` names that this caller may read, oldest first.
    pub async fn list(&self, listing: MemoryListing) -> Result<MemoryPage, EngineError> {
        if let Some(conversation) = &listing.conversation {
            self.access.check_read(conversation.as_str())?;
        }
        let limit = mnemo_core::page_size(listing.limit, DEFAULT_PAGE, "limit")
            .map_err(EngineError::InvalidInput)?;
        let memories: Vec<_> = self
            .client
            .list(listing.conversation)
            .await?
            .into_iter()
            .filter(|m| listing.role.is_none_or(|r| m.record.role == r))
            .filter(|m| self.access.can_read(m.record.conversation_id.as_str()))
            .collect();
        let store = self.client.store();
        let items = memories
            .iter()
            .skip(listing.offset)
            .take(limit)
            .map(|m| Memory::of(m, store))
            .collect();
        Ok(MemoryPage {
            total: memories.len(),
            offset: listing.offset,
            limit,
            items,
        })
    }

    /// The live memory `id`, when this caller may read its conversation.
    pub async fn get(&self, id: MemoryId) -> Result<Memory, EngineError> {
        let memory = self.client.get(id).await?.ok_or_else(|| no_memory(id))?;
        self.access
            .check_read(memory.record.conversation_id.as_str())?;
        Ok(Memory::of(&memory, self.client.store()))
    }

    /// Soft-deletes memory `id`, when this caller may write its conversation.
    pub async fn delete(&self, id: MemoryId) -> Result<Deleted, EngineError> {
        let tombstone = self
            .client
            .engine
            .memories()
            .delete_checked(id, &|m| writable(&*self.access, m))
            .await?
            .ok_or_else(|| no_memory(id))?;
        Ok(Deleted {
            deleted: id,
            tombstone: self.client.store().relative(&tombstone).as_ref().into(),
        })
    }

    /// Replaces the text of memory `id` ([`edit`](MemoryClient::edit)), when this caller may write its
    /// conversation.
    pub async fn edit(&self, id: MemoryId, content: String) -> Result<Memory, EngineError> {
        let edited = self
            .client
            .engine
            .memories()
            .edit_checked(id, content, &|m| writable(&*self.access, m))
            .await?
            .ok_or_else(|| no_memory(id))?;
        Ok(Memory::of(&edited, self.client.store()))
    }

    /// The open conflicts of `conversation`, earliest first, when this caller may read it
    /// (`crate::write::conflicts`).
    pub async fn conflicts(&self, conversation: &ConversationId) -> Result<Conflicts, EngineError> {
        self.access.check_read(conversation.as_str())?;
        self.client.engine.write().conflicts(conversation).await
    }

    /// Resolves the conflict between `earlier` and `later` as a person decided, when this
    /// caller may write the conversation; a pair that is no open conflict there is
    /// [`EngineError::NotFound`].
    pub async fn resolve_conflict(
        &self,
        conversation: &ConversationId,
        earlier: MemoryId,
        later: MemoryId,
        resolution: Resolution,
    ) -> Result<Resolved, EngineError> {
        self.access.check_write(conversation.as_str())?;
        self.client
            .engine
            .write()
            .resolve_conflict(conversation, earlier, later, resolution)
            .await
    }

    /// Up to `limit` versions of memory `id` (newest first; `DEFAULT_PAGE` when unset)
    /// that this caller may read; a deleted memory's are found in git.
    pub async fn history(
        &self,
        id: MemoryId,
        limit: Option<usize>,
    ) -> Result<History, EngineError> {
        let limit = mnemo_core::page_size(limit, DEFAULT_PAGE, "limit")
            .map_err(EngineError::InvalidInput)?;
        // A live memory is checked before git is walked for it.
        if !self.access.is_unrestricted() {
            if let Some(memory) = self.client.get(id).await? {
                self.access
                    .check_read(memory.record.conversation_id.as_str())?;
            }
        }
        let mut versions = self.client.history(id, limit).await?;
        if !self.access.is_unrestricted() {
            versions = readable_versions(&*self.access, versions)?;
        }
        if versions.is_empty() {
            return Err(EngineError::NotFound(self.client.no_history(id)));
        }
        Ok(History { id, versions })
    }

    /// Refused unless this caller may use session `id` as `how` says (the session's
    /// conversation is looked up only for a restricted caller). An unknown session is not
    /// found either way.
    pub async fn check_session(&self, id: &SessionId, how: SessionUse) -> Result<(), EngineError> {
        if self.access.is_unrestricted() {
            return Ok(());
        }
        let conversation = self.client.session(id).await?.meta.conversation;
        match how {
            SessionUse::Read => self.access.check_read(&conversation),
            SessionUse::Write => self.access.check_write(&conversation),
        }
    }

    /// [`search_history`](MemoryClient::search_history) for this caller, with at most `limit`
    /// excerpts (1 to `MAX_EXCERPTS`, all of them when unset).
    pub async fn search_history(
        &self,
        scope: HistoryScope,
        query: &str,
        limit: Option<usize>,
    ) -> Result<HistoryResults, EngineError> {
        let limit = limit.unwrap_or(MAX_EXCERPTS);
        if !(1..=MAX_EXCERPTS).contains(&limit) {
            return Err(EngineError::InvalidInput(format!(
                "limit must be between 1 and {MAX_EXCERPTS}"
            )));
        }
        match &scope {
            HistoryScope::Session(id) => self.check_session(id, SessionUse::Read).await?,
            HistoryScope::Conversation(c) => self.access.check_read(c.as_str())?,
        }
        let excerpts = self.client.search_history(scope, query, limit).await?;
        Ok(HistoryResults { excerpts })
    }

    /// A slice of a tool output governance offloaded in `scope` (a session, or a
    /// conversation outside any session), for this caller; `limit` as `output_read_limit`
    /// takes it.
    pub async fn tool_output(
        &self,
        scope: &HistoryScope,
        call_id: &str,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<ToolOutputSlice, EngineError> {
        let limit = output_read_limit(limit)?;
        match scope {
            HistoryScope::Session(id) => {
                self.check_session(id, SessionUse::Read).await?;
                self.client
                    .session_tool_output(id, call_id, offset, limit)
                    .await
            }
            HistoryScope::Conversation(conversation) => {
                self.access.check_read(conversation.as_str())?;
                self.client
                    .conversation_tool_output(conversation, call_id, offset, limit)
                    .await
            }
        }
    }

    /// `agent`'s notes, when this caller may use them.
    pub async fn agent_memory(&self, agent: &str) -> Result<AgentMemory, EngineError> {
        self.access.check_agent(agent)?;
        let content = self.client.agent_memory(agent).await?;
        Ok(agent_answer(agent, content))
    }

    /// [`append_agent_memory`](MemoryClient::append_agent_memory) for this caller.
    pub async fn append_agent_memory(
        &self,
        agent: &str,
        text: &str,
    ) -> Result<AgentMemory, EngineError> {
        self.access.check_agent(agent)?;
        let content = self.client.append_agent_memory(agent, text).await?;
        Ok(agent_answer(agent, content))
    }

    /// [`update_agent_memory`](MemoryClient::update_agent_memory) for this caller.
    pub async fn update_agent_memory(
        &self,
        agent: &str,
        old: &str,
        new: &str,
    ) -> Result<AgentMemory, EngineError> {
        self.access.check_agent(agent)?;
        let content = self.client.update_agent_memory(agent, old, new).await?;
        Ok(agent_answer(agent, content))
    }

    /// The conversations that have a rolling summary and that this caller may read, sorted.
    pub fn summarised_conversations(&self) -> Vec<ConversationId> {
        let mut conversations: Vec<ConversationId> = {
            let snapshot = self.client.engine.snapshot().lock();
            snapshot
                .files()
                .values()
                .filter(|entry| entry.role == Role::Summary)
                .filter(|entry| self.access.can_read(entry.conversation_id.as_str()))
                .map(|entry| entry.conversation_id.clone())
                .collect()
        };
        conversations.sort();
        conversations.dedup();
        conversations
    }

    /// `conversation`'s rolling summary, when this caller may read it; not found when it has
    /// none yet.
    pub async fn summary(&self, conversation: &ConversationId) -> Result<String, EngineError> {
        self.access.check_read(conversation.as_str())?;
        let engine = self.client.engine.clone();
        let conv = conversation.clone();
        crate::blocking::blocking(move || Ok(engine.summary(&conv)))
            .await?
            .ok_or_else(|| {
                EngineError::NotFound(format!(
                    "conversation {conversation:?} has no summary yet: one is written after its first facts"
                ))
            })
    }

    /// The agents with notes whose notes this caller may use, sorted.
    pub fn agents_with_notes(&self) -> Vec<String> {
        mnemo_session::AgentNotes::agents(self.client.store().root())
            .into_iter()
            .filter(|agent| self.access.can_use_agent(agent))
            .collect()
    }
}
