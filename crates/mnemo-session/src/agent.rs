//! `agents/<agent>/MEMORY.md`: an agent's own notes, in its own words.
//!
//! Read whole; written by appending; updated by replacing one exact passage, which must occur
//! exactly once (an absent or ambiguous passage is an error that says so, and nothing is
//! written). The file is read from disk every time, so a hand edit is seen by the next
//! request. Versioning (a git commit per change) is the caller's.

use std::path::{Path, PathBuf};

use mnemo_core::ConversationId;
use mnemo_store::untrusted::StoreDir;

use crate::error::SessionError;
use crate::store::read_small;

/// The folder, under the store, of every agent's notes.
pub const AGENTS_DIR: &str = "agents";
/// The notes' file name.
pub const AGENT_MEMORY_FILE: &str = "MEMORY.md";
/// The largest notes file read or written.
pub const MAX_AGENT_MEMORY_BYTES: u64 = 1 << 20;
/// Lines of the notes injected into a request's system prompt.
pub const INJECTED_LINES: usize = 200;

/// One agent's notes.
#[derive(Debug, Clone)]
pub struct AgentNotes {
    dir: StoreDir,
    path: PathBuf,
    relative: String,
}

impl AgentNotes {
    /// The notes of `agent` (an id under the conversation-id rules) in the store at `root`.
    pub fn new(root: &Path, agent: &str) -> Result<Self, SessionError> {
        let agent = ConversationId::new(agent)
            .map_err(|e| SessionError::Invalid(e.describe("agent name")))?;
        let relative = format!("{AGENTS_DIR}/{}/{AGENT_MEMORY_FILE}", agent.as_str());
        Ok(Self {
            dir: StoreDir::new(root, root.join(AGENTS_DIR).join(agent.as_str())),
            path: root.join(&relative),
            relative,
        })
    }

    /// The agents that have notes in the store at `root`, sorted: each folder under
    /// `agents/` with a valid agent name holding a `MEMORY.md`. Links are not followed.
    pub fn agents(root: &Path) -> Vec<String> {
        use mnemo_store::untrusted::is_real_folder;
        let Ok(Some(entries)) = StoreDir::new(root, root.join(AGENTS_DIR)).entries() else {
            return Vec::new();
        };
        let mut agents: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(is_real_folder)
            .filter(|entry| {
                std::fs::symlink_metadata(entry.path().join(AGENT_MEMORY_FILE))
                    .is_ok_and(|m| m.is_file())
            })
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| ConversationId::new(name).is_ok())
            .collect();
        agents.sort();
        agents
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path relative to the store.
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// The whole notes; empty when there are none yet.
    pub fn read(&self) -> Result<String, SessionError> {
        self.check_folders()?;
        read_small(&self.path, MAX_AGENT_MEMORY_BYTES)
            .map(Option::unwrap_or_default)
            .map_err(|message| SessionError::BadFile {
                path: self.relative.clone(),
                message,
            })
    }

    /// The first `lines` lines, or `None` when the notes are empty.
    pub fn head(&self, lines: usize) -> Result<Option<String>, SessionError> {
        let text = self.read()?;
        let head: Vec<&str> = text.lines().take(lines).collect();
        let head = head.join("\n");
        Ok((!head.trim().is_empty()).then_some(head))
    }

    /// Appends `text` on a line of its own; returns the whole notes.
    pub fn append(&self, text: &str) -> Result<String, SessionError> {
        if text.trim().is_empty() {
            return Err(SessionError::Invalid(
                "nothing to write: the text is empty".into(),
            ));
        }
        let mut notes = self.read()?;
        if !notes.is_empty() && !notes.ends_with('\n') {
            notes.push('\n');
        }
        notes.push_str(text);
        if !notes.ends_with('\n') {
            notes.push('\n');
        }
        self.write(&notes)?;
        Ok(notes)
    }

    /// Replaces `old` (which must occur exactly once) by `new`; returns the whole notes.
    pub fn update(&self, old: &str, new: &str) -> Result<String, SessionError> {
        if old.is_empty() {
            return Err(SessionError::Invalid(
                "old_text is empty: say which passage to replace".into(),
            ));
        }
        let notes = self.read()?;
        match notes.matches(old).count() {
            0 => Err(SessionError::NoMatch(format!(
                "the text to replace is not in {}; read the notes and quote the passage exactly",
                self.relative
            ))),
            1 => {
                let updated = notes.replacen(old, new, 1);
                self.write(&updated)?;
                Ok(updated)
            }
            n => Err(SessionError::NoMatch(format!(
                "the text to replace occurs {n} times in {}; quote more of it so that it occurs once",
                self.relative
            ))),
        }
    }

    /// `agents/` and `agents/<agent>/` must be real folders: the notes are versioned, and a
    /// pulled link there would send writes outside the store.
    fn check_folders(&self) -> Result<(), SessionError> {
        self.dir.check().map_err(|refusal| SessionError::BadFile {
            path: self.relative.clone(),
            message: refusal.to_string(),
        })?;
        Ok(())
    }

    fn write(&self, notes: &str) -> Result<(), SessionError> {
        self.check_folders()?;
        if notes.len() as u64 > MAX_AGENT_MEMORY_BYTES {
            return Err(SessionError::Invalid(format!(
                "{} would be {} bytes, more than the {MAX_AGENT_MEMORY_BYTES} allowed",
                self.relative,
                notes.len()
            )));
        }
        // A link in place of the file would send the write elsewhere.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| !m.is_file()) {
            return Err(SessionError::BadFile {
                path: self.relative.clone(),
                message: "not a regular file (links and special files are refused)".into(),
            });
        }
        mnemo_store::atomic::write_atomic(&self.path, notes.as_bytes()).map_err(|source| {
            SessionError::Io {
                action: "write",
                path: self.relative.clone(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_with_notes_are_listed_and_links_are_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(AgentNotes::agents(dir.path()).is_empty());
        for agent in ["writer", "coder"] {
            AgentNotes::new(dir.path(), agent)
                .unwrap()
                .append("- a note")
                .unwrap();
        }
        let agents = dir.path().join(AGENTS_DIR);
        std::fs::create_dir(agents.join("empty")).unwrap();
        std::os::unix::fs::symlink(agents.join("coder"), agents.join("linked")).unwrap();
        assert_eq!(AgentNotes::agents(dir.path()), ["coder", "writer"]);
    }

    #[test]
    fn append_update_and_their_errors() {
        let dir = tempfile::tempdir().unwrap();
        let notes = AgentNotes::new(dir.path(), "coder").unwrap();
        assert_eq!(notes.read().unwrap(), "");
        assert_eq!(notes.head(200).unwrap(), None);
        notes.append("# Notes").unwrap();
        notes.append("- tests run with `cargo test`\n").unwrap();
        let text = notes.update("cargo test", "scripts/test").unwrap();
        assert_eq!(text, "# Notes\n- tests run with `scripts/test`\n");

        let err = notes.update("cargo test", "x").unwrap_err().to_string();
        assert!(err.contains("not in agents/coder/MEMORY.md"), "{err}");
        notes.append("- tests: slow").unwrap();
        let err = notes.update("tests", "x").unwrap_err().to_string();
        assert!(err.contains("occurs 2 times"), "{err}");
        assert!(notes.update("", "x").is_err());
        assert!(notes.append("  ").is_err());
        assert_eq!(
            notes.read().unwrap().lines().count(),
            3,
            "failed updates wrote nothing"
        );
    }

    #[test]
    fn head_takes_exactly_the_first_lines_and_sees_hand_edits() {
        let dir = tempfile::tempdir().unwrap();
        let notes = AgentNotes::new(dir.path(), "a").unwrap();
        let text: String = (1..=250).map(|i| format!("line {i}\n")).collect();
        std::fs::create_dir_all(notes.path().parent().unwrap()).unwrap();
        std::fs::write(notes.path(), text).unwrap();
        let head = notes.head(INJECTED_LINES).unwrap().unwrap();
        assert_eq!(head.lines().count(), 200);
        assert!(head.ends_with("line 200"));
    }

    #[test]
    fn hostile_names_and_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = AgentNotes::new(dir.path(), "../x").unwrap_err().to_string();
        assert!(err.starts_with("agent name"), "{err}");
        let notes = AgentNotes::new(dir.path(), "a").unwrap();
        std::fs::create_dir_all(notes.path().parent().unwrap()).unwrap();
        let target = dir.path().join("secret");
        std::fs::write(&target, "secret").unwrap();
        std::os::unix::fs::symlink(&target, notes.path()).unwrap();
        assert!(notes
            .read()
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        assert!(notes.append("x").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret");

        // A linked agent folder (a pulled symlink) is refused too.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("agents/b")).unwrap();
        let linked = AgentNotes::new(dir.path(), "b").unwrap();
        let err = linked.append("x").unwrap_err().to_string();
        assert!(
            err.contains("agents/b is a symbolic link, not a real folder"),
            "{err}"
        );
        assert!(linked.read().is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
