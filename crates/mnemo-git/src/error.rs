use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A libgit2 call failed; `action` says what was being done.
    #[error("{action} in {root}: {source}")]
    Git {
        action: String,
        root: PathBuf,
        source: git2::Error,
    },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("no revision {rev} in {root}")]
    NoRevision { rev: String, root: PathBuf },
    #[error("{path} did not exist at revision {rev} in {root}")]
    NoSuchPath {
        path: PathBuf,
        rev: String,
        root: PathBuf,
    },
    #[error("{path} is a folder at revision {rev} in {root}, not a file")]
    NotAFile {
        path: PathBuf,
        rev: String,
        root: PathBuf,
    },
    #[error("{path} is not a path inside the store {root}")]
    OutsideStore { path: PathBuf, root: PathBuf },
}
