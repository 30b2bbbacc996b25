//! Governance state that lives as long as the engine: model windows, token counters and
//! their caches (the local model's counts asked of its own server), and each conversation's
//! and session's inflation guard. The governance steps themselves are in [`crate::chat::governance`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mnemo_context::tokens::{message_text, TiktokenCounter};
use mnemo_context::{ApproxCounter, CachedCounter, ContextWindows, InflationGuard, TokenCounter};
use mnemo_core::LOCAL_LLM_ALIAS;
use mnemo_llm::LlmClient;
use serde_json::Value;
use tracing::warn;

/// Tokens of conversation one summary call may carry, at most; less for a small window.
const SUMMARY_CHUNK_TOKENS: usize = 16_000;

/// Texts tokenized through the local LLM's server at once, at most.
const TOKENIZE_CONCURRENCY: usize = 4;

/// Inflation guards kept before idle ones are dropped (as the per-conversation locks are).
const KEPT_GUARDS: usize = 1024;

/// Governance state that lives as long as the engine: windows, token counters and their
/// caches, and each conversation's inflation guard.
pub(crate) struct ContextState {
    windows: ContextWindows,
    /// The local LLM's counts, given by its server and cached.
    local: Arc<CachedCounter<ApproxCounter>>,
    counters: Mutex<HashMap<String, Arc<dyn TokenCounter>>>,
    /// Set when the upstream serving the local model's name has no llama.cpp `/tokenize`
    /// (another server given the same model name): its counts are estimated from then on,
    /// and the warning is given once.
    no_tokenizer: std::sync::atomic::AtomicBool,
    /// By `c/<conversation>` or `s/<session>`.
    guards: Mutex<HashMap<String, Arc<InflationGuard>>>,
    /// Compactions asked for the next request, with their focus, by the same keys.
    compact_requests: Mutex<HashMap<String, Option<String>>>,
}

impl ContextState {
    pub(crate) fn new(config: &mnemo_context::ContextConfig) -> Self {
        Self {
            windows: ContextWindows::new(config.windows.clone()),
            local: Arc::new(
                CachedCounter::new(ApproxCounter)
                    .labelled("local LLM tokenizer (llama.cpp /tokenize)", true),
            ),
            counters: Mutex::default(),
            no_tokenizer: Default::default(),
            guards: Mutex::default(),
            compact_requests: Mutex::default(),
        }
    }

    /// The counter for `model`, one per tokenizer, cached for the engine's life.
    pub(crate) fn counter(&self, model: &str) -> Arc<dyn TokenCounter> {
        if model == LOCAL_LLM_ALIAS {
            return self.local.clone();
        }
        let exact = TiktokenCounter::for_model(model);
        let key = exact.as_ref().map(|c| c.name()).unwrap_or_default();
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        counters
            .entry(key)
            .or_insert_with(|| -> Arc<dyn TokenCounter> {
                match exact {
                    Some(exact) => Arc::new(CachedCounter::new(exact)),
                    None => Arc::new(ApproxCounter),
                }
            })
            .clone()
    }

    /// `model`'s window, or the strategy's `requested` one.
    pub(crate) fn window(
        &self,
        model: &str,
        requested: Option<u64>,
    ) -> mnemo_context::window::Window {
        self.windows.window(model, requested)
    }

    pub(crate) fn guard(&self, key: String) -> Arc<InflationGuard> {
        let mut guards = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        if guards.len() >= KEPT_GUARDS && !guards.contains_key(&key) {
            // Idle ones (no request holds them) give way: one per conversation ever seen
            // grew without bound. An idle conversation's next request may try a summary
            // its guard would have spared once more.
            guards.retain(|_, guard| Arc::strong_count(guard) > 1);
        }
        guards.entry(key).or_default().clone()
    }

    /// Marks `key` (`c/<conversation>`, `s/<session>`) so that its next request compacts
    /// with `focus`; a later ask replaces an earlier one.
    pub(crate) fn request_compact(&self, key: String, focus: Option<String>) {
        let mut requests = self
            .compact_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        requests.insert(key, focus);
    }

    /// Whether `key`'s next request is to compact.
    pub(crate) fn compact_requested(&self, key: &str) -> bool {
        let requests = self
            .compact_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        requests.contains_key(key)
    }

    /// Takes `key`'s compaction request: `Some(focus)` when there was one.
    pub(crate) fn take_compact_request(&self, key: &str) -> Option<Option<String>> {
        let mut requests = self
            .compact_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        requests.remove(key)
    }

    /// Counts, through the local LLM's own tokenizer, the message texts its counter does not
    /// know yet, through `llm` (the upstream serving the local model). A text the server
    /// cannot count stays estimated.
    pub(crate) async fn count_on_the_server(&self, llm: &LlmClient, messages: &[Value]) {
        use futures_util::stream::{self, StreamExt};
        use std::sync::atomic::Ordering;
        let state = self;
        if state.no_tokenizer.load(Ordering::Relaxed) {
            return;
        }
        let cache = &state.local;
        let unknown: Vec<String> = messages
            .iter()
            .map(message_text)
            .filter(|text| !text.is_empty() && !cache.knows(text))
            .collect();
        let counted: Vec<(String, Result<usize, mnemo_llm::LlmError>)> = stream::iter(unknown)
            .map(|text| async move {
                let tokens = llm.count_tokens(&text).await;
                (text, tokens)
            })
            .buffer_unordered(TOKENIZE_CONCURRENCY)
            .collect()
            .await;
        for (text, tokens) in counted {
            match tokens {
                Ok(tokens) => cache.remember(&text, tokens),
                // Answered, but not as llama.cpp does: no tokenizer there, now or later.
                Err(
                    e @ (mnemo_llm::LlmError::Status { .. }
                    | mnemo_llm::LlmError::InvalidOutput { .. }),
                ) => {
                    warn!("the upstream has no llama.cpp tokenizer ({e}); token counts are estimated from now on");
                    state.no_tokenizer.store(true, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    warn!("the local LLM cannot count tokens ({e}); estimating");
                    break;
                }
            }
        }
    }
}

/// Tokens of conversation one summary call may carry, for a model with `window` tokens.
pub(crate) fn summary_chunk_tokens(window: u64) -> usize {
    SUMMARY_CHUNK_TOKENS.min(window as usize / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_inflation_guards_give_way_past_the_bound() {
        let state = ContextState::new(&mnemo_context::ContextConfig::default());
        let held = state.guard("c/held".into());
        for i in 0..3 * KEPT_GUARDS {
            drop(state.guard(format!("c/{i}")));
        }
        let guards = state.guards.lock().unwrap();
        assert!(guards.len() <= KEPT_GUARDS, "{}", guards.len());
        assert!(
            Arc::ptr_eq(&guards["c/held"], &held),
            "a guard a request holds stays"
        );
    }
}
