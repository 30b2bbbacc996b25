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
//!
//! Every folder here (`sessions/`, `sessions/<id>/`, its `summaries/` and `tool_outputs/`) is
//! a [`StoreDir`]: each read, listing, write and fork checks that every folder from the
//! store's root down is a real folder, so a link planted at any level is refused, naming it.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use mnemo_core::ConversationId;
use mnemo_store::untrusted::{Refusal, StoreDir};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::SessionError;
use crate::history::History;
use crate::id::SessionId;
use crate::log::{self, ReadLog, Record};

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
    /// The summary its last request went upstream with, in place of its older messages
    /// (governance's, not a compaction's, which is in the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<GovernedSummary>,
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
            summary: None,
            parent: None,
            deleted_at: None,
        }
    }
}

/// A summary governance sent upstream in place of a session's older messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GovernedSummary {
    /// The messages it stood for.
    pub messages: usize,
    /// Its text, cut to [`GOVERNED_SUMMARY_CHARS`] characters.
    pub text: String,
}

/// Characters of a governed summary a session's settings keep: enough to show, and a
/// bound on what `session.yaml` grows by.
pub const GOVERNED_SUMMARY_CHARS: usize = 2000;

impl GovernedSummary {
    /// The summary of `messages` messages, its text cut to [`GOVERNED_SUMMARY_CHARS`].
    pub fn new(messages: usize, text: &str) -> Self {
        Self {
            messages,
            text: text.chars().take(GOVERNED_SUMMARY_CHARS).collect(),
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
    /// Whether the last of `skipped` is a torn last line (the next append cuts it off).
    pub torn: bool,
}

impl LoadedSession {
    /// The skipped lines that stay once an append is made (see
    /// [`ReadLog::skipped_after_append`]).
    pub fn skipped_after_append(&self) -> Vec<String> {
        ReadLog::skipped_after_append(&self.skipped, self.torn)
    }
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

    /// The folder of every session.
    fn sessions_dir(&self) -> StoreDir {
        StoreDir::new(&self.root, self.root.join(SESSIONS_DIR))
    }

    /// The folder of session `id`.
    pub fn dir(&self, id: &SessionId) -> StoreDir {
        self.sessions_dir().child(id.as_str())
    }

    /// The folder of the tool outputs offloaded for session `id`.
    pub fn tool_outputs_dir(&self, id: &SessionId) -> StoreDir {
        self.dir(id).child(TOOL_OUTPUTS_DIR)
    }

    /// The folder of the summaries kept for session `id`.
    pub fn summaries_dir(&self, id: &SessionId) -> StoreDir {
        self.dir(id).child(SUMMARIES_DIR)
    }

    /// The path of session `id`'s log.
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        self.dir(id).file(LOG_FILE)
    }

    /// `path` relative to the store, for messages.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The settings of session `id`; `None` when it does not exist. Its conversation and
    /// agent must be valid names: a hand edit that breaks one is a fault of the file, named.
    pub fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        let dir = self.dir(id);
        if !dir.exists().map_err(|e| self.refused(&dir, e))? {
            return Ok(None);
        }
        let path = dir.file(META_FILE);
        let text = match read_small(&path, MAX_META_BYTES) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(None),
            Err(message) => return Err(self.bad(&path, &message)),
        };
        let meta: SessionMeta = mnemo_store::untrusted::from_yaml(&text)
            .map_err(|e| self.bad(&path, &format!("not valid session settings: {e}")))?;
        ConversationId::new(&meta.conversation)
            .map_err(|e| self.bad(&path, &format!("conversation: {e}")))?;
        if let Some(agent) = &meta.agent {
            ConversationId::new(agent)
                .map_err(|e| self.bad(&path, &format!("agent: {}", e.describe("agent name"))))?;
        }
        Ok(Some(meta))
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
        if !dir.exists().map_err(|e| self.refused(&dir, e))? {
            self.claim(id)?;
        }
        let path = dir.file(META_FILE);
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
            torn,
        } = self.read_log(id)?;
        let history = History::replay(&records);
        meta.messages = history.logged_messages;
        Ok(Some(LoadedSession {
            id: id.clone(),
            meta,
            history,
            log_bytes: bytes,
            skipped,
            torn,
        }))
    }

    /// Session `id`'s log as it is on disk (every record, abandoned branches included).
    pub fn read_log(&self, id: &SessionId) -> Result<ReadLog, SessionError> {
        let dir = self.dir(id);
        dir.check().map_err(|e| self.refused(&dir, e))?;
        let path = self.log_path(id);
        log::read(&path).map_err(|e| self.io("read", &path, e))
    }

    /// Appends `records` to session `id`'s log and fsyncs it; returns the log's new size. A
    /// log that would pass [`log::MAX_LOG_BYTES`] is a [`SessionError::LogFull`], and
    /// nothing is written.
    pub fn append(&self, id: &SessionId, records: &[Record]) -> Result<u64, SessionError> {
        let dir = self.dir(id);
        dir.check().map_err(|e| self.refused(&dir, e))?;
        let path = self.log_path(id);
        log::append(&path, records).map_err(|e| {
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<log::LogFull>())
            {
                Some(full) => SessionError::LogFull {
                    path: self.relative(&path),
                    message: full.to_string(),
                },
                None => self.io("append to", &path, e),
            }
        })
    }

    /// The size of session `id`'s log (0 when there is none yet, or it cannot be reached).
    pub fn log_bytes(&self, id: &SessionId) -> u64 {
        if self.dir(id).check().is_err() {
            return 0;
        }
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
        let dir = self.sessions_dir();
        let entries = match dir.entries() {
            Ok(Some(entries)) => entries,
            Ok(None) => return Ok(Vec::new()),
            Err(e) => return Err(self.refused(&dir, e)),
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

    /// Creates session `id` with `meta` and `records`, all or nothing: a session that cannot
    /// be written whole leaves no folder (so its id is free again).
    pub(crate) fn create_with(
        &self,
        id: &SessionId,
        meta: &SessionMeta,
        records: &[Record],
    ) -> Result<(), SessionError> {
        self.claim(id)?;
        let written = self
            .append(id, records)
            .and_then(|_| self.write_meta(id, meta));
        if written.is_err() {
            self.remove_claimed(id);
        }
        written
    }

    /// Removes the folder a failed fork or import claimed, once it is checked to be a real
    /// folder of the store.
    fn remove_claimed(&self, id: &SessionId) {
        let made = self.dir(id);
        if made.check().is_ok() {
            if let Err(e) = std::fs::remove_dir_all(made.path()) {
                warn!(
                    "cannot remove {} after a failed write: {e}",
                    self.relative(made.path())
                );
            }
        }
    }

    /// Creates session `id`'s folder, durably; a folder that exists already is a
    /// [`SessionError::Exists`] (two creators cannot both win).
    fn claim(&self, id: &SessionId) -> Result<(), SessionError> {
        let sessions = self.sessions_dir();
        sessions.create().map_err(|e| self.refused(&sessions, e))?;
        let dir = self.dir(id);
        match std::fs::create_dir(dir.path()) {
            Ok(()) => log::sync_parent(dir.path()).map_err(|e| self.io("create", dir.path(), e)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(SessionError::Exists(id.to_string()))
            }
            Err(e) => Err(self.io("create", dir.path(), e)),
        }
    }

    /// Copies session `id` (log, kept summaries and offloaded outputs) under `new_id`, with
    /// `parent` set; the original is not touched. A deleted session may be forked: the copy
    /// is live. A fork that fails leaves nothing: the new folder is removed, so its id is
    /// free again.
    pub fn fork(&self, id: &SessionId, new_id: &SessionId) -> Result<SessionMeta, SessionError> {
        let source = self.existing_meta(id)?;
        self.claim(new_id)?;
        let copied = self.copy_session(id, new_id, source);
        if copied.is_err() {
            self.remove_claimed(new_id);
        }
        copied
    }

    fn copy_session(
        &self,
        id: &SessionId,
        new_id: &SessionId,
        source: SessionMeta,
    ) -> Result<SessionMeta, SessionError> {
        let from = self.log_path(id);
        let to = self.log_path(new_id);
        let from_dir = self.dir(id);
        from_dir.check().map_err(|e| self.refused(&from_dir, e))?;
        let bytes = if std::fs::symlink_metadata(&from).is_ok() {
            log::copy(&from, &to).map_err(|e| self.io("copy", &from, e))?
        } else {
            0
        };
        for folder in [SUMMARIES_DIR, TOOL_OUTPUTS_DIR] {
            let src = self.dir(id).child(folder);
            let dst = self.dir(new_id).child(folder);
            self.copy_files(&src, &dst)?;
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

    /// Copies the regular files of `from` (not recursing, not following links) into `to`;
    /// both folders are checked at every level.
    fn copy_files(&self, from: &StoreDir, to: &StoreDir) -> Result<(), SessionError> {
        let entries = match from.entries() {
            Ok(Some(entries)) => entries,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.refused(from, e)),
        };
        to.create().map_err(|e| self.refused(to, e))?;
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                let source = entry.path();
                std::fs::copy(&source, to.file(entry.file_name()))
                    .map_err(|e| self.io("copy", &source, e))?;
            }
        }
        Ok(())
    }

    /// Marks session `id` deleted; its folder stays (like a memory's tombstone).
    pub fn delete(&self, id: &SessionId) -> Result<SessionMeta, SessionError> {
        let mut meta = self.live_meta(id)?;
        meta.deleted_at = Some(Utc::now());
        self.write_meta(id, &meta)?;
        Ok(meta)
    }

    /// A folder refused by the store's rules (a link, a file), or that cannot be read.
    fn refused(&self, dir: &StoreDir, refusal: Refusal) -> SessionError {
        match refusal {
            Refusal::Io(source) => self.io("read", dir.path(), source),
            Refusal::NotAFolder { path, what } => SessionError::BadFile {
                path,
                message: format!(
                    "{what}, not a real folder; mnemo reads and writes only real folders under the store"
                ),
            },
            other => SessionError::BadFile {
                path: self.relative(dir.path()),
                message: other.to_string(),
            },
        }
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
        assert!(
            err.starts_with("sessions/y: a symbolic link, not a real folder"),
            "{err}"
        );
    }

    fn session_with_files(store: &SessionStore, name: &str) -> SessionId {
        let sid = id(name);
        store
            .write_meta(&sid, &SessionMeta::new("c", None, "hi"))
            .unwrap();
        store
            .append(
                &sid,
                &[Record::message(json!({"role": "user", "content": "hi"}))],
            )
            .unwrap();
        for folder in [store.summaries_dir(&sid), store.tool_outputs_dir(&sid)] {
            folder.create().unwrap();
            std::fs::write(folder.file("kept.txt"), "inside").unwrap();
        }
        sid
    }

    #[test]
    fn a_link_at_any_level_of_a_session_is_refused_and_nothing_crosses_it() {
        let (dir, store) = store();
        let root = dir.path();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
        std::fs::write(outside.path().join(META_FILE), "title: t\nconversation: c\ncreated_at: 2026-01-01T00:00:00Z\nupdated_at: 2026-01-01T00:00:00Z\n").unwrap();
        let sid = session_with_files(&store, "s");
        for level in [
            "sessions/s/tool_outputs",
            "sessions/s/summaries",
            "sessions/s",
            "sessions",
        ] {
            let moved = root.join("moved");
            std::fs::rename(root.join(level), &moved).unwrap();
            std::os::unix::fs::symlink(outside.path(), root.join(level)).unwrap();
            let folder_only = level.ends_with("tool_outputs") || level.ends_with("summaries");
            if !folder_only {
                let err = store.meta(&sid).unwrap_err().to_string();
                assert!(
                    err.starts_with(&format!("{level}: a symbolic link, not a real folder")),
                    "{level}: {err}"
                );
                assert!(store.read_log(&sid).is_err(), "{level}");
                let err = store
                    .append(
                        &sid,
                        &[Record::message(json!({"role": "user", "content": "x"}))],
                    )
                    .unwrap_err()
                    .to_string();
                assert!(
                    err.contains("a symbolic link, not a real folder"),
                    "{level}: {err}"
                );
                assert!(
                    store
                        .write_meta(&sid, &SessionMeta::new("c", None, "x"))
                        .is_err(),
                    "{level}"
                );
            }
            for folder in [store.tool_outputs_dir(&sid), store.summaries_dir(&sid)] {
                if !folder.path().starts_with(root.join(level)) {
                    continue;
                }
                let err = folder.read("secret.txt", 100).unwrap_err().to_string();
                assert!(
                    err.contains("is a symbolic link, not a real folder"),
                    "{level}: {err}"
                );
                assert!(folder.create().is_err(), "{level}");
            }
            // A fork neither reads through the link nor keeps a half-made copy.
            let child = id("child");
            let err = store.fork(&sid, &child).unwrap_err().to_string();
            assert!(
                err.contains("a symbolic link, not a real folder"),
                "{level}: {err}"
            );
            if level != "sessions" {
                assert!(
                    !root.join("sessions/child").exists(),
                    "{level}: the failed fork left its folder"
                );
            }
            std::fs::remove_file(root.join(level)).unwrap();
            std::fs::rename(&moved, root.join(level)).unwrap();
        }
        let mut outside_files: Vec<String> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        outside_files.sort();
        assert_eq!(
            outside_files,
            ["secret.txt", META_FILE],
            "nothing was written outside"
        );
        // Whole again, the session forks, and the id a failed fork tried is free.
        store.fork(&sid, &id("child")).unwrap();
        assert_eq!(
            std::fs::read_to_string(store.tool_outputs_dir(&id("child")).file("kept.txt")).unwrap(),
            "inside"
        );
    }

    #[test]
    fn a_failed_fork_removes_what_it_made() {
        let (dir, store) = store();
        let sid = session_with_files(&store, "s");
        // A log past the limit cannot be copied.
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(store.log_path(&sid))
            .unwrap();
        log.set_len(log::MAX_LOG_BYTES + 1).unwrap();
        let err = store.fork(&sid, &id("copy")).unwrap_err().to_string();
        assert!(err.contains("more than the"), "{err}");
        assert!(!dir.path().join("sessions/copy").exists());
        assert!(store.meta(&id("copy")).unwrap().is_none());
        log.set_len(0).unwrap();
        store.fork(&sid, &id("copy")).unwrap();
        assert!(
            store.meta(&id("copy")).unwrap().is_some(),
            "the id was free again"
        );
    }

    #[test]
    fn invalid_names_in_session_yaml_are_faults_of_the_file() {
        let (dir, store) = store();
        let s = dir.path().join("sessions/x");
        std::fs::create_dir_all(&s).unwrap();
        for (field, value) in [("agent", "../../etc"), ("conversation", "a/b")] {
            let conversation = if field == "conversation" { value } else { "c" };
            let mut text = format!("title: t\nconversation: {conversation}\ncreated_at: 2026-01-01T00:00:00Z\nupdated_at: 2026-01-01T00:00:00Z\n");
            if field == "agent" {
                text.push_str(&format!("agent: {value}\n"));
            }
            std::fs::write(s.join(META_FILE), text).unwrap();
            let err = store.meta(&id("x")).unwrap_err();
            assert!(
                matches!(err, SessionError::BadFile { .. }),
                "{field}: {err:?}"
            );
            assert!(!err.is_invalid_input(), "not the caller's fault: {err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("sessions/x/session.yaml: {field}: ")),
                "{text}"
            );
        }
    }
}
