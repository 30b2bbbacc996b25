//! Who may touch what, and the calls that check it before they touch anything.
//!
//! A front end that serves several callers (the HTTP API and MCP over HTTP, with bearer
//! tokens) has an [`Access`] for each: which conversations it may read and write, whether it
//! sees `global`, and which agents' notes it may use. `client.as_caller(access)` gives a
//! [`ScopedClient`], the engine as that caller may use it: each of its methods checks the
//! access (looking up first the conversation of a memory or session named only by its id)
//! and answers with the types of [`crate::api_types`]. REST, MCP and the web view all call it,
//! so they refuse the same calls with the same messages. [`Unrestricted`] is the library's,
//! the CLI's and `mnemo mcp` over stdio: whoever runs the process owns the store.

use std::sync::Arc;

use mnemo_core::{ConversationId, MemoryId, Metadata, Role};
use mnemo_git::FileVersion;
use mnemo_session::SessionId;
use mnemo_store::StoredMemory;

use crate::api_types::{
    AddResult, AgentMemory, Deleted, History, HistoryResults, Memory, MemoryPage, SearchResult,
};
use crate::chat::sessions::{HistoryScope, ToolOutputSlice, MAX_OUTPUT_READ};
use crate::engine::MemoryClient;
use crate::error::EngineError;
use crate::retrieval::SearchHit;
use crate::retrieval::SearchRequest;
use crate::write::conflicts::{Conflicts, Resolution, Resolved};

/// A page's size when a call does not say.
pub const DEFAULT_PAGE: usize = 50;
/// Characters of an offloaded output read when a call does not say.
pub const DEFAULT_OUTPUT_READ: usize = 64 * 1024;
/// Most excerpts one archive search returns (and the default).
pub const MAX_EXCERPTS: usize = 10;

/// What one caller may touch. The `check_*` methods refuse with
/// [`EngineError::Forbidden`], naming what may not be touched.
pub trait Access: Send + Sync {
    /// Whether it may read `conversation`'s memories, sessions and settings.
    fn can_read(&self, conversation: &str) -> bool;

    /// Whether it may write to `conversation` (add, delete, chat in it, change its sessions
    /// and settings).
    fn can_write(&self, conversation: &str) -> bool;

    /// Whether it may read and change `agent`'s notes and run chats as that agent.
    fn can_use_agent(&self, agent: &str) -> bool;

    /// Whether nothing is out of its reach, so no lookup is needed to check a call.
    fn is_unrestricted(&self) -> bool;

    /// Whether `global`'s memories may be shown to it (searches and chats see them).
    fn reads_global(&self) -> bool {
        self.can_read(ConversationId::GLOBAL)
    }

    /// Refused unless it may read `conversation`.
    fn check_read(&self, conversation: &str) -> Result<(), EngineError> {
        if self.can_read(conversation) {
            return Ok(());
        }
        Err(EngineError::Forbidden(format!(
            "this token may not read conversation {conversation:?}"
        )))
    }

    /// Refused unless it may write to `conversation`.
    fn check_write(&self, conversation: &str) -> Result<(), EngineError> {
        if self.can_write(conversation) {
            return Ok(());
        }
        let why = if conversation == ConversationId::GLOBAL && self.reads_global() {
            " (its access to global is read-only)"
        } else {
            ""
        };
        Err(EngineError::Forbidden(format!(
            "this token may not write conversation {conversation:?}{why}"
        )))
    }

    /// Refused unless it may use `agent`'s notes.
    fn check_agent(&self, agent: &str) -> Result<(), EngineError> {
        if self.can_use_agent(agent) {
            return Ok(());
        }
        Err(EngineError::Forbidden(format!(
            "this token may not use the notes of agent {agent:?}"
        )))
    }

    /// Refused unless a chat may write turns to `conversation` and use `agent`'s notes.
    fn check_chat(
        &self,
        conversation: &ConversationId,
        agent: Option<&str>,
    ) -> Result<(), EngineError> {
        self.check_write(conversation.as_str())?;
        agent.map_or(Ok(()), |agent| self.check_agent(agent))
    }
}

/// Everything allowed: the library's and the CLI's callers, `mnemo mcp` over stdio, and a
/// server without tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unrestricted;

impl Access for Unrestricted {
    fn can_read(&self, _: &str) -> bool {
        true
    }

    fn can_write(&self, _: &str) -> bool {
        true
    }

    fn can_use_agent(&self, _: &str) -> bool {
        true
    }

    fn is_unrestricted(&self) -> bool {
        true
    }
}

/// Whether a session is read or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionUse {
    /// Its log, context or outputs are read.
    Read,
    /// It is changed (forked, compacted, deleted).
    Write,
}

/// Which memories [`ScopedClient::list`] lists.
#[derive(Debug, Clone, Default)]
pub struct MemoryListing {
    /// Only this conversation; unset, every conversation the caller may read.
    pub conversation: Option<ConversationId>,
    /// Only this role.
    pub role: Option<Role>,
    /// How many to skip.
    pub offset: usize,
    /// How many to return, 1 to [`mnemo_core::MAX_PAGE`]; `DEFAULT_PAGE` when unset.
    pub limit: Option<usize>,
}

fn no_memory(id: MemoryId) -> EngineError {
    EngineError::NotFound(format!("no memory {id}"))
}

/// The characters an offloaded-output read may ask for: 1 to [`MAX_OUTPUT_READ`],
/// [`DEFAULT_OUTPUT_READ`] when unset.
pub fn output_read_limit(asked: Option<usize>) -> Result<usize, EngineError> {
    let limit = asked.unwrap_or(DEFAULT_OUTPUT_READ);
    if limit == 0 || limit > MAX_OUTPUT_READ {
        return Err(EngineError::InvalidInput(format!(
            "limit must be between 1 and {MAX_OUTPUT_READ}"
        )));
    }
    Ok(limit)
}

impl HistoryScope {
    /// The scope a call names (an archive search, an offloaded output): a session, or a
    /// conversation (`default` when neither is given); both is refused.
    pub fn named(session: Option<&str>, conversation: Option<&str>) -> Result<Self, EngineError> {
        match (session, conversation) {
            (Some(_), Some(_)) => Err(EngineError::InvalidInput(
                "give a session or a conversation, not both".into(),
            )),
            (Some(session), None) => SessionId::new(session)
                .map(Self::Session)
                .map_err(EngineError::InvalidInput),
            (None, conversation) => {
                ConversationId::new(conversation.unwrap_or(ConversationId::DEFAULT))
                    .map(Self::Conversation)
                    .map_err(|e| EngineError::InvalidInput(format!("conversation: {e}")))
            }
        }
    }
}

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
            .edit_checked(id, content, &|m| writable(&*self.access, m))
            .await?
            .ok_or_else(|| no_memory(id))?;
        Ok(Memory::of(&edited, self.client.store()))
    }

    /// The open conflicts of `conversation`, earliest first, when this caller may read it
    /// (`crate::write::conflicts`).
    pub async fn conflicts(&self, conversation: &ConversationId) -> Result<Conflicts, EngineError> {
        self.access.check_read(conversation.as_str())?;
        self.client.conflicts(conversation).await
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
            let snapshot = self.client.engine.snapshot.lock();
            snapshot
                .files
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

fn agent_answer(agent: &str, content: String) -> AgentMemory {
    AgentMemory {
        path: format!(
            "{}/{agent}/{}",
            mnemo_session::agent::AGENTS_DIR,
            mnemo_session::agent::AGENT_MEMORY_FILE
        ),
        agent: agent.to_owned(),
        content,
    }
}

/// The versions `access` may read. A deleted memory is found in git only, so its
/// conversation is read off its versions' paths (`entries/<conversation>/...`: the folder
/// decides). When none is readable but one is in a conversation the caller may not read,
/// that is refused naming it; a version whose path names no conversation is shown to no
/// restricted caller.
fn readable_versions(
    access: &dyn Access,
    versions: Vec<FileVersion>,
) -> Result<Vec<FileVersion>, EngineError> {
    let mut refused = None;
    let mut readable = Vec::with_capacity(versions.len());
    for version in versions {
        match mnemo_store::Location::parse(&version.path).map(|l| l.conversation) {
            Some(c) if access.can_read(c.as_str()) => readable.push(version),
            Some(c) => refused = refused.or(Some(c)),
            None => {}
        }
    }
    if let (true, Some(conversation)) = (readable.is_empty(), refused) {
        access.check_read(conversation.as_str())?;
    }
    Ok(readable)
}
