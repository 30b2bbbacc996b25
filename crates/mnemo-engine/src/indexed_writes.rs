//! The engine's own writes to the memory files, each followed by the index at once.
//!
//! Every write holds the snapshot lock from its first file write until the snapshot records
//! the file, so the watcher, which takes the same lock, finds the file already indexed with
//! the same hash and does not index it a second time. The write path ([`crate::write`]) and
//! the chat turns ([`crate::chat`]) write through here; hand edits come in through
//! [`Engine::apply_file_changes`], which the watcher calls.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use mnemo_core::{MemoryId, MemoryRecord};
use mnemo_store::StoredMemory;
use tracing::{info, warn};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::index::snapshot::Snapshot;
use crate::index::sync::{read_file, FileRead, Indexer, PathChange, SyncReport};
use crate::index::timeline::Timeline;
use crate::index::watcher::FileChanges;

impl Engine {
    /// Writes fully formed records and indexes them before returning.
    pub(crate) fn write_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
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
        self.index_written(&mut snapshot, &written)?;
        Ok(written.into_iter().map(|(m, _)| m).collect())
    }

    /// Writes `record` over the live memory file at `path` (an edit: the file keeps its
    /// name) and indexes it before returning.
    pub(crate) fn rewrite_record(
        &self,
        path: &std::path::Path,
        record: MemoryRecord,
    ) -> Result<StoredMemory, EngineError> {
        let mut snapshot = self.snapshot().lock();
        let file = self.store().rewrite(path, &record)?;
        self.note_for_git([&file.path]);
        let written = [(
            StoredMemory {
                record,
                path: file.path,
            },
            file.sha256,
        )];
        self.index_written(&mut snapshot, &written)?;
        let [(memory, _)] = written;
        Ok(memory)
    }

    /// Indexes files just written (with their hashes), under the snapshot lock their
    /// writer holds.
    fn index_written(
        &self,
        snapshot: &mut Snapshot,
        written: &[(StoredMemory, String)],
    ) -> Result<(), EngineError> {
        let indexer = self.indexer();
        let indexed = indexer
            .index_memories(snapshot, written, &mut |_| {})
            .and_then(|()| {
                let timeline = self.refresh_timeline(snapshot);
                indexer.refresh_keys(snapshot, &timeline)
            });
        self.refresh_timeline(snapshot);
        indexed.map(drop)
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
                snapshot.files.remove(self.store().relative(path).as_ref());
                ids.push(id);
            }
            self.index().delete(&ids)?;
            snapshot.mark_changed();
            let timeline = self.refresh_timeline(&snapshot);
            self.indexer().refresh_keys(&mut snapshot, &timeline)?;
            Ok(())
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
        let mut snapshot = self.snapshot().lock();
        let result = self.sync_paths(&mut snapshot, reads, changes.rescan);
        self.refresh_timeline(&snapshot);
        result
    }

    fn sync_paths(
        &self,
        snapshot: &mut Snapshot,
        reads: Vec<(&PathBuf, FileRead)>,
        rescan: bool,
    ) -> Result<(), EngineError> {
        let indexer = self.indexer();
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
        let timeline = self.refresh_timeline(snapshot);
        indexer.refresh_keys(snapshot, &timeline)?;
        Ok(())
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
            batch_size: self.config().embed_batch_size,
            vocabulary: self.vocabulary().as_deref(),
            model_words: self.key_scheme().model_words.as_deref(),
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
        let timeline = Arc::new(Timeline::build(snapshot));
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
            .files
            .iter()
            .find(|(_, e)| e.id == id)
            .map(|(path, _)| self.store().root().join(path))
    }
}
