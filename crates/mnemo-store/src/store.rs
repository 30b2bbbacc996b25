//! [`FileStore`]: reading, writing, listing and soft-deleting the memory files under one root.
//!
//! The store names files through [`layout`](crate::layout), renders and parses them through
//! [`format`](crate::format) and writes them through [`atomic`](crate::atomic), so a crash
//! never leaves half a file. Scans skip unreadable files rather than fail, and report them in
//! [`Scan::skipped`]; deleting moves a file under `deleted/` instead of removing it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, MemoryRecord};
use tracing::warn;

use crate::atomic::{rename_durably, write_atomic};
use crate::format::{self, FileContext, FormatError};
use crate::layout::{self, Location, MemoryKind, DELETED_DIR, ENTRIES_DIR};
use crate::untrusted::{self, Refusal, MAX_MEMORY_FILE_BYTES};

/// Why the store could not do what was asked. Every variant names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system call failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What the store was doing, as the message words it (`"cannot write"`, ...).
        action: &'static str,
        /// The file or folder it was doing it to.
        path: PathBuf,
        /// Why the operating system refused.
        source: io::Error,
    },
    /// The path lies outside the store's root, or inside it but not where a memory file can
    /// be (see [`Location::parse`]).
    #[error("{path} is not a memory file inside the store {root}")]
    OutsideStore {
        /// The path as given.
        path: PathBuf,
        /// The store's root.
        root: PathBuf,
    },
    /// The file's text is not a memory: unreadable front matter, or no content.
    #[error("{path}: {source}")]
    Format {
        /// The file (absolute).
        path: PathBuf,
        /// What is wrong with its text.
        source: FormatError,
    },
    /// The file's bytes are not valid UTF-8.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The file (absolute).
        path: PathBuf,
    },
    /// The file or a folder on its way is not something mnemo reads or writes: a link, a
    /// FIFO or device, a file larger than a memory can be.
    #[error("{path}: {reason}")]
    Refused {
        /// The file or folder (absolute).
        path: PathBuf,
        /// Why, as one line.
        reason: String,
    },
    /// A tombstone was asked to be deleted again.
    #[error("{path} is already deleted")]
    AlreadyDeleted {
        /// The tombstone, as given.
        path: PathBuf,
    },
}

/// The lower-case hex sha256 of `bytes`: how the index's snapshot tells a changed file.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// A record and the file it was read from or written to (absolute).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMemory {
    /// The memory as parsed (or as written).
    pub record: MemoryRecord,
    /// The file's absolute path, inside the store.
    pub path: PathBuf,
}

/// A memory file found by [`FileStore::listed_files`], not read.
#[derive(Debug, Clone)]
pub struct ListedFile {
    /// Its absolute path.
    pub path: PathBuf,
    /// The memory id its name carries, if it has one.
    pub named_id: Option<MemoryId>,
    /// The creation time its name carries (`<ts>__<uuid>.md`), if it has such a name.
    pub named_time: Option<DateTime<Utc>>,
}

/// A file the store has just written: where, and the sha256 of its bytes (what the index's
/// snapshot records), so nobody has to read it back to hash it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    /// Absolute path, inside the store.
    pub path: PathBuf,
    /// Lower-case hex sha256 of the bytes written.
    pub sha256: String,
}

/// A file a scan could not read, and why.
#[derive(Debug)]
pub struct SkippedFile {
    /// The file (absolute).
    pub path: PathBuf,
    /// Why it was skipped, as one line for a log or a report.
    pub reason: String,
}

/// Everything a scan found: the memories, and the files it had to skip.
#[derive(Debug, Default)]
pub struct Scan {
    /// The memories read, oldest first within each conversation.
    pub memories: Vec<StoredMemory>,
    /// The files that could not be read; a scan never fails on one bad file.
    pub skipped: Vec<SkippedFile>,
}

/// The Markdown store rooted at `<memory_path>`.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

impl FileStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, StoreError> {
        let root = root.as_ref();
        fs::create_dir_all(root.join(ENTRIES_DIR)).map_err(io_err("cannot create", root))?;
        let root = root
            .canonicalize()
            .map_err(io_err("cannot resolve", root))?;
        let store = Self { root };
        store.check_folder(&store.entries_dir())?;
        Ok(store)
    }

    /// The store's root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Room left on the store's filesystem.
    pub fn free_space(&self) -> Result<mnemo_fs::FreeSpace, StoreError> {
        mnemo_fs::free_space(&self.root)
            .map_err(io_err("cannot measure the room left on", &self.root))
    }

    /// The folder of the embedded vector index.
    pub fn index_dir(&self) -> PathBuf {
        self.root.join(layout::INDEX_DIR)
    }

    /// The file recording what the index holds.
    pub fn snapshot_path(&self) -> PathBuf {
        self.root.join(layout::SNAPSHOT_FILE)
    }

    /// The file keeping the vocabulary's word vectors between runs.
    pub fn vocabulary_path(&self) -> PathBuf {
        self.root.join(layout::VOCABULARY_FILE)
    }

    /// The store's id ([`layout::STORE_ID_FILE`]), made and written on first use. A file
    /// that is not one UUID (a hand edit, a link) is an error saying how to recover.
    pub fn store_id(&self) -> Result<uuid::Uuid, StoreError> {
        let path = self.root.join(layout::STORE_ID_FILE);
        let refused = |reason: String| StoreError::Refused {
            path: path.clone(),
            reason: format!(
                "{reason}; delete it to give the store a new id (an index server then indexes \
                 the store anew)"
            ),
        };
        match untrusted::read_regular(&path, 64) {
            Ok(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .ok_or_else(|| refused("not a store id (one UUID)".into())),
            Err(e) if e.is_not_found() => {
                let id = uuid::Uuid::new_v4();
                crate::atomic::write_atomic(&path, format!("{id}\n").as_bytes()).map_err(
                    |source| StoreError::Io {
                        action: "cannot write",
                        path: path.clone(),
                        source,
                    },
                )?;
                Ok(id)
            }
            Err(e) => Err(refused(e.to_string())),
        }
    }

    /// The lock file one process at a time holds: at the root, not in the rebuildable
    /// `index/` folder, which a person may delete while a server runs.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(layout::LOCK_FILE)
    }

    /// The folder every memory file lives under.
    pub fn entries_dir(&self) -> PathBuf {
        self.root.join(ENTRIES_DIR)
    }

    /// A path inside the store as the snapshot, payloads and git name it: relative to the
    /// root (paths outside the store are returned as they are).
    pub fn relative<'p>(&self, path: &'p Path) -> std::borrow::Cow<'p, str> {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
    }

    /// Writes a new record to the file its role, conversation, time and id call for.
    pub fn write(&self, record: &MemoryRecord) -> Result<WrittenFile, StoreError> {
        let kind = MemoryKind::of_role(record.role);
        let path = layout::conversation_dir(&self.root, &record.conversation_id)
            .join(kind.folder())
            .join(layout::file_name(kind, record.id, record.created_at));
        self.write_to(path, record)
    }

    /// Writes `record` over the live memory file at `path` (whatever its name), which must
    /// hold the same memory: an edit keeps the file a person may have named.
    pub fn rewrite(&self, path: &Path, record: &MemoryRecord) -> Result<WrittenFile, StoreError> {
        let (location, relative) = self.locate(path)?;
        let absolute = self.root.join(&relative);
        if location.tombstone {
            return Err(StoreError::AlreadyDeleted { path: absolute });
        }
        let current = self.read(&absolute)?;
        if current.record.id != record.id || location.conversation != record.conversation_id {
            return Err(StoreError::Refused {
                path: absolute,
                reason: format!("holds memory {}, not {}", current.record.id, record.id),
            });
        }
        self.write_to(absolute, record)
    }

    /// Renders `record` to `path`, refusing what the store would refuse to read back.
    fn write_to(&self, path: PathBuf, record: &MemoryRecord) -> Result<WrittenFile, StoreError> {
        let refused = |reason: String| StoreError::Refused {
            path: path.clone(),
            reason,
        };
        mnemo_core::check_metadata(&record.metadata).map_err(refused)?;
        if record.content.len() > mnemo_core::MAX_MEMORY_BYTES {
            return Err(refused(format!(
                "{} bytes of text; a memory holds at most {}",
                record.content.len(),
                mnemo_core::MAX_MEMORY_BYTES
            )));
        }
        let bytes = format::render(record);
        self.check_folder(path.parent().unwrap_or(&self.root))?;
        write_atomic(&path, bytes.as_bytes()).map_err(io_err("cannot write", &path))?;
        Ok(WrittenFile {
            sha256: sha256_hex(bytes.as_bytes()),
            path,
        })
    }

    /// Reads one memory file, tolerantly (see [`format`](crate::format)); warnings go to the
    /// log.
    pub fn read(&self, path: &Path) -> Result<StoredMemory, StoreError> {
        let (_, relative) = self.locate(path)?;
        let absolute = self.root.join(&relative);
        let bytes = self.read_bytes(&absolute)?;
        self.parse(&absolute, &bytes)
    }

    /// The bytes of a memory file, read as untrusted input: a regular file of at most
    /// [`MAX_MEMORY_FILE_BYTES`], never through a link (see [`untrusted`]).
    pub fn read_bytes(&self, path: &Path) -> Result<Vec<u8>, StoreError> {
        let (_, relative) = self.locate(path)?;
        let absolute = self.root.join(&relative);
        self.check_folder(absolute.parent().unwrap_or(&self.root))?;
        untrusted::read_regular(&absolute, MAX_MEMORY_FILE_BYTES).map_err(|refusal| match refusal {
            Refusal::Io(source) => StoreError::Io {
                action: "cannot read",
                path: absolute,
                source,
            },
            other => StoreError::Refused {
                path: absolute,
                reason: other.to_string(),
            },
        })
    }

    /// Refuses a folder of the store reached through a link (or that is no folder).
    fn check_folder(&self, folder: &Path) -> Result<(), StoreError> {
        untrusted::check_real_folders(&self.root, folder).map_err(|reason| StoreError::Refused {
            path: folder.to_owned(),
            reason,
        })
    }

    /// Parses a memory file's bytes, already read from `path`.
    pub fn parse(&self, path: &Path, bytes: &[u8]) -> Result<StoredMemory, StoreError> {
        let (location, relative) = self.locate(path)?;
        let absolute = self.root.join(&relative);
        let text = std::str::from_utf8(bytes).map_err(|_| StoreError::NotText {
            path: absolute.clone(),
        })?;
        let modified = fs::symlink_metadata(&absolute)
            .and_then(|m| m.modified())
            .ok()
            .and_then(system_time_to_utc);
        let ctx = FileContext {
            location: &location,
            relative_path: &relative,
            modified,
        };
        let parsed = format::parse(text, &ctx).map_err(|source| StoreError::Format {
            path: absolute.clone(),
            source,
        })?;
        for warning in &parsed.warnings {
            warn!(file = %absolute.display(), "{warning}");
        }
        Ok(StoredMemory {
            record: parsed.record,
            path: absolute,
        })
    }

    /// Where `path` sits in the store, or why it is not a memory file of this store.
    /// Accepts absolute paths and paths relative to the store root.
    pub fn locate(&self, path: &Path) -> Result<(Location, PathBuf), StoreError> {
        let outside = || StoreError::OutsideStore {
            path: path.to_owned(),
            root: self.root.clone(),
        };
        let parts = mnemo_fs::store_relative(&self.root, path).ok_or_else(outside)?;
        let relative: PathBuf = parts.iter().collect();
        let location = Location::parse(&relative).ok_or_else(outside)?;
        Ok((location, relative))
    }

    /// All live (not deleted) memories of every conversation. Two files claiming one id
    /// (hand copies, a `git pull`): the first in path order is the memory, the others are
    /// skipped with a message naming both.
    pub fn scan(&self) -> Scan {
        let mut scan = Scan::default();
        for conversation in self.conversations() {
            self.scan_into(&conversation, &mut scan);
        }
        let mut first: std::collections::HashMap<MemoryId, PathBuf> = Default::default();
        let mut memories = std::mem::take(&mut scan.memories);
        memories.retain(|m| match first.get(&m.record.id) {
            Some(other) => {
                let reason = duplicate_id(&m.path, m.record.id, other);
                warn!("skipping {reason}");
                scan.skipped.push(SkippedFile {
                    path: m.path.clone(),
                    reason,
                });
                false
            }
            None => {
                first.insert(m.record.id, m.path.clone());
                true
            }
        });
        scan.memories = memories;
        scan
    }

    /// Live memories of one conversation, oldest first.
    pub fn scan_conversation(&self, conversation: &ConversationId) -> Scan {
        let mut scan = Scan::default();
        self.scan_into(conversation, &mut scan);
        scan
    }

    fn scan_into(&self, conversation: &ConversationId, scan: &mut Scan) {
        let start = scan.memories.len();
        for path in self.conversation_files(conversation) {
            match self.read(&path) {
                Ok(memory) => scan.memories.push(memory),
                Err(err) => {
                    warn!("skipping {}: {err}", path.display());
                    scan.skipped.push(SkippedFile {
                        reason: err.to_string(),
                        path,
                    });
                }
            }
        }
        scan.memories[start..].sort_by_key(|m| m.record.created_at);
    }

    /// Paths of every live memory file, without reading them, in path order.
    pub fn memory_files(&self) -> Vec<PathBuf> {
        self.conversations()
            .iter()
            .flat_map(|c| self.conversation_files(c))
            .collect()
    }

    fn conversations(&self) -> Vec<ConversationId> {
        let Ok(dirs) = fs::read_dir(self.root.join(ENTRIES_DIR)) else {
            return Vec::new();
        };
        let mut conversations: Vec<_> = dirs
            .filter_map(Result::ok)
            .filter(|e| {
                let real = untrusted::is_real_folder(e);
                if !real && e.file_type().is_ok_and(|t| t.is_symlink()) {
                    warn!(
                        "skipping {}: a linked folder (links are not followed)",
                        e.path().display()
                    );
                }
                real
            })
            .filter_map(|e| ConversationId::new(e.file_name().to_str()?).ok())
            .collect();
        conversations.sort();
        conversations
    }

    fn conversation_files(&self, conversation: &ConversationId) -> Vec<PathBuf> {
        let dir = layout::conversation_dir(&self.root, conversation);
        let mut paths = Vec::new();
        for kind in MemoryKind::ALL {
            let start = paths.len();
            paths.extend(self.memory_files_in(&dir.join(kind.folder())));
            paths[start..].sort();
        }
        paths
    }

    /// The entries of a kind folder that may be memory files: everything but folders, so a
    /// link or FIFO with a memory's name is reported when it is read, not silently passed by.
    /// A folder that is itself a link yields nothing (and a warning).
    fn memory_files_in(&self, folder: &Path) -> Vec<PathBuf> {
        if let Err(e) = self.check_folder(folder) {
            warn!("skipping {e}");
            return Vec::new();
        }
        let Ok(files) = fs::read_dir(folder) else {
            return Vec::new();
        };
        files
            .filter_map(Result::ok)
            .filter(|e| !untrusted::is_real_folder(e))
            .map(|e| e.path())
            .filter(|p| self.locate(p).is_ok())
            .collect()
    }

    /// Removes temporary files an interrupted atomic write left behind. Only safe while no
    /// other process writes to the store. Returns how many were removed.
    pub fn remove_stale_temp_files(&self) -> usize {
        let mut removed = 0;
        let mut stack = vec![self.root.join(ENTRIES_DIR)];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                let path = entry.path();
                let is_temp = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(crate::atomic::TEMP_PREFIX));
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path);
                } else if is_temp && fs::remove_file(&path).is_ok() {
                    warn!("removed {} left by an interrupted write", path.display());
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Moves a live memory under `deleted/` and marks it (`deleted_at`, `replaced_by`).
    /// Returns the tombstone's path. Nothing is destroyed.
    pub fn soft_delete(
        &self,
        path: &Path,
        replaced_by: Option<MemoryId>,
    ) -> Result<PathBuf, StoreError> {
        self.soft_delete_because(path, replaced_by, None)
    }

    /// [`soft_delete`](Self::soft_delete), with why the memory was retired written in its
    /// tombstone's `reason`.
    pub fn soft_delete_because(
        &self,
        path: &Path,
        replaced_by: Option<MemoryId>,
        reason: Option<&str>,
    ) -> Result<PathBuf, StoreError> {
        let (location, relative) = self.locate(path)?;
        if location.tombstone {
            return Err(StoreError::AlreadyDeleted {
                path: path.to_owned(),
            });
        }
        let memory = self.read(&relative)?;
        let tombstone_dir = layout::conversation_dir(&self.root, &location.conversation)
            .join(DELETED_DIR)
            .join(location.kind.folder());
        let mut name = location.file_name.clone();
        if location.kind == MemoryKind::Summary {
            // Summaries share one name; keep every version apart.
            name = layout::file_name(MemoryKind::Fact, memory.record.id, Utc::now());
        }
        let tombstone = tombstone_dir.join(name);
        self.check_folder(&tombstone_dir)?;
        // Rename first: a crash after it leaves an unmarked tombstone, never a lost memory.
        rename_durably(&memory.path, &tombstone).map_err(io_err("cannot move", &memory.path))?;
        let mut record = memory.record;
        record.deleted_at = Some(Utc::now());
        record.replaced_by = replaced_by;
        record.reason = reason.map(str::to_owned);
        if let Err(source) = write_atomic(&tombstone, format::render(&record).as_bytes()) {
            // A delete refused (a full disk) leaves the memory live where it was: moving it
            // back needs no room.
            if let Err(e) = rename_durably(&tombstone, &memory.path) {
                tracing::warn!(
                    "a refused delete could not move {} back: {e}; it stays an unmarked tombstone",
                    memory.path.display()
                );
            }
            return Err(io_err("cannot write", &tombstone)(source));
        }
        Ok(tombstone)
    }

    /// Tombstones of one conversation, oldest first.
    pub fn scan_deleted(&self, conversation: &ConversationId) -> Scan {
        let mut scan = Scan::default();
        let dir = layout::conversation_dir(&self.root, conversation).join(DELETED_DIR);
        for kind in MemoryKind::ALL {
            for path in self.memory_files_in(&dir.join(kind.folder())) {
                match self.read(&path) {
                    Ok(memory) => scan.memories.push(memory),
                    Err(err) => scan.skipped.push(SkippedFile {
                        reason: err.to_string(),
                        path,
                    }),
                }
            }
        }
        scan.memories.sort_by_key(|m| m.record.created_at);
        scan
    }

    /// The memory files of one kind of `conversation` (its tombstones with `deleted`),
    /// each with the id and creation time its name carries (`None` for a name a person chose),
    /// without reading them: what a page of a large conversation needs to pick the files
    /// it shows.
    pub fn listed_files(
        &self,
        conversation: &ConversationId,
        kind: MemoryKind,
        deleted: bool,
    ) -> Vec<ListedFile> {
        let mut dir = layout::conversation_dir(&self.root, conversation);
        if deleted {
            dir = dir.join(DELETED_DIR);
        }
        self.memory_files_in(&dir.join(kind.folder()))
            .into_iter()
            .map(|path| {
                let (named_id, named_time) = self
                    .locate(&path)
                    .map_or((None, None), |(location, _)| location.name_parts());
                ListedFile {
                    path,
                    named_id,
                    named_time,
                }
            })
            .collect()
    }

    /// Every conversation with a folder under `entries/`, in name order.
    pub fn conversation_ids(&self) -> Vec<ConversationId> {
        self.conversations()
    }

    /// The path a summary of `conversation` lives at.
    pub fn summary_path(&self, conversation: &ConversationId) -> PathBuf {
        layout::conversation_dir(&self.root, conversation)
            .join(MemoryKind::Summary.folder())
            .join(layout::SUMMARY_FILE)
    }
}

/// Why a file was skipped for claiming an id another file has: names both, and what to do.
pub fn duplicate_id(path: &Path, id: MemoryId, first: &Path) -> String {
    format!(
        "{}: its id {id} is already used by {}; only that file is searchable (give this one another id, or remove its id line)",
        path.display(),
        first.display()
    )
}

/// A file time as a UTC time; `None` outside what `chrono` represents (a hand-set mtime in
/// the year 300,000 must not panic every command that reads the file).
fn system_time_to_utc(time: std::time::SystemTime) -> Option<DateTime<Utc>> {
    let (secs, nanos) = match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => (i64::try_from(after.as_secs()).ok()?, after.subsec_nanos()),
        Err(before) => {
            let before = before.duration();
            let secs = i64::try_from(before.as_secs()).ok()?;
            match before.subsec_nanos() {
                0 => (secs.checked_neg()?, 0),
                n => (secs.checked_neg()?.checked_sub(1)?, 1_000_000_000 - n),
            }
        }
    };
    DateTime::from_timestamp(secs, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn file_times_out_of_range_are_none_not_a_panic() {
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert_eq!(system_time_to_utc(far), None);
        let before = UNIX_EPOCH - Duration::from_millis(1500);
        assert_eq!(
            system_time_to_utc(before).map(|t| t.timestamp_millis()),
            Some(-1500)
        );
        let now = std::time::SystemTime::now();
        assert_eq!(
            system_time_to_utc(now).map(|t| t.timestamp()),
            Some(DateTime::<Utc>::from(now).timestamp())
        );
    }
}
