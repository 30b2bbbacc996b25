//! [`Engine`]: the engine's shared state, one per open store, behind an `Arc`, and how it is
//! opened.
//!
//! Opening loads the embedding model (and the cross-encoder, per `retrieval.reranker`),
//! opens the vector index, takes the store's lock and syncs the index with the files. The
//! engine is held in owned parts (a base every wing reads, the index's part, and the write,
//! chat and session wings' parts) whose fields are private: a wing reaches what it needs
//! through the accessors here, borrows another wing through its handle, and crosses to
//! blocking work through [`Engine::blocking`]. The public face, `crate::MemoryClient`, is a
//! handle on it (`crate::client`).

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use mnemo_core::{Config, ConversationId, MemoryId, RerankerMode};
use mnemo_embed::{Embedder, Reranker, RerankerConfig};
use mnemo_git::{GitConfig, Versioning};
use mnemo_index::{EdgeIndex, EdgeIndexOptions, LexicalEncoder, LexicalOptions, VectorIndex};
use mnemo_llm::{LlmClient, LlmConfig};
use mnemo_qdrant::{QdrantIndex, QdrantOptions};
use mnemo_store::{layout, FileStore, StoredMemory};
use serde::Serialize;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::error::EngineError;
use crate::index::keys::KeyScheme;
use crate::index::model_words::{embedder_description, load_embedder, ModelWords};
use crate::index::recovery::{Attempt, Recovery, Resync, WatchedIndex};
use crate::index::snapshot::{Flusher, Snapshot, SnapshotCell};
use crate::index::sync::{Indexer, SyncProgress, SyncReport};
use crate::index::timeline::Timeline;
use crate::index::vocabulary::{BackgroundBuild, BuildReport, Vocabulary};
use crate::index::vocabulary_file::VocabularyFile;
use crate::retrieval::{ReadPath, ResolvedSearch, SearchRequest, Searched};
use crate::state::deferred_keys::DeferredKeys;
use crate::state::governance::ContextState;
use crate::state::index_queue::IndexQueue;
use crate::state::locks::LockMap;
use crate::state::pass_queue::PassQueue;
use crate::state::revisions::Revisions;
use crate::state::sessions::SessionState;
use crate::state::usage::UsageLedger;

/// A caller's check of the memory a delete or an edit is about to change.
pub(crate) type MemoryCheck<'a> = &'a (dyn Fn(&StoredMemory) -> Result<(), EngineError> + Sync);

/// How to open a [`crate::MemoryClient`] beyond its [`Config`].
#[derive(Default)]
pub struct OpenOptions {
    /// Called as the start-up sync embeds files (for progress bars).
    pub on_progress: Option<Box<dyn FnMut(SyncProgress) + Send>>,
    /// Throw the index away and rebuild it from the files (`mnemo reindex --full`). This also
    /// resets the embedded index's write-ahead log.
    pub rebuild: bool,
    /// The index to keep in step with the files, instead of the embedded one under
    /// `<memory_path>/index/`: another backend, or a test's instrumented one. It must hold
    /// vectors of the embedding model's dimension.
    pub index: Option<Arc<dyn VectorIndex>>,
}

/// Where the index lives, as `mnemo status` and `/health` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IndexBackend {
    /// The embedded engine.
    Embedded {
        /// Its folder, in the store.
        path: PathBuf,
    },
    /// A Qdrant server or cluster.
    Qdrant {
        /// The server (`index_url`).
        url: String,
        /// The collection the store's points are in.
        collection: String,
    },
    /// One the caller gave ([`OpenOptions::index`]).
    Given,
}

/// Whether the index holds exactly the live memory files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consistency {
    /// Distinct memory ids among the live files.
    pub files: usize,
    /// Points in the index.
    pub points: usize,
    /// Files whose memory has no point.
    pub missing: Vec<MemoryId>,
    /// Points whose memory has no file.
    pub orphans: Vec<MemoryId>,
    /// Files that could not be read as memories.
    pub skipped: Vec<String>,
}

/// How lexical keys are built, and its description for the snapshot.
pub(crate) struct KeySchemeInUse {
    pub scheme: KeyScheme,
    /// The model's words, when document expansion is on.
    pub model_words: Option<Arc<ModelWords>>,
    pub description: String,
}

/// The engine's shared state, in owned parts: the base every wing reads, and a part for
/// the index, the write wing, the chat wing and the session wing. Its fields are private;
/// a wing reaches what it needs through the accessors below, and borrows the other wings
/// through their handles (`engine.write()`, `engine.chat()`, ...).
pub(crate) struct Engine {
    /// Builds the vocabulary after opening; stopped first on drop.
    vocabulary_build: Option<BackgroundBuild>,
    base: Base,
    index_part: IndexPart,
    write_part: WritePart,
    chat_part: ChatPart,
    session_part: SessionPart,
    /// Engines over the store as it was at recent revisions (`crate::as_of`).
    revisions: Revisions<RevisionSlot>,
    /// Held for the client's life: one process owns an index at a time. Declared after
    /// everything that holds the index, so it is released last.
    _lock: Vec<File>,
}

/// What every wing reads: the configuration, the store, the models, the upstream and git.
struct Base {
    config: Config,
    store: FileStore,
    embedder: Arc<Embedder>,
    /// The cross-encoder, when one is loaded.
    reranker: Option<Arc<Reranker>>,
    /// The upstream LLM, when one is configured.
    llm: Option<LlmClient>,
    /// Git versioning of the store, when enabled.
    git: Option<Versioning>,
    /// Why versioning is off although enabled (the repository could not be opened).
    git_error: Option<String>,
}

/// The index and what keeps it in step with the files.
struct IndexPart {
    lexical: LexicalEncoder,
    key_scheme: KeySchemeInUse,
    index: Arc<dyn VectorIndex>,
    /// Flushes the index and the snapshot in the background; stopped first on drop.
    flusher: Option<Flusher>,
    /// Guards every write to the index together with the snapshot that describes it.
    snapshot: Arc<SnapshotCell>,
    /// Turn order, rebuilt after writes; searches read it without waiting for writers.
    timeline: RwLock<Arc<Timeline>>,
    /// The store's words, embedded, when vocabulary expansion is on.
    vocabulary: Option<Arc<RwLock<Vocabulary>>>,
    startup_sync: SyncReport,
    backend: IndexBackend,
    /// Re-syncs an index server that was lost, once it answers again.
    recovery: std::sync::OnceLock<Recovery>,
    /// Turns written by chats, waiting to be indexed.
    turns_to_index: IndexQueue,
    /// Conversations whose key upkeep waits for the end of their pass.
    deferred_keys: DeferredKeys,
}

/// The write wing's part.
struct WritePart {
    /// One lock per conversation: its write path runs one pass at a time.
    conversation_locks: LockMap<ConversationId>,
    /// Write-path passes running in the background (waited for on shutdown).
    background: TaskTracker,
    /// The journal of queued write-path passes, and how many may run at once.
    queue: PassQueue,
}

/// The chat wing's part.
struct ChatPart {
    /// Context governance's windows, token counters and inflation guards.
    context: ContextState,
    /// Upstream tokens and cost: the process's totals, and the lock for the files.
    usage: UsageLedger,
    /// Chats finishing for callers that stopped waiting (waited for on shutdown).
    detached_chats: TaskTracker,
}

/// The session wing's part.
struct SessionPart {
    /// Chat sessions: their store, locks and cached logs.
    state: SessionState,
    /// Serialises changes to agents' notes.
    agent_lock: Arc<tokio::sync::Mutex<()>>,
}

/// The base, lent to every wing.
impl Engine {
    /// Runs `work` off the async runtime with a handle on this engine: the bridge every
    /// wing's async call crosses to the engine's blocking work (files, index, models, git).
    pub(crate) async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(Arc<Engine>) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let engine = self.clone();
        crate::blocking::blocking(move || work(engine)).await
    }

    pub(crate) fn config(&self) -> &Config {
        &self.base.config
    }

    pub(crate) fn store(&self) -> &FileStore {
        &self.base.store
    }

    pub(crate) fn embedder(&self) -> &Arc<Embedder> {
        &self.base.embedder
    }

    pub(crate) fn reranker(&self) -> &Option<Arc<Reranker>> {
        &self.base.reranker
    }

    pub(crate) fn llm(&self) -> &Option<LlmClient> {
        &self.base.llm
    }

    pub(crate) fn git(&self) -> &Option<Versioning> {
        &self.base.git
    }
}

/// The index's part.
impl Engine {
    pub(crate) fn lexical(&self) -> &LexicalEncoder {
        &self.index_part.lexical
    }

    pub(crate) fn key_scheme(&self) -> &KeySchemeInUse {
        &self.index_part.key_scheme
    }

    pub(crate) fn index(&self) -> &Arc<dyn VectorIndex> {
        &self.index_part.index
    }

    pub(crate) fn snapshot(&self) -> &Arc<SnapshotCell> {
        &self.index_part.snapshot
    }

    /// The turn order's cell, which writes replace.
    pub(crate) fn timeline_cell(&self) -> &RwLock<Arc<Timeline>> {
        &self.index_part.timeline
    }

    pub(crate) fn vocabulary(&self) -> &Option<Arc<RwLock<Vocabulary>>> {
        &self.index_part.vocabulary
    }

    pub(crate) fn recovery(&self) -> &std::sync::OnceLock<Recovery> {
        &self.index_part.recovery
    }

    pub(crate) fn turns_to_index(&self) -> &IndexQueue {
        &self.index_part.turns_to_index
    }

    pub(crate) fn deferred_keys(&self) -> &DeferredKeys {
        &self.index_part.deferred_keys
    }
}

/// The write wing's part.
impl Engine {
    pub(crate) fn conversation_locks(&self) -> &LockMap<ConversationId> {
        &self.write_part.conversation_locks
    }

    pub(crate) fn background(&self) -> &TaskTracker {
        &self.write_part.background
    }

    pub(crate) fn queue(&self) -> &PassQueue {
        &self.write_part.queue
    }
}

/// The chat wing's part.
impl Engine {
    pub(crate) fn context(&self) -> &ContextState {
        &self.chat_part.context
    }

    pub(crate) fn usage(&self) -> &UsageLedger {
        &self.chat_part.usage
    }

    pub(crate) fn detached_chats(&self) -> &TaskTracker {
        &self.chat_part.detached_chats
    }
}

/// The session wing's part, and the revisions' engines.
impl Engine {
    pub(crate) fn session_state(&self) -> &SessionState {
        &self.session_part.state
    }

    pub(crate) fn agent_lock(&self) -> &Arc<tokio::sync::Mutex<()>> {
        &self.session_part.agent_lock
    }

    pub(crate) fn revisions(&self) -> &Revisions<RevisionSlot> {
        &self.revisions
    }
}

/// An engine over the store as it was at one commit (`crate::as_of`), and the folder it
/// lives in.
pub(crate) struct RevisionEngine {
    /// Declared first, so it closes before its folder goes.
    pub engine: Arc<Engine>,
    pub commit: mnemo_git::CommitInfo,
    pub _dir: tempfile::TempDir,
}

/// One revision's engine, opened once however many questions ask for it at the same time.
pub(crate) type RevisionSlot = Arc<tokio::sync::OnceCell<Arc<RevisionEngine>>>;

/// The models an engine may lend another opened with the same configuration (one over the
/// store as it was at a revision): loaded once, shared between threads.
pub(crate) struct SharedModels {
    pub embedder: Arc<Embedder>,
    pub reranker: Option<Arc<Reranker>>,
}

/// Waits before the second and third try of a git commit.
const COMMIT_RETRIES: [std::time::Duration; 2] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(500),
];

/// What the write path, the chat path and the admin calls share: a conversation's lock, its
/// summary, the commit; and the read path over this engine's index.
impl Engine {
    /// Waits until the vocabulary of what the index held at opening is built, and says what
    /// the build did; `None` when expansion is off or the build failed.
    pub(crate) async fn vocabulary_built(&self) -> Option<BuildReport> {
        let build = self.vocabulary_build.as_ref()?;
        while !build.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        build.report()
    }

    /// What the start-up sync found and did.
    pub(crate) fn startup_sync(&self) -> &SyncReport {
        &self.index_part.startup_sync
    }

    /// Where the index lives.
    pub(crate) fn index_backend(&self) -> &IndexBackend {
        &self.index_part.backend
    }

    /// Whether the store is versioned in git, and the last error doing so, naming no
    /// server path.
    pub(crate) fn versioning(&self) -> (bool, Option<String>) {
        let error = match &self.git() {
            Some(git) => git.last_error(),
            None => self.base.git_error.clone(),
        };
        // Answers name no server paths: the store is "the store".
        let root = self.store().root().display().to_string();
        let error = error.map(|e| e.replace(&root, "the store"));
        (self.git().is_some(), error)
    }

    /// Opens the store, model and index named by `config`, and syncs the index with the
    /// files; on the calling thread. With `models`, borrows them instead of loading its own
    /// (they must be the ones `config` names).
    pub(crate) fn open(
        config: Config,
        mut options: OpenOptions,
        models: Option<SharedModels>,
    ) -> Result<Arc<Self>, EngineError> {
        let store = FileStore::open(&config.memory_path)?;
        let queue = crate::state::pass_queue::PassQueue::new(store.root());
        let paths = config.model_paths();
        let SharedModels { embedder, reranker } = match models {
            Some(models) => models,
            None => SharedModels {
                embedder: Arc::new(load_embedder(&config)?),
                reranker: load_reranker(&config, &paths)?.map(Arc::new),
            },
        };
        let lexical = lexical_encoder(&config)?;
        let lock = lock_store(&store)?;
        store.remove_stale_temp_files();
        let dense_model = embedder_description(&config, embedder.dimension());
        let mut snapshot = Snapshot::load(&store.snapshot_path());
        let model_changed = !snapshot.dense_model.is_empty() && snapshot.dense_model != dense_model;
        // Vectors of two models are never mixed, and re-embedding every memory (through a
        // paid endpoint, perhaps) is the user's call.
        if model_changed && !options.rebuild {
            return Err(EngineError::EmbedderChanged {
                index: snapshot.dense_model,
                configured: dense_model,
            });
        }
        if model_changed {
            warn!(
                from = %snapshot.dense_model,
                to = %dense_model,
                "the embedding model changed: re-embedding every memory"
            );
        }
        let rebuild = options.rebuild;
        if rebuild {
            snapshot = Snapshot::default();
        }
        let (index, index_backend) = open_index(
            &config,
            &store,
            embedder.dimension(),
            options.index.take(),
            rebuild,
        )?;
        // Only a server can be lost while serving; its calls are watched so a sync follows.
        let watched = matches!(index_backend, IndexBackend::Qdrant { .. })
            .then(|| WatchedIndex::new(index.clone()));
        let index: Arc<dyn VectorIndex> = match &watched {
            Some(watched) => watched.clone(),
            None => index,
        };
        let model_words = open_model_words(&config, &paths, &dense_model, &embedder, &lexical);
        let key_scheme = key_scheme(&config, model_words);
        let mut progress = options.on_progress.take();
        let startup_indexer = Indexer {
            store: &store,
            embedder: &embedder,
            lexical: &lexical,
            index: index.as_ref(),
            scheme: key_scheme.scheme,
            scheme_description: key_scheme.description.clone(),
            vocabulary: None,
            model_words: key_scheme.model_words.as_deref(),
            ahead: None,
        };
        let startup_sync = startup_indexer.sync(&mut snapshot, &mut |p| {
            if let Some(f) = progress.as_mut() {
                f(p)
            }
        })?;
        let (vocabulary, vocabulary_build) = if config.retrieval.vocabulary_expansion_on() {
            let vocabulary = Arc::new(RwLock::new(Vocabulary::default()));
            let build = BackgroundBuild::spawn(
                index.ids()?,
                index.clone(),
                embedder.clone(),
                lexical_encoder(&config)?,
                vocabulary.clone(),
                VocabularyFile::new(
                    store.vocabulary_path(),
                    dense_model.clone(),
                    embedder.dimension(),
                ),
            );
            let build = build
                .inspect_err(|e| warn!("vocabulary expansion has only new memories' words: {e}"))
                .ok();
            (Some(vocabulary), build)
        } else {
            (None, None)
        };
        // Every vector is now the current model's: rebuilt, or recorded before the model was.
        if snapshot.dense_model != dense_model {
            snapshot.dense_model = dense_model;
            snapshot.mark_dirty();
        }
        let timeline = Timeline::build(&snapshot);
        let snapshot = Arc::new(SnapshotCell::new(
            &store.snapshot_path(),
            snapshot,
            index.clone(),
        ));
        snapshot.flush()?;
        let flusher = SnapshotCell::spawn_flusher(&snapshot);
        let llm = upstream(&config)?;
        let mut git_error = None;
        let git = if config.enable_git_versioning {
            let git_config = GitConfig {
                author_name: config.git_author_name.clone(),
                author_email: config.git_author_email.clone(),
                ignore: layout::unversioned(),
            };
            // The memories matter more than their history: a repository mnemo cannot open
            // (and could not repair) leaves versioning off, said in the log and `/health`.
            match Versioning::open(store.root(), git_config) {
                Ok(git) => Some(git),
                Err(e) => {
                    warn!("git versioning is off for this run: {e}");
                    git_error = Some(format!("versioning is off: {e}"));
                    None
                }
            }
        } else {
            None
        };
        let context = ContextState::new(&config.context);
        let sessions = SessionState::new(store.root().to_path_buf());
        let engine = Arc::new(Engine {
            vocabulary_build,
            base: Base {
                config,
                store,
                embedder,
                reranker,
                llm,
                git,
                git_error,
            },
            index_part: IndexPart {
                lexical,
                key_scheme,
                index,
                flusher,
                snapshot,
                timeline: RwLock::new(Arc::new(timeline)),
                vocabulary,
                startup_sync,
                backend: index_backend,
                recovery: std::sync::OnceLock::new(),
                turns_to_index: IndexQueue::default(),
                deferred_keys: DeferredKeys::default(),
            },
            write_part: WritePart {
                conversation_locks: LockMap::new(),
                background: TaskTracker::new(),
                queue,
            },
            chat_part: ChatPart {
                context,
                usage: UsageLedger::default(),
                detached_chats: TaskTracker::new(),
            },
            session_part: SessionPart {
                state: sessions,
                agent_lock: Arc::default(),
            },
            revisions: Revisions::default(),
            _lock: lock,
        });
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let Some(recovery) = watched.zip(runtime).and_then(|(watched, runtime)| {
            Recovery::spawn(resync_callback(Arc::downgrade(&engine), runtime), watched)
        }) {
            let _ = engine.recovery().set(recovery);
        }
        Ok(engine)
    }

    /// Runs the read path ([`ReadPath::search`]) over this engine's index, with the words
    /// of query expansion when there are some. Blocks.
    pub(crate) fn read(
        &self,
        request: &SearchRequest,
        settings: &ResolvedSearch,
        expansion: Option<&str>,
    ) -> Result<Searched, EngineError> {
        let timeline = self.timeline();
        ReadPath {
            config: self.config(),
            embedder: self.embedder(),
            lexical: self.lexical(),
            index: self.index().as_ref(),
            reranker: self.reranker().as_deref(),
            timeline: &timeline,
            vocabulary: self.vocabulary().as_deref(),
            store_root: self.store().root(),
        }
        .search(request, settings, expansion)
    }

    /// The models this engine loaded, to lend another.
    pub(crate) fn shared_models(&self) -> SharedModels {
        SharedModels {
            embedder: self.embedder().clone(),
            reranker: self.reranker().clone(),
        }
    }

    /// The lock that serialises the write path of one conversation.
    pub(crate) fn conversation_lock(
        &self,
        conversation: &ConversationId,
    ) -> Arc<tokio::sync::Mutex<()>> {
        self.conversation_locks().get(conversation)
    }

    /// The conversation's rolling summary, if it has one.
    pub(crate) fn summary(&self, conversation: &ConversationId) -> Option<String> {
        let path = self.store().summary_path(conversation);
        if !path.is_file() {
            return None;
        }
        match self.store().read(&path) {
            Ok(memory) => Some(memory.record.content),
            Err(e) => {
                warn!("cannot read the summary: {e}");
                None
            }
        }
    }

    /// Commits the store to git, when versioning is on, trying again after a short wait
    /// (another git process may hold the index lock). A failure is logged, not returned: the
    /// files are safe, and the next commit stages them again.
    pub(crate) fn commit(&self, message: &str) -> Option<String> {
        let git = self.git().as_ref()?;
        let message = format!("mnemo: {message}");
        let mut attempt = 0;
        loop {
            match git.commit_noted_short(&message) {
                Ok(short_id) => return short_id,
                Err(e) if attempt < COMMIT_RETRIES.len() => {
                    warn!("git commit failed ({e}); trying again");
                    std::thread::sleep(COMMIT_RETRIES[attempt]);
                    attempt += 1;
                }
                Err(e) => {
                    warn!("git commit failed ({e}); the next commit will include these changes");
                    return None;
                }
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        drop(self.vocabulary_build.take());
        drop(self.index_part.flusher.take());
        if let Err(e) = self.snapshot().flush() {
            warn!(
                "cannot write the index snapshot on close: {e}; the next start re-checks the files"
            );
        }
    }
}

/// The BM25 encoder the configuration asks for.
fn lexical_encoder(config: &Config) -> Result<LexicalEncoder, EngineError> {
    Ok(LexicalEncoder::new(LexicalOptions {
        k1: config.retrieval.bm25_k1,
        b: config.retrieval.bm25_b,
        avg_len: config.retrieval.bm25_avg_len,
    })?)
}

/// The model's words for document expansion, when it is on and they can be had; without
/// them keys are built without it (said in the log), and rebuilt with it at a later start.
fn open_model_words(
    config: &Config,
    paths: &mnemo_core::ModelPaths,
    dense_model: &str,
    embedder: &Embedder,
    lexical: &LexicalEncoder,
) -> Option<Arc<ModelWords>> {
    if !config.retrieval.document_expansion_on() {
        return None;
    }
    if config.embedding_provider != mnemo_core::EmbeddingProvider::Onnx {
        // Its words come from the ONNX model's tokenizer, embedded once on the machine.
        info!("document expansion is off: it needs the ONNX embedding model's words");
        return None;
    }
    ModelWords::open(&paths.embedding_model_dir, dense_model, embedder, lexical)
        .inspect_err(|e| warn!("document expansion is off for this run: {e}"))
        .ok()
}

/// How lexical keys are built under `config` with `model_words`, and its description for
/// the snapshot.
fn key_scheme(config: &Config, model_words: Option<Arc<ModelWords>>) -> KeySchemeInUse {
    let r = &config.retrieval;
    let scheme = KeyScheme {
        date: r.lexical_date,
        neighbour_turns: if r.lexical_neighbours {
            r.lexical_neighbour_turns
        } else {
            0
        },
        neighbour_decay: r.lexical_neighbour_decay,
        date_tokens: r.lexical_date_tokens,
        facts: r.lexical_facts,
        document_words: if model_words.is_some() {
            r.document_expansion
        } else {
            0
        },
        document_words_weight: r.document_expansion_weight,
    };
    let bm25 = format!("k1={} b={} avg_len={}", r.bm25_k1, r.bm25_b, r.bm25_avg_len);
    let mut description = scheme.describe(&bm25);
    if let Some(words) = &model_words {
        // Other vectors (the file embedded again) would choose other words.
        description.push_str(&format!("@{}", words.fingerprint()));
    }
    KeySchemeInUse {
        description,
        model_words,
        scheme,
    }
}

/// Loads the cross-encoder as `retrieval.reranker` says: `auto` when its folder holds a
/// model (without one the read path ranks by its first-stage scores, and says so once),
/// `on` always (a missing model is an error), `off` never.
fn load_reranker(
    config: &Config,
    paths: &mnemo_core::ModelPaths,
) -> Result<Option<Reranker>, EngineError> {
    let dir = &paths.reranker_model_dir;
    let installed = dir.join("model.onnx").is_file();
    match config.retrieval.reranker {
        RerankerMode::Off => return Ok(None),
        RerankerMode::Auto if !installed => {
            info!(
                "no cross-encoder at {}; ranking by first-stage scores (install one with `mnemo models --fetch-reranker`)",
                dir.display()
            );
            return Ok(None);
        }
        RerankerMode::Auto | RerankerMode::On => {}
    }
    let reranker = Reranker::load(&RerankerConfig {
        threads: config.embed_threads,
        ..RerankerConfig::new(&paths.onnxruntime_library, dir)
    })?;
    info!(model = %dir.display(), "cross-encoder loaded");
    Ok(Some(reranker))
}

/// Removes the index's files (keeping the lock we hold) and the snapshot describing them.
fn wipe_index(store: &FileStore) -> Result<(), EngineError> {
    let io = |path: PathBuf| {
        move |source| EngineError::Io {
            action: "cannot remove",
            path,
            source,
        }
    };
    let index_dir = store.index_dir();
    for entry in std::fs::read_dir(&index_dir).map_err(io(index_dir.clone()))? {
        let path = entry.map_err(io(index_dir.clone()))?.path();
        if path.ends_with(LEGACY_LOCK_FILE) {
            // Held: removed, the next old mnemo would lock a new file and get in.
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io(path.clone()))?;
        } else {
            std::fs::remove_file(&path).map_err(io(path.clone()))?;
        }
    }
    remove_snapshot(store)
}

/// Removes `memory_index.json`, so the next sync trusts nothing it recorded.
fn remove_snapshot(store: &FileStore) -> Result<(), EngineError> {
    let snapshot = store.snapshot_path();
    match std::fs::remove_file(&snapshot) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(EngineError::Io {
            action: "cannot remove",
            path: snapshot,
            source: e,
        }),
        _ => Ok(()),
    }
}

/// The index `config` names (the embedded one, or a Qdrant server), or the one `given`,
/// and where it lives; with `rebuild`, emptied first.
fn open_index(
    config: &Config,
    store: &FileStore,
    dimension: usize,
    given: Option<Arc<dyn VectorIndex>>,
    rebuild: bool,
) -> Result<(Arc<dyn VectorIndex>, IndexBackend), EngineError> {
    let (index, backend): (Arc<dyn VectorIndex>, _) = match (given, &config.index_url) {
        (Some(index), _) => (index, IndexBackend::Given),
        (None, Some(url)) => {
            let options = QdrantOptions {
                api_key: config.index_api_key.as_ref().map(|k| k.expose().to_owned()),
                shards: config.index_shards,
                replication: config.index_replication,
                timeout: std::time::Duration::from_secs(config.index_timeout_secs),
                ..QdrantOptions::new(url, &config.index_collection, store.store_id()?, dimension)
            };
            let backend = IndexBackend::Qdrant {
                url: url.clone(),
                collection: config.index_collection.clone(),
            };
            (Arc::new(QdrantIndex::open(&options)?), backend)
        }
        (None, None) => {
            if rebuild {
                wipe_index(store)?;
            }
            let path = store.index_dir();
            let index = EdgeIndex::open(&path, &EdgeIndexOptions::new(dimension))?;
            return Ok((Arc::new(index), IndexBackend::Embedded { path }));
        }
    };
    if rebuild {
        // Only this store's points: others may share a server's collection.
        index.delete(&index.ids()?)?;
        remove_snapshot(store)?;
    }
    check_dimension(index.as_ref(), dimension)?;
    Ok((index, backend))
}

/// A given index must hold vectors of the embedding model's size.
fn check_dimension(index: &dyn VectorIndex, model: usize) -> Result<(), EngineError> {
    if index.dimension() == model {
        return Ok(());
    }
    Err(EngineError::Index(mnemo_index::IndexError::Dimension {
        expected: index.dimension(),
        got: model,
    }))
}

/// Takes the store's lock, or says that another process holds it.
fn lock_store(store: &FileStore) -> Result<Vec<File>, EngineError> {
    let index_dir = store.index_dir();
    std::fs::create_dir_all(&index_dir).map_err(|source| {
        not_writable(store, &source).unwrap_or(EngineError::Io {
            action: "cannot create",
            path: index_dir.clone(),
            source,
        })
    })?;
    // The lock's old place is held too: a mnemo from before the move takes only that one,
    // and must not open the store beside this one.
    [store.lock_path(), index_dir.join(LEGACY_LOCK_FILE)]
        .into_iter()
        .map(|path| lock_file(store, path))
        .collect()
}

/// The clear refusal of a store mnemo may not write, when `error` is one: the lock is the
/// first thing written, so this is said at start-up rather than at the first write.
fn not_writable(store: &FileStore, error: &std::io::Error) -> Option<EngineError> {
    use std::io::ErrorKind::{PermissionDenied, ReadOnlyFilesystem};
    let reason = match error.kind() {
        ReadOnlyFilesystem => "a read-only file system",
        PermissionDenied => "permission denied",
        _ => return None,
    };
    Some(EngineError::StoreNotWritable {
        path: store.root().to_owned(),
        reason: reason.to_owned(),
    })
}

/// Where the store's lock was before it moved to the root (inside the rebuildable index).
const LEGACY_LOCK_FILE: &str = ".lock";

fn lock_file(store: &FileStore, path: PathBuf) -> Result<File, EngineError> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| {
            not_writable(store, &source).unwrap_or(EngineError::Io {
                action: "cannot open",
                path: path.clone(),
                source,
            })
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::Locked {
            path: store.root().to_owned(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(EngineError::Io {
            action: "cannot lock",
            path,
            source,
        }),
    }
}

/// What the index's recovery thread runs while the index is lost: a re-sync of the index
/// with the files and, when that works, the write-path passes that failed meanwhile, run
/// again on `runtime`. The engine is held weakly: the thread must not keep it open.
fn resync_callback(engine: std::sync::Weak<Engine>, runtime: tokio::runtime::Handle) -> Resync {
    Box::new(move || {
        let Some(engine) = engine.upgrade() else {
            return Attempt::EngineGone;
        };
        match engine.resync_index() {
            Ok(report) => {
                let _in_runtime = runtime.enter();
                let passes = engine.write().rerun_failed_passes();
                info!(
                    "the index answers again: {} files re-indexed, {} stale points removed, \
                     {passes} failed write-path passes run again",
                    report.embedded, report.deleted
                );
                Attempt::Recovered
            }
            Err(_) => Attempt::Failed,
        }
    })
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
