//! A session as one JSON document, to move it between stores: [`SessionExport`].
//!
//! What travels is what is the truth of a session: its settings and every record of its log
//! (abandoned branches and compactions included). The summaries governance keeps and the
//! outputs it offloaded are caches rebuilt from the log on demand, so they stay behind.
//!
//! An imported document is as untrusted as any file of the store: its format and version
//! are checked, the id must be a session id and free, the settings are checked as
//! `session.yaml` is, and the records are written through the log's own append (so its size
//! cap holds). A failed import leaves no folder behind.

use serde::{Deserialize, Serialize};

use crate::error::SessionError;
use crate::history::History;
use crate::id::SessionId;
use crate::log::Record;
use crate::store::{SessionMeta, SessionStore};

/// The `format` an exported session carries.
pub const EXPORT_FORMAT: &str = "mnemo-session";
/// The newest export version this mnemo writes and reads.
pub const EXPORT_VERSION: u32 = 1;
/// The most records one import takes.
pub const MAX_IMPORT_RECORDS: usize = 1_000_000;

/// One session, exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionExport {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`] when written; a newer one is refused.
    pub version: u32,
    /// The session's id where it was exported.
    pub id: String,
    /// Its settings (`session.yaml`).
    pub meta: SessionMeta,
    /// Every record of its log, in order (`messages.jsonl`).
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<Record>,
    /// Lines of its log that could not be read, and so are not here.
    #[serde(default)]
    pub skipped_lines: usize,
}

impl SessionStore {
    /// Session `id` as one document.
    pub fn export(&self, id: &SessionId) -> Result<SessionExport, SessionError> {
        let meta = self.existing_meta(id)?;
        let log = self.read_log(id)?;
        Ok(SessionExport {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            id: id.to_string(),
            meta,
            records: log.records,
            skipped_lines: log.skipped.len(),
        })
    }

    /// Creates a session from `export`, under `as_id` or the id it was exported with; returns
    /// the id and the settings written. The id must be free ([`SessionError::Exists`]). A
    /// deleted session comes back live: importing it is asking for it.
    pub fn import(
        &self,
        export: SessionExport,
        as_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), SessionError> {
        check_export(&export)?;
        let id = match as_id {
            Some(id) => id,
            None => SessionId::new(&export.id)
                .map_err(|e| SessionError::Invalid(format!("the export's id: {e}")))?,
        };
        let history = History::replay(&export.records);
        let meta = SessionMeta {
            messages: history.logged_messages,
            deleted_at: None,
            ..export.meta
        };
        self.create_with(&id, &meta, &export.records)?;
        Ok((id, meta))
    }
}

fn check_export(export: &SessionExport) -> Result<(), SessionError> {
    let invalid = |m: String| Err(SessionError::Invalid(m));
    if export.format != EXPORT_FORMAT {
        return invalid(format!(
            "not an exported session: format is {:?}, not {EXPORT_FORMAT:?}",
            export.format
        ));
    }
    if export.version > EXPORT_VERSION {
        return invalid(format!(
            "the session was exported in version {}, newer than this mnemo reads (up to {EXPORT_VERSION}); upgrade mnemo to import it",
            export.version
        ));
    }
    if export.records.len() > MAX_IMPORT_RECORDS {
        return invalid(format!(
            "the export has {} records; an import takes at most {MAX_IMPORT_RECORDS}",
            export.records.len()
        ));
    }
    if let Some(n) = export.records.iter().position(|r| !well_formed(r)) {
        return invalid(format!(
            "record {n} of the export is a message that is not a chat message (an object with a \"role\")"
        ));
    }
    Ok(())
}

/// A message record must hold a chat message; the other records are checked by their types.
fn well_formed(record: &Record) -> bool {
    match record {
        Record::Message { message, .. } => message["role"].is_string(),
        Record::Instructions { messages, .. } => messages.iter().all(|m| m["role"].is_string()),
        Record::Rewind { .. } | Record::Compaction { .. } => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_with_a_session() -> (tempfile::TempDir, SessionStore, SessionId) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let id = SessionId::new("trip").unwrap();
        let meta = SessionMeta::new("travel", Some("planner"), "Plan my trip");
        store.write_meta(&id, &meta).unwrap();
        let records = [
            Record::message(json!({"role": "user", "content": "Plan my trip"})),
            Record::message(json!({"role": "assistant", "content": "Where to?"})),
            Record::Rewind {
                at: chrono::Utc::now(),
                to: 1,
            },
            Record::message(json!({"role": "assistant", "content": "When?"})),
        ];
        store.append(&id, &records).unwrap();
        (dir, store, id)
    }

    #[test]
    fn an_exported_session_imports_as_it_was_under_a_new_id() {
        let (_dir, store, id) = store_with_a_session();
        let export = store.export(&id).unwrap();
        assert_eq!(export.records.len(), 4);
        let text = serde_json::to_string(&export).unwrap();
        let back: SessionExport = serde_json::from_str(&text).unwrap();
        let copy = SessionId::new("trip-copy").unwrap();
        let (imported, meta) = store.import(back, Some(copy.clone())).unwrap();
        assert_eq!(imported, copy);
        assert_eq!(meta.title, "Plan my trip");
        assert_eq!(meta.agent.as_deref(), Some("planner"));
        let original = store.load(&id).unwrap().unwrap();
        let loaded = store.load(&copy).unwrap().unwrap();
        assert_eq!(loaded.history, original.history);
        assert_eq!(loaded.meta.messages, 3);

        let again = store.import(store.export(&id).unwrap(), None).unwrap_err();
        assert!(matches!(again, SessionError::Exists(_)), "{again}");
    }

    #[test]
    fn a_foreign_newer_or_hostile_export_is_refused_and_leaves_nothing() {
        let (dir, store, id) = store_with_a_session();
        let good = store.export(&id).unwrap();
        let cases = [
            (
                SessionExport {
                    format: "midori".into(),
                    ..good.clone()
                },
                "not an exported session",
            ),
            (
                SessionExport {
                    version: EXPORT_VERSION + 1,
                    ..good.clone()
                },
                "upgrade mnemo",
            ),
            (
                SessionExport {
                    id: "../escape".into(),
                    ..good.clone()
                },
                "the export's id",
            ),
            (
                SessionExport {
                    id: "bad-record".into(),
                    records: vec![Record::message(json!("just text"))],
                    ..good.clone()
                },
                "record 0",
            ),
        ];
        for (export, expected) in cases {
            let err = store.import(export, None).unwrap_err();
            assert!(err.is_invalid_input(), "{err}");
            assert!(err.to_string().contains(expected), "{err}");
        }
        assert!(!dir.path().join("sessions/bad-record").exists());
        assert!(!dir.path().join("escape").exists());
        let unknown = serde_json::from_value::<SessionExport>(json!({
            "format": EXPORT_FORMAT, "version": 1, "id": "x", "meta": good.meta,
            "records": [], "extra": true
        }));
        assert!(unknown.is_err(), "unknown fields are refused");
    }

    /// Set in the child process that
    /// `an_import_whose_log_write_fails_part_way_leaves_nothing` runs itself in.
    const UNDER_A_FILE_SIZE_LIMIT: &str = "MNEMO_TEST_UNDER_A_FILE_SIZE_LIMIT";

    #[test]
    fn an_import_whose_log_write_fails_part_way_leaves_nothing() {
        if std::env::var_os(UNDER_A_FILE_SIZE_LIMIT).is_some() {
            return import_past_a_file_size_limit();
        }
        // The write has to fail once the import has made its folder and begun its log, and
        // tests may run as root, which writes through read-only folders. A file size limit
        // (RLIMIT_FSIZE) binds root too, but a whole process: so the test runs again alone
        // in a child process, under `ulimit -f`, with SIGXFSZ ignored so that the write
        // past the limit fails (EFBIG) instead of killing the process.
        let name = "export::tests::an_import_whose_log_write_fails_part_way_leaves_nothing";
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg("trap '' XFSZ && ulimit -f 16 && exec \"$0\" \"$@\"")
            .arg(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(UNDER_A_FILE_SIZE_LIMIT, "1")
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr),
        );
        assert!(child.status.success(), "{out}\n{err}");
        // A name that matched no test would pass too.
        assert!(out.contains("1 passed"), "{out}\n{err}");
    }

    /// The import, under a file size limit (8 or 16 KiB, as the shell counts `ulimit -f`)
    /// its log passes many times over: its write stops part-way.
    fn import_past_a_file_size_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let words = "all work and no play makes a long log ".repeat(100);
        let export = |records: usize| SessionExport {
            format: EXPORT_FORMAT.into(),
            version: EXPORT_VERSION,
            id: "long".into(),
            meta: SessionMeta::new("travel", None, "0"),
            records: (0..records)
                .map(|i| {
                    Record::message(json!({"role": "user", "content": format!("{i} {words}")}))
                })
                .collect(),
            skipped_lines: 0,
        };
        let err = store.import(export(40), None).unwrap_err();
        // The log's own write failed (not a check before it), and the error says which
        // file and why.
        let SessionError::Io {
            action,
            path,
            source,
        } = &err
        else {
            panic!("not a failed write: {err}");
        };
        assert_eq!(
            (*action, path.as_str(), source.kind()),
            (
                "append to",
                "sessions/long/messages.jsonl",
                std::io::ErrorKind::FileTooLarge
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("cannot append to sessions/long/messages.jsonl: "),
            "{err}"
        );
        // Nothing of it is left: not its folder, not the part of its log written, and its id
        // is free again.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let id = SessionId::new("long").unwrap();
        assert!(store.load(&id).unwrap().is_none());
        let (imported, _) = store.import(export(1), None).unwrap();
        assert_eq!(imported, id);
        assert_eq!(store.load(&id).unwrap().unwrap().history.logged_messages, 1);
    }
}
