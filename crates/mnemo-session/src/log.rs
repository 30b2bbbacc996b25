//! `messages.jsonl`: a session's append-only log, one JSON record a line.
//!
//! Records are appended whole (one `write` of complete lines) and fsynced before the caller
//! acknowledges anything. A crash can therefore only leave a torn *last* line: reading skips
//! it with a warning, and the next append cuts it off first, so a fragment is never glued to
//! a new record. A malformed line elsewhere (a hand edit) is skipped with a warning too; the
//! rest of the log stays readable.

use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// The largest log read or written; a bigger file is refused rather than read into memory,
/// and an append that would pass it is refused ([`LogFull`]).
pub const MAX_LOG_BYTES: u64 = 512 << 20;

/// Bytes of session logs the whole process reads at once, at most (one log of
/// [`MAX_LOG_BYTES`]): a read waits while others fill the budget, so three 500 MiB logs read
/// together are read one after another, not held together ([`ReadGate`]).
pub const LOG_READ_BUDGET: u64 = MAX_LOG_BYTES;

/// Why a skipped line was the torn last line an interrupted append leaves (the next append
/// cuts it off).
pub const TORN_LAST_LINE: &str = "torn last line (an append cut short), skipped";

/// An append refused because the log would pass [`MAX_LOG_BYTES`]; the log is unchanged.
#[derive(Debug, thiserror::Error)]
#[error("the log is {size} bytes, and {adding} more would pass the {MAX_LOG_BYTES} bytes a session log may hold; nothing was written: continue in a new session")]
pub struct LogFull {
    /// The log's size.
    pub size: u64,
    /// The bytes the append would have added.
    pub adding: u64,
}

/// Admits reads of session logs by their size, so that the bytes being read at once stay
/// within a budget: a read waits while others hold more than the budget leaves for it
/// (a read alone is always admitted). Reads hold their share only while they read.
#[derive(Debug)]
pub struct ReadGate {
    budget: u64,
    reading: Mutex<u64>,
    freed: Condvar,
    /// Reads waiting for their share now: a read that is slow to start can be told apart
    /// from one that is waiting its turn.
    waiting: AtomicUsize,
}

impl ReadGate {
    /// A gate letting `budget` bytes be read at once.
    pub const fn new(budget: u64) -> Self {
        Self {
            budget,
            reading: Mutex::new(0),
            freed: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Waits until `bytes` more may be read, and holds them until the returned value is
    /// dropped.
    pub fn admit(&self, bytes: u64) -> Admitted<'_> {
        let bytes = bytes.min(self.budget);
        let must_wait =
            |reading: &mut u64| *reading > 0 && reading.saturating_add(bytes) > self.budget;
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        if must_wait(&mut reading) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            reading = self
                .freed
                .wait_while(reading, must_wait)
                .unwrap_or_else(|p| p.into_inner());
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        *reading += bytes;
        Admitted { gate: self, bytes }
    }

    /// Bytes being read now.
    pub fn reading(&self) -> u64 {
        *self.reading.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads waiting for their share now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// A read admitted by a [`ReadGate`]; its share is given back when dropped.
#[derive(Debug)]
pub struct Admitted<'g> {
    gate: &'g ReadGate,
    bytes: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut reading = self.gate.reading.lock().unwrap_or_else(|p| p.into_inner());
        *reading -= self.bytes;
        self.gate.freed.notify_all();
    }
}

/// The process's gate for every log read ([`LOG_READ_BUDGET`]).
static READ_GATE: ReadGate = ReadGate::new(LOG_READ_BUDGET);

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
        /// Set when no summary could be written (the summariser was down): why. The covered
        /// messages then go upstream as a marker saying they were removed, after the
        /// previous compaction's summary, which `summary` then carries on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unsummarised: Option<String>,
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
    /// Whether the last entry of `skipped` is a torn last line, which the next append cuts
    /// off (the other skipped lines stay in the log).
    pub torn: bool,
}

impl ReadLog {
    /// What `skipped` says once an append has been made: the torn last line is gone, the
    /// other skipped lines are still there.
    pub fn skipped_after_append(skipped: &[String], torn: bool) -> Vec<String> {
        let keep = if torn {
            skipped.len().saturating_sub(1)
        } else {
            skipped.len()
        };
        skipped[..keep].to_vec()
    }
}

/// Reads the log at `path`; a missing file is an empty log. The log is streamed a line at a
/// time (never held whole beside its records), never read past [`MAX_LOG_BYTES`], and
/// admitted by the process's [`ReadGate`].
pub fn read(path: &Path) -> io::Result<ReadLog> {
    read_with(path, &READ_GATE)
}

/// [`read`], admitted by `gate`.
pub fn read_with(path: &Path, gate: &ReadGate) -> io::Result<ReadLog> {
    let file = match open_regular(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReadLog::default()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    if size > MAX_LOG_BYTES {
        return Err(too_large(size));
    }
    let _admitted = gate.admit(size);
    // A file that grows while it is read is cut off past the limit and refused.
    let mut reader =
        io::BufReader::with_capacity(64 * 1024, file.take(MAX_LOG_BYTES.saturating_add(1)));
    let mut log = ReadLog::default();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 {
            break;
        }
        log.bytes += read as u64;
        if log.bytes > MAX_LOG_BYTES {
            return Err(too_large(log.bytes));
        }
        number += 1;
        // Only the last line can lack its newline.
        let whole = line.last() == Some(&b'\n');
        let text = if whole {
            &line[..line.len() - 1]
        } else {
            &line[..]
        };
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(text) {
            Ok(record) => log.records.push(record),
            Err(e) => {
                let why = if whole {
                    format!("not a log record ({e}), skipped")
                } else {
                    log.torn = true;
                    TORN_LAST_LINE.to_owned()
                };
                warn!(path = %path.display(), line = number, "{why}");
                log.skipped.push(format!("line {number}: {why}"));
            }
        }
    }
    Ok(log)
}

fn too_large(bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the log is {bytes} bytes, more than the {MAX_LOG_BYTES} mnemo reads"),
    )
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
    if len > MAX_LOG_BYTES {
        // Already past it (a hand-made file): nothing is cut off or added.
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            LogFull {
                size: len,
                adding: bytes.len() as u64,
            },
        ));
    }
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
    let adding = bytes.len() as u64;
    if end.saturating_add(adding) > MAX_LOG_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            LogFull { size: end, adding },
        ));
    }
    // O_APPEND: whatever else writes to the file, a record is never written over another.
    let written = mnemo_fs::faults::check(path, mnemo_fs::faults::Seam::Write)
        .and_then(|()| file.write_all(&bytes))
        .and_then(|()| mnemo_fs::faults::check(path, mnemo_fs::faults::Seam::Sync))
        .and_then(|()| file.sync_data());
    if let Err(e) = written {
        // The caller is told the records are not stored: none of them may stay, or its retry
        // would log them twice. A part written (a full disk) would be a torn line anyway.
        let _ = file.set_len(end);
        return Err(e);
    }
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

    /// A disk that fails the append's write or its fsync: an error carrying EIO, the
    /// records before kept, none of the failed append's left behind, and the next append
    /// (a retry) logs them once.
    #[test]
    fn a_failed_append_leaves_the_log_as_it_was() {
        use mnemo_fs::faults::{self, Seam};
        for failing in [Seam::Write, Seam::Sync] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("messages.jsonl");
            let before = append(&path, &[user("a"), user("b")]).unwrap();
            let plan = faults::inject(dir.path(), move |_, seam, _| {
                (seam == failing).then(faults::io_error)
            });
            let err = append(&path, &[user("c"), user("d")]).unwrap_err();
            drop(plan);
            let eio = faults::io_error().raw_os_error();
            assert_eq!(err.raw_os_error(), eio, "{failing:?}: {err}");
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                before,
                "{failing:?}"
            );
            append(&path, &[user("c"), user("d")]).unwrap();
            let log = read(&path).unwrap();
            let texts: Vec<&str> = log
                .records
                .iter()
                .filter_map(|r| match r {
                    Record::Message { message, .. } => message["content"].as_str(),
                    _ => None,
                })
                .collect();
            assert_eq!(texts, ["a", "b", "c", "d"], "{failing:?}");
            assert!(log.skipped.is_empty(), "{failing:?}: {:?}", log.skipped);
        }
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

    #[test]
    fn a_full_log_refuses_the_append_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        // A sparse file of exactly the limit, ending on a whole record.
        let mut last = serde_json::to_vec(&user("the last words")).unwrap();
        last.push(b'\n');
        let file = File::create(&path).unwrap();
        file.set_len(MAX_LOG_BYTES - last.len() as u64).unwrap();
        file.write_all_at(&last, MAX_LOG_BYTES - last.len() as u64)
            .unwrap();
        drop(file);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAX_LOG_BYTES);

        let err = append(&path, &[user("one more")]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        let full = err.get_ref().unwrap().downcast_ref::<LogFull>().unwrap();
        assert_eq!(full.size, MAX_LOG_BYTES);
        let text = err.to_string();
        assert!(
            text.contains(
                "would pass the 536870912 bytes a session log may hold; nothing was written"
            ),
            "{text}"
        );
        // Nothing lost, nothing added: the same size, the same last record.
        let file = File::open(&path).unwrap();
        assert_eq!(file.metadata().unwrap().len(), MAX_LOG_BYTES);
        let mut tail = vec![0u8; last.len()];
        file.read_exact_at(&mut tail, MAX_LOG_BYTES - last.len() as u64)
            .unwrap();
        assert_eq!(tail, last);

        // Past the limit (a hand-made file), with zeros after the last newline: refused as it
        // is, from its size, before a byte of it is read. Reading would tell: an append
        // reads the zeros as a torn last line and cuts them off (refused then at the limit's
        // size), and a read stops one byte past the limit and says so (536870913 bytes), so
        // only a refusal from the size names the file's own size.
        let over = MAX_LOG_BYTES + 4096;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(over)
            .unwrap();
        let err = append(&path, &[user("more")]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge, "{err}");
        let full = err.get_ref().unwrap().downcast_ref::<LogFull>().unwrap();
        assert_eq!(full.size, over, "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), over, "nothing cut");
        let err = read(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let err = err.to_string();
        assert!(err.contains("more than the 536870912 mnemo reads"), "{err}");
        assert_eq!(
            err, "the log is 536875008 bytes, more than the 536870912 mnemo reads",
            "refused from its size, not read"
        );
    }

    #[test]
    fn reads_are_admitted_within_the_budget_of_bytes_read_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        append(&path, &[user("a"), user("b")]).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let gate = std::sync::Arc::new(ReadGate::new(size + 10));
        // Another read holds most of the budget: this one waits for it.
        let held = gate.admit(size);
        let (done, finished) = std::sync::mpsc::channel();
        let reader = {
            let gate = gate.clone();
            let path = path.clone();
            std::thread::spawn(move || {
                let log = read_with(&path, &gate).unwrap();
                done.send(log.records.len()).unwrap();
            })
        };
        // Seen waiting at the gate, not merely not done yet: until `held` goes it cannot
        // finish, however slow or fast this machine is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while gate.waiting() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the read never waited for its share: {:?}",
                finished.try_recv()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(gate.waiting(), 1);
        assert!(finished.try_recv().is_err(), "the read waited");
        assert_eq!(gate.reading(), size);
        drop(held);
        assert_eq!(
            finished
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap(),
            2
        );
        reader.join().unwrap();
        assert_eq!(gate.reading(), 0, "its share was given back");
        assert_eq!(gate.waiting(), 0);
        // A read alone is admitted whatever its size.
        let small = ReadGate::new(1);
        assert_eq!(read_with(&path, &small).unwrap().records.len(), 2);
    }

    #[test]
    fn a_log_is_read_a_line_at_a_time_with_the_same_results() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        append(&path, &[user("a")]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}\n  \nnot json\n{text}{{\"kind\":")).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 2);
        assert_eq!(log.bytes, std::fs::metadata(&path).unwrap().len());
        assert_eq!(log.skipped.len(), 2, "{:?}", log.skipped);
        assert!(log.skipped[0].starts_with("line 4: not a log record"));
        assert_eq!(log.skipped[1], format!("line 6: {TORN_LAST_LINE}"));
        assert!(log.torn);
        assert_eq!(
            ReadLog::skipped_after_append(&log.skipped, log.torn),
            log.skipped[..1].to_vec(),
            "the append cuts the torn line off; the malformed one stays"
        );
        append(&path, &[user("b")]).unwrap();
        let log = read(&path).unwrap();
        assert_eq!(log.records.len(), 3);
        assert_eq!(log.skipped.len(), 1);
        assert!(!log.torn);
    }
}
