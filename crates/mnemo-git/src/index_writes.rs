//! The git index on disk, written behind mnemo's commits rather than with each of them.
//!
//! Git keeps what is staged in one file, `.git/index`, which lists every tracked file
//! (tombstones included) and is written whole: 1.6 MB for a store of 10k files, and larger
//! with every file the store ever kept. mnemo's commits do not need it on disk (each commit's
//! tree is its parent's with the noted files changed, `updated_tree`); it is there for the
//! people who run `git status` or `git commit` in the store. Written with every commit, it
//! was half of a busy server's commit time and grew with the store's age.
//!
//! So a commit writes the index when mnemo last wrote it at least [`INDEX_WRITE_INTERVAL`]
//! ago (a lone commit, the usual case, writes it at once), and otherwise leaves the writing
//! to a thread that does it within the interval ([`IndexWriter`]); closing the repository
//! writes it too. Meanwhile the index in memory is the true one, and `git status` in the
//! store may show the last second's commits as changes about to be undone. Should another
//! git process write the index in that second (`git add`), what it wrote is read back and
//! the files mnemo staged since its own last write are staged again ([`IndexLag`]), so
//! neither side's staging is lost.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use git2::Repository;
use tracing::{info, warn};

/// The longest mnemo's index on disk stays behind its commits while they keep coming.
pub const INDEX_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// The repository with what its index on disk lacks; one lock guards both.
pub(crate) struct Locked {
    pub(crate) repo: Repository,
    pub(crate) lag: IndexLag,
}

impl std::ops::Deref for Locked {
    type Target = Repository;

    fn deref(&self) -> &Repository {
        &self.repo
    }
}

/// How far the index on disk is behind the one in memory.
pub(crate) struct IndexLag {
    /// Git paths staged in memory since mnemo last wrote the index.
    unwritten: BTreeSet<String>,
    /// When mnemo last wrote it (or opened the repository).
    written_at: Instant,
    /// The index file as mnemo last left it, to see another process's write.
    stamp: Option<FileStamp>,
}

/// What tells one version of a file from another without reading it: git writes the index
/// through a lock file renamed over it, so each write is a new inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

impl IndexLag {
    /// No lag: the index on disk is the one just read.
    pub(crate) fn none(git_dir: &Path) -> Self {
        Self {
            unwritten: BTreeSet::new(),
            written_at: Instant::now(),
            stamp: FileStamp::of(&git_dir.join("index")),
        }
    }

    /// Whether the index on disk lacks something staged in memory.
    pub(crate) fn is_behind(&self) -> bool {
        !self.unwritten.is_empty()
    }

    /// Whether a commit should write the index now rather than leave it to the thread.
    pub(crate) fn write_due(&self) -> bool {
        self.written_at.elapsed() >= INDEX_WRITE_INTERVAL
    }

    /// Notes `paths` as staged in memory and not yet on disk.
    pub(crate) fn staged<'p>(&mut self, paths: impl IntoIterator<Item = &'p String>) {
        self.unwritten.extend(paths.into_iter().cloned());
    }

    /// The paths staged since the last write, when another process has written the index
    /// since (reading the index from disk then drops them from memory): to be staged again.
    pub(crate) fn overwritten(&self, git_dir: &Path) -> Option<Vec<String>> {
        let behind = self.is_behind() && FileStamp::of(&git_dir.join("index")) != self.stamp;
        behind.then(|| self.unwritten.iter().cloned().collect())
    }

    /// Records that mnemo read back what another process wrote (and staged its own paths
    /// again in memory): a further write by another process is then seen too.
    pub(crate) fn read_back(&mut self, git_dir: &Path) {
        self.stamp = FileStamp::of(&git_dir.join("index"));
    }

    /// Records a write of the index by mnemo.
    pub(crate) fn written(&mut self, git_dir: &Path) {
        self.unwritten.clear();
        self.written_at = Instant::now();
        self.stamp = FileStamp::of(&git_dir.join("index"));
    }
}

/// The thread that writes a lagging index within [`INDEX_WRITE_INTERVAL`]; it stops when
/// this is dropped.
pub(crate) struct IndexWriter {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IndexWriter {
    /// Starts the thread; `None` (and a warning) when no thread can be started, and the
    /// index is then written by the commits that find it due and on close only.
    /// `write` brings the index on disk up to date.
    pub(crate) fn spawn(
        repo: Weak<Mutex<Locked>>,
        write: impl Fn(&mut Locked) -> Result<(), String> + Send + 'static,
    ) -> Option<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("mnemo-git-index".into())
            .spawn(move || {
                // A lasting failure (another git process holding the lock, a full disk) is
                // logged once, not every second.
                let mut failing = false;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(INDEX_WRITE_INTERVAL) {
                    let Some(repo) = repo.upgrade() else { return };
                    let mut locked = repo.lock().unwrap_or_else(PoisonError::into_inner);
                    if !locked.lag.is_behind() {
                        continue;
                    }
                    match write(&mut locked) {
                        Err(e) if !failing => {
                            warn!("cannot write the git index: {e}; trying again every {INDEX_WRITE_INTERVAL:?}");
                            failing = true;
                        }
                        Ok(()) if failing => {
                            info!("the git index is written again");
                            failing = false;
                        }
                        _ => {}
                    }
                }
            });
        match spawned {
            Ok(thread) => Some(Self {
                stop: Some(stop),
                thread: Some(thread),
            }),
            Err(e) => {
                warn!("cannot start the thread that writes the git index ({e}); commits write it");
                None
            }
        }
    }
}

impl Drop for IndexWriter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
