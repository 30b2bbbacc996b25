//! The pipeline end to end on generated histories, with a summariser the test scripts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use mnemo_context::pipeline::{compaction_due, static_marker, summary_due};
use mnemo_context::repair::repair;
use mnemo_context::summarize::{SummaryOutcome, SummaryRequest};
use mnemo_context::tokens::messages_tokens;
use mnemo_context::{
    ApproxCounter, Callbacks, ContextLengthExceeded, ContextReport, Governor, InflationGuard,
    MemoryOutputStore, MemorySummaryStore, OutputStore, Strategy, Summariser, Window, WindowSource,
};
use serde_json::{json, Value};

/// A history of `turns` turns, each: a user question, a tool call, its `output`, an answer.
fn history(turns: usize, output: &str) -> Vec<Value> {
    let mut h = vec![json!({"role": "system", "content": "You are a coding agent."})];
    for t in 0..turns {
        let id = format!("call_{t}");
        h.push(json!({"role": "user", "content": format!("Step {t}: look at the file.")}));
        h.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"src/main.rs\"}"}}]}));
        h.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        h.push(json!({"role": "assistant", "content": format!("Read step {t}.")}));
    }
    h
}

fn strategy(fields: Value) -> mnemo_context::ResolvedStrategy {
    Strategy::from_json(fields).unwrap().resolve()
}

struct Scripted {
    calls: AtomicUsize,
    fail: bool,
}

impl Summariser for Scripted {
    fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fail = self.fail;
        Box::pin(async move {
            if fail {
                Err("the summariser is down".into())
            } else {
                Ok(format!(
                    "The agent read src/main.rs {} times.",
                    request.messages.len()
                ))
            }
        })
    }
}

fn governor<'a>(
    window: u64,
    summariser: &'a Scripted,
    store: &'a MemorySummaryStore,
    outputs: &'a MemoryOutputStore,
    guard: &'a InflationGuard,
) -> Governor<'a> {
    Governor {
        counter: &ApproxCounter,
        window: Window {
            tokens: window,
            source: WindowSource::Config,
        },
        model: "test-model",
        summariser: Some(summariser),
        summaries: Some(store),
        outputs: Some(outputs),
        guard: Some(guard),
        callbacks: None,
        summary_chunk_tokens: 100_000,
        reserve_output: 100,
        margin: 10,
    }
}

#[test]
fn triggers_by_turns_budgets_and_remaining_share() {
    let none = strategy(json!({}));
    assert!(
        !compaction_due(&none, 700, 3, 1000),
        "30% left: nothing set, nothing due"
    );
    assert!(
        compaction_due(&none, 900, 3, 1000),
        "10% left: the 0.2 default fires"
    );
    let turns = strategy(json!({"compact_trigger_turns": 4}));
    assert!(!compaction_due(&turns, 10, 4, 1000));
    assert!(compaction_due(&turns, 10, 5, 1000), "turns alone");
    let both = strategy(json!({"compact_trigger_turns": 4, "token_budget": 500}));
    assert!(compaction_due(&both, 400, 9, 1000), "past the turns alone");
    assert!(compaction_due(&both, 600, 2, 1000), "over the budget alone");
    assert!(!compaction_due(&both, 400, 4, 1000), "neither");
    let soft = strategy(json!({"token_soft_budget": 300}));
    assert!(compaction_due(&soft, 301, 1, 100_000));
    assert!(!compaction_due(&soft, 299, 1, 100_000));
    let share = strategy(json!({"token_soft_remaining_pct": 0.5}));
    assert!(compaction_due(&share, 600, 1, 1000));
    assert!(!compaction_due(&share, 400, 1, 1000));

    let s = strategy(json!({}));
    assert!(summary_due(&s, 901, 3, 1000), "over compress_threshold 0.9");
    assert!(!summary_due(&s, 899, 3, 1000));
    assert!(
        summary_due(&s, 10, 41, 1000),
        "over max_history_messages 40"
    );
    assert!(
        !summary_due(&strategy(json!({"max_history_messages": 0})), 10, 41, 1000),
        "0 disables"
    );
    assert!(
        summary_due(&strategy(json!({"token_budget": 100})), 101, 3, 1000),
        "a hard budget"
    );
    assert!(
        !summary_due(&strategy(json!({"token_soft_budget": 100})), 101, 3, 1000),
        "soft only compacts"
    );
}

#[tokio::test]
async fn auto_offloads_compacts_and_summarises_a_long_tool_history() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let mut h = history(30, &"fn main() {}\n".repeat(40));
    // One huge output, offloaded whole.
    h[3]["content"] = Value::String("x\n".repeat(100_000));
    let g = governor(6000, &summariser, &store, &outputs, &guard);
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "auto"})))
        .await
        .unwrap();
    let report = &governed.report;
    assert_eq!(report.offloaded, ["call_0"]);
    assert!(report.compacted > 0);
    assert_eq!(report.stages, ["offload", "compact", "summarize"]);
    assert_eq!(report.summary, Some(SummaryOutcome::New));
    assert!(
        report.tokens_after < report.tokens_before / 10,
        "{report:?}"
    );
    assert!(report.tokens_after as u64 + 110 <= 6000);
    let m = &governed.messages;
    assert_eq!(m[0]["role"], "system");
    assert!(m[1]["content"].as_str().unwrap().starts_with(&format!(
        "[Summary of {} earlier messages]\n",
        report.summarised_messages
    )));
    assert_eq!(m.last().unwrap()["content"], "Read step 29.");
    assert!(
        outputs.read("call_0", 0, 4).unwrap().is_some(),
        "the whole output is kept"
    );

    // The same history again: the summary is reused, not paid for twice.
    let again = g
        .govern(h.clone(), &strategy(json!({"mode": "auto"})))
        .await
        .unwrap();
    assert_eq!(again.report.summary, Some(SummaryOutcome::Reused));
    assert_eq!(again.messages, governed.messages);
    // One more turn: the history with the earlier summary is not due another, so it goes
    // as it is (head | summary | everything after it), with no call.
    let mut grown = h.clone();
    grown.extend(history(1, "done").into_iter().skip(1));
    let kept = g
        .govern(grown.clone(), &strategy(json!({"mode": "auto"})))
        .await
        .unwrap();
    assert_eq!(kept.report.summary, Some(SummaryOutcome::Reused));
    assert_eq!(kept.report.summarised_messages, report.summarised_messages);
    assert_eq!(summariser.calls.load(Ordering::SeqCst), 1);
    // Grown past the trigger again (more than 40 messages after the summary): the earlier
    // summary is extended with the newly summarised messages only, in one call.
    for _ in 0..12 {
        grown.extend(history(1, "done").into_iter().skip(1));
    }
    let extended = g
        .govern(grown, &strategy(json!({"mode": "auto"})))
        .await
        .unwrap();
    assert_eq!(extended.report.summary, Some(SummaryOutcome::Extended));
    assert_eq!(summariser.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_summariser_that_fails_leaves_the_static_marker_and_loses_nothing_the_caller_holds() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: true,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let h = history(20, "output");
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "summarize"})))
        .await
        .unwrap();
    assert_eq!(governed.report.summary, Some(SummaryOutcome::StaticMarker));
    assert!(governed
        .report
        .summary_error
        .as_deref()
        .unwrap()
        .contains("down"));
    let marker = governed.messages[1]["content"].as_str().unwrap();
    assert_eq!(
        marker,
        format!(
            "[Earlier conversation trimmed — {} messages removed to stay within context budget]",
            governed.report.summarised_messages
        )
    );
    assert_eq!(governed.messages[1]["role"], "user");
    // Nothing the caller sent is lost unaccounted: the system prompt and the messages after
    // the marker go upstream as the caller sent them, and the marker stands for the rest.
    let summarised = governed.report.summarised_messages;
    let kept = &governed.messages[2..];
    assert!(summarised > 0 && !kept.is_empty(), "{:?}", governed.report);
    assert_eq!(governed.messages[0], h[0], "the system prompt as it was");
    assert_eq!(
        1 + summarised + kept.len(),
        h.len(),
        "every message is kept or stood for by the marker"
    );
    assert_eq!(
        kept,
        &h[h.len() - kept.len()..],
        "the kept messages are the caller's own, unchanged"
    );
}

#[tokio::test]
async fn the_first_run_ends_stay_whole_with_and_without_tool_calls_or_text() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    let s = strategy(json!({"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 0}));
    // A run that ends on a tool call with no text answer: the result it is waiting for and
    // the call stay as they are.
    let output = "old output line\n".repeat(50);
    let mut ends_on_call = history(3, &output);
    ends_on_call.pop();
    let governed = g.govern(ends_on_call.clone(), &s).await.unwrap();
    let last = governed.messages.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert_eq!(
        last["content"],
        output.as_str(),
        "the current turn is never compacted"
    );
    assert!(governed.messages[3]["compacted"] == true, "older turns are");
    // A run that ends with a text answer.
    let ends_on_text = history(3, &output);
    let governed = g.govern(ends_on_text, &s).await.unwrap();
    assert_eq!(governed.messages[11]["content"], output.as_str());
    assert!(governed.messages[7]["compacted"] == true);
    // A single run with no turns to spare: nothing changes.
    let one = history(1, "only");
    let governed = g.govern(one.clone(), &s).await.unwrap();
    assert_eq!(governed.messages, one);
}

#[tokio::test]
async fn governance_that_does_not_shrink_is_rolled_back_and_not_retried_until_the_history_grows() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    // Outputs shorter than their placeholders: compacting them makes the request larger.
    let h = history(6, "ok");
    let s = strategy(json!({"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 0}));
    let first = g.govern(h.clone(), &s).await.unwrap();
    assert!(first.report.rolled_back);
    assert_eq!(first.messages, h, "rolled back to the request as it came");
    let second = g.govern(h.clone(), &s).await.unwrap();
    assert!(second
        .report
        .skipped
        .as_deref()
        .unwrap()
        .starts_with("inflation guard"));
    assert!(!second.report.rolled_back);
    let mut grown = h.clone();
    grown.push(json!({"role": "user", "content": "and now?"}));
    let third = g.govern(grown, &s).await.unwrap();
    assert!(
        third.report.skipped.is_none(),
        "tried again once the history grew"
    );
}

#[tokio::test]
async fn a_request_that_cannot_fit_is_refused_with_the_numbers() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let g = governor(500, &summariser, &store, &outputs, &guard);
    let h = vec![json!({"role": "user", "content": "word ".repeat(1000)})];
    let err: ContextLengthExceeded = g.govern(h.clone(), &strategy(json!({}))).await.unwrap_err();
    assert_eq!(err.window, 500);
    assert_eq!(err.reserved, 100);
    assert_eq!(err.margin, 10);
    assert_eq!(err.needed, err.prompt + 110);
    let text = err.to_string();
    assert!(text.contains("context window is 500 tokens"), "{text}");
    assert!(
        text.contains("memory_strategy"),
        "mode none suggests a strategy: {text}"
    );
}

#[tokio::test]
async fn a_reserve_near_two_to_the_64_is_refused_not_overflowed() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    };
    let (store, outputs, guard) = (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    );
    let h = vec![json!({"role": "user", "content": "Hello."})];
    for (reserve, margin) in [
        (u64::MAX, 10),
        (u64::MAX - 5, 10),
        (u64::MAX / 2 + 1, u64::MAX / 2),
    ] {
        let mut g = governor(200_000, &summariser, &store, &outputs, &guard);
        g.reserve_output = reserve;
        g.margin = margin;
        // Unchecked, the sum panics (debug) or wraps to a few tokens that fit (release).
        let err: ContextLengthExceeded = g
            .govern(h.clone(), &strategy(json!({"mode": "auto"})))
            .await
            .unwrap_err();
        assert_eq!(err.needed, u64::MAX, "{reserve} + {margin}");
        assert_eq!(err.reserved, reserve);
    }
}

/// Records every hook call; `inject` is what `on_after_compress` returns.
#[derive(Default)]
struct Recorder {
    usage: Mutex<Vec<(f64, usize, u64)>>,
    before: Mutex<Vec<(Vec<Value>, usize)>>,
    after: Mutex<Vec<(Vec<Value>, usize)>>,
    governed: Mutex<Vec<ContextReport>>,
    inject: Option<String>,
}

impl Callbacks for Recorder {
    fn on_usage_update(&self, used: f64, current_tokens: usize, max_tokens: u64) {
        self.usage
            .lock()
            .unwrap()
            .push((used, current_tokens, max_tokens));
    }

    fn on_before_compress(&self, messages: &[Value], cutoff: usize) {
        self.before
            .lock()
            .unwrap()
            .push((messages.to_vec(), cutoff));
    }

    fn on_after_compress(&self, messages: &[Value], summary: usize) -> Option<String> {
        self.after
            .lock()
            .unwrap()
            .push((messages.to_vec(), summary));
        self.inject.clone()
    }

    fn on_governed(&self, report: &ContextReport) {
        self.governed.lock().unwrap().push(report.clone());
    }
}

fn working_summariser() -> Scripted {
    Scripted {
        calls: AtomicUsize::new(0),
        fail: false,
    }
}

fn stores() -> (MemorySummaryStore, MemoryOutputStore, InflationGuard) {
    (
        MemorySummaryStore::default(),
        MemoryOutputStore::default(),
        InflationGuard::default(),
    )
}

/// Every tool result follows its call, and every call has its result.
fn assert_pairs_whole(messages: &[Value]) {
    let mut repaired = messages.to_vec();
    assert!(!repair(&mut repaired).any(), "{messages:#?}");
}

#[tokio::test]
async fn usage_is_reported_once_per_request_with_the_numbers_before_governance() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let recorder = Recorder::default();
    let mut g = governor(2000, &summariser, &store, &outputs, &guard);
    g.callbacks = Some(&recorder);
    let h = history(20, "output");
    let tokens = messages_tokens(&ApproxCounter, &h);
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "summarize"})))
        .await
        .unwrap();
    assert!(
        governed.report.tokens_after < tokens,
        "{:?}",
        governed.report
    );
    let usage = recorder.usage.lock().unwrap().clone();
    assert_eq!(usage.len(), 1, "{usage:?}");
    let (used, current, max) = usage[0];
    assert_eq!(
        (current, max),
        (tokens, 2000),
        "before governance, not after"
    );
    assert!((used - tokens as f64 / 2000.0).abs() < 1e-9, "{used}");
    let reports = recorder.governed.lock().unwrap().clone();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0], governed.report,
        "the report as the caller gets it"
    );

    // Mode none governs nothing, but the window still fills.
    let quiet = Recorder::default();
    g.callbacks = Some(&quiet);
    g.govern(h.clone(), &strategy(json!({}))).await.unwrap();
    assert_eq!(quiet.usage.lock().unwrap().len(), 1);
    assert!(quiet.before.lock().unwrap().is_empty());
    assert!(quiet.after.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_compress_hooks_see_the_summarised_messages_and_the_cutoff_and_only_then() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let recorder = Recorder::default();
    let mut g = governor(100_000, &summariser, &store, &outputs, &guard);
    g.callbacks = Some(&recorder);
    let s = strategy(json!({"mode": "summarize"}));

    let short = history(2, "output");
    g.govern(short, &s).await.unwrap();
    assert!(
        recorder.before.lock().unwrap().is_empty() && recorder.after.lock().unwrap().is_empty(),
        "no summary, no hook"
    );

    let h = history(20, "output");
    let governed = g.govern(h.clone(), &s).await.unwrap();
    let summarised = governed.report.summarised_messages;
    assert!(summarised > 0);
    let before = recorder.before.lock().unwrap().clone();
    assert_eq!(before.len(), 1);
    let (messages, cutoff) = &before[0];
    assert_eq!(
        *cutoff,
        1 + summarised,
        "the kept part starts after the middle"
    );
    assert_eq!(
        messages.as_slice(),
        &h[1..*cutoff],
        "the messages the summary replaces, as sent"
    );
    let after = recorder.after.lock().unwrap().clone();
    assert_eq!(after.len(), 1);
    assert_eq!(
        after[0],
        (governed.messages.clone(), 1),
        "the summary in place"
    );
    assert!(governed.messages[1]["content"]
        .as_str()
        .unwrap()
        .starts_with("[Summary of "));

    // A kept summary reused still replaces messages: the hooks hear of it again.
    let again = g.govern(h.clone(), &s).await.unwrap();
    assert_eq!(again.report.summary, Some(SummaryOutcome::Reused));
    assert_eq!(recorder.before.lock().unwrap().len(), 2);
    assert_eq!(recorder.after.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn text_from_on_after_compress_goes_right_after_the_summary_and_is_counted() {
    let (store, outputs, guard) = stores();
    let h = history(20, "output");
    for fail in [false, true] {
        let summariser = Scripted {
            calls: AtomicUsize::new(0),
            fail,
        };
        let recorder = Recorder {
            inject: Some("Pinned: the task list is in TODO.md.".into()),
            ..Recorder::default()
        };
        let mut g = governor(100_000, &summariser, &store, &outputs, &guard);
        g.callbacks = Some(&recorder);
        let governed = g
            .govern(h.clone(), &strategy(json!({"mode": "summarize"})))
            .await
            .unwrap();
        let m = &governed.messages;
        let summarised = governed.report.summarised_messages;
        assert_eq!(
            m[2],
            json!({"role": "user", "content": "Pinned: the task list is in TODO.md."}),
            "fail={fail}"
        );
        assert!(governed.report.injected_tokens > 0);
        assert_eq!(
            governed.report.tokens_after,
            messages_tokens(&ApproxCounter, m),
            "the injected text is counted"
        );
        assert_eq!(&m[3..], &h[1 + summarised..], "the tail as it came");
        assert_pairs_whole(m);
        assert_eq!(m.last(), h.last(), "the current turn stays last");
    }

    let summariser = working_summariser();
    let blank = Recorder {
        inject: Some("  \n".into()),
        ..Recorder::default()
    };
    let mut g = governor(100_000, &summariser, &store, &outputs, &guard);
    g.callbacks = Some(&blank);
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "summarize"})))
        .await
        .unwrap();
    assert_eq!(
        governed.report.injected_tokens, 0,
        "blank text adds nothing"
    );
    assert_eq!(
        governed.messages.len(),
        h.len() - governed.report.summarised_messages + 1
    );
}

fn sliding() -> mnemo_context::ResolvedStrategy {
    strategy(json!({"mode": "summarize", "summary_window": "sliding"}))
}

#[tokio::test]
async fn the_sliding_window_keeps_the_first_run_whole_and_half_the_history() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    // 49 messages: the last 24 start on a user message.
    let h = history(12, "output");
    assert_eq!(h.len(), 49);
    let governed = g.govern(h.clone(), &sliding()).await.unwrap();
    let m = &governed.messages;
    // The first run: system, question, tool call, its result, the first answer.
    assert_eq!(&m[..5], &h[..5], "{:#?}", &m[..6]);
    assert_eq!(m[4]["content"], "Read step 0.");
    assert_eq!(governed.report.summarised_messages, 49 - 5 - 24);
    assert_eq!(
        m[5]["content"],
        "[Summary of 20 earlier messages]\nThe agent read src/main.rs 20 times."
    );
    assert_eq!(&m[6..], &h[25..], "the last max(4, 49/2) = 24 messages");
    assert_pairs_whole(m);

    // The default window keeps only the system prompt before the summary.
    let turn = g
        .govern(h.clone(), &strategy(json!({"mode": "summarize"})))
        .await
        .unwrap();
    assert!(turn.messages[1]["content"]
        .as_str()
        .unwrap()
        .starts_with("[Summary of "));
}

#[tokio::test]
async fn the_sliding_tail_never_parts_a_call_from_its_result_and_keeps_at_least_four() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    // 61 messages: the last 30 would start on a tool result; its call comes along.
    let h = history(15, "output");
    assert_eq!(h[61 - 30]["role"], "tool");
    let governed = g.govern(h.clone(), &sliding()).await.unwrap();
    let m = &governed.messages;
    assert_eq!(&m[..5], &h[..5]);
    assert_eq!(
        &m[6..],
        &h[30..],
        "31 kept: the call and everything after it"
    );
    assert_eq!(m[6]["tool_calls"][0]["id"], "call_7");
    assert_pairs_whole(m);

    // Seven messages: half would be 3; the tail keeps 4.
    let short: Vec<Value> = (0..7)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("message {i}")})
        })
        .collect();
    let s = strategy(
        json!({"mode": "summarize", "summary_window": "sliding", "max_history_messages": 6}),
    );
    let governed = g.govern(short.clone(), &s).await.unwrap();
    let m = &governed.messages;
    assert_eq!(
        &m[..2],
        &short[..2],
        "the first run: a question and its answer"
    );
    assert_eq!(governed.report.summarised_messages, 1);
    assert_eq!(&m[3..], &short[3..], "the last four");
}

#[tokio::test]
async fn the_sliding_window_falls_back_to_the_static_marker() {
    let summariser = Scripted {
        calls: AtomicUsize::new(0),
        fail: true,
    };
    let (store, outputs, guard) = stores();
    let g = governor(100_000, &summariser, &store, &outputs, &guard);
    let h = history(12, "output");
    let governed = g.govern(h.clone(), &sliding()).await.unwrap();
    let m = &governed.messages;
    assert_eq!(governed.report.summary, Some(SummaryOutcome::StaticMarker));
    assert_eq!(&m[..5], &h[..5]);
    assert_eq!(m[5], static_marker(20));
    assert_eq!(
        m[5]["content"],
        "[Earlier conversation trimmed — 20 messages removed to stay within context budget]"
    );
    assert_eq!(&m[6..], &h[25..]);
    // With no summariser at all, the same.
    let mut none = governor(100_000, &summariser, &store, &outputs, &guard);
    none.summariser = None;
    let governed = none.govern(h.clone(), &sliding()).await.unwrap();
    assert_eq!(governed.messages[5], static_marker(20));
}

#[test]
fn a_strategy_with_a_bad_summary_window_is_refused_naming_the_field() {
    for bad in [json!("sideways"), json!(true), json!({"sliding": 4})] {
        let err = Strategy::from_json(json!({"summary_window": bad}))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("summary_window"), "{bad}: {err}");
    }
    let merged = Strategy::from_json(json!({"mode": "auto"}))
        .unwrap()
        .over(&Strategy::from_json(json!({"summary_window": "sliding"})).unwrap());
    assert_eq!(
        merged.resolve().summary_window,
        mnemo_context::SummaryWindow::Sliding
    );
}

#[tokio::test]
async fn trim_cuts_old_outputs_on_every_request_without_a_trigger() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    // A window so large that no trigger would fire.
    let g = governor(1_000_000, &summariser, &store, &outputs, &guard);
    let h = history(4, &"line of output\n".repeat(300));
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "trim"})))
        .await
        .unwrap();
    let report = &governed.report;
    assert_eq!(report.stages, ["trim"]);
    assert_eq!(report.trimmed, 2, "the two turns before the two kept");
    assert!(governed.messages[3]["content"]
        .as_str()
        .unwrap()
        .ends_with("[…truncated, 4500 chars total]"));
    assert_eq!(
        governed.messages[15], h[15],
        "a kept turn's output is whole"
    );
    // Compaction still waits for its trigger.
    let compacted = g
        .govern(h, &strategy(json!({"mode": "compact"})))
        .await
        .unwrap();
    assert!(compacted.report.stages.is_empty(), "{:?}", compacted.report);
}

#[tokio::test]
async fn trim_summarize_trims_then_summarises_with_the_sliding_window_in_one_request() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let g = governor(1_000_000, &summariser, &store, &outputs, &guard);
    // 49 messages: past max_history_messages (40), so a summary is due.
    let h = history(12, &"line of output\n".repeat(300));
    let governed = g
        .govern(h.clone(), &strategy(json!({"mode": "trim_summarize"})))
        .await
        .unwrap();
    let report = &governed.report;
    assert_eq!(report.stages, ["trim", "summarize"]);
    let m = &governed.messages;
    // The sliding window: the first run whole, then the summary, then the last 24.
    assert_eq!(&m[..3], &h[..3]);
    assert!(m[5]["content"]
        .as_str()
        .unwrap()
        .starts_with("[Summary of 20 earlier messages]"));
    assert_eq!(m.len(), 6 + 24);
    // In the tail, outputs before the two kept turns are trimmed; the last two are whole.
    let tail_outputs: Vec<&str> = m[6..]
        .iter()
        .filter(|msg| msg["role"] == "tool")
        .map(|msg| msg["content"].as_str().unwrap())
        .collect();
    assert_eq!(tail_outputs.len(), 6);
    assert!(tail_outputs[..4].iter().all(|o| o.contains("[…truncated")));
    assert!(tail_outputs[4..].iter().all(|o| !o.contains("[…truncated")));
    assert_pairs_whole(m);
}

#[tokio::test]
async fn compact_keep_messages_counts_messages_instead_of_turns() {
    let summariser = working_summariser();
    let (store, outputs, guard) = stores();
    let g = governor(1_000_000, &summariser, &store, &outputs, &guard);
    let h = history(4, &"line of output\n".repeat(300));
    // The last 6 messages: the last turn whole, and the previous turn's output and answer.
    let governed = g
        .govern(
            h.clone(),
            &strategy(json!({"mode": "trim", "compact_keep_messages": 6})),
        )
        .await
        .unwrap();
    assert_eq!(governed.report.trimmed, 2, "{:?}", governed.report);
    assert_eq!(governed.messages[11], h[11], "within the last 6 messages");
    assert!(governed.messages[7]["content"]
        .as_str()
        .unwrap()
        .contains("[…truncated"));
    // More messages than the history: nothing is touched.
    let all = g
        .govern(
            h,
            &strategy(json!({"mode": "trim", "compact_keep_messages": 100})),
        )
        .await
        .unwrap();
    assert_eq!(all.report.trimmed, 0);
}
