//! mnemo's memories served over the Model Context Protocol (MCP), with the official Rust SDK
//! (`rmcp`).
//!
//! [`MemoryTools`] is an MCP server: it holds a [`MemoryClient`] (the same engine the proxy
//! and the REST API use) and offers its long-term memory as tools an LLM can call:
//! `search_memories`, `add_memory`, `list_memories`, `get_memory`, `delete_memory` and
//! `memory_history`. Each tool's parameters are a struct below; their doc comments become the
//! descriptions in the tool's JSON schema. Each tool answers with structured JSON (and the same
//! JSON as text, for hosts that only show text).
//!
//! What a client sends is checked as the REST API checks it (`crates/mnemo-server/src/
//! memories.rs`): conversation ids through [`ConversationId::new`], memory ids parsed as
//! UUIDs, `top_k` and page sizes bounded. A refused call, or one the engine fails, is an MCP
//! tool error (`isError: true`) carrying the engine's own message, so the model can correct
//! its call; paths in answers are relative to the store.
//!
//! [`serve_stdio`] runs the server over stdin/stdout (`mnemo mcp`).

use std::path::PathBuf;

use mnemo_core::{ConversationId, MemoryId, Role};
use mnemo_engine::{EngineError, MemoryClient, SearchHit, SearchRequest};
use mnemo_git::FileVersion;
use mnemo_store::{FileStore, StoredMemory};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerInfo};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// The page size and history length when a call does not say (the REST API's).
const DEFAULT_PAGE: usize = 50;

/// What the server tells a host about itself when a session starts.
const INSTRUCTIONS: &str = "mnemo is a long-term memory. Search it (search_memories) before \
answering questions about the user or past conversations; remember durable facts with \
add_memory. Memories belong to a conversation (`default` when unset); searches also see the \
shared `global` conversation.";

/// A tool's refusal or failure: the text the model reads in an `isError` result.
///
/// Tools spell out `Result<Json<T>, ToolError>`: rmcp's `#[tool]` finds a tool's output
/// schema by reading that return type as written, and would not see through an alias.
type ToolError = String;

/// The long-term memory tools, over one engine.
#[derive(Clone)]
pub struct MemoryTools {
    client: MemoryClient,
    tool_router: ToolRouter<Self>,
}

/// Parameters of `search_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to look for, in plain words.
    pub query: String,
    /// The conversation whose memories (and the shared `global` ones) are searched; `default`
    /// when unset.
    #[serde(default)]
    pub conversation: Option<String>,
    /// How many memories to return, 0 to 100 (the configured default when unset).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// A metadata filter, e.g. `{"topic": "travel"}`; see mnemo's docs for operators.
    #[serde(default)]
    pub filter: Option<Value>,
    /// Weight of recency, 0 to 1: raise it for questions about the present.
    #[serde(default)]
    pub recency: Option<f32>,
}

/// Parameters of `add_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddParams {
    /// The fact to remember, one self-contained sentence.
    pub content: String,
    /// The conversation it belongs to; `default` when unset, `global` to share it with every
    /// conversation.
    #[serde(default)]
    pub conversation: Option<String>,
}

/// Parameters of `list_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only this conversation; every conversation when unset.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Only this role: `memory` (a fact), `user`, `assistant` or `summary`.
    #[serde(default)]
    pub role: Option<String>,
    /// How many memories to skip (0 when unset).
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many to return, 1 to 1000 (50 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Parameters of the tools that name one memory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryIdParams {
    /// The memory's id (a UUID, as search and list results show it).
    pub id: String,
}

/// Parameters of `memory_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// The memory's id (a UUID); a deleted memory's history is still found.
    pub id: String,
    /// How many versions, newest first, 1 to 1000 (50 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A memory as the tools show it (the REST API's fields); `path` is relative to the store.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Memory {
    /// The memory's id.
    #[schemars(with = "String")]
    pub id: MemoryId,
    /// Its conversation.
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// `memory` (a fact), `user`, `assistant` or `summary`.
    #[schemars(with = "String")]
    pub role: Role,
    /// When it was said or learned (RFC 3339).
    #[schemars(with = "String")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Its text.
    pub content: String,
    /// Its free-form metadata.
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub metadata: mnemo_core::Metadata,
    /// The turn a fact was extracted from.
    #[schemars(with = "Option<String>")]
    pub source_id: Option<MemoryId>,
    /// On a tombstone of an updated fact: the fact that replaced it.
    #[schemars(with = "Option<String>")]
    pub replaced_by: Option<MemoryId>,
    /// Its file, relative to the store.
    #[schemars(with = "String")]
    pub path: PathBuf,
}

impl Memory {
    fn of(memory: &StoredMemory, store: &FileStore) -> Self {
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
            path: store.relative(&memory.path).as_ref().into(),
        }
    }
}

/// The answer of `search_memories`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    /// The conversation searched (besides `global`).
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// The memories found, best first: id, conversation_id, role, content, created_at,
    /// metadata, path (relative to the store), score and each retrieval stage's scores.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub hits: Vec<SearchHit>,
}

/// The answer of `add_memory`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AddResult {
    /// The conversation written to.
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// Facts written (the new one, or the new version of a fact it updated).
    pub added: Vec<Memory>,
    /// Facts the new one replaced, as `[old id, new id]`.
    #[schemars(with = "Vec<(String, String)>")]
    pub updated: Vec<(MemoryId, MemoryId)>,
    /// Facts deleted because the new one says they no longer hold.
    #[schemars(with = "Vec<String>")]
    pub deleted: Vec<MemoryId>,
    /// Texts not written because the conversation already knows them.
    pub not_stored: Vec<String>,
    /// The git commit recording the change, when versioning is on.
    pub commit: Option<String>,
}

/// The answer of `list_memories`.
#[derive(Debug, Serialize, JsonSchema)]
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

/// The answer of `delete_memory`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleted {
    /// The memory deleted.
    #[schemars(with = "String")]
    pub deleted: MemoryId,
    /// Where its file went (its conversation's `deleted/` folder), relative to the store.
    #[schemars(with = "String")]
    pub tombstone: PathBuf,
}

/// The answer of `memory_history`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct History {
    /// The memory.
    #[schemars(with = "String")]
    pub id: MemoryId,
    /// Its versions in git, newest first: the commit (id, time, message), the file's path
    /// relative to the store, what the commit did to it, and the whole file as it was.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub versions: Vec<FileVersion>,
}

#[tool_router]
impl MemoryTools {
    /// Tools over `client`.
    pub fn new(client: MemoryClient) -> Self {
        Self {
            client,
            tool_router: Self::tool_router(),
        }
    }

    /// The memories nearest a query.
    #[tool(
        description = "Search long-term memory: the facts and past turns of a conversation (and shared `global` ones) that best answer a query, best first, with scores."
    )]
    async fn search_memories(
        &self,
        Parameters(params): Parameters<SearchParams>,
    ) -> Result<Json<SearchResult>, ToolError> {
        let conversation = conversation_or_default(params.conversation.as_deref())?;
        let request = SearchRequest {
            query: params.query,
            conversation_id: conversation.clone(),
            top_k: params.top_k,
            recency_weight: params.recency,
            filter: params.filter,
            ..SearchRequest::default()
        };
        let store = self.client.store();
        // Store-relative paths only: an answer carries no paths of the machine.
        let hits = self
            .client
            .search(request)
            .await
            .map_err(engine_error)?
            .into_iter()
            .map(|hit| SearchHit {
                path: store.relative(&hit.path).as_ref().into(),
                ..hit
            })
            .collect();
        Ok(Json(SearchResult {
            conversation_id: conversation,
            hits,
        }))
    }

    /// Remember a fact.
    #[tool(
        description = "Remember a fact in long-term memory. It is reconciled with what the conversation already knows (an update replaces the old fact), then committed."
    )]
    async fn add_memory(
        &self,
        Parameters(params): Parameters<AddParams>,
    ) -> Result<Json<AddResult>, ToolError> {
        let conversation = conversation_or_default(params.conversation.as_deref())?;
        let report = self
            .client
            .add(vec![params.content], &conversation)
            .await
            .map_err(engine_error)?;
        let store = self.client.store();
        Ok(Json(AddResult {
            conversation_id: conversation,
            added: report.added.iter().map(|m| Memory::of(m, store)).collect(),
            updated: report.updated,
            deleted: report.deleted,
            not_stored: report.not_stored,
            commit: report.commit,
        }))
    }

    /// A page of live memories.
    #[tool(
        description = "List live memories, oldest first, a page at a time (offset, limit), optionally of one conversation or one role."
    )]
    async fn list_memories(
        &self,
        Parameters(params): Parameters<ListParams>,
    ) -> Result<Json<MemoryPage>, ToolError> {
        let conversation = params
            .conversation
            .as_deref()
            .map(conversation_id)
            .transpose()?;
        let role = params
            .role
            .as_deref()
            .map(|r| r.parse::<Role>().map_err(|e| e.to_string()))
            .transpose()?;
        let limit = page_size(params.limit, "limit")?;
        let offset = params.offset.unwrap_or(0);
        let memories: Vec<StoredMemory> = self
            .client
            .list(conversation)
            .await
            .map_err(engine_error)?
            .into_iter()
            .filter(|m| role.is_none_or(|r| m.record.role == r))
            .collect();
        let store = self.client.store();
        let items = memories
            .iter()
            .skip(offset)
            .take(limit)
            .map(|m| Memory::of(m, store))
            .collect();
        Ok(Json(MemoryPage {
            total: memories.len(),
            offset,
            limit,
            items,
        }))
    }

    /// One live memory.
    #[tool(description = "Read one live memory by its id.")]
    async fn get_memory(
        &self,
        Parameters(params): Parameters<MemoryIdParams>,
    ) -> Result<Json<Memory>, ToolError> {
        let id = memory_id(&params.id)?;
        let memory = self
            .client
            .get(id)
            .await
            .map_err(engine_error)?
            .ok_or_else(|| format!("no memory {id}"))?;
        Ok(Json(Memory::of(&memory, self.client.store())))
    }

    /// Soft-delete a memory.
    #[tool(
        description = "Delete a memory that no longer holds. The delete is soft: the file moves to its conversation's deleted/ folder and a commit records it, so memory_history still shows it."
    )]
    async fn delete_memory(
        &self,
        Parameters(params): Parameters<MemoryIdParams>,
    ) -> Result<Json<Deleted>, ToolError> {
        let id = memory_id(&params.id)?;
        let tombstone = self
            .client
            .delete(id)
            .await
            .map_err(engine_error)?
            .ok_or_else(|| format!("no memory {id}"))?;
        Ok(Json(Deleted {
            deleted: id,
            tombstone: self.client.store().relative(&tombstone).as_ref().into(),
        }))
    }

    /// A memory's versions in git.
    #[tool(
        description = "Show every version of a memory in git, newest first (who changed it, when, and its full text then), including deleted memories."
    )]
    async fn memory_history(
        &self,
        Parameters(params): Parameters<HistoryParams>,
    ) -> Result<Json<History>, ToolError> {
        let id = memory_id(&params.id)?;
        let limit = page_size(params.limit, "limit")?;
        let versions = self.client.history(id, limit).await.map_err(engine_error)?;
        if versions.is_empty() {
            return Err(self.client.no_history(id));
        }
        Ok(Json(History { id, versions }))
    }
}

// The router built once in `new`; the macro's default would rebuild it on every call.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mnemo", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serves `tools` over stdin and stdout until the client closes its end.
///
/// Stdout carries the protocol only: whoever calls this logs to stderr.
pub async fn serve_stdio(tools: MemoryTools) -> Result<(), std::io::Error> {
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP session did not start: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("MCP session failed: {e}")))?;
    Ok(())
}

/// `raw` as a conversation id, refused with the id checker's message (no `..`, no slashes).
fn conversation_id(raw: &str) -> Result<ConversationId, ToolError> {
    ConversationId::new(raw).map_err(|e| e.to_string())
}

/// The named conversation, or `default`.
fn conversation_or_default(raw: Option<&str>) -> Result<ConversationId, ToolError> {
    raw.map(conversation_id)
        .transpose()
        .map(Option::unwrap_or_default)
}

fn memory_id(raw: &str) -> Result<MemoryId, ToolError> {
    raw.parse::<MemoryId>().map_err(|e| e.to_string())
}

/// A page size: 1..=[`MAX_PAGE`](mnemo_core::MAX_PAGE), [`DEFAULT_PAGE`] when unset.
fn page_size(asked: Option<usize>, name: &str) -> Result<usize, ToolError> {
    mnemo_core::page_size(asked, DEFAULT_PAGE, name)
}

/// The engine's message for a failed call. Failures that are not the caller's (I/O, index)
/// are logged too, as the REST API logs them.
fn engine_error(error: EngineError) -> ToolError {
    if !(error.is_invalid_input()
        || error.is_not_found()
        || error.is_forbidden()
        || error.is_conflict())
    {
        warn!("MCP tool call failed: {error}");
    }
    error.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_conversation_ids_are_refused() {
        for raw in ["../x", "a/b", "", ".."] {
            assert!(conversation_id(raw).is_err(), "{raw:?} was accepted");
        }
        assert_eq!(
            conversation_or_default(None).unwrap(),
            ConversationId::default()
        );
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(None, "limit"), Ok(DEFAULT_PAGE));
        assert_eq!(
            page_size(Some(mnemo_core::MAX_PAGE), "limit"),
            Ok(mnemo_core::MAX_PAGE)
        );
        assert!(page_size(Some(0), "limit").is_err());
        assert!(page_size(Some(mnemo_core::MAX_PAGE + 1), "limit").is_err());
    }

    #[test]
    fn memory_ids_are_uuids() {
        assert!(memory_id("not-a-uuid").is_err());
        assert!(memory_id("6f1c2d1e-8f8a-4c53-9a0e-2b7c1d9e4f00").is_ok());
    }
}
