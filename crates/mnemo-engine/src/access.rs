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

use mnemo_core::{ConversationId, MemoryId, Role};
use mnemo_git::FileVersion;
use mnemo_session::SessionId;

use crate::api_types::AgentMemory;
use crate::error::EngineError;
use crate::sessions::{HistoryScope, MAX_OUTPUT_READ};

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

/// Which memories [`crate::ScopedClient::list`] lists.
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

pub(crate) fn no_memory(id: MemoryId) -> EngineError {
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

pub(crate) fn agent_answer(agent: &str, content: String) -> AgentMemory {
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
pub(crate) fn readable_versions(
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
