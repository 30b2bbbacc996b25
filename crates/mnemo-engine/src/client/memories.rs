//! The memories through the client: searched, added (through the write path, or as given),
//! listed, read, deleted, edited, their history. Each call lends the wing that does it.

use std::path::PathBuf;

use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Metadata};
use mnemo_store::StoredMemory;

use crate::client::MemoryClient;
use crate::engine::Consistency;
use crate::error::EngineError;
use crate::index::watcher::WatcherHandle;
use crate::retrieval::{SearchHit, SearchRequest};
use crate::write::WriteReport;

impl MemoryClient {
    /// The memories of the request's conversation and of `global` that best answer its
    /// query, best first (see `crate::retrieval` for the stages). Summaries are not
    /// searched.
    pub async fn search(&self, request: SearchRequest) -> Result<Vec<SearchHit>, EngineError> {
        self.engine.memories().search(request).await
    }

    /// Writes fully formed records (any role, any time) and indexes them, as they are: no
    /// reconciliation, summary or commit (see [`MemoryClient::add`] for that).
    pub async fn add_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        self.engine.memories().add_records(records).await
    }

    /// Live memories of one conversation (or of all), oldest first.
    pub async fn list(
        &self,
        conversation: Option<ConversationId>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        self.engine.memories().list(conversation).await
    }

    /// The live memory with this id, if there is one.
    pub async fn get(&self, id: MemoryId) -> Result<Option<StoredMemory>, EngineError> {
        self.engine.memories().get(id).await
    }

    /// Soft-deletes a memory (its file moves under `deleted/`) and commits. Returns the
    /// tombstone's path, or `None` when no live memory has this id.
    pub async fn delete(&self, id: MemoryId) -> Result<Option<PathBuf>, EngineError> {
        self.engine.memories().delete(id).await
    }

    /// Replaces the text of live memory `id` in its file, front matter kept, then indexes
    /// and commits it: what a hand edit does, done by mnemo. Returns the memory as written,
    /// or `None` when no live memory has this id.
    pub async fn edit(
        &self,
        id: MemoryId,
        content: String,
    ) -> Result<Option<StoredMemory>, EngineError> {
        self.engine.memories().edit(id, content).await
    }

    /// Compares the index with the files: every live memory has its point, and no point
    /// lacks a file.
    pub async fn verify(&self) -> Result<Consistency, EngineError> {
        self.engine.memories().verify().await
    }

    /// Starts following hand edits of the files (see `crate::index::watcher`). The watch lasts as
    /// long as the returned handle.
    pub fn start_watcher(&self) -> Result<WatcherHandle, EngineError> {
        self.engine.memories().start_watcher()
    }

    /// Every version of one memory in git, newest first (empty without git versioning).
    pub async fn history(
        &self,
        id: MemoryId,
        limit: usize,
    ) -> Result<Vec<mnemo_git::FileVersion>, EngineError> {
        self.engine.memories().history(id, limit).await
    }

    /// The store's git history (of one conversation, if given), newest first.
    pub async fn log(
        &self,
        conversation: Option<ConversationId>,
        limit: usize,
    ) -> Result<Vec<mnemo_git::CommitInfo>, EngineError> {
        self.engine.memories().log(conversation, limit).await
    }

    /// A commit, or a file as it was at a revision.
    pub async fn show(
        &self,
        rev: String,
        path: Option<PathBuf>,
    ) -> Result<mnemo_git::Shown, EngineError> {
        self.engine.memories().show(rev, path).await
    }

    /// Points in the index.
    pub async fn index_size(&self) -> Result<usize, EngineError> {
        self.engine.memories().index_size().await
    }
    /// Runs the write path for a turn whose messages are already on disk: extraction from
    /// the user's message, then reconciliation, summary, eviction and a commit.
    pub async fn learn_from_turn(
        &self,
        conversation: &ConversationId,
        user_turn: Option<&StoredMemory>,
        turns_written: usize,
    ) -> Result<WriteReport, EngineError> {
        self.engine
            .write()
            .learn_from_turn(conversation, user_turn, turns_written)
            .await
    }

    /// The facts a pass of the write path would draw from the user's `message` in
    /// `conversation` (extraction, then grounding), without writing anything: the facts, and
    /// a report with what was extracted and refused. What `mnemo eval locomo --observations
    /// extracted` measures the read path with.
    pub async fn extract_facts(
        &self,
        conversation: &ConversationId,
        message: &str,
    ) -> Result<(Vec<String>, WriteReport), EngineError> {
        self.engine
            .write()
            .extract_facts(conversation, message)
            .await
    }

    /// Remembers each text as a fact of `conversation`: reconciled with what is already
    /// known (when an LLM is configured; otherwise added as is), then summary, eviction and a
    /// commit. Returns when every change is on disk and searchable.
    pub async fn add(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
    ) -> Result<WriteReport, EngineError> {
        self.engine.write().add(texts, conversation).await
    }

    /// [`add`](Self::add), with `metadata` on every fact the add writes (a new fact, or the
    /// new version of one it updates), so searches can filter on it.
    pub async fn add_with_metadata(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
        metadata: Metadata,
    ) -> Result<WriteReport, EngineError> {
        self.engine
            .write()
            .add_with_metadata(texts, conversation, metadata)
            .await
    }

    /// Why a memory shows no versions: the words every front end answers with.
    pub fn no_history(&self, id: MemoryId) -> String {
        let why = match (
            &self.engine.git(),
            self.engine.config().enable_git_versioning,
        ) {
            (Some(_), _) => "",
            (None, true) => {
                ": git versioning is off for this run (the repository could not be opened)"
            }
            (None, false) => {
                ": git versioning is off for this store (enable_git_versioning = false)"
            }
        };
        format!("no history for memory {id}{why}")
    }
}
