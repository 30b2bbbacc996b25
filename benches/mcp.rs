//! What a `search_memories` tool call costs over MCP, against the REST API's search, on a
//! store of 10k memories (50 conversations): the round trip a client sees, p50 and p99.
//!
//! The real binary serves each transport, as a host would run it:
//! - `mnemo serve`: REST (`POST /v1/memories/search`) and MCP over streamable HTTP (a
//!   `tools/call` POSTed to `/mcp`), interleaved call by call;
//! - `mnemo mcp`: MCP over stdio, one JSON-RPC line out, one back.
//!
//! One process owns a store at a time, so the two servers take turns: serve, stdio, serve
//! again. REST is the baseline of both serve phases; the stdio figures are compared with the
//! REST median of the phases around them. Clients send raw JSON-RPC (no SDK), so the figures
//! are the server's and the transport's. The cross-encoder is off; no upstream LLM.
//!
//! `cargo bench --workspace --bench mcp [-- --json] [-- --quick]`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};
use support::{filled_store, models_dir};

const MEMORIES: usize = 10_000;
const CONVERSATIONS: usize = 50;
const QUERIES: [&str; 4] = [
    "who is allergic to peanuts",
    "trips to Lisbon",
    "the jazz festival",
    "what does grandpa love",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let rounds = if args.iter().any(|a| a == "--quick") {
        50
    } else {
        300
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    build_store(&store);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let mut rest = Vec::new();
    let mut http = Vec::new();
    let mut stdio = Vec::new();
    let first = runtime.block_on(serve_phase(&store, rounds / 2));
    rest.extend(first.0);
    http.extend(first.1);
    stdio.extend(stdio_phase(&store, rounds));
    let second = runtime.block_on(serve_phase(&store, rounds / 2));
    rest.extend(second.0);
    http.extend(second.1);

    let (rest_p50, rest_p99) = percentiles(rest);
    let (http_p50, http_p99) = percentiles(http);
    let (stdio_p50, stdio_p99) = percentiles(stdio);
    let ratio = |x: f64| (x / rest_p50 * 100.0).round() / 100.0;
    let report = json!({
        "memories": MEMORIES,
        "calls_per_transport": rounds,
        "rest_search": {"p50_ms": rest_p50, "p99_ms": rest_p99},
        "mcp_http_search_memories": {"p50_ms": http_p50, "p99_ms": http_p99, "p50_vs_rest": ratio(http_p50)},
        "mcp_stdio_search_memories": {"p50_ms": stdio_p50, "p99_ms": stdio_p99, "p50_vs_rest": ratio(stdio_p50)},
    });
    if json_out {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    }
}

fn conversation(i: usize) -> String {
    format!("c{}", i % CONVERSATIONS)
}

/// Writes the memories with the engine, in a runtime of its own that is gone (and the
/// store's lock with it) before a server opens the store.
fn build_store(root: &Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = filled_store(root, MEMORIES, conversation).await;
        client.wait_idle().await;
    });
}

/// `mnemo ARGS --memory-path ROOT`, cross-encoder off, no upstream, no watcher.
fn mnemo(root: &Path, args: &[&str]) -> Command {
    let config = root.with_extension("toml");
    std::fs::write(&config, "[retrieval]\nreranker = \"off\"\n").unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .args(args)
        .arg("--memory-path")
        .arg(root)
        .arg("--config")
        .arg(config)
        .env("MNEMO_START_WATCHER", "false")
        .env("MNEMO_MODELS_DIR", models_dir())
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .env_remove("MNEMO_API_TOKEN")
        .env_remove("MNEMO_CONFIG")
        .env_remove("RUST_LOG");
    command
}

/// A child process, killed when dropped (a failed bench leaves nothing running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn search_call(id: usize, round: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "search_memories",
        "arguments": {"query": QUERIES[round % QUERIES.len()], "conversation": conversation(round), "top_k": 10},
    }})
}

fn check_hits(answer: &Value) {
    let hits = answer["result"]["structuredContent"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("not a search answer: {answer}"));
    assert_eq!(hits.len(), 10, "{answer}");
}

/// `mnemo serve`: REST and MCP over HTTP, alternating, `rounds` calls each (after a few
/// untimed ones). Returns their times in ms.
async fn serve_phase(root: &Path, rounds: usize) -> (Vec<f64>, Vec<f64>) {
    let mut child = mnemo(root, &["serve", "--port", "0", "--no-local-llm"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = lines.next().expect("a banner").expect("text");
    std::thread::spawn(move || lines.for_each(drop));
    let server = Running(child);
    let url = banner
        .strip_prefix("mnemo listening on ")
        .unwrap_or_else(|| panic!("no address in {banner}"))
        .to_owned();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut rest, mut mcp) = (Vec::new(), Vec::new());
    for round in 0..rounds + 5 {
        let search = json!({"query": QUERIES[round % QUERIES.len()], "conversation_id": conversation(round), "top_k": 10});
        let (found, rest_ms) =
            timed_post(&http, &format!("{url}/v1/memories/search"), &search).await;
        assert_eq!(found["hits"].as_array().map(Vec::len), Some(10), "{found}");
        let (answer, mcp_ms) =
            timed_post(&http, &format!("{url}/mcp"), &search_call(round, round)).await;
        check_hits(&answer);
        if round >= 5 {
            rest.push(rest_ms);
            mcp.push(mcp_ms);
        }
    }
    drop(server);
    (rest, mcp)
}

/// POSTs `body` to `url`; the JSON answer and the round trip in ms.
async fn timed_post(http: &reqwest::Client, url: &str, body: &Value) -> (Value, f64) {
    let started = Instant::now();
    let answer = http
        .post(url)
        // What an MCP client sends; the REST API ignores it.
        .header("accept", "application/json, text/event-stream")
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (answer, started.elapsed().as_secs_f64() * 1e3)
}

/// `mnemo mcp` over its pipes: `rounds` tool calls (after a few untimed ones), each timed
/// from the line written to the line read. Returns the times in ms.
fn stdio_phase(root: &Path, rounds: usize) -> Vec<f64> {
    let mut child = mnemo(root, &["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let process = Running(child);
    exchange(
        &mut stdin,
        &mut stdout,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}),
    );
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let mut times = Vec::new();
    for round in 0..rounds + 5 {
        let started = Instant::now();
        let answer = exchange(&mut stdin, &mut stdout, &search_call(round + 1, round));
        let ms = started.elapsed().as_secs_f64() * 1e3;
        check_hits(&answer);
        if round >= 5 {
            times.push(ms);
        }
    }
    drop(stdin);
    drop(process);
    times
}

fn exchange(stdin: &mut ChildStdin, stdout: &mut BufReader<ChildStdout>, message: &Value) -> Value {
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn percentiles(mut times: Vec<f64>) -> (f64, f64) {
    let mut at = |q: f64| (support::percentile(&mut times, q) * 100.0).round() / 100.0;
    (at(0.5), at(0.99))
}
