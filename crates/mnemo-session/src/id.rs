//! Session ids: the conversation-id rules, since they name folders too.

use std::fmt;

use mnemo_core::ConversationId;
use serde::Serialize;

/// A session id: `[A-Za-z0-9._-]{1,128}`, not starting with `.` (the conversation-id rules),
/// so it can never address anything outside its own folder under `sessions/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// Checks `raw`; the message says which rule it breaks.
    pub fn new(raw: &str) -> Result<Self, String> {
        ConversationId::new(raw)
            .map(|id| Self(id.as_str().to_owned()))
            .map_err(|e| e.describe("session id"))
    }

    /// A new id, unique and sortable by creation time: `s-<YYYYmmddTHHMMSS>-<8 hex>`.
    pub fn generate() -> Self {
        let now = chrono::Utc::now().format("%Y%m%dT%H%M%S");
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self(format!("s-{now}-{}", &random[..8]))
    }

    /// The id as written: also its folder's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_conversation_rules() {
        assert!(SessionId::new("work-2026.1_a").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b"] {
            let err = SessionId::new(bad).unwrap_err();
            assert!(err.contains("session id"), "{bad}: {err}");
        }
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert_ne!(a, b);
        assert!(SessionId::new(a.as_str()).is_ok());
    }
}
