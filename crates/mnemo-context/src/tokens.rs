//! Counting tokens: the [`TokenCounter`] trait and its implementations, and what one chat
//! message costs ([`message_tokens`]).
//!
//! - [`TiktokenCounter`]: exact for OpenAI model families (the BPE tables ship inside
//!   `tiktoken-rs`; nothing is downloaded).
//! - [`ApproxCounter`]: four characters per token, for models whose tokenizer mnemo cannot
//!   know. A server that can tokenize (llama.cpp's `/tokenize`) is wrapped by the engine into
//!   a counter of its own.
//! - [`counter_for_model`]: the exact counter when the model name says which BPE it uses,
//!   the approximation otherwise.
//!
//! A chat message costs its text (content, tool-call names and arguments) plus a fixed
//! per-message overhead for the chat template's framing, plus one token for a `name`.

use serde_json::Value;
use tiktoken_rs::CoreBPE;

/// Counts the tokens of a text, the way one model family's tokenizer does.
pub trait TokenCounter: Send + Sync {
    /// Tokens of `text`.
    fn count(&self, text: &str) -> usize;
    /// Tokens a chat message costs beyond its text (role and framing tokens).
    fn message_overhead(&self) -> usize;
    /// What counts: `tiktoken o200k_base`, `approx 4 chars/token`, ...
    fn name(&self) -> String;
    /// Whether the counts are exact for the model (not an estimate).
    fn is_exact(&self) -> bool;
}

/// Four characters per token, rounded up: the usual estimate when the tokenizer is unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproxCounter;

/// Characters per token of [`ApproxCounter`].
pub const CHARS_PER_TOKEN: usize = 4;

impl TokenCounter for ApproxCounter {
    fn count(&self, text: &str) -> usize {
        text.chars().count().div_ceil(CHARS_PER_TOKEN)
    }

    fn message_overhead(&self) -> usize {
        4
    }

    fn name(&self) -> String {
        format!("approx {CHARS_PER_TOKEN} chars/token")
    }

    fn is_exact(&self) -> bool {
        false
    }
}

/// An exact counter for one of OpenAI's BPE tokenizers.
pub struct TiktokenCounter {
    bpe: &'static CoreBPE,
    encoding: String,
}

impl std::fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl TiktokenCounter {
    /// The counter of the tokenizer `model` uses (`gpt-4o` → o200k_base, `gpt-4` →
    /// cl100k_base, ...; `openai:gpt-4o` as `gpt-4o`), or `None` when the name is not one
    /// of OpenAI's families.
    pub fn for_model(model: &str) -> Option<Self> {
        use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
        let bare = crate::window::split_provider(model).map(|(_, name)| name);
        let tokenizer = get_tokenizer(model).or_else(|| bare.and_then(get_tokenizer))?;
        let bpe = tiktoken_rs::bpe_for_tokenizer(tokenizer).ok()?;
        let encoding = match tokenizer {
            Tokenizer::O200kHarmony => "o200k_harmony",
            Tokenizer::O200kBase => "o200k_base",
            Tokenizer::Cl100kBase => "cl100k_base",
            Tokenizer::P50kBase => "p50k_base",
            Tokenizer::R50kBase => "r50k_base",
            Tokenizer::P50kEdit => "p50k_edit",
            Tokenizer::Gpt2 => "gpt2",
        };
        Some(Self {
            bpe,
            encoding: encoding.to_owned(),
        })
    }
}

impl TokenCounter for TiktokenCounter {
    fn count(&self, text: &str) -> usize {
        self.bpe.count_ordinary(text)
    }

    /// OpenAI's accounting for chat messages: three tokens of framing per message.
    fn message_overhead(&self) -> usize {
        3
    }

    fn name(&self) -> String {
        format!("tiktoken {}", self.encoding)
    }

    fn is_exact(&self) -> bool {
        true
    }
}

/// The exact counter for `model` when its tokenizer is known, else the approximation.
pub fn counter_for_model(model: &str) -> Box<dyn TokenCounter> {
    match TiktokenCounter::for_model(model) {
        Some(counter) => Box::new(counter),
        None => Box::new(ApproxCounter),
    }
}

/// Entries a [`CachedCounter`] keeps before it starts afresh.
const CACHE_CAPACITY: usize = 100_000;

/// A counter that remembers what it counted, by a hash of the text: clients resend their
/// whole history with every request, and counting megabytes of tool output again each time
/// would cost more than the rest of governance. Counts can also be given to it in advance
/// ([`remember`](Self::remember)), for a tokenizer that is only reachable asynchronously (a
/// server's); texts it was not given are counted by the inner counter.
pub struct CachedCounter<C> {
    inner: C,
    counts: std::sync::Mutex<std::collections::HashMap<u64, usize>>,
    label: Option<(String, bool)>,
}

impl<C: TokenCounter> CachedCounter<C> {
    /// A cache in front of `inner`.
    pub fn new(inner: C) -> Self {
        Self {
            inner,
            counts: Default::default(),
            label: None,
        }
    }

    /// Names the counter after the tokenizer whose counts are [remembered](Self::remember)
    /// rather than after the inner one, and says whether they are exact.
    pub fn labelled(mut self, name: impl Into<String>, exact: bool) -> Self {
        self.label = Some((name.into(), exact));
        self
    }

    /// Whether `text`'s count is known.
    pub fn knows(&self, text: &str) -> bool {
        self.lock().contains_key(&text_hash(text))
    }

    /// Records that `text` is `tokens` tokens.
    pub fn remember(&self, text: &str, tokens: usize) {
        let mut counts = self.lock();
        if counts.len() >= CACHE_CAPACITY {
            counts.clear();
        }
        counts.insert(text_hash(text), tokens);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, usize>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<C: TokenCounter> TokenCounter for CachedCounter<C> {
    fn count(&self, text: &str) -> usize {
        let key = text_hash(text);
        if let Some(tokens) = self.lock().get(&key) {
            return *tokens;
        }
        let tokens = self.inner.count(text);
        self.remember(text, tokens);
        tokens
    }

    fn message_overhead(&self) -> usize {
        self.inner.message_overhead()
    }

    fn name(&self) -> String {
        match &self.label {
            Some((name, _)) => name.clone(),
            None => self.inner.name(),
        }
    }

    fn is_exact(&self) -> bool {
        match &self.label {
            Some((_, exact)) => *exact,
            None => self.inner.is_exact(),
        }
    }
}

impl<C: TokenCounter + ?Sized> TokenCounter for Box<C> {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }

    fn message_overhead(&self) -> usize {
        (**self).message_overhead()
    }

    fn name(&self) -> String {
        (**self).name()
    }

    fn is_exact(&self) -> bool {
        (**self).is_exact()
    }
}

fn text_hash(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// The text of a message that costs tokens: its content (text parts of a multi-part content,
/// or a non-string content as JSON) and its tool calls' names and arguments.
pub fn message_text(message: &Value) -> String {
    let mut text = match &message["content"] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (&p["type"], &p["text"]) {
                (_, Value::String(t)) => t.clone(),
                _ => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    };
    if let Some(calls) = message["tool_calls"].as_array() {
        for call in calls {
            text.push('\n');
            text.push_str(call["function"]["name"].as_str().unwrap_or_default());
            text.push(' ');
            text.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    text
}

/// Tokens one chat message costs: its text, the framing, and one for a `name`.
pub fn message_tokens(counter: &dyn TokenCounter, message: &Value) -> usize {
    let name = usize::from(message.get("name").is_some_and(|n| !n.is_null()));
    let text = match (&message["content"], message.get("tool_calls")) {
        // The common case, counted without copying the text.
        (Value::String(content), None | Some(Value::Null)) => counter.count(content),
        _ => counter.count(&message_text(message)),
    };
    text + counter.message_overhead() + name
}

/// Tokens a list of messages costs, including the three that prime the reply.
pub fn messages_tokens(counter: &dyn TokenCounter, messages: &[Value]) -> usize {
    messages
        .iter()
        .map(|m| message_tokens(counter, m))
        .sum::<usize>()
        + 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_families_are_counted_exactly() {
        let counter = TiktokenCounter::for_model("gpt-4o-mini").unwrap();
        assert_eq!(counter.name(), "tiktoken o200k_base");
        assert_eq!(counter.count("hello world"), 2);
        assert!(TiktokenCounter::for_model("gpt-4").is_some());
        let prefixed = TiktokenCounter::for_model("openai:gpt-4o-mini").unwrap();
        assert_eq!(prefixed.name(), "tiktoken o200k_base");
        assert!(TiktokenCounter::for_model("qwen2.5-coder-1.5b-instruct").is_none());
    }

    #[test]
    fn the_approximation_is_four_characters_a_token() {
        assert_eq!(ApproxCounter.count(""), 0);
        assert_eq!(ApproxCounter.count("abcd"), 1);
        assert_eq!(ApproxCounter.count("abcde"), 2);
        assert_eq!(ApproxCounter.count("ééééé"), 2, "characters, not bytes");
    }

    #[test]
    fn a_message_costs_its_text_tool_calls_framing_and_name() {
        let counter = ApproxCounter;
        let plain = json!({"role": "user", "content": "abcdefgh"});
        assert_eq!(message_tokens(&counter, &plain), 2 + 4);
        let named = json!({"role": "user", "name": "Ann", "content": "abcdefgh"});
        assert_eq!(message_tokens(&counter, &named), 2 + 4 + 1);
        let call = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"d\":1}"}}
        ]});
        assert_eq!(message_text(&call), "\nls {\"d\":1}");
        let parts = json!({"role": "user", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}
        ]});
        assert_eq!(message_text(&parts), "one\ntwo");
        assert_eq!(
            messages_tokens(&counter, &[plain.clone(), plain]),
            2 * (2 + 4) + 3
        );
    }

    #[test]
    fn the_cache_counts_a_text_once_and_takes_counts_given_in_advance() {
        struct Counting(std::sync::atomic::AtomicUsize);
        impl TokenCounter for Counting {
            fn count(&self, text: &str) -> usize {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ApproxCounter.count(text)
            }
            fn message_overhead(&self) -> usize {
                4
            }
            fn name(&self) -> String {
                "counting".into()
            }
            fn is_exact(&self) -> bool {
                false
            }
        }
        let cached = CachedCounter::new(Counting(Default::default()));
        let long = "tool output line\n".repeat(100);
        assert_eq!(cached.count(&long), cached.count(&long));
        assert_eq!(cached.inner.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        let given = "y".repeat(200);
        cached.remember(&given, 7);
        assert!(cached.knows(&given));
        assert_eq!(cached.count(&given), 7, "a count given in advance wins");
        let server = CachedCounter::new(ApproxCounter).labelled("llama.cpp /tokenize", true);
        assert_eq!(
            (server.name().as_str(), server.is_exact()),
            ("llama.cpp /tokenize", true)
        );
    }
}
