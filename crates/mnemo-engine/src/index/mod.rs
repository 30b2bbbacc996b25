//! Index upkeep: what keeps the vector index in step with the Markdown files, and what each
//! memory is indexed under.
//!
//! - [`keys`]: the dense and lexical keys of a memory (its text, the turn before it, its
//!   dates resolved), [`timeline`]: which turns neighbour which, [`filter`]: metadata filters
//!   as index filters.
//! - [`sync`]: a pass that brings the index in step with the files (the [`sync::Indexer`]
//!   embeds and upserts), [`snapshot`]: what the index holds, file by file, written beside
//!   it; [`watcher`]: hand edits followed as they happen; `recovery`: a lost index server
//!   re-synced once it answers again.
//! - The store's and the model's words: [`vocabulary`] (the store's words nearest a query,
//!   their vectors kept by [`vocabulary_file`]), [`model_words`] (the embedding model's words
//!   nearest a memory, added to its key), both on the rules of `word_rules`.
//!
//! Nothing here names `MemoryClient`: the engine hands these parts what they work on.

pub mod filter;
pub mod keys;
pub mod model_words;
pub(crate) mod recovery;
pub mod snapshot;
pub mod sync;
pub mod timeline;
pub mod vocabulary;
pub mod vocabulary_file;
pub mod watcher;
pub(crate) mod word_rules;
