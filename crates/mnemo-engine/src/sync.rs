//! Keeping the vector index in step with the files, through `memory_index.json`.
//!
//! The snapshot maps each memory file (relative path) to the sha256 of its bytes and the point
//! id it was indexed under. It is rewritten atomically after the index flush that made its
//! entries durable, so it never claims more than the index holds. A missing or unreadable
//! snapshot, or one whose size disagrees with the index, only costs a full re-embed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use mnemo_core::{MemoryId, MemoryRecord, Role};
use mnemo_embed::Embedder;
use mnemo_index::{Filter, Payload, Point, VectorIndex};
use mnemo_store::{FileStore, StoredMemory};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::EngineError;

pub const SNAPSHOT_FILE: &str = "memory_index.json";
const SNAPSHOT_VERSION: u32 = 2;

/// One indexed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    pub sha256: String,
    pub id: MemoryId,
    /// What the index holds for this file besides the vector (payload fields used in filters).
    pub conversation_id: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

impl SnapshotEntry {
    fn of(record: &MemoryRecord, sha256: String) -> Self {
        Self {
            sha256,
            id: record.id,
            conversation_id: record.conversation_id.as_str().to_owned(),
            role: record.role,
            created_at: record.created_at,
        }
    }
}

/// What the index holds, per file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub files: BTreeMap<String, SnapshotEntry>,
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

    pub fn save(&self, root: &Path) -> Result<(), EngineError> {
        let path = root.join(SNAPSHOT_FILE);
        let mut snapshot = self.clone();
        snapshot.version = SNAPSHOT_VERSION;
        let bytes = serde_json::to_vec_pretty(&snapshot).expect("snapshot serialises");
        mnemo_store::atomic::write_atomic(&path, &bytes).map_err(|source| EngineError::Io {
            action: "cannot write",
            path,
            source,
        })
    }

    fn distinct_ids(&self) -> usize {
        self.files
            .values()
            .map(|e| e.id)
            .collect::<HashSet<_>>()
            .len()
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

/// Embeds `memories` and upserts them, in batches, recording each flushed batch.
pub fn index_memories(
    store: &FileStore,
    embedder: &Embedder,
    index: &dyn VectorIndex,
    snapshot: &mut Snapshot,
    memories: &[(StoredMemory, String)],
    batch_size: usize,
    progress: &mut dyn FnMut(SyncProgress),
) -> Result<(), EngineError> {
    let mut done = 0;
    for batch in memories.chunks(batch_size.max(1)) {
        let texts: Vec<&str> = batch
            .iter()
            .map(|(m, _)| m.record.content.as_str())
            .collect();
        let vectors = embedder.embed(&texts)?;
        let points = batch
            .iter()
            .zip(vectors)
            .map(|((memory, _), vector)| Point {
                id: memory.record.id,
                vector,
                payload: payload_of(&memory.record, &relative_key(store, &memory.path)),
            })
            .collect();
        index.upsert(points)?;
        for (memory, sha256) in batch {
            snapshot.files.insert(
                relative_key(store, &memory.path),
                SnapshotEntry::of(&memory.record, sha256.clone()),
            );
        }
        snapshot.save(store.root())?;
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
    store: &FileStore,
    embedder: &Embedder,
    index: &dyn VectorIndex,
    snapshot: &mut Snapshot,
    batch_size: usize,
    progress: &mut dyn FnMut(SyncProgress),
) -> Result<SyncReport, EngineError> {
    if index.count(&Filter::all())? != snapshot.distinct_ids() {
        if !snapshot.files.is_empty() {
            warn!("the index and memory_index.json disagree; re-embedding every file");
        }
        snapshot.files.clear();
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
        let known = snapshot.files.get(&key).filter(|e| e.sha256 == sha256);
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
    let mut stale_ids: Vec<MemoryId> = Vec::new();
    for key in &gone {
        if let Some(entry) = snapshot.files.remove(key) {
            if !seen_ids.contains_key(&entry.id) {
                stale_ids.push(entry.id);
            }
        }
    }
    // A file whose id was edited leaves its old point behind.
    for (memory, _) in &to_embed {
        let key = relative_key(store, &memory.path);
        if let Some(old) = snapshot.files.get(&key) {
            if old.id != memory.record.id && !seen_ids.contains_key(&old.id) {
                stale_ids.push(old.id);
            }
        }
    }
    index.delete(&stale_ids)?;
    report.deleted = stale_ids.len();
    if !gone.is_empty() || !stale_ids.is_empty() {
        snapshot.save(store.root())?;
    }

    report.embedded = to_embed.len();
    index_memories(
        store, embedder, index, snapshot, &to_embed, batch_size, progress,
    )?;
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

/// What happened to one path the watcher reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChange {
    Indexed,
    Removed,
    Unchanged,
    Ignored,
}

/// Brings the index in step with one file that may have been created, changed or removed.
/// Paths that are not memory files (tombstones, temporary files, other folders) are ignored.
pub fn sync_path(
    store: &FileStore,
    embedder: &Embedder,
    index: &dyn VectorIndex,
    snapshot: &mut Snapshot,
    path: &Path,
) -> Result<PathChange, EngineError> {
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
            index.delete(&[old.id])?;
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
                snapshot.save(store.root())?;
                return Ok(PathChange::Ignored);
            }
            index_memories(store, embedder, index, snapshot, &[memory], 1, &mut |_| {})?;
            Ok(PathChange::Indexed)
        }
        None => {
            snapshot.save(store.root())?;
            Ok(if old.is_some() {
                PathChange::Removed
            } else {
                PathChange::Ignored
            })
        }
    }
}
