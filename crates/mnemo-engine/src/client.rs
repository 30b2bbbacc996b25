use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use chrono::Utc;
use mnemo_core::{Config, ConversationId, MemoryId, MemoryRecord};
use mnemo_embed::{Embedder, EmbedderConfig, Reranker, RerankerConfig};
use mnemo_git::{GitConfig, Versioning};
use mnemo_index::{EdgeIndex, EdgeIndexOptions, LexicalEncoder, LexicalOptions, VectorIndex};
use mnemo_llm::{LlmClient, LlmConfig};
use mnemo_store::{FileStore, StoredMemory};
use serde::Serialize;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::keys::KeyScheme;
use crate::retrieval::{self, Candidate, Retriever, SearchHit, SearchOptions};
use crate::sync::{self, Flusher, Indexer, Snapshot, SnapshotCell, SyncProgress, SyncReport};
use crate::timeline::Timeline;
use crate::watcher::{self, WatcherHandle};
use crate::EngineError;

/// Folder of the embedded index, under the memory path.
pub const INDEX_DIR: &str = "index";
const LOCK_FILE: &str = ".lock";

/// How to open a [`MemoryClient`] beyond its [`Config`].
#[derive(Default)]
pub struct OpenOptions {
    /// Called as the start-up sync embeds files (for progress bars).
    pub on_progress: Option<Box<dyn FnMut(SyncProgress) + Send>>,
    /// Throw the index away and rebuild it from the files (`mnemo reindex --full`). This also
    /// resets the index's write-ahead log.
    pub rebuild: bool,
}

/// Whether the index holds exactly the live memory files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consistency {
    /// Distinct memory ids among the live files.
    pub files: usize,
    pub points: usize,
    /// Files whose memory has no point.
    pub missing: Vec<MemoryId>,
    /// Points whose memory has no file.
    pub orphans: Vec<MemoryId>,
    /// Files that could not be read as memories.
    pub skipped: Vec<String>,
}

/// The memory engine as a library: cheap to clone, safe to share between tasks.
#[derive(Clone)]
pub struct MemoryClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) store: FileStore,
    pub(crate) embedder: Embedder,
    lexical: LexicalEncoder,
    /// The cross-encoder, when one is installed.
    reranker: Option<Reranker>,
    pub(crate) index: Arc<EdgeIndex>,
    /// The upstream LLM, when one is configured.
    pub(crate) llm: Option<LlmClient>,
    /// Git versioning of the store, when enabled.
    pub(crate) git: Option<Versioning>,
    /// Flushes the index and the snapshot in the background; stopped first on drop.
    flusher: Option<Flusher>,
    /// Guards every write to the index together with the snapshot that describes it.
    pub(crate) snapshot: Arc<SnapshotCell>,
    /// Held for the client's life: one process owns an index at a time. Declared after
    /// everything that holds the index, so it is released last.
    _lock: File,
    /// Turn order, rebuilt after writes; searches read it without waiting for writers.
    timeline: RwLock<Arc<Timeline>>,
    /// One lock per conversation: its write path runs one pass at a time.
    pub(crate) conversation_locks: Mutex<HashMap<ConversationId, Arc<tokio::sync::Mutex<()>>>>,
    /// Write-path passes running in the background (waited for on shutdown).
    pub(crate) background: TaskTracker,
    startup_sync: SyncReport,
}

impl MemoryClient {
    /// Opens the store, model and index named by `config`, and syncs the index with the files.
    pub async fn open(config: Config, options: OpenOptions) -> Result<Self, EngineError> {
        blocking(move || Self::open_blocking(config, options)).await
    }

    fn open_blocking(config: Config, mut options: OpenOptions) -> Result<Self, EngineError> {
        let store = FileStore::open(&config.memory_path)?;
        let paths = config.model_paths();
        let embedder = Embedder::load(&EmbedderConfig {
            threads: config.embed_threads,
            batch_size: config.embed_batch_size,
            ..EmbedderConfig::new(&paths.onnxruntime_library, &paths.embedding_model_dir)
        })?;
        let reranker = load_reranker(&config, &paths)?;
        let lexical = LexicalEncoder::new(LexicalOptions {
            k1: config.retrieval.bm25_k1,
            b: config.retrieval.bm25_b,
            avg_len: config.retrieval.bm25_avg_len,
        })?;
        let index_dir = store.root().join(INDEX_DIR);
        let lock = lock_index(&index_dir)?;
        store.remove_stale_temp_files();
        if options.rebuild {
            wipe_index(&index_dir, store.root())?;
        }
        let index = Arc::new(EdgeIndex::open(
            &index_dir,
            &EdgeIndexOptions::new(embedder.dimension()),
        )?);
        let mut snapshot = Snapshot::load(store.root());
        let mut progress = options.on_progress.take();
        let mut report_progress = |p: SyncProgress| {
            if let Some(f) = progress.as_mut() {
                f(p)
            }
        };
        let (scheme, scheme_description) = key_scheme(&config);
        let indexer = Indexer {
            store: &store,
            embedder: &embedder,
            lexical: &lexical,
            index: index.as_ref(),
            scheme,
            scheme_description,
            batch_size: config.embed_batch_size,
        };
        let startup_sync = indexer.sync(&mut snapshot, &mut report_progress)?;
        let timeline = Timeline::build(&snapshot);
        let snapshot = Arc::new(SnapshotCell::new(store.root(), snapshot, index.clone()));
        snapshot.flush()?;
        let flusher = SnapshotCell::spawn_flusher(&snapshot);
        let llm = upstream(&config)?;
        let git = if config.enable_git_versioning {
            let author = GitConfig {
                author_name: config.git_author_name.clone(),
                author_email: config.git_author_email.clone(),
            };
            Some(Versioning::open(store.root(), author)?)
        } else {
            None
        };
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                store,
                embedder,
                lexical,
                reranker,
                index,
                llm,
                git,
                flusher,
                snapshot,
                _lock: lock,
                timeline: RwLock::new(Arc::new(timeline)),
                conversation_locks: Mutex::new(HashMap::new()),
                background: TaskTracker::new(),
                startup_sync,
            }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn store(&self) -> &FileStore {
        &self.inner.store
    }

    /// What the start-up sync found and did.
    pub fn startup_sync(&self) -> &SyncReport {
        &self.inner.startup_sync
    }

    /// Compares the index with the files: every live memory has its point, and no point
    /// lacks a file.
    pub async fn verify(&self) -> Result<Consistency, EngineError> {
        let inner = self.inner.clone();
        blocking(move || {
            let _writes = inner.snapshot.lock();
            let scan = inner.store.scan();
            let files: HashSet<MemoryId> = scan.memories.iter().map(|m| m.record.id).collect();
            let points: HashSet<MemoryId> = inner.index.ids()?.into_iter().collect();
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

    /// Starts following hand edits of the files (see [`crate::watcher`]). The watch lasts as
    /// long as the returned handle.
    pub fn start_watcher(&self) -> Result<WatcherHandle, EngineError> {
        watcher::start(self.inner.clone())
    }

    /// Writes fully formed records (any role, any time) and indexes them, as they are: no
    /// reconciliation, summary or commit (see [`MemoryClient::add`] for that).
    pub async fn add_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        let inner = self.inner.clone();
        blocking(move || inner.add_records(records)).await
    }

    /// Writes one record to disk now and indexes it in the background: a chat request waits
    /// for the user's turn to be durable, not for its embedding. Should the process die
    /// first, the next start-up sync indexes the file.
    pub(crate) async fn write_then_index(
        &self,
        record: MemoryRecord,
    ) -> Result<StoredMemory, EngineError> {
        let inner = self.inner.clone();
        let memory = blocking(move || {
            let path = inner.store.write(&record)?;
            inner.note_for_git([&path]);
            Ok(StoredMemory { record, path })
        })
        .await?;
        let inner = self.inner.clone();
        let paths = BTreeSet::from([memory.path.clone()]);
        self.inner.background.spawn(async move {
            // The watcher may have indexed it already; then this finds it unchanged.
            if let Err(e) = blocking(move || inner.apply_file_changes(&paths, false)).await {
                warn!("cannot index a turn now ({e}); the next start indexes it");
            }
        });
        Ok(memory)
    }

    /// The memories of `conversation` and of `global` that best answer `query`, best first
    /// (see [`crate::retrieval`] for the stages). Summaries are not searched.
    pub async fn search(
        &self,
        query: &str,
        conversation: &ConversationId,
        options: SearchOptions,
    ) -> Result<Vec<SearchHit>, EngineError> {
        let inner = self.inner.clone();
        let query = query.to_owned();
        let conversation = conversation.clone();
        blocking(move || inner.search(&query, &conversation, &options)).await
    }

    /// Live memories of one conversation (or of all), oldest first.
    pub async fn list(
        &self,
        conversation: Option<ConversationId>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        let inner = self.inner.clone();
        blocking(move || {
            let scan = match &conversation {
                Some(c) => inner.store.scan_conversation(c),
                None => inner.store.scan(),
            };
            Ok(scan.memories)
        })
        .await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.flusher.take());
        if let Err(e) = self.snapshot.flush() {
            warn!(
                "cannot write the index snapshot on close: {e}; the next start re-checks the files"
            );
        }
    }
}

impl Inner {
    /// Soft-deletes memory files (moving them under `deleted/`, marked with `replaced_by`
    /// where given) and takes them out of the index. Files already gone are skipped.
    pub(crate) fn tombstone(
        &self,
        files: &[(PathBuf, Option<MemoryId>)],
    ) -> Result<Vec<PathBuf>, EngineError> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let mut snapshot = self.snapshot.lock();
        let mut tombstones = Vec::new();
        let mut ids = Vec::new();
        let result = (|| {
            for (path, replaced_by) in files {
                if !path.is_file() {
                    continue;
                }
                let id = self.store.read(path)?.record.id;
                let tombstone = self.store.soft_delete(path, *replaced_by)?;
                self.note_for_git([path, &tombstone]);
                tombstones.push(tombstone);
                snapshot
                    .files
                    .remove(&sync::relative_key(&self.store, path));
                ids.push(id);
            }
            self.index.delete(&ids)?;
            snapshot.mark_changed();
            let timeline = self.refresh_timeline(&snapshot);
            self.indexer().refresh_keys(&mut snapshot, &timeline)?;
            Ok(())
        })();
        self.refresh_timeline(&snapshot);
        result.map(|()| tombstones)
    }

    /// Files the next commit must stage (see [`Versioning::commit_noted`]).
    fn note_for_git<'p>(&self, paths: impl IntoIterator<Item = &'p PathBuf>) {
        if let Some(git) = &self.git {
            git.note_changed(paths);
        }
    }

    fn indexer(&self) -> Indexer<'_> {
        let (scheme, scheme_description) = key_scheme(&self.config);
        Indexer {
            store: &self.store,
            embedder: &self.embedder,
            lexical: &self.lexical,
            index: self.index.as_ref(),
            scheme,
            scheme_description,
            batch_size: self.config.embed_batch_size,
        }
    }

    /// The turn timeline of `snapshot`, rebuilt if the snapshot changed since it was built.
    fn refresh_timeline(&self, snapshot: &Snapshot) -> Arc<Timeline> {
        let current = self
            .timeline
            .read()
            .map(|t| Arc::clone(&t))
            .unwrap_or_default();
        if current.generation == snapshot.generation {
            return current;
        }
        let timeline = Arc::new(Timeline::build(snapshot));
        *self.timeline.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&timeline);
        timeline
    }

    pub(crate) fn add_records(
        &self,
        records: Vec<MemoryRecord>,
    ) -> Result<Vec<StoredMemory>, EngineError> {
        // Held from the first file write, so the watcher sees these files only once they are
        // recorded in the snapshot, and does not index them a second time.
        let mut snapshot = self.snapshot.lock();
        let mut written = Vec::with_capacity(records.len());
        for record in records {
            let path = self.store.write(&record)?;
            self.note_for_git([&path]);
            let bytes = std::fs::read(&path).map_err(|source| EngineError::Io {
                action: "cannot read back",
                path: path.clone(),
                source,
            })?;
            written.push((StoredMemory { record, path }, sync::sha256_hex(&bytes)));
        }
        let indexer = self.indexer();
        let indexed = indexer
            .index_memories(&mut snapshot, &written, &mut |_| {})
            .and_then(|()| {
                let timeline = self.refresh_timeline(&snapshot);
                indexer.refresh_keys(&mut snapshot, &timeline)
            });
        self.refresh_timeline(&snapshot);
        indexed?;
        Ok(written.into_iter().map(|(m, _)| m).collect())
    }

    /// Re-syncs the given paths (or everything, when `rescan`) after the files changed.
    pub(crate) fn apply_file_changes(
        &self,
        paths: &BTreeSet<PathBuf>,
        rescan: bool,
    ) -> Result<(), EngineError> {
        match &self.git {
            Some(git) if rescan => git.note_everything(),
            Some(git) => git.note_changed(paths),
            None => {}
        }
        let mut snapshot = self.snapshot.lock();
        let result = self.sync_paths(&mut snapshot, paths, rescan);
        self.refresh_timeline(&snapshot);
        result
    }

    fn sync_paths(
        &self,
        snapshot: &mut Snapshot,
        paths: &BTreeSet<PathBuf>,
        rescan: bool,
    ) -> Result<(), EngineError> {
        let indexer = self.indexer();
        if rescan {
            indexer.sync(snapshot, &mut |_| {})?;
            return Ok(());
        }
        for path in paths {
            let change = indexer.sync_path(snapshot, path)?;
            if change != sync::PathChange::Ignored && change != sync::PathChange::Unchanged {
                info!(file = %path.display(), ?change, "index follows a file change");
            }
        }
        let timeline = self.refresh_timeline(snapshot);
        indexer.refresh_keys(snapshot, &timeline)?;
        Ok(())
    }

    fn search(
        &self,
        query: &str,
        conversation: &ConversationId,
        options: &SearchOptions,
    ) -> Result<Vec<SearchHit>, EngineError> {
        options.validate()?;
        if options.top_k == 0 || query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let tuning = &self.config.retrieval;
        let user_filter = match &options.filter {
            Some(filter) => crate::filter::compile(filter)?,
            None => mnemo_index::Filter::all(),
        };
        let per_query = (options.top_k * 3).max(tuning.min_candidates);
        let queries = retrieval::candidate_queries(
            self.embedder.embed_one(query)?,
            self.lexical.query(query),
            &retrieval::scope_filters(conversation, &user_filter),
            per_query,
            tuning,
        );
        let results = queries
            .into_iter()
            .map(|(q, retriever)| Ok((retriever, self.index.query(&q)?)))
            .collect::<Result<Vec<(Retriever, _)>, EngineError>>()?;
        let mut candidates = retrieval::fuse(results, tuning.lexical_weight);
        let timeline = self
            .timeline
            .read()
            .map(|t| Arc::clone(&t))
            .unwrap_or_default();
        retrieval::smooth(&mut candidates, tuning.neighbour_weight, |id| {
            timeline.neighbours(id)
        });
        retrieval::boost_speaker(&mut candidates, query, tuning.speaker_boost);
        self.rerank(query, &mut candidates)?;
        if let Some(threshold) = options.score_threshold.or(self.config.score_threshold) {
            candidates.retain(|c| c.relevance >= threshold);
        }
        let mut weight = options.recency_weight.unwrap_or(self.config.recency_weight);
        if tuning.query_aware_recency && !retrieval::asks_about_now(query) {
            weight = 0.0;
        }
        let now = options.now.unwrap_or_else(Utc::now);
        retrieval::blend_recency(&mut candidates, weight, now);
        let lambda = options.mmr_lambda.unwrap_or(self.config.mmr_lambda);
        let chosen = retrieval::mmr(candidates, lambda, options.top_k, tuning.mmr_pool);
        Ok(chosen.into_iter().map(|c| self.search_hit(c)).collect())
    }

    /// Rescores the best candidates with the cross-encoder, when one is installed; the rest
    /// keep their order below them.
    fn rerank(&self, query: &str, candidates: &mut Vec<Candidate>) -> Result<(), EngineError> {
        let Some(reranker) = &self.reranker else {
            return Ok(());
        };
        let pool = self
            .config
            .retrieval
            .rerank_candidates
            .min(candidates.len());
        let rest = candidates.split_off(pool);
        let texts: Vec<&str> = candidates.iter().map(Candidate::content).collect();
        let logits = reranker.score(query, &texts)?;
        retrieval::apply_rerank(candidates, &logits);
        candidates.extend(rest.into_iter().map(|mut c| {
            c.relevance = 0.0;
            c
        }));
        Ok(())
    }

    fn search_hit(&self, candidate: Candidate) -> SearchHit {
        let created_at = candidate.created_at();
        let hit = candidate.hit;
        let text = |k: &str| {
            hit.payload
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let metadata = match hit.payload.get("metadata") {
            Some(serde_json::Value::Object(m)) => m.clone(),
            _ => Default::default(),
        };
        SearchHit {
            id: hit.id,
            conversation_id: text("conversation_id"),
            role: text("role"),
            content: text("content"),
            created_at,
            metadata,
            path: self.store.root().join(text("path")),
            score: candidate.scores.combined,
            scores: candidate.scores,
        }
    }
}

/// How lexical keys are built under `config`, and its description for the snapshot.
fn key_scheme(config: &Config) -> (KeyScheme, String) {
    let r = &config.retrieval;
    let scheme = KeyScheme {
        date: r.lexical_date,
        neighbours: r.lexical_neighbours,
    };
    let bm25 = format!("k1={} b={} avg_len={}", r.bm25_k1, r.bm25_b, r.bm25_avg_len);
    (scheme, scheme.describe(&bm25))
}

/// Loads the cross-encoder if its folder exists. Without one, the read path ranks by its
/// first-stage scores, and says so once.
fn load_reranker(
    config: &Config,
    paths: &mnemo_core::ModelPaths,
) -> Result<Option<Reranker>, EngineError> {
    let dir = &paths.reranker_model_dir;
    if !dir.join("model.onnx").is_file() {
        info!(
            "no cross-encoder at {}; ranking by first-stage scores (install one with `mnemo models`)",
            dir.display()
        );
        return Ok(None);
    }
    let reranker = Reranker::load(&RerankerConfig {
        threads: config.embed_threads,
        ..RerankerConfig::new(&paths.onnxruntime_library, dir)
    })?;
    info!(model = %dir.display(), "cross-encoder loaded");
    Ok(Some(reranker))
}

/// Removes the shard's files (keeping the lock we hold) and the snapshot describing them.
fn wipe_index(index_dir: &std::path::Path, root: &std::path::Path) -> Result<(), EngineError> {
    let io = |path: PathBuf| {
        move |source| EngineError::Io {
            action: "cannot remove",
            path,
            source,
        }
    };
    for entry in std::fs::read_dir(index_dir).map_err(io(index_dir.to_owned()))? {
        let path = entry.map_err(io(index_dir.to_owned()))?.path();
        if path.file_name().is_some_and(|n| n == LOCK_FILE) {
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io(path.clone()))?;
        } else {
            std::fs::remove_file(&path).map_err(io(path.clone()))?;
        }
    }
    let snapshot = root.join(sync::SNAPSHOT_FILE);
    match std::fs::remove_file(&snapshot) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(snapshot)(e)),
        _ => Ok(()),
    }
}

fn lock_index(index_dir: &std::path::Path) -> Result<File, EngineError> {
    std::fs::create_dir_all(index_dir).map_err(|source| EngineError::Io {
        action: "cannot create",
        path: index_dir.to_owned(),
        source,
    })?;
    let path = index_dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| EngineError::Io {
            action: "cannot open",
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::Locked {
            path: index_dir.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(EngineError::Io {
            action: "cannot lock",
            path,
            source,
        }),
    }
}

/// The upstream LLM named by the configuration, if any.
fn upstream(config: &Config) -> Result<Option<LlmClient>, EngineError> {
    let Some(base_url) = &config.openai_base_url else {
        return Ok(None);
    };
    let mut llm = LlmConfig::new(base_url.clone(), config.llm_model.clone())?;
    llm.api_key = config
        .openai_api_key
        .as_ref()
        .map(|k| k.expose().to_owned());
    llm.request_timeout = std::time::Duration::from_secs(config.llm_timeout_secs.max(1));
    Ok(Some(LlmClient::new(llm)?))
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EngineError::Task(e.to_string()))?
}

/// Looking up, deleting and browsing the history of single memories.
impl MemoryClient {
    /// The live memory with this id, if there is one.
    pub async fn get(&self, id: MemoryId) -> Result<Option<StoredMemory>, EngineError> {
        let inner = self.inner.clone();
        blocking(move || {
            let Some(path) = inner.path_of(id) else {
                return Ok(None);
            };
            match inner.store.read(&path) {
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

    /// Soft-deletes a memory (its file moves under `deleted/`) and commits. Returns the
    /// tombstone's path, or `None` when no live memory has this id.
    pub async fn delete(&self, id: MemoryId) -> Result<Option<PathBuf>, EngineError> {
        let Some(memory) = self.get(id).await? else {
            return Ok(None);
        };
        let conversation = memory.record.conversation_id.clone();
        let _turn = self
            .inner
            .conversation_lock(&conversation)
            .lock_owned()
            .await;
        let inner = self.inner.clone();
        blocking(move || {
            let tombstone = inner.tombstone(&[(memory.path, None)])?.pop();
            inner.commit(&format!("{conversation}: 1 deleted on request"));
            Ok(tombstone)
        })
        .await
    }

    /// Every version of one memory in git, newest first (empty without git versioning).
    pub async fn history(
        &self,
        id: MemoryId,
        limit: usize,
    ) -> Result<Vec<mnemo_git::MemoryVersion>, EngineError> {
        let inner = self.inner.clone();
        blocking(move || match &inner.git {
            Some(git) => Ok(git.history_of(id, limit)?),
            None => Ok(Vec::new()),
        })
        .await
    }

    /// The store's git history (of one conversation, if given), newest first.
    pub async fn log(
        &self,
        conversation: Option<ConversationId>,
        limit: usize,
    ) -> Result<Vec<mnemo_git::CommitInfo>, EngineError> {
        let inner = self.inner.clone();
        blocking(move || {
            let git = inner.git.as_ref().ok_or_else(no_git)?;
            let prefix = conversation
                .map(|c| PathBuf::from(mnemo_store::layout::ENTRIES_DIR).join(c.as_str()));
            Ok(git.log(prefix.as_deref(), limit)?)
        })
        .await
    }

    /// A commit, or a file as it was at a revision.
    pub async fn show(
        &self,
        rev: String,
        path: Option<PathBuf>,
    ) -> Result<mnemo_git::Shown, EngineError> {
        let inner = self.inner.clone();
        blocking(move || {
            let git = inner.git.as_ref().ok_or_else(no_git)?;
            Ok(git.show(&rev, path.as_deref())?)
        })
        .await
    }

    /// Points in the index.
    pub async fn index_size(&self) -> Result<usize, EngineError> {
        let inner = self.inner.clone();
        blocking(move || Ok(inner.index.count(&mnemo_index::Filter::all())?)).await
    }

    /// Whether a cross-encoder is loaded, and whether an upstream LLM is configured.
    pub fn has_reranker(&self) -> bool {
        self.inner.reranker.is_some()
    }

    pub fn upstream(&self) -> Option<&LlmClient> {
        self.inner.llm.as_ref()
    }
}

fn no_git() -> EngineError {
    EngineError::InvalidInput(
        "git versioning is off for this store (enable_git_versioning = false)".into(),
    )
}

impl Inner {
    /// The file of the live memory with this id, from the snapshot.
    fn path_of(&self, id: MemoryId) -> Option<PathBuf> {
        let snapshot = self.snapshot.lock();
        snapshot
            .files
            .iter()
            .find(|(_, e)| e.id == id)
            .map(|(path, _)| self.store.root().join(path))
    }
}
