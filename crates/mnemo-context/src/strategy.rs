//! The strategy object: how one request's history is governed. One schema for a request's
//! `memory_strategy`, a conversation's stored strategy and the configuration's defaults;
//! [`Strategy::over`] merges them field by field (request > conversation > agent), and
//! [`Strategy::resolve`] fills in what none of them set.
//!
//! Field names and defaults follow the compaction strategy service, plus the summarising and
//! offloading knobs of co-cli and pydantic-deep.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// What the pipeline does to a history that is getting long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Nothing (tool calls are still repaired, and the pre-flight check still runs).
    #[default]
    None,
    /// Old tool outputs become placeholders.
    Compact,
    /// Old tool outputs are cut to `tool_output_trim_chars`, on every request.
    Trim,
    /// The middle of the history becomes an LLM summary.
    Summarize,
    /// Large outputs offloaded to files, then `compact`, then `summarize`.
    Auto,
    /// co-cli's pair: `trim` on every request, then `summarize` (the sliding window unless
    /// `summary_window` says otherwise) when a summary is due.
    TrimSummarize,
}

impl Mode {
    /// The mode's name as a strategy writes it (`auto`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Compact => "compact",
            Mode::Trim => "trim",
            Mode::Summarize => "summarize",
            Mode::Auto => "auto",
            Mode::TrimSummarize => "trim_summarize",
        }
    }
}

/// What survives a summary, besides the head (system messages) and the current turn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Keep {
    /// The newest this many messages.
    Messages(usize),
    /// The newest messages that fit in this many tokens.
    Tokens(u64),
    /// The newest messages that fit in this share of the window.
    Fraction(f64),
}

impl Default for Keep {
    fn default() -> Self {
        Keep::Messages(0)
    }
}

/// Which messages stand around a summary: the head before it and the tail after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SummaryWindow {
    /// Head: the leading system and developer messages. Tail: what `keep` asks for, and at
    /// least the current turn. The least the model must see, so the most a summary saves.
    #[default]
    Turn,
    /// co-cli's sliding window. Head: the first run (the system messages and the first user
    /// message through the first assistant answer, its tool calls and results whole), since
    /// it states the task the rest of the session serves. Tail: the last `max(4, N/2)` of
    /// the history's N messages (more when `keep` or the current turn asks for more), so the
    /// model keeps the recent work verbatim and not only its summary.
    Sliding,
}

/// `offload_tokens` when a strategy does not set it.
pub const DEFAULT_OFFLOAD_TOKENS: u64 = 20_000;

/// The longest `summary_prompt`: instructions, not a document.
pub const MAX_SUMMARY_PROMPT_CHARS: usize = 8000;

/// A strategy as given: every field optional, so that several can be merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    /// `none` (default), `compact`, `trim`, `summarize`, `auto` or `trim_summarize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Recent turns never touched (a turn is a user message and everything up to the next);
    /// default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_keep: Option<usize>,
    /// Recent messages never touched, counted in messages rather than turns (co-cli's
    /// count); when set, it stands in for `compact_keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_keep_messages: Option<usize>,
    /// `compact`: act past this many turns (any one trigger set suffices: this or a token
    /// trigger). Trimming needs no trigger: it runs on every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_trigger_turns: Option<usize>,
    /// Act when the request's estimate exceeds this many tokens (a hard limit: it also
    /// triggers summaries in `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Compact when the estimate exceeds this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_soft_budget: Option<u64>,
    /// The window percentages are taken of; the model's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_tokens: Option<u64>,
    /// Act when less than this share of the window remains (hard); 0.2 when no trigger is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub token_remaining_pct: Option<f64>,
    /// Compact when less than this share of the window remains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub token_soft_remaining_pct: Option<f64>,
    /// Also replace the arguments of old tool calls; default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_clear_tool_inputs: Option<bool>,
    /// Tools whose outputs are never compacted or trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_exclude_tools: Option<Vec<String>>,
    /// When not empty, only these tools' outputs are compacted or trimmed (wins over exclude).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_include_tools: Option<Vec<String>>,
    /// `trim`: characters an old tool output keeps; default 2000; 0 turns trimming off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_output_trim_chars: Option<usize>,
    /// `auto`: tool outputs above this many tokens (characters / 4) go to a file; default
    /// 20000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_tokens: Option<u64>,
    /// Summarise when the estimate exceeds this share of the window; default 0.9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub compress_threshold: Option<f64>,
    /// What survives a summary: `{"messages": N}`, `{"tokens": N}` or `{"fraction": F}`;
    /// default `{"messages": 0}` (the current turn always survives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<Keep>,
    /// Which messages stand around a summary: `turn` (default: the system messages, then the
    /// summary, then `keep` and the current turn) or `sliding` (the first run, then the
    /// summary, then the last `max(4, N/2)` messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_window: Option<SummaryWindow>,
    /// Summarise when the history has more messages than this; default 40; 0 turns it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_history_messages: Option<usize>,
    /// The model summaries are asked of; the request's own model when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarization_model: Option<String>,
    /// Appended to the summary prompt: "IMPORTANT: Focus the summary on: ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
    /// The summary prompt's instructions, in place of the default
    /// ([`crate::summarize::INSTRUCTIONS`]); the focus, the previous summary and the
    /// conversation still follow them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_prompt: Option<String>,
}

/// A strategy with every field decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedStrategy {
    /// See [`Strategy::mode`].
    pub mode: Mode,
    /// See [`Strategy::compact_keep`].
    pub compact_keep: usize,
    /// See [`Strategy::compact_keep_messages`].
    pub compact_keep_messages: Option<usize>,
    /// See [`Strategy::compact_trigger_turns`].
    pub compact_trigger_turns: Option<usize>,
    /// See [`Strategy::token_budget`].
    pub token_budget: Option<u64>,
    /// See [`Strategy::token_soft_budget`].
    pub token_soft_budget: Option<u64>,
    /// See [`Strategy::context_window_tokens`].
    pub context_window_tokens: Option<u64>,
    /// See [`Strategy::token_remaining_pct`].
    pub token_remaining_pct: Option<f64>,
    /// See [`Strategy::token_soft_remaining_pct`].
    pub token_soft_remaining_pct: Option<f64>,
    /// See [`Strategy::compact_clear_tool_inputs`].
    pub compact_clear_tool_inputs: bool,
    /// See [`Strategy::compact_exclude_tools`].
    pub compact_exclude_tools: Vec<String>,
    /// See [`Strategy::compact_include_tools`].
    pub compact_include_tools: Vec<String>,
    /// See [`Strategy::tool_output_trim_chars`].
    pub tool_output_trim_chars: usize,
    /// See [`Strategy::offload_tokens`].
    pub offload_tokens: u64,
    /// See [`Strategy::compress_threshold`].
    pub compress_threshold: f64,
    /// See [`Strategy::keep`].
    pub keep: Keep,
    /// See [`Strategy::summary_window`].
    pub summary_window: SummaryWindow,
    /// See [`Strategy::max_history_messages`].
    pub max_history_messages: usize,
    /// See [`Strategy::summarization_model`].
    pub summarization_model: Option<String>,
    /// See [`Strategy::focus`].
    pub focus: Option<String>,
    /// See [`Strategy::summary_prompt`].
    pub summary_prompt: Option<String>,
}

/// Why a strategy was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StrategyError(pub String);

impl Strategy {
    /// Reads a strategy from JSON (a request's `memory_strategy`, a PATCH body), checking
    /// every field: an unknown field, a wrong type or a value out of range is an error that
    /// names it.
    pub fn from_json(value: Value) -> Result<Self, StrategyError> {
        // serde would also take a list, as the fields in order: a strategy is only ever
        // written as an object.
        let kind = match &value {
            Value::Object(_) => None,
            Value::Null => Some("null"),
            Value::Bool(_) => Some("a boolean"),
            Value::Number(_) => Some("a number"),
            Value::String(_) => Some("a string"),
            Value::Array(_) => Some("a list"),
        };
        if let Some(kind) = kind {
            return Err(StrategyError(format!(
                "a strategy is an object of fields (mode, compact_keep, ...), not {kind}"
            )));
        }
        let strategy: Strategy = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                StrategyError(inner.to_string())
            } else {
                StrategyError(format!("{path}: {inner}"))
            }
        })?;
        strategy.validate()?;
        Ok(strategy)
    }

    /// Checks the ranges the types do not.
    pub fn validate(&self) -> Result<(), StrategyError> {
        let share = |name: &str, v: Option<f64>, zero_ok: bool| match v {
            Some(v)
                if !(v.is_finite() && (if zero_ok { v >= 0.0 } else { v > 0.0 }) && v <= 1.0) =>
            {
                let low = if zero_ok { "0" } else { "above 0" };
                Err(StrategyError(format!(
                    "{name} must be between {low} and 1, got {v}"
                )))
            }
            _ => Ok(()),
        };
        share("token_remaining_pct", self.token_remaining_pct, true)?;
        share(
            "token_soft_remaining_pct",
            self.token_soft_remaining_pct,
            true,
        )?;
        share("compress_threshold", self.compress_threshold, false)?;
        if let Some(Keep::Fraction(f)) = self.keep {
            share("keep.fraction", Some(f), true)?;
        }
        let positive = |name: &str, v: Option<u64>| match v {
            Some(0) => Err(StrategyError(format!("{name} must be above 0"))),
            _ => Ok(()),
        };
        positive("token_budget", self.token_budget)?;
        positive("token_soft_budget", self.token_soft_budget)?;
        positive("context_window_tokens", self.context_window_tokens)?;
        positive("offload_tokens", self.offload_tokens)?;
        for (name, value) in [
            ("summarization_model", &self.summarization_model),
            ("focus", &self.focus),
        ] {
            if value.as_ref().is_some_and(|v| v.chars().count() > 2000) {
                return Err(StrategyError(format!(
                    "{name} is longer than 2000 characters"
                )));
            }
        }
        match &self.summary_prompt {
            Some(p) if p.trim().is_empty() => Err(StrategyError(
                "summary_prompt is empty: leave it out for the default".into(),
            )),
            Some(p) if p.chars().count() > MAX_SUMMARY_PROMPT_CHARS => Err(StrategyError(format!(
                "summary_prompt is longer than {MAX_SUMMARY_PROMPT_CHARS} characters"
            ))),
            _ => Ok(()),
        }
    }

    /// This strategy over `lower`: each field this one sets, else `lower`'s.
    pub fn over(&self, lower: &Strategy) -> Strategy {
        macro_rules! pick {
            ($($field:ident),*) => {
                Strategy { $($field: self.$field.clone().or_else(|| lower.$field.clone())),* }
            };
        }
        pick!(
            mode,
            compact_keep,
            compact_keep_messages,
            compact_trigger_turns,
            token_budget,
            token_soft_budget,
            context_window_tokens,
            token_remaining_pct,
            token_soft_remaining_pct,
            compact_clear_tool_inputs,
            compact_exclude_tools,
            compact_include_tools,
            tool_output_trim_chars,
            offload_tokens,
            compress_threshold,
            keep,
            summary_window,
            max_history_messages,
            summarization_model,
            focus,
            summary_prompt
        )
    }

    /// Applies a JSON merge patch: a field set to a value replaces it, a field set to `null`
    /// removes it (it then falls back to the next level), fields not named stay.
    pub fn patch(&self, patch: Value) -> Result<Strategy, StrategyError> {
        let Value::Object(patch) = patch else {
            return Err(StrategyError(
                "a strategy patch must be a JSON object".into(),
            ));
        };
        let Value::Object(mut current) =
            serde_json::to_value(self).map_err(|e| StrategyError(e.to_string()))?
        else {
            return Err(StrategyError("a strategy is a JSON object".into()));
        };
        for (field, value) in patch {
            if value.is_null() {
                current.remove(&field);
            } else {
                current.insert(field, value);
            }
        }
        Strategy::from_json(Value::Object(current))
    }

    /// Every field decided: this strategy's value, else the default.
    pub fn resolve(&self) -> ResolvedStrategy {
        let mode = self.mode.unwrap_or_default();
        let summary_window = match mode {
            Mode::TrimSummarize => SummaryWindow::Sliding,
            _ => SummaryWindow::Turn,
        };
        ResolvedStrategy {
            mode,
            compact_keep: self.compact_keep.unwrap_or(2),
            compact_keep_messages: self.compact_keep_messages,
            compact_trigger_turns: self.compact_trigger_turns,
            token_budget: self.token_budget,
            token_soft_budget: self.token_soft_budget,
            context_window_tokens: self.context_window_tokens,
            token_remaining_pct: self.token_remaining_pct,
            token_soft_remaining_pct: self.token_soft_remaining_pct,
            compact_clear_tool_inputs: self.compact_clear_tool_inputs.unwrap_or(false),
            compact_exclude_tools: self.compact_exclude_tools.clone().unwrap_or_default(),
            compact_include_tools: self.compact_include_tools.clone().unwrap_or_default(),
            tool_output_trim_chars: self.tool_output_trim_chars.unwrap_or(2000),
            offload_tokens: self.offload_tokens.unwrap_or(DEFAULT_OFFLOAD_TOKENS),
            compress_threshold: self.compress_threshold.unwrap_or(0.9),
            keep: self.keep.unwrap_or_default(),
            summary_window: self.summary_window.unwrap_or(summary_window),
            max_history_messages: self.max_history_messages.unwrap_or(40),
            summarization_model: self.summarization_model.clone(),
            focus: self.focus.clone(),
            summary_prompt: self.summary_prompt.clone(),
        }
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Strategy::default()
    }
}

impl ResolvedStrategy {
    /// The index from which `messages` are never compacted or trimmed: the newest
    /// `compact_keep_messages` messages when set (never into the head), else the newest
    /// `compact_keep` turns.
    pub fn protected_from(&self, messages: &[Value]) -> usize {
        match self.compact_keep_messages {
            Some(0) => messages.len(),
            Some(n) => messages
                .len()
                .saturating_sub(n)
                .max(crate::messages::head_len(messages)),
            None => crate::messages::protected_from(messages, self.compact_keep),
        }
    }

    /// Whether a tool's outputs may be compacted or trimmed (include wins over exclude).
    pub fn touches_tool(&self, tool: &str) -> bool {
        if !self.compact_include_tools.is_empty() {
            return self.compact_include_tools.iter().any(|t| t == tool);
        }
        !self.compact_exclude_tools.iter().any(|t| t == tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_values_out_of_range_are_named() {
        for (value, expected) in [
            (json!({"mdoe": "auto"}), "unknown field `mdoe`"),
            (json!({"mode": "shrink"}), "unknown variant `shrink`"),
            (
                json!({"token_remaining_pct": 1.5}),
                "token_remaining_pct must be between 0 and 1",
            ),
            (
                json!({"compress_threshold": 0}),
                "compress_threshold must be between above 0 and 1",
            ),
            (json!({"keep": {"fraction": 2.0}}), "keep.fraction"),
            (json!({"keep": {"messages": 1, "tokens": 5}}), "keep: "),
            (
                json!({"offload_tokens": 0}),
                "offload_tokens must be above 0",
            ),
            (json!({"compact_keep": -1}), "compact_keep: invalid value"),
            (json!({"compact_keep": "two"}), "compact_keep: invalid type"),
            (json!({"summary_prompt": " "}), "summary_prompt is empty"),
            (
                json!({"summary_window": "slide"}),
                "summary_window: unknown variant `slide`",
            ),
            (json!({"summary_window": 2}), "summary_window: invalid type"),
            (
                json!({"summary_prompt": "x".repeat(MAX_SUMMARY_PROMPT_CHARS + 1)}),
                "summary_prompt is longer than 8000 characters",
            ),
        ] {
            let err = Strategy::from_json(value.clone()).unwrap_err().to_string();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn strategies_merge_field_by_field() {
        let request = Strategy::from_json(json!({"mode": "compact"})).unwrap();
        let conversation = Strategy::from_json(json!({"mode": "trim", "compact_keep": 5})).unwrap();
        let agent = Strategy::from_json(
            json!({"compact_keep": 1, "focus": "code", "summary_window": "sliding"}),
        )
        .unwrap();
        let merged = request.over(&conversation.over(&agent));
        assert_eq!(merged.mode, Some(Mode::Compact));
        assert_eq!(merged.compact_keep, Some(5));
        assert_eq!(merged.focus.as_deref(), Some("code"));
        assert_eq!(merged.summary_window, Some(SummaryWindow::Sliding));
        let resolved = merged.resolve();
        assert_eq!(resolved.tool_output_trim_chars, 2000, "unset: the default");
        assert_eq!(resolved.keep, Keep::Messages(0));
        assert_eq!(resolved.summary_window, SummaryWindow::Sliding);
        assert_eq!(
            Strategy::default().resolve().summary_window,
            SummaryWindow::Turn,
            "the turn window unless one is chosen"
        );
    }

    #[test]
    fn a_patch_sets_and_removes_fields() {
        let stored = Strategy::from_json(json!({"mode": "trim", "compact_keep": 5})).unwrap();
        let patched = stored
            .patch(json!({"compact_keep": null, "keep": {"tokens": 500}}))
            .unwrap();
        assert_eq!(patched.mode, Some(Mode::Trim));
        assert_eq!(patched.compact_keep, None);
        assert_eq!(patched.keep, Some(Keep::Tokens(500)));
        assert!(stored.patch(json!({"mode": "bogus"})).is_err());
    }

    #[test]
    fn include_wins_over_exclude() {
        let s = Strategy::from_json(json!({
            "compact_include_tools": ["grep"], "compact_exclude_tools": ["grep", "ls"]
        }))
        .unwrap()
        .resolve();
        assert!(s.touches_tool("grep"));
        assert!(!s.touches_tool("ls"));
        assert!(!s.touches_tool("cat"), "only the included ones");
        let exclude = Strategy::from_json(json!({"compact_exclude_tools": ["ls"]}))
            .unwrap()
            .resolve();
        assert!(!exclude.touches_tool("ls") && exclude.touches_tool("cat"));
    }
}
