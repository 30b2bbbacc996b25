//! Keeping the index in step with the files.
//!
//! `cargo bench --bench sync [-- --json] [-- --files N]`:
//! - a full reindex of N files (default 10,000) that embeds every file, and a sync of the same
//!   store with nothing to re-embed (files/s; target >= 5,000);
//! - the same full reindex with document expansion off, just before, as the baseline for
//!   what choosing each memory's nearest model words costs (and, after the rest, one
//!   memory's `add` without it);
//! - hand-edit-to-searchable latency through the watcher (p50/p95 over 40 edits; target
//!   p95 <= 500 ms), with the time of one search (what each poll of the file costs, embedding
//!   the query included) measured in the same run as a baseline.

use std::path::Path;
use std::time::{Duration, Instant};

use mnemo_core::{Config, ConversationId, MemoryRecord, Role};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use mnemo_store::FileStore;
use serde_json::json;

fn config(memory_path: &Path, document_expansion: bool) -> Config {
    let mut config = Config {
        memory_path: memory_path.to_owned(),
        models_dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("models"),
        ..Config::default()
    };
    if !document_expansion {
        config.retrieval.document_expansion = 0;
    }
    config
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let files: usize = args
        .iter()
        .position(|a| a == "--files")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(10_000);

    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    for i in 0..files {
        let conv = ConversationId::new(&format!("conv-{}", i % 50)).unwrap();
        let text = format!(
            "Note {i}: the meeting about project {} moved to room {}.",
            i % 97,
            i % 13
        );
        store
            .write(&MemoryRecord::new(conv, Role::Memory, text))
            .unwrap();
    }

    let baseline = open_with(dir.path(), true, false).await;
    let baseline_report = baseline.startup_sync().clone();
    drop(baseline);
    let full = open(dir.path(), true).await;
    let full_report = full.startup_sync().clone();
    drop(full);
    let noop = open(dir.path(), false).await;
    let noop_report = noop.startup_sync().clone();
    assert_eq!(noop_report.embedded, 0);

    let add_p50 = add_latency(&noop).await;
    let (edit_p50, edit_p95, search_p50) = edit_latency(&noop, dir.path()).await;
    drop(noop);
    // The baseline for what document expansion adds to one memory's write: its keys are
    // rebuilt without the words as the store opens, nothing is embedded again.
    let without = open_with(dir.path(), false, false).await;
    let add_p50_without = add_latency(&without).await;
    let report = json!({
        "files": files,
        "reindex_with_embedding_files_per_s": (full_report.files as f64 / full_report.seconds).round(),
        "reindex_with_embedding_s": full_report.seconds,
        "reindex_without_document_expansion_s": baseline_report.seconds,
        "reindex_with_over_without_document_expansion": full_report.seconds / baseline_report.seconds,
        "sync_nothing_to_embed_files_per_s": (noop_report.files as f64 / noop_report.seconds).round(),
        "sync_nothing_to_embed_s": noop_report.seconds,
        "edit_to_searchable_ms_p50": edit_p50,
        "edit_to_searchable_ms_p95": edit_p95,
        "one_search_ms_p50": search_p50,
        "add_one_memory_ms_p50": add_p50,
        "add_one_memory_ms_p50_without_document_expansion": add_p50_without,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        for (k, v) in report.as_object().unwrap() {
            println!("{k}: {v}");
        }
    }
}

async fn open(path: &Path, rebuild: bool) -> MemoryClient {
    open_with(path, rebuild, true).await
}

async fn open_with(path: &Path, rebuild: bool, document_expansion: bool) -> MemoryClient {
    MemoryClient::open(
        config(path, document_expansion),
        OpenOptions {
            rebuild,
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap()
}

/// `MemoryClient::add` of one memory: write, embed, upsert, flush, snapshot.
async fn add_latency(client: &MemoryClient) -> f64 {
    let conv = ConversationId::new("adds").unwrap();
    let mut times = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        client
            .add(vec![format!("Added fact {i}.")], &conv)
            .await
            .unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2].as_secs_f64() * 10_000.0).round() / 10.0
}

/// Writes a file by hand and polls search until it is found; returns p50, p95 in ms and the
/// p50 of one search (one poll: embedding the query, querying the index, ranking).
async fn edit_latency(client: &MemoryClient, root: &Path) -> (f64, f64, f64) {
    let _watch = client.start_watcher().unwrap();
    let conv = ConversationId::new("edits").unwrap();
    let facts = root.join("entries/edits/facts");
    std::fs::create_dir_all(&facts).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut latencies = Vec::new();
    let mut polls = Vec::new();
    for i in 0..40 {
        let text = format!("Edit {i}: the zebra crossing {i} was repainted in violet.");
        let started = Instant::now();
        std::fs::write(facts.join(format!("edit-{i}.md")), &text).unwrap();
        loop {
            let t = Instant::now();
            let hits = client
                .search(SearchRequest::new(text.clone(), conv.clone()).top_k(1))
                .await
                .unwrap();
            polls.push(t.elapsed());
            if hits.first().is_some_and(|h| h.content == text) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "edit {i} never became searchable"
            );
        }
        latencies.push(started.elapsed());
    }
    let ms = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        (v[i].as_secs_f64() * 1000.0 * 10.0).round() / 10.0
    };
    (
        ms(&mut latencies, 0.5),
        ms(&mut latencies, 0.95),
        ms(&mut polls, 0.5),
    )
}
