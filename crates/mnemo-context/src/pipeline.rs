//! The governance pipeline: what one request sends upstream, in this order.
//!
//! 1. **repair** orphaned tool calls and results ([`crate::repair`]), always;
//! 2. **offload** tool outputs above `offload_tokens` to files (`auto`);
//! 3. **compact** (`compact`, `auto`) old tool outputs when a trigger fires
//!    ([`compaction_due`]), or **trim** them (`trim`, `trim_summarize`) on every request;
//! 4. **summarise** the middle of the history (`summarize`, `auto`, `trim_summarize`) when
//!    it is over `compress_threshold` of the window, over `max_history_messages`, over a
//!    hard limit ([`summary_due`]), or too large to go with the answer's reserve and the
//!    margin;
//! 5. **guard**: a governed request that is not smaller than the original is rolled back,
//!    and governance is not tried again on that history until it has grown;
//! 6. **pre-flight**: prompt + reserved answer + margin over the window is refused
//!    ([`ContextLengthExceeded`]), before any upstream call.
//!
//! Only the outgoing copy changes; the caller keeps the history as it came. A library user
//! follows (and may add to) the run through [`Callbacks`].

use std::ops::Range;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{json, Value};

use crate::compact::{compact, trim};
use crate::messages::{role, turn_starts};
use crate::offload::{offload, OutputStore};
use crate::repair::repair;
use crate::strategy::{Mode, ResolvedStrategy, SummaryWindow};
/// The message that stands for removed messages when no summary could be written:
/// `[Earlier conversation trimmed — N messages removed to stay within context budget]`, a
/// user message, since any upstream takes one anywhere. Public so that a caller that drops
/// messages on its own (a `/compact` whose summariser is down) says so the same way.
pub use crate::summarize::static_marker;
use crate::summarize::{
    cut, kept_prefix, prefix_hashes, sliding_cut, summary_message, MemorySummaryStore, Summariser,
    SummaryAsk, SummaryCall, SummaryOutcome, SummaryStore, Window as Cut,
};
use crate::tokens::{message_tokens, messages_tokens, TokenCounter};
use crate::window::{Window, WindowSource};

/// What governance did to one request: mnemo's `memory_context`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContextReport {
    /// The request's tokens as it came (after repair).
    pub tokens_before: usize,
    /// The request's tokens as it goes upstream.
    pub tokens_after: usize,
    /// The model's window.
    pub window: u64,
    /// Where the window came from.
    pub window_source: Option<WindowSource>,
    /// What counted the tokens (`tiktoken o200k_base`, `approx 4 chars/token`, ...).
    pub counter: String,
    /// The strategy's mode.
    pub mode: Option<crate::strategy::Mode>,
    /// The stages that changed something, in order.
    pub stages: Vec<&'static str>,
    /// Tool results dropped because their call was not in the history.
    pub orphan_results: usize,
    /// Stub results added for calls nothing answered.
    pub missing_results: usize,
    /// Tool calls whose outputs were offloaded to files.
    pub offloaded: Vec<String>,
    /// Tool outputs (and inputs) replaced by placeholders.
    pub compacted: usize,
    /// Tool outputs cut to `tool_output_trim_chars`.
    pub trimmed: usize,
    /// Messages the summary replaced.
    pub summarised_messages: usize,
    /// How the summary came about.
    pub summary: Option<SummaryOutcome>,
    /// The summary's text (not in `memory_context`: the caller shows it where it keeps the
    /// history, as a session's `/context` does).
    #[serde(skip)]
    pub summary_text: Option<String>,
    /// Why the summariser failed, when the static marker stands in.
    pub summary_error: Option<String>,
    /// Tokens of the text [`Callbacks::on_after_compress`] put right after the summary (0:
    /// none); part of `tokens_after` unless governance was rolled back.
    pub injected_tokens: usize,
    /// Governance made the request no smaller, so it went as it came.
    pub rolled_back: bool,
    /// Why governance did not run (the inflation guard).
    pub skipped: Option<String>,
}

/// A request governed: the messages to send, and what was done.
#[derive(Debug, Clone)]
pub struct Governed {
    /// The messages to send upstream (still carrying mnemo's `compacted` marks; see
    /// [`crate::messages::strip_internal_fields`]).
    pub messages: Vec<Value>,
    /// What was done.
    pub report: ContextReport,
}

/// Even the governed request does not fit the model's window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request needs {needed} tokens ({prompt} of prompt, {reserved} reserved for the answer, {margin} of margin) but the model's context window is {window} tokens{governed}"
)]
pub struct ContextLengthExceeded {
    /// prompt + reserved + margin (`u64::MAX` when the sum is larger).
    pub needed: u64,
    /// The prompt's tokens, after governance.
    pub prompt: u64,
    /// Tokens reserved for the answer.
    pub reserved: u64,
    /// Tokens of margin for the count's error.
    pub margin: u64,
    /// The model's window.
    pub window: u64,
    /// How governance was set (`""`, or a hint to use a strategy).
    pub governed: String,
}

/// Remembers that governance did not shrink a history, so it is not tried again (and paid for
/// again: a summary is an LLM call) until the history has grown. One per conversation.
#[derive(Debug, Default)]
pub struct InflationGuard {
    blocked_at: Mutex<Option<usize>>,
}

impl InflationGuard {
    fn blocks(&self, messages: usize) -> bool {
        self.blocked_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| messages <= at)
    }

    fn block(&self, messages: usize) {
        *self.blocked_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(messages);
    }
}

/// Hooks into governance, for library users: progress and metrics, archiving what a summary
/// replaces, and adding context after it (pydantic-deep's contract). Every method has a
/// default that does nothing. The hooks see messages but cannot change them, so they cannot
/// part a tool call from its result or lose the current turn.
pub trait Callbacks: Send + Sync {
    /// Once per request, before governance: `used` is `current_tokens / max_tokens` as a
    /// fraction (0.5 is half the window; above 1 the request does not fit as it is), so a
    /// user can show how full the window is without knowing the counter.
    fn on_usage_update(&self, _used: f64, _current_tokens: usize, _max_tokens: u64) {}
    /// A summary (or the static marker) is about to replace `messages`, the messages as the
    /// summariser reads them (large outputs already offloaded), so they can be archived
    /// first. `cutoff` is the index, in the request as repaired, where the kept part after
    /// them begins; they start at `cutoff - messages.len()`.
    fn on_before_compress(&self, _messages: &[Value], _cutoff: usize) {}
    /// The summary is in place at `messages[summary]`. Text returned here goes in right after
    /// it, as a user message, and is counted and reported (`injected_tokens`): context the
    /// summary should not lose, such as a task list or pinned files. Blank text adds nothing.
    fn on_after_compress(&self, _messages: &[Value], _summary: usize) -> Option<String> {
        None
    }
    /// Governance is done (also when the pre-flight check then refuses the request, whose
    /// report the caller otherwise never sees). A summary the inflation guard rolled back
    /// (`rolled_back`) has still been announced to the hooks above.
    fn on_governed(&self, _report: &ContextReport) {}
}

/// Whether compaction (or trimming) is due. With no trigger set, when less than 20% of the
/// window remains. Any one trigger set suffices, as co-cli runs them: past
/// `compact_trigger_turns` turns, the estimate over `token_budget` or `token_soft_budget`, or
/// the remaining share under `token_remaining_pct` or `token_soft_remaining_pct`. (Both
/// having to hold would let a long conversation of short turns, or a few huge tool outputs,
/// run past the trigger that was meant to catch it.)
pub fn compaction_due(s: &ResolvedStrategy, tokens: usize, turns: usize, window: u64) -> bool {
    let tokens = tokens as u64;
    let remaining = 1.0 - tokens as f64 / window.max(1) as f64;
    let token_triggers = [
        s.token_budget.map(|b| tokens > b),
        s.token_soft_budget.map(|b| tokens > b),
        s.token_remaining_pct.map(|p| remaining < p),
        s.token_soft_remaining_pct.map(|p| remaining < p),
    ];
    let any_token_trigger = token_triggers.iter().any(Option::is_some);
    let token_fired = token_triggers.contains(&Some(true));
    let turns_fired = s.compact_trigger_turns.is_some_and(|limit| turns > limit);
    if s.compact_trigger_turns.is_none() && !any_token_trigger {
        return remaining < 0.2;
    }
    turns_fired || token_fired
}

/// Whether a summary is due: the estimate over `compress_threshold` of the window, more
/// messages than `max_history_messages` (unless 0), or a hard limit crossed (`token_budget`,
/// `token_remaining_pct`).
pub fn summary_due(s: &ResolvedStrategy, tokens: usize, messages: usize, window: u64) -> bool {
    let over_threshold = tokens as f64 > s.compress_threshold * window as f64;
    let too_many = s.max_history_messages > 0 && messages > s.max_history_messages;
    let remaining = 1.0 - tokens as f64 / window.max(1) as f64;
    let hard = s.token_budget.is_some_and(|b| tokens as u64 > b)
        || s.token_remaining_pct.is_some_and(|p| remaining < p);
    over_threshold || too_many || hard
}

/// Everything one run of the pipeline needs besides the messages and the strategy.
pub struct Governor<'a> {
    /// Counts tokens the way the upstream model does (or estimates them).
    pub counter: &'a dyn TokenCounter,
    /// The upstream model's window.
    pub window: Window,
    /// The model summaries are asked of when the strategy names none.
    pub model: &'a str,
    /// Writes summaries; without one, a due summary is the static marker.
    pub summariser: Option<&'a dyn Summariser>,
    /// Keeps summaries, so a resent history does not pay for them twice.
    pub summaries: Option<&'a dyn SummaryStore>,
    /// Keeps offloaded outputs; without one, nothing is offloaded.
    pub outputs: Option<&'a dyn OutputStore>,
    /// The conversation's inflation guard.
    pub guard: Option<&'a InflationGuard>,
    /// Hooks.
    pub callbacks: Option<&'a dyn Callbacks>,
    /// Tokens of conversation one summary call may carry.
    pub summary_chunk_tokens: usize,
    /// Tokens reserved for the answer.
    pub reserve_output: u64,
    /// Tokens of margin for the count's error.
    pub margin: u64,
}

impl Governor<'_> {
    /// Governs `messages` (the whole request, as it is about to go) under `strategy`.
    pub async fn govern(
        &self,
        mut messages: Vec<Value>,
        strategy: &ResolvedStrategy,
    ) -> Result<Governed, ContextLengthExceeded> {
        let window = self.window.tokens;
        let count = |m: &[Value]| messages_tokens(self.counter, m);
        let mut report = ContextReport {
            window,
            window_source: Some(self.window.source),
            counter: self.counter.name(),
            mode: Some(strategy.mode),
            ..ContextReport::default()
        };
        let repaired = repair(&mut messages);
        report.orphan_results = repaired.orphan_results;
        report.missing_results = repaired.missing_results;
        if repaired.any() {
            report.stages.push("repair");
        }
        report.tokens_before = count(&messages);
        if let Some(callbacks) = self.callbacks {
            let used = report.tokens_before as f64 / window.max(1) as f64;
            callbacks.on_usage_update(used, report.tokens_before, window);
        }

        let blocked = self.guard.is_some_and(|g| g.blocks(messages.len()));
        let governed = if strategy.mode == Mode::None {
            None
        } else if blocked {
            report.skipped = Some(
                "inflation guard: governance did not make this history smaller; it is tried again once the history grows".into(),
            );
            None
        } else {
            Some(self.run_stages(&messages, strategy, &mut report).await)
        };
        let sent = match governed {
            Some(governed) if !report.stages.iter().all(|s| *s == "repair") => {
                let tokens = count(&governed);
                if tokens >= report.tokens_before {
                    report.rolled_back = true;
                    if let Some(guard) = self.guard {
                        guard.block(messages.len());
                    }
                    messages
                } else {
                    governed
                }
            }
            _ => messages,
        };
        report.tokens_after = count(&sent);
        if let Some(callbacks) = self.callbacks {
            callbacks.on_governed(&report);
        }
        self.preflight(report.tokens_after, strategy)?;
        Ok(Governed {
            messages: sent,
            report,
        })
    }

    async fn run_stages(
        &self,
        original: &[Value],
        strategy: &ResolvedStrategy,
        report: &mut ContextReport,
    ) -> Vec<Value> {
        let window = self.window.tokens;
        let mut work = original.to_vec();
        if strategy.mode == Mode::Auto {
            if let Some(store) = self.outputs {
                report.offloaded = offload(&mut work, strategy.offload_tokens, store);
                if !report.offloaded.is_empty() {
                    report.stages.push("offload");
                }
            }
        }
        // Summaries are of the messages as offloaded, before placeholders: what they say
        // must not depend on where the protected turns begin today.
        let summarisable = work.clone();
        let turns = turn_starts(&work).len();
        let tokens = messages_tokens(self.counter, &work);
        match strategy.mode {
            Mode::Compact | Mode::Auto if compaction_due(strategy, tokens, turns, window) => {
                report.compacted = compact(&mut work, strategy);
                if report.compacted > 0 {
                    report.stages.push("compact");
                }
            }
            // A trimmed output keeps its head (the log keeps it whole): cheap enough, and
            // lossless enough, to need no trigger, as co-cli runs it.
            Mode::Trim | Mode::TrimSummarize => {
                report.trimmed = trim(&mut work, strategy);
                if report.trimmed > 0 {
                    report.stages.push("trim");
                }
            }
            _ => {}
        }
        let tokens = messages_tokens(self.counter, &work);
        if matches!(
            strategy.mode,
            Mode::Summarize | Mode::Auto | Mode::TrimSummarize
        ) && self.summary_due(strategy, tokens, work.len())
        {
            self.summarise(&mut work, &summarisable, strategy, report)
                .await;
        }
        work
    }

    async fn summarise(
        &self,
        work: &mut Vec<Value>,
        summarisable: &[Value],
        strategy: &ResolvedStrategy,
        report: &mut ContextReport,
    ) {
        let cut = self.where_to_cut(work, strategy);
        let middle = &summarisable[cut.head..cut.tail];
        if middle.is_empty() {
            return;
        }
        // Hashed and looked up once: both the reuse below and the summary call start from
        // the longest kept prefix.
        let hashes = prefix_hashes(middle);
        let kept = self
            .summaries
            .and_then(|store| kept_prefix(&hashes, store, asked(strategy)));
        if let Some((covered, summary)) = &kept {
            if self.earlier_summary_suffices(work, cut.head, *covered, middle, summary, strategy) {
                report.summary = Some(SummaryOutcome::Reused);
                report.summary_text = Some(summary.clone());
                let replaced = cut.head..cut.head + covered;
                self.before_summary(&summarisable[replaced.clone()], replaced.end);
                let message = summary_message(*covered, summary);
                self.put_in_place(work, replaced, message, report);
                return;
            }
        }
        self.before_summary(middle, cut.tail);
        let replacement = self
            .write_summary(middle, &hashes, kept, strategy, report)
            .await;
        self.put_in_place(work, cut.head..cut.tail, replacement, report);
    }

    fn where_to_cut(&self, work: &[Value], strategy: &ResolvedStrategy) -> Cut {
        let window = self.window.tokens;
        match strategy.summary_window {
            SummaryWindow::Turn => cut(work, strategy.keep, window, self.counter),
            SummaryWindow::Sliding => sliding_cut(work, strategy.keep, window, self.counter),
        }
    }

    /// The summary of `middle` as a message, or the static marker when none can be written:
    /// the request still goes, smaller, and the report says why.
    async fn write_summary(
        &self,
        middle: &[Value],
        hashes: &[String],
        kept: Option<(usize, String)>,
        strategy: &ResolvedStrategy,
        report: &mut ContextReport,
    ) -> Value {
        let scratch = MemorySummaryStore::default();
        let written = match self.summariser {
            Some(summariser) => {
                SummaryCall {
                    summariser,
                    store: self.summaries.unwrap_or(&scratch),
                    counter: self.counter,
                    chunk_tokens: self.summary_chunk_tokens,
                    asked: asked(strategy),
                    model: strategy
                        .summarization_model
                        .as_deref()
                        .unwrap_or(self.model),
                }
                .extend(middle, hashes, kept)
                .await
            }
            None => Err("no summariser".to_owned()),
        };
        match written {
            Ok((summary, outcome)) => {
                report.summary = Some(outcome);
                let message = summary_message(middle.len(), &summary);
                report.summary_text = Some(summary);
                message
            }
            Err(why) => {
                tracing::warn!("no summary ({why}); the static marker stands in");
                report.summary = Some(SummaryOutcome::StaticMarker);
                report.summary_error = Some(why);
                static_marker(middle.len())
            }
        }
    }

    fn before_summary(&self, replaced: &[Value], cutoff: usize) {
        if let Some(callbacks) = self.callbacks {
            callbacks.on_before_compress(replaced, cutoff);
        }
    }

    /// Puts `replacement` in place of `work[replaced]`, then the hooks' text right after it:
    /// between the summary and a tail that never starts on a tool result, where it can part
    /// no call from its result and the current turn stays last.
    fn put_in_place(
        &self,
        work: &mut Vec<Value>,
        replaced: Range<usize>,
        replacement: Value,
        report: &mut ContextReport,
    ) {
        let at = replaced.start;
        report.summarised_messages = replaced.len();
        report.stages.push("summarize");
        work.splice(replaced, [replacement]);
        let text = self
            .callbacks
            .and_then(|callbacks| callbacks.on_after_compress(work, at));
        if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
            let injected = json!({"role": "user", "content": text});
            report.injected_tokens = message_tokens(self.counter, &injected);
            work.insert(at + 1, injected);
        }
    }

    /// Hysteresis: whether a kept summary that covers the start of the middle (`covered`
    /// messages) is enough, the history with it (head | that summary | everything after it)
    /// no longer being due a summary. Then it goes with no LLM call, and a growing history
    /// is summarised again only when the part after the summary has itself grown past the
    /// triggers, not on every turn.
    fn earlier_summary_suffices(
        &self,
        work: &[Value],
        head: usize,
        covered: usize,
        middle: &[Value],
        summary: &str,
        strategy: &ResolvedStrategy,
    ) -> bool {
        // Exactly the middle: the ordinary path reuses it. A prefix that ends between a call
        // and its result cannot stand before the rest.
        if covered == middle.len() || middle.get(covered).is_some_and(|m| role(m) == "tool") {
            return false;
        }
        let mut candidate = work[..head].to_vec();
        candidate.push(summary_message(covered, summary));
        candidate.extend(work[head + covered..].iter().cloned());
        let tokens = messages_tokens(self.counter, &candidate);
        !self.summary_due(strategy, tokens, candidate.len())
    }

    /// [`summary_due`], or the request would not fit with the answer's reserve and the
    /// margin: the pre-flight would refuse what a summary can make fit. (With a small
    /// window the reserve is a large share of it: 512 of the local LLM's 2,048 tokens
    /// leave less than `compress_threshold`'s 0.9 for the prompt.)
    fn summary_due(&self, strategy: &ResolvedStrategy, tokens: usize, messages: usize) -> bool {
        let room = self
            .window
            .tokens
            .saturating_sub(self.reserve_output.saturating_add(self.margin));
        summary_due(strategy, tokens, messages, self.window.tokens)
            || u64::try_from(tokens).unwrap_or(u64::MAX) > room
    }

    fn preflight(
        &self,
        prompt: usize,
        strategy: &ResolvedStrategy,
    ) -> Result<(), ContextLengthExceeded> {
        let window = self.window.tokens;
        let prompt = u64::try_from(prompt).unwrap_or(u64::MAX);
        // Checked: a request's `max_tokens` near 2^64 must be refused, neither panic nor wrap
        // round to a small number that fits.
        let needed = prompt
            .checked_add(self.reserve_output)
            .and_then(|n| n.checked_add(self.margin));
        if needed.is_some_and(|needed| needed <= window) {
            return Ok(());
        }
        let needed = needed.unwrap_or(u64::MAX);
        let governed = if strategy.mode == Mode::None {
            "; a memory_strategy (mode \"auto\", \"summarize\" or \"compact\") can make the history fit".to_owned()
        } else {
            String::new()
        };
        Err(ContextLengthExceeded {
            needed,
            prompt,
            reserved: self.reserve_output,
            margin: self.margin,
            window,
            governed,
        })
    }
}

/// What the strategy asks a summary beyond its messages.
fn asked(strategy: &ResolvedStrategy) -> SummaryAsk<'_> {
    SummaryAsk {
        focus: strategy.focus.as_deref(),
        instructions: strategy.summary_prompt.as_deref(),
    }
}
