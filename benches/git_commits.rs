//! What one commit costs as the store ages: git's index lists every file the store ever kept
//! (tombstones too), and writing it is in proportion to them.
//!
//! For stores of 1,000, 10,000 and 30,000 files (`--files A,B,C` to choose), 60 turns are
//! committed back to back (a new fact each, as a busy server's write path commits them):
//! - as mnemo commits, the index on disk written at most once a second behind the commits;
//! - the baseline, in the same run on the same store: each commit followed by a write of the
//!   index, as every commit did before.
//!
//! Reported: median and p90 milliseconds a commit, and how many times the index was written.
//!
//! `cargo bench --bench git_commits [-- --json] [-- --files 1000,10000]`.

use std::path::Path;
use std::time::{Instant, SystemTime};

use mnemo_core::MemoryId;
use mnemo_git::{GitConfig, Versioning};
use serde_json::{json, Value};

mod support;
use support::{percentile_ms, round};

const TURNS: usize = 60;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--files")
        .and_then(|i| args.get(i + 1))
        .map(|list| {
            list.split(',')
                .map(|n| n.parse().expect("a number of files"))
                .collect()
        })
        .unwrap_or_else(|| vec![1_000, 10_000, 30_000]);
    let rows: Vec<Value> = sizes.into_iter().map(measure).collect();
    let report = json!({ "turns": TURNS, "stores": rows });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        for row in report["stores"].as_array().unwrap() {
            println!(
                "{:>6} files: behind {:>7.2} ms p50 {:>7.2} p90 ({} index writes) | with each commit {:>7.2} ms p50 {:>7.2} p90 ({} writes)",
                row["files"],
                row["behind"]["p50_ms"].as_f64().unwrap(),
                row["behind"]["p90_ms"].as_f64().unwrap(),
                row["behind"]["index_writes"],
                row["with_each_commit"]["p50_ms"].as_f64().unwrap(),
                row["with_each_commit"]["p90_ms"].as_f64().unwrap(),
                row["with_each_commit"]["index_writes"],
            );
        }
    }
}

/// Both ways of committing on one store of `files` files, interleaved by halves so drift
/// in the machine's pace falls on both.
fn measure(files: usize) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for i in 0..files {
        let path = fact_path(&format!("conv-{}", i % 16), MemoryId::random());
        write(root, &path, &format!("---\nnote: {i}\n---\nFact {i}.\n"));
    }
    let versioning = Versioning::open(root, GitConfig::default()).unwrap();
    // The first commits read the store's trees from disk for the first time.
    turns(root, &versioning, false, 0);
    let (mut behind, mut each) = (Vec::new(), Vec::new());
    let (mut behind_writes, mut each_writes) = (0, 0);
    for half in 0..2 {
        let (ms, writes) = turns(root, &versioning, false, half);
        behind.extend(ms);
        behind_writes += writes;
        let (ms, writes) = turns(root, &versioning, true, half);
        each.extend(ms);
        each_writes += writes;
    }
    let side = |ms: &mut Vec<f64>, writes: usize| {
        json!({
            "p50_ms": percentile_ms(ms, 0.5),
            "p90_ms": percentile_ms(ms, 0.9),
            "index_writes": writes,
        })
    };
    let index_bytes = std::fs::metadata(root.join(".git/index")).map_or(0, |m| m.len());
    json!({
        "files": files,
        "index_mib": round(index_bytes as f64 / (1 << 20) as f64),
        "behind": side(&mut behind, behind_writes),
        "with_each_commit": side(&mut each, each_writes),
    })
}

/// Half of the turns, committed one by one; the index written after each when
/// `write_each`. Returns each commit's milliseconds and how many times the index was written
/// (seen by its modification time changing between commits).
fn turns(root: &Path, versioning: &Versioning, write_each: bool, half: usize) -> (Vec<f64>, usize) {
    let index = root.join(".git/index");
    let modified = || std::fs::metadata(&index).and_then(|m| m.modified()).ok();
    let mut last: Option<SystemTime> = modified();
    let mut writes = 0;
    let mut seen = |now: Option<SystemTime>| {
        if now != last {
            writes += 1;
            last = now;
        }
    };
    let mut ms = Vec::with_capacity(TURNS / 2);
    for turn in 0..TURNS / 2 {
        let path = fact_path("conv-0", MemoryId::random());
        write(root, &path, &format!("Turn {half}-{turn}.\n"));
        let started = Instant::now();
        versioning.note_changed([root.join(&path)]);
        versioning.commit_noted_short("a turn").unwrap();
        if write_each {
            versioning.write_index().unwrap();
        }
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        seen(modified());
    }
    // What is still behind is written before the other side runs, and counted.
    versioning.write_index().unwrap();
    seen(modified());
    (ms, writes)
}

fn fact_path(conversation: &str, id: MemoryId) -> String {
    format!("entries/{conversation}/facts/20260302T184005000Z__{id}.md")
}

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}
