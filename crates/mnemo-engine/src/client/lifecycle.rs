//! The client's life around its work: what it runs in the background, waiting for it,
//! stopping it and resuming it at the next start, following hand edits, and what it was
//! opened with.

use std::time::Duration;

use mnemo_core::Config;
use mnemo_llm::LlmClient;
use mnemo_store::FileStore;

use crate::client::MemoryClient;
use crate::engine::IndexBackend;
use crate::error::EngineError;
use crate::index::sync::SyncReport;
use crate::index::vocabulary::BuildReport;

impl MemoryClient {
    /// The configuration the client was opened with.
    pub fn config(&self) -> &Config {
        self.engine.config()
    }

    /// The Markdown store.
    pub fn store(&self) -> &FileStore {
        self.engine.store()
    }

    /// Waits until the vocabulary of what the index held at opening is built (vocabulary
    /// expansion, `crate::index::vocabulary`), and says what the build did; `None` when expansion
    /// is off or the build failed. Searches meanwhile expand with fewer words: for one-off
    /// searches and measurements that must not depend on how soon they start.
    pub async fn vocabulary_built(&self) -> Option<BuildReport> {
        self.engine.vocabulary_built().await
    }

    /// What the start-up sync found and did.
    pub fn startup_sync(&self) -> &SyncReport {
        self.engine.startup_sync()
    }

    /// Where the index lives.
    pub fn index_backend(&self) -> &IndexBackend {
        self.engine.index_backend()
    }

    /// Whether the store is versioned in git, and the last error doing so (an unopenable
    /// repository, or the last commit's failure while no later one has succeeded).
    pub fn versioning(&self) -> (bool, Option<String>) {
        self.engine.versioning()
    }

    /// Room left on the disk that holds the store.
    pub async fn free_space(&self) -> Result<mnemo_store::FreeSpace, EngineError> {
        self.engine
            .blocking(|engine| Ok(engine.store().free_space()?))
            .await
    }

    /// Whether a cross-encoder is loaded.
    pub fn has_reranker(&self) -> bool {
        self.engine.reranker().is_some()
    }

    /// The upstream LLM, when one is configured.
    pub fn upstream(&self) -> Option<&LlmClient> {
        self.engine.llm().as_ref()
    }

    /// Write-path passes and turn writes queued or running in the background.
    pub fn background_tasks(&self) -> usize {
        self.engine.write().background_tasks()
    }

    /// How long the embedding model has run since it was loaded (see
    /// [`mnemo_embed::Embedder::busy`]): the share of wall time it takes tells when the model
    /// is what a busy server waits for.
    pub fn embedding_busy(&self) -> Duration {
        self.engine.embedder().busy()
    }

    /// Waits until every write the client has queued in the background is done.
    pub async fn wait_idle(&self) {
        self.engine.write().wait_idle().await
    }

    /// Like [`wait_idle`](Self::wait_idle), for at most `grace`: returns whether everything
    /// finished. Passes still running or waiting stay journaled (`crate::write::queue`) for the
    /// next start to resume; the index snapshot is written either way.
    pub async fn wait_idle_for(&self, grace: Duration) -> bool {
        self.engine.write().wait_idle_for(grace).await
    }

    /// Resumes the passes an earlier process left queued (at most once per start; `serve`
    /// calls it). Returns how many were found.
    pub fn resume_pending_passes(&self) -> usize {
        self.engine.write().resume_pending_passes()
    }

    /// Write-path passes journaled and not yet done.
    pub fn pending_passes(&self) -> usize {
        self.engine.write().pending_passes()
    }

    /// Stops the passes still running or waiting, leaving their entries journaled for the
    /// next start: what a shutdown does once its grace period is over, before it stops the
    /// LLM they would otherwise run on.
    pub fn stop_background_passes(&self) {
        self.engine.write().stop_background_passes()
    }
}
