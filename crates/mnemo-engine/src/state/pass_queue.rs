//! The write path's queue as state: the journal of passes in `<memory_path>/pending/`, the
//! slots for passes' LLM work, each conversation's waiting passes and the room chats wait
//! for. How passes are queued, run and resumed is in [`crate::write::queue`].

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mnemo_core::ConversationId;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::error::EngineError;

pub use mnemo_store::layout::PENDING_DIR;
/// Write-path passes running at once; the others wait their turn on disk.
pub const MAX_RUNNING_PASSES: usize = 2;
/// Passes one conversation may have waiting (besides the one running) before a chat that
/// would queue another waits for room: an agent that chats faster than its turns are learnt
/// is slowed to the write path's pace instead of leaving an ever longer backlog.
pub const MAX_WAITING_PER_CONVERSATION: usize = 8;
/// Passes waiting in all, over every conversation, before chats wait for room.
pub const MAX_WAITING: usize = 128;
/// The longest a chat waits for room. Past it the chat goes on and its pass waits in the
/// journal like the others: a write path stalled on a silent LLM must not stall chats for
/// as long.
pub const MAX_ROOM_WAIT: Duration = Duration::from_secs(30);
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

/// A pass waiting for its conversation's worker.
pub(crate) struct QueuedPass {
    pub(crate) conversation: ConversationId,
    pub(crate) held: HeldPass,
}

/// Where a waiting pass is kept.
pub(crate) enum HeldPass {
    /// In its journal entry only, read back when its turn comes: a backlog costs memory for
    /// a path per pass, not for every answer it carries.
    Journaled(PathBuf),
    /// In memory, when it could not be journaled.
    Unjournaled(PendingPass),
}

/// The queue's state in the engine.
pub(crate) struct PassQueue {
    pub(crate) dir: PathBuf,
    /// Slots for passes' LLM work, taken after the conversation's lock (see
    /// `MemoryClient::learn_from_turn`), so a pass waiting for its conversation does not
    /// hold a slot another conversation could use.
    pub running: Arc<Semaphore>,
    /// Cancelled when a shutdown's grace period is over.
    pub(crate) cancel: CancellationToken,
    /// Entries of passes that failed in this process, to run again once what failed
    /// them (a lost index server, a full disk) is back.
    pub(crate) failed: Mutex<Vec<PathBuf>>,
    /// Whether a watch for room on a full disk is running.
    pub(crate) awaiting_room: AtomicBool,
    /// Each conversation with a worker, and the passes waiting for it in order. A
    /// conversation is here exactly while its worker runs.
    pub(crate) waiting: Mutex<HashMap<ConversationId, VecDeque<QueuedPass>>>,
    /// Told each time a waiting pass starts or a worker ends, for chats waiting for room.
    pub(crate) room: Notify,
    /// Orders the journal's entries of one millisecond.
    pub(crate) journaled: AtomicU64,
}

impl PassQueue {
    pub fn new(root: &Path) -> Self {
        Self {
            dir: root.join(PENDING_DIR),
            running: Arc::new(Semaphore::new(MAX_RUNNING_PASSES)),
            cancel: CancellationToken::new(),
            failed: Mutex::default(),
            awaiting_room: AtomicBool::new(false),
            waiting: Mutex::default(),
            room: Notify::new(),
            journaled: AtomicU64::new(0),
        }
    }

    /// The waiting passes; a panic elsewhere while it was held leaves it usable.
    pub(crate) fn waiting(&self) -> MutexGuard<'_, HashMap<ConversationId, VecDeque<QueuedPass>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a chat in `conversation` may queue another pass now (see
    /// [`MAX_WAITING_PER_CONVERSATION`], [`MAX_WAITING`]).
    pub(crate) fn has_room(&self, conversation: &ConversationId) -> bool {
        let waiting = self.waiting();
        let own = waiting.get(conversation).map_or(0, VecDeque::len);
        let all: usize = waiting.values().map(VecDeque::len).sum();
        own < MAX_WAITING_PER_CONVERSATION && all < MAX_WAITING
    }

    /// Writes `pass` to the journal; returns its entry's path.
    pub(crate) fn journal(&self, pass: &PendingPass) -> Result<PathBuf, EngineError> {
        mnemo_store::untrusted::check_real_folders(
            self.dir.parent().unwrap_or(&self.dir),
            &self.dir,
        )
        .map_err(EngineError::Task)?;
        // Names sort in the order passes were queued, which resuming keeps.
        let name = format!(
            "{:013}-{:08}-{}.json",
            chrono::Utc::now().timestamp_millis(),
            self.journaled.fetch_add(1, Ordering::Relaxed),
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

    /// The entries left by an earlier process, oldest first (none when `pending/` is not a
    /// real folder: a link there would make resuming rename files elsewhere).
    pub(crate) fn left_over(&self) -> Vec<PathBuf> {
        let root = self.dir.parent().unwrap_or(&self.dir);
        if let Err(e) = mnemo_store::untrusted::check_real_folders(root, &self.dir) {
            warn!("not resuming queued passes: {e}");
            return Vec::new();
        }
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

pub(crate) fn read_entry(path: &Path) -> Result<PendingPass, String> {
    let bytes =
        mnemo_store::untrusted::read_regular(path, MAX_ENTRY_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not a queued pass: {e}"))
}
