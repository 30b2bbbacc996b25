//! One memory as it lives in a Markdown file: [`MemoryRecord`], its [`Role`] and its free-form
//! [`Metadata`].
//!
//! A record is the front matter plus the body, and nothing about where it is stored or how it
//! is indexed; the store crate renders and parses the file, the index keys it by its id.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::ConversationId;
use crate::ids::MemoryId;

/// Free-form, user-owned key/value data carried by a memory (front matter `metadata:`).
pub type Metadata = serde_json::Map<String, serde_json::Value>;

/// The deepest a memory's metadata may nest (objects and arrays): deeper values cannot be
/// indexed (the index's payload reader recurses) and no tag or label needs them.
pub const MAX_METADATA_DEPTH: usize = 16;
/// The most a memory's metadata may take as JSON: it is stored in every index point and
/// returned with every hit.
pub const MAX_METADATA_BYTES: usize = 16 << 10;
/// The longest text one memory may hold (64 KiB): a fact is a sentence, and a chat turn
/// longer than this is stored cut ([`stored_turn`]).
pub const MAX_MEMORY_BYTES: usize = 64 << 10;

/// A chat turn as stored: whole when it fits in a memory ([`MAX_MEMORY_BYTES`]), else its
/// beginning with a note of what was cut. A 24 MiB answer stored whole would be embedded,
/// indexed and injected again at that size; the session log keeps every byte.
pub fn stored_turn(text: String) -> String {
    if text.len() <= MAX_MEMORY_BYTES {
        return text;
    }
    let note = format!(
        "\n\n[cut by mnemo: the message was {} bytes; the first {} are kept]",
        text.len(),
        MAX_MEMORY_BYTES - 200
    );
    let mut cut = MAX_MEMORY_BYTES - 200;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{note}", &text[..cut])
}

/// Why metadata was refused: too deep or too large, as a message for the caller.
pub fn check_metadata(metadata: &Metadata) -> Result<(), String> {
    fn depth(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    // The map itself is one level.
    let deepest = 1 + metadata.values().map(depth).max().unwrap_or(0);
    if deepest > MAX_METADATA_DEPTH {
        return Err(format!(
            "metadata nests {deepest} levels deep; at most {MAX_METADATA_DEPTH} are kept"
        ));
    }
    let size = serde_json::to_string(metadata).map_or(usize::MAX, |s| s.len());
    if size > MAX_METADATA_BYTES {
        return Err(format!(
            "metadata takes {size} bytes as JSON; at most {MAX_METADATA_BYTES} are kept"
        ));
    }
    Ok(())
}

/// What kind of memory a record is. It also decides the record's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An atomic fact distilled from what the user said.
    Memory,
    /// A raw user message.
    User,
    /// A raw assistant message.
    Assistant,
    /// The conversation's rolling summary.
    Summary,
}

impl Role {
    /// Every role: facts, user turns, assistant turns, the summary.
    pub const ALL: [Role; 4] = [Role::Memory, Role::User, Role::Assistant, Role::Summary];

    /// The role's lower-case name, as front matter's `role:` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Memory => "memory",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Summary => "summary",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is none of `memory`, `user`, `assistant` or `summary`; holds the text as
/// given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}; expected memory, user, assistant or summary")]
pub struct RoleParseError(pub String);

impl FromStr for Role {
    type Err = RoleParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| RoleParseError(s.to_owned()))
    }
}

/// One memory: every front matter field of its file, plus the body as `content`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRecord {
    /// The memory's id; also its point id in the vector index and part of its file name.
    pub id: MemoryId,
    /// The conversation it belongs to, which is also its folder under `entries/`.
    pub conversation_id: ConversationId,
    /// What kind of memory it is: a fact, a raw turn or the rolling summary.
    pub role: Role,
    /// When it was written, to the millisecond (what files keep); recency is measured from it.
    pub created_at: DateTime<Utc>,
    /// The text itself: the file's body, without the front matter.
    pub content: String,
    /// On summaries, which kind (the engine writes `rolling`); `None` on every other role.
    pub summary_kind: Option<String>,
    /// On tombstones of updated facts: the id of the fact that replaced this one.
    pub replaced_by: Option<MemoryId>,
    /// The turn a fact was extracted from.
    pub source_id: Option<MemoryId>,
    /// Set on tombstones: when the engine soft-deleted the memory.
    pub deleted_at: Option<DateTime<Utc>>,
    /// On a live fact: a later fact about the same thing of the same person that says
    /// something else. The later one holds until a person resolves the pair (keeps one of
    /// them, or says both hold).
    pub conflicts_with: Option<MemoryId>,
    /// On a live fact: later facts a person said hold beside this one, so the pair is never
    /// taken for a conflict again.
    pub compatible_with: Vec<MemoryId>,
    /// On a tombstone: why the memory was retired, where that was said (a resolved conflict).
    pub reason: Option<String>,
    /// The user's own fields, searchable with metadata filters; unknown front matter fields of
    /// a hand-written file are kept here too.
    pub metadata: Metadata,
}

impl MemoryRecord {
    /// A new record with a fresh id, created now.
    pub fn new(conversation_id: ConversationId, role: Role, content: impl Into<String>) -> Self {
        let id = match role {
            Role::Summary => MemoryId::summary_of(&conversation_id),
            _ => MemoryId::random(),
        };
        Self {
            id,
            conversation_id,
            role,
            // Files keep milliseconds; a record must equal itself read back.
            created_at: Utc::now().trunc_subsecs(3),
            content: content.into(),
            summary_kind: None,
            replaced_by: None,
            source_id: None,
            deleted_at: None,
            conflicts_with: None,
            compatible_with: Vec::new(),
            reason: None,
            metadata: Metadata::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_turns_are_cut_to_a_memory_s_size() {
        assert_eq!(stored_turn("short".into()), "short");
        let long = "é".repeat(MAX_MEMORY_BYTES);
        let stored = stored_turn(long);
        assert!(stored.len() <= MAX_MEMORY_BYTES, "{}", stored.len());
        assert!(stored.ends_with(&format!(
            "the message was {} bytes; the first 65336 are kept]",
            2 * MAX_MEMORY_BYTES
        )));
    }

    #[test]
    fn roles_parse_case_insensitively() {
        assert_eq!("Memory".parse::<Role>().unwrap(), Role::Memory);
        assert_eq!(" summary ".parse::<Role>().unwrap(), Role::Summary);
        assert!("system".parse::<Role>().is_err());
    }

    #[test]
    fn summaries_get_the_conversation_s_fixed_id() {
        let conv = ConversationId::new("c1").unwrap();
        let a = MemoryRecord::new(conv.clone(), Role::Summary, "x");
        let b = MemoryRecord::new(conv, Role::Summary, "y");
        assert_eq!(a.id, b.id);
    }

    #[test]
    fn metadata_is_bounded_in_depth_and_size() {
        let nest = |levels: usize| {
            let mut value = serde_json::json!("leaf");
            for _ in 0..levels {
                value = serde_json::json!({ "k": value });
            }
            Metadata::from_iter([("top".to_owned(), value)])
        };
        assert!(check_metadata(&nest(MAX_METADATA_DEPTH - 1)).is_ok());
        let err = check_metadata(&nest(MAX_METADATA_DEPTH)).unwrap_err();
        assert!(err.contains("17 levels deep"), "{err}");
        let big = Metadata::from_iter([("k".to_owned(), "x".repeat(MAX_METADATA_BYTES).into())]);
        assert!(check_metadata(&big).unwrap_err().contains("bytes as JSON"));
        assert!(check_metadata(&Metadata::new()).is_ok());
    }
}
