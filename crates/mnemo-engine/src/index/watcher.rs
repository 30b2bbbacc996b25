//! Following hand edits: a file-system watcher that re-syncs the paths it sees change.
//!
//! Events under `entries/` are collected until the tree has been quiet for [`DEBOUNCE`] (or
//! for at most [`MAX_BATCH_WAIT`] during a long burst, such as a `git checkout` touching
//! hundreds of files), then handed over as one [`FileChanges`] batch. The engine syncs each
//! path on its own ([`crate::index::sync::Indexer::sync_path`]); events on folders, or a notice that
//! the kernel dropped events, ask for a full sync instead, which is cheap when little changed.
//! Temporary, hidden and `deleted/` files are ignored by the store's layout rules; the
//! engine's own writes are already in the snapshot with the same hash, so they are not
//! indexed twice. This module knows nothing of the engine: it watches a folder and calls back.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::ModifyKind;
use notify::{Event, EventKind, RecursiveMode, Watcher as _};
use tracing::{debug, warn};

use mnemo_store::atomic::is_temporary_name;

use crate::error::EngineError;

/// How long the tree must be quiet before a batch of changes is handed over.
pub const DEBOUNCE: Duration = Duration::from_millis(100);
/// The longest a batch waits during a burst of changes.
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(1);

/// A running watcher. Dropping it stops the watch and waits for the thread to finish.
pub struct WatcherHandle {
    watcher: Option<notify::RecommendedWatcher>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for WatcherHandle {
    fn drop(&mut self) {
        // Dropping the watcher closes the channel, which ends the thread.
        self.watcher.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What changed under the watched folder since the last batch.
#[derive(Debug, Default)]
pub struct FileChanges {
    /// Paths that were created, changed, moved or removed.
    pub paths: BTreeSet<PathBuf>,
    /// Something the paths do not tell (a folder moved, events dropped): sync everything.
    pub rescan: bool,
}

impl FileChanges {
    fn add(&mut self, event: notify::Result<Event>) {
        match event {
            // Reads (including the engine's own, while it hashes files) and metadata changes
            // leave content as it was; reacting to them would make every sync trigger another.
            Ok(Event {
                kind: EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)),
                ..
            }) => {}
            Ok(event) => {
                if event.need_rescan() || event.kind.is_other() {
                    self.rescan = true;
                }
                for path in event.paths {
                    // A folder appearing, moving or vanishing may carry many files with it. A
                    // vanished path's kind is unknown: anything not named like a memory or an
                    // editor's temporary file may have been a folder.
                    let name = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or_default();
                    let maybe_folder = !name.ends_with(".md") && !is_temporary_name(name);
                    if path.is_dir() || maybe_folder && !path.exists() {
                        self.rescan = true;
                    }
                    self.paths.insert(path);
                }
            }
            Err(e) => {
                warn!("file watcher error: {e}; re-syncing everything");
                self.rescan = true;
            }
        }
    }
}

/// Watches `folder` recursively and calls `apply` with each batch of changes, on a thread of
/// its own, until the handle is dropped.
pub fn start(
    folder: &std::path::Path,
    apply: impl Fn(FileChanges) + Send + 'static,
) -> Result<WatcherHandle, EngineError> {
    let entries = folder.to_owned();
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .map_err(|e| watch_error(&entries, e))?;
    watcher
        .watch(&entries, RecursiveMode::Recursive)
        .map_err(|e| watch_error(&entries, e))?;
    let thread = std::thread::Builder::new()
        .name("mnemo-watcher".into())
        .spawn(move || run(rx, apply))
        .map_err(|source| EngineError::Io {
            action: "cannot start the watcher thread for",
            path: entries.clone(),
            source,
        })?;
    Ok(WatcherHandle {
        watcher: Some(watcher),
        thread: Some(thread),
    })
}

fn watch_error(path: &std::path::Path, e: notify::Error) -> EngineError {
    EngineError::Io {
        action: "cannot watch",
        path: path.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

fn run(rx: mpsc::Receiver<notify::Result<Event>>, apply: impl Fn(FileChanges)) {
    while let Ok(first) = rx.recv() {
        let mut batch = FileChanges::default();
        batch.add(first);
        let started = Instant::now();
        loop {
            let left = MAX_BATCH_WAIT.saturating_sub(started.elapsed());
            match rx.recv_timeout(DEBOUNCE.min(left)) {
                Ok(event) => batch.add(event),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if left.is_zero() {
                break;
            }
        }
        debug!(
            paths = batch.paths.len(),
            rescan = batch.rescan,
            "applying file changes"
        );
        apply(batch);
    }
}
