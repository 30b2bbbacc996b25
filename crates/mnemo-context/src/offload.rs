//! Stage 2: offload. A tool output above `offload_tokens` (counted as characters / 4, so the
//! decision does not depend on the model) is written whole to an [`OutputStore`] and
//! replaced, in what goes upstream, by a preview: its first and last five lines and where the
//! rest is. The output is read back by offset and limit ([`OutputStore::read`]), so nothing
//! is lost.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use mnemo_fs::StoreDir;

use crate::messages::{answered_call, output_text};
use crate::tokens::CHARS_PER_TOKEN;

/// Lines of a preview taken from each end of the output.
pub const PREVIEW_LINES: usize = 5;
/// The largest offloaded output read back (256 MiB): far beyond any tool output an upstream
/// request can carry, small enough that a planted file cannot exhaust memory.
pub const MAX_OUTPUT_BYTES: u64 = 256 << 20;
/// Characters a preview line keeps (an output may be one enormous line).
pub const PREVIEW_LINE_CHARS: usize = 240;

/// Where offloaded tool outputs are kept, by tool call id.
pub trait OutputStore: Send + Sync {
    /// Keeps `output`, the result of call `call_id`, replacing an earlier one of that call.
    fn put(&self, call_id: &str, output: &str) -> io::Result<()>;
    /// Up to `limit` characters of the output of `call_id`, from character `offset`, and
    /// the output's length in characters; `None` when there is none.
    fn read(
        &self,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> io::Result<Option<(String, usize)>>;
}

/// Outputs in memory (for library users who keep their own records).
#[derive(Debug, Default)]
pub struct MemoryOutputStore {
    outputs: Mutex<HashMap<String, String>>,
}

impl OutputStore for MemoryOutputStore {
    fn put(&self, call_id: &str, output: &str) -> io::Result<()> {
        self.outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call_id.to_owned(), output.to_owned());
        Ok(())
    }

    fn read(
        &self,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> io::Result<Option<(String, usize)>> {
        let outputs = self.outputs.lock().unwrap_or_else(|p| p.into_inner());
        Ok(outputs.get(call_id).map(|o| slice(o, offset, limit)))
    }
}

/// Outputs as files in one folder, one per call: `<folder>/<file name of the call id>.txt`,
/// written atomically. The folder is a [`StoreDir`]: every folder from the store's root down
/// to it must be a real folder each time an output is written or read, so a link planted at
/// any level cannot send outputs elsewhere or bring a file from elsewhere back.
#[derive(Debug, Clone)]
pub struct DirOutputStore {
    dir: StoreDir,
}

impl DirOutputStore {
    /// Outputs kept in `dir` (created on the first write).
    pub fn new(dir: StoreDir) -> Self {
        Self { dir }
    }

    /// The file of call `call_id`: ids are the client's, so any id that is not a plain name
    /// is hashed into one (no path can leave the folder).
    pub fn path_of(&self, call_id: &str) -> PathBuf {
        self.dir.file(file_name(call_id))
    }

    /// Whether an output of `call_id` is kept (a regular file in a real folder).
    pub fn has(&self, call_id: &str) -> bool {
        self.dir.check().is_ok()
            && std::fs::symlink_metadata(self.path_of(call_id)).is_ok_and(|m| m.is_file())
    }
}

fn file_name(call_id: &str) -> String {
    format!("{}.txt", safe_name(call_id))
}

impl OutputStore for DirOutputStore {
    fn put(&self, call_id: &str, output: &str) -> io::Result<()> {
        self.dir.create().map_err(refused)?;
        mnemo_fs::atomic::write_atomic(&self.path_of(call_id), output.as_bytes())
    }

    fn read(
        &self,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> io::Result<Option<(String, usize)>> {
        // The folder is in the store, so the file is untrusted: no links, no FIFOs.
        match self.dir.read(file_name(call_id), MAX_OUTPUT_BYTES) {
            Ok(bytes) => Ok(Some(slice(&String::from_utf8_lossy(&bytes), offset, limit))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(refused(e)),
        }
    }
}

/// A refusal of the store's rules as an I/O error, its reason kept.
pub(crate) fn refused(refusal: mnemo_fs::Refusal) -> io::Error {
    match refusal {
        mnemo_fs::Refusal::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

/// A file name for a client's id: the id itself when it is plain, else its hash.
pub fn safe_name(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        id.to_owned()
    } else {
        format!("h-{}", &digest(id.as_bytes())[..32])
    }
}

fn slice(text: &str, offset: usize, limit: usize) -> (String, usize) {
    let total = text.chars().count();
    (text.chars().skip(offset).take(limit).collect(), total)
}

/// The preview that replaces an offloaded output.
pub fn preview(call_id: &str, output: &str) -> String {
    head_and_tail(
        &format!(
            "[Tool output offloaded: {} characters in {} lines, stored whole as the output of call {call_id}. First and last {PREVIEW_LINES} lines:]",
            output.chars().count(),
            output.lines().count()
        ),
        output,
    )
}

/// `header`, then the first and last [`PREVIEW_LINES`] lines of `output` (each cut to
/// [`PREVIEW_LINE_CHARS`] characters), and how many lines between them are not shown.
pub fn head_and_tail(header: &str, output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let cut = |line: &str| -> String {
        if line.chars().count() > PREVIEW_LINE_CHARS {
            let head: String = line.chars().take(PREVIEW_LINE_CHARS).collect();
            format!("{head}…")
        } else {
            line.to_owned()
        }
    };
    let mut text = format!("{header}\n");
    if lines.len() <= 2 * PREVIEW_LINES {
        for line in &lines {
            text.push_str(&cut(line));
            text.push('\n');
        }
    } else {
        for line in &lines[..PREVIEW_LINES] {
            text.push_str(&cut(line));
            text.push('\n');
        }
        text.push_str(&format!(
            "[… {} lines not shown …]\n",
            lines.len() - 2 * PREVIEW_LINES
        ));
        for line in &lines[lines.len() - PREVIEW_LINES..] {
            text.push_str(&cut(line));
            text.push('\n');
        }
    }
    text.trim_end().to_owned()
}

/// Offloads every tool output above `threshold` tokens (characters / 4) in `messages`.
/// Returns the call ids offloaded; an output the store cannot take stays as it is.
pub fn offload(messages: &mut [Value], threshold: u64, store: &dyn OutputStore) -> Vec<String> {
    let mut offloaded = Vec::new();
    for message in messages.iter_mut() {
        let Some(call_id) = answered_call(message).map(str::to_owned) else {
            continue;
        };
        let output = output_text(message);
        let tokens = output.chars().count().div_ceil(CHARS_PER_TOKEN) as u64;
        if tokens <= threshold {
            continue;
        }
        match store.put(&call_id, &output) {
            Ok(()) => {
                message["content"] = Value::String(preview(&call_id, &output));
                offloaded.push(call_id);
            }
            Err(e) => tracing::warn!(
                "cannot offload the output of tool call {call_id}: {e}; it stays inline"
            ),
        }
    }
    offloaded
}

/// Lower-case hex sha256 of `bytes`: how an offloaded output and a kept summary are named.
pub(crate) fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn output(lines: usize) -> String {
        (1..=lines)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn large_outputs_go_to_the_store_and_leave_a_head_and_tail_preview() {
        let big = output(5000);
        let mut h = vec![
            json!({"role": "tool", "tool_call_id": "big", "content": big}),
            json!({"role": "tool", "tool_call_id": "small", "content": "tiny"}),
        ];
        let store = MemoryOutputStore::default();
        assert_eq!(offload(&mut h, 1000, &store), ["big"]);
        let shown = h[0]["content"].as_str().unwrap();
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("[Tool output offloaded: "), "{shown}");
        assert_eq!(
            &lines[1..6],
            ["line 1", "line 2", "line 3", "line 4", "line 5"]
        );
        assert_eq!(lines[6], "[… 4990 lines not shown …]");
        assert_eq!(lines[11], "line 5000");
        assert_eq!(h[1]["content"], "tiny", "short outputs untouched");
        let (part, total) = store.read("big", 0, 13).unwrap().unwrap();
        assert_eq!(part, "line 1\nline 2");
        assert_eq!(total, big.chars().count());
    }

    #[test]
    fn call_ids_never_become_paths() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirOutputStore::new(StoreDir::new(dir.path(), dir.path().join("outputs")));
        for id in ["../../etc/passwd", "/abs", ".hidden", "a/b", ""] {
            let path = store.path_of(id);
            assert_eq!(path.parent().unwrap(), dir.path().join("outputs"), "{id}");
            store.put(id, "x").unwrap();
            assert_eq!(store.read(id, 0, 10).unwrap().unwrap().0, "x");
        }
        assert_eq!(
            store.path_of("call_abc-1").file_name().unwrap(),
            "call_abc-1.txt"
        );
        assert_eq!(store.read("never", 0, 1).unwrap(), None);
    }

    #[test]
    fn a_linked_folder_on_the_way_is_neither_written_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("call_1.txt"), "outside secret").unwrap();
        let root = dir.path();
        let store = DirOutputStore::new(StoreDir::new(
            root,
            root.join("conversations/c/tool_outputs"),
        ));
        for level in [
            "conversations",
            "conversations/c",
            "conversations/c/tool_outputs",
        ] {
            let _ = std::fs::remove_dir_all(root.join("conversations"));
            let _ = std::fs::remove_file(root.join("conversations"));
            if let Some(parent) = std::path::Path::new(level).parent() {
                std::fs::create_dir_all(root.join(parent)).unwrap();
            }
            std::os::unix::fs::symlink(outside.path(), root.join(level)).unwrap();
            let err = store.put("call_2", "x").unwrap_err().to_string();
            assert!(
                err.contains(&format!("{level} is a symbolic link")),
                "{err}"
            );
            let err = store.read("call_1", 0, 100).unwrap_err().to_string();
            assert!(err.contains("not a real folder"), "{level}: {err}");
            assert!(!store.has("call_1"), "{level}");
            std::fs::remove_file(root.join(level)).unwrap();
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        // Written through `mnemo_fs::atomic`, which never writes through a link planted
        // where its temporary file goes (its own tests).
        store.put("call_3", "first").unwrap();
        store.put("call_3", "second").unwrap();
        assert_eq!(store.read("call_3", 0, 10).unwrap().unwrap().0, "second");
    }
}
