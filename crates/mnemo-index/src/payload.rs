//! What a point carries besides its vectors: [`PointPayload`], one serde type for every
//! backend and every reader.

use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Metadata, Role};
use serde::{Deserialize, Serialize};

/// A memory's front matter, content and file, as the index holds them. Queries filter on its
/// fields by the names in [`PointPayload::FIELD_CONVERSATION`] and its siblings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointPayload {
    /// The conversation the memory belongs to.
    pub conversation_id: ConversationId,
    /// What kind of memory it is.
    pub role: Role,
    /// The memory's text.
    pub content: String,
    /// When it was said or learned.
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    /// `created_at` as Unix seconds, for numeric range filters.
    pub created_ts: f64,
    /// The memory's file, relative to the store.
    pub path: String,
    /// The turn a fact was extracted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<MemoryId>,
    /// On a fact: the later fact about the same thing that holds over it, until a person
    /// resolves the pair (front matter `conflicts_with`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts_with: Option<MemoryId>,
    /// On a fact: later facts a person said hold beside it (front matter `compatible_with`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compatible_with: Vec<MemoryId>,
    /// The memory's free-form metadata.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

impl PointPayload {
    /// Payload field of the conversation (keyword-indexed).
    pub const FIELD_CONVERSATION: &'static str = "conversation_id";
    /// Payload field of the role (keyword-indexed).
    pub const FIELD_ROLE: &'static str = "role";
    /// Payload field of the creation time (RFC 3339).
    pub const FIELD_CREATED_AT: &'static str = "created_at";
    /// Payload field of the creation time as Unix seconds.
    pub const FIELD_CREATED_TS: &'static str = "created_ts";
    /// Payload field holding the metadata object; its keys are addressed as `metadata.<key>`.
    pub const FIELD_METADATA: &'static str = "metadata";
    /// Fields with keyword indexes: every query filters on them.
    pub const KEYWORD_FIELDS: [&'static str; 2] = [Self::FIELD_CONVERSATION, Self::FIELD_ROLE];

    /// The payload of `record`, whose file is `relative_path` (relative to the store).
    pub fn of(record: &MemoryRecord, relative_path: &str) -> Self {
        Self {
            conversation_id: record.conversation_id.clone(),
            role: record.role,
            content: record.content.clone(),
            created_at: record.created_at,
            created_ts: record.created_at.timestamp_millis() as f64 / 1000.0,
            path: relative_path.to_owned(),
            source_id: record.source_id,
            conflicts_with: record.conflicts_with,
            compatible_with: record.compatible_with.clone(),
            metadata: record.metadata.clone(),
        }
    }

    /// Whether the memory is a chat turn (user or assistant).
    pub fn is_turn(&self) -> bool {
        matches!(self.role, Role::User | Role::Assistant)
    }

    /// A metadata value, if the memory has it.
    pub fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key)?.as_str()
    }
}

/// RFC 3339 as chrono's `to_rfc3339` writes it: the format points were first written in, so
/// an index built before this type existed reads the same.
mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(time: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&time.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let raw = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&raw)
            .map(|t| t.to_utc())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_shape_is_stable() {
        let mut record = MemoryRecord::new(
            ConversationId::new("trip").unwrap(),
            Role::Memory,
            "Anne is my wife.",
        );
        record.created_at = DateTime::parse_from_rfc3339("2026-03-02T18:40:05.250Z")
            .unwrap()
            .to_utc();
        record.metadata.insert("topic".into(), "family".into());
        let payload = PointPayload::of(&record, "entries/trip/facts/x.md");
        let json = serde_json::to_value(&payload).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "conversation_id": "trip",
                "role": "memory",
                "content": "Anne is my wife.",
                "created_at": "2026-03-02T18:40:05.250+00:00",
                "created_ts": 1772476805.25,
                "path": "entries/trip/facts/x.md",
                "metadata": {"topic": "family"},
            })
        );
        let back: PointPayload = serde_json::from_value(json).unwrap();
        assert_eq!(back, payload);
    }

    #[test]
    fn a_payload_with_a_hostile_conversation_is_refused() {
        let json = serde_json::json!({
            "conversation_id": "../etc", "role": "memory", "content": "x",
            "created_at": "2026-03-02T18:40:05+00:00", "created_ts": 0.0, "path": "p",
        });
        assert!(serde_json::from_value::<PointPayload>(json).is_err());
    }
}
