//! Git versioning of the Markdown store, so people can browse how their memories changed.
//!
//! The store's root is the work tree of its own repository (never a parent's, even when the
//! store lies inside another repository). [`Versioning::open`] creates it with a `.gitignore`
//! that keeps out what the caller says is rebuildable or temporary ([`GitConfig::ignore`]);
//! this crate knows nothing of the store's layout. Writers note the files they touched
//! ([`Versioning::note_changed`]) and [`Versioning::commit_noted`] stages just those, so a
//! commit costs what changed, not the size of the store; [`Versioning::commit_all`] commits
//! whatever changed. The read side ([`Versioning::log`], [`Versioning::show`],
//! [`Versioning::history`]) answers "what changed, when" for the store, a folder, a file or
//! the files of one memory; [`Versioning::export`] writes out the files of one commit, so a
//! caller can work on the store as it was (a search as of a revision).
//!
//! Modules: `repo` opens the repository and commits ([`Versioning`]), `history` reads it,
//! `export` writes a commit's files out, and `commits` is what they all know of a commit
//! ([`CommitInfo`]).
//!
//! Only local repositories: git2 is built without network transports. Every call blocks on
//! file I/O; see [`Versioning`] for threads.

mod commits;
mod error;
mod export;
mod history;
mod repo;

pub use commits::{ChangeStatus, CommitInfo, FileChange, SHORT_ID_DIGITS};
pub use error::GitError;
pub use export::{Export, ExportLimits};
pub use history::{FileVersion, Shown};
pub use repo::{GitConfig, Versioning};
