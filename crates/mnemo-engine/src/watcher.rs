//! Following hand edits: a file-system watcher that re-syncs the paths it sees change.
//!
//! Events under `entries/` are collected until the tree has been quiet for [`DEBOUNCE`] (or
//! for at most [`MAX_BATCH_WAIT`] during a long burst, such as a `git checkout` touching
//! hundreds of files), then each path is synced on its own ([`sync::sync_path`]). Events on
//! folders, or a notice that the kernel dropped events, trigger a full sync instead, which is
//! cheap when little changed. Temporary, hidden and `deleted/` files are ignored by the store's
//! layout rules; the engine's own writes are already in the snapshot with the same hash, so
//! they are not indexed twice.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::ModifyKind;
use notify::{Event, EventKind, RecursiveMode, Watcher as _};
use tracing::{debug, warn};

use mnemo_store::atomic::is_temporary_name;

use crate::client::Inner;
use crate::EngineError;

pub const DEBOUNCE: Duration = Duration::from_millis(100);
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

#[derive(Default)]
struct Batch {
    paths: BTreeSet<PathBuf>,
    rescan: bool,
}

impl Batch {
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

pub(crate) fn start(inner: Arc<Inner>) -> Result<WatcherHandle, EngineError> {
    let entries = inner.store.root().join(mnemo_store::layout::ENTRIES_DIR);
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
        .spawn(move || run(inner, rx))
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

fn run(inner: Arc<Inner>, rx: mpsc::Receiver<notify::Result<Event>>) {
    while let Ok(first) = rx.recv() {
        let mut batch = Batch::default();
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
        if let Err(e) = inner.apply_file_changes(&batch.paths, batch.rescan) {
            warn!("could not apply file changes to the index: {e}");
        }
    }
}
