//! Context governance: what one LLM request sends upstream, for the proxy and for Rust agents.
//!
//! A tool-using agent's history outgrows any context window, and pays on every request for
//! tool outputs nobody will read again. This crate shrinks the outgoing copy of a request,
//! and only that copy: the caller keeps the history as it was.
//!
//! - Tokens and windows: [`tokens`] counts (exactly for OpenAI's tokenizers, else four
//!   characters a token), [`window`] knows how much a model takes and [`cost`] what a call
//!   to it costs.
//! - The [`strategy`] object says what to do; strategies from a request, a conversation and
//!   an agent merge field by field ([`Strategy::over`]).
//! - The [`pipeline`] runs the stages in order — [`repair`], [`offload`], [`compact`] (or
//!   trim), [`summarize`], the inflation guard and the pre-flight check — and reports what
//!   it did ([`ContextReport`]). Offloaded outputs and summaries are kept by stores the caller
//!   provides ([`OutputStore`], [`SummaryStore`]); files and memory are built in. A library
//!   user sees the window fill, archives what a summary replaces and adds context after it
//!   through [`Callbacks`].
//! - For agents that keep their conversation in memory: [`buffer::ConversationBuffer`] and
//!   [`compressor::Compressor`].
//! - [`config::ContextConfig`] is the `[context]` table of mnemo's configuration.
//!
//! Messages are OpenAI chat messages as `serde_json::Value`s ([`messages`]), so whatever a
//! client sends passes through untouched unless a stage means to change it.

pub mod buffer;
pub mod compact;
pub mod compressor;
pub mod config;
pub mod cost;
pub mod messages;
pub mod offload;
pub mod pipeline;
pub mod repair;
pub mod strategy;
pub mod summarize;
pub mod tokens;
pub mod window;

pub use config::ContextConfig;
pub use mnemo_fs::StoreDir;
pub use offload::{DirOutputStore, MemoryOutputStore, OutputStore};
pub use pipeline::{
    static_marker, Callbacks, ContextLengthExceeded, ContextReport, Governed, Governor,
    InflationGuard,
};
pub use strategy::{Keep, Mode, ResolvedStrategy, Strategy, StrategyError, SummaryWindow};
pub use summarize::{
    DirSummaryStore, MemorySummaryStore, Summariser, SummaryRequest, SummaryStore,
};
pub use tokens::{counter_for_model, ApproxCounter, CachedCounter, TiktokenCounter, TokenCounter};
pub use window::{ContextWindows, Window, WindowSource, EVERY_MODEL};
