//! Chats through the client: the one way in ([`ScopedClient::chat`]), and what the chat
//! wing counts (tokens, windows, upstream usage).

use std::sync::Arc;

use mnemo_core::ConversationId;
use serde_json::Value;

use crate::access::Unrestricted;
use crate::chat::ChatReply;
use crate::client::scoped::ScopedClient;
use crate::client::MemoryClient;
use crate::error::EngineError;
use crate::state::usage::UsageTotals;

impl MemoryClient {
    /// A chat completion through memory for the store's owner: [`ScopedClient::chat`] with
    /// nothing out of reach.
    pub async fn chat(&self, body: Value) -> Result<ChatReply, EngineError> {
        self.as_caller(Arc::new(Unrestricted)).chat(body).await
    }
}

impl ScopedClient {
    /// A chat completion through memory, the one way in: memory fields out, memories in, the
    /// request governed, the user's turn written, the request forwarded upstream, and the
    /// answer stored and learnt from in the background. The caller's access is checked once
    /// the request's conversation and agent are known (a session decides them). The reply is
    /// whole or streamed as the body's `stream` asks.
    ///
    /// A whole answer is awaited in a task of its own, which the engine waits for at
    /// shutdown: the turn is finished — the answer stored, logged in its session, the write
    /// path run — even when the caller stops waiting (an HTTP client that went away). A
    /// streamed turn is finished when its stream ends or is dropped.
    pub async fn chat(&self, body: Value) -> Result<ChatReply, EngineError> {
        self.client
            .engine
            .chat()
            .chat(body, self.access.clone())
            .await
    }
}

impl MemoryClient {
    /// The upstream tokens and cost of `conversation`'s answers, sessions' included.
    pub async fn conversation_usage(
        &self,
        conversation: &ConversationId,
    ) -> Result<UsageTotals, EngineError> {
        self.engine.chat().conversation_usage(conversation).await
    }

    /// The context window of `model`, as governance knows it (the configuration's
    /// overrides, the local LLM's own context size, the bundled data).
    pub fn context_window(&self, model: &str) -> u64 {
        self.engine.chat().context_window(model)
    }

    /// The tokens of `messages` as governance counts them for `model` (the local LLM's own
    /// tokenizer for the local model).
    pub async fn count_message_tokens(&self, model: &str, messages: &[Value]) -> usize {
        self.engine
            .chat()
            .count_message_tokens(model, messages)
            .await
    }

    /// The upstream tokens and cost of every answer since the engine opened.
    pub fn usage_since_start(&self) -> UsageTotals {
        self.engine.chat().usage_since_start()
    }
}
