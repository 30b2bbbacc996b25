//! Search as of a git revision: the memories as they were at a commit, ranked by the same
//! read path as today's.
//!
//! Why it is built this way. The index holds only the live files, and what a memory is
//! indexed under depends on its neighbours (a turn's key borrows from the turns beside it),
//! the store's vocabulary and the BM25 statistics of everything else: scoring an old
//! version of one memory against today's index would not answer as the store would have.
//! So the engine writes the commit's memory files (live ones under `entries/`; tombstones,
//! sessions, context state and agents' notes are left out) into a temporary folder
//! ([`mnemo_git::Versioning::export`], bounded by [`EXPORT_LIMITS`]) and opens a second,
//! read-only engine on it: the same configuration and models (lent, not loaded again), with
//! git off, the embedded index in that folder, no upstream LLM and no watcher. Its start-up
//! sync indexes the revision's memories exactly as a store holding them would, and the real
//! read path answers. Query expansion, when on, asks the live engine's upstream, so it
//! works as in a search of today's memories; recency is measured from the commit's time
//! unless the request says otherwise, so the ranking is the one the store gave then.
//!
//! What it costs: the first question about a revision embeds every memory it held (the
//! store's `vocabulary.bin` is copied in, so only words it lacks are embedded again). The
//! engines of the last `KEPT` revisions asked about stay open, by commit id (so `HEAD~1`
//! and its hash share one), and later questions about them cost a search. An engine falls
//! out of the cache when newer revisions push it out, on
//! [`crate::MemoryClient::close_revisions`], or when the client closes; its folder goes with it.
//! A revision is a commit, so it never changes: a cached engine never goes stale.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use mnemo_core::Config;
use mnemo_git::{CommitInfo, ExportLimits, GitError};
use mnemo_store::layout::{self, Location};
use tracing::{info, warn};

use crate::api_types::{AsOfCommit, AsOfSearch};
use crate::blocking::blocking;
use crate::engine::{Engine, OpenOptions, RevisionEngine, RevisionSlot};
use crate::error::EngineError;
use crate::index::vocabulary_file::VocabularyFile;
use crate::retrieval::{SearchHit, SearchRequest};

/// Revisions whose engines stay open.
pub(crate) const KEPT: usize = 2;

/// The most one revision's export writes: files, bytes of one (a larger one is skipped, as
/// the store skips it) and bytes in all.
pub(crate) const EXPORT_LIMITS: ExportLimits = ExportLimits {
    max_files: 200_000,
    max_file_bytes: mnemo_store::untrusted::MAX_MEMORY_FILE_BYTES,
    max_total_bytes: 1 << 30,
};

/// The longest revision accepted (git names are short; this is no place for a document).
const MAX_REV_BYTES: usize = 256;

/// The handle on the engine of searches as of a revision ([`Engine::as_of`]).
#[derive(Clone)]
pub(crate) struct AsOfWing {
    pub(crate) engine: Arc<Engine>,
}

impl Engine {
    /// Lends the searches as of a revision.
    pub(crate) fn as_of(self: &Arc<Self>) -> AsOfWing {
        AsOfWing {
            engine: self.clone(),
        }
    }
}

impl AsOfWing {
    pub(crate) async fn search_as_of(
        &self,
        rev: &str,
        mut request: SearchRequest,
    ) -> Result<AsOfSearch, EngineError> {
        request.validate()?;
        let commit = self.commit_of(rev).await?;
        request.now = request.now.or(Some(commit.time));
        let settings = request.resolve(self.engine.config())?;
        let engine = self.revision_engine(commit).await?;
        let expansion = self
            .engine
            .memories()
            .expand_query(&request, &settings)
            .await;
        let revision = engine.clone();
        let hits = blocking(move || {
            let hits = revision
                .engine
                .read(&request, &settings, expansion.as_deref())?
                .hits;
            let store = &revision.engine.store();
            Ok(hits
                .into_iter()
                .map(|hit| SearchHit {
                    path: store.relative(&hit.path).as_ref().into(),
                    ..hit
                })
                .collect())
        })
        .await?;
        Ok(AsOfSearch {
            as_of: AsOfCommit::from(engine.commit.clone()),
            hits,
        })
    }

    pub(crate) fn close_revisions(&self) {
        self.engine.revisions().clear();
    }

    /// The commit `rev` resolves to.
    async fn commit_of(&self, rev: &str) -> Result<CommitInfo, EngineError> {
        check_rev(rev)?;
        let rev = rev.to_owned();
        self.engine
            .blocking(move |engine| {
                let git = versioned(&engine, &rev)?;
                git.commit_of(&rev).map_err(revision_error)
            })
            .await
    }

    /// The engine of `commit`: the one kept, or a new one.
    async fn revision_engine(
        &self,
        commit: CommitInfo,
    ) -> Result<Arc<RevisionEngine>, EngineError> {
        let id = commit.id.clone();
        let slot = self
            .engine
            .revisions()
            .slot(&id, KEPT, RevisionSlot::default);
        let opened = slot
            .get_or_try_init(|| self.open_revision(commit))
            .await
            .cloned();
        if opened.is_err() {
            // Unless another search replaced it meanwhile.
            self.engine
                .revisions()
                .remove_if(&id, |kept| Arc::ptr_eq(kept, &slot));
        }
        opened
    }

    /// Exports `commit`'s memories and opens an engine on them, its vocabulary built.
    async fn open_revision(&self, commit: CommitInfo) -> Result<Arc<RevisionEngine>, EngineError> {
        let engine = self
            .engine
            .blocking(move |engine| RevisionEngine::open(&engine, commit))
            .await?;
        // Searches then expand with every word of the revision, not with what a build in
        // progress has reached: an answer must not depend on how soon it was asked.
        engine.engine.vocabulary_built().await;
        Ok(Arc::new(engine))
    }
}

impl RevisionEngine {
    /// Writes the memory files of `commit` into a new temporary folder and opens an engine
    /// on them with `live`'s configuration and models. Blocks.
    fn open(live: &Engine, commit: CommitInfo) -> Result<Self, EngineError> {
        let started = Instant::now();
        let git = versioned(live, &commit.short_id)?;
        let dir = tempfile::Builder::new()
            .prefix("mnemo-as-of-")
            .tempdir()
            .map_err(|source| EngineError::Io {
                action: "cannot create a folder for a search as of a revision in",
                path: std::env::temp_dir(),
                source,
            })?;
        let export = git
            .export(&commit.id, dir.path(), is_memory_file, &EXPORT_LIMITS)
            .map_err(revision_error)?;
        for path in &export.oversized {
            warn!(commit = %commit.short_id, file = %path, "a memory file over the size the store reads is left out of the search as of its commit");
        }
        copy_vocabulary(live, dir.path());
        let config = revision_config(live.config(), dir.path());
        let engine = Engine::open(config, OpenOptions::default(), Some(live.shared_models()))?;
        info!(
            commit = %commit.short_id,
            files = export.files,
            seconds = started.elapsed().as_secs_f32(),
            "opened the store as of a revision"
        );
        Ok(Self {
            engine,
            commit,
            _dir: dir,
        })
    }
}

/// Whether a git path is a live memory's file: what a store as of a revision holds.
fn is_memory_file(path: &str) -> bool {
    Location::parse(Path::new(path)).is_some_and(|location| !location.tombstone)
}

/// `live`'s configuration for an engine over the store at `root`: nothing versioned,
/// watched or sent anywhere, the index embedded in `root`.
fn revision_config(live: &Config, root: &Path) -> Config {
    let mut config = live.clone();
    config.memory_path = root.to_owned();
    config.enable_git_versioning = false;
    config.start_watcher = false;
    config.index_url = None;
    config.index_api_key = None;
    config.openai_base_url = None;
    config.openai_api_key = None;
    config.retrieval.query_expansion = false;
    config
}

/// Copies the live store's word vectors to the store at `root`, so its vocabulary embeds
/// only words they lack; without them it embeds every word, said in the log.
fn copy_vocabulary(live: &Engine, root: &Path) {
    let file = VocabularyFile::new(
        live.store().vocabulary_path(),
        String::new(),
        live.embedder().dimension(),
    );
    if let Err(e) = file.copy_to(&root.join(layout::VOCABULARY_FILE)) {
        warn!("the store's vocabulary.bin is not reused for a search as of a revision: {e}");
    }
}

/// The store's versioning, or why a search as of `rev` cannot be had without it.
fn versioned<'e>(engine: &'e Engine, rev: &str) -> Result<&'e mnemo_git::Versioning, EngineError> {
    engine.git().as_ref().ok_or_else(|| {
        let why = if engine.config().enable_git_versioning {
            "git versioning is off for this run (the repository could not be opened)"
        } else {
            "git is off (enable_git_versioning = false)"
        };
        EngineError::InvalidInput(format!(
            "cannot search as of revision {rev:?}: this store is not versioned: {why}"
        ))
    })
}

/// Refused unless `rev` could name a revision.
fn check_rev(rev: &str) -> Result<(), EngineError> {
    if rev.trim().is_empty() {
        return Err(EngineError::InvalidInput(
            "as_of needs a revision: a commit hash or a prefix of one, HEAD~N, a branch".into(),
        ));
    }
    if rev.len() > MAX_REV_BYTES {
        return Err(EngineError::InvalidInput(format!(
            "a revision is at most {MAX_REV_BYTES} bytes, got {}",
            rev.len()
        )));
    }
    Ok(())
}

/// A git error of a search as of a revision, in the words front ends answer with: an
/// unknown revision is not found, a revision too large to export is the caller's to narrow;
/// neither names the store's path.
fn revision_error(error: GitError) -> EngineError {
    match error {
        GitError::NoRevision { rev, .. } => EngineError::NotFound(format!(
            "no revision {rev:?} in the store's history (give a commit hash or a prefix of one, \
             HEAD~N or a branch; `mnemo log` lists the commits)"
        )),
        GitError::ExportTooLarge { rev, limit, .. } => EngineError::InvalidInput(format!(
            "revision {rev} holds more than {limit} of memories, more than a search as of a \
             revision reads"
        )),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_live_memory_files_are_exported() {
        for path in [
            "entries/c1/facts/20260302T184005000Z__x.md",
            "entries/c1/turns/user/a.md",
            "entries/global/summaries/summary.md",
        ] {
            assert!(is_memory_file(path), "{path}");
        }
        for path in [
            "entries/c1/deleted/facts/a.md",
            "sessions/s1/log.jsonl",
            "agents/a/MEMORY.md",
            "conversations/c1/strategy.yaml",
            ".gitignore",
            "entries/c1/facts/a.txt",
        ] {
            assert!(!is_memory_file(path), "{path}");
        }
    }

    #[test]
    fn a_revision_engine_sends_nothing_anywhere() {
        let mut live = Config {
            openai_base_url: Some("http://127.0.0.1:1/v1".into()),
            index_url: Some("http://127.0.0.1:6334".into()),
            ..Config::default()
        };
        live.retrieval.query_expansion = true;
        let config = revision_config(&live, Path::new("/tmp/x"));
        assert_eq!(config.memory_path, Path::new("/tmp/x"));
        assert!(!config.enable_git_versioning && !config.start_watcher);
        assert!(config.index_url.is_none() && config.openai_base_url.is_none());
        assert!(!config.retrieval.query_expansion);
        assert_eq!(config.retrieval.reranker, live.retrieval.reranker);
    }
}
