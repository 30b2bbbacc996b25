//! `mnemo serve`: the memory proxy, with the local LLM when no upstream is configured.

use std::net::SocketAddr;

use anyhow::{anyhow, Context};
use clap::Args;
use mnemo_core::LOCAL_LLM_ALIAS;
use mnemo_llm::{LlmClient, LocalLlm, LocalLlmOptions};
use mnemo_server::auth::{API_TOKEN_ENV, MIN_TOKEN_LEN};
use mnemo_server::{Auth, ServerOptions};
use tracing::{info, warn};

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

/// The largest `--max-body-mib` honoured.
const MAX_BODY_MIB: usize = 1024;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 = any free port)
    #[arg(long, default_value_t = 8100)]
    port: u16,
    /// Largest request body accepted, in MiB (at most 1024)
    #[arg(long, default_value_t = 8)]
    max_body_mib: usize,
    /// Do not start the local LLM when no upstream is configured (chat answers 503)
    #[arg(long)]
    no_local_llm: bool,
    /// Also serve requests whose Host is NAME (loopback names and the listening address are
    /// always served; others are refused as DNS rebinding); repeatable
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// Also accept browser requests from ORIGIN (e.g. http://localhost:3000); repeatable
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// On shutdown, wait at most this long for queued memory writes; the rest are journaled
    /// and resumed at the next start (a second Ctrl-C exits at once)
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    shutdown_grace_secs: u64,
}

pub async fn serve(global: &GlobalArgs, args: ServeArgs) -> CommandResult {
    let mut config = commands::load_config(global)?;
    let max_body_bytes = max_body_bytes(args.max_body_mib);
    let address: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .or_else(|_| format!("[{}]:{}", args.host, args.port).parse())
        .map_err(|_| Failure::invalid(anyhow!("--host {} is not an IP address", args.host)))?;
    // Checked before anything starts or binds: a server that would be open to the network
    // never listens at all.
    let auth = Auth::from_config(&config.server, |var| std::env::var(var).ok())
        .map_err(|e| Failure::invalid(anyhow!("cannot use the configured tokens: {e}")))?;
    if !address.ip().is_loopback() {
        if !auth.is_required() {
            return Err(Failure::invalid(anyhow!(
                "refusing to listen on {address} without authentication: anyone who can reach it could read and change every memory. \
                 Set {API_TOKEN_ENV} to a token of at least {MIN_TOKEN_LEN} characters (full access), or configure [[server.tokens]] \
                 in the config file (docs/server.md); or listen on 127.0.0.1"
            )));
        }
        warn!("listening on {address} over plain HTTP: bearer tokens cross the network in clear; put a TLS proxy in front unless the network is trusted");
    }

    let (local, upstream_label) = start_upstream(&mut config, !args.no_local_llm).await?;

    let start_watcher = config.start_watcher;
    let model = config.llm_model.clone();
    let client = commands::open_with_config(config, false).await?;
    let _watcher = if start_watcher {
        Some(client.start_watcher()?)
    } else {
        None
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let bound = listener
        .local_addr()
        .context("cannot read the bound address")?;
    print_banner(bound, client.store().root(), &upstream_label, &model, &auth);

    let mut allowed_hosts = args.allow_hosts;
    if !bound.ip().is_loopback() && !bound.ip().is_unspecified() {
        allowed_hosts.push(match bound.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        });
    }
    let options = ServerOptions {
        max_body_bytes,
        upstream_label,
        allowed_hosts,
        allowed_origins: args.allow_origins,
        shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace_secs.min(24 * 3600)),
        auth,
    };
    let resumed = client.resume_pending_passes();
    if resumed > 0 {
        println!("  resuming {resumed} memory writes queued by the last run");
    }
    let stop_local = local.as_ref().map(|llm| llm.stopper());
    let _announced = crate::mcp::Announcement::write(client.store().root(), bound);
    mnemo_server::serve(listener, client, options, shutdown_signal(stop_local))
        .await
        .context("the server stopped")?;
    if let Some(llm) = local {
        llm.stop().await;
    }
    info!("stopped");
    Ok(())
}

/// The request body limit in bytes: `--max-body-mib` brought within 1 to [`MAX_BODY_MIB`],
/// with a warning when it was not there. 0 would refuse every body, and a huge value would
/// overflow into a small limit (2^44 MiB is 2^64 bytes, which wraps to 0).
fn max_body_bytes(mib: usize) -> usize {
    let clamped = mib.clamp(1, MAX_BODY_MIB);
    if clamped != mib {
        warn!("--max-body-mib {mib} is outside 1 to {MAX_BODY_MIB}; using {clamped}");
    }
    clamped << 20
}

/// Starts the local LLM when no upstream is configured (and `local` allows it), pointing
/// `config` at it; returns it (to stop later) and a label for the upstream.
pub async fn start_upstream(
    config: &mut mnemo_core::Config,
    local: bool,
) -> Result<(Option<LocalLlm>, String), Failure> {
    let llm = match (&config.openai_base_url, local) {
        (None, true) => {
            let paths = config.model_paths();
            let mut options =
                LocalLlmOptions::new(paths.python, paths.local_llm_model, LOCAL_LLM_ALIAS);
            options.threads = config.local_llm_threads;
            eprintln!("starting the local LLM ({LOCAL_LLM_ALIAS}) ...");
            let llm = LocalLlm::start(&options).await.map_err(|e| Failure {
                error: anyhow!(e),
                code: 3,
            })?;
            config.openai_base_url = Some(llm.base_url().to_owned());
            config.llm_model = LOCAL_LLM_ALIAS.to_owned();
            // The local LLM answers to any model name, and its slot is the window of every
            // request, whatever name it gives.
            let window = local_window(llm.base_url(), &options).await;
            config
                .context
                .windows
                .entry(mnemo_engine::EVERY_MODEL.to_owned())
                .or_insert(window);
            Some(llm)
        }
        _ => None,
    };
    let label = match (&llm, &config.openai_base_url) {
        (Some(_), _) => format!("local LLM {LOCAL_LLM_ALIAS}"),
        (None, Some(url)) => url.clone(),
        (None, None) => "none".into(),
    };
    Ok((llm, label))
}

/// The context window of one request to the local LLM: what its server says a slot holds,
/// else its context size shared between its parallel slots.
async fn local_window(base_url: &str, options: &LocalLlmOptions) -> u64 {
    let fallback = (options.ctx_size / options.parallel.max(1)) as u64;
    let client = mnemo_llm::LlmConfig::new(base_url, LOCAL_LLM_ALIAS).and_then(LlmClient::new);
    match client {
        Ok(client) => match client.slot_context_size().await {
            Ok(tokens) => tokens,
            Err(e) => {
                warn!("cannot ask the local LLM its context size ({e}); assuming {fallback}");
                fallback
            }
        },
        Err(e) => {
            warn!("cannot ask the local LLM its context size ({e}); assuming {fallback}");
            fallback
        }
    }
}

fn print_banner(
    address: SocketAddr,
    store: &std::path::Path,
    upstream: &str,
    model: &str,
    auth: &Auth,
) {
    println!("mnemo listening on http://{address}");
    println!("  store     {}", store.display());
    println!("  upstream  {upstream}");
    println!("  API       http://{address}/openapi.json");
    println!("  web view  http://{address}/");
    let bearer = if auth.is_required() {
        let entries: Vec<&str> = auth.entries().collect();
        println!("  auth      bearer tokens: {}", entries.join(", "));
        "-H 'authorization: Bearer <token>' "
    } else {
        println!("  auth      none (loopback only)");
        ""
    };
    println!();
    println!("Try it:");
    println!(
        r#"  curl -s http://{address}/v1/chat/completions -H 'content-type: application/json' {bearer}\
    -d '{{"model": "{model}", "memory_id": "demo", "messages": [{{"role": "user", "content": "My wife is Anne and I dislike pizza."}}]}}'"#
    );
}

/// Ctrl-C or SIGTERM. A second one exits at once, after asking the local LLM (when mnemo
/// started one) to stop: an immediate exit skips the handle's own clean-up.
///
/// The handlers are installed here, before the future is first polled: the server polls it
/// from a task of its own, and a signal that came between the first answer and that task's
/// first turn would otherwise end the process with the default action.
pub fn shutdown_signal(
    stop_local: Option<impl Fn() + Send + 'static>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut signals = Signals::install();
    async move {
        signals.next().await;
        eprintln!(
            "shutting down: finishing requests and queued memory writes (press Ctrl-C again to stop at once; queued writes resume at the next start) ..."
        );
        // A person who asks twice means it: queued passes are journaled, so nothing is lost.
        tokio::spawn(async move {
            signals.next().await;
            eprintln!("stopping at once; queued memory writes resume at the next start");
            if let Some(stop) = stop_local {
                stop();
            }
            std::process::exit(130);
        });
    }
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made.
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    #[cfg(not(unix))]
    fn install() -> Self {
        Self {}
    }

    #[cfg(unix)]
    async fn next(&mut self) {
        async fn one(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = one(&mut self.interrupt) => {},
            _ = one(&mut self.terminate) => {},
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
