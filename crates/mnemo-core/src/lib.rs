//! The vocabulary every other mnemo crate speaks.
//!
//! - [`ConversationId`] and [`MemoryId`]: validated identifiers. A conversation id comes from
//!   users and becomes a directory name, so it is checked once here and trusted everywhere else.
//! - [`Role`] and [`MemoryRecord`]: one memory as it lives in a Markdown file (front matter
//!   plus body), independent of where it is stored or indexed.
//! - [`Config`]: every tunable, loaded from a TOML file and `MNEMO_*` environment variables.
//!
//! This crate does no I/O beyond reading the config file; it has no opinion on storage,
//! embedding or indexing.

mod config;
mod ids;
mod record;

pub use config::{
    page_size, ApiKey, Config, ConfigError, EmbeddingProvider, GlobalAccess, ModelPaths,
    RerankerMode, RetrievalConfig, ServerConfig, SessionTitles, TokenConfig, WriteRule,
    LOCAL_LLM_ALIAS, MAX_EMBED_TOKENS, MAX_PAGE, MAX_QUERY_BYTES, MAX_TOP_K,
};
pub use ids::{ConversationId, IdError, MemoryId};
pub use record::{
    check_metadata, stored_turn, MemoryRecord, Metadata, Role, RoleParseError, MAX_MEMORY_BYTES,
    MAX_METADATA_BYTES, MAX_METADATA_DEPTH,
};
