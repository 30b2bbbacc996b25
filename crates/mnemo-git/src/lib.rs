//! Git versioning of the Markdown store, so people can browse how their memories changed.
//!
//! The store's root is the work tree of its own repository (never a parent's, even when the
//! store lies inside another repository). [`Versioning::open`] creates it with a `.gitignore`
//! that keeps out what is rebuildable or temporary ([`IGNORED`]: the vector index,
//! `memory_index.json`, temporary and editor files). Writers note the files they touched
//! ([`Versioning::note_changed`]) and [`Versioning::commit_noted`] stages just those, so a
//! commit costs what changed, not the size of the store; [`Versioning::commit_all`] commits
//! whatever changed. The read side ([`Versioning::log`], [`Versioning::show`],
//! [`Versioning::history_of`]) answers "what changed, when" for the store, a conversation, a
//! file or one memory.
//!
//! Only local repositories: git2 is built without network transports. Every call blocks on
//! file I/O; see [`Versioning`] for threads.

mod error;
mod history;
mod repo;

pub use error::GitError;
pub use history::{ChangeStatus, CommitInfo, FileChange, MemoryVersion, Shown};
pub use repo::{GitConfig, Versioning, IGNORED};
