//! The memories one at a time, as the API reads and changes them: searched, listed, read,
//! deleted and edited under their conversation's lock, written as given, checked against
//! the index, and their git history. [`MemoryWing`] is the handle ([`Engine::memories`]);
//! every call runs its blocking work off the async runtime.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemo_core::{ConversationId, MemoryId, MemoryRecord};
use mnemo_store::{layout, StoredMemory};
use tracing::warn;

use crate::blocking::blocking;
use crate::engine::{Consistency, Engine, MemoryCheck};
use crate::error::EngineError;
use crate::index::watcher::{self, WatcherHandle};
use crate::retrieval::{ResolvedSearch, SearchHit, SearchRequest, Searched};

/// The memories' handle on the engine ([`Engine::memories`]).
#[derive(Clone)]
pub(crate) struct MemoryWing {
    engine: Arc<Engine>,
}

impl Engine {
    /// Lends the memories, one at a time.
    pub(crate) fn memories(self: &Arc<Self>) -> MemoryWing {
        MemoryWing {
            engine: self.clone(),
        }
    }
}

impl MemoryWing {
    pub(crate) async fn search(
        &self,
        request: SearchRequest,
    ) -> Result<Vec<SearchHit>, EngineError> {
        Ok(self.search_judged(request).await?.hits)
    }

    /// [`search`](Self::search), saying also whether memories were found and withheld
    /// below the relevance floor: what the chat path tells the model.
    pub(crate) async fn search_judged(
        &self,
        request: SearchRequest,
    ) -> Result<Searched, EngineError> {
        let settings = request.resolve(self.engine.config())?;
        let expansion = self.expand_query(&request, &settings).await;
        self.engine
            .blocking(move |engine| engine.read(&request, &settings, expansion.as_deref()))
            .await
    }

    /// Words an answer to the query would use, from the upstream LLM, when
    /// `retrieval.query_expansion` is on. A search never fails for want of them: no upstream,
    /// an error or a late answer (past `query_expansion_timeout_ms`) leaves the query as it is.
    pub(crate) async fn expand_query(
        &self,
        request: &SearchRequest,
        settings: &ResolvedSearch,
    ) -> Option<String> {
        let tuning = &self.engine.config().retrieval;
        let llm = self
            .engine
            .llm()
            .as_ref()
            .filter(|_| tuning.query_expansion)?;
        if settings.top_k == 0 || request.query.trim().is_empty() {
            return None;
        }
        let wait = std::time::Duration::from_millis(tuning.query_expansion_timeout_ms);
        crate::retrieval::answer_words::ask(llm, &request.query, wait).await
    }

    pub(crate) async fn add_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        self.engine
            .blocking(move |engine| engine.write_records(records))
            .await
    }

    /// Writes one record to disk now and indexes it in the background: a chat request waits
    /// for the user's turn to be durable, not for its embedding. Should the process die
    /// first, the next start-up sync indexes the file.
    pub(crate) async fn write_then_index(
        &self,
        record: MemoryRecord,
    ) -> Result<StoredMemory, EngineError> {
        let memory = self
            .engine
            .blocking(move |engine| engine.write_unindexed(record))
            .await?;
        self.index_soon(memory.path.clone());
        Ok(memory)
    }

    /// Indexes `path` in the background, with every other turn written meanwhile: one task
    /// at a time drains what has queued up, so under load the index, the timeline and the
    /// keys are brought up to date once per batch rather than once per turn (each is a
    /// pass over the whole snapshot, under its lock).
    fn index_soon(&self, path: PathBuf) {
        if !self.engine.turns_to_index().push(path) {
            return;
        }
        let engine = self.engine.clone();
        self.engine.background().spawn(async move {
            while let Some(paths) = engine.turns_to_index().take() {
                let engine = engine.clone();
                let _ = blocking(move || {
                    engine.index_later(paths);
                    Ok(())
                })
                .await;
            }
        });
    }

    pub(crate) async fn list(
        &self,
        conversation: Option<ConversationId>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        self.engine
            .blocking(move |engine| {
                let scan = match &conversation {
                    Some(c) => engine.store().scan_conversation(c),
                    None => engine.store().scan(),
                };
                Ok(scan.memories)
            })
            .await
    }

    pub(crate) async fn get(&self, id: MemoryId) -> Result<Option<StoredMemory>, EngineError> {
        self.engine
            .blocking(move |engine| {
                let Some(path) = engine.path_of(id) else {
                    return Ok(None);
                };
                match engine.store().read(&path) {
                    Ok(memory) => Ok(Some(memory)),
                    // Gone since the snapshot was written: the watcher will catch up.
                    Err(mnemo_store::StoreError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .await
    }

    pub(crate) async fn delete(&self, id: MemoryId) -> Result<Option<PathBuf>, EngineError> {
        self.delete_checked(id, &|_| Ok(())).await
    }

    /// [`delete`](Self::delete), once `check` accepts the memory as it is under the lock.
    pub(crate) async fn delete_checked(
        &self,
        id: MemoryId,
        check: MemoryCheck<'_>,
    ) -> Result<Option<PathBuf>, EngineError> {
        let Some((memory, _turn)) = self.lock_live(id, check).await? else {
            return Ok(None);
        };
        self.engine
            .blocking(move |engine| {
                let conversation = memory.record.conversation_id.clone();
                let tombstone = engine.tombstone(&[(memory.path, None)])?.pop();
                engine.commit(&format!("{conversation}: 1 deleted on request"));
                Ok(tombstone)
            })
            .await
    }

    pub(crate) async fn edit(
        &self,
        id: MemoryId,
        content: String,
    ) -> Result<Option<StoredMemory>, EngineError> {
        self.edit_checked(id, content, &|_| Ok(())).await
    }

    /// [`edit`](Self::edit), once `check` accepts the memory as it is under the lock.
    pub(crate) async fn edit_checked(
        &self,
        id: MemoryId,
        content: String,
        check: MemoryCheck<'_>,
    ) -> Result<Option<StoredMemory>, EngineError> {
        let content = content.trim().to_owned();
        if content.is_empty() {
            return Err(EngineError::InvalidInput(
                "a memory's text cannot be empty; delete the memory instead".into(),
            ));
        }
        let Some((memory, _turn)) = self.lock_live(id, check).await? else {
            return Ok(None);
        };
        if memory.record.content == content {
            return Ok(Some(memory));
        }
        self.engine
            .blocking(move |engine| {
                let conversation = memory.record.conversation_id.clone();
                let record = MemoryRecord {
                    content,
                    ..memory.record
                };
                let edited = engine.rewrite_record(&memory.path, record)?;
                engine.commit(&format!("{conversation}: 1 edited on request"));
                Ok(Some(edited))
            })
            .await
    }

    /// Live memory `id` with its conversation's write lock held (no write-path pass changes
    /// it meanwhile), once `check` (a caller's scope) accepts it as it is under the lock:
    /// what is checked is what is changed. `None` when there is no such memory.
    async fn lock_live(
        &self,
        id: MemoryId,
        check: MemoryCheck<'_>,
    ) -> Result<Option<(StoredMemory, tokio::sync::OwnedMutexGuard<()>)>, EngineError> {
        let Some(seen) = self.get(id).await? else {
            return Ok(None);
        };
        let conversation = seen.record.conversation_id;
        let turn = self
            .engine
            .conversation_lock(&conversation)
            .lock_owned()
            .await;
        // Again under the lock: a pass may have replaced or deleted it meanwhile.
        match self.get(id).await? {
            Some(memory) if memory.record.conversation_id == conversation => {
                check(&memory)?;
                Ok(Some((memory, turn)))
            }
            _ => Ok(None),
        }
    }

    pub(crate) async fn verify(&self) -> Result<Consistency, EngineError> {
        self.engine
            .blocking(move |engine| {
                let _writes = engine.snapshot().lock();
                let scan = engine.store().scan();
                let files: HashSet<MemoryId> = scan.memories.iter().map(|m| m.record.id).collect();
                let points: HashSet<MemoryId> = engine.index().ids()?.into_iter().collect();
                let mut missing: Vec<_> = files.difference(&points).copied().collect();
                let mut orphans: Vec<_> = points.difference(&files).copied().collect();
                missing.sort();
                orphans.sort();
                Ok(Consistency {
                    files: files.len(),
                    points: points.len(),
                    missing,
                    orphans,
                    skipped: scan.skipped.into_iter().map(|s| s.reason).collect(),
                })
            })
            .await
    }

    pub(crate) fn start_watcher(&self) -> Result<WatcherHandle, EngineError> {
        let engine = self.engine.clone();
        watcher::start(&self.engine.store().entries_dir(), move |changes| {
            if let Err(e) = engine.apply_file_changes(&changes) {
                warn!("could not apply file changes to the index: {e}");
            }
        })
    }

    pub(crate) async fn history(
        &self,
        id: MemoryId,
        limit: usize,
    ) -> Result<Vec<mnemo_git::FileVersion>, EngineError> {
        self.engine
            .blocking(move |engine| match &engine.git() {
                Some(git) => Ok(git.history(|path| layout::is_file_of(path, id), limit)?),
                None => Ok(Vec::new()),
            })
            .await
    }

    pub(crate) async fn log(
        &self,
        conversation: Option<ConversationId>,
        limit: usize,
    ) -> Result<Vec<mnemo_git::CommitInfo>, EngineError> {
        self.engine
            .blocking(move |engine| {
                let git = engine.git().as_ref().ok_or_else(no_git)?;
                let prefix = conversation.map(|c| layout::conversation_dir(Path::new(""), &c));
                Ok(git.log(prefix.as_deref(), limit)?)
            })
            .await
    }

    pub(crate) async fn show(
        &self,
        rev: String,
        path: Option<PathBuf>,
    ) -> Result<mnemo_git::Shown, EngineError> {
        self.engine
            .blocking(move |engine| {
                let git = engine.git().as_ref().ok_or_else(no_git)?;
                Ok(git.show(&rev, path.as_deref())?)
            })
            .await
    }

    pub(crate) async fn index_size(&self) -> Result<usize, EngineError> {
        self.engine
            .blocking(move |engine| Ok(engine.index().count(&mnemo_index::Filter::all())?))
            .await
    }
}

/// The answer to a history call on a store without git versioning.
fn no_git() -> EngineError {
    EngineError::InvalidInput(
        "git versioning is off for this store (enable_git_versioning = false)".into(),
    )
}
