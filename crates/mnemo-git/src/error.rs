//! [`GitError`]: everything that can go wrong while versioning the store or reading its
//! history, each variant naming the repository (or file) concerned so a message stands alone.

use std::io;
use std::path::PathBuf;

/// Why a versioning or history call failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A libgit2 call failed; `action` says what was being done.
    #[error("{action} in {root}: {source}")]
    Git {
        /// What was being done, as the message words it (`"cannot read the tree of HEAD"`).
        action: String,
        /// The repository's root: the store.
        root: PathBuf,
        /// libgit2's own error.
        source: git2::Error,
    },
    /// A file-system call outside libgit2 failed (resolving the root, writing `.gitignore`).
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, as the message words it.
        action: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// Why the operating system refused.
        source: io::Error,
    },
    /// The revision asked for resolves to no commit.
    #[error("no revision {rev} in {root}")]
    NoRevision {
        /// The revision as given (`HEAD~2`, a hash or a prefix of one, a branch).
        rev: String,
        /// The repository's root.
        root: PathBuf,
    },
    /// The file asked for is not in the tree of that revision.
    #[error("{path} did not exist at revision {rev} in {root}")]
    NoSuchPath {
        /// The file, relative to the store.
        path: PathBuf,
        /// The revision as given.
        rev: String,
        /// The repository's root.
        root: PathBuf,
    },
    /// The path asked for is a folder at that revision, so it has no content to show.
    #[error("{path} is a folder at revision {rev} in {root}, not a file")]
    NotAFile {
        /// The path, relative to the store.
        path: PathBuf,
        /// The revision as given.
        rev: String,
        /// The repository's root.
        root: PathBuf,
    },
    /// Exporting a revision would pass one of [`crate::ExportLimits`]' caps; nothing was
    /// written.
    #[error("revision {rev} in {root} holds more than {limit}, the most one export writes")]
    ExportTooLarge {
        /// The revision as given.
        rev: String,
        /// The cap it passes (`100000 files`, `536870912 bytes`).
        limit: String,
        /// The repository's root.
        root: PathBuf,
    },
    /// A picked file of a revision has a name that could land outside the export's folder
    /// (`..`, an empty name, a separator); nothing was written.
    #[error("revision {rev} in {root} holds a file whose path cannot be written safely: {path:?}")]
    UnsafePath {
        /// The path as the tree names it.
        path: String,
        /// The revision as given.
        rev: String,
        /// The repository's root.
        root: PathBuf,
    },
    /// A path outside the store's root, or one that climbs out of it with `..`.
    #[error("{path} is not a path inside the store {root}")]
    OutsideStore {
        /// The path as given.
        path: PathBuf,
        /// The store's root.
        root: PathBuf,
    },
}

impl GitError {
    /// Whether a lock held by another git process (or left by a dead one) refused the call.
    pub fn is_locked(&self) -> bool {
        matches!(self, GitError::Git { source, .. } if source.code() == git2::ErrorCode::Locked)
    }
}
