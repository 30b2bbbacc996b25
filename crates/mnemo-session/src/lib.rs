//! Chat sessions and an agent's own notes: the short-term record mnemo keeps beside its
//! long-term memories.
//!
//! - [`log`]: a session's `messages.jsonl`, append-only, one record a line, fsynced per
//!   append; a torn last line after a crash is skipped with a warning and cut off by the next
//!   append.
//! - [`history`]: the current branch the records make (rewinds when a client rewrote its
//!   history, compactions that stand in for old messages) and how a request's messages meet
//!   it ([`history::split`]: client-side or server-side history).
//! - [`store`]: `sessions/<id>/`, with `session.yaml` (title, conversation, agent, counts),
//!   listing, fork and soft delete.
//! - [`search`]: archive search over whole logs, with labelled excerpts.
//! - [`export`]: a session as one JSON document, exported and imported.
//! - [`agent`]: `agents/<agent>/MEMORY.md`, read, appended to and updated in place.
//!
//! Nothing here talks to an LLM or an index: the engine (`mnemo-engine`) puts sessions into
//! the chat path, and owns locking and git commits.

pub mod agent;
mod error;
pub mod export;
pub mod foreign;
pub mod history;
mod id;
pub mod log;
pub mod search;
pub mod store;

pub use agent::AgentNotes;
pub use error::SessionError;
pub use export::SessionExport;
pub use history::{History, HistoryStyle, Split};
pub use id::SessionId;
pub use log::Record;
pub use search::Excerpt;
pub use store::{LoadedSession, SessionMeta, SessionStore};
