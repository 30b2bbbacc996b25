//! The write path's queue: every pass a chat turn asks for is journaled on disk before it
//! runs, and its entry removed when it is done.
//!
//! A pass can take minutes (three LLM calls with a slow or silent upstream), so a shutdown
//! cannot wait for every queued one: it waits a grace period, and what is left stays in
//! `<memory_path>/pending/` for the next `mnemo serve` to resume. The entry carries the
//! assistant's answer until it is stored, so a pass cut short loses nothing; a pass cut in
//! the middle and run again can at worst add a fact twice, never drop one.
//!
//! Passes run at most [`MAX_RUNNING_PASSES`] at a time. A waiting pass holds only its
//! entry's path in memory (the entry is read when it starts), so a burst of turns costs disk,
//! not memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemo_core::ConversationId;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::client::blocking;
use crate::{EngineError, MemoryClient};

pub use mnemo_store::layout::PENDING_DIR;
/// Write-path passes running at once; the others wait their turn on disk.
pub const MAX_RUNNING_PASSES: usize = 2;
/// The largest entry read back (an answer is capped far below this upstream).
const MAX_ENTRY_BYTES: u64 = 32 << 20;

/// One queued pass, as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PendingPass {
    pub conversation: ConversationId,
    /// The user's turn the pass learns from (store-relative), already on disk.
    pub user_turn: Option<PathBuf>,
    /// The assistant's answer, until it is stored as a turn.
    pub assistant_text: Option<String>,
    /// Whether that answer was cut short.
    pub incomplete: bool,
}

/// The queue's state in the engine.
pub(crate) struct PassQueue {
    dir: PathBuf,
    running: Arc<Semaphore>,
}

impl PassQueue {
    pub fn new(root: &Path) -> Self {
        Self {
            dir: root.join(PENDING_DIR),
            running: Arc::new(Semaphore::new(MAX_RUNNING_PASSES)),
        }
    }

    /// Writes `pass` to the journal; returns its entry's path.
    fn journal(&self, pass: &PendingPass) -> Result<PathBuf, EngineError> {
        mnemo_store::untrusted::check_real_folders(
            self.dir.parent().unwrap_or(&self.dir),
            &self.dir,
        )
        .map_err(EngineError::Task)?;
        let name = format!(
            "{:013}-{}.json",
            chrono::Utc::now().timestamp_millis(),
            uuid::Uuid::new_v4().simple()
        );
        let path = self.dir.join(name);
        let bytes = serde_json::to_vec(pass).map_err(|e| EngineError::Task(e.to_string()))?;
        mnemo_store::atomic::write_atomic(&path, &bytes).map_err(|source| EngineError::Io {
            action: "cannot write",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// The entries left by an earlier process, oldest first.
    fn left_over(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        paths
    }
}

fn read_entry(path: &Path) -> Result<PendingPass, String> {
    let bytes =
        mnemo_store::untrusted::read_regular(path, MAX_ENTRY_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not a queued pass: {e}"))
}

impl MemoryClient {
    /// Queues the write path for a finished turn: journaled now, run when a slot is free.
    pub(crate) fn queue_pass(&self, pass: PendingPass) {
        let client = self.clone();
        self.inner.background.spawn(async move {
            let queue = &client.inner.queue;
            let journaled = {
                let inner = client.inner.clone();
                let pass = pass.clone();
                blocking(move || inner.queue.journal(&pass)).await
            };
            match journaled {
                Ok(path) => client.run_pass(path).await,
                Err(e) => {
                    // Not journaled: run it anyway, it just cannot survive a restart.
                    warn!(conversation = %pass.conversation, "cannot journal a write-path pass ({e}); running it unjournaled");
                    let _slot = queue.running.clone().acquire_owned().await;
                    client.apply_pass(pass, None).await;
                }
            }
        });
    }

    /// Resumes the passes an earlier process left queued (at most once per start; `serve`
    /// calls it). Returns how many were found.
    pub fn resume_pending_passes(&self) -> usize {
        let left = self.inner.queue.left_over();
        if !left.is_empty() {
            info!(
                passes = left.len(),
                "resuming write-path passes left queued by the last run"
            );
        }
        for path in &left {
            let client = self.clone();
            let path = path.clone();
            self.inner
                .background
                .spawn(async move { client.run_pass(path).await });
        }
        left.len()
    }

    /// Write-path passes journaled and not yet done.
    pub fn pending_passes(&self) -> usize {
        self.inner.queue.left_over().len()
    }

    /// Runs the journaled pass at `path` once a slot is free, then removes its entry.
    async fn run_pass(&self, path: PathBuf) {
        let Ok(_slot) = self.inner.queue.running.clone().acquire_owned().await else {
            return;
        };
        let entry = {
            let path = path.clone();
            blocking(move || Ok(read_entry(&path))).await
        };
        match entry {
            Ok(Ok(pass)) => self.apply_pass(pass, Some(&path)).await,
            Ok(Err(why)) | Err(EngineError::Task(why)) => {
                warn!(entry = %path.display(), "skipping a queued pass: {why}");
                let _ = std::fs::rename(&path, path.with_extension("bad"));
            }
            Err(e) => warn!(entry = %path.display(), "skipping a queued pass: {e}"),
        }
    }

    /// The pass itself: the assistant's turn stored (and dropped from the entry), then the
    /// write path; the entry goes when it is done.
    async fn apply_pass(&self, mut pass: PendingPass, entry: Option<&Path>) {
        let conversation = pass.conversation.clone();
        let mut turns = usize::from(pass.user_turn.is_some());
        if let Some(text) = pass.assistant_text.take() {
            match self
                .store_assistant_turn(&conversation, text, pass.incomplete)
                .await
            {
                Ok(()) => turns += 1,
                Err(e) => {
                    warn!(conversation = %conversation, "cannot store the assistant's turn: {e}")
                }
            }
            if let Some(entry) = entry {
                // The answer is stored: a rerun must not store it again.
                if let Ok(bytes) = serde_json::to_vec(&pass) {
                    let _ = mnemo_store::atomic::write_atomic(entry, &bytes);
                }
            }
        }
        let user_turn = match &pass.user_turn {
            Some(relative) => match self.store().read(relative) {
                Ok(turn) => Some(turn),
                Err(e) => {
                    warn!(conversation = %conversation, "the user's turn is gone ({e}); learning from the answer only");
                    None
                }
            },
            None => None,
        };
        if let Err(e) = self
            .learn_from_turn(&conversation, user_turn.as_ref(), turns)
            .await
        {
            warn!(conversation = %conversation, "the write path failed: {e}");
        }
        if let Some(entry) = entry {
            if let Err(e) = std::fs::remove_file(entry) {
                warn!(entry = %entry.display(), "cannot remove a finished pass from the queue: {e}");
            }
        }
    }
}
