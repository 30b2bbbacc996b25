//! Compressing a [`ConversationBuffer`] when it nears the model's window: [`Compressor`].
//!
//! Past `threshold` of the window, everything but the system entries and the latest
//! question (the last user entry and what follows it) goes to the summariser, with the
//! buffer's previous summary; the buffer becomes system prompt + summary + latest question.

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::buffer::{ConversationBuffer, EntryRole};
use crate::pipeline::{Callbacks, ContextReport};
use crate::summarize::{Summariser, SummaryRequest};
use crate::tokens::{messages_tokens, TokenCounter};

/// A [`Summariser`] from an async closure: `FnSummariser(|request| async { ... })`.
pub struct FnSummariser<F>(pub F);

impl<F, Fut> Summariser for FnSummariser<F>
where
    F: Fn(SummaryRequest) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<String, String>> + Send + 'static,
{
    fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>> {
        Box::pin((self.0)(request))
    }
}

/// Compresses a buffer that nears its model's window.
pub struct Compressor<'a> {
    /// The model's window.
    pub window: u64,
    /// Share of the window past which the buffer is compressed.
    pub threshold: f64,
    /// Counts the buffer's tokens.
    pub counter: &'a dyn TokenCounter,
    /// Writes the summary.
    pub summariser: &'a dyn Summariser,
    /// The model the summariser is asked to use.
    pub model: String,
    /// Hooks.
    pub callbacks: Option<&'a dyn Callbacks>,
}

impl Compressor<'_> {
    /// Compresses `buffer` if it is past the threshold; returns what was done, or `None` when
    /// nothing was due. On a summariser failure the buffer is left as it was.
    pub async fn compress(
        &self,
        buffer: &mut ConversationBuffer,
    ) -> Result<Option<ContextReport>, String> {
        let messages: Vec<Value> = buffer.to_messages();
        let tokens = messages_tokens(self.counter, &messages);
        if let Some(callbacks) = self.callbacks {
            callbacks.on_usage_update(tokens, self.window);
        }
        if (tokens as f64) <= self.threshold * self.window as f64 {
            return Ok(None);
        }
        let entries = buffer.entries();
        let system = entries
            .iter()
            .take_while(|e| e.role == EntryRole::System)
            .count();
        let question = entries
            .iter()
            .rposition(|e| e.role == EntryRole::User)
            .unwrap_or(entries.len())
            .max(system);
        let middle: Vec<Value> = entries[system..question]
            .iter()
            .map(|e| e.to_message())
            .collect();
        if middle.is_empty() {
            return Ok(None);
        }
        if let Some(callbacks) = self.callbacks {
            callbacks.on_before_compress(middle.len(), messages_tokens(self.counter, &middle));
        }
        let summary = self
            .summariser
            .summarise(SummaryRequest {
                previous: buffer.summary().map(str::to_owned),
                messages: middle.clone(),
                focus: None,
                instructions: None,
                model: self.model.clone(),
            })
            .await?;
        let mut kept = entries[..system].to_vec();
        kept.extend_from_slice(&entries[question..]);
        buffer.replace_entries(kept);
        buffer.set_summary(Some(summary.trim().to_owned()));
        let report = ContextReport {
            tokens_before: tokens,
            tokens_after: messages_tokens(self.counter, &buffer.to_messages()),
            window: self.window,
            counter: self.counter.name(),
            stages: vec!["summarize"],
            summarised_messages: middle.len(),
            ..ContextReport::default()
        };
        if let Some(callbacks) = self.callbacks {
            callbacks.on_after_compress(&report);
        }
        Ok(Some(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::ApproxCounter;

    #[tokio::test]
    async fn past_the_threshold_the_buffer_becomes_system_summary_and_question() {
        let mut buffer = ConversationBuffer::new();
        buffer.system("You help with gardening.");
        for i in 0..20 {
            buffer.user(format!("Tell me about plant number {i} in the greenhouse."));
            buffer.assistant(format!("Plant number {i} needs water every second day."));
        }
        buffer.user("Which plants need the most water?");
        let summariser = FnSummariser(|request: SummaryRequest| async move {
            Ok(format!(
                "{} messages about watering plants.",
                request.messages.len()
            ))
        });
        let compressor = Compressor {
            window: 500,
            threshold: 0.8,
            counter: &ApproxCounter,
            summariser: &summariser,
            model: "m".into(),
            callbacks: None,
        };
        let report = compressor
            .compress(&mut buffer)
            .await
            .unwrap()
            .expect("compressed");
        assert_eq!(report.summarised_messages, 40);
        assert!(report.tokens_after < report.tokens_before);
        assert_eq!(buffer.summary(), Some("40 messages about watering plants."));
        let messages = buffer.to_messages();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["role"], "system");
        assert!(messages[1]["content"]
            .as_str()
            .unwrap()
            .contains("40 messages"));
        assert_eq!(messages[2]["content"], "Which plants need the most water?");
        assert!(
            compressor.compress(&mut buffer).await.unwrap().is_none(),
            "below the threshold now"
        );
    }
}
