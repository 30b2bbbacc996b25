//! A conversation kept in memory by a Rust agent: [`ConversationBuffer`].
//!
//! Entries (system, user, assistant with tool calls, tool results) with their own metadata,
//! the newest `n` of them ([`ConversationBuffer::recent`]), a cap on how many are kept
//! ([`ConversationBuffer::with_max_entries`]: the oldest go first, system entries stay, and
//! no tool result outlives its call), a summary of what was dropped or compressed, metadata
//! of the whole buffer, and JSON save and load that carries a format version
//! ([`FORMAT_VERSION`]; a newer file is a clear error). [`ConversationBuffer::to_messages`]
//! gives the OpenAI messages to send, the summary after the system entries.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The version of the JSON a buffer is saved as.
pub const FORMAT_VERSION: u32 = 1;

/// Who an entry is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryRole {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call an assistant entry makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which its result names.
    pub id: String,
    /// The function called.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// One entry of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Who it is from.
    pub role: EntryRole,
    /// Its text.
    pub content: String,
    /// The tool calls of an assistant entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool entry answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The author's name (OpenAI's `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The caller's own data about the entry.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Entry {
    /// An entry of `role` saying `content`.
    pub fn new(role: EntryRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            metadata: Map::new(),
        }
    }

    /// The entry as an OpenAI chat message.
    pub fn to_message(&self) -> Value {
        let role = match self.role {
            EntryRole::System => "system",
            EntryRole::User => "user",
            EntryRole::Assistant => "assistant",
            EntryRole::Tool => "tool",
        };
        let mut message = json!({"role": role, "content": self.content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
            if self.content.is_empty() {
                message["content"] = Value::Null;
            }
        }
        if let Some(id) = &self.tool_call_id {
            message["tool_call_id"] = Value::from(id.as_str());
        }
        if let Some(name) = &self.name {
            message["name"] = Value::from(name.as_str());
        }
        message
    }
}

/// Why a saved buffer cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The JSON is not a buffer.
    #[error("not a saved conversation buffer: {0}")]
    Format(String),
    /// A newer mnemo wrote it.
    #[error("the buffer was saved in format {found}, newer than this mnemo reads (up to {FORMAT_VERSION}); upgrade mnemo to load it")]
    Newer {
        /// The file's format version.
        found: u32,
    },
}

/// A conversation in memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationBuffer {
    entries: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_entries: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summary: Option<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    metadata: Map<String, Value>,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    format: u32,
    #[serde(flatten)]
    buffer: ConversationBuffer,
}

impl ConversationBuffer {
    /// An empty buffer keeping every entry.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty buffer keeping at most `max` entries (besides system entries).
    pub fn with_max_entries(max: usize) -> Self {
        Self {
            max_entries: Some(max),
            ..Self::default()
        }
    }

    /// Adds an entry, then drops the oldest beyond the cap.
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
        self.enforce_cap();
    }

    /// Adds a system entry.
    pub fn system(&mut self, text: impl Into<String>) {
        self.push(Entry::new(EntryRole::System, text));
    }

    /// Adds a user entry.
    pub fn user(&mut self, text: impl Into<String>) {
        self.push(Entry::new(EntryRole::User, text));
    }

    /// Adds an assistant entry.
    pub fn assistant(&mut self, text: impl Into<String>) {
        self.push(Entry::new(EntryRole::Assistant, text));
    }

    /// Adds an assistant entry making tool calls.
    pub fn tool_calls(&mut self, calls: Vec<ToolCall>) {
        self.push(Entry {
            tool_calls: calls,
            ..Entry::new(EntryRole::Assistant, "")
        });
    }

    /// Adds the result of tool call `call_id`.
    pub fn tool_result(&mut self, call_id: impl Into<String>, text: impl Into<String>) {
        self.push(Entry {
            tool_call_id: Some(call_id.into()),
            ..Entry::new(EntryRole::Tool, text)
        });
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The newest `n` entries.
    pub fn recent(&self, n: usize) -> &[Entry] {
        &self.entries[self.entries.len().saturating_sub(n)..]
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The summary of what is no longer in the entries.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// Sets the summary.
    pub fn set_summary(&mut self, summary: Option<String>) {
        self.summary = summary;
    }

    /// The buffer's own metadata.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// The buffer's own metadata, to change.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.metadata
    }

    /// Replaces the entries (a compressor's result).
    pub fn replace_entries(&mut self, entries: Vec<Entry>) {
        self.entries = entries;
        self.enforce_cap();
    }

    /// The OpenAI messages to send: system entries, the summary as a user message, the rest.
    pub fn to_messages(&self) -> Vec<Value> {
        let system = self
            .entries
            .iter()
            .take_while(|e| e.role == EntryRole::System)
            .count();
        let mut messages: Vec<Value> = self.entries[..system]
            .iter()
            .map(Entry::to_message)
            .collect();
        if let Some(summary) = &self.summary {
            messages.push(json!({"role": "user", "content": format!("[Summary of the earlier conversation]\n{summary}")}));
        }
        messages.extend(self.entries[system..].iter().map(Entry::to_message));
        messages
    }

    /// The buffer as JSON, with its format version.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(Saved {
            format: FORMAT_VERSION,
            buffer: self.clone(),
        })
        .unwrap_or(Value::Null)
    }

    /// A buffer from JSON saved by [`ConversationBuffer::to_json`].
    pub fn from_json(value: Value) -> Result<Self, BufferError> {
        let format = value["format"]
            .as_u64()
            .ok_or_else(|| BufferError::Format("no format version".into()))?;
        if format > u64::from(FORMAT_VERSION) {
            return Err(BufferError::Newer {
                found: u32::try_from(format).unwrap_or(u32::MAX),
            });
        }
        let saved: Saved =
            serde_json::from_value(value).map_err(|e| BufferError::Format(e.to_string()))?;
        Ok(saved.buffer)
    }

    /// Saves the buffer to `path` (written whole, then renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), BufferError> {
        let io = |source| BufferError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_vec_pretty(&self.to_json()).map_err(|e| io(e.into()))?;
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Loads a buffer saved at `path`.
    pub fn load(path: &Path) -> Result<Self, BufferError> {
        let bytes = mnemo_fs::read_regular(path, 256 << 20).map_err(|refusal| BufferError::Io {
            path: path.display().to_string(),
            source: match refusal {
                mnemo_fs::Refusal::Io(e) => e,
                other => std::io::Error::other(other.to_string()),
            },
        })?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| BufferError::Format(e.to_string()))?;
        Self::from_json(value)
    }

    /// Drops the oldest non-system entries beyond the cap, and any tool result whose call
    /// went with them.
    fn enforce_cap(&mut self) {
        let Some(max) = self.max_entries else { return };
        let mut others = self
            .entries
            .iter()
            .filter(|e| e.role != EntryRole::System)
            .count();
        let mut i = 0;
        while others > max && i < self.entries.len() {
            if self.entries[i].role == EntryRole::System {
                i += 1;
                continue;
            }
            let dropped = self.entries.remove(i);
            others -= 1;
            for call in dropped.tool_calls {
                if let Some(at) = self
                    .entries
                    .iter()
                    .position(|e| e.tool_call_id.as_deref() == Some(call.id.as_str()))
                {
                    self.entries.remove(at);
                    others -= 1;
                }
            }
        }
        // A result at the front whose call is gone answers nothing.
        while let Some(first) = self
            .entries
            .iter()
            .position(|e| e.role != EntryRole::System)
        {
            if self.entries[first].role == EntryRole::Tool {
                self.entries.remove(first);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_drops_the_oldest_but_keeps_system_entries_and_call_pairs() {
        let mut buffer = ConversationBuffer::with_max_entries(3);
        buffer.system("be brief");
        buffer.user("one");
        buffer.tool_calls(vec![ToolCall {
            id: "c".into(),
            name: "ls".into(),
            arguments: "{}".into(),
        }]);
        buffer.tool_result("c", "files");
        buffer.assistant("done");
        buffer.user("two");
        let roles: Vec<EntryRole> = buffer.entries().iter().map(|e| e.role).collect();
        assert_eq!(
            roles,
            [EntryRole::System, EntryRole::Assistant, EntryRole::User]
        );
        assert_eq!(buffer.recent(1)[0].content, "two");
        assert_eq!(buffer.recent(10).len(), 3);
    }

    #[test]
    fn it_saves_and_loads_with_a_version_and_refuses_newer_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("buffer.json");
        let mut buffer = ConversationBuffer::new();
        buffer.system("s");
        buffer.user("hello");
        buffer.set_summary(Some("earlier".into()));
        buffer.metadata_mut().insert("agent".into(), "coder".into());
        buffer.save(&path).unwrap();
        let loaded = ConversationBuffer::load(&path).unwrap();
        assert_eq!(loaded, buffer);
        let mut newer = buffer.to_json();
        newer["format"] = json!(FORMAT_VERSION + 1);
        let err = ConversationBuffer::from_json(newer)
            .unwrap_err()
            .to_string();
        assert!(err.contains("newer than this mnemo reads"), "{err}");
        let messages = loaded.to_messages();
        assert_eq!(
            messages[1]["content"],
            "[Summary of the earlier conversation]\nearlier"
        );
        assert_eq!(messages[2]["content"], "hello");
    }
}
