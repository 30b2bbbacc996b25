//! Stage 4: summarise the middle of a long history.
//!
//! The history is cut into a head (the leading system and developer messages), a middle and
//! a tail (what `keep` asks for, and at least the current turn; never starting on a tool
//! result, so no call is split from its result). With `summary_window: sliding`, co-cli's
//! sliding window cuts it instead ([`sliding_cut`]): the head is the first run, the tail the
//! last `max(4, N/2)` messages. The middle becomes one user message,
//! `[Summary of N earlier messages]\n…`, written by an LLM ([`Summariser`]) with the prompt
//! of [`prompt`]; when the LLM fails, by the static marker of [`static_marker`].
//!
//! Clients resend their whole history every turn, so summaries are kept ([`SummaryStore`])
//! under the hash of the messages they cover, and a chain of them is built as the history
//! grows: the summary of messages `0..n` is reused as it is when the middle is exactly those,
//! and extended with only the new messages when the middle has grown. A middle too long for
//! the summarising model is summarised in chunks, each building on the previous summary, and
//! each chunk's summary is kept, so a long history is never summarised twice.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::messages::{head_len, role, turn_starts};
use crate::strategy::Keep;
use crate::tokens::{message_text, message_tokens, TokenCounter};

/// The system prompt of every summary call.
pub const SYSTEM_PROMPT: &str = "You are a conversation summariser. Return only the summary.";

/// The instructions, before the conversation, of every summary call.
pub const INSTRUCTIONS: &str = "Summarise the conversation below so that it can replace it. Keep: decisions made and their outcomes; file paths, commands and tool names used; errors and how they were resolved; tasks still pending; facts the user stated. Drop pleasantries and repetition. Write plain sentences or a short list.";

/// What a summary call is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRequest {
    /// The summary of the messages before these, which the new summary must carry forward.
    pub previous: Option<String>,
    /// The messages to summarise.
    pub messages: Vec<Value>,
    /// What to focus on (`focus`).
    pub focus: Option<String>,
    /// The instructions in place of [`INSTRUCTIONS`] (`summary_prompt`).
    pub instructions: Option<String>,
    /// The model to ask (`summarization_model`, else the request's).
    pub model: String,
}

/// Something that writes summaries: the engine's upstream LLM, or a library user's own.
pub trait Summariser: Send + Sync {
    /// The summary for `request`, or why there is none.
    fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>>;
}

/// The chat messages of a summary call for `request`: the system prompt, then the
/// instructions (with the focus), the previous summary and the conversation as one user
/// message. No tools are offered.
pub fn prompt(request: &SummaryRequest) -> Vec<Value> {
    let mut text = request
        .instructions
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(INSTRUCTIONS)
        .to_owned();
    if let Some(focus) = request.focus.as_deref().filter(|f| !f.trim().is_empty()) {
        text.push_str(&format!("\n\nIMPORTANT: Focus the summary on: {focus}"));
    }
    if let Some(previous) = &request.previous {
        text.push_str(&format!(
            "\n\nSummary of the conversation before this part (carry it forward):\n{previous}"
        ));
    }
    text.push_str("\n\nConversation:\n");
    for message in &request.messages {
        let label = match role(message) {
            "user" => "User",
            "assistant" => "Assistant",
            "tool" => "Tool",
            "system" | "developer" => "System",
            other => other,
        };
        text.push_str(&format!("{label}: {}\n", message_text(message).trim()));
    }
    vec![
        json!({"role": "system", "content": SYSTEM_PROMPT}),
        json!({"role": "user", "content": text}),
    ]
}

/// The message that replaces `count` summarised messages.
pub fn summary_message(count: usize, summary: &str) -> Value {
    json!({"role": "user", "content": format!("[Summary of {count} earlier messages]\n{}", summary.trim())})
}

/// The message that replaces `count` messages when no summary could be written.
pub fn static_marker(count: usize) -> Value {
    json!({"role": "user", "content": format!("[Earlier conversation trimmed — {count} messages removed to stay within context budget]")})
}

/// A kept summary: of the first `messages` messages of a middle whose prefix hash it is
/// stored under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSummary {
    /// How many messages it covers.
    pub messages: usize,
    /// The summary.
    pub summary: String,
}

/// Where summaries are kept, by the hash of what they cover.
pub trait SummaryStore: Send + Sync {
    /// The summary kept under `key`.
    fn get(&self, key: &str) -> Option<StoredSummary>;
    /// Keeps `summary` under `key`.
    fn put(&self, key: &str, summary: &StoredSummary) -> io::Result<()>;
}

/// Summaries in memory.
#[derive(Debug, Default)]
pub struct MemorySummaryStore {
    summaries: Mutex<HashMap<String, StoredSummary>>,
}

impl SummaryStore for MemorySummaryStore {
    fn get(&self, key: &str) -> Option<StoredSummary> {
        self.summaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    fn put(&self, key: &str, summary: &StoredSummary) -> io::Result<()> {
        self.summaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), summary.clone());
        Ok(())
    }
}

/// Summaries as JSON files in one folder, named by their key (a hex hash). The folder is a
/// [`mnemo_fs::StoreDir`], checked at every level each time (see
/// [`crate::offload::DirOutputStore`]).
#[derive(Debug, Clone)]
pub struct DirSummaryStore {
    dir: mnemo_fs::StoreDir,
}

impl DirSummaryStore {
    /// Summaries kept in `dir` (created on the first write).
    pub fn new(dir: mnemo_fs::StoreDir) -> Self {
        Self { dir }
    }

    fn name(key: &str) -> String {
        format!("{}.json", crate::offload::safe_name(key))
    }
}

impl SummaryStore for DirSummaryStore {
    fn get(&self, key: &str) -> Option<StoredSummary> {
        let bytes = match self.dir.read(Self::name(key), 16 << 20) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return None,
            Err(e) => {
                tracing::warn!("a kept summary is not read: {e}");
                return None;
            }
        };
        serde_json::from_slice(&bytes).ok()
    }

    fn put(&self, key: &str, summary: &StoredSummary) -> io::Result<()> {
        self.dir.create().map_err(crate::offload::refused)?;
        mnemo_fs::atomic::write_atomic(
            &self.dir.file(Self::name(key)),
            &serde_json::to_vec(summary)?,
        )
    }
}

/// Where a history is cut for a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Messages before this are the head.
    pub head: usize,
    /// Messages from this on are the tail.
    pub tail: usize,
}

impl Window {
    /// How many messages the middle holds.
    pub fn middle(&self) -> usize {
        self.tail.saturating_sub(self.head)
    }
}

/// Where to cut `messages`: the tail keeps what `keep` asks for (a fraction of `window`
/// tokens, for `Keep::Fraction`) and at least the current turn, and never starts on a tool
/// result.
pub fn cut(messages: &[Value], keep: Keep, window: u64, counter: &dyn TokenCounter) -> Window {
    let head = head_len(messages);
    let current_turn = turn_starts(messages)
        .last()
        .copied()
        .unwrap_or(messages.len());
    let mut tail = match keep {
        Keep::Messages(n) => messages.len().saturating_sub(n),
        Keep::Tokens(t) => newest_within(messages, t, counter),
        Keep::Fraction(f) => newest_within(messages, (f * window as f64) as u64, counter),
    }
    .min(current_turn)
    .max(head)
    .min(messages.len());
    while tail > head && tail < messages.len() && role(&messages[tail]) == "tool" {
        tail -= 1;
    }
    Window { head, tail }
}

/// How many messages the sliding window's tail keeps of a history of `messages`: half, and
/// never fewer than 4, so that a short history still leaves the model an exchange to go on.
pub fn sliding_tail(messages: usize) -> usize {
    (messages / 2).max(4)
}

/// Where the first run ends (exclusive): after the first assistant message with text and
/// the results of its tool calls, so that no call is parted from its result. A history with
/// no such answer yet keeps the instructions and the first user message (the task), and its
/// tool work goes to the summary; one with no user message keeps the instructions.
pub fn first_run_end(messages: &[Value]) -> usize {
    let head = head_len(messages);
    let Some(user) = messages.iter().position(|m| role(m) == "user") else {
        return head;
    };
    let Some(answer) = messages[user..].iter().position(answers_in_text) else {
        return (user + 1).max(head);
    };
    let mut end = user + answer + 1;
    while end < messages.len() && role(&messages[end]) == "tool" {
        end += 1;
    }
    end
}

/// Whether an assistant message says something in text (not only tool calls).
fn answers_in_text(message: &Value) -> bool {
    let text = |t: Option<&str>| t.is_some_and(|t| !t.trim().is_empty());
    role(message) == "assistant"
        && match &message["content"] {
            Value::String(s) => text(Some(s)),
            Value::Array(parts) => parts.iter().any(|p| text(p["text"].as_str())),
            _ => false,
        }
}

/// Where co-cli's sliding window cuts `messages`: the head is the first run
/// ([`first_run_end`]); the tail the last [`sliding_tail`] messages, or more when [`cut`]
/// keeps more (`keep`, the current turn), and never starting on a tool result.
pub fn sliding_cut(
    messages: &[Value],
    keep: Keep,
    window: u64,
    counter: &dyn TokenCounter,
) -> Window {
    let head = first_run_end(messages);
    let len = messages.len();
    let mut tail = len
        .saturating_sub(sliding_tail(len))
        .min(cut(messages, keep, window, counter).tail)
        .max(head);
    while tail > head && tail < len && role(&messages[tail]) == "tool" {
        tail -= 1;
    }
    Window { head, tail }
}

/// The first index of the newest messages that fit in `budget` tokens.
fn newest_within(messages: &[Value], budget: u64, counter: &dyn TokenCounter) -> usize {
    let mut used = 0u64;
    let mut start = messages.len();
    while start > 0 {
        let cost = message_tokens(counter, &messages[start - 1]) as u64;
        if used + cost > budget {
            break;
        }
        used += cost;
        start -= 1;
    }
    start
}

/// The hashes of every prefix of `messages`: `hashes[i]` covers `messages[..=i]`.
///
/// The hash is xxh3-128 over the messages' structure, not a cryptographic one: it is computed
/// for every request whose history is due a summary, over megabytes of resent history, and a
/// collision could only make a client's own conversation reuse a wrong summary.
pub fn prefix_hashes(messages: &[Value]) -> Vec<String> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    messages
        .iter()
        .map(|message| {
            feed(&mut hasher, message);
            format!("{:032x}", hasher.digest128())
        })
        .collect()
}

/// Feeds `value` into `hasher`, unambiguously (every item tagged and length-prefixed).
fn feed(hasher: &mut xxhash_rust::xxh3::Xxh3, value: &Value) {
    let mut bytes = |tag: &[u8], data: &[u8]| {
        hasher.update(tag);
        hasher.update(&(data.len() as u64).to_le_bytes());
        hasher.update(data);
    };
    match value {
        Value::Null => bytes(b"n", b""),
        Value::Bool(b) => bytes(b"b", &[u8::from(*b)]),
        Value::Number(n) => bytes(b"#", n.to_string().as_bytes()),
        Value::String(s) => bytes(b"s", s.as_bytes()),
        Value::Array(items) => {
            bytes(b"[", &(items.len() as u64).to_le_bytes());
            for item in items {
                feed(hasher, item);
            }
        }
        Value::Object(fields) => {
            bytes(b"{", &(fields.len() as u64).to_le_bytes());
            for (key, item) in fields {
                hasher.update(b"k");
                hasher.update(&(key.len() as u64).to_le_bytes());
                hasher.update(key.as_bytes());
                feed(hasher, item);
            }
        }
    }
}

/// The key of the summary of `middle[..=i]`, given the middle's [`prefix_hashes`]. A focus
/// or a prompt of one's own changes what a summary says, so each is part of the key (and
/// with neither, the key is what it always was).
fn summary_key(hashes: &[String], i: usize, asked: SummaryAsk<'_>) -> String {
    let mut key = hashes[i].clone();
    if let Some(f) = asked.focus {
        key = crate::offload::digest(format!("{key}|{f}").as_bytes());
    }
    if let Some(instructions) = asked.instructions {
        key = crate::offload::digest(format!("{key}|prompt:{instructions}").as_bytes());
    }
    key
}

/// What a summary is asked beyond its messages: a focus, and instructions of one's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SummaryAsk<'a> {
    /// What to focus on (`focus`).
    pub focus: Option<&'a str>,
    /// Instructions in place of [`INSTRUCTIONS`] (`summary_prompt`).
    pub instructions: Option<&'a str>,
}

/// The longest prefix of a middle that a kept summary covers, given the middle's
/// [`prefix_hashes`]: how many messages it covers, and the summary.
pub fn kept_prefix(
    hashes: &[String],
    store: &dyn SummaryStore,
    asked: SummaryAsk<'_>,
) -> Option<(usize, String)> {
    (0..hashes.len()).rev().find_map(|i| {
        store
            .get(&summary_key(hashes, i, asked))
            .filter(|kept| kept.messages == i + 1)
            .map(|kept| (i + 1, kept.summary))
    })
}

/// A message takes at most 1/this of a summary call's tokens.
const PER_MESSAGE_SHARE: usize = 16;

/// How a summary came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryOutcome {
    /// Kept from an earlier request covering exactly these messages.
    Reused,
    /// An earlier summary carried forward over the newer messages only.
    Extended,
    /// Written now from scratch.
    New,
    /// The summariser failed; the static marker stands in.
    StaticMarker,
}

/// Summarises `middle` (the messages of a history's middle, in order), reusing and extending
/// what `store` keeps; `chunk_tokens` is how much conversation one call may carry.
pub async fn summarise_middle(
    middle: &[Value],
    summariser: &dyn Summariser,
    store: &dyn SummaryStore,
    counter: &dyn TokenCounter,
    chunk_tokens: usize,
    asked: SummaryAsk<'_>,
    model: &str,
) -> Result<(String, SummaryOutcome), String> {
    let hashes = prefix_hashes(middle);
    let kept = kept_prefix(&hashes, store, asked);
    let call = SummaryCall {
        summariser,
        store,
        counter,
        chunk_tokens,
        asked,
        model,
    };
    call.extend(middle, &hashes, kept).await
}

/// What one summary needs besides the messages: who writes it, where it is kept, how it is
/// counted and cut into calls.
pub struct SummaryCall<'a> {
    /// Writes summaries.
    pub summariser: &'a dyn Summariser,
    /// Keeps them.
    pub store: &'a dyn SummaryStore,
    /// Counts the messages, to cut them into calls.
    pub counter: &'a dyn TokenCounter,
    /// Tokens of conversation one call may carry.
    pub chunk_tokens: usize,
    /// What the summary is asked beyond its messages.
    pub asked: SummaryAsk<'a>,
    /// The model to ask.
    pub model: &'a str,
}

impl SummaryCall<'_> {
    /// Summarises `middle` (with its [`prefix_hashes`]), carrying forward `kept`, the kept
    /// summary of its first messages ([`kept_prefix`]), over the rest only.
    pub async fn extend(
        &self,
        middle: &[Value],
        hashes: &[String],
        kept: Option<(usize, String)>,
    ) -> Result<(String, SummaryOutcome), String> {
        let Self {
            summariser,
            store,
            counter,
            chunk_tokens,
            asked,
            model,
        } = *self;
        let key = |i: usize| summary_key(hashes, i, asked);
        if middle.is_empty() {
            return Ok((String::new(), SummaryOutcome::Reused));
        }
        // One message's share of a call: the head and tail of a long tool output say what a
        // summary needs (paths, errors, outcomes), and a whole extension then fits one call.
        let per_message = (chunk_tokens / PER_MESSAGE_SHARE).max(1);
        let cost = |m: &Value| message_tokens(counter, m).min(per_message);
        let (mut done, mut summary) = match kept {
            Some((covered, summary)) => (covered, Some(summary)),
            None => (0, None),
        };
        if done == middle.len() {
            return Ok((summary.unwrap_or_default(), SummaryOutcome::Reused));
        }
        let outcome = if done > 0 {
            SummaryOutcome::Extended
        } else {
            SummaryOutcome::New
        };
        while done < middle.len() {
            let mut end = done;
            let mut used = 0;
            while end < middle.len() {
                let cost = cost(&middle[end]);
                if end > done && used + cost > chunk_tokens {
                    break;
                }
                used += cost;
                end += 1;
            }
            let chunk: Vec<Value> = middle[done..end]
                .iter()
                .map(|m| fit(m, per_message, counter))
                .collect();
            let written = summariser
                .summarise(SummaryRequest {
                    previous: summary.clone(),
                    messages: chunk,
                    focus: asked.focus.map(str::to_owned),
                    instructions: asked.instructions.map(str::to_owned),
                    model: model.to_owned(),
                })
                .await?;
            let written = written.trim().to_owned();
            if written.is_empty() {
                return Err("the summariser returned an empty summary".into());
            }
            if let Err(e) = store.put(
                &key(end - 1),
                &StoredSummary {
                    messages: end,
                    summary: written.clone(),
                },
            ) {
                tracing::warn!("cannot keep a summary: {e}; the next request writes it again");
            }
            summary = Some(written);
            done = end;
        }
        Ok((summary.unwrap_or_default(), outcome))
    }
}

/// A message cut down so that it fits one summary call: its head and tail, when on its own
/// it is larger than `budget` tokens.
fn fit(message: &Value, budget: usize, counter: &dyn TokenCounter) -> Value {
    if message_tokens(counter, message) <= budget {
        return message.clone();
    }
    let text = message_text(message);
    let keep_chars = budget.saturating_mul(crate::tokens::CHARS_PER_TOKEN) / 2;
    let head: String = text.chars().take(keep_chars).collect();
    let tail: String = {
        let chars: Vec<char> = text.chars().collect();
        chars[chars.len().saturating_sub(keep_chars)..]
            .iter()
            .collect()
    };
    json!({"role": role(message), "content": format!("{head}\n[…]\n{tail}")})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::ApproxCounter;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn call(id: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "r"})
    }

    #[test]
    fn the_tail_keeps_the_current_turn_and_never_starts_on_a_tool_result() {
        let h = vec![
            json!({"role": "system", "content": "s"}),
            user("one"),
            json!({"role": "assistant", "content": "a"}),
            user("two"),
            call("c"),
            result("c"),
            json!({"role": "assistant", "content": "b"}),
        ];
        assert_eq!(
            cut(&h, Keep::Messages(0), 1000, &ApproxCounter),
            Window { head: 1, tail: 3 }
        );
        assert_eq!(cut(&h, Keep::Messages(5), 1000, &ApproxCounter).tail, 2);
        // Keeping two messages would start on the tool result: the call comes along.
        let mut no_answer = h.clone();
        no_answer.pop();
        no_answer.push(user("three"));
        no_answer.push(call("d"));
        no_answer.push(result("d"));
        let w = cut(&no_answer, Keep::Messages(0), 1000, &ApproxCounter);
        assert_eq!(
            role(&no_answer[w.tail]),
            "user",
            "the current turn, which ends on a tool result"
        );
        let h2 = vec![user("go"), call("a"), result("a"), call("b"), result("b")];
        assert_eq!(
            cut(&h2, Keep::Messages(0), 1000, &ApproxCounter).tail,
            0,
            "one turn: nothing to summarise"
        );
        // No user message at all (a history of answers only): nothing to cut, no panic.
        let answers = vec![json!({"role": "assistant", "content": "a"}), call("e")];
        assert_eq!(
            cut(&answers, Keep::Messages(0), 1000, &ApproxCounter).tail,
            2
        );
    }

    #[test]
    fn the_first_run_ends_after_the_first_text_answer_and_its_results() {
        let talking_call = json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        let h = vec![
            json!({"role": "system", "content": "s"}),
            user("go"),
            call("a"),
            result("a"),
            talking_call,
            result("t"),
            json!({"role": "assistant", "content": "done"}),
            user("next"),
        ];
        assert_eq!(
            first_run_end(&h),
            6,
            "an answer with calls keeps its results"
        );
        let no_answer = vec![
            json!({"role": "system", "content": "s"}),
            user("go"),
            call("a"),
            result("a"),
        ];
        assert_eq!(first_run_end(&no_answer), 2, "the task, not its tool work");
        let blank = vec![user("go"), json!({"role": "assistant", "content": " "})];
        assert_eq!(first_run_end(&blank), 1, "a blank answer says nothing");
        assert_eq!(
            first_run_end(&[json!({"role": "system", "content": "s"})]),
            1
        );
        assert_eq!(sliding_tail(3), 4);
        assert_eq!(sliding_tail(61), 30);
    }

    #[test]
    fn the_static_marker_and_summary_are_valid_user_messages() {
        assert_eq!(
            static_marker(12)["content"],
            "[Earlier conversation trimmed — 12 messages removed to stay within context budget]"
        );
        assert_eq!(static_marker(1)["role"], "user");
        let s = summary_message(3, " It went well. ");
        assert_eq!(
            s["content"],
            "[Summary of 3 earlier messages]\nIt went well."
        );
    }

    #[test]
    fn the_prompt_carries_the_focus_and_the_previous_summary() {
        let messages = prompt(&SummaryRequest {
            previous: Some("Earlier: set up the repo.".into()),
            messages: vec![user("fix the build"), result("x")],
            focus: Some("the failing test".into()),
            instructions: None,
            model: "m".into(),
        });
        assert_eq!(messages[0]["content"], SYSTEM_PROMPT);
        let text = messages[1]["content"].as_str().unwrap();
        assert!(text.contains("IMPORTANT: Focus the summary on: the failing test"));
        assert!(text.contains("Earlier: set up the repo."));
        assert!(text.contains("User: fix the build\nTool: r"));
    }

    struct Counting(AtomicUsize);

    impl Summariser for Counting {
        fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            let previous = request.previous.unwrap_or_default();
            Box::pin(async move {
                Ok(format!(
                    "{previous}[call {n}: {} messages]",
                    request.messages.len()
                ))
            })
        }
    }

    #[tokio::test]
    async fn a_resent_history_reuses_its_summary_and_a_grown_one_extends_it() {
        let store = MemorySummaryStore::default();
        let summariser = Counting(AtomicUsize::new(0));
        let middle: Vec<Value> = (0..6).map(|i| user(&format!("message {i}"))).collect();
        let run_asked = |n: usize, asked: SummaryAsk<'static>| {
            summarise_middle(
                &middle[..n],
                &summariser,
                &store,
                &ApproxCounter,
                10_000,
                asked,
                "m",
            )
        };
        let run = |n: usize| run_asked(n, SummaryAsk::default());
        let (first, outcome) = run(4).await.unwrap();
        assert_eq!(
            (first.as_str(), outcome),
            ("[call 1: 4 messages]", SummaryOutcome::New)
        );
        let (again, outcome) = run(4).await.unwrap();
        assert_eq!(
            (again.as_str(), outcome),
            (first.as_str(), SummaryOutcome::Reused)
        );
        let (grown, outcome) = run(6).await.unwrap();
        assert_eq!(outcome, SummaryOutcome::Extended);
        assert_eq!(
            grown, "[call 1: 4 messages][call 2: 2 messages]",
            "only the new two are sent"
        );
        assert_eq!(summariser.0.load(Ordering::SeqCst), 2);

        // A prompt of one's own asks for another summary: the kept one is not reused.
        let own = SummaryAsk {
            focus: None,
            instructions: Some("List the decisions only."),
        };
        let (_, outcome) = run_asked(4, own).await.unwrap();
        assert_eq!(outcome, SummaryOutcome::New);
        let (_, outcome) = run_asked(4, own).await.unwrap();
        assert_eq!(outcome, SummaryOutcome::Reused, "and its own is kept");
    }

    #[test]
    fn a_summary_prompt_of_ones_own_replaces_the_instructions() {
        let request = SummaryRequest {
            previous: None,
            messages: vec![user("fix the build")],
            focus: Some("the build".into()),
            instructions: Some("List the decisions only.".into()),
            model: "m".into(),
        };
        let text = prompt(&request)[1]["content"].as_str().unwrap().to_owned();
        assert!(text.starts_with("List the decisions only."), "{text}");
        assert!(!text.contains(INSTRUCTIONS));
        assert!(text.contains("Focus the summary on: the build"), "{text}");
        assert!(text.contains("User: fix the build"), "{text}");
        let blank = SummaryRequest {
            instructions: Some("  ".into()),
            ..request
        };
        let text = prompt(&blank)[1]["content"].as_str().unwrap().to_owned();
        assert!(
            text.starts_with(INSTRUCTIONS),
            "a blank prompt is the default"
        );
    }

    #[tokio::test]
    async fn a_middle_too_long_for_one_call_is_summarised_in_chunks() {
        let store = MemorySummaryStore::default();
        let summariser = Counting(AtomicUsize::new(0));
        let mut middle: Vec<Value> = (0..39).map(|_| user(&"word ".repeat(40))).collect();
        // One huge message: it takes no more than its share (880 / 16 = 55 tokens).
        middle.insert(20, user(&"word ".repeat(4000)));
        // Each message costs ~54 tokens (approximate count): sixteen fit in 880.
        let (summary, _) = summarise_middle(
            &middle,
            &summariser,
            &store,
            &ApproxCounter,
            880,
            SummaryAsk {
                focus: Some("f"),
                instructions: None,
            },
            "m",
        )
        .await
        .unwrap();
        assert_eq!(summariser.0.load(Ordering::SeqCst), 3);
        assert!(summary.ends_with("[call 3: 8 messages]"), "{summary}");
    }
}
