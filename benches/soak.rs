//! mnemo under a long, steady load, as a busy deployment lives: 16 clients chatting through
//! the proxy for ten minutes (every third streamed), each turn's write path running on the
//! scripted upstream, which answers as a model would (a fact per message, every fact added,
//! a summary). Reported: requests, errors, latency p50/p99 overall and minute by minute,
//! the process's resident memory, open files and CPU time each minute, the CPU time a
//! request cost, overall and minute by minute (the write path's included: on a busy
//! machine, the figure to compare between builds, far steadier than throughput), how many
//! acknowledged user turns are missing from the store (a turn is on disk before its answer
//! is sent), the write-path passes still queued at the end, and the embedding model's time
//! a request with the floors it and the CPU time set on this machine's latency: the model
//! runs one call at a time, so 16 clients each waiting for their turn cannot be answered
//! faster, on average, than 16 times a request's time on it, nor than 16 times a request's
//! CPU time over the cores.
//!
//! The scripted upstream answers in microseconds, so chats arrive far faster than with a
//! real model, and as fast as the write path learns from them (each pass embeds, searches,
//! reconciles and commits): once a conversation has its bound of passes waiting, its next
//! chat waits for room, so the latency measured includes the write path's pace. Passes
//! still queued at the end are counted rather than waited for. `--no-learn` sends
//! `memory_learn: false`, the same chats without the write path, to show what the passes
//! cost. `--answer-ms N` makes the scripted model take N ms over each chat answer (not over
//! the write path's calls), as a real model does: the clients then wait as agents wait.
//!
//! The pass criteria: 0 errors, 0 missing, memory and descriptors flat after the first
//! minute, p99 under 1 s.
//!
//! `cargo bench --workspace --bench soak [-- --minutes N] [-- --seconds N] [-- --answer-ms N] [-- --no-learn] [-- --json]`.
//! Eviction runs as configured by default (500 facts and turns a conversation), so what is
//! stored stays bounded; a turn it retired is looked for under `deleted/` too, so a missing
//! turn is a lost one.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mnemo_engine::{MemoryClient, OpenOptions};
use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};
use support::{
    percentile_ms as percentile, round, scripted_model, scripted_store_config, serve_on_loopback,
};

const CLIENTS: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|at| args.get(at + 1))
            .map(|n| n.parse::<u64>().expect("a whole number"))
    };
    let seconds = value("--seconds").unwrap_or_else(|| value("--minutes").unwrap_or(10) * 60);
    let json_out = args.iter().any(|a| a == "--json");
    let learn = !args.iter().any(|a| a == "--no-learn");
    let answer_ms = value("--answer-ms").unwrap_or(0);
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (report, store) = runtime.block_on(run(Duration::from_secs(seconds), learn, answer_ms));
    drop(runtime);
    drop(store);
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        println!("{report:#}");
    }
}

/// One request's outcome: the minute it started in, its latency, and the user's words when
/// it was acknowledged.
struct Outcome {
    minute: usize,
    ms: f64,
    acknowledged: Option<(String, String)>,
}

async fn run(duration: Duration, learn: bool, answer_ms: u64) -> (Value, tempfile::TempDir) {
    let think = Duration::from_millis(answer_ms);
    // The write path's calls, counted here: the scripted server's record of every request
    // is cleared as the run goes, or it would be most of what grows in this process.
    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counted = calls.clone();
    let upstream = ScriptedLlm::with_handler(move |request: &ChatRequest| {
        if let Some(schema) = request.schema_name() {
            *counted
                .lock()
                .unwrap()
                .entry(schema.to_owned())
                .or_default() += 1;
        }
        match (request.schema_name(), think.is_zero()) {
            (None, false) => Reply::Delay(think, Box::new(scripted_model(request))),
            _ => scripted_model(request),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = scripted_store_config(dir.path(), upstream.base_url());
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let url = format!("{}/v1/chat/completions", serve_on_loopback(&client).await);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();

    // Minute 0's sample, before any client starts: the CPU time from here on is the run's.
    let mut samples = vec![sample(0, &client)];
    let started = Instant::now();
    let deadline = started + duration;
    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (http, url, outcomes) = (http.clone(), url.clone(), outcomes.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while Instant::now() < deadline {
                    let conversation = format!("soak{c}");
                    let text = format!("My locker {c}-{i} holds a spare key.");
                    let minute = (started.elapsed().as_secs() / 60) as usize;
                    let begun = Instant::now();
                    let ok = chat(&http, &url, &conversation, &text, c % 3 == 0, learn).await;
                    outcomes.lock().unwrap().push(Outcome {
                        minute,
                        ms: begun.elapsed().as_secs_f64() * 1000.0,
                        acknowledged: ok.then_some((conversation, text)),
                    });
                    i += 1;
                }
            })
        })
        .collect();
    let mut next = 60;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        upstream.clear_requests();
        if started.elapsed().as_secs() >= next {
            samples.push(sample(next / 60, &client));
            next += 60;
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    samples.push(sample(started.elapsed().as_secs().div_ceil(60), &client));
    let queued = client.pending_passes();
    client.stop_background_passes();

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let missing = if learn {
        missing_turns(dir.path(), &outcomes)
    } else {
        0
    };
    let mut all: Vec<f64> = outcomes.iter().map(|o| o.ms).collect();
    let errors = outcomes.iter().filter(|o| o.acknowledged.is_none()).count();
    // Seconds of `field` (CPU, the embedding model's) between two samples.
    let between = |field: &str, from: usize, to: usize| -> Option<f64> {
        let at = |i: usize| samples.get(i)?[field].as_f64();
        Some(at(to)? - at(from)?)
    };
    let cpu_between = |from: usize, to: usize| between("cpu_seconds", from, to);
    let ms_per_request = |seconds: Option<f64>, requests: usize| {
        seconds.map(|s| round(s * 1000.0 / requests.max(1) as f64))
    };
    let last = samples.len() - 1;
    let embedding_ms = ms_per_request(between("embedding_seconds", 0, last), outcomes.len());
    let cpu_ms = ms_per_request(cpu_between(0, last), outcomes.len());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let minutes: Vec<Value> = (0..=outcomes.iter().map(|o| o.minute).max().unwrap_or(0))
        .map(|m| {
            let mut ms: Vec<f64> = outcomes
                .iter()
                .filter(|o| o.minute == m)
                .map(|o| o.ms)
                .collect();
            json!({
                "minute": m,
                "requests": ms.len(),
                "p50_ms": percentile(&mut ms, 0.5),
                "p99_ms": percentile(&mut ms, 0.99),
                "cpu_ms_per_request": ms_per_request(cpu_between(m, m + 1), ms.len()),
                "embedding_ms_per_request": ms_per_request(between("embedding_seconds", m, m + 1), ms.len()),
            })
        })
        .collect();
    let calls = |schema: &str| calls.lock().unwrap().get(schema).copied().unwrap_or(0);
    let report = json!({
        "seconds": duration.as_secs(),
        "clients": CLIENTS,
        "streamed_clients": (0..CLIENTS).filter(|c| c % 3 == 0).count(),
        "requests": outcomes.len(),
        "errors": errors,
        "acknowledged_turns_missing": missing,
        "p50_ms": percentile(&mut all, 0.5),
        "p99_ms": percentile(&mut all, 0.99),
        "max_ms": round(all.iter().cloned().fold(0.0, f64::max)),
        "cpu_ms_per_request": cpu_ms,
        "embedding_ms_per_request": embedding_ms,
        "cores": cores,
        // Bounds on the mean latency: with every client waiting for its answer in turn, a
        // request cannot take less, on average, than the clients times its time on what
        // serves one at a time (the embedding model, its runs slowed by whatever shares its
        // cores meanwhile), nor than the clients times its CPU time over the cores.
        "latency_floor_ms": {
            "embedding_model": embedding_ms.map(|ms| round(ms * CLIENTS as f64)),
            "cpu": cpu_ms.map(|ms| round(ms * CLIENTS as f64 / cores as f64)),
        },
        "learn": learn,
        "answer_ms": answer_ms,
        "passes_still_queued": queued,
        "write_path_calls": {
            "extraction": calls("facts"),
            "reconciliation": calls("memory_operations"),
            "summary": calls("summary"),
        },
        "by_minute": minutes,
        "process_by_minute": samples,
    });
    (report, dir)
}

/// Sends one chat; whether it was answered whole (a streamed one read to its end).
async fn chat(
    http: &reqwest::Client,
    url: &str,
    conversation: &str,
    text: &str,
    stream: bool,
    learn: bool,
) -> bool {
    let body = json!({
        "model": "scripted",
        "stream": stream,
        "memory_learn": learn,
        "memory_id": conversation,
        "messages": [{"role": "user", "content": text}],
    });
    let Ok(response) = http.post(url).json(&body).send().await else {
        return false;
    };
    if !response.status().is_success() {
        return false;
    }
    if !stream {
        return response.bytes().await.is_ok();
    }
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        if chunk.is_err() {
            return false;
        }
    }
    true
}

/// Acknowledged user turns found in no memory file of the store, live or retired (a turn
/// eviction retired is kept under `deleted/`, not lost).
fn missing_turns(store: &Path, outcomes: &[Outcome]) -> usize {
    let mut found = HashSet::new();
    let mut folders = vec![store.to_owned()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() != ".git" {
                    folders.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                found.extend(text.lines().map(str::to_owned));
            }
        }
    }
    outcomes
        .iter()
        .filter_map(|o| o.acknowledged.as_ref())
        .filter(|(_, text)| !found.contains(text))
        .count()
}

/// The process's resident memory (in all, and the part of it that is not mapped files: the
/// index maps its files, and their pages count as resident while the kernel keeps them) and
/// open files now.
fn sample(minute: u64, client: &MemoryClient) -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let mib = |kib: u64| round(kib as f64 / 1024.0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    json!({
        "minute": minute,
        "rss_mib": mib(kib("VmRSS:")),
        "rss_anon_mib": mib(kib("RssAnon:")),
        "rss_file_mib": mib(kib("RssFile:")),
        "open_files": fds,
        "cpu_seconds": round(cpu_seconds()),
        "embedding_seconds": round(client.embedding_busy().as_secs_f64()),
    })
}

/// CPU time this process has used so far, user and system, over all its threads.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
