//! A conversation kept in memory by a Rust agent: [`ConversationBuffer`].
//!
//! Entries (system, user, assistant with tool calls, tool results) with their own metadata,
//! when they were added and for which agent, the newest `n` of them
//! ([`ConversationBuffer::recent`]), a cap on how many are kept
//! ([`ConversationBuffer::with_max_entries`]: the oldest go first, system entries stay, and
//! no tool result outlives its call), a summary of what was dropped or compressed, metadata
//! of the whole buffer, and JSON save and load that carries a format version
//! ([`FORMAT_VERSION`]; a newer file is a clear error). A file written by the Python
//! "Midori" context manager (`MemoryStore`) loads too, so an agent moving over keeps its
//! history, and is saved back in Midori's shape ([`SaveFormat`]) unless told otherwise, so
//! that Midori can still read it. [`ConversationBuffer::to_messages`] gives the OpenAI
//! messages to send, the summary after the system entries.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The version of the JSON a buffer is saved as. Version 2 added timestamps, agent ids,
/// results recorded on tool calls and the buffer's own dates; version 1 files still load.
pub const FORMAT_VERSION: u32 = 2;

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
    /// The tool's output recorded on the call itself, as Midori keeps it, for a call no tool
    /// entry answers. [`ConversationBuffer::to_messages`] sends it as the call's tool message,
    /// since an upstream refuses a call left unanswered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl ToolCall {
    /// A call of `name` with `arguments` (JSON text), its result not recorded on it.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            result: None,
        }
    }
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
    /// The author's name (OpenAI's `name`); on a tool entry, the tool's name. A tool's name
    /// is kept for the record only: OpenAI's tool message has no `name`, so it is not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was added (RFC 3339, UTC). The buffer's own methods set it; an entry pushed
    /// as it is keeps what it has, so a replayed history keeps its times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// The agent whose conversation it is part of, where several agents share one store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The caller's own data about the entry.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Entry {
    /// An entry of `role` saying `content`, with no timestamp or agent.
    pub fn new(role: EntryRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            timestamp: None,
            agent_id: None,
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
        if let (Some(name), false) = (&self.name, self.role == EntryRole::Tool) {
            message["name"] = Value::from(name.as_str());
        }
        message
    }
}

/// The OpenAI messages of `entries`, with a tool message after each call that carries its
/// result on itself and that no entry among them answers.
pub(crate) fn messages_of(entries: &[Entry]) -> Vec<Value> {
    let answered: HashSet<&str> = entries
        .iter()
        .filter_map(|e| e.tool_call_id.as_deref())
        .collect();
    let mut messages = Vec::with_capacity(entries.len());
    for entry in entries {
        messages.push(entry.to_message());
        let recorded = entry
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(c.id.as_str()));
        for call in recorded {
            if let Some(result) = &call.result {
                messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": result}));
            }
        }
    }
    messages
}

/// Why a saved buffer cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The file could not be read or written (a link or special file in its place included).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The JSON is not a buffer, neither mnemo's nor Midori's.
    #[error("not a saved conversation buffer: {0}")]
    Format(String),
    /// The file at `path` could not be loaded as a buffer (the error says why).
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: String,
        /// Why it could not be loaded.
        source: Box<BufferError>,
    },
    /// A newer mnemo, or a newer Midori, wrote it.
    #[error("the buffer was saved as {found}, newer than this mnemo reads (up to {supported}); upgrade mnemo to load it")]
    Newer {
        /// What the file says it is (`mnemo format 3`, `Midori version 2.0.0`).
        found: String,
        /// The newest of its kind this mnemo reads.
        supported: String,
    },
}

/// The shape [`ConversationBuffer::save`] writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SaveFormat {
    /// mnemo's own JSON, with [`FORMAT_VERSION`].
    #[default]
    Mnemo,
    /// Midori's memory file (OpenAI-shaped `messages`), under the `version` it was read with:
    /// what a buffer loaded from Midori saves as, so that Midori reads it back.
    Midori {
        /// The Midori version written (`1.0.0`).
        version: String,
    },
}

/// A conversation in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationBuffer {
    entries: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_entries: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summary: Option<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    metadata: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_at: Option<String>,
    #[serde(skip)]
    save_format: SaveFormat,
}

#[derive(Serialize)]
struct Saved {
    format: u32,
    #[serde(flatten)]
    buffer: ConversationBuffer,
}

impl Default for ConversationBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl ConversationBuffer {
    /// An empty buffer keeping every entry, created now.
    pub fn new() -> Self {
        let now = now_rfc3339();
        Self {
            entries: Vec::new(),
            max_entries: None,
            summary: None,
            metadata: Map::new(),
            agent_id: None,
            created_at: Some(now.clone()),
            updated_at: Some(now),
            save_format: SaveFormat::Mnemo,
        }
    }

    /// The shape [`ConversationBuffer::save`] writes: mnemo's, unless the buffer was loaded
    /// from Midori's file.
    pub fn save_format(&self) -> &SaveFormat {
        &self.save_format
    }

    /// Makes [`ConversationBuffer::save`] write `format` from now on.
    pub fn set_save_format(&mut self, format: SaveFormat) {
        self.save_format = format;
    }

    /// An empty buffer keeping at most `max` entries (besides system entries).
    pub fn with_max_entries(max: usize) -> Self {
        Self {
            max_entries: Some(max),
            ..Self::new()
        }
    }

    /// Adds an entry as it is (its timestamp and agent too), then drops the oldest beyond
    /// the cap.
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
        self.enforce_cap();
        self.touch();
    }

    /// Adds a system entry.
    pub fn system(&mut self, text: impl Into<String>) {
        self.push_new(Entry::new(EntryRole::System, text));
    }

    /// Adds a user entry.
    pub fn user(&mut self, text: impl Into<String>) {
        self.push_new(Entry::new(EntryRole::User, text));
    }

    /// Adds an assistant entry.
    pub fn assistant(&mut self, text: impl Into<String>) {
        self.push_new(Entry::new(EntryRole::Assistant, text));
    }

    /// Adds an assistant entry making tool calls.
    pub fn tool_calls(&mut self, calls: Vec<ToolCall>) {
        self.push_new(Entry {
            tool_calls: calls,
            ..Entry::new(EntryRole::Assistant, "")
        });
    }

    /// Adds the result of tool call `call_id`, named after the tool that call ran when the
    /// call is in the buffer (a result is read back later without its call at hand).
    pub fn tool_result(&mut self, call_id: impl Into<String>, text: impl Into<String>) {
        let call_id = call_id.into();
        let name = self.call(&call_id).map(|c| c.name.clone());
        self.push_new(Entry {
            tool_call_id: Some(call_id),
            name,
            ..Entry::new(EntryRole::Tool, text)
        });
    }

    /// The newest call with id `id`.
    fn call(&self, id: &str) -> Option<&ToolCall> {
        self.entries
            .iter()
            .rev()
            .flat_map(|e| &e.tool_calls)
            .find(|c| c.id == id)
    }

    /// Pushes `entry` stamped with the time and the buffer's agent.
    fn push_new(&mut self, entry: Entry) {
        let entry = self.stamped(entry);
        self.push(entry);
    }

    /// `entry` as the buffer adds it: dated now, and the buffer's agent's unless it names one.
    pub(crate) fn stamped(&self, mut entry: Entry) -> Entry {
        entry.timestamp = Some(now_rfc3339());
        if entry.agent_id.is_none() {
            entry.agent_id.clone_from(&self.agent_id);
        }
        entry
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

    /// Forgets the conversation, entries and summary, but keeps what describes the buffer
    /// (metadata, agent, cap, creation date): a new conversation for the same agent.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.summary = None;
        self.touch();
    }

    /// The summary of what is no longer in the entries.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// Sets the summary.
    pub fn set_summary(&mut self, summary: Option<String>) {
        self.summary = summary;
        self.touch();
    }

    /// The buffer's own metadata.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// The buffer's own metadata, to change (the buffer counts as changed).
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        self.touch();
        &mut self.metadata
    }

    /// The agent whose conversation this is.
    pub fn agent_id(&self) -> Option<&str> {
        self.agent_id.as_deref()
    }

    /// Sets the agent; entries added from now on through the buffer's methods name it.
    pub fn set_agent_id(&mut self, agent_id: Option<String>) {
        self.agent_id = agent_id;
        self.touch();
    }

    /// When the buffer was created (RFC 3339, UTC); none for a format 1 file, which did not
    /// record it.
    pub fn created_at(&self) -> Option<&str> {
        self.created_at.as_deref()
    }

    /// When the buffer last changed (RFC 3339, UTC); none for a format 1 file.
    pub fn updated_at(&self) -> Option<&str> {
        self.updated_at.as_deref()
    }

    /// Replaces the entries (a compressor's result).
    pub fn replace_entries(&mut self, entries: Vec<Entry>) {
        self.entries = entries;
        self.enforce_cap();
        self.touch();
    }

    fn touch(&mut self) {
        self.updated_at = Some(now_rfc3339());
    }

    /// The OpenAI messages to send: system entries, the summary as a user message, the rest.
    pub fn to_messages(&self) -> Vec<Value> {
        let system = self
            .entries
            .iter()
            .take_while(|e| e.role == EntryRole::System)
            .count();
        let mut messages = messages_of(&self.entries[..system]);
        if let Some(summary) = &self.summary {
            messages.push(json!({"role": "user", "content": format!("[Summary of the earlier conversation]\n{summary}")}));
        }
        messages.extend(messages_of(&self.entries[system..]));
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

    /// A buffer from JSON saved by [`ConversationBuffer::to_json`] (any format up to
    /// [`FORMAT_VERSION`]), or from a Midori memory file (a string `version` of major 1).
    pub fn from_json(value: Value) -> Result<Self, BufferError> {
        if let Some(format) = value.get("format") {
            let format = format
                .as_u64()
                .ok_or_else(|| BufferError::Format("`format` is not a whole number".into()))?;
            return Self::from_ours(format, value);
        }
        match value.get("version") {
            Some(Value::String(version)) => {
                midori::check_version(version)?;
                let version = version.clone();
                let mut buffer = midori::read(value)?;
                buffer.save_format = SaveFormat::Midori { version };
                Ok(buffer)
            }
            _ => Err(BufferError::Format(
                "neither mnemo's `format` nor Midori's `version` is there".into(),
            )),
        }
    }

    fn from_ours(format: u64, value: Value) -> Result<Self, BufferError> {
        if format > u64::from(FORMAT_VERSION) {
            return Err(BufferError::Newer {
                found: format!("mnemo format {format}"),
                supported: format!("mnemo format {FORMAT_VERSION}"),
            });
        }
        // Read as the buffer itself, `format` left aside, so that an error names its path.
        serde_path_to_error::deserialize(value).map_err(|e| BufferError::Format(e.to_string()))
    }

    /// The buffer as Midori's memory file, under Midori `version`.
    pub fn to_midori_json(&self, version: &str) -> Value {
        midori::write(self, version)
    }

    /// Saves the buffer to `path` in its [`SaveFormat`] (written whole, then renamed into
    /// place).
    pub fn save(&self, path: &Path) -> Result<(), BufferError> {
        self.save_as(path, &self.save_format)
    }

    /// Saves the buffer to `path` in `format`.
    pub fn save_as(&self, path: &Path, format: &SaveFormat) -> Result<(), BufferError> {
        let io = |source| BufferError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = path.with_extension("tmp");
        let json = match format {
            SaveFormat::Mnemo => self.to_json(),
            SaveFormat::Midori { version } => self.to_midori_json(version),
        };
        let text = serde_json::to_vec_pretty(&json).map_err(|e| io(e.into()))?;
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Loads the buffer saved at `path`: `None` when no file is there (no buffer yet, as on an
    /// agent's first run). Anything else that keeps it from loading is an error.
    pub fn load(path: &Path) -> Result<Option<Self>, BufferError> {
        Self::read(path)
    }

    /// Loads the buffer saved at `path`, or a new empty one when no file is there: an agent's
    /// first run has no buffer yet. Anything else stays an error (a link or special file in
    /// its place, a file that cannot be read, one that is not a buffer), so a damaged history
    /// is never silently replaced by an empty one.
    pub fn load_or_new(path: &Path) -> Result<Self, BufferError> {
        Ok(Self::read(path)?.unwrap_or_default())
    }

    /// The buffer at `path`, or `None` when no file is there.
    fn read(path: &Path) -> Result<Option<Self>, BufferError> {
        let bytes = match mnemo_fs::read_regular(path, 256 << 20) {
            Ok(bytes) => bytes,
            Err(refusal) if refusal.is_not_found() => return Ok(None),
            Err(refusal) => {
                return Err(BufferError::Io {
                    path: path.display().to_string(),
                    source: match refusal {
                        mnemo_fs::Refusal::Io(e) => e,
                        other => std::io::Error::other(other.to_string()),
                    },
                })
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| BufferError::Format(e.to_string()))
            .and_then(Self::from_json)
            .map(Some)
            .map_err(|e| BufferError::InFile {
                path: path.display().to_string(),
                source: Box::new(e),
            })
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

/// Reading the memory file of the Python "Midori" context manager (`MemoryStore.save`).
///
/// Two shapes of its version 1 are read: messages as OpenAI writes them (`messages`, tool
/// calls with `function.name` and `function.arguments`, RFC 3339 timestamps, `agent_id` on
/// each message), and the snapshot its package writes (`entries`, tool calls with `name`,
/// an `args` object and `call_id`, timestamps in seconds since 1970, `agent_id` on the
/// snapshot). Either may record a tool's output on the call (`result`).
mod midori {
    use serde::Deserialize;
    use serde_json::{Map, Value};

    use super::{rfc3339_from_millis, BufferError, ConversationBuffer};
    use super::{Entry, EntryRole, ToolCall, MAX_MILLIS};

    /// The newest major version of Midori's file this reads.
    const MAJOR: u64 = 1;

    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        agent_id: Option<String>,
        #[serde(default)]
        created_at: Option<Value>,
        #[serde(default)]
        updated_at: Option<Value>,
        #[serde(default)]
        metadata: Option<Map<String, Value>>,
        #[serde(default, alias = "entries")]
        messages: Vec<Message>,
        #[serde(default)]
        summary: Option<String>,
    }

    #[derive(Deserialize)]
    struct Message {
        role: EntryRole,
        #[serde(default)]
        content: Option<String>,
        #[serde(default)]
        timestamp: Option<Value>,
        #[serde(default)]
        agent_id: Option<String>,
        #[serde(default)]
        tool_calls: Option<Vec<Call>>,
        #[serde(default)]
        tool_call_id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        metadata: Option<Map<String, Value>>,
    }

    #[derive(Deserialize)]
    struct Call {
        #[serde(default, alias = "call_id")]
        id: Option<String>,
        #[serde(default)]
        function: Option<Function>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        args: Option<Value>,
        #[serde(default)]
        result: Option<Value>,
    }

    #[derive(Deserialize)]
    struct Function {
        name: String,
        #[serde(default)]
        arguments: Option<Value>,
    }

    /// Refuses a version this does not read: a newer major clearly, anything else as not a
    /// Midori file.
    pub(super) fn check_version(version: &str) -> Result<(), BufferError> {
        let major = version.trim().split('.').next().unwrap_or_default();
        match major.parse::<u64>() {
            Ok(MAJOR) => Ok(()),
            Ok(m) if m > MAJOR => Err(BufferError::Newer {
                found: format!("Midori version {version}"),
                supported: format!("Midori version {MAJOR}.x"),
            }),
            _ => Err(BufferError::Format(format!(
                "Midori version `{version}` is not one mnemo reads"
            ))),
        }
    }

    /// The buffer a Midori file holds.
    pub(super) fn read(value: Value) -> Result<ConversationBuffer, BufferError> {
        let file: File = serde_path_to_error::deserialize(value)
            .map_err(|e| BufferError::Format(format!("a Midori file: {e}")))?;
        let entries = file
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| entry(i, m))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ConversationBuffer {
            entries,
            max_entries: None,
            summary: file.summary,
            metadata: file.metadata.unwrap_or_default(),
            agent_id: file.agent_id,
            created_at: date(file.created_at, "created_at")?,
            updated_at: date(file.updated_at, "updated_at")?,
            save_format: super::SaveFormat::Mnemo,
        })
    }

    /// `buffer` as Midori's file of OpenAI-shaped `messages` (the shape [`read`] reads
    /// first), under `version`: each entry a message, tool calls with their recorded
    /// results, a tool entry's name, the summary, the buffer's own dates and metadata.
    pub(super) fn write(buffer: &ConversationBuffer, version: &str) -> Value {
        let messages: Vec<Value> = buffer.entries.iter().map(message).collect();
        let mut file = Map::new();
        file.insert("version".into(), version.into());
        let optional = [
            ("agent_id", buffer.agent_id.clone()),
            ("created_at", buffer.created_at.clone()),
            ("updated_at", buffer.updated_at.clone()),
            ("summary", buffer.summary.clone()),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                file.insert(key.into(), value.into());
            }
        }
        file.insert("metadata".into(), Value::Object(buffer.metadata.clone()));
        file.insert("messages".into(), Value::Array(messages));
        Value::Object(file)
    }

    fn message(entry: &Entry) -> Value {
        let mut m = Map::new();
        m.insert(
            "role".into(),
            serde_json::to_value(entry.role).unwrap_or_default(),
        );
        let content = if entry.content.is_empty() && !entry.tool_calls.is_empty() {
            Value::Null
        } else {
            entry.content.clone().into()
        };
        m.insert("content".into(), content);
        if !entry.tool_calls.is_empty() {
            let calls = entry.tool_calls.iter().map(|c| {
                let mut call = serde_json::json!({
                    "id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                });
                if let Some(result) = &c.result {
                    call["result"] = result.clone().into();
                }
                call
            });
            m.insert("tool_calls".into(), calls.collect());
        }
        let optional = [
            ("tool_call_id", &entry.tool_call_id),
            ("name", &entry.name),
            ("timestamp", &entry.timestamp),
            ("agent_id", &entry.agent_id),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                m.insert(key.into(), value.clone().into());
            }
        }
        if !entry.metadata.is_empty() {
            m.insert("metadata".into(), Value::Object(entry.metadata.clone()));
        }
        Value::Object(m)
    }

    fn entry(i: usize, message: Message) -> Result<Entry, BufferError> {
        let at = format!("messages[{i}]");
        let mut entry = Entry {
            tool_call_id: message.tool_call_id,
            name: message.name,
            timestamp: date(message.timestamp, &format!("{at}.timestamp"))?,
            agent_id: message.agent_id,
            metadata: message.metadata.unwrap_or_default(),
            ..Entry::new(message.role, message.content.unwrap_or_default())
        };
        let calls = message.tool_calls.unwrap_or_default();
        match entry.role {
            // The package records a tool's output as a tool entry holding one call that
            // names the tool and its call id.
            EntryRole::Tool => {
                let first = calls.into_iter().next();
                let (name, id) = first.map_or((None, None), |c| (call_name(&c), c.id));
                entry.tool_call_id = entry.tool_call_id.or(id);
                entry.name = entry.name.or(name);
            }
            EntryRole::Assistant => {
                entry.tool_calls = calls
                    .into_iter()
                    .enumerate()
                    .map(|(j, c)| tool_call(c, i, j))
                    .collect::<Result<_, _>>()?;
            }
            _ if calls.is_empty() => {}
            _ => {
                return Err(BufferError::Format(format!(
                    "a Midori file: {at}: only an assistant message makes tool calls"
                )))
            }
        }
        Ok(entry)
    }

    fn call_name(call: &Call) -> Option<String> {
        call.function
            .as_ref()
            .map(|f| f.name.clone())
            .or_else(|| call.name.clone())
    }

    /// Message `i`'s call `j`. A call with no id gets one from where it is, so that the
    /// result recorded on it can be sent as its tool message.
    fn tool_call(call: Call, i: usize, j: usize) -> Result<ToolCall, BufferError> {
        let name = call_name(&call).ok_or_else(|| {
            BufferError::Format(format!(
                "a Midori file: messages[{i}].tool_calls[{j}]: a call names no tool"
            ))
        })?;
        let arguments = call.function.and_then(|f| f.arguments).or(call.args);
        Ok(ToolCall {
            id: call.id.unwrap_or_else(|| format!("midori_call_{i}_{j}")),
            name,
            arguments: arguments.map_or_else(|| "{}".to_owned(), text),
            result: call.result.filter(|r| !r.is_null()).map(text),
        })
    }

    /// A JSON value as text: a string as it is, anything else as JSON.
    fn text(value: Value) -> String {
        match value {
            Value::String(s) => s,
            other => other.to_string(),
        }
    }

    /// A Midori date as RFC 3339: a string is kept as written, seconds since 1970 (what the
    /// package writes) are converted.
    fn date(value: Option<Value>, field: &str) -> Result<Option<String>, BufferError> {
        let bad = || {
            BufferError::Format(format!(
                "a Midori file: {field}: neither an RFC 3339 date nor seconds since 1970 (up to year 9999)"
            ))
        };
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(Value::Number(n)) => {
                let millis = n.as_f64().map(|s| (s * 1000.0).round()).ok_or_else(bad)?;
                if !(0.0..=MAX_MILLIS as f64).contains(&millis) {
                    return Err(bad());
                }
                Ok(Some(rfc3339_from_millis(millis as u64)))
            }
            Some(_) => Err(bad()),
        }
    }
}

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
const MAX_MILLIS: u64 = 253_402_300_799_999;

/// Now, in RFC 3339 (UTC, milliseconds). A clock set before 1970 reads as 1970.
pub(crate) fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let millis = u64::try_from(since.as_millis()).unwrap_or(MAX_MILLIS);
    rfc3339_from_millis(millis.min(MAX_MILLIS))
}

/// `millis` since 1970 in RFC 3339, UTC: `2026-03-01T12:00:00.000Z`. Written here rather
/// than taken from a date crate: this crate only ever writes the current time and Midori's
/// seconds, and a fixed-width form sorts as the times do.
fn rfc3339_from_millis(millis: u64) -> String {
    let secs = millis / 1000;
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60,
        millis % 1000
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`, for days on or
/// after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_drops_the_oldest_but_keeps_system_entries_and_call_pairs() {
        let mut buffer = ConversationBuffer::with_max_entries(3);
        buffer.system("be brief");
        buffer.user("one");
        buffer.tool_calls(vec![ToolCall::new("c", "ls", "{}")]);
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
        let loaded = ConversationBuffer::load(&path).unwrap().unwrap();
        assert_eq!(loaded, buffer);
        assert_eq!(loaded.to_json()["format"], json!(2));
        let mut newer = buffer.to_json();
        newer["format"] = json!(FORMAT_VERSION + 1);
        let err = ConversationBuffer::from_json(newer)
            .unwrap_err()
            .to_string();
        assert!(err.contains("newer than this mnemo reads"), "{err}");
        assert!(err.contains("mnemo format 3"), "{err}");
        let messages = loaded.to_messages();
        assert_eq!(
            messages[1]["content"],
            "[Summary of the earlier conversation]\nearlier"
        );
        assert_eq!(messages[2]["content"], "hello");
    }

    #[test]
    fn dates_are_written_in_rfc_3339_utc() {
        assert_eq!(rfc3339_from_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_from_millis(951_782_400_000),
            "2000-02-29T00:00:00.000Z",
            "a leap day"
        );
        assert_eq!(
            rfc3339_from_millis(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            rfc3339_from_millis(1_709_251_199_999),
            "2024-02-29T23:59:59.999Z"
        );
        assert_eq!(rfc3339_from_millis(MAX_MILLIS), "9999-12-31T23:59:59.999Z");
        let now = now_rfc3339();
        assert_eq!(now.len(), 24, "{now}");
        assert!(now.as_str() > "2025" && now.ends_with('Z'), "{now}");
    }
}
