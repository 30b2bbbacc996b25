//! The write path's queue: every pass a chat turn asks for is journaled on disk before it
//! runs, and its entry removed when it is done.
//!
//! A pass can take minutes (three LLM calls with a slow or silent upstream), so a shutdown
//! cannot wait for every queued one: it waits a grace period, and what is left stays in
//! `<memory_path>/pending/` for the next `mnemo serve` to resume. The entry carries the
//! assistant's answer until it is stored, so a pass cut short loses nothing; a pass cut in
//! the middle and run again can at worst add a fact twice, never drop one.
//!
//! One conversation's passes run one after another, in the order their turns were queued
//! (a correction must not be learnt before what it corrects): each conversation with work
//! has one worker draining its passes. Across conversations, passes do their LLM work at
//! most [`MAX_RUNNING_PASSES`](crate::state::pass_queue::MAX_RUNNING_PASSES) at a time, a slot taken once the conversation's own lock is
//! held. When a shutdown's grace period is over, passes still
//! running or waiting are stopped and keep their entries; a pass that fails (the answer
//! cannot be stored, the write path errs) keeps its entry too, for the next start.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use mnemo_core::ConversationId;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::error::EngineError;
use crate::state::pass_queue::{read_entry, HeldPass, PendingPass, QueuedPass, MAX_ROOM_WAIT};
use crate::write::WriteWing;

impl WriteWing {
    /// Queues the write path for a finished turn. The entry is journaled before this
    /// returns (a short synchronous write: the caller is about to acknowledge the turn, and
    /// a crash right after must not lose its answer); the pass runs in the background, after
    /// the conversation's passes queued before it.
    pub(crate) fn queue_pass(&self, pass: PendingPass) {
        let conversation = pass.conversation.clone();
        let held = match self.engine.queue().journal(&pass) {
            Ok(path) => HeldPass::Journaled(path),
            Err(e) => {
                warn!(conversation = %conversation, "cannot journal a write-path pass ({e}); running it unjournaled");
                HeldPass::Unjournaled(pass)
            }
        };
        self.enqueue(QueuedPass { conversation, held });
    }

    /// Waits until `conversation` may queue another pass (its backlog and the server's
    /// under their bounds), or [`MAX_ROOM_WAIT`] at most. A chat that learns calls this
    /// before asking its model, so a server that takes turns faster than it learns from
    /// them slows its chats down rather than falling ever further behind.
    pub(crate) async fn wait_for_room(&self, conversation: &ConversationId) {
        let queue = self.engine.queue();
        let deadline = tokio::time::Instant::now() + MAX_ROOM_WAIT;
        loop {
            let room = queue.room.notified();
            tokio::pin!(room);
            // Registered before the check, so a pass starting in between is not missed.
            room.as_mut().enable();
            if queue.has_room(conversation) {
                return;
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                warn!(conversation = %conversation, "the write path is {} s behind; this chat goes on without waiting for it", MAX_ROOM_WAIT.as_secs());
                return;
            }
        }
    }

    pub(crate) fn resume_pending_passes(&self) -> usize {
        let left = self.engine.queue().left_over();
        if !left.is_empty() {
            info!(
                passes = left.len(),
                "resuming write-path passes left queued by the last run"
            );
        }
        self.run_journaled(left)
    }

    /// Runs again the passes that failed in this process (their entries kept), as
    /// [`resume_pending_passes`](Self::resume_pending_passes) does at start. Called once
    /// a lost index server answers again. Returns how many there were.
    pub(crate) fn rerun_failed_passes(&self) -> usize {
        let mut failed = match self.engine.queue().failed.lock() {
            Ok(mut failed) => std::mem::take(&mut *failed),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        failed.sort();
        self.run_journaled(failed)
    }

    /// Reads the journal's entries at `paths` (oldest first) in the background and queues
    /// their passes in that order. Returns how many there are.
    fn run_journaled(&self, paths: Vec<PathBuf>) -> usize {
        let count = paths.len();
        if count == 0 {
            return 0;
        }
        let client = self.clone();
        self.engine.background().spawn(async move {
            for path in paths {
                if let Some(pass) = client.read_journaled(&path).await {
                    client.enqueue(QueuedPass {
                        conversation: pass.conversation,
                        held: HeldPass::Journaled(path),
                    });
                }
            }
        });
        count
    }

    /// The pass journaled at `path`; an entry that is not one is set aside as `.bad`.
    async fn read_journaled(&self, path: &Path) -> Option<PendingPass> {
        let read = {
            let path = path.to_owned();
            blocking(move || Ok(read_entry(&path))).await
        };
        match read {
            Ok(Ok(pass)) => Some(pass),
            Ok(Err(why)) => {
                warn!(entry = %path.display(), "skipping a queued pass: {why}");
                let _ = std::fs::rename(path, path.with_extension("bad"));
                None
            }
            Err(e) => {
                warn!(entry = %path.display(), "cannot read a queued pass now: {e}");
                None
            }
        }
    }

    /// Puts `queued` behind its conversation's waiting passes, starting the conversation's
    /// worker when it has none.
    fn enqueue(&self, queued: QueuedPass) {
        let conversation = queued.conversation.clone();
        {
            let mut waiting = self.engine.queue().waiting();
            if let Some(passes) = waiting.get_mut(&conversation) {
                passes.push_back(queued);
                return;
            }
            waiting.insert(conversation.clone(), VecDeque::from([queued]));
        }
        let client = self.clone();
        self.engine
            .background()
            .spawn(async move { client.drain(conversation).await });
    }

    /// A conversation's worker: runs its waiting passes one by one until none is left. Once
    /// a shutdown's grace period is over it stops, the passes left keeping their entries.
    async fn drain(&self, conversation: ConversationId) {
        loop {
            let next = {
                let mut waiting = self.engine.queue().waiting();
                let next = waiting.get_mut(&conversation).and_then(VecDeque::pop_front);
                if next.is_none() || self.engine.queue().cancel.is_cancelled() {
                    waiting.remove(&conversation);
                }
                next
            };
            self.engine.queue().room.notify_waiters();
            match next {
                Some(queued) if !self.engine.queue().cancel.is_cancelled() => {
                    self.run_pass(queued).await;
                }
                _ => return,
            }
        }
    }

    pub(crate) fn pending_passes(&self) -> usize {
        self.engine.queue().left_over().len()
    }

    pub(crate) fn stop_background_passes(&self) {
        self.engine.queue().cancel.cancel();
    }

    /// Runs a queued pass, then removes its entry; a pass stopped at shutdown or failed
    /// keeps it.
    async fn run_pass(&self, QueuedPass { held, .. }: QueuedPass) {
        let (entry, pass) = match held {
            HeldPass::Journaled(path) => match self.read_journaled(&path).await {
                Some(pass) => (Some(path), pass),
                None => return,
            },
            HeldPass::Unjournaled(pass) => (None, pass),
        };
        let cancelled = self.engine.queue().cancel.clone();
        let end = tokio::select! {
            _ = cancelled.cancelled() => PassEnd::Stopped,
            end = self.apply_pass(pass, entry.as_deref()) => end,
        };
        let Some(path) = entry else { return };
        let run_again = match end {
            PassEnd::Done => {
                if let Err(e) = std::fs::remove_file(&path) {
                    warn!(entry = %path.display(), "cannot remove a finished pass from the queue: {e}");
                }
                return;
            }
            PassEnd::Stopped => false,
            PassEnd::NoRoom => true,
            // Only a recovery of the index runs these again before the next start.
            PassEnd::Failed => self.engine.recovery().get().is_some(),
        };
        if run_again && !cancelled.is_cancelled() {
            if let Ok(mut failed) = self.engine.queue().failed.lock() {
                failed.push(path);
            }
            // After the entry is listed, so a watch ending meanwhile cannot miss it.
            if matches!(end, PassEnd::NoRoom) {
                self.rerun_when_room_returns();
            }
        }
    }

    /// Runs the failed passes again once the store's disk has room, checking every
    /// [`ROOM_CHECK`]; one watch at a time, until the engine shuts down.
    fn rerun_when_room_returns(&self) {
        let queue = self.engine.queue();
        if queue.awaiting_room.swap(true, Ordering::AcqRel) {
            return;
        }
        warn!("the store's disk is full: failed write-path passes run again once it has room");
        let wing = self.clone();
        self.engine.background().spawn(async move {
            let cancelled = wing.engine.queue().cancel.clone();
            loop {
                tokio::select! {
                    _ = cancelled.cancelled() => return,
                    _ = tokio::time::sleep(ROOM_CHECK) => {}
                }
                let free = wing
                    .engine
                    .blocking(|engine| Ok(engine.store().free_space()?))
                    .await;
                if free.is_ok_and(|free| !free.is_full()) {
                    wing.engine
                        .queue()
                        .awaiting_room
                        .store(false, Ordering::Release);
                    let passes = wing.rerun_failed_passes();
                    info!(
                        passes,
                        "the store's disk has room again: failed write-path passes run again"
                    );
                    return;
                }
            }
        });
    }

    /// The pass with its conversation's key upkeep left to its end (see
    /// [`crate::state::deferred_keys`]).
    async fn apply_pass(&self, pass: PendingPass, entry: Option<&Path>) -> PassEnd {
        let deferral = KeysDeferred::begin(self, &pass.conversation);
        let done = self.apply_pass_writes(pass, entry).await;
        drop(deferral);
        if let Err(e) = self
            .engine
            .blocking(|engine| engine.refresh_stale_keys())
            .await
        {
            warn!("the lexical keys of the pass's turns are not rebuilt yet ({e}); the next write rebuilds them");
        }
        done
    }

    /// The pass itself: the assistant's turn stored (then dropped from the entry), then the
    /// write path. Anything but [`PassEnd::Done`] keeps the entry for a later run.
    async fn apply_pass_writes(&self, mut pass: PendingPass, entry: Option<&Path>) -> PassEnd {
        let conversation = pass.conversation.clone();
        let mut turns = usize::from(pass.user_turn.is_some());
        if let Some(text) = pass.assistant_text.clone() {
            if let Err(e) = self
                .write_path()
                .store_assistant_turn(&conversation, text, pass.incomplete)
                .await
            {
                warn!(conversation = %conversation, "cannot store the assistant's turn now ({e}); it stays queued");
                return PassEnd::failed(&e);
            }
            turns += 1;
            pass.assistant_text = None;
            if let Some(entry) = entry {
                // The answer is stored: a rerun must not store it again.
                let rewritten = serde_json::to_vec(&pass)
                    .map_err(std::io::Error::other)
                    .and_then(|bytes| mnemo_store::atomic::write_atomic(entry, &bytes));
                if let Err(e) = rewritten {
                    warn!(entry = %entry.display(), "cannot update a queued pass ({e}); a rerun may store its answer twice");
                }
            }
        }
        let user_turn = match &pass.user_turn {
            Some(relative) => match self.engine.store().read(relative) {
                Ok(turn) => Some(turn),
                Err(e) => {
                    warn!(conversation = %conversation, "the user's turn cannot be read ({e}); learning from the answer only");
                    None
                }
            },
            None => None,
        };
        match self
            .write_path()
            .learn_from_turn(&conversation, user_turn.as_ref(), turns)
            .await
        {
            Ok(_) => PassEnd::Done,
            Err(e) => {
                warn!(conversation = %conversation, "the write path failed ({e}); the pass stays queued");
                PassEnd::failed(&e)
            }
        }
    }
}

/// How a pass ended.
enum PassEnd {
    Done,
    /// Stopped by a shutdown.
    Stopped,
    /// Failed for lack of room on the store's disk: run again once there is room.
    NoRoom,
    /// Failed otherwise (run again after a lost index server answers again, or at the next
    /// start).
    Failed,
}

impl PassEnd {
    fn failed(error: &EngineError) -> Self {
        match error.is_out_of_space() {
            true => Self::NoRoom,
            false => Self::Failed,
        }
    }
}

/// How often a full disk is looked at again while passes wait for room.
const ROOM_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// A conversation's key upkeep deferred while it lives; ended however the pass ends (a
/// shutdown drops a pass midway).
struct KeysDeferred<'w> {
    wing: &'w WriteWing,
    conversation: ConversationId,
}

impl<'w> KeysDeferred<'w> {
    fn begin(wing: &'w WriteWing, conversation: &ConversationId) -> Self {
        wing.engine.deferred_keys().begin(conversation);
        Self {
            wing,
            conversation: conversation.clone(),
        }
    }
}

impl Drop for KeysDeferred<'_> {
    fn drop(&mut self) {
        self.wing.engine.deferred_keys().end(&self.conversation);
    }
}
