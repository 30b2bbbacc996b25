//! `mnemo mcp`: the memory tools over the Model Context Protocol, on stdin and stdout.
//!
//! An MCP host (an IDE, a desktop assistant) starts this command and talks JSON-RPC with it
//! over the pipes. Stdout is the protocol's alone: logs go to stderr (see `init_logging`), and
//! nothing here prints.
//!
//! Two ways to serve, chosen so that one host configuration works whether or not a server
//! runs:
//! - **It opens the store itself** (the usual case). Like `mnemo serve`, it runs for as long
//!   as the host keeps it and follows hand edits of the files (`start_watcher`). Unlike
//!   `serve`, it never starts the local LLM: `add_memory` reconciles new facts with an
//!   upstream when one is configured (`openai_base_url`), and otherwise stores them as they
//!   are, as `mnemo add` does.
//! - **It forwards to a running `mnemo serve`** ([`bridge`]): when a server holds the store,
//!   it announces its address in `<store>/.mnemo.serve` ([`Announcement`]), and this command
//!   passes each message to that server's `/mcp` with `MNEMO_API_TOKEN` as the bearer token.
//!   Only a loopback address is taken from that file (the store may come from elsewhere;
//!   the token must not follow a planted address). `--url` names a server explicitly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use mnemo_mcp::MemoryTools;
use mnemo_store::layout::SERVE_FILE;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tracing::{info, warn};

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

/// The largest message passed on, either way (the server's default body limit).
const MAX_MESSAGE_BYTES: usize = 8 << 20;

#[derive(Args)]
pub struct McpArgs {
    /// Forward to the `mnemo serve` at this base URL (its /mcp) instead of opening the store;
    /// the bearer token is taken from MNEMO_API_TOKEN
    #[arg(long)]
    url: Option<String>,
}

pub async fn mcp(global: &GlobalArgs, args: McpArgs) -> CommandResult {
    if let Some(url) = args.url {
        return bridge(&url).await.map_err(Failure::from);
    }
    let config = commands::load_config(global)?;
    let start_watcher = config.start_watcher;
    let root = config.memory_path.clone();
    let client = match commands::open_with_config(config, false).await {
        Ok(client) => client,
        // One process owns a store at a time: talk to it when it is a server that said where.
        Err(Failure { error, code: 4 }) => {
            let Some(url) = Announcement::read(&root) else {
                return Err(Failure {
                    error: error.context(
                        "`mnemo mcp` opens the store itself: stop the process holding it, give this command another --memory-path, or point your MCP host at a running `mnemo serve` (its /mcp, or `mnemo mcp --url`)",
                    ),
                    code: 4,
                });
            };
            info!("the store is held by mnemo serve at {url}; forwarding MCP to it");
            return bridge(&url).await.map_err(Failure::from);
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

/// `<store>/.mnemo.serve`, written by `mnemo serve` once it listens and removed when it
/// stops.
pub struct Announcement {
    path: PathBuf,
}

impl Announcement {
    /// Announces `bound` in the store at `root`. A failure is logged, not fatal: the server
    /// serves anyway, and `mnemo mcp` then says the store is held.
    pub fn write(root: &Path, bound: SocketAddr) -> Option<Self> {
        let path = root.join(SERVE_FILE);
        let mut address = bound;
        // A server on every interface is reached through loopback from this machine.
        if address.ip().is_unspecified() {
            address.set_ip(match address {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let url = format!("http://{address}\n");
        // Atomic: a link planted at that name is replaced, never followed.
        match mnemo_store::atomic::write_atomic(&path, url.as_bytes()) {
            Ok(()) => Some(Self { path }),
            Err(e) => {
                warn!(
                    "cannot write {}: {e}; `mnemo mcp` will not find this server",
                    path.display()
                );
                None
            }
        }
    }

    /// The announced URL in the store at `root`, when there is one and it is on loopback.
    pub fn read(root: &Path) -> Option<String> {
        let path = root.join(SERVE_FILE);
        let bytes = mnemo_store::untrusted::read_regular(&path, 1024).ok()?;
        let url = String::from_utf8(bytes).ok()?.trim().to_owned();
        let loopback = ["http://127.0.0.1:", "http://[::1]:", "http://localhost:"]
            .iter()
            .any(|prefix| {
                url.strip_prefix(prefix)
                    .is_some_and(|port| port.parse::<u16>().is_ok())
            });
        if !loopback {
            warn!("{} does not hold a loopback URL; ignored", path.display());
            return None;
        }
        Some(url)
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Passes each JSON-RPC message from stdin to `base_url`'s `/mcp` and each answer back to
/// stdout, until stdin closes. Messages are forwarded concurrently (JSON-RPC matches answers
/// by id); a failed exchange becomes a JSON-RPC error for its request, so the host is never
/// left waiting.
async fn bridge(base_url: &str) -> anyhow::Result<()> {
    let endpoint = format!("{}/mcp", base_url.trim_end_matches('/'));
    let token = std::env::var("MNEMO_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("cannot build the HTTP client")?;
    // Fail at once, not on the host's first call, when nothing listens there.
    http.get(format!("{}/health", base_url.trim_end_matches('/')))
        .send()
        .await
        .with_context(|| format!("no mnemo serve answers at {base_url}"))?;
    let exchange = Arc::new(Exchange {
        http,
        endpoint,
        token,
        stdout: Mutex::new(tokio::io::stdout()),
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut running = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await.context("cannot read stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > MAX_MESSAGE_BYTES {
            bail!(
                "a message of {} bytes from the host; at most {MAX_MESSAGE_BYTES} are passed on",
                line.len()
            );
        }
        let exchange = exchange.clone();
        running.spawn(async move { exchange.forward(line).await });
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

/// One bridge's connection to the server, and the host's stdout.
struct Exchange {
    http: reqwest::Client,
    endpoint: String,
    token: Option<String>,
    stdout: Mutex<tokio::io::Stdout>,
}

impl Exchange {
    async fn forward(&self, message: String) {
        let id = serde_json::from_str::<Value>(&message)
            .ok()
            .and_then(|m| m.get("id").cloned());
        let answer = match self.post(message).await {
            Ok(None) => return,
            Ok(Some(answer)) => answer,
            Err(e) => match id {
                Some(id) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": format!("{e:#}")}})
                    .to_string(),
                None => {
                    warn!("a notification was not delivered: {e:#}");
                    return;
                }
            },
        };
        let mut stdout = self.stdout.lock().await;
        let written = async {
            stdout.write_all(answer.trim_end().as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        };
        if let Err(e) = written.await {
            warn!("cannot write to the host: {e}");
        }
    }

    /// The server's answer to `message`, or `None` when it has none (a notification).
    async fn post(&self, message: String) -> anyhow::Result<Option<String>> {
        let mut request = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            // The protocol asks clients to accept both; mnemo answers JSON.
            .header("accept", "application/json, text/event-stream")
            .body(message);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.endpoint))?;
        let status = response.status();
        let body = response.text().await.context("cannot read the answer")?;
        if status == reqwest::StatusCode::ACCEPTED {
            return Ok(None);
        }
        if !status.is_success() {
            let detail = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|b| b["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            bail!("{} answered {status}: {detail}", self.endpoint);
        }
        if body.len() > MAX_MESSAGE_BYTES {
            bail!(
                "an answer of {} bytes; at most {MAX_MESSAGE_BYTES} are passed on",
                body.len()
            );
        }
        // mnemo's /mcp answers each message with one JSON body (no event streams).
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_announcement_is_followed() {
        let store = tempfile::tempdir().unwrap();
        let path = store.path().join(SERVE_FILE);
        assert_eq!(Announcement::read(store.path()), None);
        let announced = Announcement::write(store.path(), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(
            Announcement::read(store.path()).as_deref(),
            Some("http://127.0.0.1:8080")
        );
        drop(announced);
        assert!(!path.exists(), "removed when the server stops");
        for planted in [
            "http://evil.example:80",
            "http://127.0.0.1.evil.example:80",
            "http://127.0.0.1:80/x",
        ] {
            std::fs::write(&path, planted).unwrap();
            assert_eq!(Announcement::read(store.path()), None, "{planted}");
        }
        // A link is not followed, even to a good address.
        std::fs::remove_file(&path).unwrap();
        let elsewhere = store.path().join("elsewhere");
        std::fs::write(&elsewhere, "http://127.0.0.1:9").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(Announcement::read(store.path()), None);
    }
}
