//! The engine's own writes to the memory files, each followed by the index at once.
//!
//! Every write holds the snapshot lock from its first file write until the snapshot records
//! the file, so the watcher, which takes the same lock, finds the file already indexed with
//! the same hash and does not index it a second time. What a write embeds is embedded before
//! that lock is taken ([`Indexer::embed_ahead`]): searches go first at the embedder, and a
//! writer waiting there under the lock would hold every other writer behind them. The write
//! path ([`crate::write`]) and the chat turns ([`crate::chat`]) write through here; hand edits
//! come in through [`Engine::apply_file_changes`], which the watcher calls.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use mnemo_core::{MemoryId, MemoryRecord};
use mnemo_store::{sha256_hex, StoredMemory};
use tracing::{info, warn};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::index::keys::dense_key;
use crate::index::snapshot::Snapshot;
use crate::index::sync::{
    read_file, EmbeddedAhead, FileRead, Indexer, KeptKeys, PathChange, SyncReport,
};
use crate::index::timeline::Timeline;
use crate::index::watcher::FileChanges;

impl Engine {
    /// Writes fully formed records and indexes them before returning.
    pub(crate) fn write_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        let ahead = self.indexer().embed_ahead(&records, KeptKeys::default())?;
        let mut snapshot = self.snapshot().lock();
        let mut written = Vec::with_capacity(records.len());
        for record in records {
            let file = self.store().write(&record)?;
            self.note_for_git([&file.path]);
            written.push((
                StoredMemory {
                    record,
                    path: file.path,
                },
                file.sha256,
            ));
        }
        self.index_written(&mut snapshot, &written, &ahead)?;
        Ok(written.into_iter().map(|(m, _)| m).collect())
    }

    /// Writes `record` over the live memory file at `path` (an edit: the file keeps its
    /// name) and indexes it before returning.
    pub(crate) fn rewrite_record(
        &self,
        path: &std::path::Path,
        record: MemoryRecord,
    ) -> Result<StoredMemory, EngineError> {
        let mut rewritten = self.rewrite_records(vec![(path.to_owned(), record)])?;
        rewritten
            .pop()
            .ok_or_else(|| EngineError::Task("a rewrite returned no memory".into()))
    }

    /// [`rewrite_record`](Self::rewrite_record) for several files, indexed together: the
    /// index's upkeep after a write (the timeline, the keys) runs once for all of them.
    pub(crate) fn rewrite_records(
        &self,
        edits: Vec<(PathBuf, MemoryRecord)>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        if edits.is_empty() {
            return Ok(Vec::new());
        }
        let kept = self.kept_keys(&edits);
        let ahead = self
            .indexer()
            .embed_ahead(edits.iter().map(|(_, r)| r), kept)?;
        let mut snapshot = self.snapshot().lock();
        let mut written = Vec::with_capacity(edits.len());
        let result = (|| {
            for (path, record) in edits {
                let file = self.store().rewrite(&path, &record)?;
                self.note_for_git([&file.path]);
                let memory = StoredMemory {
                    record,
                    path: file.path,
                };
                written.push((memory, file.sha256));
            }
            Ok::<(), EngineError>(())
        })();
        // What was rewritten before a failure is on disk, so it is indexed all the same.
        self.index_written(&mut snapshot, &written, &ahead)?;
        result.map(|()| written.into_iter().map(|(m, _)| m).collect())
    }

    /// What each edit keeps of its file's dense key (see [`KeptKeys`]): for a file rewritten
    /// with the text it had (a conflict marked, a person's decision recorded), as indexed (its
    /// bytes hash to what the snapshot recorded: a hand edit not indexed yet is not taken for
    /// it), the model's words nearest its key that the snapshot holds and its vector in the
    /// index. Finding the words again is a pass over every word vector the model has, and
    /// the vector a run of the model, for each file.
    fn kept_keys(&self, edits: &[(PathBuf, MemoryRecord)]) -> KeptKeys {
        let indexer = self.indexer();
        // Each file's hash as indexed, and the words nearest its key where they were kept.
        let indexed_as: Vec<Option<(String, Option<String>)>> = {
            let snapshot = self.snapshot().lock();
            edits
                .iter()
                .map(|(path, _)| {
                    let relative = self.store().relative(path);
                    let entry = snapshot.files().get(relative.as_ref())?;
                    let words = indexer
                        .kept_nearest_words(&snapshot, &relative)
                        .map(|(_, words)| words.to_owned());
                    Some((entry.sha256.clone(), words))
                })
                .collect()
        };
        let unchanged: Vec<(MemoryId, String, Option<String>)> = edits
            .iter()
            .zip(indexed_as)
            .filter_map(|((path, record), indexed_as)| {
                let (sha256, words) = indexed_as?;
                let bytes = self.store().read_bytes(path).ok()?;
                if sha256_hex(&bytes) != sha256 {
                    return None;
                }
                let before = self.store().parse(path, &bytes).ok()?.record;
                let key = dense_key(record);
                (dense_key(&before) == key).then_some((before.id, key, words))
            })
            .collect();
        if unchanged.is_empty() {
            return KeptKeys::default();
        }
        let ids: Vec<MemoryId> = unchanged.iter().map(|(id, _, _)| *id).collect();
        // Not found (a point lost meanwhile, an index server away): embedded again.
        let mut indexed: HashMap<MemoryId, Vec<f32>> = match self.index().retrieve(&ids, true) {
            Ok(hits) => hits
                .into_iter()
                .filter_map(|hit| Some((hit.id, hit.vector?)))
                .collect(),
            Err(_) => HashMap::new(),
        };
        let mut kept = KeptKeys::default();
        for (id, key, words) in unchanged {
            if let Some(vector) = indexed.remove(&id) {
                kept.vectors.insert(key.clone(), vector);
            }
            if let Some(words) = words {
                kept.nearest.insert(key, words);
            }
        }
        kept
    }

    /// Indexes files just written (with their hashes), under the snapshot lock their
    /// writer holds, with the vectors their writer embedded before taking it.
    fn index_written(
        &self,
        snapshot: &mut Snapshot,
        written: &[(StoredMemory, String)],
        ahead: &EmbeddedAhead,
    ) -> Result<(), EngineError> {
        let indexed = self
            .indexer()
            .with_ahead(ahead)
            .index_memories(snapshot, written, &mut |_| {})
            .and_then(|()| self.refresh_keys(snapshot));
        self.refresh_timeline(snapshot);
        indexed
    }

    /// Rebuilds the stale lexical keys of the conversations changed since their keys were
    /// last checked, but those whose pass leaves them to its end (see
    /// [`crate::state::deferred_keys`]); a pass's end calls it too.
    pub(crate) fn refresh_stale_keys(&self) -> Result<(), EngineError> {
        let mut snapshot = self.snapshot().lock();
        self.refresh_keys(&mut snapshot)
    }

    fn refresh_keys(&self, snapshot: &mut Snapshot) -> Result<(), EngineError> {
        let timeline = self.refresh_timeline(snapshot);
        let later = self.deferred_keys().current();
        self.indexer()
            .refresh_keys(snapshot, &timeline, |c| later.contains(c))
            .map(drop)
    }

    /// Writes one record to disk, without indexing it (see
    /// [`crate::MemoryClient::write_then_index`]).
    pub(crate) fn write_unindexed(
        &self,
        record: MemoryRecord,
    ) -> Result<StoredMemory, EngineError> {
        let file = self.store().write(&record)?;
        self.note_for_git([&file.path]);
        Ok(StoredMemory {
            record,
            path: file.path,
        })
    }

    /// Soft-deletes memory files (moving them under `deleted/`, marked with `replaced_by`
    /// where given) and takes them out of the index. Files already gone are skipped.
    pub(crate) fn tombstone(
        &self,
        files: &[(PathBuf, Option<MemoryId>)],
    ) -> Result<Vec<PathBuf>, EngineError> {
        let files: Vec<(PathBuf, Option<MemoryId>, Option<String>)> = files
            .iter()
            .map(|(path, replaced_by)| (path.clone(), *replaced_by, None))
            .collect();
        self.retire(&files)
    }

    /// [`tombstone`](Self::tombstone), each file with why it was retired where that is
    /// known (its tombstone's `reason`).
    pub(crate) fn retire(
        &self,
        files: &[(PathBuf, Option<MemoryId>, Option<String>)],
    ) -> Result<Vec<PathBuf>, EngineError> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let mut snapshot = self.snapshot().lock();
        let mut tombstones = Vec::new();
        let mut ids = Vec::new();
        let result = (|| {
            for (path, replaced_by, reason) in files {
                if !path.is_file() {
                    continue;
                }
                let id = self.store().read(path)?.record.id;
                let tombstone =
                    self.store()
                        .soft_delete_because(path, *replaced_by, reason.as_deref())?;
                self.note_for_git([path, &tombstone]);
                tombstones.push(tombstone);
                snapshot.remove(self.store().relative(path).as_ref());
                ids.push(id);
            }
            self.index().delete(&ids)?;
            self.refresh_keys(&mut snapshot)
        })();
        self.refresh_timeline(&snapshot);
        result.map(|()| tombstones)
    }

    /// Re-syncs the paths the watcher saw change (or everything, when it asks to rescan).
    pub(crate) fn apply_file_changes(&self, changes: &FileChanges) -> Result<(), EngineError> {
        match &self.git() {
            Some(git) if changes.rescan => git.note_everything(),
            Some(git) => git.note_changed(&changes.paths),
            None => {}
        }
        // Read before locking: writers and readers by id wait on the snapshot lock, and no
        // file the watcher reports should make them wait for a disk read.
        let reads: Vec<(&PathBuf, FileRead)> = match changes.rescan {
            true => Vec::new(),
            false => changes
                .paths
                .iter()
                .filter(|p| self.store().locate(p).is_ok_and(|(l, _)| !l.tombstone))
                .map(|p| (p, read_file(self.store(), p)))
                .collect(),
        };
        // Embedded before locking too. A file that does not parse is skipped under the lock;
        // an embedder that fails here fails again there, at the file it fails on, after the
        // changes before it are taken in.
        let records: Vec<MemoryRecord> = reads
            .iter()
            .filter_map(|(path, read)| match read {
                FileRead::Bytes(bytes) => self.store().parse(path, bytes).ok(),
                _ => None,
            })
            .map(|memory| memory.record)
            .collect();
        let ahead = self
            .indexer()
            .embed_ahead(&records, KeptKeys::default())
            .unwrap_or_default();
        let mut snapshot = self.snapshot().lock();
        let result = self.sync_paths(&mut snapshot, reads, changes.rescan, &ahead);
        self.refresh_timeline(&snapshot);
        result
    }

    fn sync_paths(
        &self,
        snapshot: &mut Snapshot,
        reads: Vec<(&PathBuf, FileRead)>,
        rescan: bool,
        ahead: &EmbeddedAhead,
    ) -> Result<(), EngineError> {
        let indexer = self.indexer().with_ahead(ahead);
        if rescan {
            indexer.sync(snapshot, &mut |_| {})?;
            return Ok(());
        }
        for (path, read) in reads {
            let change = indexer.sync_path(snapshot, path, read)?;
            if change != PathChange::Ignored && change != PathChange::Unchanged {
                info!(file = %path.display(), ?change, "index follows a file change");
            }
        }
        self.refresh_keys(snapshot)
    }

    /// Brings the whole index in step with the files again (after its server was lost).
    pub(crate) fn resync_index(&self) -> Result<SyncReport, EngineError> {
        let mut snapshot = self.snapshot().lock();
        let result = self.indexer().sync(&mut snapshot, &mut |_| {});
        self.refresh_timeline(&snapshot);
        result
    }

    /// Indexes files written earlier by [`Engine::write_unindexed`]; a failure is logged, as
    /// the next start-up sync indexes them anyway.
    pub(crate) fn index_later(&self, paths: BTreeSet<PathBuf>) {
        let changes = FileChanges {
            paths,
            rescan: false,
        };
        // The watcher may have indexed them already; then this finds them unchanged.
        if let Err(e) = self.apply_file_changes(&changes) {
            warn!("cannot index a turn now ({e}); the next start indexes it");
        }
    }

    /// Files the next commit must stage (see [`mnemo_git::Versioning::commit_noted`]).
    fn note_for_git<'p>(&self, paths: impl IntoIterator<Item = &'p PathBuf>) {
        if let Some(git) = &self.git() {
            git.note_changed(paths);
        }
    }

    /// The indexer over this engine's store, embedder and index.
    pub(crate) fn indexer(&self) -> Indexer<'_> {
        Indexer {
            store: self.store(),
            embedder: self.embedder(),
            lexical: self.lexical(),
            index: self.index().as_ref(),
            scheme: self.key_scheme().scheme,
            scheme_description: self.key_scheme().description.clone(),
            vocabulary: self.vocabulary().as_deref(),
            model_words: self.key_scheme().model_words.as_deref(),
            ahead: None,
        }
    }

    /// The turn timeline as of the last change; searches read it without waiting for writers.
    pub(crate) fn timeline(&self) -> Arc<Timeline> {
        self.timeline_cell()
            .read()
            .map(|t| Arc::clone(&t))
            .unwrap_or_default()
    }

    /// The turn timeline of `snapshot`, rebuilt if the snapshot changed since it was built.
    fn refresh_timeline(&self, snapshot: &Snapshot) -> Arc<Timeline> {
        let current = self.timeline();
        if current.generation == snapshot.generation {
            return current;
        }
        let timeline = Arc::new(current.refresh(snapshot));
        *self
            .timeline_cell()
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::clone(&timeline);
        timeline
    }

    /// The file of the live memory with this id, from the snapshot.
    pub(crate) fn path_of(&self, id: MemoryId) -> Option<PathBuf> {
        let snapshot = self.snapshot().lock();
        snapshot
            .path_of(id)
            .map(|path| self.store().root().join(path))
    }
}
