//! The engine's integration tests, one module a file. They build as one test binary because
//! each binary links the whole engine (the embedded index, ONNX Runtime, git) and its line
//! tables, about 120 MB apiece: one binary a file filled the disk of a cold CI run.
//!
//! `local_llm.rs` stays a binary of its own: its tests hold both cores with the real local
//! LLM, and would starve the timed waits of tests running beside them.

mod support;

mod api_embeddings;
mod as_of;
mod client;
mod conflicts;
mod disk_faults;
mod index_server;
mod model_words;
mod search;
mod watcher;
mod write;
