//! `mnemo mcp`: the memory tools over the Model Context Protocol, on stdin and stdout.
//!
//! An MCP host (an IDE, a desktop assistant) starts this command and talks JSON-RPC with it
//! over the pipes. Stdout is the protocol's alone: logs go to stderr (see `init_logging`), and
//! nothing here prints.
//!
//! Like `mnemo serve`, it runs for as long as the host keeps it, so it follows hand edits of
//! the files (`start_watcher`). Unlike `serve`, it never starts the local LLM: `add_memory`
//! reconciles new facts with an upstream when one is configured (`openai_base_url`), and
//! otherwise stores them as they are, as `mnemo add` does.

use anyhow::anyhow;
use mnemo_mcp::MemoryTools;

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

pub async fn mcp(global: &GlobalArgs) -> CommandResult {
    let config = commands::load_config(global)?;
    let start_watcher = config.start_watcher;
    let client = match commands::open_with_config(config, false).await {
        Ok(client) => client,
        // One process owns a store at a time; say what to do about the other one.
        Err(Failure { error, code: 4 }) => {
            return Err(Failure {
                error: error.context(
                    "`mnemo mcp` opens the store itself: stop the process holding it (for example `mnemo serve`), or give this command another --memory-path",
                ),
                code: 4,
            })
        }
        Err(failure) => return Err(failure),
    };
    let _watcher = if start_watcher {
        Some(client.start_watcher()?)
    } else {
        None
    };
    let served = mnemo_mcp::serve_stdio(MemoryTools::new(client.clone())).await;
    // Write-path passes still running in the background finish before the store is let go.
    client.wait_idle().await;
    served.map_err(|e| Failure::from(anyhow!(e)))
}
