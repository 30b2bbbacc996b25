//! How many tokens a model can take: its context window.
//!
//! In order: a strategy's `context_window_tokens`, a per-model override from the
//! configuration, the override for every model ([`EVERY_MODEL`], `"*"`: an upstream that
//! serves one model under any name, as mnemo's own local LLM does, whose slot is then the
//! window whatever name a request gives), the bundled `genai-prices` data (the source
//! pydantic-deep's middleware uses; its model matching knows dated and aliased names), and
//! [`DEFAULT_WINDOW`] for a model nobody knows.

use std::collections::BTreeMap;

use genai_prices::{Calculator, PriceRequest, Usage};
use serde::Serialize;

/// The window of a model nobody knows.
pub const DEFAULT_WINDOW: u64 = 200_000;

/// The override key that stands for every model name (`[context.windows] "*" = 2048`).
pub const EVERY_MODEL: &str = "*";

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
        let configured = self
            .overrides
            .get(model)
            .or_else(|| self.overrides.get(EVERY_MODEL));
        if let Some(&tokens) = configured {
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

/// The window the bundled data gives `model`, if it knows the model and its window. A name
/// as agents write it, with its provider in front (`openai:gpt-4.1`, pydantic-ai's form;
/// `openai/gpt-4o`, OpenRouter's), is looked up whole first, then as that provider's model,
/// then as the bare model name.
pub fn known_window(model: &str) -> Option<u64> {
    let model = model.trim();
    if model.is_empty() {
        return None;
    }
    window_of(model, None).or_else(|| {
        let (provider, name) = split_provider(model)?;
        window_of(name, Some(provider)).or_else(|| window_of(name, None))
    })
}

/// `model` split into the provider in front of it and the model's own name, when it has
/// one: `anthropic:claude-sonnet-4-5` → (`anthropic`, `claude-sonnet-4-5`),
/// `openai/gpt-oss-20b` → (`openai`, `gpt-oss-20b`). The provider is given as genai-prices
/// names it where an agent framework names it otherwise (`google-gla` → `google`,
/// `bedrock` → `aws`).
pub fn split_provider(model: &str) -> Option<(&str, &str)> {
    let (provider, name) = model.split_once(':').or_else(|| model.split_once('/'))?;
    let (provider, name) = (provider.trim(), name.trim());
    if provider.is_empty() || name.is_empty() {
        return None;
    }
    let provider = PROVIDER_ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(provider))
        .map_or(provider, |(_, id)| id);
    Some((provider, name))
}

/// Providers' names in agent frameworks (pydantic-ai, LiteLLM) that genai-prices knows by
/// another id.
const PROVIDER_ALIASES: &[(&str, &str)] = &[
    ("google-gla", "google"),
    ("google-vertex", "google"),
    ("gemini", "google"),
    ("vertex_ai", "google"),
    ("bedrock", "aws"),
    ("xai", "x-ai"),
    ("grok", "x-ai"),
];

/// The window of `model` as the bundled data matches it, at `provider` when given.
fn window_of(model: &str, provider: Option<&str>) -> Option<u64> {
    let calculator = Calculator::bundled();
    // The price lookup is what knows a model's aliases and dated names; with no usage it
    // costs nothing and names the matched provider and model.
    let usage = Usage::default();
    let mut request = PriceRequest::new(model, &usage);
    if let Some(provider) = provider {
        request = request.with_provider_id(provider);
    }
    let matched = calculator.calculate(&request).ok()?;
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
    fn names_with_their_provider_in_front_resolve_as_the_bare_names_do() {
        let windows = ContextWindows::default();
        for (prefixed, bare) in [
            ("openai:gpt-4.1", "gpt-4.1"),
            ("openai/gpt-4o", "gpt-4o"),
            (
                "anthropic:claude-3-5-sonnet-latest",
                "claude-3-5-sonnet-latest",
            ),
            ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5"),
        ] {
            let window = windows.window(prefixed, None);
            assert_eq!(window.source, WindowSource::GenaiPrices, "{prefixed}");
            assert_eq!(window, windows.window(bare, None), "{prefixed}");
        }
        assert_eq!(known_window("anthropic:claude-sonnet-4-5"), Some(200_000));
        // The open-weight models the conversation buffer library knows.
        for gpt_oss in [
            "gpt-oss-20b",
            "gpt-oss-120b",
            "openai/gpt-oss-20b",
            "openai:gpt-oss-120b",
        ] {
            assert_eq!(known_window(gpt_oss), Some(131_072), "{gpt_oss}");
        }
        assert_eq!(
            split_provider("google-gla:gemini-2.5-pro"),
            Some(("google", "gemini-2.5-pro"))
        );
        assert_eq!(split_provider("gpt-4o"), None);
        assert_eq!(split_provider(":gpt-4o"), None);
        assert_eq!(known_window("nobody:my-own-model-7b"), None);
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

    #[test]
    fn every_model_stands_for_any_name_but_one_named() {
        let windows = ContextWindows::new(BTreeMap::from([
            (EVERY_MODEL.to_owned(), 2048),
            ("big".to_owned(), 32_768),
        ]));
        for name in ["gpt-4o", "local", "anything"] {
            assert_eq!(
                windows.window(name, None),
                Window {
                    tokens: 2048,
                    source: WindowSource::Config
                },
                "{name}"
            );
        }
        assert_eq!(windows.window("big", None).tokens, 32_768);
        assert_eq!(windows.window("gpt-4o", Some(900)).tokens, 900);
    }
}
