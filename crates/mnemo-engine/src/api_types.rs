//! What the HTTP API and the MCP tools answer: one set of types for both front ends.
//!
//! Each type derives its OpenAPI schema (`utoipa`, served in `/openapi.json`) and its JSON
//! Schema (`schemars`, an MCP tool's output schema), so a REST answer and a tool result have
//! the same fields and cannot drift apart. Paths in them are relative to the store: an
//! answer never carries paths of the machine it was computed on.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, Metadata, Role};
use mnemo_git::{CommitInfo, FileVersion};
use mnemo_session::Excerpt;
use mnemo_store::{FileStore, StoredMemory};
use schemars::JsonSchema;
use serde::Serialize;
use utoipa::ToSchema;

use crate::retrieval::SearchHit;

/// A memory as mnemo shows it; `path` is relative to the store.
#[derive(Debug, Clone, Serialize, ToSchema, JsonSchema)]
pub struct Memory {
    /// The memory's id.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub id: MemoryId,
    /// Its conversation.
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// `memory` (a fact), `user`, `assistant` or `summary`.
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub role: Role,
    /// When it was said or learned.
    pub created_at: DateTime<Utc>,
    /// Its text.
    pub content: String,
    /// Its free-form metadata.
    #[schema(value_type = Object)]
    pub metadata: Metadata,
    /// The turn a fact was extracted from.
    #[schema(value_type = Option<String>, format = Uuid)]
    #[schemars(with = "Option<String>")]
    pub source_id: Option<MemoryId>,
    /// On a tombstone of an updated fact: the fact that replaced it.
    #[schema(value_type = Option<String>, format = Uuid)]
    #[schemars(with = "Option<String>")]
    pub replaced_by: Option<MemoryId>,
    /// On a live fact: the later fact about the same thing that holds over it until a person
    /// resolves the conflict.
    #[schema(value_type = Option<String>, format = Uuid)]
    #[schemars(with = "Option<String>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts_with: Option<MemoryId>,
    /// On a live fact: later facts a person said hold beside it.
    #[schema(value_type = Vec<String>)]
    #[schemars(with = "Vec<String>")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compatible_with: Vec<MemoryId>,
    /// On a tombstone: why it was retired, where that was said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its file, relative to the store.
    #[schema(value_type = String)]
    pub path: PathBuf,
}

impl Memory {
    /// `memory` as mnemo shows it, its path made relative to `store`.
    pub fn of(memory: &StoredMemory, store: &FileStore) -> Self {
        let r = &memory.record;
        Self {
            id: r.id,
            conversation_id: r.conversation_id.clone(),
            role: r.role,
            created_at: r.created_at,
            content: r.content.clone(),
            metadata: r.metadata.clone(),
            source_id: r.source_id,
            replaced_by: r.replaced_by,
            conflicts_with: r.conflicts_with,
            compatible_with: r.compatible_with.clone(),
            reason: r.reason.clone(),
            path: store.relative(&memory.path).as_ref().into(),
        }
    }
}

/// The answer to a search.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct SearchResult {
    /// The conversation searched (besides `global`).
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// The memories found, best first, with each stage's scores; paths relative to the store.
    pub hits: Vec<SearchHit>,
    /// For a search as of a revision: the commit the memories are as of (their paths are
    /// those of its tree). Absent for a search of the memories as they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<AsOfCommit>,
}

/// An updated fact: the old id, tombstoned, and the new one.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct Updated {
    /// The fact that no longer holds.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub old: MemoryId,
    /// The fact that replaced it.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub new: MemoryId,
}

/// What remembering changed.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct AddResult {
    /// The conversation written to.
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// Facts written (new ones, and the new versions of updated ones).
    pub added: Vec<Memory>,
    /// Facts replaced by newer ones.
    pub updated: Vec<Updated>,
    /// Facts tombstoned because they no longer hold.
    #[schema(value_type = Vec<String>)]
    #[schemars(with = "Vec<String>")]
    pub deleted: Vec<MemoryId>,
    /// Texts not written because the conversation already knows them (the reconciler said
    /// so). A text that retracts a fact shows as that fact in `deleted`; every other text is
    /// in `added` or `updated`.
    pub not_stored: Vec<String>,
    /// The git commit recording it, when versioning is on.
    pub commit: Option<String>,
}

/// A page of memories.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct MemoryPage {
    /// Memories matching, in all.
    pub total: usize,
    /// How many were skipped.
    pub offset: usize,
    /// The page size asked for.
    pub limit: usize,
    /// This page, oldest first.
    pub items: Vec<Memory>,
}

/// What a delete did.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct Deleted {
    /// The memory deleted.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub deleted: MemoryId,
    /// Where its file went (its conversation's `deleted/` folder), relative to the store.
    #[schema(value_type = String)]
    pub tombstone: PathBuf,
}

/// A memory's versions.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct History {
    /// The memory.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub id: MemoryId,
    /// Its versions in git, newest first: the commit, the file's path relative to the store,
    /// what the commit did to it, and the whole file as it was.
    pub versions: Vec<FileVersion>,
}

/// An agent's notes.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct AgentMemory {
    /// The agent.
    pub agent: String,
    /// The file, relative to the store.
    pub path: String,
    /// The whole notes (empty when there are none yet).
    pub content: String,
}

/// Archive search results.
#[derive(Debug, Serialize, ToSchema, JsonSchema)]
pub struct HistoryResults {
    /// Excerpts with five lines of context, labelled User/Assistant/Tool, best first.
    pub excerpts: Vec<Excerpt>,
}

/// The commit a search as of a revision answered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct AsOfCommit {
    /// Its full hex id.
    pub id: String,
    /// The shortest unambiguous prefix of its id (at least 7 digits).
    pub short_id: String,
    /// When it was authored.
    pub time: DateTime<Utc>,
    /// Who authored it (`mnemo`, or whoever edited by hand and committed).
    pub author: String,
    /// Its message.
    pub message: String,
}

impl From<CommitInfo> for AsOfCommit {
    fn from(commit: CommitInfo) -> Self {
        Self {
            id: commit.id,
            short_id: commit.short_id,
            time: commit.time,
            author: commit.author,
            message: commit.message,
        }
    }
}

/// The answer of `MemoryClient::search_as_of`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AsOfSearch {
    /// The commit the memories are as of.
    pub as_of: AsOfCommit,
    /// The memories found, best first; paths are relative to the store, as the commit's
    /// tree names them (`mnemo show <commit>:<path>` shows one).
    pub hits: Vec<SearchHit>,
}
