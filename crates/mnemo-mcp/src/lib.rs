//! mnemo's memory served over the Model Context Protocol (MCP), with the official Rust SDK
//! (`rmcp`).
//!
//! [`MemoryTools`] is an MCP server over a [`MemoryClient`] (the engine the proxy and the
//! REST API use):
//! - tools ([`tools`]): long-term memory (`search_memories`, `add_memory`, `list_memories`,
//!   `get_memory`, `delete_memory`, `memory_history`), the archive of chat sessions
//!   (`search_conversation_history`, `read_offloaded_output`) and an agent's own notes
//!   (`read_agent_memory`, `write_agent_memory`, `update_agent_memory`). Their parameters are
//!   the structs of [`params`]; their answers are the REST API's types
//!   (`mnemo_engine::api_types`), as structured JSON and the same JSON as text;
//! - resources ([`resources`]): each conversation's rolling summary and each agent's
//!   `MEMORY.md`.
//!
//! Every call goes through the caller's `ScopedClient` (the engine's access-checked methods), so a refused call has
//! the REST API's message; it comes back as an MCP tool error (`isError: true`) the model can
//! act on. Two transports:
//! - [`serve_stdio`] (`mnemo mcp`): the process's owner owns the store, nothing is
//!   restricted;
//! - [`http_service`] (`/mcp` on `mnemo serve`): streamable HTTP, stateless, JSON answers.
//!   The server authenticates each request and puts its [`Caller`] in the request; a request
//!   without one is refused.

pub mod params;
pub mod resources;
pub mod tools;

pub use tools::{Caller, MemoryTools};

use std::sync::Arc;

use mnemo_engine::MemoryClient;
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResult, ServerCapabilities, ServerInfo,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler, ServiceExt};

/// What the server tells a host about itself when a session starts.
const INSTRUCTIONS: &str = "mnemo is a long-term memory. Search it (search_memories) before \
answering questions about the user or past conversations; remember durable facts with \
add_memory. Memories belong to a conversation (`default` when unset); searches also see the \
shared `global` conversation. Full logs of past chat sessions are searched with \
search_conversation_history; an agent keeps its own notes with read_agent_memory, \
write_agent_memory and update_agent_memory.";

// The router built once in `new`; the macro's default would rebuild it on every call.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("mnemo", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = self
            .caller(&context.extensions)
            .map_err(|e| ErrorData::invalid_request(e, None))?;
        Ok(ListResourcesResult::with_all_items(resources::list(
            &caller,
        )))
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let caller = self
            .caller(&context.extensions)
            .map_err(|e| ErrorData::invalid_request(e, None))?;
        resources::read(&caller, &request.uri).await
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

/// The streamable-HTTP endpoint over `client`, as a tower service to mount at `/mcp`.
///
/// Stateless, with JSON answers: each POST is one JSON-RPC exchange and no session lives in
/// the server, so nothing grows with clients and any request may go to any server. Host
/// and Origin checks, body limits and authentication are the mounting server's (mnemo's
/// `guard` and `auth` run before this service); each request must carry a [`Caller`].
pub fn http_service(
    client: MemoryClient,
) -> StreamableHttpService<MemoryTools, NeverSessionManager> {
    let tools = MemoryTools::for_authenticated_requests(client);
    let config = StreamableHttpServerConfig::default()
        .with_stateful_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // mnemo's own guard checks Host against its configured names first.
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
