//! The Markdown file store: mnemo's source of truth.
//!
//! Every memory is one Markdown file with YAML front matter under
//! `<memory_path>/entries/<conversation>/...` (layout in [`layout`]). This crate writes them
//! atomically ([`atomic`]), reads them back tolerantly, including files people wrote by hand
//! ([`format`](mod@format)), and soft-deletes them into `deleted/` so nothing a user wrote is
//! ever destroyed. Every file it reads is untrusted input (hand edits, `git pull`): links,
//! special files, oversized files and YAML bombs are refused file by file ([`untrusted`]), and a
//! scan skips them with a message naming each.
//!
//! [`FileStore`] is the one entry point; it never touches the vector index. Paths it hands
//! out are absolute and always inside the store.

pub mod atomic;
pub mod format;
pub mod layout;
mod store;
pub mod untrusted;

pub use layout::{Location, MemoryKind};
pub use mnemo_fs::{FreeSpace, MIN_FREE_BYTES};
pub use store::{
    duplicate_id, sha256_hex, FileStore, ListedFile, Scan, SkippedFile, StoreError, StoredMemory,
    WrittenFile,
};
