//! The memory engine: what `mnemo` does with the store, the embedder, the index and the LLM
//! together.
//!
//! [`MemoryClient`] is the library entry point. Opening one loads the embedding model (and the
//! cross-encoder when installed), opens the vector index under `<memory_path>/index/` and runs
//! a [`sync`] pass that brings the index in step with the Markdown files, which are the source
//! of truth; [`watcher`] keeps it in step with hand edits afterwards.
//!
//! - Read path ([`retrieval`]): dense and BM25 candidates from the conversation and `global`
//!   ([`keys`] builds what each memory is indexed under, [`timeline`] finds its neighbouring
//!   turns, [`filter`] turns metadata filters into index filters, [`vocabulary`] offers the
//!   store's words nearest a query to add to its terms, their vectors kept between runs by
//!   [`vocabulary_file`]; [`model_words`] offers the model's words nearest a memory to add
//!   to its key), fused, reranked, blended
//!   with recency and diversified with MMR; turns that say nothing of their own
//!   ([`text::information`]) come last.
//! - Chat ([`chat`]): a chat request with memories injected ([`inject`]), its outgoing copy
//!   governed to fit the model's window ([`context`], over the `mnemo-context` crate),
//!   forwarded to the upstream LLM, its turns stored.
//! - Sessions ([`sessions`], over the `mnemo-session` crate): a chat request with
//!   `memory_session` is logged in full and continues the session's history; agents' notes
//!   (`MEMORY.md`) go into their requests' system prompts.
//! - Write path (`write`, through `MemoryClient::add` and after every chat turn): fact
//!   extraction (none from a message that says nothing), kept only where the user's words
//!   support it, said of the same person and in the same way ([`text::grounding`]);
//!   ADD/UPDATE/DELETE reconciliation ([`prompts`]), mended or asked again when its answer
//!   cannot be used; what the user takes back retracted, and an old value replaced by a new
//!   one, by rule ([`text::changes`], [`text::subjects`]); the rolling summary, checked
//!   sentence by sentence ([`text::summary_check`]); eviction and one git commit per pass.
//!   The rules of English these rely on live in [`text`].

pub mod access;
pub mod answers;
mod blocking;
pub mod chat;
mod client;
pub mod context;
mod context_state;
pub mod dates;
mod error;
mod files;
pub mod filter;
pub mod inject;
pub mod keys;
mod locks;
pub mod model_words;
mod pass_queue;
pub mod prompts;
pub mod queue;
mod recovery;
pub mod retrieval;
mod session_cache;
pub mod sessions;
pub mod snapshot;
pub mod sync;
pub mod text;
pub mod timeline;
pub mod vocabulary;
pub mod vocabulary_file;
pub mod watcher;
mod word_rules;
pub mod write;

pub use access::{Access, MemoryListing, ScopedClient, SessionUse, Unrestricted};
pub use chat::{ChatAnswer, ChatReply};
pub use client::{Consistency, IndexBackend, MemoryClient, OpenOptions};
pub use context::StrategyChoice;
pub use error::EngineError;
pub use mnemo_context::{ContextReport, Strategy};
pub use mnemo_session::{Excerpt, HistoryStyle, SessionId, SessionMeta};
pub use retrieval::{SearchHit, SearchRequest, StageScores};
pub use sessions::HistoryScope;
pub use sync::{SyncProgress, SyncReport};
pub use watcher::WatcherHandle;
pub use write::{WriteReport, MAX_TEXTS_PER_ADD};
