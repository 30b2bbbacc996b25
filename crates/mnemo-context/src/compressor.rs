//! Compressing a [`ConversationBuffer`] when it nears the model's window: [`Compressor`].
//!
//! Past a share of the window ([`DEFAULT_THRESHOLD`] unless set), everything but the system
//! entries and the latest question (the last user entry and what follows it) goes to the
//! summariser, with the buffer's previous summary. The buffer then becomes system prompt +
//! summary + latest question, the summary either in the buffer's summary field
//! ([`CompressedShape::SummaryField`]) or as an assistant's answer to a question
//! ([`CompressedShape::QuestionAndAnswer`], the shape Midori's compressor leaves).
//!
//! The window is the one the proxy uses for the same model name ([`ContextWindows`]), so a
//! library user and the proxy agree on when a conversation is too long.

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use crate::buffer::{messages_of, ConversationBuffer, Entry, EntryRole};
use crate::pipeline::{Callbacks, ContextReport};
use crate::summarize::{Summariser, SummaryRequest};
use crate::tokens::{messages_tokens, TokenCounter, CHARS_PER_TOKEN};
use crate::window::{ContextWindows, Window};

/// The share of the window past which a buffer is compressed by default. Lower than the
/// proxy's `compress_threshold` (0.9): an agent's own buffer is compressed between turns,
/// and the turn still to come (a question, tool calls and their outputs) needs room that a
/// proxy, compressing the very request it sends, does not have to leave. It is also what
/// Midori's compressor used.
pub const DEFAULT_THRESHOLD: f64 = 0.8;

/// Tokens past which [`Compressor::after_tool_call`] cuts a tool output: the proxy's
/// `offload_tokens`.
pub const DEFAULT_TOOL_OUTPUT_LIMIT: u64 = crate::strategy::DEFAULT_OFFLOAD_TOKENS;

/// The question [`CompressedShape::QuestionAndAnswer`] asks, as Midori asks it.
pub const REMEMBER_QUESTION: &str = "What do you remember about our chat?";

/// Where a compressed buffer keeps its summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompressedShape {
    /// In the buffer's summary field, sent after the system entries as a user message
    /// ([`ConversationBuffer::to_messages`]); the entries hold only real turns.
    #[default]
    SummaryField,
    /// As entries: a user entry asking [`REMEMBER_QUESTION`] (or the compressor's own
    /// question, [`Compressor::with_question`]) and the summary as the
    /// assistant's answer, after the system entries and before the latest question. The
    /// summary field is emptied. A model reads its own earlier answer as something it said,
    /// and code written for Midori's compressed memory finds the shape it expects.
    QuestionAndAnswer,
}

/// A threshold that is not a share of the window.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("the compression threshold is a share of the window, above 0 and at most 1, not {0}")]
pub struct InvalidThreshold(pub f64);

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
///
/// ```no_run
/// # use mnemo_context::{ApproxCounter, compressor::*, summarize::SummaryRequest};
/// # async fn run(buffer: &mut mnemo_context::buffer::ConversationBuffer) -> Result<(), Box<dyn std::error::Error>> {
/// let summariser = FnSummariser(|_request: SummaryRequest| async move { Ok(String::from("…")) });
/// let compressor = Compressor::new("openai:gpt-4.1", &ApproxCounter, &summariser)
///     .with_threshold(0.75)?
///     .with_summary_prompt("List the decisions and the open tasks.")
///     .with_shape(CompressedShape::QuestionAndAnswer);
/// compressor.compress(buffer).await?;
/// # Ok(()) }
/// ```
pub struct Compressor<'a> {
    model: String,
    counter: &'a dyn TokenCounter,
    summariser: &'a dyn Summariser,
    window: Option<u64>,
    windows: Option<&'a ContextWindows>,
    threshold: f64,
    summary_model: Option<String>,
    summary_prompt: Option<String>,
    shape: CompressedShape,
    question: String,
    tool_output_limit: u64,
    callbacks: Option<&'a dyn Callbacks>,
}

impl<'a> Compressor<'a> {
    /// A compressor for a buffer sent to `model`, whose window is looked up by that name
    /// (a provider in front, `openai:gpt-4.1`, is understood); [`DEFAULT_THRESHOLD`], the
    /// default summary prompt, [`CompressedShape::SummaryField`].
    pub fn new(
        model: impl Into<String>,
        counter: &'a dyn TokenCounter,
        summariser: &'a dyn Summariser,
    ) -> Self {
        Self {
            model: model.into(),
            counter,
            summariser,
            window: None,
            windows: None,
            threshold: DEFAULT_THRESHOLD,
            summary_model: None,
            summary_prompt: None,
            shape: CompressedShape::default(),
            question: REMEMBER_QUESTION.to_owned(),
            tool_output_limit: DEFAULT_TOOL_OUTPUT_LIMIT,
            callbacks: None,
        }
    }

    /// The window in tokens, whatever the model: for a model the bundled data does not know
    /// (a local one), or one served with a smaller context than its maker's.
    pub fn with_window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// Looks the model up in `windows` (the configuration's `[context.windows]` overrides
    /// first), as the proxy does. An explicit [`Compressor::with_window`] still wins.
    pub fn with_windows(mut self, windows: &'a ContextWindows) -> Self {
        self.windows = Some(windows);
        self
    }

    /// Compresses past `threshold` of the window instead of [`DEFAULT_THRESHOLD`]; a value
    /// outside (0, 1] is refused, since it would compress every turn or never.
    pub fn with_threshold(mut self, threshold: f64) -> Result<Self, InvalidThreshold> {
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Err(InvalidThreshold(threshold));
        }
        self.threshold = threshold;
        Ok(self)
    }

    /// Asks the summariser for `model` rather than the buffer's model (a cheaper one).
    pub fn with_summary_model(mut self, model: impl Into<String>) -> Self {
        self.summary_model = Some(model.into());
        self
    }

    /// The summary's instructions in place of the default
    /// ([`crate::summarize::INSTRUCTIONS`]); the previous summary and the conversation still
    /// follow them ([`crate::summarize::prompt`]).
    pub fn with_summary_prompt(mut self, instructions: impl Into<String>) -> Self {
        self.summary_prompt = Some(instructions.into());
        self
    }

    /// Where the compressed buffer keeps its summary.
    pub fn with_shape(mut self, shape: CompressedShape) -> Self {
        self.shape = shape;
        self
    }

    /// Hooks told the usage, and before and after a compression.
    pub fn with_callbacks(mut self, callbacks: &'a dyn Callbacks) -> Self {
        self.callbacks = Some(callbacks);
        self
    }

    /// The window compressions are measured against, and where it came from (an explicit
    /// window reads as [`crate::window::WindowSource::Strategy`], the source of a window someone
    /// asked for).
    pub fn window(&self) -> Window {
        match self.windows {
            Some(windows) => windows.window(&self.model, self.window),
            None => ContextWindows::default().window(&self.model, self.window),
        }
    }

    /// The share of the window past which the buffer is compressed.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The question [`CompressedShape::QuestionAndAnswer`] asks before the summary, in
    /// place of [`REMEMBER_QUESTION`] (an agent in another language, or one whose code looks
    /// for its own wording).
    pub fn with_question(mut self, question: impl Into<String>) -> Self {
        self.question = question.into();
        self
    }

    /// Tool outputs over this many tokens ([`CHARS_PER_TOKEN`] characters each) are cut by
    /// [`Compressor::after_tool_call`]; [`DEFAULT_TOOL_OUTPUT_LIMIT`] unless set.
    pub fn with_tool_output_limit(mut self, tokens: u64) -> Self {
        self.tool_output_limit = tokens.max(1);
        self
    }

    /// The hook to call as a tool's output arrives, before it goes into the buffer
    /// (pydantic-deep's middleware): an output over the tool-output limit becomes its first
    /// and last lines with its size, so one huge result cannot fill the window before the
    /// next compression; a smaller one comes back as it is.
    pub fn after_tool_call(&self, call_id: &str, output: &str) -> String {
        let tokens = output.chars().count().div_ceil(CHARS_PER_TOKEN) as u64;
        if tokens <= self.tool_output_limit {
            return output.to_owned();
        }
        crate::offload::head_and_tail(
            &format!(
                "[Tool output of call {call_id} cut as it arrived: {} characters in {} lines, over {} tokens. First and last lines:]",
                output.chars().count(),
                output.lines().count(),
                self.tool_output_limit
            ),
            output,
        )
    }

    /// Whether `buffer` is past the threshold, so that [`Compressor::compress`] would call
    /// the summariser: for an agent that decides when to compress, or says so first.
    pub fn should_compress(&self, buffer: &ConversationBuffer) -> bool {
        self.should_compress_with(buffer, "")
    }

    /// [`Compressor::should_compress`] for a buffer sent with `system_context`: what goes
    /// with every request but is not in the buffer (a system prompt the agent keeps apart,
    /// tool definitions, injected memories). It takes room in the window, so it counts
    /// towards the threshold; it is never summarised.
    pub fn should_compress_with(&self, buffer: &ConversationBuffer, system_context: &str) -> bool {
        let tokens = self.tokens(buffer, system_context);
        let (system, question) = cut(buffer.entries());
        (tokens as f64) > self.threshold * self.window().tokens as f64 && question > system
    }

    /// Compresses `buffer` if it is past the threshold; returns what was done, or `None` when
    /// nothing was due. On a summariser failure the buffer is left as it was.
    pub async fn compress(
        &self,
        buffer: &mut ConversationBuffer,
    ) -> Result<Option<ContextReport>, String> {
        self.compress_with(buffer, "").await
    }

    /// [`Compressor::compress`] for a buffer sent with `system_context`
    /// ([`Compressor::should_compress_with`]); the report's token counts include it.
    pub async fn compress_with(
        &self,
        buffer: &mut ConversationBuffer,
        system_context: &str,
    ) -> Result<Option<ContextReport>, String> {
        let window = self.window();
        let tokens = self.tokens(buffer, system_context);
        if let Some(callbacks) = self.callbacks {
            let used = tokens as f64 / window.tokens.max(1) as f64;
            callbacks.on_usage_update(used, tokens, window.tokens);
        }
        if (tokens as f64) <= self.threshold * window.tokens as f64 {
            return Ok(None);
        }
        let (system, question) = cut(buffer.entries());
        let middle = messages_of(&buffer.entries()[system..question]);
        if middle.is_empty() {
            return Ok(None);
        }
        if let Some(callbacks) = self.callbacks {
            // Where the kept part begins in `to_messages()`, which may add messages (a kept
            // summary, recorded results) that are not entries.
            let kept = messages_of(&buffer.entries()[question..]).len();
            callbacks.on_before_compress(&middle, buffer.to_messages().len() - kept);
        }
        let summary = self.summarise(buffer.summary(), middle.clone()).await?;
        self.rebuild(buffer, (system, question), summary.trim(), middle.len());
        let injected = self.inject_after_summary(buffer, system);
        let report = ContextReport {
            tokens_before: tokens,
            tokens_after: self.tokens(buffer, system_context),
            window: window.tokens,
            window_source: Some(window.source),
            counter: self.counter.name(),
            stages: vec!["summarize"],
            summarised_messages: middle.len(),
            injected_tokens: injected,
            ..ContextReport::default()
        };
        if let Some(callbacks) = self.callbacks {
            callbacks.on_governed(&report);
        }
        Ok(Some(report))
    }

    /// The tokens of `buffer`'s messages and of `system_context` sent beside them.
    fn tokens(&self, buffer: &ConversationBuffer, system_context: &str) -> usize {
        let mut messages = buffer.to_messages();
        if !system_context.is_empty() {
            messages.push(json!({"role": "system", "content": system_context}));
        }
        messages_tokens(self.counter, &messages)
    }

    async fn summarise(
        &self,
        previous: Option<&str>,
        messages: Vec<Value>,
    ) -> Result<String, String> {
        self.summariser
            .summarise(SummaryRequest {
                previous: previous.map(str::to_owned),
                messages,
                focus: None,
                instructions: self.summary_prompt.clone(),
                model: self
                    .summary_model
                    .clone()
                    .unwrap_or_else(|| self.model.clone()),
            })
            .await
    }

    /// What `on_after_compress` returns, as a user entry right after the summary (the
    /// pydantic-deep contract); its tokens, 0 when nothing came.
    fn inject_after_summary(&self, buffer: &mut ConversationBuffer, system: usize) -> usize {
        let Some(callbacks) = self.callbacks else {
            return 0;
        };
        // In the messages the summary sits after the system entries: as the summary field's
        // message, or as the answer after the question.
        let (summary_at, entry_at) = match self.shape {
            CompressedShape::SummaryField => (system, system),
            CompressedShape::QuestionAndAnswer => (system + 1, system + 2),
        };
        let text = callbacks.on_after_compress(&buffer.to_messages(), summary_at);
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return 0;
        };
        let entry = buffer.stamped(Entry::new(EntryRole::User, text));
        let tokens = messages_tokens(self.counter, &[entry.to_message()]);
        let mut entries = buffer.entries().to_vec();
        entries.insert(entry_at.min(entries.len()), entry);
        buffer.replace_entries(entries);
        tokens
    }

    /// The buffer as system entries + summary + the entries from `question` on.
    fn rebuild(
        &self,
        buffer: &mut ConversationBuffer,
        (system, question): (usize, usize),
        summary: &str,
        summarised: usize,
    ) {
        let entries = buffer.entries();
        let mut kept = entries[..system].to_vec();
        let latest = entries[question..].to_vec();
        match self.shape {
            CompressedShape::SummaryField => buffer.set_summary(Some(summary.to_owned())),
            CompressedShape::QuestionAndAnswer => {
                kept.push(buffer.stamped(Entry::new(EntryRole::User, self.question.as_str())));
                let mut answer = buffer.stamped(Entry::new(EntryRole::Assistant, summary));
                answer.metadata.insert("compressed".into(), json!(true));
                answer
                    .metadata
                    .insert("summarised_messages".into(), json!(summarised));
                kept.push(answer);
                buffer.set_summary(None);
            }
        }
        kept.extend(latest);
        buffer.replace_entries(kept);
    }
}

/// Where `entries` are cut: the leading system entries end at the first index, the latest
/// question starts at the second (the end when there is no user entry).
fn cut(entries: &[Entry]) -> (usize, usize) {
    let system = entries
        .iter()
        .take_while(|e| e.role == EntryRole::System)
        .count();
    let question = entries
        .iter()
        .rposition(|e| e.role == EntryRole::User)
        .unwrap_or(entries.len())
        .max(system);
    (system, question)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::ApproxCounter;
    use crate::window::{known_window, WindowSource, DEFAULT_WINDOW};

    fn gardening() -> ConversationBuffer {
        let mut buffer = ConversationBuffer::new();
        buffer.system("You help with gardening.");
        for i in 0..20 {
            buffer.user(format!("Tell me about plant number {i} in the greenhouse."));
            buffer.assistant(format!("Plant number {i} needs water every second day."));
        }
        buffer.user("Which plants need the most water?");
        buffer
    }

    fn counting(
    ) -> FnSummariser<impl Fn(SummaryRequest) -> BoxFuture<'static, Result<String, String>>> {
        FnSummariser(
            |request: SummaryRequest| -> BoxFuture<'static, Result<String, String>> {
                Box::pin(async move {
                    Ok(format!(
                        "{} messages about watering plants.",
                        request.messages.len()
                    ))
                })
            },
        )
    }

    /// A summariser that answers with what it was asked: the instructions and the model.
    fn echoing(
    ) -> FnSummariser<impl Fn(SummaryRequest) -> BoxFuture<'static, Result<String, String>>> {
        FnSummariser(
            |request: SummaryRequest| -> BoxFuture<'static, Result<String, String>> {
                Box::pin(async move {
                    let instructions = request.instructions.unwrap_or_else(|| "default".into());
                    Ok(format!("{instructions} / {}", request.model))
                })
            },
        )
    }

    fn tokens(buffer: &ConversationBuffer) -> u64 {
        messages_tokens(&ApproxCounter, &buffer.to_messages()) as u64
    }

    #[tokio::test]
    async fn past_the_threshold_the_buffer_becomes_system_summary_and_question() {
        let mut buffer = gardening();
        let summariser = counting();
        let compressor = Compressor::new("m", &ApproxCounter, &summariser).with_window(500);
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

    #[tokio::test]
    async fn the_window_comes_from_the_model_name_unless_given() {
        let summariser = counting();
        let known = Compressor::new("openai:gpt-4.1", &ApproxCounter, &summariser);
        assert_eq!(known.window().source, WindowSource::GenaiPrices);
        assert_eq!(Some(known.window().tokens), known_window("gpt-4.1"));
        let unknown = Compressor::new("my-own-model-7b", &ApproxCounter, &summariser);
        assert_eq!(unknown.window().tokens, DEFAULT_WINDOW);
        let mut windows = ContextWindows::default();
        windows.set("my-own-model-7b", 500);
        let configured =
            Compressor::new("my-own-model-7b", &ApproxCounter, &summariser).with_windows(&windows);
        assert_eq!(configured.window().tokens, 500);
        let explicit = configured.with_window(300);
        assert_eq!(explicit.window().tokens, 300, "an explicit window wins");

        // The gardening buffer is far below a known model's window, over the configured one.
        let mut buffer = gardening();
        assert!(known.compress(&mut buffer).await.unwrap().is_none());
        let configured =
            Compressor::new("my-own-model-7b", &ApproxCounter, &summariser).with_windows(&windows);
        let report = configured.compress(&mut buffer).await.unwrap().unwrap();
        assert_eq!(
            (report.window, report.window_source),
            (500, Some(WindowSource::Config))
        );
    }

    #[tokio::test]
    async fn by_default_it_compresses_past_80_percent_of_the_window() {
        let summariser = counting();
        let buffer = gardening();
        // The buffer fills 85% of this window: past the default, short of 0.9.
        let window = tokens(&buffer) * 100 / 85;
        let compressor = Compressor::new("m", &ApproxCounter, &summariser).with_window(window);
        assert_eq!(compressor.threshold(), 0.8);
        assert!(compressor
            .compress(&mut buffer.clone())
            .await
            .unwrap()
            .is_some());
        let lenient = compressor.with_threshold(0.9).unwrap();
        assert!(lenient
            .compress(&mut buffer.clone())
            .await
            .unwrap()
            .is_none());
        for bad in [0.0, -0.5, 1.5, f64::NAN, 80.0] {
            let refused = Compressor::new("m", &ApproxCounter, &summariser).with_threshold(bad);
            assert!(refused.is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_summary_prompt_and_model_of_ones_own_reach_the_summariser() {
        let summariser = echoing();
        let mut buffer = gardening();
        Compressor::new("m", &ApproxCounter, &summariser)
            .with_window(500)
            .compress(&mut buffer)
            .await
            .unwrap();
        assert_eq!(
            buffer.summary(),
            Some("default / m"),
            "no instructions of its own"
        );
        let mut buffer = gardening();
        Compressor::new("m", &ApproxCounter, &summariser)
            .with_window(500)
            .with_summary_prompt("List the plants by thirst.")
            .with_summary_model("small-m")
            .compress(&mut buffer)
            .await
            .unwrap();
        assert_eq!(
            buffer.summary(),
            Some("List the plants by thirst. / small-m")
        );
    }

    #[tokio::test]
    async fn the_question_and_answer_shape_puts_the_summary_in_the_assistants_answer() {
        let summariser = counting();
        let mut buffer = gardening();
        buffer.set_summary(Some("Earlier: the greenhouse was built.".into()));
        let compressor = Compressor::new("m", &ApproxCounter, &summariser)
            .with_window(500)
            .with_shape(CompressedShape::QuestionAndAnswer);
        compressor.compress(&mut buffer).await.unwrap().unwrap();
        assert_eq!(buffer.summary(), None, "the summary lives in the entries");
        let shape: Vec<(EntryRole, &str)> = buffer
            .entries()
            .iter()
            .map(|e| (e.role, e.content.as_str()))
            .collect();
        assert_eq!(
            shape,
            [
                (EntryRole::System, "You help with gardening."),
                (EntryRole::User, REMEMBER_QUESTION),
                (EntryRole::Assistant, "40 messages about watering plants."),
                (EntryRole::User, "Which plants need the most water?"),
            ]
        );
        let answer = &buffer.entries()[2];
        assert_eq!(answer.metadata["compressed"], json!(true));
        assert!(answer.timestamp.is_some());
        assert_eq!(buffer.to_messages().len(), 4);
    }

    #[tokio::test]
    async fn the_question_is_the_compressors_own_and_should_compress_says_when() {
        let summariser = counting();
        let compressor = Compressor::new("m", &ApproxCounter, &summariser)
            .with_window(500)
            .with_shape(CompressedShape::QuestionAndAnswer)
            .with_question("Was weißt du noch von unserem Gespräch?");
        let mut buffer = gardening();
        assert!(compressor.should_compress(&buffer));
        compressor.compress(&mut buffer).await.unwrap().unwrap();
        assert_eq!(
            buffer.entries()[1].content,
            "Was weißt du noch von unserem Gespräch?"
        );
        assert!(
            !compressor.should_compress(&buffer),
            "compressed: not due again"
        );
        let roomy = Compressor::new("m", &ApproxCounter, &summariser).with_window(1_000_000);
        assert!(!roomy.should_compress(&gardening()));
    }

    #[tokio::test]
    async fn the_system_context_sent_beside_the_buffer_counts_towards_the_threshold() {
        let summariser = counting();
        let tokens = messages_tokens(&ApproxCounter, &gardening().to_messages()) as u64;
        // Half the window: not due by itself.
        let compressor = Compressor::new("m", &ApproxCounter, &summariser).with_window(tokens * 2);
        let mut buffer = gardening();
        assert!(!compressor.should_compress(&buffer));
        assert_eq!(compressor.compress(&mut buffer).await.unwrap(), None);
        // Tools and memories the size of the buffer again fill the window.
        let context = "Tool: water(plant, litres). ".repeat(tokens as usize / 6);
        assert!(compressor.should_compress_with(&buffer, &context));
        let report = compressor
            .compress_with(&mut buffer, &context)
            .await
            .unwrap()
            .expect("compressed");
        assert!(report.tokens_before as u64 > tokens * 8 / 5, "{report:?}");
        assert!(!buffer.to_messages().iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|c| c.contains("Tool: water"))));
    }

    #[test]
    fn a_large_tool_output_is_cut_as_it_arrives_and_a_small_one_kept() {
        let summariser = counting();
        let compressor =
            Compressor::new("m", &ApproxCounter, &summariser).with_tool_output_limit(100);
        assert_eq!(compressor.after_tool_call("c1", "ok"), "ok");
        let huge: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let cut = compressor.after_tool_call("c1", &huge);
        assert!(
            cut.starts_with("[Tool output of call c1 cut as it arrived: "),
            "{cut}"
        );
        assert!(
            cut.contains("line 0\n") && cut.ends_with("line 499"),
            "{cut}"
        );
        assert!(cut.len() < huge.len() / 4);
        let mut buffer = ConversationBuffer::new();
        buffer.tool_result("c1", cut.clone());
        assert_eq!(buffer.entries()[0].content, cut);
    }

    /// Pins a task list after the summary, and records what it was told.
    #[derive(Default)]
    struct Pinning {
        usage: std::sync::Mutex<Vec<(usize, u64)>>,
        before: std::sync::Mutex<Vec<usize>>,
    }

    impl Callbacks for Pinning {
        fn on_usage_update(&self, _used: f64, current: usize, max: u64) {
            self.usage.lock().unwrap().push((current, max));
        }
        fn on_before_compress(&self, messages: &[Value], _cutoff: usize) {
            self.before.lock().unwrap().push(messages.len());
        }
        fn on_after_compress(&self, messages: &[Value], summary: usize) -> Option<String> {
            assert!(messages[summary]["content"]
                .as_str()
                .is_some_and(|c| c.contains("40 messages")));
            Some("Open tasks: repot the fern.".into())
        }
    }

    #[tokio::test]
    async fn the_hooks_are_told_and_text_after_a_compression_follows_the_summary() {
        for shape in [
            CompressedShape::SummaryField,
            CompressedShape::QuestionAndAnswer,
        ] {
            let summariser = counting();
            let hooks = Pinning::default();
            let mut buffer = gardening();
            let before = tokens(&buffer) as usize;
            let compressor = Compressor::new("m", &ApproxCounter, &summariser)
                .with_window(500)
                .with_shape(shape)
                .with_callbacks(&hooks);
            let report = compressor.compress(&mut buffer).await.unwrap().unwrap();
            assert_eq!(*hooks.usage.lock().unwrap(), [(before, 500)]);
            assert_eq!(*hooks.before.lock().unwrap(), [40]);
            assert!(report.injected_tokens > 0);
            let messages = buffer.to_messages();
            let pinned = messages
                .iter()
                .position(|m| m["content"] == "Open tasks: repot the fern.")
                .expect("pinned");
            assert!(messages[pinned - 1]["content"]
                .as_str()
                .is_some_and(|c| c.contains("40 messages")));
            assert_eq!(
                messages.last().unwrap()["content"],
                "Which plants need the most water?",
                "{shape:?}"
            );
        }
    }
}
