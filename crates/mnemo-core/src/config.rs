//! [`Config`]: every tunable of mnemo, with its defaults, and how it is loaded.
//!
//! [`Config::load`] layers built-in defaults, a TOML file and `MNEMO_*` environment variables,
//! then checks the ranges of weights and limits, so the rest of mnemo can trust every value.
//! [`Config::model_paths`] resolves the model files it names to paths on disk.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a configuration value could not be read from, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why the operating system refused.
        source: std::io::Error,
    },
    /// The config file is not valid TOML, names an unknown key, or sets a bad value.
    #[error("config file {path} is not valid: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the key: a TOML syntax error, an unknown key, a value of the
        /// wrong type or out of range.
        message: String,
    },
    /// An `MNEMO_*` variable does not parse; with no config file, also any invalid value.
    #[error("environment variable {var}={value:?} is not valid: {message}")]
    Env {
        /// The variable's name (`MNEMO_*` when the fault is in the merged configuration).
        var: String,
        /// Its value as set (empty when the fault is not in one variable).
        value: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Every tunable of mnemo. Key names follow the agent-cli memory proxy.
///
/// Precedence, lowest first: built-in defaults, the TOML file, `MNEMO_<KEY>` environment
/// variables (e.g. `MNEMO_MEMORY_PATH`), then command-line flags (applied by the binary).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Root of the Markdown store.
    pub memory_path: PathBuf,
    /// Folder holding set-up's downloads (`onnxruntime/`, embedding models, ...).
    pub models_dir: PathBuf,
    /// Embedding model: a folder name under `models_dir`, or a path; with
    /// `embedding_provider = "openai"`, the model the endpoint is asked for
    /// (`text-embedding-3-small`).
    pub embedding_model: String,
    /// What computes the embeddings: the ONNX model in `models_dir` (`onnx`), or an
    /// OpenAI-compatible `/v1/embeddings` endpoint (`openai`).
    pub embedding_provider: EmbeddingProvider,
    /// The endpoint's base URL (`https://api.openai.com/v1`); unset: `openai_base_url`.
    pub embedding_base_url: Option<String>,
    /// Bearer key for the endpoint; unset: `openai_api_key`.
    pub embedding_api_key: Option<ApiKey>,
    /// Dimensions asked of the endpoint (OpenAI's newer models can shorten their vectors);
    /// unset: the model's own.
    pub embedding_dimensions: Option<usize>,
    /// Seconds one request to the endpoint may take.
    pub embedding_timeout_secs: u64,
    /// The ONNX Runtime shared library; relative paths are under `models_dir`.
    pub onnxruntime_library: PathBuf,
    /// Threads ONNX Runtime may use per session.
    pub embed_threads: usize,
    /// Texts per ONNX Runtime call (or per request to an endpoint) when embedding many at
    /// once.
    pub embed_batch_size: usize,
    /// An ONNX model reads a text longer than this many tokens in windows of at most this
    /// many and averages their vectors; unset: the length the model was trained on where
    /// mnemo knows it (128 for all-MiniLM-L6-v2), else whole ([`Config::embed_window_tokens`]).
    pub embed_window_tokens: Option<usize>,
    /// Memories a search returns when the request does not say; at most [`MAX_TOP_K`].
    pub default_top_k: usize,
    /// Facts and turns kept per conversation; beyond it the oldest are tombstoned.
    pub max_entries: usize,
    /// MMR's trade-off, 0..1, between relevance and variety among the results: 1 is relevance
    /// only. A search request may override it.
    pub mmr_lambda: f32,
    /// Share of recency, 0..1, in a result's final score (see
    /// [`RetrievalConfig::query_aware_recency`]). A search request may override it.
    pub recency_weight: f32,
    /// Results whose relevance (0..1, before recency) falls below this are dropped; unset keeps
    /// them all. A search request may override it.
    pub score_threshold: Option<f32>,
    /// A chat message whose best memory is less similar to it than this (the cosine of
    /// their embeddings, 0..1, an absolute figure) is about nothing stored and gets no
    /// memory injected, only a line saying none is relevant; 0 turns it off. Needs no
    /// cross-encoder. Calibrated on the LoCoMo dev split for all-MiniLM-L6-v2
    /// (docs/retrieval.md, "The relevance floor"). A chat request may override it
    /// (`memory_relevance_floor`), and a search may ask for one (`relevance_floor`).
    pub relevance_floor: f32,
    /// Results whose cross-encoder score (the logistic of its logit, 0..1, an absolute
    /// figure unlike `score_threshold`'s) falls below this are dropped; unset keeps them all.
    /// Does nothing when no reranker runs. A search request may override it.
    pub min_rerank_score: Option<f32>,
    /// Keep a rolling summary per conversation, rewritten by the LLM whenever a message changes
    /// its facts.
    pub enable_summarization: bool,
    /// How a new chat session is titled: by its first message (`first_message`, its first
    /// 100 characters) or by a few words the LLM writes after its first answer (`llm`).
    pub session_titles: SessionTitles,
    /// The write path's rules beside the LLM: keep an extracted fact only when the user's own
    /// words support it, said of the same person and in the same way; show the reconciler
    /// only facts about the people the new facts are about; when the message signals a change,
    /// ask whether a new fact replaces an old one. Off stores whatever the extractor and the
    /// reconciler return.
    pub fact_grounding: bool,
    /// Mark an older fact that a new fact of the same person may contradict
    /// (`conflicts_with` in its front matter), so that the later one holds on the read path
    /// until a person resolves the pair. Off leaves every fact unmarked.
    pub conflict_marking: bool,
    /// How close (cosine of their embeddings, 0..1) two facts of the same person must be
    /// for the later to be taken as a possible new value of the earlier. Depends on the
    /// embedding model: chosen for all-MiniLM-L6-v2 (docs/write.md, "Conflicts").
    pub conflict_similarity: f32,
    /// Rules of the write path left out, by name: for measuring what each one does
    /// (docs/write.md, "What each rule does"). Empty, the default, runs them all. Set in the
    /// file only.
    pub write_rules_off: Vec<WriteRule>,
    /// The upstream LLM (`http://host:port/v1`); unset: the local LLM.
    pub openai_base_url: Option<String>,
    /// Bearer key for the upstream LLM (`MNEMO_OPENAI_API_KEY`).
    pub openai_api_key: Option<ApiKey>,
    /// Model mnemo's own calls (extraction, reconciliation, summary) ask the upstream for.
    pub llm_model: String,
    /// Seconds one upstream call may take.
    pub llm_timeout_secs: u64,
    /// GGUF of the local LLM, under `models_dir` (or a path); started when no upstream is set.
    pub local_llm_model: PathBuf,
    /// CPU threads of the local LLM.
    pub local_llm_threads: usize,
    /// Commit every change to the store to a git repository at its root, so people can see how
    /// their memories changed (`mnemo log`).
    pub enable_git_versioning: bool,
    /// Author name on the commits mnemo makes.
    pub git_author_name: String,
    /// Author e-mail on the commits mnemo makes.
    pub git_author_email: String,
    /// Watch the memory files while serving, so hand edits reach the index without a restart.
    pub start_watcher: bool,
    /// A Qdrant server or cluster to keep the index in, by its gRPC URL
    /// (`http://127.0.0.1:6334`); unset: the embedded index under the store.
    pub index_url: Option<String>,
    /// The Qdrant server's API key (`MNEMO_INDEX_API_KEY`); never logged.
    pub index_api_key: Option<ApiKey>,
    /// The collection on the Qdrant server; stores may share one.
    pub index_collection: String,
    /// Shards of the collection, when mnemo creates it.
    pub index_shards: u32,
    /// Copies of each shard (on a cluster's nodes), when mnemo creates the collection.
    pub index_replication: u32,
    /// Seconds one request to the Qdrant server may take, connecting included.
    pub index_timeout_secs: u64,
    /// How the read path finds and ranks memories (`[retrieval]` table).
    pub retrieval: RetrievalConfig,
    /// What each chat request sends upstream (`[context]` table: the default strategy,
    /// `[context.agents.NAME]`, `[context.windows]`); see `docs/context.md`.
    pub context: mnemo_context::ContextConfig,
    /// The HTTP server (`[server]` table): its bearer tokens; see `docs/server.md`.
    pub server: ServerConfig,
}

/// The `[server]` table: who may use `mnemo serve`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Bearer tokens the HTTP API accepts (`[[server.tokens]]`), each with its scope. With
    /// none (and no `MNEMO_API_TOKEN`), the API is open, and `mnemo serve` refuses to listen
    /// on anything but loopback.
    pub tokens: Vec<TokenConfig>,
}

/// One `[[server.tokens]]` entry: a bearer token and what it may touch. The server checks
/// and resolves it at start (`mnemo_server::auth`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenConfig {
    /// A name for the token in logs and start-up errors (never the token itself); `tokens[N]`
    /// when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The environment variable holding the token: keeps the secret out of the file.
    /// Exactly one of `token_env` and `token` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// The token itself, written in the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<ApiKey>,
    /// The conversations it may read and write: exact ids, prefixes ending in `*`
    /// (`"team-*"`), or `"*"` for all. `global` is not among them: see `global`.
    pub conversations: Vec<String>,
    /// What it may do with the shared `global` conversation.
    pub global: GlobalAccess,
    /// The agents whose notes (`/v1/agents/{agent}/memory`, `memory_agent`) it may use:
    /// names, prefixes ending in `*`, or `"*"` for all; none by default.
    pub agents: Vec<String>,
}

/// What a token may do with `global`, the conversation whose facts every search sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GlobalAccess {
    /// Neither read nor write: its facts are left out of searches and chats.
    None,
    /// Read: its facts are found and injected, as for everyone by default.
    #[default]
    Read,
    /// Read and write (add facts to it, chat in it).
    Write,
}

/// Knobs of the read path. The defaults are what the LoCoMo recall harness measured best;
/// `docs/retrieval.md` explains each stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Search by dense embedding.
    pub dense: bool,
    /// Search by BM25 over the lexical vectors.
    pub lexical: bool,
    /// Candidates each retriever returns per scope: `max(top_k * 3, this)`.
    pub min_candidates: usize,
    /// Share of the lexical score in the fused relevance (the rest is dense).
    pub lexical_weight: f32,
    /// How much a chat turn borrows from the relevance of the turns next to it.
    pub neighbour_weight: f32,
    /// Lift for the memories of the one speaker a query names.
    pub speaker_boost: f32,
    /// Apply recency only to queries about the present ("now", "currently", ...) that name
    /// no date; otherwise to every query.
    pub query_aware_recency: bool,
    /// How many of the best candidates MMR chooses the final results from.
    pub mmr_pool: usize,
    /// A chat turn that says nothing of its own (only filler, or only what the turn it
    /// answers said: "Thanks!", "I can't tell from what I know") comes after every memory
    /// that says something: it fills only places nothing else wants.
    pub low_information_last: bool,
    /// Lexical keys start with the memory's date ("[8 May 2023]").
    pub lexical_date: bool,
    /// A chat turn's lexical key includes the words of the turns around it.
    pub lexical_neighbours: bool,
    /// How many turns on each side of a turn (in its session) lend it their words.
    pub lexical_neighbour_turns: usize,
    /// The weight of a neighbour's words, 0..1, to the power of its distance: with 0.5 a word
    /// of the next turn counts half, one two turns away a quarter.
    pub lexical_neighbour_decay: f32,
    /// Lexical keys and queries carry canonical date tokens (`d20230507 m202305 ...`): the
    /// memory's own day, and every date its text mentions ("yesterday", "last May", "on 3
    /// June") resolved against it; a query's dates are resolved against the time it is asked.
    pub lexical_date_tokens: bool,
    /// A chat turn's lexical key includes the facts the write path drew from it (facts whose
    /// `source_id` names the turn), so the turn is found by the words of what it taught.
    pub lexical_facts: bool,
    /// A turn and the facts drawn from it take one place among the results: the fact's, ranked
    /// where the better of the two was, when one fact of the turn is a candidate; the turn's
    /// when several are (none says all it says), its facts then filling only places nothing
    /// else wants.
    pub facts_stand_for_turns: bool,
    /// Ask the upstream LLM, before each search, for words an answer would use, and merge
    /// the search for the query with and without them (reciprocal rank). Off by default: it
    /// costs an LLM call per search.
    pub query_expansion: bool,
    /// How long a search waits for the expansion before it goes on without it, in ms.
    pub query_expansion_timeout_ms: u64,
    /// How many of the store's own words, those whose embedding is closest to the query's,
    /// a search adds to the query's lexical terms: "books" also finds "novels" and
    /// "library". 0 turns it off.
    pub vocabulary_expansion: usize,
    /// What each added word weighs in the lexical query, 0..1, against 1 for a word of the
    /// query's own; 0 turns expansion off as well.
    pub vocabulary_expansion_weight: f32,
    /// How many of the embedding model's own words, those closest to a memory's embedding, its
    /// lexical key holds besides its text ("I'm reading Dune" also holds *novel*): document
    /// expansion. 0 turns it off. Changing it rebuilds every lexical key at the next start.
    pub document_expansion: usize,
    /// What each of those words weighs in the key, 0..1, against 1 for a word of the
    /// memory's own; 0 turns document expansion off as well.
    pub document_expansion_weight: f32,
    /// Whether the cross-encoder reranks: `auto` when one is installed, `on` always (a
    /// missing model is an error), `off` never.
    pub reranker: RerankerMode,
    /// Cross-encoder: a folder under `models_dir` (or a path).
    pub reranker_model: String,
    /// How many of the best fused candidates the cross-encoder rescores.
    pub rerank_candidates: usize,
    /// BM25's term-frequency saturation: how quickly repeats of a word stop adding to a score.
    pub bm25_k1: f64,
    /// BM25's length normalisation, 0..1: 0 ignores a key's length, 1 normalises fully.
    pub bm25_b: f64,
    /// Typical key length in tokens, for BM25's length normalisation. Qdrant's 256 is far
    /// above a real key's ~36, which nearly switches length normalisation off; on LoCoMo that
    /// is what works best (docs/retrieval.md).
    pub bm25_avg_len: f64,
}

/// What computes the embeddings (`embedding_provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    /// The ONNX model `embedding_model` names, run in-process.
    Onnx,
    /// An OpenAI-compatible `/v1/embeddings` endpoint (`embedding_base_url`).
    Openai,
}

/// How a new chat session is titled (`session_titles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionTitles {
    /// Its first message, on one line, cut to 100 characters: free, at once, and what the
    /// user typed.
    FirstMessage,
    /// A few words the LLM (`llm_model`) writes from the first message and its answer, in
    /// the background after that answer; the first message's title stays until then, and
    /// if the call fails.
    Llm,
}

/// When the read path uses the cross-encoder (`[retrieval] reranker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankerMode {
    /// Use it when its model is installed; otherwise rank by first-stage scores.
    Auto,
    /// Always use it; opening a store without its model is an error.
    On,
    /// Never load it.
    Off,
}

/// The most turns on each side whose words a turn's lexical key may hold: every write
/// rereads them, and a key that holds a whole session matches everything in it.
pub const MAX_NEIGHBOUR_TURNS: usize = 8;

/// The most words a search may add to a query (vocabulary expansion), or a key may hold
/// besides its text (document expansion): more only dilute it.
pub const MAX_VOCABULARY_EXPANSION: usize = 50;

/// The most memories one search may return, whoever asks: MMR's cost grows with it, and no
/// prompt has room for more.
pub const MAX_TOP_K: usize = 100;

/// The longest search query, in bytes (REST, MCP, the CLI, the web view, archive search): a
/// question is a sentence, and the embedder reads only its first few hundred tokens anyway.
/// A chat's retrieval reads the first this many bytes of its latest user message.
pub const MAX_QUERY_BYTES: usize = 4096;

/// The most items one page of a listing may hold (memories, session messages, versions),
/// whoever asks.
pub const MAX_PAGE: usize = 1000;

/// A page size as asked: `default` when unset, else 1..=[`MAX_PAGE`], refused with a message
/// naming the parameter otherwise.
pub fn page_size(asked: Option<usize>, default: usize, name: &str) -> Result<usize, String> {
    match asked.unwrap_or(default) {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(format!("{name} must be between 1 and {MAX_PAGE}")),
    }
}

impl RetrievalConfig {
    /// Whether vocabulary expansion adds anything: some words, weighing more than nothing.
    pub fn vocabulary_expansion_on(&self) -> bool {
        self.vocabulary_expansion > 0 && self.vocabulary_expansion_weight > 0.0
    }

    /// Whether document expansion adds anything to the keys.
    pub fn document_expansion_on(&self) -> bool {
        self.document_expansion > 0 && self.document_expansion_weight > 0.0
    }
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            dense: true,
            lexical: true,
            min_candidates: 100,
            lexical_weight: 0.7,
            neighbour_weight: 0.3,
            speaker_boost: 0.2,
            query_aware_recency: true,
            mmr_pool: 30,
            low_information_last: true,
            lexical_date: true,
            lexical_neighbours: true,
            lexical_neighbour_turns: 4,
            lexical_neighbour_decay: 0.5,
            lexical_date_tokens: true,
            lexical_facts: true,
            facts_stand_for_turns: true,
            query_expansion: false,
            query_expansion_timeout_ms: 5000,
            vocabulary_expansion: 10,
            vocabulary_expansion_weight: 0.3,
            document_expansion: 5,
            document_expansion_weight: 0.3,
            reranker: RerankerMode::Auto,
            reranker_model: "ms-marco-MiniLM-L-6-v2".into(),
            rerank_candidates: 30,
            bm25_k1: 1.2,
            bm25_b: 0.75,
            bm25_avg_len: 256.0,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            memory_path: PathBuf::from("memory_db"),
            models_dir: default_models_dir(),
            embedding_model: "all-MiniLM-L6-v2".into(),
            embedding_provider: EmbeddingProvider::Onnx,
            embedding_base_url: None,
            embedding_api_key: None,
            embedding_dimensions: None,
            embedding_timeout_secs: 30,
            onnxruntime_library: PathBuf::from("onnxruntime/libonnxruntime.so.1.31.1"),
            embed_threads: 2,
            embed_batch_size: 64,
            embed_window_tokens: None,
            default_top_k: 5,
            max_entries: 500,
            mmr_lambda: 0.7,
            recency_weight: 0.2,
            score_threshold: None,
            relevance_floor: 0.25,
            min_rerank_score: None,
            enable_summarization: true,
            session_titles: SessionTitles::FirstMessage,
            fact_grounding: true,
            conflict_marking: true,
            conflict_similarity: 0.5,
            write_rules_off: Vec::new(),
            openai_base_url: None,
            openai_api_key: None,
            llm_model: LOCAL_LLM_ALIAS.into(),
            llm_timeout_secs: 120,
            local_llm_model: PathBuf::from("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
            local_llm_threads: 2,
            enable_git_versioning: true,
            git_author_name: "mnemo".into(),
            git_author_email: "mnemo@localhost".into(),
            start_watcher: true,
            index_url: None,
            index_api_key: None,
            index_collection: "mnemo".into(),
            index_shards: 1,
            index_replication: 1,
            index_timeout_secs: 10,
            retrieval: RetrievalConfig::default(),
            context: mnemo_context::ContextConfig::default(),
            server: ServerConfig::default(),
        }
    }
}

/// `./models` when run from a checkout, else the checkout this binary was built from.
fn default_models_dir() -> PathBuf {
    let local = PathBuf::from("models");
    if local.join("manifest.toml").is_file() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

/// A secret that `{:?}` never prints, so a logged configuration does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApiKey(pub String);

impl ApiKey {
    /// The secret itself, for the code that sends it upstream as a bearer token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One rule of English the write path applies beside its LLM calls, named so that it can be left out and measured
/// ([`Config::write_rules_off`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteRule {
    /// Grounding: every name, number and person of a fact occurs in the user's words.
    GroundNames,
    /// Grounding: at least half of a fact's other content words occur there.
    GroundContent,
    /// Grounding: from a message that only asks, only facts in its own words, none
    /// reporting the asking.
    GroundAsking,
    /// Grounding: a fact about the user does not rest on what they said of someone else.
    GroundPerson,
    /// Grounding: a plain fact does not rest on a word the user only denied or supposed.
    GroundStance,
    /// Grounding: a fact of conversational filler alone says nothing.
    GroundFiller,
    /// The reconciler is shown only facts about the people the new facts are about, and its
    /// changes are kept to the person each is about.
    SamePerson,
    /// When the message signals a change, the LLM is asked whether a new fact replaces the
    /// nearest old one.
    ChangeQuestion,
    /// A message that says nothing of its own is not sent to the extractor.
    LowInformation,
    /// Summary sentences stating what this pass retracted are cut, and the new facts added.
    SummaryStale,
}

impl WriteRule {
    /// Every rule, in the order the write path applies them.
    pub const ALL: [WriteRule; 10] = [
        WriteRule::LowInformation,
        WriteRule::GroundNames,
        WriteRule::GroundContent,
        WriteRule::GroundAsking,
        WriteRule::GroundPerson,
        WriteRule::GroundStance,
        WriteRule::GroundFiller,
        WriteRule::SamePerson,
        WriteRule::ChangeQuestion,
        WriteRule::SummaryStale,
    ];

    /// The rule's name in the configuration (`ground_names`).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// The tokens of a text an embedding model reads; the rest is not embedded.
pub const MAX_EMBED_TOKENS: usize = 256;

/// The name the local LLM serves its model under.
pub const LOCAL_LLM_ALIAS: &str = "qwen2.5-coder-1.5b-instruct";

/// Keys whose environment values are taken verbatim as strings.
const STRING_KEYS: &[&str] = &[
    "memory_path",
    "models_dir",
    "embedding_model",
    "embedding_provider",
    "embedding_base_url",
    "embedding_api_key",
    "onnxruntime_library",
    "openai_base_url",
    "openai_api_key",
    "index_url",
    "index_api_key",
    "index_collection",
    "llm_model",
    "local_llm_model",
    "git_author_name",
    "git_author_email",
    "session_titles",
];

/// Optional keys: absent from the defaults, but settable.
const OPTIONAL_KEYS: &[&str] = &[
    "embedding_base_url",
    "embed_window_tokens",
    "embedding_api_key",
    "embedding_dimensions",
    "score_threshold",
    "min_rerank_score",
    "openai_base_url",
    "openai_api_key",
    "index_url",
    "index_api_key",
];

/// Resolved on-disk locations of the models a [`Config`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// The ONNX Runtime shared library to load.
    pub onnxruntime_library: PathBuf,
    /// The embedding model's folder (ONNX graph plus tokenizer files).
    pub embedding_model_dir: PathBuf,
    /// The cross-encoder's folder; it need not exist, as the reranker is optional.
    pub reranker_model_dir: PathBuf,
    /// The local LLM's GGUF file.
    pub local_llm_model: PathBuf,
    /// The Python of set-up's virtual environment, which runs the local LLM.
    pub python: PathBuf,
}

impl Config {
    /// The longest text, in tokens, the ONNX embedding model reads in one window:
    /// `embed_window_tokens`, or else the length the model was trained on where mnemo knows
    /// it, or else [`MAX_EMBED_TOKENS`] (whole).
    pub fn embed_window_tokens(&self) -> usize {
        self.embed_window_tokens.unwrap_or_else(|| {
            let folder = Path::new(&self.embedding_model).file_name();
            match folder.and_then(|f| f.to_str()) {
                Some("all-MiniLM-L6-v2") => 128,
                _ => MAX_EMBED_TOKENS,
            }
        })
    }

    /// The embeddings endpoint's base URL: `embedding_base_url`, or else `openai_base_url`.
    pub fn embedding_url(&self) -> Option<&str> {
        self.embedding_base_url
            .as_deref()
            .or(self.openai_base_url.as_deref())
            .filter(|url| !url.trim().is_empty())
    }

    /// The embeddings endpoint's key: `embedding_api_key`, or else (when the endpoint is
    /// the LLM's) `openai_api_key`.
    pub fn embedding_key(&self) -> Option<&ApiKey> {
        match &self.embedding_base_url {
            Some(_) => self.embedding_api_key.as_ref(),
            None => self
                .embedding_api_key
                .as_ref()
                .or(self.openai_api_key.as_ref()),
        }
    }

    /// Whether the write path applies `rule`: it is not left out. (The rules that stand on
    /// the user's words also need `fact_grounding`.)
    pub fn applies(&self, rule: WriteRule) -> bool {
        !self.write_rules_off.contains(&rule)
    }

    /// Defaults, then `file` (if given), then `MNEMO_*` variables from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table = match file {
            Some(path) => read_table(path)?,
            None => toml::Table::new(),
        };
        let known = toml::Table::try_from(Config::default()).expect("defaults serialise");
        for (var, value) in env {
            let Some(key) = var.strip_prefix("MNEMO_").map(str::to_ascii_lowercase) else {
                continue;
            };
            // Tables (`[retrieval]`) and lists are set in the file only.
            let is_key = known
                .get(&key)
                .is_some_and(|v| !v.is_table() && !v.is_array())
                || OPTIONAL_KEYS.contains(&key.as_str());
            if !is_key {
                continue;
            }
            let parsed = if STRING_KEYS.contains(&key.as_str()) {
                toml::Value::String(value.clone())
            } else {
                parse_scalar(&value).ok_or_else(|| ConfigError::Env {
                    var: var.clone(),
                    value: value.clone(),
                    message: "expected a number or true/false".into(),
                })?
            };
            table.insert(key, parsed);
        }
        let invalid = |message: String| match file {
            Some(path) => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            None => ConfigError::Env {
                var: "MNEMO_*".into(),
                value: String::new(),
                message,
            },
        };
        let config =
            Config::deserialize(toml::Value::Table(table)).map_err(|e| invalid(e.to_string()))?;
        config.check_ranges().map_err(invalid)?;
        Ok(config)
    }

    /// Weights and thresholds must lie in 0..1.
    fn check_ranges(&self) -> Result<(), String> {
        let r = &self.retrieval;
        let weights = [
            ("mmr_lambda", Some(self.mmr_lambda)),
            ("recency_weight", Some(self.recency_weight)),
            ("conflict_similarity", Some(self.conflict_similarity)),
            ("score_threshold", self.score_threshold),
            ("relevance_floor", Some(self.relevance_floor)),
            ("min_rerank_score", self.min_rerank_score),
            ("retrieval.lexical_weight", Some(r.lexical_weight)),
            (
                "retrieval.lexical_neighbour_decay",
                Some(r.lexical_neighbour_decay),
            ),
            (
                "retrieval.vocabulary_expansion_weight",
                Some(r.vocabulary_expansion_weight),
            ),
            (
                "retrieval.document_expansion_weight",
                Some(r.document_expansion_weight),
            ),
        ];
        for (name, value) in weights {
            if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(format!("{name} must be between 0 and 1, got {v}"));
            }
        }
        if self.default_top_k > MAX_TOP_K {
            return Err(format!(
                "default_top_k may be at most {MAX_TOP_K}, got {}",
                self.default_top_k
            ));
        }
        if self.max_entries == 0 {
            return Err("max_entries must be at least 1 (it is how many facts and turns a conversation keeps)".into());
        }
        if self.index_shards == 0 || self.index_replication == 0 || self.index_timeout_secs == 0 {
            return Err(
                "index_shards, index_replication and index_timeout_secs must be at least 1".into(),
            );
        }
        if self.embedding_provider == EmbeddingProvider::Openai {
            if self.embedding_url().is_none() {
                return Err("embedding_provider = \"openai\" needs embedding_base_url (or openai_base_url): the endpoint's URL up to /v1".into());
            }
            if self.embedding_dimensions == Some(0) || self.embedding_timeout_secs == 0 {
                return Err(
                    "embedding_dimensions and embedding_timeout_secs must be at least 1".into(),
                );
            }
        }
        if self.embed_window_tokens == Some(0) {
            return Err("embed_window_tokens must be at least 1 (it is a number of tokens)".into());
        }
        if self.index_collection.trim().is_empty() {
            return Err("index_collection must name a collection".into());
        }
        if r.lexical_neighbour_turns > MAX_NEIGHBOUR_TURNS {
            return Err(format!(
                "retrieval.lexical_neighbour_turns may be at most {MAX_NEIGHBOUR_TURNS}, got {}",
                r.lexical_neighbour_turns
            ));
        }
        if r.vocabulary_expansion > MAX_VOCABULARY_EXPANSION {
            return Err(format!(
                "retrieval.vocabulary_expansion may be at most {MAX_VOCABULARY_EXPANSION}, got {}",
                r.vocabulary_expansion
            ));
        }
        if r.document_expansion > MAX_VOCABULARY_EXPANSION {
            return Err(format!(
                "retrieval.document_expansion may be at most {MAX_VOCABULARY_EXPANSION}, got {}",
                r.document_expansion
            ));
        }
        if !(r.neighbour_weight >= 0.0 && r.speaker_boost >= 0.0) {
            return Err("retrieval weights must not be negative".into());
        }
        Ok(())
    }

    /// Where the models this configuration names are: relative names resolve under
    /// `models_dir`, absolute paths stay as they are.
    pub fn model_paths(&self) -> ModelPaths {
        let under_models = |p: &Path| {
            if p.is_absolute() {
                p.to_owned()
            } else {
                self.models_dir.join(p)
            }
        };
        ModelPaths {
            onnxruntime_library: under_models(&self.onnxruntime_library),
            embedding_model_dir: under_models(Path::new(&self.embedding_model)),
            reranker_model_dir: under_models(Path::new(&self.retrieval.reranker_model)),
            local_llm_model: under_models(&self.local_llm_model),
            python: self.models_dir.join("python/bin/python"),
        }
    }
}

fn read_table(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    text.parse::<toml::Table>().map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

fn parse_scalar(raw: &str) -> Option<toml::Value> {
    let raw = raw.trim();
    if let Ok(b) = raw.parse::<bool>() {
        return Some(toml::Value::Boolean(b));
    }
    if let Ok(i) = raw.parse::<i64>() {
        return Some(toml::Value::Integer(i));
    }
    raw.parse::<f64>().ok().map(toml::Value::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn file_then_environment_override_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mnemo.toml");
        std::fs::write(&file, "memory_path = \"/data/mem\"\ndefault_top_k = 7\n").unwrap();
        let cfg = Config::load(
            Some(&file),
            env(&[
                ("MNEMO_DEFAULT_TOP_K", "9"),
                ("MNEMO_SCORE_THRESHOLD", "0.5"),
                ("MNEMO_MIN_RERANK_SCORE", "0.35"),
                ("MNEMO_OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
                ("MNEMO_OPENAI_API_KEY", "sk-secret"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.memory_path, PathBuf::from("/data/mem"));
        assert_eq!(cfg.default_top_k, 9);
        assert_eq!(cfg.score_threshold, Some(0.5));
        assert_eq!(cfg.min_rerank_score, Some(0.35));
        assert_eq!(
            cfg.openai_base_url.as_deref(),
            Some("http://127.0.0.1:8080/v1")
        );
        assert_eq!(cfg.max_entries, 500);
        assert_eq!(
            cfg.openai_api_key.as_ref().map(ApiKey::expose),
            Some("sk-secret")
        );
        assert!(!format!("{cfg:?}").contains("sk-secret"));
    }

    #[test]
    fn typos_and_bad_values_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mnemo.toml");
        std::fs::write(&file, "memory_pth = \"x\"\n").unwrap();
        let err = Config::load(Some(&file), env(&[])).unwrap_err().to_string();
        assert!(err.contains("memory_pth"), "{err}");

        let err = Config::load(None, env(&[("MNEMO_DEFAULT_TOP_K", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MNEMO_DEFAULT_TOP_K"), "{err}");

        let err = Config::load(None, env(&[("MNEMO_RECENCY_WEIGHT", "1.5")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("recency_weight must be between 0 and 1"),
            "{err}"
        );

        for (table, expected) in [
            (
                "lexical_neighbour_turns = 9",
                "retrieval.lexical_neighbour_turns may be at most 8, got 9",
            ),
            (
                "lexical_neighbour_decay = 1.5",
                "retrieval.lexical_neighbour_decay must be between 0 and 1",
            ),
            (
                "vocabulary_expansion = 51",
                "retrieval.vocabulary_expansion may be at most 50, got 51",
            ),
            (
                "vocabulary_expansion_weight = -0.1",
                "retrieval.vocabulary_expansion_weight must be between 0 and 1",
            ),
            (
                "document_expansion = 51",
                "retrieval.document_expansion may be at most 50, got 51",
            ),
            (
                "document_expansion_weight = 1.5",
                "retrieval.document_expansion_weight must be between 0 and 1",
            ),
        ] {
            std::fs::write(&file, format!("[retrieval]\n{table}\n")).unwrap();
            let err = Config::load(Some(&file), env(&[])).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn the_embedding_window_is_the_models_own_unless_set() {
        let load = |vars: &[(&str, &str)]| Config::load(None, env(vars));
        assert_eq!(load(&[]).unwrap().embed_window_tokens(), 128);
        let other = load(&[("MNEMO_EMBEDDING_MODEL", "all-mpnet-base-v2")]).unwrap();
        assert_eq!(other.embed_window_tokens(), MAX_EMBED_TOKENS);
        let set = load(&[("MNEMO_EMBED_WINDOW_TOKENS", "96")]).unwrap();
        assert_eq!(set.embed_window_tokens(), 96);
        let err = load(&[("MNEMO_EMBED_WINDOW_TOKENS", "0")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("embed_window_tokens must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn retrieval_knobs_live_in_their_own_table() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mnemo.toml");
        std::fs::write(
            &file,
            "[retrieval]\nlexical = false\nneighbour_weight = 0.3\n",
        )
        .unwrap();
        let cfg = Config::load(Some(&file), env(&[])).unwrap();
        assert!(!cfg.retrieval.lexical);
        assert_eq!(cfg.retrieval.neighbour_weight, 0.3);
        assert!(cfg.retrieval.dense, "unset knobs keep their defaults");

        std::fs::write(&file, "[retrieval]\nlexcal = false\n").unwrap();
        let err = Config::load(Some(&file), env(&[])).unwrap_err().to_string();
        assert!(err.contains("lexcal"), "{err}");
    }

    #[test]
    fn tokens_are_read_from_the_server_table_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mnemo.toml");
        std::fs::write(
            &file,
            r#"
[[server.tokens]]
name = "alice"
token_env = "MNEMO_TOKEN_ALICE"
conversations = ["alice", "team-*"]
agents = ["coder"]

[[server.tokens]]
token = "a-secret-written-in-the-file"
global = "none"
"#,
        )
        .unwrap();
        let cfg = Config::load(Some(&file), env(&[])).unwrap();
        let [alice, other] = cfg.server.tokens.as_slice() else {
            panic!("two tokens: {:?}", cfg.server.tokens);
        };
        assert_eq!(alice.token_env.as_deref(), Some("MNEMO_TOKEN_ALICE"));
        assert_eq!(alice.conversations, ["alice", "team-*"]);
        assert_eq!(alice.global, GlobalAccess::Read, "read by default");
        assert_eq!(other.global, GlobalAccess::None);
        assert!(other.agents.is_empty(), "no agents by default");
        assert!(!format!("{cfg:?}").contains("a-secret"));

        std::fs::write(&file, "[[server.tokens]]\nglobal = \"admin\"\n").unwrap();
        let err = Config::load(Some(&file), env(&[])).unwrap_err().to_string();
        assert!(err.contains("admin"), "{err}");
    }

    #[test]
    fn the_index_server_is_set_from_the_environment_and_its_key_never_printed() {
        let cfg = Config::load(
            None,
            env(&[
                ("MNEMO_INDEX_URL", "http://127.0.0.1:6334"),
                ("MNEMO_INDEX_API_KEY", "qdrant-secret"),
                ("MNEMO_INDEX_COLLECTION", "team"),
                ("MNEMO_INDEX_REPLICATION", "2"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.index_url.as_deref(), Some("http://127.0.0.1:6334"));
        assert_eq!(cfg.index_collection, "team");
        assert_eq!((cfg.index_shards, cfg.index_replication), (1, 2));
        assert_eq!(
            cfg.index_api_key.as_ref().map(ApiKey::expose),
            Some("qdrant-secret")
        );
        assert!(!format!("{cfg:?}").contains("qdrant-secret"));
        let err = Config::load(None, env(&[("MNEMO_INDEX_SHARDS", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("index_shards"), "{err}");
    }

    #[test]
    fn string_keys_stay_strings() {
        let cfg = Config::load(None, env(&[("MNEMO_MEMORY_PATH", "123")])).unwrap();
        assert_eq!(cfg.memory_path, PathBuf::from("123"));
    }
}
