//! The `[context]` table of mnemo's configuration: the default strategy (its fields straight
//! under `[context]`), per-agent strategies (`[context.agents.NAME]`, chosen by a request's
//! `memory_agent`), per-model windows (`[context.windows]`), and the pre-flight's reserve and
//! margin.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::strategy::Strategy;

/// Tokens reserved for the answer when a request sets no `max_tokens`.
pub const DEFAULT_RESERVE_OUTPUT: u64 = 512;
/// Tokens of margin the pre-flight adds for the count's error.
pub const DEFAULT_MARGIN: u64 = 64;

/// Context governance settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextConfig {
    /// The strategy every request starts from.
    #[serde(flatten)]
    pub defaults: Strategy,
    /// Strategies by agent name, over the defaults.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, Strategy>,
    /// Context windows by model name, over the bundled data.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, u64>,
    /// Tokens reserved for the answer when a request sets no `max_tokens`.
    pub reserve_output_tokens: u64,
    /// Tokens of margin the pre-flight check adds.
    pub margin_tokens: u64,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            defaults: Strategy::default(),
            agents: BTreeMap::new(),
            windows: BTreeMap::new(),
            reserve_output_tokens: DEFAULT_RESERVE_OUTPUT,
            margin_tokens: DEFAULT_MARGIN,
        }
    }
}

impl ContextConfig {
    /// The agent's strategy over the defaults (just the defaults for no agent, or an agent
    /// the configuration does not name).
    pub fn agent_strategy(&self, agent: Option<&str>) -> Strategy {
        match agent.and_then(|a| self.agents.get(a)) {
            Some(strategy) => strategy.over(&self.defaults),
            None => self.defaults.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for ContextConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = Map::<String, Value>::deserialize(deserializer)?;
        let mut config = ContextConfig::default();
        if let Some(agents) = table.remove("agents") {
            let agents: Map<String, Value> = serde_json::from_value(agents)
                .map_err(|e| D::Error::custom(format!("context.agents: {e}")))?;
            for (name, value) in agents {
                let strategy = Strategy::from_json(value)
                    .map_err(|e| D::Error::custom(format!("context.agents.{name}: {e}")))?;
                config.agents.insert(name, strategy);
            }
        }
        if let Some(windows) = table.remove("windows") {
            config.windows = serde_json::from_value(windows)
                .map_err(|e| D::Error::custom(format!("context.windows: {e}")))?;
        }
        for (key, field) in [
            ("reserve_output_tokens", &mut config.reserve_output_tokens),
            ("margin_tokens", &mut config.margin_tokens),
        ] {
            if let Some(value) = table.remove(key) {
                *field = value.as_u64().ok_or_else(|| {
                    D::Error::custom(format!("context.{key} must be a whole number of tokens"))
                })?;
            }
        }
        config.defaults = Strategy::from_json(Value::Object(table))
            .map_err(|e| D::Error::custom(format!("context: {e}")))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Mode;
    use serde_json::json;

    #[test]
    fn defaults_agents_and_windows_come_from_one_table() {
        let config: ContextConfig = serde_json::from_value(json!({
            "mode": "compact", "compact_keep": 3,
            "summary_prompt": "Keep the decisions.",
            "agents": {"coder": {"mode": "auto", "summary_prompt": "Keep the file paths."}},
            "windows": {"my-model": 32768},
            "reserve_output_tokens": 1000
        }))
        .unwrap();
        assert_eq!(config.defaults.mode, Some(Mode::Compact));
        assert_eq!(config.windows["my-model"], 32768);
        assert_eq!(config.reserve_output_tokens, 1000);
        assert_eq!(config.margin_tokens, DEFAULT_MARGIN);
        let coder = config.agent_strategy(Some("coder"));
        assert_eq!(
            (coder.mode, coder.compact_keep),
            (Some(Mode::Auto), Some(3))
        );
        assert_eq!(
            config.agent_strategy(Some("unknown")).mode,
            Some(Mode::Compact)
        );
        // The summary prompt, like every field: the agent's, else the configuration's.
        assert_eq!(
            coder.resolve().summary_prompt.as_deref(),
            Some("Keep the file paths.")
        );
        assert_eq!(
            config
                .agent_strategy(None)
                .resolve()
                .summary_prompt
                .as_deref(),
            Some("Keep the decisions.")
        );
        for (bad, expected) in [
            (
                json!({"mdoe": "auto"}),
                "context: mdoe: unknown field `mdoe`",
            ),
            (
                json!({"agents": {"x": {"compact_keep": "many"}}}),
                "context.agents.x: compact_keep",
            ),
            (json!({"margin_tokens": -3}), "context.margin_tokens"),
        ] {
            let err = serde_json::from_value::<ContextConfig>(bad.clone())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }
}
