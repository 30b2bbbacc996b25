//! `sessions/<id>/`: a session's folder, its `session.yaml` and its log.
//!
//! ```text
//! sessions/<id>/messages.jsonl   every message, full fidelity, append-only (crate::log)
//! sessions/<id>/session.yaml     title, conversation, agent, times, counts, tokens, parent
//! sessions/<id>/summaries/       summaries context governance keeps for it
//! sessions/<id>/tool_outputs/    tool outputs governance offloaded, read by offset/limit
//! ```
//!
//! The log is the truth; `session.yaml` is what listing needs without reading every log, and
//! its message count is corrected from the log whenever the log is read.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::history::History;
use crate::log::{self, ReadLog, Record};
use crate::{SessionError, SessionId};

/// The folder, under the store, of every session.
pub use mnemo_store::layout::SESSIONS_DIR;
/// A session's log.
pub const LOG_FILE: &str = "messages.jsonl";
/// A session's settings and counts.
pub const META_FILE: &str = "session.yaml";
/// The folder of the summaries governance keeps for a session.
pub const SUMMARIES_DIR: &str = "summaries";
/// The folder of the tool outputs governance offloaded for a session.
pub const TOOL_OUTPUTS_DIR: &str = "tool_outputs";
/// The largest `session.yaml` read.
const MAX_META_BYTES: u64 = 64 * 1024;
/// Characters of the first prompt a title keeps.
pub const TITLE_CHARS: usize = 100;

/// `session.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionMeta {
    /// The first user prompt, cut to 100 characters.
    pub title: String,
    /// The long-term-memory conversation its turns feed.
    pub conversation: String,
    /// The agent it runs for (`memory_agent`), whose notes and strategy apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When a message was last appended.
    pub updated_at: DateTime<Utc>,
    /// Messages in the log (abandoned branches included).
    #[serde(default)]
    pub messages: usize,
    /// Tokens of the last request as it went upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// The window of the model it last went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Summaries written for it (compactions and governance summaries).
    #[serde(default)]
    pub compressions: usize,
    /// The model it last went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The session it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// When it was deleted (soft: the folder stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<DateTime<Utc>>,
}

impl SessionMeta {
    /// A new session's settings, titled from its first prompt.
    pub fn new(conversation: &str, agent: Option<&str>, first_prompt: &str) -> Self {
        let now = Utc::now();
        Self {
            title: title_of(first_prompt),
            conversation: conversation.to_owned(),
            agent: agent.map(str::to_owned),
            created_at: now,
            updated_at: now,
            messages: 0,
            tokens: None,
            window: None,
            compressions: 0,
            model: None,
            parent: None,
            deleted_at: None,
        }
    }
}

/// A title from a prompt: its words on one line, cut to [`TITLE_CHARS`] characters.
pub fn title_of(prompt: &str) -> String {
    let line = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(TITLE_CHARS).collect()
}

/// A session read whole: settings, log and the history it makes.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    /// The session's id.
    pub id: SessionId,
    /// Its settings.
    pub meta: SessionMeta,
    /// The current branch.
    pub history: History,
    /// The log's size, which tells whether a cached copy is still current.
    pub log_bytes: u64,
    /// Lines of the log skipped as unreadable.
    pub skipped: Vec<String>,
}

/// The sessions of one store.
#[derive(Debug, Clone)]
pub struct SessionStore {
    root: PathBuf,
}

impl SessionStore {
    /// The sessions under `<store_root>/sessions/`.
    pub fn new(store_root: impl Into<PathBuf>) -> Self {
        Self {
            root: store_root.into(),
        }
    }

    /// The folder of session `id`.
    pub fn dir(&self, id: &SessionId) -> PathBuf {
        self.root.join(SESSIONS_DIR).join(id.as_str())
    }

    /// The folder of the tool outputs offloaded for session `id`.
    pub fn tool_outputs_dir(&self, id: &SessionId) -> PathBuf {
        self.dir(id).join(TOOL_OUTPUTS_DIR)
    }

    /// The folder of the summaries kept for session `id`.
    pub fn summaries_dir(&self, id: &SessionId) -> PathBuf {
        self.dir(id).join(SUMMARIES_DIR)
    }

    /// The path of session `id`'s log.
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        self.dir(id).join(LOG_FILE)
    }

    /// `path` relative to the store, for messages.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The settings of session `id`; `None` when it does not exist.
    pub fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        let sessions = self.root.join(SESSIONS_DIR);
        no_link(&sessions).map_err(|message| self.bad(&sessions, &message))?;
        let dir = self.dir(id);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(self.bad(&dir, "not a folder (links are refused)")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io("read", &dir, e)),
        }
        let path = dir.join(META_FILE);
        let text = match read_small(&path, MAX_META_BYTES) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(None),
            Err(message) => return Err(self.bad(&path, &message)),
        };
        mnemo_store::untrusted::from_yaml(&text)
            .map(Some)
            .map_err(|e| self.bad(&path, &format!("not valid session settings: {e}")))
    }

    /// Session `id`'s settings, which must exist (deleted or not).
    pub fn existing_meta(&self, id: &SessionId) -> Result<SessionMeta, SessionError> {
        self.meta(id)?
            .ok_or_else(|| SessionError::NotFound(id.to_string()))
    }

    /// Session `id`'s settings, which must exist and not be deleted.
    pub fn live_meta(&self, id: &SessionId) -> Result<SessionMeta, SessionError> {
        let meta = self.existing_meta(id)?;
        match meta.deleted_at {
            Some(at) => Err(SessionError::Deleted {
                id: id.to_string(),
                at: at.to_rfc3339(),
            }),
            None => Ok(meta),
        }
    }

    /// Writes session `id`'s settings (atomically), creating its folder.
    pub fn write_meta(&self, id: &SessionId, meta: &SessionMeta) -> Result<(), SessionError> {
        let dir = self.dir(id);
        if !dir.exists() {
            self.claim(id)?;
        }
        let path = dir.join(META_FILE);
        let yaml = serde_saphyr::to_string(meta)
            .map_err(|e| SessionError::Invalid(format!("cannot write session settings: {e}")))?;
        let text =
            format!("# mnemo chat session {id}; the log is messages.jsonl beside it.\n{yaml}");
        mnemo_store::atomic::write_atomic(&path, text.as_bytes())
            .map_err(|e| self.io("write", &path, e))
    }

    /// Reads session `id` whole; its message count is corrected from its log.
    pub fn load(&self, id: &SessionId) -> Result<Option<LoadedSession>, SessionError> {
        let Some(mut meta) = self.meta(id)? else {
            return Ok(None);
        };
        let ReadLog {
            records,
            bytes,
            skipped,
        } = self.read_log(id)?;
        let history = History::replay(&records);
        meta.messages = history.logged_messages;
        Ok(Some(LoadedSession {
            id: id.clone(),
            meta,
            history,
            log_bytes: bytes,
            skipped,
        }))
    }

    /// Session `id`'s log as it is on disk (every record, abandoned branches included).
    pub fn read_log(&self, id: &SessionId) -> Result<ReadLog, SessionError> {
        let path = self.log_path(id);
        log::read(&path).map_err(|e| self.io("read", &path, e))
    }

    /// Appends `records` to session `id`'s log and fsyncs it; returns the log's new size.
    pub fn append(&self, id: &SessionId, records: &[Record]) -> Result<u64, SessionError> {
        let path = self.log_path(id);
        log::append(&path, records).map_err(|e| self.io("append to", &path, e))
    }

    /// The size of session `id`'s log (0 when there is none yet).
    pub fn log_bytes(&self, id: &SessionId) -> u64 {
        std::fs::symlink_metadata(self.log_path(id))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Every session, newest first (by last message); deleted ones only when asked. A folder
    /// whose settings cannot be read is skipped with a warning.
    pub fn list(
        &self,
        include_deleted: bool,
    ) -> Result<Vec<(SessionId, SessionMeta)>, SessionError> {
        let dir = self.root.join(SESSIONS_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("list", &dir, e)),
        };
        let mut sessions = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| SessionId::new(n).ok()) else {
                continue;
            };
            match self.meta(&id) {
                Ok(Some(meta)) if include_deleted || meta.deleted_at.is_none() => {
                    sessions.push((id, meta))
                }
                Ok(_) => {}
                Err(e) => warn!("skipping a session: {e}"),
            }
        }
        sessions.sort_by(|a, b| b.1.updated_at.cmp(&a.1.updated_at).then(a.0.cmp(&b.0)));
        Ok(sessions)
    }

    /// Creates session `id`'s folder, durably; a folder that exists already is a
    /// [`SessionError::Exists`] (two creators cannot both win).
    fn claim(&self, id: &SessionId) -> Result<(), SessionError> {
        let sessions = self.root.join(SESSIONS_DIR);
        std::fs::create_dir_all(&sessions).map_err(|e| self.io("create", &sessions, e))?;
        let dir = self.dir(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => log::sync_parent(&dir).map_err(|e| self.io("create", &dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(SessionError::Exists(id.to_string()))
            }
            Err(e) => Err(self.io("create", &dir, e)),
        }
    }

    /// Copies session `id` (log, kept summaries and offloaded outputs) under `new_id`, with
    /// `parent` set; the original is not touched. A deleted session may be forked: the copy
    /// is live.
    pub fn fork(&self, id: &SessionId, new_id: &SessionId) -> Result<SessionMeta, SessionError> {
        let source = self.existing_meta(id)?;
        self.claim(new_id)?;
        let from = self.log_path(id);
        let to = self.log_path(new_id);
        let to_dir = self.dir(new_id);
        let bytes = if from.exists() {
            log::copy(&from, &to).map_err(|e| self.io("copy", &from, e))?
        } else {
            0
        };
        for folder in [SUMMARIES_DIR, TOOL_OUTPUTS_DIR] {
            let src = self.dir(id).join(folder);
            copy_files(&src, &to_dir.join(folder)).map_err(|e| self.io("copy", &src, e))?;
        }
        let now = Utc::now();
        let meta = SessionMeta {
            parent: Some(id.to_string()),
            created_at: now,
            updated_at: now,
            deleted_at: None,
            ..source
        };
        self.write_meta(new_id, &meta)?;
        tracing::debug!(from = %id, to = %new_id, bytes, "session forked");
        Ok(meta)
    }

    /// Marks session `id` deleted; its folder stays (like a memory's tombstone).
    pub fn delete(&self, id: &SessionId) -> Result<SessionMeta, SessionError> {
        let mut meta = self.live_meta(id)?;
        meta.deleted_at = Some(Utc::now());
        self.write_meta(id, &meta)?;
        Ok(meta)
    }

    fn bad(&self, path: &Path, message: &str) -> SessionError {
        SessionError::BadFile {
            path: self.relative(path),
            message: message.to_owned(),
        }
    }

    fn io(&self, action: &'static str, path: &Path, source: std::io::Error) -> SessionError {
        SessionError::Io {
            action,
            path: self.relative(path),
            source,
        }
    }
}

/// Reads a small regular file: `None` when missing; links, special files and files over
/// `limit` bytes are refused with the reason.
pub(crate) fn read_small(path: &Path, limit: u64) -> Result<Option<String>, String> {
    match mnemo_store::untrusted::read_regular(path, limit) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "not UTF-8 text".to_owned()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Refuses `dir` when it exists as anything but a real folder: a link in the store would
/// send reads and writes elsewhere.
pub(crate) fn no_link(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            Err("not a folder (links and special files are refused)".into())
        }
        _ => Ok(()),
    }
}

/// Copies the regular files of `from` (not recursing, not following links) into `to`.
fn copy_files(from: &Path, to: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    std::fs::create_dir_all(to)?;
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store() -> (tempfile::TempDir, SessionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        (dir, store)
    }

    fn id(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    #[test]
    fn sessions_round_trip_and_list_newest_first() {
        let (_dir, store) = store();
        assert!(store.meta(&id("a")).unwrap().is_none());
        let mut meta = SessionMeta::new("trip", Some("coder"), "  Plan   my\ntrip  ");
        assert_eq!(meta.title, "Plan my trip");
        store.write_meta(&id("a"), &meta).unwrap();
        meta.updated_at += chrono::Duration::seconds(5);
        store.write_meta(&id("b"), &meta).unwrap();
        assert_eq!(
            store.meta(&id("a")).unwrap().unwrap().agent.as_deref(),
            Some("coder")
        );
        let listed: Vec<String> = store
            .list(false)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(listed, ["b", "a"]);
    }

    #[test]
    fn fork_copies_and_delete_is_soft() {
        let (_dir, store) = store();
        let parent = id("parent");
        store
            .write_meta(&parent, &SessionMeta::new("c", None, "hi"))
            .unwrap();
        store
            .append(
                &parent,
                &[Record::message(json!({"role": "user", "content": "hi"}))],
            )
            .unwrap();
        let child = id("child");
        let meta = store.fork(&parent, &child).unwrap();
        assert_eq!(meta.parent.as_deref(), Some("parent"));
        store
            .append(
                &child,
                &[Record::message(json!({"role": "user", "content": "more"}))],
            )
            .unwrap();
        assert_eq!(
            store.load(&parent).unwrap().unwrap().history.messages.len(),
            1
        );
        assert_eq!(
            store.load(&child).unwrap().unwrap().history.messages.len(),
            2
        );
        assert!(matches!(
            store.fork(&parent, &child),
            Err(SessionError::Exists(_))
        ));

        store.delete(&child).unwrap();
        assert_eq!(store.list(false).unwrap().len(), 1);
        assert_eq!(store.list(true).unwrap().len(), 2);
        let err = store.live_meta(&child).unwrap_err().to_string();
        assert!(err.contains("was deleted"), "{err}");
        let revived = store.fork(&child, &id("grandchild")).unwrap();
        assert_eq!(
            revived.deleted_at, None,
            "a fork of a deleted session is live"
        );
        assert!(store.load(&child).unwrap().is_some(), "the log stays");
    }

    #[test]
    fn hostile_files_are_refused_with_their_path() {
        let (dir, store) = store();
        let s = dir.path().join("sessions/x");
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join(META_FILE), "title: [unclosed").unwrap();
        let err = store.meta(&id("x")).unwrap_err().to_string();
        assert!(
            err.starts_with("sessions/x/session.yaml: not valid"),
            "{err}"
        );
        assert!(store.list(false).unwrap().is_empty(), "skipped, not fatal");

        std::fs::write(s.join(META_FILE), "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n").unwrap();
        assert!(store.meta(&id("x")).is_err());

        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("sessions/y")).unwrap();
        let err = store.meta(&id("y")).unwrap_err().to_string();
        assert!(err.contains("links are refused"), "{err}");
    }
}
