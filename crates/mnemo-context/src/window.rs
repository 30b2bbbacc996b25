//! How many tokens a model can take: its context window.
//!
//! In order: a strategy's `context_window_tokens`, a per-model override from the
//! configuration (the local LLM's own context size is one), the bundled `genai-prices` data
//! (the source pydantic-deep's middleware uses; its model matching knows dated and aliased
//! names), and [`DEFAULT_WINDOW`] for a model nobody knows.

use std::collections::BTreeMap;

use genai_prices::{Calculator, PriceRequest, Usage};
use serde::Serialize;

/// The window of a model nobody knows.
pub const DEFAULT_WINDOW: u64 = 200_000;

/// Where a window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The strategy's `context_window_tokens`.
    Strategy,
    /// The configuration's per-model override.
    Config,
    /// The bundled genai-prices data.
    GenaiPrices,
    /// Nothing knew the model: [`DEFAULT_WINDOW`].
    Default,
}

/// A model's window, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Tokens of prompt and answer together.
    pub tokens: u64,
    /// Where the figure came from.
    pub source: WindowSource,
}

/// Context windows by model name: overrides first, then the bundled data.
#[derive(Debug, Clone, Default)]
pub struct ContextWindows {
    overrides: BTreeMap<String, u64>,
}

impl ContextWindows {
    /// Windows with these per-model overrides (model name → tokens).
    pub fn new(overrides: BTreeMap<String, u64>) -> Self {
        Self { overrides }
    }

    /// Sets the window of one model (e.g. the local LLM's context size).
    pub fn set(&mut self, model: &str, tokens: u64) {
        self.overrides.insert(model.to_owned(), tokens);
    }

    /// The window of `model`; `requested` is a strategy's `context_window_tokens`.
    pub fn window(&self, model: &str, requested: Option<u64>) -> Window {
        if let Some(tokens) = requested {
            return Window {
                tokens,
                source: WindowSource::Strategy,
            };
        }
        if let Some(&tokens) = self.overrides.get(model) {
            return Window {
                tokens,
                source: WindowSource::Config,
            };
        }
        match known_window(model) {
            Some(tokens) => Window {
                tokens,
                source: WindowSource::GenaiPrices,
            },
            None => Window {
                tokens: DEFAULT_WINDOW,
                source: WindowSource::Default,
            },
        }
    }
}

/// The window the bundled data gives `model`, if it knows the model and its window.
pub fn known_window(model: &str) -> Option<u64> {
    if model.trim().is_empty() {
        return None;
    }
    let calculator = Calculator::bundled();
    // The price lookup is what knows a model's aliases and dated names; with no usage it
    // costs nothing and names the matched provider and model.
    let usage = Usage::default();
    let matched = calculator
        .calculate(&PriceRequest::new(model, &usage))
        .ok()?;
    calculator
        .providers()
        .find(|p| p.id() == matched.provider_id)?
        .models()
        .find(|m| m.id() == matched.model_id)?
        .context_window()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_come_from_the_bundled_data() {
        let windows = ContextWindows::default();
        let gpt = windows.window("gpt-4o", None);
        assert_eq!(gpt.source, WindowSource::GenaiPrices);
        assert_eq!(gpt.tokens, 128_000);
        let dated = windows.window("gpt-4o-2024-08-06", None);
        assert_eq!(dated.tokens, 128_000, "dated names match too");
    }

    #[test]
    fn overrides_and_strategies_come_first_and_unknown_models_get_the_default() {
        let mut windows = ContextWindows::default();
        windows.set("gpt-4o", 8_000);
        assert_eq!(windows.window("gpt-4o", None).tokens, 8_000);
        assert_eq!(windows.window("gpt-4o", Some(1_000)).tokens, 1_000);
        let unknown = windows.window("my-own-model-7b", None);
        assert_eq!(
            unknown,
            Window {
                tokens: DEFAULT_WINDOW,
                source: WindowSource::Default
            }
        );
    }
}
