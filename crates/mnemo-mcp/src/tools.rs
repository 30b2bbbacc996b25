//! The tools: each parses what a client sent as the REST API does, then calls the engine's
//! access-checked method on the caller's `ScopedClient` and answers with the same type the REST API returns.

use std::sync::Arc;

use mnemo_core::{ConversationId, MemoryId, Role};
use mnemo_engine::{Access, MemoryClient, ScopedClient, Unrestricted};
use mnemo_engine::{
    AddResult, AgentMemory, Conflicts, Deleted, EngineError, History, HistoryResults, HistoryScope,
    Memory, MemoryListing, MemoryPage, Resolved, SearchRequest, SearchResult, ToolOutputSlice,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::Extensions;
use rmcp::{tool, tool_router};
use tracing::warn;

use crate::params::{
    AddParams, AgentParams, AgentUpdateParams, AgentWriteParams, ArchiveSearchParams,
    ConflictsParams, HistoryParams, ListParams, MemoryIdParams, OutputParams,
    ResolveConflictParams, SearchParams,
};

/// The caller of one HTTP request, as the server authenticated it: what its token may touch.
/// The server puts it in the request's extensions before the request reaches `/mcp`.
#[derive(Clone)]
pub struct Caller(pub Arc<dyn Access>);

/// Who the tools answer to.
#[derive(Clone, Copy)]
enum Callers {
    /// The process's owner (stdio): everything is allowed.
    Owner,
    /// Each HTTP request's [`Caller`], which must be there.
    Authenticated,
}

/// The MCP server: tools and resources over one engine.
#[derive(Clone)]
pub struct MemoryTools {
    client: MemoryClient,
    callers: Callers,
    pub(crate) tool_router: ToolRouter<Self>,
}

impl MemoryTools {
    /// Tools for the store's owner (stdio), with nothing restricted.
    pub fn new(client: MemoryClient) -> Self {
        Self {
            client,
            callers: Callers::Owner,
            tool_router: Self::tool_router(),
        }
    }

    /// Tools for HTTP, where each request carries its [`Caller`].
    pub fn for_authenticated_requests(client: MemoryClient) -> Self {
        Self {
            callers: Callers::Authenticated,
            ..Self::new(client)
        }
    }

    /// The engine as the call whose context holds `extensions` may use it.
    pub(crate) fn caller(&self, extensions: &Extensions) -> Result<ScopedClient, String> {
        let access: Arc<dyn Access> = match self.callers {
            Callers::Owner => Arc::new(Unrestricted),
            Callers::Authenticated => extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .map(|caller| caller.0.clone())
                .ok_or_else(|| "this MCP endpoint serves authenticated requests only".to_owned())?,
        };
        Ok(self.client.as_caller(access))
    }
}

/// A tool's refusal or failure: the text the model reads in an `isError` result.
///
/// Tools spell out `Result<Json<T>, ToolError>`: rmcp's `#[tool]` finds a tool's output
/// schema by reading that return type as written, and would not see through an alias.
pub(crate) type ToolError = String;

#[tool_router(vis = "pub(crate)")]
impl MemoryTools {
    #[tool(
        description = "Search long-term memory: the facts and past turns of a conversation (and shared `global` ones) that best answer a query, best first, with scores."
    )]
    async fn search_memories(
        &self,
        Parameters(params): Parameters<SearchParams>,
        extensions: Extensions,
    ) -> Result<Json<SearchResult>, ToolError> {
        let caller = self.caller(&extensions)?;
        let request = SearchRequest {
            query: params.query,
            conversation_id: conversation_or_default(params.conversation.as_deref())?,
            top_k: params.top_k,
            recency_weight: params.recency,
            filter: params.filter,
            ..SearchRequest::default()
        };
        answer(caller.search(request).await)
    }

    #[tool(
        description = "Remember a fact in long-term memory. It is reconciled with what the conversation already knows (an update replaces the old fact), then committed."
    )]
    async fn add_memory(
        &self,
        Parameters(params): Parameters<AddParams>,
        extensions: Extensions,
    ) -> Result<Json<AddResult>, ToolError> {
        let caller = self.caller(&extensions)?;
        let conversation = conversation_or_default(params.conversation.as_deref())?;
        let metadata = params.metadata.unwrap_or_default();
        answer(
            caller
                .add(vec![params.content], &conversation, metadata)
                .await,
        )
    }

    #[tool(
        description = "List live memories, oldest first, a page at a time (offset, limit), optionally of one conversation or one role."
    )]
    async fn list_memories(
        &self,
        Parameters(params): Parameters<ListParams>,
        extensions: Extensions,
    ) -> Result<Json<MemoryPage>, ToolError> {
        let caller = self.caller(&extensions)?;
        let listing = MemoryListing {
            conversation: params
                .conversation
                .as_deref()
                .map(conversation_id)
                .transpose()?,
            role: params
                .role
                .as_deref()
                .map(|r| r.parse::<Role>().map_err(|e| e.to_string()))
                .transpose()?,
            offset: params.offset.unwrap_or(0),
            limit: params.limit,
        };
        answer(caller.list(listing).await)
    }

    #[tool(description = "Read one live memory by its id.")]
    async fn get_memory(
        &self,
        Parameters(params): Parameters<MemoryIdParams>,
        extensions: Extensions,
    ) -> Result<Json<Memory>, ToolError> {
        let caller = self.caller(&extensions)?;
        let id = memory_id(&params.id)?;
        answer(caller.get(id).await)
    }

    #[tool(
        description = "Delete a memory that no longer holds. The delete is soft: the file moves to its conversation's deleted/ folder and a commit records it, so memory_history still shows it."
    )]
    async fn delete_memory(
        &self,
        Parameters(params): Parameters<MemoryIdParams>,
        extensions: Extensions,
    ) -> Result<Json<Deleted>, ToolError> {
        let caller = self.caller(&extensions)?;
        let id = memory_id(&params.id)?;
        answer(caller.delete(id).await)
    }

    #[tool(
        description = "List a conversation's open conflicts: pairs of live facts about the same thing of the same person that say different things, earliest first, each with its day and the turn it came from. Until a pair is resolved, the later fact holds."
    )]
    async fn list_conflicts(
        &self,
        Parameters(params): Parameters<ConflictsParams>,
        extensions: Extensions,
    ) -> Result<Json<Conflicts>, ToolError> {
        let caller = self.caller(&extensions)?;
        let conversation = conversation_or_default(params.conversation.as_deref())?;
        answer(caller.conflicts(&conversation).await)
    }

    #[tool(
        description = "Resolve one conflict as the user decides: keep_later (the earlier fact is retired), keep_earlier (the later one is) or both_hold (neither is, and the pair is not a conflict again). The retired fact is tombstoned with the reason, and the change committed."
    )]
    async fn resolve_conflict(
        &self,
        Parameters(params): Parameters<ResolveConflictParams>,
        extensions: Extensions,
    ) -> Result<Json<Resolved>, ToolError> {
        let caller = self.caller(&extensions)?;
        let conversation = conversation_or_default(params.conversation.as_deref())?;
        let (earlier, later) = (memory_id(&params.earlier)?, memory_id(&params.later)?);
        answer(
            caller
                .resolve_conflict(&conversation, earlier, later, params.resolution)
                .await,
        )
    }

    #[tool(
        description = "Show every version of a memory in git, newest first (who changed it, when, and its full text then), including deleted memories."
    )]
    async fn memory_history(
        &self,
        Parameters(params): Parameters<HistoryParams>,
        extensions: Extensions,
    ) -> Result<Json<History>, ToolError> {
        let caller = self.caller(&extensions)?;
        let id = memory_id(&params.id)?;
        answer(caller.history(id, params.limit).await)
    }

    #[tool(
        description = "Search the full logs of past chat sessions (every message, including compacted and abandoned ones) for words, and get labelled excerpts with context, best first."
    )]
    async fn search_conversation_history(
        &self,
        Parameters(params): Parameters<ArchiveSearchParams>,
        extensions: Extensions,
    ) -> Result<Json<HistoryResults>, ToolError> {
        let caller = self.caller(&extensions)?;
        let scope = HistoryScope::named(params.session.as_deref(), params.conversation.as_deref())
            .map_err(engine_error)?;
        answer(
            caller
                .search_history(scope, &params.query, params.limit)
                .await,
        )
    }

    #[tool(
        description = "Read an agent's own notes (its MEMORY.md): what it wrote down to remember across sessions."
    )]
    async fn read_agent_memory(
        &self,
        Parameters(params): Parameters<AgentParams>,
        extensions: Extensions,
    ) -> Result<Json<AgentMemory>, ToolError> {
        let caller = self.caller(&extensions)?;
        answer(caller.agent_memory(&params.agent).await)
    }

    #[tool(
        description = "Append a note to an agent's own notes (its MEMORY.md), on a line of its own; the change is committed."
    )]
    async fn write_agent_memory(
        &self,
        Parameters(params): Parameters<AgentWriteParams>,
        extensions: Extensions,
    ) -> Result<Json<AgentMemory>, ToolError> {
        let caller = self.caller(&extensions)?;
        answer(
            caller
                .append_agent_memory(&params.agent, &params.text)
                .await,
        )
    }

    #[tool(
        description = "Replace one exact passage of an agent's notes (its MEMORY.md) with new text; the passage must occur exactly once. The change is committed."
    )]
    async fn update_agent_memory(
        &self,
        Parameters(params): Parameters<AgentUpdateParams>,
        extensions: Extensions,
    ) -> Result<Json<AgentMemory>, ToolError> {
        let caller = self.caller(&extensions)?;
        answer(
            caller
                .update_agent_memory(&params.agent, &params.old_text, &params.new_text)
                .await,
        )
    }

    #[tool(
        description = "Read a tool output that was offloaded from the context (its placeholder names the call id), a slice at a time by character offset and limit."
    )]
    async fn read_offloaded_output(
        &self,
        Parameters(params): Parameters<OutputParams>,
        extensions: Extensions,
    ) -> Result<Json<ToolOutputSlice>, ToolError> {
        let caller = self.caller(&extensions)?;
        let scope = HistoryScope::named(params.session.as_deref(), params.conversation.as_deref())
            .map_err(engine_error)?;
        let slice = caller
            .tool_output(
                &scope,
                &params.call_id,
                params.offset.unwrap_or(0),
                params.limit,
            )
            .await;
        answer(slice)
    }
}

/// An engine answer as a tool result.
fn answer<T>(result: Result<T, EngineError>) -> Result<Json<T>, ToolError> {
    result.map(Json).map_err(engine_error)
}

/// `raw` as a conversation id, refused with the id checker's message (no `..`, no slashes).
pub(crate) fn conversation_id(raw: &str) -> Result<ConversationId, ToolError> {
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

/// The engine's message for a failed call. Failures that are not the caller's (I/O, index)
/// are logged too, as the REST API logs them.
pub(crate) fn engine_error(error: EngineError) -> ToolError {
    if !(error.is_invalid_input()
        || error.is_not_found()
        || error.is_forbidden()
        || error.is_conflict()
        || error.is_index_unavailable())
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
    fn memory_ids_are_uuids() {
        assert!(memory_id("not-a-uuid").is_err());
        assert!(memory_id("6f1c2d1e-8f8a-4c53-9a0e-2b7c1d9e4f00").is_ok());
    }
}
