//! `messages.jsonl`: a session's append-only log, one JSON record a line.
//!
//! Records are appended whole (one `write` of complete lines) and fsynced before the caller
//! acknowledges anything. A crash can therefore only leave a torn *last* line: reading skips
//! it with a warning, and the next append cuts it off first, so a fragment is never glued to
//! a new record. A malformed line elsewhere (a hand edit) is skipped with a warning too; the
//! rest of the log stays readable.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// The largest log read; a bigger file is refused rather than read into memory.
pub const MAX_LOG_BYTES: u64 = 512 << 20;

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A chat message, exactly as the client sent it (or as the upstream answered).
    Message {
        /// When it was appended.
        at: DateTime<Utc>,
        /// The OpenAI chat message.
        message: Value,
        /// An answer cut short (the client went away mid-stream, the upstream failed).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        incomplete: bool,
    },
    /// The system (or developer) messages that lead the requests from now on.
    Instructions {
        /// When they changed.
        at: DateTime<Utc>,
        /// The leading system/developer messages.
        messages: Vec<Value>,
    },
    /// The client rewrote its history: the current branch goes back to its first `to`
    /// messages. Nothing is deleted; the abandoned messages stay in the log (and in archive
    /// search).
    Rewind {
        /// When.
        at: DateTime<Utc>,
        /// How many messages of the current branch are kept.
        to: usize,
    },
    /// The first `covers` messages of the current branch are replaced upstream by `summary`.
    Compaction {
        /// When.
        at: DateTime<Utc>,
        /// How many messages the summary replaces.
        covers: usize,
        /// The summary.
        summary: String,
        /// What the summary was asked to focus on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        focus: Option<String>,
        /// The model that wrote it.
        model: String,
    },
}

impl Record {
    /// A message record stamped now.
    pub fn message(message: Value) -> Self {
        Record::Message {
            at: Utc::now(),
            message,
            incomplete: false,
        }
    }

    /// When the record was appended.
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Record::Message { at, .. }
            | Record::Instructions { at, .. }
            | Record::Rewind { at, .. }
            | Record::Compaction { at, .. } => *at,
        }
    }
}

/// A log as read: its records, its size, and what was skipped.
#[derive(Debug, Default)]
pub struct ReadLog {
    /// The records, in order.
    pub records: Vec<Record>,
    /// The file's size in bytes.
    pub bytes: u64,
    /// Why lines were skipped (`line N: ...`).
    pub skipped: Vec<String>,
}

/// Reads the log at `path`; a missing file is an empty log.
pub fn read(path: &Path) -> io::Result<ReadLog> {
    let mut file = match open_regular(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReadLog::default()),
        Err(e) => return Err(e),
    };
    let bytes = file.metadata()?.len();
    if bytes > MAX_LOG_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the log is {bytes} bytes, more than the {MAX_LOG_BYTES} mnemo reads"),
        ));
    }
    let mut text = Vec::with_capacity(bytes as usize);
    file.read_to_end(&mut text)?;
    let mut log = ReadLog {
        bytes: text.len() as u64,
        ..ReadLog::default()
    };
    let ends_whole = text.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(record) => log.records.push(record),
            Err(e) => {
                let why = if i == last && !ends_whole {
                    "torn last line (an append cut short), skipped".to_owned()
                } else {
                    format!("not a log record ({e}), skipped")
                };
                warn!(path = %path.display(), line = i + 1, "{why}");
                log.skipped.push(format!("line {}: {why}", i + 1));
            }
        }
    }
    Ok(log)
}

/// Appends `records` to the log at `path` (created if missing) and fsyncs it; returns the
/// log's new size. A torn last line left by a crash is cut off first.
pub fn append(path: &Path, records: &[Record]) -> io::Result<u64> {
    let mut bytes = Vec::new();
    for record in records {
        serde_json::to_writer(&mut bytes, record)?;
        bytes.push(b'\n');
    }
    let created = !path.exists();
    let mut file = open_regular(path, true)?;
    let len = file.metadata()?.len();
    let clean = clean_length(&file, len)?;
    if clean < len {
        let mut tail = vec![0u8; (len - clean) as usize];
        file.read_exact_at(&mut tail, clean)?;
        if serde_json::from_slice::<Record>(&tail).is_ok() {
            // A whole record without its newline (an editor that drops the final one): it
            // was read as a record, so it is kept and ended.
            bytes.insert(0, b'\n');
        } else {
            warn!(
                path = %path.display(),
                "cutting off a torn last line ({} bytes) left by an interrupted append",
                len - clean
            );
            file.set_len(clean)?;
        }
    }
    let end = file.metadata()?.len();
    if end + bytes.len() as u64 > MAX_LOG_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the log would pass the {MAX_LOG_BYTES} bytes mnemo reads; start a new session"
            ),
        ));
    }
    // O_APPEND: whatever else writes to the file, a record is never written over another.
    file.write_all(&bytes)?;
    file.sync_data()?;
    if created {
        sync_parent(path)?;
    }
    Ok(end + bytes.len() as u64)
}

/// Makes a new file's (or folder's) entry in its folder durable.
pub(crate) fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Copies the log at `from` to `to` (whole lines only), fsynced: a fork's log.
pub fn copy(from: &Path, to: &Path) -> io::Result<u64> {
    let log = read(from)?;
    append(to, &log.records)
}

/// The length of the file's whole lines: `len`, or the end of its last newline.
fn clean_length(file: &File, len: u64) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    // Scan back for the newline before the fragment, a block at a time.
    let mut end = len;
    let mut block = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(pos) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(start + pos as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Opens `path` for reading (or appending), refusing links and special files: the store is
/// edited by hand and synced by git, and a log must not lead anywhere else.
fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    // Without following links or blocking on a FIFO; the type is checked on the open file.
    mnemo_store::untrusted::open_regular(path, write).map_err(|refusal| match refusal {
        mnemo_store::untrusted::Refusal::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Record {
        Record::message(json!({"role": "user", "content": text}))
    }

    #[test]
    fn appends_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        assert!(read(&path).unwrap().records.is_empty());
        append(&path, &[user("a"), user("b")]).unwrap();
        let size = append(&path, &[user("c")]).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 3);
        assert_eq!(log.bytes, size);
        assert_eq!(log.records[2], read(&path).unwrap().records[2]);
        assert!(log.skipped.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_skipped_then_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        append(&path, &[user("kept")]).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(br#"{"kind":"message","at":"2026-01-0"#)
            .unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 1);
        assert!(
            log.skipped[0].contains("line 2: torn last line"),
            "{:?}",
            log.skipped
        );

        append(&path, &[user("after")]).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 2, "{:?}", log.skipped);
        assert!(log.skipped.is_empty());
    }

    #[test]
    fn a_whole_record_without_its_newline_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        append(&path, &[user("a"), user("b")]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.trim_end()).unwrap();
        assert_eq!(read(&path).unwrap().records.len(), 2);
        let size = append(&path, &[user("c")]).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 3, "{:?}", log.skipped);
        assert_eq!(log.bytes, size);
    }

    #[test]
    fn a_malformed_line_in_the_middle_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        append(&path, &[user("a")]).unwrap();
        std::fs::write(
            &path,
            std::fs::read_to_string(&path).unwrap() + "hand edit\n\n",
        )
        .unwrap();
        append(&path, &[user("b")]).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 2);
        assert_eq!(log.skipped.len(), 1);
        assert!(log.skipped[0].starts_with("line 2: not a log record"));
    }

    #[test]
    fn links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("messages.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(read(&link)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        assert!(append(&link, &[user("x")]).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    }
}
