//! Where everything lives under `<memory_path>`: the one place that names the store's files.
//!
//! ```text
//! entries/<conversation>/facts/<ts>__<uuid>.md
//! entries/<conversation>/turns/user/<ts>__<uuid>.md
//! entries/<conversation>/turns/assistant/<ts>__<uuid>.md
//! entries/<conversation>/summaries/summary.md
//! entries/<conversation>/deleted/{facts,turns/user,turns/assistant,summaries}/...
//! index/                 the embedded vector index (rebuildable)
//! .mnemo.lock            held by the process that owns the store (and index/.lock, its old
//!                        place, so an older mnemo cannot open the store beside it)
//! .mnemo.serve           the base URL of the `mnemo serve` holding the store, while it runs
//! pending/               write-path passes queued and not yet done
//! memory_index.json      what the index holds, per file (rebuildable)
//! vocabulary.bin         the vocabulary's word vectors, kept between runs (rebuildable)
//! conversations/<conversation>/strategy.yaml   its context strategy (hand-editable)
//! conversations/<conversation>/summaries/      summaries context governance keeps (rebuildable)
//! conversations/<conversation>/tool_outputs/   tool outputs it offloaded
//! sessions/<session>/                           chat sessions' logs (`mnemo-session`)
//! agents/<agent>/MEMORY.md                      an agent's own notes (`mnemo-session`)
//! ```
//!
//! `entries/`, the strategies and agents' notes are the user's and versioned; everything else
//! is rebuilt, transient or an append-only record and stays out of git ([`unversioned`]).

use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, Role};

/// The folder holding every memory file.
pub const ENTRIES_DIR: &str = "entries";
/// The folder, inside a conversation's, holding its tombstones (soft-deleted files).
pub const DELETED_DIR: &str = "deleted";
/// The file name of a conversation's rolling summary.
pub const SUMMARY_FILE: &str = "summary.md";
/// The folder of the embedded vector index.
pub const INDEX_DIR: &str = "index";
/// The file recording what the index holds, per memory file.
pub const SNAPSHOT_FILE: &str = "memory_index.json";
/// The vocabulary's word vectors, kept between runs (rebuildable).
pub const VOCABULARY_FILE: &str = "vocabulary.bin";
/// The folder of per-conversation settings and context state.
pub const CONVERSATIONS_DIR: &str = "conversations";
/// The file name of a conversation's stored context strategy.
pub const STRATEGY_FILE: &str = "strategy.yaml";
/// The folder, inside a conversation's settings, of the summaries context governance keeps.
pub const CONTEXT_SUMMARIES_DIR: &str = "summaries";
/// The folder, inside a conversation's settings, of the tool outputs governance offloaded.
pub const TOOL_OUTPUTS_DIR: &str = "tool_outputs";
/// The file, inside a conversation's settings or a session's folder, of the tokens and cost
/// its upstream calls added up to (rewritten on every answer, so not versioned).
pub const USAGE_FILE: &str = "usage.json";
/// The folder of chat sessions' logs (append-only records, not versioned).
pub const SESSIONS_DIR: &str = "sessions";
/// The advisory lock file, at the store's root, that one process at a time holds.
pub const LOCK_FILE: &str = ".mnemo.lock";
/// Where a running `mnemo serve` writes its base URL (and removes it on exit), so that
/// `mnemo mcp` can talk to it instead of opening the held store.
pub const SERVE_FILE: &str = ".mnemo.serve";
/// The store's id (a UUID, made on first use): what keeps its points apart from other stores'
/// in a shared index server's collection. Not versioned, so a copy of the store (a clone on
/// another machine) is a store of its own there.
pub const STORE_ID_FILE: &str = ".mnemo.store-id";
/// The folder of write-path passes queued and not yet done (journaled, resumed on start).
pub const PENDING_DIR: &str = "pending";
const TIMESTAMP_FORMAT: &str = "%Y%m%dT%H%M%S%3fZ";

/// The kind of file, which is also its folder below the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// An atomic fact (`facts/`).
    Fact,
    /// A raw user message (`turns/user/`).
    UserTurn,
    /// A raw assistant message (`turns/assistant/`).
    AssistantTurn,
    /// The conversation's rolling summary (`summaries/summary.md`).
    Summary,
}

impl MemoryKind {
    /// Every kind, in the order scans list their folders.
    pub const ALL: [MemoryKind; 4] = [
        MemoryKind::Fact,
        MemoryKind::UserTurn,
        MemoryKind::AssistantTurn,
        MemoryKind::Summary,
    ];

    /// The kind of file a record of `role` is written as.
    pub fn of_role(role: Role) -> Self {
        match role {
            Role::Memory => MemoryKind::Fact,
            Role::User => MemoryKind::UserTurn,
            Role::Assistant => MemoryKind::AssistantTurn,
            Role::Summary => MemoryKind::Summary,
        }
    }

    /// The role of the records this kind of file holds; the folder, not the front matter,
    /// decides it.
    pub fn role(self) -> Role {
        match self {
            MemoryKind::Fact => Role::Memory,
            MemoryKind::UserTurn => Role::User,
            MemoryKind::AssistantTurn => Role::Assistant,
            MemoryKind::Summary => Role::Summary,
        }
    }

    /// The folder, relative to the conversation (or to its `deleted/`).
    pub fn folder(self) -> &'static Path {
        Path::new(match self {
            MemoryKind::Fact => "facts",
            MemoryKind::UserTurn => "turns/user",
            MemoryKind::AssistantTurn => "turns/assistant",
            MemoryKind::Summary => "summaries",
        })
    }
}

/// What a path inside the store is, read off its components alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The conversation, from the folder under `entries/`.
    pub conversation: ConversationId,
    /// The kind of memory, from the folder below the conversation's.
    pub kind: MemoryKind,
    /// Whether the file lies under the conversation's `deleted/`.
    pub tombstone: bool,
    /// The file's name (`<ts>__<uuid>.md` when mnemo wrote it; people may choose any `.md` name).
    pub file_name: String,
}

impl Location {
    /// Parses a path relative to `<memory_path>`; `None` for anything that is not a memory
    /// file's place (other folders, hidden or temporary names, non-Markdown files).
    pub fn parse(relative: &Path) -> Option<Location> {
        if relative.is_absolute() {
            return None;
        }
        let parts = mnemo_fs::store_relative(Path::new(""), relative)?;
        let [entries, conversation, rest @ ..] = parts.as_slice() else {
            return None;
        };
        if *entries != ENTRIES_DIR {
            return None;
        }
        let conversation = ConversationId::new(conversation).ok()?;
        let (tombstone, rest) = match rest {
            [DELETED_DIR, rest @ ..] => (true, rest),
            rest => (false, rest),
        };
        let (kind, file_name) = match rest {
            ["facts", f] => (MemoryKind::Fact, f),
            ["turns", "user", f] => (MemoryKind::UserTurn, f),
            ["turns", "assistant", f] => (MemoryKind::AssistantTurn, f),
            ["summaries", f] => (MemoryKind::Summary, f),
            _ => return None,
        };
        if crate::atomic::is_temporary_name(file_name) || !file_name.ends_with(".md") {
            return None;
        }
        Some(Location {
            conversation,
            kind,
            tombstone,
            file_name: (*file_name).to_owned(),
        })
    }

    /// The id and creation time encoded in a `<ts>__<uuid>.md` name, where present.
    pub fn name_parts(&self) -> (Option<MemoryId>, Option<DateTime<Utc>>) {
        let stem = self.file_name.trim_end_matches(".md");
        let (ts, id) = match stem.split_once("__") {
            Some((ts, id)) => (Some(ts), id),
            None => (None, stem),
        };
        let id = id.parse::<MemoryId>().ok();
        let ts = ts
            .and_then(|ts| NaiveDateTime::parse_from_str(ts, TIMESTAMP_FORMAT).ok())
            .map(|naive| naive.and_utc());
        (id, ts)
    }
}

/// What version control must leave out, as `.gitignore` lines: the rebuildable index and
/// snapshot, context state, session logs (fsynced per message; a commit per message would
/// bury the memories' history), the lock, and temporary files (mnemo's and editors').
pub fn unversioned() -> Vec<String> {
    vec![
        format!("/{INDEX_DIR}/"),
        format!("/{SNAPSHOT_FILE}"),
        format!("/{VOCABULARY_FILE}"),
        format!("/{CONVERSATIONS_DIR}/*/{CONTEXT_SUMMARIES_DIR}/"),
        format!("/{CONVERSATIONS_DIR}/*/{TOOL_OUTPUTS_DIR}/"),
        format!("/{CONVERSATIONS_DIR}/*/{USAGE_FILE}"),
        format!("/{SESSIONS_DIR}/"),
        format!("/{PENDING_DIR}/"),
        format!("{}*", crate::atomic::TEMP_PREFIX),
        "*.swp".to_owned(),
        "*~".to_owned(),
        "*.tmp".to_owned(),
        format!("/{LOCK_FILE}"),
        format!("/{SERVE_FILE}"),
        format!("/{STORE_ID_FILE}"),
    ]
}

/// Whether `path` (relative to the store, `/`-separated, as git names it) is a file of the
/// memory `id`, live or tombstoned: files are named after their id (`<ts>__<id>.md`); a
/// conversation's live `summary.md` carries the id summaries derive from their conversation.
pub fn is_file_of(path: &str, id: MemoryId) -> bool {
    if path.contains(&id.to_string()) {
        return true;
    }
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [ENTRIES_DIR, conversation, "summaries", SUMMARY_FILE] => {
            ConversationId::new(conversation).is_ok_and(|c| MemoryId::summary_of(&c) == id)
        }
        _ => false,
    }
}

/// The folder of one conversation's files.
pub fn conversation_dir(root: &Path, conversation: &ConversationId) -> PathBuf {
    root.join(ENTRIES_DIR).join(conversation.as_str())
}

/// The folder of one conversation's settings and context state.
pub fn conversation_settings_dir(root: &Path, conversation: &ConversationId) -> PathBuf {
    root.join(CONVERSATIONS_DIR).join(conversation.as_str())
}

/// The file name a new memory gets: sortable by time, unique by id.
pub fn file_name(kind: MemoryKind, id: MemoryId, created_at: DateTime<Utc>) -> String {
    match kind {
        MemoryKind::Summary => SUMMARY_FILE.to_owned(),
        _ => format!("{}__{id}.md", created_at.format(TIMESTAMP_FORMAT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_tombstones() {
        let loc = Location::parse(Path::new("entries/c1/turns/user/x.md")).unwrap();
        assert_eq!(loc.kind, MemoryKind::UserTurn);
        assert!(!loc.tombstone);
        let loc = Location::parse(Path::new("entries/c1/deleted/facts/x.md")).unwrap();
        assert_eq!((loc.kind, loc.tombstone), (MemoryKind::Fact, true));
        let loc = Location::parse(Path::new("entries/c1/summaries/summary.md")).unwrap();
        assert_eq!(loc.kind, MemoryKind::Summary);
    }

    #[test]
    fn ignores_everything_else() {
        for p in [
            "entries/c1/facts/.x.md.swp",
            "entries/c1/facts/x.txt",
            "entries/c1/notes/x.md",
            "entries/.git/facts/x.md",
            "entries/c1/facts/sub/x.md",
            "index/facts/x.md",
            "entries/../facts/x.md",
        ] {
            assert_eq!(Location::parse(Path::new(p)), None, "{p}");
        }
    }

    #[test]
    fn file_names_round_trip_id_and_time() {
        let id = MemoryId::random();
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z")
            .unwrap()
            .to_utc();
        let name = file_name(MemoryKind::Fact, id, at);
        let loc = Location::parse(&Path::new("entries/c/facts").join(&name)).unwrap();
        assert_eq!(loc.name_parts(), (Some(id), Some(at)));
    }
}
