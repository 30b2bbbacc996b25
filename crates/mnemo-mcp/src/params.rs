//! What each tool takes. The doc comments become the descriptions in the tools' JSON
//! schemas, which is what a model reads to fill them in; unknown fields are refused.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Parameters of `search_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to look for, in plain words: at most 4096 bytes.
    #[schemars(length(max = 4096))]
    pub query: String,
    /// The conversation whose memories (and the shared `global` ones) are searched; `default`
    /// when unset.
    #[serde(default)]
    pub conversation: Option<String>,
    /// How many memories to return, 0 to 100 (the configured default when unset).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// A metadata filter, e.g. `{"topic": "travel"}` or `{"year": {"gte": 2024}}`.
    #[serde(default)]
    pub filter: Option<Value>,
    /// Weight of recency, 0 to 1: raise it for questions about the present.
    #[serde(default)]
    pub recency: Option<f32>,
}

/// Parameters of `add_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddParams {
    /// The fact to remember, one self-contained sentence.
    pub content: String,
    /// The conversation it belongs to; `default` when unset, `global` to share it with every
    /// conversation.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Free-form metadata stored with the fact, e.g. `{"topic": "travel"}`; searches can
    /// filter on it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// Parameters of `list_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only this conversation; every conversation when unset.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Only this role: `memory` (a fact), `user`, `assistant` or `summary`.
    #[serde(default)]
    pub role: Option<String>,
    /// How many memories to skip (0 when unset).
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many to return, 1 to 1000 (50 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Parameters of the tools that name one memory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryIdParams {
    /// The memory's id (a UUID, as search and list results show it).
    pub id: String,
}

/// Parameters of `list_conflicts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConflictsParams {
    /// The conversation whose conflicts to list; `default` when unset.
    #[serde(default)]
    pub conversation: Option<String>,
}

/// Parameters of `resolve_conflict`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveConflictParams {
    /// The conversation of the conflict; `default` when unset.
    #[serde(default)]
    pub conversation: Option<String>,
    /// The id of the earlier fact of the pair (as `list_conflicts` shows it).
    pub earlier: String,
    /// The id of the later fact of the pair.
    pub later: String,
    /// What holds: `keep_later`, `keep_earlier` or `both_hold`.
    pub resolution: mnemo_engine::Resolution,
}

/// Parameters of `memory_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// The memory's id (a UUID); a deleted memory's history is still found.
    pub id: String,
    /// How many versions, newest first, 1 to 1000 (50 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Parameters of `search_conversation_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSearchParams {
    /// The words to find (case-insensitive): at most 4096 bytes.
    #[schemars(length(max = 4096))]
    pub query: String,
    /// Search this chat session's full log only.
    #[serde(default)]
    pub session: Option<String>,
    /// Search the logs of every session of this conversation (`default` when neither this
    /// nor `session` is given).
    #[serde(default)]
    pub conversation: Option<String>,
    /// How many excerpts, 1 to 10 (10 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Parameters of `read_agent_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentParams {
    /// The agent whose notes these are (letters, digits, `-`, `_`, `.`).
    pub agent: String,
}

/// Parameters of `write_agent_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentWriteParams {
    /// The agent whose notes these are.
    pub agent: String,
    /// What to add, appended on a line of its own.
    pub text: String,
}

/// Parameters of `update_agent_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentUpdateParams {
    /// The agent whose notes these are.
    pub agent: String,
    /// The exact passage to replace; it must occur exactly once in the notes.
    pub old_text: String,
    /// What replaces it (empty to remove the passage).
    pub new_text: String,
}

/// Parameters of `read_offloaded_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputParams {
    /// The tool call whose output was offloaded, as the placeholder in the context names it.
    pub call_id: String,
    /// The chat session it was offloaded in.
    #[serde(default)]
    pub session: Option<String>,
    /// The conversation it was offloaded in, outside any session (`default` when neither
    /// this nor `session` is given).
    #[serde(default)]
    pub conversation: Option<String>,
    /// The first character to read (0 when unset).
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many characters, 1 to 1048576 (65536 when unset).
    #[serde(default)]
    pub limit: Option<usize>,
}
