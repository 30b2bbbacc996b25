//! The memory engine: what `mnemo` does with the store, the embedder, the index and the LLM
//! together.
//!
//! [`MemoryClient`] is the library entry point, a handle to the assembled engine
//! (`engine::Engine`). Opening one loads the embedding model (and the cross-encoder when
//! installed), opens the vector index under `<memory_path>/index/` and runs a sync pass that
//! brings the index in step with the Markdown files, which are the source of truth; a
//! watcher keeps it in step with hand edits afterwards. A front end serving several callers
//! works through `client.as_caller(access)` ([`ScopedClient`]), which checks each call; its
//! sessions and a conversation's settings are reached through that handle's `sessions()`
//! and `conversation(&id)`, so no front end checks one thing and calls another.
//!
//! The layout, from the top down:
//! - `client`: every public method of [`MemoryClient`] and [`ScopedClient`], one file per
//!   concern, each a few lines that borrow a wing's handle from the engine and call it.
//! - The wings, each with its handle on the engine (`engine.chat()`, `engine.sessions()`,
//!   `engine.write()`, `engine.memories()`, `engine.settings()`, `engine.as_of()`):
//!   - `chat`: a chat request with memories and agents' notes injected (`inject`), its
//!     outgoing copy governed to fit the model's window (`chat::governance`, over the
//!     `mnemo-context` crate), logged in its session, forwarded to the upstream LLM, its
//!     turns stored.
//!   - `sessions`: chat sessions' logs (`sessions::turns`), their administration
//!     (`sessions::admin`), compaction (`sessions::compaction`) and agents' notes
//!     (`sessions::notes`), over the `mnemo-session` crate.
//!   - `write`: after every chat turn and on `MemoryClient::add`, fact extraction (none
//!     from a message that says nothing), kept only where the user's words support it
//!     (`text::grounding`); ADD/UPDATE/DELETE reconciliation (`write::prompts`), mended or
//!     asked again when its answer cannot be used; what the user takes back retracted, and
//!     an old value replaced by a new one (`text::changes`, `text::subjects`); the rolling
//!     summary, checked sentence by sentence (`text::summary_check`); eviction and one git
//!     commit per pass. Passes are queued and journaled (`write::queue`).
//!   - `memories`: the memories one at a time (searched, listed, read, deleted and edited
//!     under their conversation's lock, their git history); `conversation_settings`: a
//!     conversation's stored strategy and the compactions asked for, which the chat and
//!     session wings share; `as_of`: a search over the memories as they were at a git
//!     revision, with a second, read-only engine over that revision's files.
//! - `engine`: the engine itself, its shared base (configuration, store, models, index,
//!   LLM, git) and the parts it owns for the wings (`state`), with the writes to files and
//!   index that every wing uses (`indexed_writes`).
//! - `retrieval`: dense and BM25 candidates from the conversation and `global`, fused,
//!   reranked, blended with recency and diversified with MMR; turns that say nothing of
//!   their own (`text::low_information`) come last; optional query expansion by the LLM.
//! - `index`: what each memory is indexed under (`index::keys`), its neighbouring turns
//!   (`index::timeline`), the sync pass and the watcher that keep the index in step with
//!   the files, the store's and the model's words that widen a query or a key.
//! - `text`: the rules of English the wings rely on, with no model (dates included);
//!   `state`: the state each wing owns (governance's windows, sessions' cached logs, the
//!   pass queue, locks, usage, revisions' engines), naming no engine or wing; `api_types`:
//!   the answers of the API that REST and MCP return; `access`: who may touch what.
//!
//! Every module is private and the public names are re-exported here, so other crates
//! import from the root and the folders can move without breaking them; inside the
//! engine, imports name the defining module. `cargo doc --document-private-items` shows
//! the wings' own documentation.

#![deny(missing_docs)]

mod access;
mod api_types;
mod as_of;
mod blocking;
mod chat;
mod client;
mod conversation_settings;
mod engine;
mod error;
mod index;
mod indexed_writes;
mod inject;
mod memories;
mod retrieval;
mod sessions;
mod state;
mod text;
mod write;

pub use access::{Access, MemoryListing, SessionUse, Unrestricted};
pub use api_types::{
    AddResult, AgentMemory, AsOfCommit, AsOfSearch, Deleted, History, HistoryResults, Memory,
    MemoryPage, SearchResult, Updated,
};
pub use chat::governance::StrategyChoice;
pub use chat::{context_json, ChatMemoryFields};
pub use chat::{ChatAnswer, ChatReply, ChatStreamReply, ChatTimings};
pub use client::scoped::ScopedClient;
pub use client::scoped_doors::{ScopedConversation, ScopedSessions};
pub use client::MemoryClient;
pub use conversation_settings::CompactTarget;
pub use engine::{Consistency, IndexBackend, OpenOptions};
pub use error::EngineError;
pub use index::keys::SPEAKER_FIELD;
pub use index::model_words::{
    prepare as prepare_model_words, ModelWords, WORDS_FILE as MODEL_WORDS_FILE,
};
pub use index::sync::{SyncProgress, SyncReport};
pub use index::vocabulary_file::VocabularyFile;
pub use index::watcher::WatcherHandle;
pub use inject::NOTHING_RELEVANT;
pub use mnemo_context::{ContextReport, Strategy, EVERY_MODEL};
pub use mnemo_session::{Excerpt, HistoryStyle, SessionExport, SessionId, SessionMeta};
pub use retrieval::{SearchHit, SearchRequest, Searched, StageScores};
pub use sessions::compaction::{CompactReport, UNSUMMARISED_KEEP};
pub use sessions::{HistoryScope, MessagePage, SessionContext, SessionInfo, ToolOutputSlice};
pub use state::usage::UsageTotals;
pub use write::conflicts::{Conflict, Conflicts, Resolution, Resolved};
pub use write::GROUNDED_ON;
pub use write::{Contested, WriteReport, MAX_TEXTS_PER_ADD};
