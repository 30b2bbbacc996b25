//! What mnemo's proxy adds to a chat request, with a store of 10k memories and the scripted
//! upstream (so the LLM does not dominate), against calling the upstream directly in the same
//! run; and sustained requests/s with 16 concurrent clients. Latency is measured twice: with
//! the background work of the previous turn drained first (`idle`, what an agent sees when
//! its turns are LLM-seconds apart) and with requests back to back.
//!
//! The scripted upstream answers mnemo's own calls as a model would (a fact per message,
//! every fact added, a new summary), so each turn's background pass does the whole write
//! path: extraction, reconciliation against the nearest facts, summary, commit.
//!
//! `cargo bench --workspace --bench proxy [-- --json] [-- --quick] [-- --vocabulary-expansion N]`.
//! The cross-encoder is off; vocabulary expansion takes its default unless N is given (0 turns
//! it off, for a baseline in the same session).

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mnemo_core::{ConversationId, MemoryRecord, Role};
use mnemo_engine::{MemoryClient, OpenOptions};
use mnemo_scripted_llm::ScriptedLlm;
use serde_json::{json, Value};
use support::{
    memory_text, percentile_ms as percentile, round, scripted_model, scripted_store_config,
    serve_on_loopback,
};

const MEMORIES: usize = 10_000;
const CONVERSATIONS: usize = 50;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let vocabulary_expansion = args
        .iter()
        .position(|a| a == "--vocabulary-expansion")
        .map(|at| {
            args.get(at + 1)
                .and_then(|n| n.parse().ok())
                .expect("--vocabulary-expansion takes a number of words")
        });
    // RUST_LOG=mnemo_engine=debug shows where each request's time goes.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (report, store) = runtime.block_on(run(quick, vocabulary_expansion));
    // The store's folder must outlive every clone of the client, and connection tasks still
    // hold some until the runtime shuts down.
    drop(runtime);
    drop(store);
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        println!("{report:#}");
    }
}

async fn run(quick: bool, vocabulary_expansion: Option<usize>) -> (Value, tempfile::TempDir) {
    let upstream = ScriptedLlm::with_handler(scripted_model).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = scripted_store_config(dir.path(), upstream.base_url());
    if let Some(words) = vocabulary_expansion {
        config.retrieval.vocabulary_expansion = words;
    }
    let expansion_words = config.retrieval.vocabulary_expansion;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let started = Instant::now();
    let records: Vec<MemoryRecord> = (0..MEMORIES)
        .map(|i| {
            let conversation = ConversationId::new(&format!("c{}", i % CONVERSATIONS)).unwrap();
            MemoryRecord::new(conversation, Role::Memory, memory_text(i))
        })
        .collect();
    for chunk in records.chunks(500) {
        client.add_records(chunk.to_vec()).await.unwrap();
    }
    eprintln!(
        "store of {MEMORIES} memories built in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mnemo = serve_on_loopback(&client).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let direct = upstream.base_url();
    let rounds = if quick { 40 } else { 200 };

    let body = |i: usize, stream: bool| {
        json!({
            "model": "scripted",
            "stream": stream,
            "memory_id": format!("c{}", i % CONVERSATIONS),
            "messages": [{"role": "user", "content": format!("My sister loves {}", memory_text(i))}]
        })
    };
    // Warm-up.
    for i in 0..10 {
        chat(&http, &format!("{mnemo}/v1"), body(i, false)).await;
        chat(&http, &direct, body(i, false)).await;
    }
    // Idle: background work drained before each request, as when turns are seconds of LLM
    // time apart. Back to back: the next request arrives while the previous turn is still
    // being indexed and learnt from, competing for the same cores.
    let mut modes = Vec::new();
    for (mode, drain) in [("idle", true), ("back_to_back", false)] {
        let (mut via, mut plain) = (Vec::new(), Vec::new());
        let (mut via_ttft, mut plain_ttft) = (Vec::new(), Vec::new());
        for i in 0..rounds {
            // Interleaved, so both see the same machine.
            plain.push(chat(&http, &direct, body(i, false)).await);
            if drain {
                client.wait_idle().await;
            }
            via.push(chat(&http, &format!("{mnemo}/v1"), body(i, false)).await);
            plain_ttft.push(first_chunk(&http, &direct, body(i, true)).await);
            if drain {
                client.wait_idle().await;
            }
            via_ttft.push(first_chunk(&http, &format!("{mnemo}/v1"), body(i, true)).await);
        }
        client.wait_idle().await;
        let (p50_via, p50_plain) = (percentile(&mut via, 0.5), percentile(&mut plain, 0.5));
        let (ttft_via, ttft_plain) = (
            percentile(&mut via_ttft, 0.5),
            percentile(&mut plain_ttft, 0.5),
        );
        modes.push((
            mode,
            json!({
                "non_streaming_ms": {
                    "direct_p50": p50_plain, "direct_p99": percentile(&mut plain, 0.99),
                    "via_mnemo_p50": p50_via, "via_mnemo_p99": percentile(&mut via, 0.99),
                    "added_p50": round(p50_via - p50_plain),
                },
                "time_to_first_token_ms": {
                    "direct_p50": ttft_plain,
                    "via_mnemo_p50": ttft_via,
                    "via_mnemo_p99": percentile(&mut via_ttft, 0.99),
                    "added_p50": round(ttft_via - ttft_plain),
                },
            }),
        ));
    }

    let seconds = if quick { 5 } else { 15 };
    let (requests, errors) = load(&http, &mnemo, 16, Duration::from_secs(seconds)).await;
    client.wait_idle().await;

    // Proof that the write path ran: mnemo's own calls, by kind.
    let calls = |schema: &str| upstream.structured_calls(schema).len();
    let mut report = json!({
        "memories": MEMORIES,
        "vocabulary_expansion": expansion_words,
        "rounds": rounds,
        "write_path_calls": {
            "extraction": calls("facts"),
            "reconciliation": calls("memory_operations"),
            "summary": calls("summary"),
        },
        "throughput_16_clients": {
            "seconds": seconds,
            "requests": requests,
            "requests_per_s": round(requests as f64 / seconds as f64),
            "errors": errors,
        },
    });
    for (mode, figures) in modes {
        report[mode] = figures;
    }
    (report, dir)
}

async fn chat(http: &reqwest::Client, base: &str, body: Value) -> f64 {
    let started = Instant::now();
    let response = http
        .post(format!("{base}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.bytes().await.unwrap();
    started.elapsed().as_secs_f64() * 1000.0
}

async fn first_chunk(http: &reqwest::Client, base: &str, body: Value) -> f64 {
    let started = Instant::now();
    let response = http
        .post(format!("{base}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    stream.next().await.unwrap().unwrap();
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    while stream.next().await.is_some() {}
    elapsed
}

/// `clients` loops sending chat requests through mnemo for `duration`.
async fn load(
    http: &reqwest::Client,
    mnemo: &str,
    clients: usize,
    duration: Duration,
) -> (usize, usize) {
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let http = http.clone();
            let url = format!("{mnemo}/v1/chat/completions");
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0, 0);
                let mut i = 0;
                while Instant::now() < deadline {
                    let body = json!({
                        "model": "scripted",
                        "memory_id": format!("load{c}"),
                        "messages": [{"role": "user", "content": format!("Message {i} from client {c}.")}]
                    });
                    match http.post(&url).json(&body).send().await {
                        Ok(r) if r.status().is_success() => {
                            let _ = r.bytes().await;
                            ok += 1
                        }
                        _ => failed += 1,
                    }
                    i += 1;
                }
                (ok, failed)
            })
        })
        .collect();
    let mut totals = (0, 0);
    for task in tasks {
        let (ok, failed) = task.await.unwrap();
        totals.0 += ok;
        totals.1 += failed;
    }
    totals
}
