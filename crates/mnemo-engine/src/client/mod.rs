//! [`MemoryClient`]: the public face of the engine, and [`ScopedClient`], the same face as
//! one caller may use it.
//!
//! Every public method of the two lives in this folder, one file per concern: memories,
//! chat, sessions (with agents' notes), conversation settings, searches as of a revision,
//! the client's life (background work, waiting, what it was opened with), and the scoped
//! face with its doors for sessions and settings. A method here is a few lines: it borrows
//! the handle of the wing that does the work (`engine.memories()`, `engine.write()`,
//! `engine.chat()`, `engine.sessions()`, `engine.settings()`, `engine.as_of()`) and calls
//! it. No wing names `MemoryClient`.

mod as_of;
mod chat;
mod governance;
mod lifecycle;
mod memories;
pub(crate) mod scoped;
pub(crate) mod scoped_doors;
mod sessions;

use std::sync::Arc;

use mnemo_core::Config;

use crate::blocking::blocking;
use crate::engine::{Engine, OpenOptions};
use crate::error::EngineError;

/// The memory engine as a library: cheap to clone, safe to share between tasks.
#[derive(Clone)]
pub struct MemoryClient {
    pub(crate) engine: Arc<Engine>,
}

impl MemoryClient {
    /// Opens the store, model and index named by `config`, and syncs the index with the files.
    pub async fn open(config: Config, options: OpenOptions) -> Result<Self, EngineError> {
        let engine = blocking(move || Engine::open(config, options, None)).await?;
        Ok(Self { engine })
    }
}
