use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] mnemo_store::StoreError),
    #[error(transparent)]
    Embed(#[from] mnemo_embed::EmbedError),
    #[error(transparent)]
    Index(#[from] mnemo_index::IndexError),
    #[error("{0}")]
    InvalidInput(String),
    #[error("upstream LLM: {0}")]
    Llm(#[from] mnemo_llm::LlmError),
    #[error("no upstream LLM is configured (set openai_base_url, or run with the local LLM)")]
    NoUpstream,
    #[error(transparent)]
    Git(#[from] mnemo_git::GitError),
    #[error("{path} is in use by another mnemo process")]
    Locked { path: PathBuf },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("background task failed: {0}")]
    Task(String),
}

impl EngineError {
    /// True when the caller asked for something invalid (as opposed to a failure of mnemo).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, EngineError::InvalidInput(_))
    }

    /// True when set-up has not installed a model or library.
    pub fn is_missing_setup(&self) -> bool {
        matches!(
            self,
            EngineError::Embed(mnemo_embed::EmbedError::Missing { .. })
        )
    }
}
