//! Session logs on the machine's own disk, each against a baseline measured in the same run:
//!
//! - append latency per message, fsync included (what a chat request waits for), against the
//!   same appends without fsync;
//! - resume time of a 10,000-message session (read, parse, replay), against reading its
//!   bytes alone;
//! - archive search over 100,000 messages (100 sessions of 1,000), p50, against a plain
//!   lowercase substring scan of the same text.
//!
//! `cargo bench -p mnemo-session --bench session [-- --quick]`. The log goes to a temporary
//! folder under `MNEMO_BENCH_DIR` (default: the system's temporary folder).

use std::time::{Duration, Instant};

use mnemo_session::history::History;
use mnemo_session::log::{self, Record};
use mnemo_session::search::search;
use serde_json::json;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let base = std::env::var_os("MNEMO_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");

    let appends = if quick { 200 } else { 2_000 };
    let (synced, unsynced) = bench_appends(dir.path(), appends);
    println!("append one message ({appends} appends)");
    println!(
        "  fsync'd       p50 {:>8.3} ms  p99 {:>8.3} ms",
        ms(pct(&synced, 50)),
        ms(pct(&synced, 99))
    );
    println!(
        "  no fsync      p50 {:>8.3} ms  p99 {:>8.3} ms  (baseline)",
        ms(pct(&unsynced, 50)),
        ms(pct(&unsynced, 99))
    );

    let (resume, raw, bytes) = bench_resume(dir.path(), 10_000, if quick { 5 } else { 21 });
    println!(
        "resume a 10,000-message session ({:.1} MiB)",
        bytes as f64 / (1 << 20) as f64
    );
    println!("  read+parse+replay p50 {:>8.2} ms", ms(pct(&resume, 50)));
    println!(
        "  read bytes only   p50 {:>8.2} ms  (baseline; ratio {:.1}x)",
        ms(pct(&raw, 50)),
        ratio(&resume, &raw)
    );

    let sessions = if quick { 10 } else { 100 };
    let (searched, scanned, hits) = bench_search(sessions, 1_000, if quick { 5 } else { 21 });
    println!("archive search over {} messages", sessions * 1_000);
    println!(
        "  search (10 excerpts) p50 {:>8.2} ms  ({hits} excerpts)",
        ms(pct(&searched, 50))
    );
    println!(
        "  substring scan       p50 {:>8.2} ms  (baseline; ratio {:.1}x)",
        ms(pct(&scanned, 50)),
        ratio(&searched, &scanned)
    );
}

/// A realistic message: a user line or a few lines of an answer.
fn message(i: usize) -> Record {
    let text = if i.is_multiple_of(2) {
        format!(
            "Question {i}: how do I configure the parser for project {}?",
            i % 37
        )
    } else {
        format!(
            "Answer {i}: set `parser.mode = strict` in config {}.\nThen run the tests again.\nThe build for ticket #{} should pass.",
            i % 11,
            i % 997
        )
    };
    let role = if i.is_multiple_of(2) {
        "user"
    } else {
        "assistant"
    };
    Record::message(json!({"role": role, "content": text}))
}

fn bench_appends(dir: &std::path::Path, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    let synced_path = dir.join("synced.jsonl");
    let synced: Vec<Duration> = (0..n)
        .map(|i| {
            let record = [message(i)];
            let t = Instant::now();
            log::append(&synced_path, &record).expect("append");
            t.elapsed()
        })
        .collect();
    let plain_path = dir.join("plain.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&plain_path)
        .expect("open");
    let unsynced = (0..n)
        .map(|i| {
            let mut line = serde_json::to_vec(&message(i)).expect("json");
            line.push(b'\n');
            let t = Instant::now();
            std::io::Write::write_all(&mut file, &line).expect("write");
            t.elapsed()
        })
        .collect();
    (synced, unsynced)
}

fn bench_resume(
    dir: &std::path::Path,
    n: usize,
    runs: usize,
) -> (Vec<Duration>, Vec<Duration>, u64) {
    let path = dir.join("resume.jsonl");
    let records: Vec<Record> = (0..n).map(message).collect();
    log::append(&path, &records).expect("write the log");
    let mut resume = Vec::new();
    let mut raw = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let read = log::read(&path).expect("read");
        let history = History::replay(&read.records);
        assert_eq!(history.messages.len(), n);
        resume.push(t.elapsed());
        let t = Instant::now();
        let bytes = std::fs::read(&path).expect("read");
        assert!(!bytes.is_empty());
        raw.push(t.elapsed());
    }
    (
        resume,
        raw,
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
    )
}

fn bench_search(
    sessions: usize,
    per_session: usize,
    runs: usize,
) -> (Vec<Duration>, Vec<Duration>, usize) {
    let logs: Vec<(String, Vec<Record>)> = (0..sessions)
        .map(|s| {
            (
                format!("s{s}"),
                (0..per_session)
                    .map(|i| message(s * per_session + i))
                    .collect(),
            )
        })
        .collect();
    let texts: Vec<String> = logs
        .iter()
        .flat_map(|(_, records)| records.iter())
        .filter_map(|r| match r {
            Record::Message { message, .. } => message["content"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect();
    let query = "ticket #996";
    let mut searched = Vec::new();
    let mut scanned = Vec::new();
    let mut hits = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let found = search(
            logs.iter().map(|(id, r)| (id.as_str(), r.as_slice())),
            query,
            10,
        );
        searched.push(t.elapsed());
        hits = found.len();
        let t = Instant::now();
        let needle = query.to_lowercase();
        let count = texts
            .iter()
            .filter(|t| t.to_lowercase().contains(&needle))
            .count();
        scanned.push(t.elapsed());
        assert!(count > 0);
    }
    (searched, scanned, hits)
}

fn pct(samples: &[Duration], p: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) * p / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ratio(a: &[Duration], b: &[Duration]) -> f64 {
    pct(a, 50).as_secs_f64() / pct(b, 50).as_secs_f64().max(1e-9)
}
