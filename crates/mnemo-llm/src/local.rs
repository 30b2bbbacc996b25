//! The local LLM: llama.cpp's OpenAI-compatible server (through the `xllamacpp` Python
//! package that set-up installs), run as a child process on the loopback interface.
//!
//! The launcher (`scripts/local_llm.py`, built into this crate) prints `ready <url>` on stdout
//! once the model answers; that is the only thing read from stdout. Its stderr (llama.cpp's
//! log) is drained into `tracing` at debug level, and its last lines explain a failed start.
//! The child dies with its parent (the launcher watches for that) and with [`LocalLlm`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tracing::{debug, info};

use crate::error::LlmError;

const LAUNCHER: &str = include_str!("../../../scripts/local_llm.py");
/// Lines of the child's log kept to explain a failed start.
const KEPT_LINES: usize = 20;

/// How to run the local LLM.
#[derive(Debug, Clone)]
pub struct LocalLlmOptions {
    /// The Python of set-up's virtual environment (`models/python/bin/python`).
    pub python: PathBuf,
    /// The GGUF model file.
    pub model: PathBuf,
    /// Name the model is served under (what requests put in `model`).
    pub alias: String,
    /// CPU threads llama.cpp may use.
    pub threads: usize,
    /// Context size in tokens (llama.cpp's `--ctx-size`): a prompt and its reply must fit.
    pub ctx_size: usize,
    /// Requests served at once.
    pub parallel: usize,
    /// How long loading may take.
    pub startup_timeout: Duration,
    /// Also serve `/v1/embeddings` (the model's hidden states, mean-pooled): an embeddings
    /// endpoint for tests of `embedding_provider = "openai"` with no other server.
    pub embeddings: bool,
}

impl LocalLlmOptions {
    /// Options to serve `model` under `alias` with set-up's `python`; the rest default to 2
    /// threads, a 4096-token context, 2 parallel requests and 120 s to load.
    pub fn new(python: impl Into<PathBuf>, model: impl Into<PathBuf>, alias: &str) -> Self {
        Self {
            python: python.into(),
            model: model.into(),
            alias: alias.to_owned(),
            threads: 2,
            ctx_size: 4096,
            parallel: 2,
            startup_timeout: Duration::from_secs(120),
            embeddings: false,
        }
    }
}

/// A running local LLM; stopped when dropped.
pub struct LocalLlm {
    child: Child,
    base_url: String,
}

impl LocalLlm {
    /// Starts the server and waits until it answers.
    pub async fn start(options: &LocalLlmOptions) -> Result<Self, LlmError> {
        for (path, what) in [
            (&options.python, "its Python runtime"),
            (&options.model, "its model"),
        ] {
            if !path.is_file() {
                return Err(LlmError::InvalidConfig(format!(
                    "the local LLM is not installed: {what} is missing at {}; run `scripts/setup llm`",
                    path.display()
                )));
            }
        }
        let mut child = Command::new(&options.python)
            .arg("-c")
            .arg(LAUNCHER)
            .arg("--model")
            .arg(&options.model)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--threads", &options.threads.max(1).to_string()])
            .args(["--ctx-size", &options.ctx_size.to_string()])
            .args(["--parallel", &options.parallel.max(1).to_string()])
            .args(["--alias", &options.alias])
            .args(options.embeddings.then_some("--embeddings"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                LlmError::InvalidConfig(format!(
                    "cannot start the local LLM with {}: {e}",
                    options.python.display()
                ))
            })?;
        let log = drain_stderr(&mut child);
        let stdout = child.stdout.take().ok_or_else(|| {
            LlmError::InvalidConfig("the local LLM's stdout is not readable".into())
        })?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(options.startup_timeout, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("ready ") {
                    return Some(url.trim().to_owned());
                }
            }
            None
        })
        .await;
        let failure = |why: &str| {
            let log = log.lock().map(|l| Vec::from(l.clone())).unwrap_or_default();
            LlmError::InvalidConfig(format!(
                "the local LLM did not start ({why}): {}",
                log.join(" | ")
            ))
        };
        match ready {
            Ok(Some(base_url)) => {
                info!(%base_url, model = %options.model.display(), "local LLM ready");
                Ok(Self { child, base_url })
            }
            Ok(None) => Err(failure("it exited")),
            Err(_) => Err(failure(&format!(
                "not ready after {} s",
                options.startup_timeout.as_secs()
            ))),
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// A function that asks the server to stop (SIGTERM) without waiting: for a process
    /// about to exit at once, which skips the kill-on-drop of this handle.
    pub fn stopper(&self) -> impl Fn() + Send + Sync + 'static {
        let pid = self.child.id();
        move || {
            if let Some(pid) = pid {
                // SAFETY: `kill` only sends a signal to our own child, identified by its pid.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGTERM);
                }
            }
        }
    }

    /// Asks the server to stop (SIGTERM) and waits for it, killing it after 10 s.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: `kill` only sends a signal to our own child, identified by its pid.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Reads the child's stderr to the end (so it can never block on a full pipe), logging it and
/// keeping the last lines.
fn drain_stderr(child: &mut Child) -> Arc<Mutex<VecDeque<String>>> {
    let kept = Arc::new(Mutex::new(VecDeque::new()));
    if let Some(stderr) = child.stderr.take() {
        let kept = kept.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                debug!(target: "local_llm", "{line}");
                if let Ok(mut kept) = kept.lock() {
                    if kept.len() == KEPT_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
        });
    }
    kept
}
