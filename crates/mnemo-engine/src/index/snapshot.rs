//! What the index holds, per file: `memory_index.json`, and its deferred writing.
//!
//! The snapshot maps each memory file (relative path) to the sha256 of its bytes and the point
//! id it was indexed under. It is rewritten atomically after the index flush that made its
//! entries durable, so it never claims more than the index holds ([`SnapshotCell`]). The
//! start-up sync ([`crate::index::sync::Indexer::sync`]) trusts an entry only when the index also
//! holds its point; a missing or unreadable snapshot costs a full re-embed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;

use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use mnemo_index::VectorIndex;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::EngineError;

/// Version 3 added lexical vectors: older snapshots re-embed everything.
const SNAPSHOT_VERSION: u32 = 3;

/// One indexed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    /// sha256 of the file's bytes when it was indexed.
    pub sha256: String,
    /// The point it was indexed under (the memory's id).
    pub id: MemoryId,
    /// The memory's conversation, role and time: what eviction and the turn timeline need
    /// without reading the file.
    pub conversation_id: ConversationId,
    /// The memory's role.
    pub role: Role,
    /// When the memory was made.
    pub created_at: DateTime<Utc>,
    /// For a fact, the turn it was drawn from (front matter `source_id`): that turn's
    /// lexical key holds the fact's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<MemoryId>,
    /// The neighbours and facts the lexical key was built with; `None` when built from the
    /// file alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_context: Option<KeyContext>,
    /// The model's words nearest the memory that its lexical key was last built with
    /// (document expansion; empty when none were), kept because they depend only on the
    /// memory's text and the key scheme, while a turn's key is built again whenever a
    /// neighbour changes and a fact's file is rewritten when a conflict is marked. A turn's
    /// are `None` until its key is built with its context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_words: Option<String>,
}

/// Hashes of the files a turn's lexical key was built from, besides its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyContext {
    /// The file hashes of the turns before it that the key read, nearest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    /// The file hashes of the turns after it that the key read, nearest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The hashes of the facts drawn from the turn, in the timeline's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
}

impl SnapshotEntry {
    /// The entry of a file holding `record`, whose bytes hash to `sha256`.
    pub fn of(record: &MemoryRecord, sha256: String) -> Self {
        Self {
            sha256,
            id: record.id,
            conversation_id: record.conversation_id.clone(),
            role: record.role,
            created_at: record.created_at,
            source_id: record.source_id.filter(|_| record.role == Role::Memory),
            key_context: None,
            nearest_words: None,
        }
    }

    /// Whether the file is a chat turn.
    pub fn is_turn(&self) -> bool {
        matches!(self.role, Role::User | Role::Assistant)
    }
}

/// What the index holds, per file.
///
/// Besides the entries, it knows which conversations changed, for the views derived from
/// it (the turn timeline, the lexical keys): a write touches one conversation, and
/// rebuilding only that one keeps a write's upkeep in proportion to its conversation, not
/// to the store. Every entry's path is under its conversation's folder
/// (`entries/<conversation>/`), so a conversation's entries are one range of the map.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The format's version (`SNAPSHOT_VERSION` when written by this mnemo).
    pub version: u32,
    /// How the lexical keys were built
    /// ([`KeyScheme::describe`](crate::index::keys::KeyScheme::describe)); a change rebuilds them all.
    #[serde(default)]
    pub key_scheme: String,
    /// Which embedding model made the dense vectors (its name and dimension); a change
    /// re-embeds every memory. Empty in snapshots written before it was recorded.
    #[serde(default)]
    pub dense_model: String,
    /// Whether fact entries record their `source_id`. Snapshots written before they did are
    /// completed by the next sync, from the files' bytes, without re-embedding.
    #[serde(default)]
    pub fact_sources: bool,
    /// Every indexed file, by its path relative to the store.
    files: BTreeMap<String, SnapshotEntry>,
    /// Bumped by every change: lets derived views (the turn timeline) know they are stale.
    #[serde(skip)]
    pub generation: u64,
    /// The path of each entry, by its id (ids are unique among the entries).
    #[serde(skip)]
    paths: HashMap<MemoryId, String>,
    /// Which conversations changed, and when.
    #[serde(skip)]
    changes: Changes,
    /// Changed since last written to disk.
    #[serde(skip)]
    dirty: bool,
}

/// The changes the views derived from a snapshot catch up with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Changes {
    /// The generation of each conversation's last change.
    conversations: HashMap<ConversationId, u64>,
    /// The generation of the last change not tied to one conversation.
    everything: u64,
    /// Conversations changed since their lexical keys were last checked.
    keys_pending: HashSet<ConversationId>,
    /// Every conversation's keys are to be checked (a snapshot just loaded).
    all_keys_pending: bool,
}

/// Which conversations changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Any of them may have.
    Everything,
    /// These did.
    Conversations(Vec<ConversationId>),
}

/// Where a conversation's entries sit in the snapshot: `entries/<conversation>/`.
fn folder_of(conversation: &str) -> String {
    format!("{}/{conversation}/", mnemo_store::layout::ENTRIES_DIR)
}

impl Snapshot {
    /// Reads the snapshot at `path`; a missing, unreadable or older one reads as empty (the
    /// next sync then re-embeds every file).
    pub fn load(path: &Path) -> Snapshot {
        // A link or a FIFO here is not mnemo's; 1 GiB is ten million files' entries.
        let bytes = match mnemo_store::untrusted::read_regular(path, 1 << 30) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return Snapshot::default(),
            Err(e) => {
                warn!(file = %path.display(), "unreadable snapshot ({e}); rebuilding the index");
                return Snapshot::default();
            }
        };
        match serde_json::from_slice::<Snapshot>(&bytes) {
            Ok(s) if s.version == SNAPSHOT_VERSION => s.checked(path),
            Ok(s) => {
                warn!(file = %path.display(), version = s.version, "unknown snapshot version; rebuilding the index");
                Snapshot::default()
            }
            Err(e) => {
                warn!(file = %path.display(), "unreadable snapshot ({e}); rebuilding the index");
                Snapshot::default()
            }
        }
    }

    /// A loaded snapshot without the entries mnemo never writes (a path outside the folder
    /// of the conversation it names: a hand-edited `memory_index.json`), which the next
    /// sync indexes again from their files; every key is to be checked.
    fn checked(mut self, path: &Path) -> Snapshot {
        let before = self.files.len();
        let mut paths = HashMap::new();
        self.files.retain(|file, e| {
            let first = !paths.contains_key(&e.id);
            let kept = first && file.starts_with(&folder_of(e.conversation_id.as_str()));
            if kept {
                paths.insert(e.id, file.clone());
            }
            kept
        });
        self.paths = paths;
        if self.files.len() < before {
            let dropped = before - self.files.len();
            warn!(file = %path.display(), dropped, "snapshot entries outside their conversation's folder, or with an id another has; their files are indexed again");
        }
        self.changes.all_keys_pending = true;
        self
    }

    /// Every indexed file, by its path relative to the store.
    pub fn files(&self) -> &BTreeMap<String, SnapshotEntry> {
        &self.files
    }

    /// The entries of one conversation, by path.
    pub fn entries_of<'s>(
        &'s self,
        conversation: &str,
    ) -> impl Iterator<Item = (&'s String, &'s SnapshotEntry)> + Clone + 's {
        let folder = folder_of(conversation);
        let from = std::ops::Bound::Included(folder.clone());
        self.files
            .range((from, std::ops::Bound::Unbounded))
            .take_while(move |(path, _)| path.starts_with(&folder))
    }

    /// Every conversation with an entry, each once.
    pub(crate) fn conversations(&self) -> impl Iterator<Item = &ConversationId> + '_ {
        let mut last: Option<&ConversationId> = None;
        self.files.values().filter_map(move |e| {
            let new = last != Some(&e.conversation_id);
            last = Some(&e.conversation_id);
            new.then_some(&e.conversation_id)
        })
    }

    /// The path of the entry with this id.
    pub fn path_of(&self, id: MemoryId) -> Option<&str> {
        self.paths.get(&id).map(String::as_str)
    }

    /// Records the file at `path` (relative to the store, in the folder of `entry`'s
    /// conversation) as indexed. No other entry may have its id (the indexer skips a file
    /// whose id another has).
    pub fn insert(&mut self, path: String, entry: SnapshotEntry) {
        debug_assert!(path.starts_with(&folder_of(entry.conversation_id.as_str())));
        self.touch(&entry.conversation_id);
        self.paths.insert(entry.id, path.clone());
        if let Some(replaced) = self.files.insert(path, entry) {
            self.forget_path(&replaced);
        }
    }

    /// Forgets the file at `path`; returns its entry, if it had one.
    pub fn remove(&mut self, path: &str) -> Option<SnapshotEntry> {
        let removed = self.files.remove(path)?;
        self.touch(&removed.conversation_id);
        self.forget_path(&removed);
        Some(removed)
    }

    /// Drops `gone`'s id from the paths, unless an entry still has it.
    fn forget_path(&mut self, gone: &SnapshotEntry) {
        let Some(path) = self.paths.get(&gone.id) else {
            return;
        };
        if self.files.get(path).is_none_or(|e| e.id != gone.id) {
            self.paths.remove(&gone.id);
        }
    }

    /// Records the turn the fact at `path` was drawn from.
    pub(crate) fn set_source(&mut self, path: &str, source_id: Option<MemoryId>) {
        let Some(entry) = self.files.get_mut(path) else {
            return;
        };
        entry.source_id = source_id;
        let conversation = entry.conversation_id.clone();
        self.touch(&conversation);
    }

    /// Records what the lexical key of the file at `path` was built from, and its nearest
    /// model words; the turn order stays as it was.
    pub(crate) fn set_key_built(
        &mut self,
        path: &str,
        context: Option<KeyContext>,
        nearest_words: String,
    ) {
        if let Some(entry) = self.files.get_mut(path) {
            entry.key_context = context;
            entry.nearest_words = Some(nearest_words);
            self.dirty = true;
        }
    }

    fn touch(&mut self, conversation: &ConversationId) {
        self.generation += 1;
        self.dirty = true;
        let changes = &mut self.changes;
        changes
            .conversations
            .insert(conversation.clone(), self.generation);
        changes.keys_pending.insert(conversation.clone());
    }

    /// Records a change not tied to one conversation: the views derived from the snapshot
    /// are rebuilt whole, and every key is checked.
    pub fn mark_changed(&mut self) {
        self.generation += 1;
        self.dirty = true;
        self.changes.everything = self.generation;
        self.changes.all_keys_pending = true;
    }

    /// Records a change that only needs writing to disk (something recorded about the
    /// index as a whole).
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The conversations changed after `generation`.
    pub(crate) fn changed_since(&self, generation: u64) -> Changed {
        if self.changes.everything > generation {
            return Changed::Everything;
        }
        let changed = self.changes.conversations.iter();
        Changed::Conversations(
            changed
                .filter(|(_, at)| **at > generation)
                .map(|(c, _)| c.clone())
                .collect(),
        )
    }

    /// Takes the conversations whose lexical keys are to be checked, but those `later`
    /// holds: they stay pending.
    pub(crate) fn take_keys_pending(
        &mut self,
        later: impl Fn(&ConversationId) -> bool,
    ) -> Vec<ConversationId> {
        let pending: Vec<ConversationId> = match std::mem::take(&mut self.changes.all_keys_pending)
        {
            true => self.conversations().cloned().collect(),
            false => std::mem::take(&mut self.changes.keys_pending)
                .into_iter()
                .collect(),
        };
        let (held, taken): (Vec<_>, Vec<_>) = pending.into_iter().partition(|c| later(c));
        self.changes.keys_pending = held.into_iter().collect();
        taken
    }

    /// Puts conversations taken by [`take_keys_pending`](Self::take_keys_pending) back, their
    /// keys not all rebuilt.
    pub(crate) fn keys_pending_again(&mut self, conversations: Vec<ConversationId>) {
        self.changes.keys_pending.extend(conversations);
    }

    /// Writes the snapshot to `path`, atomically.
    pub fn write(mut self, path: &Path) -> Result<(), EngineError> {
        let path = path.to_owned();
        self.version = SNAPSHOT_VERSION;
        let bytes = serde_json::to_vec_pretty(&self).expect("snapshot serialises");
        mnemo_store::atomic::write_atomic(&path, &bytes).map_err(|source| EngineError::Io {
            action: "cannot write",
            path,
            source,
        })
    }
}

/// The live snapshot of an open store, and its deferred writing to disk.
///
/// Writing `memory_index.json` costs time in proportion to the store (4 MB at 10k files),
/// and so does making the index durable (a flush syncs every segment file), so changes only
/// mark the snapshot dirty and [`SnapshotCell::flush`] does both: a background thread every
/// [`FLUSH_INTERVAL`] (longer in a large store, [`FLUSH_SPACING`]),
/// [`crate::MemoryClient::wait_idle`], and closing the client. The index
/// is flushed first, so the file never claims more than the index durably holds. A crash
/// loses at most the index writes of the last interval, never a memory file: the next
/// start-up sync ([`Indexer::sync`](crate::index::sync::Indexer::sync), which checks the index's own
/// point ids) re-indexes them.
pub struct SnapshotCell {
    /// Where the snapshot is written (`memory_index.json`).
    path: PathBuf,
    live: std::sync::Mutex<Snapshot>,
    /// The index the snapshot describes.
    index: std::sync::Arc<dyn VectorIndex>,
    /// Serialises writers, so an older copy never overwrites a newer one.
    writer: std::sync::Mutex<()>,
}

/// How long a change may wait before the snapshot is written, in a store whose flush takes
/// less than this over [`FLUSH_SPACING`] (20 ms); longer in a larger one.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// After a flush, the flusher waits this many times as long as the flush (and the
/// compaction before it) took, when that is longer than [`FLUSH_INTERVAL`]. A flush's cost
/// grows with the store: the flushing thread took 11.2 s of CPU in a 200-second soak with a
/// flush every 500 ms, 3.8 s spaced. Flushing now takes at most about
/// 1/25 of the time, waits for the disk included, however large the store. A crash still
/// loses no file, only the index writes of a longer last interval.
pub const FLUSH_SPACING: u32 = 25;

impl SnapshotCell {
    /// The live snapshot `snapshot` of `index`, to be written to `path`.
    pub fn new(path: &Path, snapshot: Snapshot, index: std::sync::Arc<dyn VectorIndex>) -> Self {
        Self {
            path: path.to_owned(),
            live: std::sync::Mutex::new(snapshot),
            index,
            writer: std::sync::Mutex::new(()),
        }
    }

    /// The live snapshot. Holding it also guards every write to the index.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the index durable and writes the snapshot, if it changed since it was last
    /// written.
    pub fn flush(&self) -> Result<(), EngineError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        // Index writes happen under the live lock, so every write this copy describes was
        // applied before it was taken, and the flush below makes it durable.
        let copy = {
            let mut live = self.lock();
            if !live.dirty {
                return Ok(());
            }
            live.dirty = false;
            live.clone()
        };
        self.index
            .flush()
            .map_err(EngineError::from)
            .and_then(|()| copy.write(&self.path))
            .inspect_err(|_| self.lock().dirty = true)
    }

    /// Lets the index give back what deleted and rewritten points leave behind
    /// ([`VectorIndex::compact`]); a failure is logged, and the next call tries again.
    fn compact(&self) {
        let started = std::time::Instant::now();
        match self.index.compact() {
            Ok(true) => {
                info!(took = ?started.elapsed(), "the index gave back the space of deleted points")
            }
            Ok(false) => {}
            Err(e) => warn!("{e}"),
        }
    }

    /// Starts the thread that flushes every [`FLUSH_INTERVAL`], or less often in a large
    /// store ([`FLUSH_SPACING`]); it stops when the handle
    /// is dropped. `None` (and a warning) when no thread can be started: the snapshot is
    /// then written on `wait_idle` and on close only.
    pub fn spawn_flusher(cell: &std::sync::Arc<SnapshotCell>) -> Option<Flusher> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        // Weak: the thread must not keep the index open after the client is gone.
        let cell = std::sync::Arc::downgrade(cell);
        let spawned = std::thread::Builder::new()
            .name("mnemo-snapshot".into())
            .spawn(move || {
                // A lasting failure (a full disk) is logged once, not twice a second.
                let mut failing = false;
                let mut wait = FLUSH_INTERVAL;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    let Some(cell) = cell.upgrade() else { return };
                    let started = std::time::Instant::now();
                    cell.compact();
                    let flushed = cell.flush();
                    wait = FLUSH_INTERVAL.max(started.elapsed() * FLUSH_SPACING);
                    match flushed {
                        Err(e) if !failing => {
                            warn!("cannot flush the index and its snapshot: {e}; trying again in {wait:?}, and so on until it succeeds");
                            failing = true;
                        }
                        Ok(()) if failing => {
                            info!("the index and its snapshot are flushed again");
                            failing = false;
                        }
                        _ => {}
                    }
                }
            });
        match spawned {
            Ok(thread) => Some(Flusher {
                stop: Some(stop),
                thread: Some(thread),
            }),
            Err(e) => {
                warn!("no snapshot thread ({e}); the snapshot is written when the client closes");
                None
            }
        }
    }
}

/// The background flushing thread of a [`SnapshotCell`]; dropping it stops the thread and
/// waits for a flush in progress to end.
pub struct Flusher {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry is found by its id through every insert, replacement and removal, and a
    /// loaded snapshot where two entries claim one id keeps the first.
    #[test]
    fn entries_are_found_by_id() {
        let entry = |conversation: &str| {
            let record = MemoryRecord::new(
                ConversationId::new(conversation).unwrap(),
                Role::Memory,
                "The user lives in Lisbon.",
            );
            SnapshotEntry::of(&record, "ab".repeat(32))
        };
        let mut snapshot = Snapshot::default();
        let (a, b) = (entry("c"), entry("c"));
        snapshot.insert("entries/c/facts/a.md".into(), a.clone());
        assert_eq!(snapshot.path_of(a.id), Some("entries/c/facts/a.md"));
        // The file now holds another memory (an edit of its id).
        snapshot.insert("entries/c/facts/a.md".into(), b.clone());
        assert_eq!(snapshot.path_of(a.id), None);
        assert_eq!(snapshot.path_of(b.id), Some("entries/c/facts/a.md"));
        snapshot.remove("entries/c/facts/a.md");
        assert_eq!(snapshot.path_of(b.id), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory_index.json");
        let mut twice = Snapshot::default();
        twice.insert("entries/c/facts/a.md".into(), a.clone());
        twice.files.insert("entries/c/facts/b.md".into(), a.clone());
        twice.write(&path).unwrap();
        let loaded = Snapshot::load(&path);
        assert_eq!(loaded.files().len(), 1);
        assert_eq!(loaded.path_of(a.id), Some("entries/c/facts/a.md"));
    }

    /// `memory_index.json` nobody wrote by hand: a snapshot of two files, mutated. Reading
    /// it never fails or panics; what cannot be used is a snapshot to rebuild from.
    #[test]
    fn hostile_snapshots_load_or_start_over() {
        use mnemo_test_support::hostile;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory_index.json");
        let mut snapshot = Snapshot {
            dense_model: "all-MiniLM-L6-v2 (384)".into(),
            ..Snapshot::default()
        };
        for (name, role) in [
            ("facts/a.md", Role::Memory),
            ("turns/user/b.md", Role::User),
        ] {
            let record = MemoryRecord::new(
                ConversationId::new("c").unwrap(),
                role,
                "The user lives in Lisbon.",
            );
            let mut entry = SnapshotEntry::of(&record, "ab".repeat(32));
            entry.key_context = Some(KeyContext {
                before: vec!["Where do you live?".into()],
                ..KeyContext::default()
            });
            snapshot.insert(format!("entries/c/{name}"), entry);
        }
        snapshot.write(&path).unwrap();
        let base = std::fs::read(&path).unwrap();
        proptest::test_runner::TestRunner::new(hostile::config())
            .run(&hostile::mutated(base), |bytes| {
                std::fs::write(&path, &bytes).unwrap();
                let _ = Snapshot::load(&path);
                Ok(())
            })
            .unwrap();
    }
}
