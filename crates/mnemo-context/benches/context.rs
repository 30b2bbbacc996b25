//! Context governance on a generated, deterministic tool-heavy trace: 200 turns, each a
//! question, a tool call, an output of 1k-50k characters and an answer, replayed as agents
//! do it (the client resends its whole history every turn).
//!
//! - tokens sent upstream per turn for `none` / `trim` / `compact` / `auto` (and how many
//!   turns the pre-flight refuses), with `gpt-4o`'s window and exact counts;
//! - summary calls made across the replay against the number of summaries written;
//! - governance time per request at 200 messages, LLM calls excluded (the summariser answers
//!   at once), against the same request counted only (the baseline);
//! - the four-characters-a-token approximation's error against tiktoken.
//!
//! `cargo bench --workspace --bench context [-- --json] [-- --quick]`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use mnemo_context::summarize::SummaryRequest;
use mnemo_context::tokens::messages_tokens;
use mnemo_context::{
    ApproxCounter, CachedCounter, ContextWindows, Governor, InflationGuard, MemoryOutputStore,
    MemorySummaryStore, Strategy, Summariser, TiktokenCounter, TokenCounter,
};
use mnemo_test_support::percentile;
use serde_json::{json, Value};

const TURNS: usize = 200;
const MODEL: &str = "gpt-4o";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(run(if quick { 60 } else { TURNS }));
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    } else {
        print_report(&report);
    }
}

/// A small deterministic generator (no dependency, same trace on every machine).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const TOOLS: [&str; 4] = ["read_file", "grep", "run_tests", "list_dir"];

/// One turn's four messages; the output is code-like text of 1k-50k characters.
fn turn(rng: &mut Lcg, t: usize) -> [Value; 4] {
    let tool = TOOLS[rng.below(TOOLS.len() as u64) as usize];
    let size = 1_000 + rng.below(49_000) as usize;
    let mut output = String::with_capacity(size + 80);
    let mut line = 0;
    while output.len() < size {
        let n = rng.below(1000);
        output.push_str(&format!(
            "src/module_{n}.rs:{line}: let value_{n} = compute(&input[{line}..], {n}); // step {t}\n"
        ));
        line += 1;
    }
    let id = format!("call_{t}");
    [
        json!({"role": "user", "content": format!("Step {t}: use {tool} to check module {} and tell me what you find.", rng.below(1000))}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": tool, "arguments": format!("{{\"path\": \"src/module_{}.rs\"}}", rng.below(1000))}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": output}),
        json!({"role": "assistant", "content": format!("Step {t} done: module {} computes values in {} steps; nothing failed.", rng.below(1000), line)}),
    ]
}

fn trace(turns: usize) -> Vec<[Value; 4]> {
    let mut rng = Lcg(42);
    (0..turns).map(|t| turn(&mut rng, t)).collect()
}

/// The request of turn `t`: the system prompt, every earlier turn whole, and this turn up to
/// its tool result (the model is to answer it).
fn request(trace: &[[Value; 4]], t: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent. Use the tools to inspect the repository."}),
    ];
    for earlier in &trace[..t] {
        messages.extend(earlier.iter().cloned());
    }
    messages.extend(trace[t][..3].iter().cloned());
    messages
}

/// Answers at once with a fixed summary, counting calls.
#[derive(Default)]
struct CountingSummariser {
    calls: AtomicUsize,
}

impl Summariser for CountingSummariser {
    fn summarise(&self, request: SummaryRequest) -> BoxFuture<'_, Result<String, String>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let carried = request.previous.map(|p| p.len()).unwrap_or(0);
        Box::pin(async move {
            Ok(format!(
                "The agent inspected modules with read_file, grep, run_tests and list_dir; every step passed and no file was changed. Pending: none. (carried {carried} chars)"
            ))
        })
    }
}

struct ModeRun {
    mode: &'static str,
    tokens: Vec<usize>,
    refused: usize,
    summary_calls: usize,
    summaries_written: usize,
    summaries_reused: usize,
}

async fn replay(mode: &'static str, trace: &[[Value; 4]], counter: &dyn TokenCounter) -> ModeRun {
    let strategy = Strategy::from_json(json!({"mode": mode}))
        .expect("a valid strategy")
        .resolve();
    let window = ContextWindows::default().window(MODEL, None);
    let summariser = CountingSummariser::default();
    let summaries = MemorySummaryStore::default();
    let outputs = MemoryOutputStore::default();
    let guard = InflationGuard::default();
    let governor = Governor {
        counter,
        window,
        model: MODEL,
        summariser: Some(&summariser),
        summaries: Some(&summaries),
        outputs: Some(&outputs),
        guard: Some(&guard),
        callbacks: None,
        summary_chunk_tokens: 16_000,
        reserve_output: 512,
        margin: 64,
    };
    let mut run = ModeRun {
        mode,
        tokens: Vec::new(),
        refused: 0,
        summary_calls: 0,
        summaries_written: 0,
        summaries_reused: 0,
    };
    for t in 0..trace.len() {
        let messages = request(trace, t);
        match governor.govern(messages.clone(), &strategy).await {
            Ok(governed) => {
                run.tokens.push(governed.report.tokens_after);
                match governed.report.summary {
                    Some(mnemo_context::summarize::SummaryOutcome::Reused) => {
                        run.summaries_reused += 1
                    }
                    Some(_) => run.summaries_written += 1,
                    None => {}
                }
            }
            Err(_) => {
                run.refused += 1;
                run.tokens.push(messages_tokens(counter, &messages));
            }
        }
    }
    run.summary_calls = summariser.calls.load(Ordering::Relaxed);
    run
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Governance of the request at 200 messages (`auto`, warm: the summary is kept and the
/// counts cached, as for a resent history), against only counting it.
async fn timing(trace: &[[Value; 4]], counter: &dyn TokenCounter, rounds: usize) -> Value {
    let t = (200 - 4) / 4; // 1 system + 49 turns * 4 + 3 = 200 messages
    let messages = request(trace, t.min(trace.len() - 1));
    let strategy = Strategy::from_json(json!({"mode": "auto"}))
        .expect("strategy")
        .resolve();
    let summariser = CountingSummariser::default();
    let summaries = MemorySummaryStore::default();
    let outputs = MemoryOutputStore::default();
    let governor = Governor {
        counter,
        window: ContextWindows::default().window(MODEL, None),
        model: MODEL,
        summariser: Some(&summariser),
        summaries: Some(&summaries),
        outputs: Some(&outputs),
        guard: None,
        callbacks: None,
        summary_chunk_tokens: 16_000,
        reserve_output: 512,
        margin: 64,
    };
    let cold_started = Instant::now();
    let first = governor
        .govern(messages.clone(), &strategy)
        .await
        .expect("fits once governed");
    let cold = cold_started.elapsed();
    let mut govern = Vec::with_capacity(rounds);
    let mut count_only = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        // The copy is made outside the timing: the proxy has it from the request body.
        let copy = messages.clone();
        let started = Instant::now();
        let _ = governor.govern(copy, &strategy).await.expect("fits");
        govern.push(millis(started.elapsed()));
        let started = Instant::now();
        std::hint::black_box(messages_tokens(counter, &messages));
        count_only.push(millis(started.elapsed()));
    }
    let chars: usize = messages.iter().map(|m| m.to_string().len()).sum();
    json!({
        "messages": messages.len(),
        "request_bytes": chars,
        "tokens_before": first.report.tokens_before,
        "tokens_after": first.report.tokens_after,
        "stages": first.report.stages,
        "first_request_ms": millis(cold),
        "govern_ms_p50": percentile(&mut govern, 0.5),
        "govern_ms_p99": percentile(&mut govern, 0.99),
        "baseline_count_only_ms_p50": percentile(&mut count_only, 0.5),
        "baseline_count_only_ms_p99": percentile(&mut count_only, 0.99),
        "rounds": rounds,
    })
}

/// The approximation's error against tiktoken, per message and over whole requests.
fn counter_error(trace: &[[Value; 4]], exact: &dyn TokenCounter) -> Value {
    let mut errors = Vec::new();
    let (mut approx_total, mut exact_total) = (0usize, 0usize);
    for turn in trace {
        for message in turn {
            let a = messages_tokens(&ApproxCounter, std::slice::from_ref(message));
            let e = messages_tokens(exact, std::slice::from_ref(message));
            approx_total += a;
            exact_total += e;
            errors.push((a as f64 - e as f64) / e as f64);
        }
    }
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    json!({
        "messages": errors.len(),
        "relative_error_abs_p50": percentile(&mut abs, 0.5),
        "relative_error_abs_p99": percentile(&mut abs, 0.99),
        "mean_signed_relative_error": errors.iter().sum::<f64>() / errors.len() as f64,
        "total_ratio_approx_over_exact": approx_total as f64 / exact_total as f64,
    })
}

async fn run(turns: usize) -> Value {
    let trace = trace(turns);
    let exact = CachedCounter::new(TiktokenCounter::for_model(MODEL).expect("gpt-4o is known"));
    let window = ContextWindows::default().window(MODEL, None);
    let mut modes = serde_json::Map::new();
    for mode in ["none", "trim", "compact", "auto"] {
        let run = replay(mode, &trace, &exact).await;
        let mean = run.tokens.iter().sum::<usize>() as f64 / run.tokens.len() as f64;
        let last = *run.tokens.last().unwrap_or(&0);
        let max = run.tokens.iter().copied().max().unwrap_or(0);
        modes.insert(
            run.mode.into(),
            json!({
                "tokens_per_turn_mean": mean.round(),
                "tokens_last_turn": last,
                "tokens_max": max,
                "tokens_total": run.tokens.iter().sum::<usize>(),
                "turns_refused_by_preflight": run.refused,
                "summary_calls": run.summary_calls,
                "requests_with_a_new_or_extended_summary": run.summaries_written,
                "requests_reusing_a_summary": run.summaries_reused,
                "tokens_per_turn_every_20": run.tokens.iter().step_by(20).collect::<Vec<_>>(),
            }),
        );
    }
    json!({
        "turns": turns,
        "model": MODEL,
        "window": window.tokens,
        "modes": modes,
        "governance_at_200_messages": timing(&trace, &exact, 50).await,
        "approx_counter_vs_tiktoken": counter_error(&trace, &exact),
    })
}

fn print_report(report: &Value) {
    println!(
        "trace: {} turns, model {} (window {} tokens)",
        report["turns"], report["model"], report["window"]
    );
    println!("mode      mean/turn   last turn   refused  summary calls  (new|extended / reused)");
    for mode in ["none", "trim", "compact", "auto"] {
        let m = &report["modes"][mode];
        println!(
            "{mode:<8} {:>10} {:>11} {:>9} {:>14}  ({} / {})",
            m["tokens_per_turn_mean"],
            m["tokens_last_turn"],
            m["turns_refused_by_preflight"],
            m["summary_calls"],
            m["requests_with_a_new_or_extended_summary"],
            m["requests_reusing_a_summary"],
        );
    }
    let g = &report["governance_at_200_messages"];
    println!(
        "governance at {} messages ({} bytes): p50 {:.3} ms, p99 {:.3} ms (counting only: p50 {:.3} ms); first request {:.1} ms",
        g["messages"],
        g["request_bytes"],
        g["govern_ms_p50"].as_f64().unwrap_or_default(),
        g["govern_ms_p99"].as_f64().unwrap_or_default(),
        g["baseline_count_only_ms_p50"].as_f64().unwrap_or_default(),
        g["first_request_ms"].as_f64().unwrap_or_default(),
    );
    let c = &report["approx_counter_vs_tiktoken"];
    println!(
        "4 chars/token vs tiktoken: |error| p50 {:.1}%, p99 {:.1}%, whole trace {:.3}x",
        c["relative_error_abs_p50"].as_f64().unwrap_or_default() * 100.0,
        c["relative_error_abs_p99"].as_f64().unwrap_or_default() * 100.0,
        c["total_ratio_approx_over_exact"]
            .as_f64()
            .unwrap_or_default(),
    );
}
