//! What can go wrong with sessions and agent notes, worded for the person who sent the request.

use std::io;

/// A session or agent-notes operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An id or argument the caller sent is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// No session has this id.
    #[error("no session {0:?}")]
    NotFound(String),
    /// The session was deleted.
    #[error("session {id:?} was deleted at {at}; fork it to continue from its history")]
    Deleted {
        /// The session.
        id: String,
        /// When it was deleted.
        at: String,
    },
    /// The session exists already (a fork's chosen id).
    #[error("session {0:?} exists already")]
    Exists(String),
    /// A file of the store is not what mnemo can read.
    #[error("{path}: {message}")]
    BadFile {
        /// Store-relative path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The disk failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Store-relative path.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// The session's log is full: the append was refused and nothing was written.
    #[error("{path}: {message}")]
    LogFull {
        /// Store-relative path of the log.
        path: String,
        /// Its size and the limit.
        message: String,
    },
    /// The session changed under an operation that needed it as it was; trying again helps.
    #[error("{0}")]
    Changed(String),
    /// The text to replace in an agent's notes is not there, or not once.
    #[error("{0}")]
    NoMatch(String),
}

impl SessionError {
    /// Whether the caller's input is at fault (a 400, exit code 2).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, SessionError::Invalid(_) | SessionError::NoMatch(_))
    }

    /// Whether the thing asked for does not exist (a 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SessionError::NotFound(_))
    }

    /// Whether the request conflicts with the session's state (a 409).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            SessionError::Deleted { .. }
                | SessionError::Exists(_)
                | SessionError::Changed(_)
                | SessionError::LogFull { .. }
        )
    }
}
