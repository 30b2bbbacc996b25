//! The identifiers mnemo validates once, at the edge, and trusts everywhere else.
//!
//! A [`ConversationId`] comes from users and becomes a directory name, so its rules keep it
//! inside its own folder; a [`MemoryId`] is a UUID that names both a memory's file and its
//! point in the vector index. Parsing either fails with an [`IdError`] that says why.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Longest conversation id accepted, in bytes (all accepted characters are ASCII).
pub const MAX_CONVERSATION_ID_LEN: usize = 128;

/// Why a user-supplied identifier was refused. The name rules (the first four variants) are
/// shared by every id that names a folder — conversations, sessions, agents — so the message
/// names the kind of id: [`IdError::describe`]; `Display` says "conversation id".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    /// The id is the empty string.
    Empty,
    /// The id is longer than `MAX_CONVERSATION_ID_LEN` (128) characters.
    TooLong {
        /// Its length in characters.
        len: usize,
    },
    /// The id starts with `.`, which would make a hidden folder (or `..`, the parent).
    LeadingDot {
        /// The id, quoted and shortened if long, as the message shows it.
        shown: String,
    },
    /// The id holds a character outside `[A-Za-z0-9._-]`.
    BadCharacter {
        /// The id, quoted and shortened if long, as the message shows it.
        shown: String,
        /// The first refused character, described (a path separator or a control character
        /// is named as such).
        bad: String,
    },
    /// A memory id that does not parse as a UUID.
    BadMemoryId {
        /// The input, quoted and shortened if long, as the message shows it.
        shown: String,
    },
}

impl IdError {
    /// The message, naming the id as `what` ("session id", "agent name", ...).
    pub fn describe(&self, what: &str) -> String {
        match self {
            IdError::Empty => format!("{what} is empty"),
            IdError::TooLong { len } => format!(
                "{what} is {len} characters long; at most {MAX_CONVERSATION_ID_LEN} are allowed"
            ),
            IdError::LeadingDot { shown } => format!("{what} {shown} must not start with '.'"),
            IdError::BadCharacter { shown, bad } => format!(
                "{what} {shown} contains {bad}; only letters, digits, '.', '_' and '-' are allowed"
            ),
            IdError::BadMemoryId { shown } => format!("memory id {shown} is not a UUID"),
        }
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("conversation id"))
    }
}

impl std::error::Error for IdError {}

/// A conversation id: `[A-Za-z0-9._-]{1,128}`, not starting with `.`.
///
/// It names a directory under `entries/`, so the rules exclude path separators, `..`, hidden
/// names and control characters: a valid id can never address anything outside its own folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ConversationId(String);

impl ConversationId {
    /// The reserved conversation whose memories every conversation can see.
    pub const GLOBAL: &'static str = "global";
    /// The conversation used when a caller names none.
    pub const DEFAULT: &'static str = "default";

    /// Checks `raw` against the rules above; the error says which rule it breaks.
    pub fn new(raw: &str) -> Result<Self, IdError> {
        // Debug formatting escapes NULs and newlines, so the message stays on one line.
        let shown = || format!("{:?}", truncate_for_display(raw));
        if raw.is_empty() {
            return Err(IdError::Empty);
        }
        if raw.chars().count() > MAX_CONVERSATION_ID_LEN {
            return Err(IdError::TooLong {
                len: raw.chars().count(),
            });
        }
        if let Some(bad) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(IdError::BadCharacter {
                shown: shown(),
                bad: describe_char(bad),
            });
        }
        if raw.starts_with('.') {
            return Err(IdError::LeadingDot { shown: shown() });
        }
        Ok(Self(raw.to_owned()))
    }

    /// The reserved `global` conversation, whose memories every search also sees.
    pub fn global() -> Self {
        Self(Self::GLOBAL.to_owned())
    }

    /// The `default` conversation, for callers that name none.
    pub fn default_conversation() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    /// Whether this is the reserved `global` conversation.
    pub fn is_global(&self) -> bool {
        self.0 == Self::GLOBAL
    }

    /// The id as written: also the name of its folder under `entries/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn truncate_for_display(raw: &str) -> String {
    const SHOWN: usize = 40;
    if raw.chars().count() <= SHOWN {
        raw.to_owned()
    } else {
        let head: String = raw.chars().take(SHOWN).collect();
        format!("{head}...")
    }
}

fn describe_char(c: char) -> String {
    match c {
        '/' | '\\' => format!("a path separator {c:?}"),
        c if c.is_control() => format!("a control character {:?}", c),
        c => format!("{c:?}"),
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ConversationId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl AsRef<str> for ConversationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The conversation used when a caller names none.
impl Default for ConversationId {
    fn default() -> Self {
        Self::default_conversation()
    }
}

impl<'de> Deserialize<'de> for ConversationId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::new(&raw).map_err(serde::de::Error::custom)
    }
}

/// A memory's id: a UUID, also used as the vector index's point id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(Uuid);

/// Namespace for ids derived from names (summaries, files without an id).
const MNEMO_NAMESPACE: Uuid = Uuid::from_u128(0x6d6e_656d_6f00_4000_8000_6d65_6d6f_7279);

impl MemoryId {
    /// A fresh random (version 4) id, for a new fact or turn.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }

    /// A stable id derived from a name: the same name always gives the same id.
    pub fn derived_from(name: &str) -> Self {
        Self(Uuid::new_v5(&MNEMO_NAMESPACE, name.as_bytes()))
    }

    /// The rolling summary's id, fixed per conversation.
    pub fn summary_of(conversation: &ConversationId) -> Self {
        Self::derived_from(&format!("summary:{conversation}"))
    }

    /// Wraps a UUID read from elsewhere (an index point id, say) without checking anything.
    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The UUID itself, as the vector index takes it for a point id.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for MemoryId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s.trim())
            .map(Self)
            .map_err(|_| IdError::BadMemoryId {
                shown: format!("{:?}", truncate_for_display(s)),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        for ok in [
            "default",
            "global",
            "user-42",
            "a.b_c-D",
            "x",
            &"a".repeat(128),
        ] {
            assert!(ConversationId::new(ok).is_ok(), "{ok} should be accepted");
        }
    }

    #[test]
    fn rejects_hostile_ids_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("../x", "path separator"),
            ("a/b", "path separator"),
            ("a\\b", "path separator"),
            (".git", "must not start with '.'"),
            ("..", "must not start with '.'"),
            ("a\0b", "control character"),
            ("a\nb", "control character"),
            ("a b", "' '"),
            ("ü", "'ü'"),
        ];
        for (raw, reason) in cases {
            let err = ConversationId::new(raw).unwrap_err().to_string();
            assert!(
                err.contains(reason),
                "{raw:?}: {err:?} should mention {reason:?}"
            );
            assert!(
                !err.contains('\n'),
                "message must stay on one line: {err:?}"
            );
        }
        let err = ConversationId::new(&"a".repeat(300)).unwrap_err();
        assert_eq!(err, IdError::TooLong { len: 300 });
    }

    #[test]
    fn deserialising_validates() {
        let bad: Result<ConversationId, _> = serde_json::from_str("\"../etc\"");
        assert!(bad.is_err());
        let good: ConversationId = serde_json::from_str("\"work\"").unwrap();
        assert_eq!(good.as_str(), "work");
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let a = ConversationId::new("a").unwrap();
        let b = ConversationId::new("b").unwrap();
        assert_eq!(MemoryId::summary_of(&a), MemoryId::summary_of(&a));
        assert_ne!(MemoryId::summary_of(&a), MemoryId::summary_of(&b));
        assert!("not-a-uuid".parse::<MemoryId>().is_err());
    }
}
