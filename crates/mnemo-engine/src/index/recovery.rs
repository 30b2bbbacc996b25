//! Keeping the index in step across a lost index server.
//!
//! With the index on a Qdrant server, a write can reach its memory file and not the index
//! (the server is down or unreachable). The file is the truth, so nothing acknowledged to a
//! user is lost, but the index must learn of it. [`WatchedIndex`] notes every index call that
//! found the server unavailable; [`Recovery`] is a thread that, while the index is marked
//! lost, re-syncs it with the files (the start-up sync: what the index misses is embedded
//! again, what it holds for deleted files is removed) every [`RETRY_INTERVAL`] until a sync
//! succeeds, then runs again the write-path passes that failed meanwhile (the facts of the
//! turns chatted while the server was away).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use mnemo_core::MemoryId;
use mnemo_index::{Filter, Hit, IndexError, Point, Query, SparseVector, VectorIndex};
use tracing::warn;

/// How often a lost index is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// An index whose unavailability is noted, so it can be re-synced once it answers again.
pub(crate) struct WatchedIndex {
    inner: Arc<dyn VectorIndex>,
    lost: AtomicBool,
}

impl WatchedIndex {
    pub(crate) fn new(inner: Arc<dyn VectorIndex>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            lost: AtomicBool::new(false),
        })
    }

    /// Whether a call found the index unavailable since the last successful re-sync.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn note<T>(&self, result: Result<T, IndexError>) -> Result<T, IndexError> {
        if let Err(e @ IndexError::Unavailable { .. }) = &result {
            // Said once per outage, not once per request.
            if !self.lost.swap(true, Ordering::SeqCst) {
                warn!(
                    "{e}; memories are still written to their files, and indexed once it \
                     answers again (tried every {RETRY_INTERVAL:?})"
                );
            }
        }
        result
    }
}

impl VectorIndex for WatchedIndex {
    fn flush(&self) -> Result<(), IndexError> {
        self.note(self.inner.flush())
    }

    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError> {
        self.note(self.inner.upsert(points))
    }

    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError> {
        self.note(self.inner.delete(ids))
    }

    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError> {
        self.note(self.inner.set_lexical(updates))
    }

    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError> {
        self.note(self.inner.query(query))
    }

    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError> {
        self.note(self.inner.retrieve(ids, with_vectors))
    }

    fn count(&self, filter: &Filter) -> Result<usize, IndexError> {
        self.note(self.inner.count(filter))
    }

    fn ids(&self) -> Result<Vec<MemoryId>, IndexError> {
        self.note(self.inner.ids())
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
}

/// How one attempt to bring a lost index back went.
pub(crate) enum Attempt {
    /// The index is in step with the files again.
    Recovered,
    /// The index still does not answer: tried again after [`RETRY_INTERVAL`].
    Failed,
    /// The engine is gone: the thread ends.
    EngineGone,
}

/// One attempt, given by the engine: re-sync the index with the files and, when that works,
/// run again the write-path passes that failed meanwhile. A callback rather than the engine
/// itself, so that this thread holds nothing that keeps the engine open.
pub(crate) type Resync = Box<dyn Fn() -> Attempt + Send>;

/// The thread that re-syncs a lost index; dropping it stops the thread.
pub(crate) struct Recovery {
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recovery {
    /// Starts watching `watched`, running `resync` while it is lost. `None`, with a warning,
    /// when no thread can be started: a lost index is then re-synced on the next start.
    pub(crate) fn spawn(resync: Resync, watched: Arc<WatchedIndex>) -> Option<Self> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("mnemo-index-recovery".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(RETRY_INTERVAL) {
                    if !watched.is_lost() {
                        continue;
                    }
                    // Cleared first: a call failing during the sync marks it lost again.
                    watched.lost.store(false, Ordering::SeqCst);
                    match resync() {
                        Attempt::Recovered => {}
                        Attempt::Failed => watched.lost.store(true, Ordering::SeqCst),
                        Attempt::EngineGone => return,
                    }
                }
            });
        match spawned {
            Ok(thread) => Some(Self {
                stop: Some(stop),
                thread: Some(thread),
            }),
            Err(e) => {
                warn!(
                    "no index recovery thread ({e}); a lost index is re-synced on the next start"
                );
                None
            }
        }
    }
}

impl Drop for Recovery {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The engine's last handle may be the one the thread itself holds during a sync;
            // a thread cannot wait for itself.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}
