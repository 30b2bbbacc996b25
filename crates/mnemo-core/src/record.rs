//! One memory as it lives in a Markdown file: [`MemoryRecord`], its [`Role`] and its free-form
//! [`Metadata`].
//!
//! A record is the front matter plus the body, and nothing about where it is stored or how it
//! is indexed; the store crate renders and parses the file, the index keys it by its id.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use crate::{ConversationId, MemoryId};

/// Free-form, user-owned key/value data carried by a memory (front matter `metadata:`).
pub type Metadata = serde_json::Map<String, serde_json::Value>;

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
            metadata: Metadata::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
