//! The memory engine: what `mnemo` does with the store, the embedder, the index and the LLM
//! together.
//!
//! [`MemoryClient`] is the library entry point, a handle to the assembled engine (`engine`).
//! Opening one loads the embedding model (and the cross-encoder when installed), opens the
//! vector index under `<memory_path>/index/` and runs a sync pass that brings the index in
//! step with the Markdown files, which are the source of truth; a watcher keeps it in step
//! with hand edits afterwards. A front end serving several callers works through
//! `client.as_caller(access)` (`access`), which checks each call; its sessions and a
//! conversation's settings are reached through that handle's `sessions()` and
//! `conversation(&id)` (`scoped_doors`), so no front end checks one thing and calls another.
//!
//! The engine is four wings over one floor of rules:
//! - `chat`: a chat request with memories injected (`chat::inject`), its outgoing copy
//!   governed to fit the model's window (`chat::governance`, over the `mnemo-context`
//!   crate), logged in its session with agents' notes in its system prompt
//!   (`chat::sessions`, over the `mnemo-session` crate), forwarded to the upstream LLM,
//!   its turns stored.
//! - `write`: after every chat turn and on `MemoryClient::add`, fact extraction (none from
//!   a message that says nothing), kept only where the user's words support it
//!   (`text::grounding`); ADD/UPDATE/DELETE reconciliation (`write::prompts`), mended or
//!   asked again when its answer cannot be used; what the user takes back retracted, and an
//!   old value replaced by a new one (`text::changes`, `text::subjects`); the rolling
//!   summary, checked sentence by sentence (`text::summary_check`); eviction and one git
//!   commit per pass. Passes are queued and journaled (`write::queue`).
//! - `retrieval`: dense and BM25 candidates from the conversation and `global`, fused,
//!   reranked, blended with recency and diversified with MMR; turns that say nothing of
//!   their own (`text::low_information`) come last; optional query expansion by the LLM.
//! - `index`: what each memory is indexed under (`index::keys`), its neighbouring turns
//!   (`index::timeline`), the sync pass and the watcher that keep the index in step with
//!   the files, the store's and the model's words that widen a query or a key.
//! - `text`: the rules of English the wings rely on, with no model (dates included).
//!
//! Beside them, state the engine owns and the wings share, in modules that never name
//! `MemoryClient`: governance's windows and counters (`governance_state`), the write
//! pass queue (`pass_queue`), sessions' cached logs (`session_cache`), per-key locks
//! (`locks`), the upstream tokens and cost of answers (`usage`), the engines of the
//! revisions searched last (`revision_cache`). `api_types` holds the answers of the API
//! that REST and MCP return. `as_of` answers a search from the memories as they were at a
//! git revision, with a second, read-only engine over that revision's files.
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
mod engine;
mod error;
mod governance_state;
mod index;
mod indexed_writes;
mod locks;
mod pass_queue;
mod retrieval;
mod revision_cache;
mod scoped_doors;
mod session_cache;
mod text;
mod usage;
mod write;

pub use access::{Access, MemoryListing, ScopedClient, SessionUse, Unrestricted};
pub use api_types::{
    AddResult, AgentMemory, AsOfCommit, AsOfSearch, Deleted, History, HistoryResults, Memory,
    MemoryPage, SearchResult, Updated,
};
pub use chat::governance::{CompactTarget, StrategyChoice};
pub use chat::inject::NOTHING_RELEVANT;
pub use chat::sessions::HistoryScope;
pub use chat::sessions::{
    CompactReport, MessagePage, SessionContext, SessionInfo, ToolOutputSlice, UNSUMMARISED_KEEP,
};
pub use chat::{context_json, ChatMemoryFields};
pub use chat::{ChatAnswer, ChatReply, ChatStreamReply, ChatTimings};
pub use engine::{Consistency, IndexBackend, MemoryClient, OpenOptions};
pub use error::EngineError;
pub use index::keys::SPEAKER_FIELD;
pub use index::model_words::{
    prepare as prepare_model_words, ModelWords, WORDS_FILE as MODEL_WORDS_FILE,
};
pub use index::sync::{SyncProgress, SyncReport};
pub use index::vocabulary_file::VocabularyFile;
pub use index::watcher::WatcherHandle;
pub use mnemo_context::{ContextReport, Strategy, EVERY_MODEL};
pub use mnemo_session::{Excerpt, HistoryStyle, SessionExport, SessionId, SessionMeta};
pub use retrieval::{SearchHit, SearchRequest, Searched, StageScores};
pub use scoped_doors::{ScopedConversation, ScopedSessions};
pub use usage::UsageTotals;
pub use write::conflicts::{Conflict, Conflicts, Resolution, Resolved};
pub use write::GROUNDED_ON;
pub use write::{Contested, WriteReport, MAX_TEXTS_PER_ADD};
