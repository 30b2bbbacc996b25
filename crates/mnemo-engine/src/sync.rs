//! Keeping the vector index in step with the files, through `memory_index.json`.
//!
//! The snapshot maps each memory file (relative path) to the sha256 of its bytes and the point
//! id it was indexed under. It is rewritten atomically after the index flush that made its
//! entries durable, so it never claims more than the index holds ([`SnapshotCell`]). The
//! start-up sync ([`Indexer::sync`]) trusts an entry only when the index also holds its point;
//! a missing or unreadable snapshot costs a full re-embed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;

use chrono::{DateTime, Utc};
use mnemo_core::{MemoryId, MemoryRecord, Role};
use mnemo_embed::Embedder;
use mnemo_index::{LexicalEncoder, Payload, Point, VectorIndex};
use mnemo_store::{FileStore, StoredMemory};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::keys::{self, KeyScheme};
use crate::timeline::Timeline;
use crate::EngineError;

pub const SNAPSHOT_FILE: &str = "memory_index.json";
/// Version 3 added lexical vectors: older snapshots re-embed everything.
const SNAPSHOT_VERSION: u32 = 3;

/// One indexed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    pub sha256: String,
    pub id: MemoryId,
    /// What the index holds for this file besides the vector (payload fields used in filters).
    pub conversation_id: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    /// The neighbours the lexical key was built with; `None` when built from the file alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_context: Option<KeyContext>,
}

/// Hashes of the neighbouring turns' files a lexical key was built from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyContext {
    pub previous: Option<String>,
    pub next: Option<String>,
}

impl SnapshotEntry {
    fn of(record: &MemoryRecord, sha256: String) -> Self {
        Self {
            sha256,
            id: record.id,
            conversation_id: record.conversation_id.as_str().to_owned(),
            role: record.role,
            created_at: record.created_at,
            key_context: None,
        }
    }

    fn is_turn(&self) -> bool {
        matches!(self.role, Role::User | Role::Assistant)
    }
}

/// What the index holds, per file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    /// How the lexical keys were built ([`KeyScheme::describe`]); a change rebuilds them all.
    #[serde(default)]
    pub key_scheme: String,
    pub files: BTreeMap<String, SnapshotEntry>,
    /// Bumped by every change: lets derived views (the turn timeline) know they are stale.
    #[serde(skip)]
    pub generation: u64,
    /// Changed since last written to disk.
    #[serde(skip)]
    dirty: bool,
}

impl Snapshot {
    pub fn load(root: &Path) -> Snapshot {
        let path = root.join(SNAPSHOT_FILE);
        let Ok(bytes) = std::fs::read(&path) else {
            return Snapshot::default();
        };
        match serde_json::from_slice::<Snapshot>(&bytes) {
            Ok(s) if s.version == SNAPSHOT_VERSION => s,
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

    /// Records that files were added, removed or changed; [`SnapshotCell`] writes the
    /// snapshot to disk soon after, and views built from it (the timeline) are stale.
    pub fn mark_changed(&mut self) {
        self.generation += 1;
        self.dirty = true;
    }

    /// Records a change that leaves the turn order as it was (lexical key bookkeeping).
    fn mark_keys_changed(&mut self) {
        self.dirty = true;
    }

    /// Writes the snapshot to `<root>/memory_index.json`, atomically.
    pub fn write(mut self, root: &Path) -> Result<(), EngineError> {
        let path = root.join(SNAPSHOT_FILE);
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
/// [`FLUSH_INTERVAL`], [`crate::MemoryClient::wait_idle`], and closing the client. The index
/// is flushed first, so the file never claims more than the index durably holds. A crash
/// loses at most the index writes of the last interval, never a memory file: the next
/// start-up sync ([`Indexer::sync`], which checks the index's own point ids) re-indexes them.
pub struct SnapshotCell {
    root: PathBuf,
    live: std::sync::Mutex<Snapshot>,
    /// The index the snapshot describes.
    index: std::sync::Arc<dyn VectorIndex>,
    /// Serialises writers, so an older copy never overwrites a newer one.
    writer: std::sync::Mutex<()>,
}

/// How long a change may wait before the snapshot is written.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

impl SnapshotCell {
    pub fn new(root: &Path, snapshot: Snapshot, index: std::sync::Arc<dyn VectorIndex>) -> Self {
        Self {
            root: root.to_owned(),
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
            .and_then(|()| copy.write(&self.root))
            .inspect_err(|_| self.lock().dirty = true)
    }

    /// Starts the thread that flushes every [`FLUSH_INTERVAL`]; it stops when the handle
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
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(FLUSH_INTERVAL) {
                    let Some(cell) = cell.upgrade() else { return };
                    match cell.flush() {
                        Err(e) if !failing => {
                            warn!("cannot flush the index and its snapshot: {e}; trying again every {FLUSH_INTERVAL:?}");
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

/// Progress of a sync, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct SyncProgress {
    pub embedded: usize,
    pub to_embed: usize,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SyncReport {
    /// Live memory files found.
    pub files: usize,
    /// Seconds the sync took.
    pub seconds: f64,
    pub embedded: usize,
    pub deleted: usize,
    pub skipped: Vec<String>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The payload a memory is indexed with: its front matter, content and relative path.
pub fn payload_of(record: &MemoryRecord, relative_path: &str) -> Payload {
    let mut payload = Payload::new();
    let mut put = |k: &str, v: serde_json::Value| {
        payload.insert(k.to_owned(), v);
    };
    put("conversation_id", record.conversation_id.as_str().into());
    put("role", record.role.as_str().into());
    put("content", record.content.clone().into());
    put("created_at", record.created_at.to_rfc3339().into());
    put(
        "created_ts",
        (record.created_at.timestamp_millis() as f64 / 1000.0).into(),
    );
    put("path", relative_path.into());
    if let Some(id) = record.source_id {
        put("source_id", id.to_string().into());
    }
    if !record.metadata.is_empty() {
        put(
            "metadata",
            serde_json::Value::Object(record.metadata.clone()),
        );
    }
    payload
}

/// Relative path of a store file, as the snapshot and payloads name it.
pub fn relative_key(store: &FileStore, path: &Path) -> String {
    path.strip_prefix(store.root())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// What it takes to turn memory files into index points.
pub struct Indexer<'a> {
    pub store: &'a FileStore,
    pub embedder: &'a Embedder,
    pub lexical: &'a LexicalEncoder,
    pub index: &'a dyn VectorIndex,
    pub scheme: KeyScheme,
    /// [`KeyScheme::describe`] plus the BM25 parameters: what the snapshot records.
    pub scheme_description: String,
    /// Memories embedded, upserted and recorded per step.
    pub batch_size: usize,
}

impl Indexer<'_> {
    /// Embeds `memories` and upserts them, in batches, recording each flushed batch.
    pub fn index_memories(
        &self,
        snapshot: &mut Snapshot,
        memories: &[(StoredMemory, String)],
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<(), EngineError> {
        let store = self.store;
        let mut done = 0;
        for batch in memories.chunks(self.batch_size.max(1)) {
            let texts: Vec<String> = batch
                .iter()
                .map(|(m, _)| keys::dense_key(&m.record))
                .collect();
            let vectors = self.embedder.embed(&texts)?;
            // Neighbours are filled in by `refresh_keys`, once every new turn is recorded.
            let points = batch
                .iter()
                .zip(vectors)
                .map(|((memory, _), vector)| Point {
                    id: memory.record.id,
                    vector,
                    lexical: self.lexical.document(&keys::lexical_key(
                        &memory.record,
                        None,
                        None,
                        self.scheme,
                    )),
                    payload: payload_of(&memory.record, &relative_key(store, &memory.path)),
                })
                .collect();
            self.index.upsert(points)?;
            for (memory, sha256) in batch {
                snapshot.files.insert(
                    relative_key(store, &memory.path),
                    SnapshotEntry::of(&memory.record, sha256.clone()),
                );
            }
            snapshot.mark_changed();
            done += batch.len();
            progress(SyncProgress {
                embedded: done,
                to_embed: memories.len(),
            });
        }
        Ok(())
    }

    /// Brings the index in step with the files. See the module docs.
    ///
    /// Files whose bytes hash to what the snapshot recorded are not even parsed, which keeps a
    /// sync with nothing to do fast.
    pub fn sync(
        &self,
        snapshot: &mut Snapshot,
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<SyncReport, EngineError> {
        let (store, index) = (self.store, self.index);
        // The snapshot on disk may lag the index (it is written shortly after each change), or
        // the index may have lost points: what counts is what the index holds now.
        let indexed: HashSet<MemoryId> = index.ids()?.into_iter().collect();
        if snapshot.files.is_empty() {
            // Everything is about to be keyed with the current scheme.
            snapshot.key_scheme = self.scheme_description.clone();
        }
        let started = std::time::Instant::now();
        let mut report = SyncReport::default();
        let mut seen_ids: HashMap<MemoryId, PathBuf> = HashMap::new();
        let mut live_paths = HashSet::new();
        let mut to_embed = Vec::new();
        for path in store.memory_files() {
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                // Deleted between listing and reading: it is simply gone.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(EngineError::Io {
                        action: "cannot read",
                        path,
                        source,
                    })
                }
            };
            let key = relative_key(store, &path);
            let sha256 = sha256_hex(&bytes);
            let known = snapshot
                .files
                .get(&key)
                .filter(|e| e.sha256 == sha256 && indexed.contains(&e.id));
            let record_id = match known {
                Some(entry) => entry.id,
                None => match store.parse(&path, &bytes) {
                    Ok(memory) => {
                        let id = memory.record.id;
                        if !seen_ids.contains_key(&id) {
                            to_embed.push((memory, sha256));
                        }
                        id
                    }
                    Err(err) => {
                        warn!("skipping {}: {err}", path.display());
                        report.skipped.push(err.to_string());
                        continue;
                    }
                },
            };
            if let Some(first) = seen_ids.get(&record_id) {
                warn!(
                    "{} has the same id as {}; only the first is searchable",
                    path.display(),
                    first.display()
                );
                continue;
            }
            seen_ids.insert(record_id, path);
            live_paths.insert(key);
            report.files += 1;
        }

        let gone: Vec<String> = snapshot
            .files
            .keys()
            .filter(|k| !live_paths.contains(*k))
            .cloned()
            .collect();
        for key in &gone {
            snapshot.files.remove(key);
        }
        // Points of files that are gone, of ids edited away, or that the snapshot never saw.
        let stale_ids: Vec<MemoryId> = indexed
            .iter()
            .filter(|id| !seen_ids.contains_key(id))
            .copied()
            .collect();
        index.delete(&stale_ids)?;
        report.deleted = stale_ids.len();
        if !gone.is_empty() || !stale_ids.is_empty() {
            snapshot.mark_changed();
        }

        report.embedded = to_embed.len();
        self.index_memories(snapshot, &to_embed, progress)?;
        self.refresh_keys(snapshot, &Timeline::build(snapshot))?;
        report.seconds = started.elapsed().as_secs_f64();
        if report.embedded > 0 || report.deleted > 0 {
            info!(
                embedded = report.embedded,
                deleted = report.deleted,
                files = report.files,
                "index synchronised with the files"
            );
        }
        Ok(report)
    }

    /// Brings the index in step with one file that may have been created, changed or
    /// removed. Paths that are not memory files (tombstones, temporary files, other folders)
    /// are ignored.
    pub fn sync_path(
        &self,
        snapshot: &mut Snapshot,
        path: &Path,
    ) -> Result<PathChange, EngineError> {
        let store = self.store;
        let Ok((location, _)) = store.locate(path) else {
            return Ok(PathChange::Ignored);
        };
        if location.tombstone {
            return Ok(PathChange::Ignored);
        }
        let key = relative_key(store, path);
        let parsed = match std::fs::read(path) {
            Ok(bytes) => {
                let sha256 = sha256_hex(&bytes);
                if snapshot.files.get(&key).is_some_and(|e| e.sha256 == sha256) {
                    return Ok(PathChange::Unchanged);
                }
                match store.parse(path, &bytes) {
                    Ok(memory) => Some((memory, sha256)),
                    Err(err) => {
                        warn!("skipping {}: {err}", path.display());
                        None
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(EngineError::Io {
                    action: "cannot read",
                    path: path.to_owned(),
                    source,
                })
            }
        };
        let old = snapshot.files.remove(&key);
        let new_id = parsed.as_ref().map(|(m, _)| m.record.id);
        if let Some(old) = &old {
            let still_used = snapshot.files.values().any(|e| e.id == old.id);
            if Some(old.id) != new_id && !still_used {
                self.index.delete(&[old.id])?;
            }
        }
        match parsed {
            Some(memory) => {
                if let Some(other) = snapshot.files.iter().find(|(_, e)| Some(e.id) == new_id) {
                    warn!(
                        "{} has the same id as {}; only the latter is searchable",
                        path.display(),
                        other.0
                    );
                    snapshot.mark_changed();
                    return Ok(PathChange::Ignored);
                }
                self.index_memories(snapshot, &[memory], &mut |_| {})?;
                Ok(PathChange::Indexed)
            }
            None => {
                snapshot.mark_changed();
                Ok(if old.is_some() {
                    PathChange::Removed
                } else {
                    PathChange::Ignored
                })
            }
        }
    }
}

impl Indexer<'_> {
    /// Rebuilds the lexical vectors whose key context is out of date: turns whose neighbours
    /// changed (added, edited, removed), turns indexed from their file alone, and every
    /// memory when the key scheme changed. Returns how many were rebuilt. `timeline` must be
    /// built from `snapshot` as it is (this changes nothing it depends on).
    pub(crate) fn refresh_keys(
        &self,
        snapshot: &mut Snapshot,
        timeline: &Timeline,
    ) -> Result<usize, EngineError> {
        let rebuild_all = snapshot.key_scheme != self.scheme_description;
        debug_assert_eq!(timeline.generation, snapshot.generation);
        // Runs after every write: one pass over the entries, allocating only for stale ones.
        let file_of: HashMap<MemoryId, (&str, &str)> = snapshot
            .files
            .iter()
            .map(|(path, e)| (e.id, (path.as_str(), e.sha256.as_str())))
            .collect();
        let file = |id: Option<MemoryId>| id.and_then(|id| file_of.get(&id)).copied();
        let mut stale: Vec<(String, Option<KeyContext>, [Option<String>; 2])> = Vec::new();
        for (path, entry) in &snapshot.files {
            if !(entry.is_turn() && self.scheme.neighbours) {
                if rebuild_all || entry.key_context.is_some() {
                    stale.push((path.clone(), None, [None, None]));
                }
                continue;
            }
            let n = timeline.neighbours(entry.id);
            let (previous, next) = (file(n.previous), file(n.next));
            let current = entry.key_context.as_ref().is_some_and(|c| {
                c.previous.as_deref() == previous.map(|(_, sha)| sha)
                    && c.next.as_deref() == next.map(|(_, sha)| sha)
            });
            if rebuild_all || !current {
                let expected = KeyContext {
                    previous: previous.map(|(_, sha)| sha).map(str::to_owned),
                    next: next.map(|(_, sha)| sha).map(str::to_owned),
                };
                let paths = [
                    previous.map(|(path, _)| path.to_owned()),
                    next.map(|(path, _)| path.to_owned()),
                ];
                stale.push((path.clone(), Some(expected), paths));
            }
        }
        let store = self.store;
        // Each turn is read once per pass, though it is its neighbours' neighbour too.
        let mut records: HashMap<String, Option<MemoryRecord>> = HashMap::new();
        let mut read = |path: &str| -> Option<MemoryRecord> {
            records
                .entry(path.to_owned())
                .or_insert_with(|| store.read(Path::new(path)).ok().map(|m| m.record))
                .clone()
        };
        for batch in stale.chunks(256) {
            let mut updates = Vec::with_capacity(batch.len());
            for (path, _, [previous, next]) in batch {
                // A file that vanished or broke since the snapshot was written: the next sync
                // deals with it; its key stays as it is.
                let Some(record) = read(path) else {
                    continue;
                };
                let previous = previous.as_deref().and_then(&mut read).map(|r| r.content);
                let next = next.as_deref().and_then(&mut read).map(|r| r.content);
                let key =
                    keys::lexical_key(&record, previous.as_deref(), next.as_deref(), self.scheme);
                updates.push((record.id, self.lexical.document(&key)));
            }
            self.index.set_lexical(updates)?;
            for (path, expected, _) in batch {
                if let Some(entry) = snapshot.files.get_mut(path) {
                    entry.key_context = expected.clone();
                }
            }
            snapshot.mark_keys_changed();
        }
        if rebuild_all {
            snapshot.key_scheme = self.scheme_description.clone();
            snapshot.mark_keys_changed();
        }
        Ok(stale.len())
    }
}

/// What happened to one path the watcher reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChange {
    Indexed,
    Removed,
    Unchanged,
    Ignored,
}
