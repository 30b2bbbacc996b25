//! [`EngineError`]: every way an engine call can fail, wrapping the errors of the crates it
//! drives (store, models, index, LLM, git) so a caller handles one type.
//!
//! Front ends sort errors by kind rather than by message: [`EngineError::InvalidInput`] is the
//! caller's mistake (the server answers 400, not 500), [`EngineError::is_missing_setup`] a
//! model or library that set-up has not installed.

use std::path::PathBuf;

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Reading, writing or deleting a memory file failed.
    #[error(transparent)]
    Store(#[from] mnemo_store::StoreError),
    /// The embedding model or the cross-encoder could not be loaded or run.
    #[error(transparent)]
    Embed(#[from] mnemo_embed::EmbedError),
    /// The vector index could not be opened, queried or updated.
    #[error(transparent)]
    Index(#[from] mnemo_index::IndexError),
    /// The caller asked for something invalid (a bad filter, an out-of-range knob, an empty
    /// memory); the message says what and why.
    #[error("{0}")]
    InvalidInput(String),
    /// A call to the upstream LLM failed.
    #[error("upstream LLM: {0}")]
    Llm(#[from] mnemo_llm::LlmError),
    /// A chat was asked for, but no upstream LLM is configured and no local one runs.
    #[error("no upstream LLM is configured (set openai_base_url, or run with the local LLM)")]
    NoUpstream,
    /// Versioning the store, or reading its history, failed.
    #[error(transparent)]
    Git(#[from] mnemo_git::GitError),
    /// The index holds vectors of another embedding model than the one configured.
    #[error("the index was filled by {index}, but the configuration names {configured}: vectors of two models cannot be mixed. Run `mnemo reindex --full` to embed every memory again with the configured one, or configure the old one again")]
    EmbedderChanged {
        /// The model whose vectors the index holds (name and dimension).
        index: String,
        /// The model configured now.
        configured: String,
    },
    /// Another process holds the store's lock: one process at a time may own a store.
    #[error("the store {path} is in use by another mnemo process")]
    Locked {
        /// The locked store.
        path: PathBuf,
    },
    /// A file-system call of the engine's own failed (the lock, the snapshot, the watcher).
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, as the message words it (`"cannot lock"`, ...).
        action: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// Why the operating system refused.
        source: std::io::Error,
    },
    /// Even governed, the request does not fit the model's context window; nothing was
    /// sent upstream.
    #[error(transparent)]
    ContextLengthExceeded(#[from] mnemo_context::ContextLengthExceeded),
    /// A conversation's stored strategy file cannot be used.
    #[error("{path}: {message}")]
    StoredStrategy {
        /// The file, relative to the store.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The embedding model's words (document expansion) could not be had.
    #[error(transparent)]
    ModelWords(#[from] ModelWordsError),
    /// A chat session or an agent's notes could not be used.
    #[error(transparent)]
    Session(#[from] mnemo_session::SessionError),
    /// The LLM could not write a summary that was asked for; nothing was changed.
    #[error("the summary could not be written: {0}")]
    SummaryFailed(String),
    /// What was asked for does not exist; the message says what.
    #[error("{0}")]
    NotFound(String),
    /// The caller may not touch what the request names (a conversation, an agent's notes);
    /// the message says what. Front ends that check access raise it through
    /// [`crate::access::Access`].
    #[error("{0}")]
    Forbidden(String),
    /// The store cannot be written (a read-only filesystem, missing permissions): found when
    /// the store is opened, before anything else is done.
    #[error("the store {path} cannot be written ({reason}): mnemo keeps its memories, lock and index there, so mount it read-write or let this user write it")]
    StoreNotWritable {
        /// The store.
        path: PathBuf,
        /// What the operating system said.
        reason: String,
    },
    /// Blocking work moved off the async runtime panicked or was cancelled.
    #[error("background task failed: {0}")]
    Task(String),
}

impl EngineError {
    /// True when the caller asked for something invalid (as opposed to a failure of mnemo).
    pub fn is_invalid_input(&self) -> bool {
        match self {
            EngineError::InvalidInput(_) => true,
            EngineError::Session(e) => e.is_invalid_input(),
            _ => false,
        }
    }

    /// True when what was asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            EngineError::NotFound(_) => true,
            EngineError::Session(e) => e.is_not_found(),
            _ => false,
        }
    }

    /// True when the caller may not touch what the request names.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, EngineError::Forbidden(_))
    }

    /// True when the request conflicts with the state of what it names (a deleted session).
    pub fn is_conflict(&self) -> bool {
        matches!(self, EngineError::Session(e) if e.is_conflict())
    }

    /// True when the index's server does not answer: the request may succeed later (a
    /// server answers 503), and what was written to files is indexed once it answers.
    pub fn is_index_unavailable(&self) -> bool {
        matches!(
            self,
            EngineError::Index(mnemo_index::IndexError::Unavailable { .. })
        )
    }

    /// True when a write failed for lack of room on the store's disk (no space, or a quota
    /// reached), however deep the error that says so: the request may succeed once space
    /// is freed (a server answers 507).
    pub fn is_out_of_space(&self) -> bool {
        self.has_io_cause(
            |io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                )
            },
            &[libc::ENOSPC, libc::EDQUOT],
        )
    }

    /// True when the disk failed a write or read (an I/O error, EIO), however deep the
    /// error that says so: whether the request's write reached the disk is not known.
    pub fn is_disk_failure(&self) -> bool {
        self.has_io_cause(|io| io.raw_os_error() == Some(libc::EIO), &[libc::EIO])
    }

    /// Whether an I/O error in this error's chain passes `test`, or, for errors that carry
    /// only the OS's words (the index's, git's), its text ends one of `codes` as Rust's I/O
    /// errors print them ("(os error 28)").
    fn has_io_cause(&self, test: impl Fn(&std::io::Error) -> bool, codes: &[i32]) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = cause {
            if error.downcast_ref::<std::io::Error>().is_some_and(&test) {
                return true;
            }
            cause = error.source();
        }
        let text = self.to_string();
        codes
            .iter()
            .any(|code| text.contains(&format!("(os error {code})")))
    }

    /// True when set-up has not installed a model or library.
    pub fn is_missing_setup(&self) -> bool {
        matches!(
            self,
            EngineError::Embed(mnemo_embed::EmbedError::Missing { .. })
                | EngineError::ModelWords(ModelWordsError::Embed(
                    mnemo_embed::EmbedError::Missing { .. }
                ))
        )
    }
}

/// Why the model's words are not available.
#[derive(Debug, thiserror::Error)]
pub enum ModelWordsError {
    /// The tokenizer file could not be read or holds no word list.
    #[error("{path}: {reason}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// Embedding the words failed.
    #[error(transparent)]
    Embed(#[from] mnemo_embed::EmbedError),
    /// The lexical encoder could not be made.
    #[error(transparent)]
    Index(#[from] mnemo_index::IndexError),
}
