//! The vector index's backends side by side: the embedded engine, one Qdrant server, and a
//! three-node Qdrant cluster (3 shards, 2 copies each), all on this machine.
//!
//! `cargo bench --workspace --bench index_backends [-- --json --quick --no-compare --no-growth]`
//! - **compare** (100k points; 20k with `--quick`): upsert throughput (batches of 1,000, each
//!   acknowledged) and search p50/p99 with the conversation filter every engine search has
//!   (the conversation or `global`, no summaries): the dense query, the lexical (BM25) query,
//!   and both in turn, as the read path's hybrid retrieval runs them. The embedded engine is
//!   the baseline of the same run.
//! - **growth** (10k, 100k, 1M points on one server; up to 100k with `--quick`): the same
//!   searches as the collection grows, and the server's resident memory at each size.
//!
//! Vectors are synthetic (deterministic pseudo-random 384-dim unit vectors, 8 terms per
//! lexical vector from a Zipf-like vocabulary of 20,000), so no model runs. The server is
//! measured once its optimiser is done (collection status green), as a deployment would be.
//! The servers come from `MNEMO_QDRANT_BIN` or `../shared/qdrant/qdrant`; all nodes share this
//! machine's cores, so the cluster's figures show its cost, not a scale-out.

use std::time::{Duration, Instant};

use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use mnemo_index::{
    EdgeIndex, EdgeIndexOptions, Point, PointPayload, Query, QueryVector, SparseVector, VectorIndex,
};
use mnemo_qdrant::{QdrantIndex, QdrantOptions};
use mnemo_test_support::qdrant::LocalQdrant;
use serde_json::{json, Value};

mod support;
use support::{conversation_filter, ms, percentile, round};

const DIM: usize = 384;
const CONVERSATIONS: usize = 100;
const VOCABULARY: u64 = 20_000;
const BATCH: usize = 1000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let (json_out, quick) = (flag("--json"), flag("--quick"));
    if let Err(why) = mnemo_test_support::qdrant::binary() {
        eprintln!("index_backends needs the Qdrant server binary: {why}");
        std::process::exit(1);
    }
    let queries = if quick { 200 } else { 500 };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut report = serde_json::Map::new();

    let points = if quick { 20_000 } else { 100_000 };
    if !flag("--no-compare") {
        report.insert(
            format!("compare_{points}"),
            compare(dir.path(), points, queries),
        );
    }

    if !flag("--no-growth") {
        let steps: &[usize] = if quick {
            &[10_000, 100_000]
        } else {
            &[10_000, 100_000, 1_000_000]
        };
        report.insert(
            "growth".into(),
            growth(&dir.path().join("growth"), steps, queries),
        );
    }

    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
    } else {
        for (name, value) in &report {
            println!("{name}: {value}");
        }
    }
}

/// The three backends at `points` points, with the embedded one as the baseline.
fn compare(dir: &std::path::Path, points: usize, queries: usize) -> Value {
    let mut compare = serde_json::Map::new();
    {
        let index = EdgeIndex::open(&dir.join("edge"), &EdgeIndexOptions::new(DIM))
            .expect("the embedded index opens");
        let before = rss_kib(std::process::id());
        let mut figures = fill_and_search(&index, points, queries, || {});
        figures["rss_mib"] = json!(mib(rss_kib(std::process::id()).saturating_sub(before)));
        eprintln!("embedded: {figures}");
        compare.insert("embedded".into(), figures);
    }
    for (name, nodes, shards, replication) in [("server", 1, 1, 1), ("cluster", 3, 3, 2)] {
        let qdrant = LocalQdrant::start(&dir.join(name), nodes).expect("Qdrant starts");
        let options = QdrantOptions {
            shards,
            replication,
            timeout: Duration::from_secs(120),
            ..QdrantOptions::new(&qdrant.grpc_url(0), "bench", uuid::Uuid::new_v4(), DIM)
        };
        let index = QdrantIndex::open(&options).expect("the collection opens");
        let mut figures = fill_and_search(&index, points, queries, || {
            wait_until_optimised(&qdrant, "bench")
        });
        figures["rss_mib"] = json!(mib(server_rss_kib(&qdrant)));
        eprintln!("{name}: {figures}");
        compare.insert(name.into(), figures);
    }
    let ratio = |backend: &str, field: &str| {
        round(
            compare[backend][field].as_f64().unwrap()
                / compare["embedded"][field].as_f64().unwrap(),
        )
    };
    let ratios = json!({
        "server_over_embedded_hybrid_p50": ratio("server", "hybrid_ms_p50"),
        "cluster_over_embedded_hybrid_p50": ratio("cluster", "hybrid_ms_p50"),
        "server_over_embedded_upsert": ratio("server", "upsert_points_per_s"),
        "cluster_over_embedded_upsert": ratio("cluster", "upsert_points_per_s"),
    });
    compare.insert("ratios".into(), ratios);
    Value::Object(compare)
}

/// Fills `index` with `points` points, waits for `settle`, and times the searches.
fn fill_and_search(
    index: &dyn VectorIndex,
    points: usize,
    queries: usize,
    settle: impl Fn(),
) -> Value {
    let mut gen = Synthetic(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    fill(index, 0, points, &mut gen);
    let upsert_s = started.elapsed().as_secs_f64();
    settle();
    let mut figures = search_figures(index, queries, &mut gen);
    figures["points"] = json!(points);
    figures["upsert_points_per_s"] = json!(round(points as f64 / upsert_s));
    figures
}

/// Search latency on one server as its collection grows through `steps` points.
fn growth(dir: &std::path::Path, steps: &[usize], queries: usize) -> Value {
    let qdrant = LocalQdrant::start(dir, 1).expect("Qdrant starts");
    let options = QdrantOptions {
        timeout: Duration::from_secs(120),
        ..QdrantOptions::new(&qdrant.grpc_url(0), "growth", uuid::Uuid::new_v4(), DIM)
    };
    let index = QdrantIndex::open(&options).expect("the collection opens");
    let mut gen = Synthetic(0x2545_f491_4f6c_dd1d);
    let mut filled = 0;
    let mut rows = Vec::new();
    for &step in steps {
        let started = Instant::now();
        fill(&index, filled, step, &mut gen);
        let upsert_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        wait_until_optimised(&qdrant, "growth");
        let optimise_s = started.elapsed().as_secs_f64();
        let mut figures = search_figures(&index, queries, &mut gen);
        figures["points"] = json!(step);
        figures["upsert_points_per_s"] = json!(round((step - filled) as f64 / upsert_s));
        figures["optimise_s"] = json!(round(optimise_s));
        figures["rss_mib"] = json!(mib(server_rss_kib(&qdrant)));
        figures["storage_mib"] = json!(mib(folder_kib(dir)));
        eprintln!("growth: {figures}");
        rows.push(figures);
        filled = step;
    }
    Value::Array(rows)
}

/// Upserts points `from..to` in acknowledged batches.
fn fill(index: &dyn VectorIndex, from: usize, to: usize, gen: &mut Synthetic) {
    for start in (from..to).step_by(BATCH) {
        let batch = (start..(start + BATCH).min(to))
            .map(|i| gen.point(i))
            .collect();
        index.upsert(batch).expect("the upsert is acknowledged");
    }
}

/// Dense, lexical and hybrid (both in turn) search p50/p99 with an engine-like filter.
fn search_figures(index: &dyn VectorIndex, queries: usize, gen: &mut Synthetic) -> Value {
    let query = |vector: QueryVector, q: usize| Query {
        vector,
        filter: conversation_filter(q % CONVERSATIONS),
        limit: 30,
        with_vectors: false,
    };
    let time = |q: &Query| {
        let started = Instant::now();
        let hits = index.query(q).expect("the search answers");
        assert!(!hits.is_empty(), "every search finds something");
        started.elapsed()
    };
    // Warm-up: caches, connections.
    for q in 0..50 {
        time(&query(gen.unit().into(), q));
    }
    let (mut dense, mut lexical, mut hybrid) = (Vec::new(), Vec::new(), Vec::new());
    for q in 0..queries {
        let d = time(&query(gen.unit().into(), q));
        let l = time(&query(QueryVector::Lexical(gen.terms(3)), q));
        dense.push(d);
        lexical.push(l);
        hybrid.push(d + l);
    }
    json!({
        "dense_ms_p50": ms(percentile(&mut dense, 0.5)),
        "dense_ms_p99": ms(percentile(&mut dense, 0.99)),
        "lexical_ms_p50": ms(percentile(&mut lexical, 0.5)),
        "lexical_ms_p99": ms(percentile(&mut lexical, 0.99)),
        "hybrid_ms_p50": ms(percentile(&mut hybrid, 0.5)),
        "hybrid_ms_p99": ms(percentile(&mut hybrid, 0.99)),
    })
}

/// Deterministic pseudo-random points (xorshift), so runs are comparable.
struct Synthetic(u64);

impl Synthetic {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> Vec<f32> {
        let mut v: Vec<f32> = (0..DIM)
            .map(|_| (self.next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    /// `n` distinct terms, frequent ones far more often (term = vocabulary / (1 + uniform)).
    fn terms(&mut self, n: usize) -> SparseVector {
        let mut indices = Vec::with_capacity(n);
        while indices.len() < n {
            let u = self.next() % VOCABULARY;
            let term = (VOCABULARY / (1 + u)) as u32;
            if !indices.contains(&term) {
                indices.push(term);
            }
        }
        indices.sort_unstable();
        let values = indices.iter().map(|_| 1.0).collect();
        SparseVector { indices, values }
    }

    fn point(&mut self, i: usize) -> Point {
        let conversation = match i % 10 {
            0 => "global".to_owned(),
            _ => format!("conv-{}", i % CONVERSATIONS),
        };
        let role = [Role::Memory, Role::User, Role::Assistant, Role::Memory][i % 4];
        let conversation = ConversationId::new(&conversation).expect("a valid id");
        let record = MemoryRecord::new(conversation, role, format!("memory {i}"));
        Point {
            id: MemoryId::random(),
            vector: self.unit(),
            lexical: self.terms(8),
            payload: PointPayload::of(&record, "p"),
        }
    }
}

/// Waits until the collection's optimiser is done (status green), as a served collection is.
fn wait_until_optimised(qdrant: &LocalQdrant, collection: &str) {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let info: Value = qdrant
            .rest_get(0, &format!("/collections/{collection}"))
            .and_then(|(_, body)| serde_json::from_str(&body).ok())
            .unwrap_or(Value::Null);
        if info["result"]["status"] == "green" {
            return;
        }
        assert!(Instant::now() < deadline, "never optimised: {info}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Resident memory of every node of `qdrant`, in KiB.
fn server_rss_kib(qdrant: &LocalQdrant) -> u64 {
    (0..qdrant.len())
        .filter_map(|n| qdrant.pid(n))
        .map(rss_kib)
        .sum()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn folder_kib(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_kib(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len() / 1024),
            _ => 0,
        })
        .sum()
}

fn mib(kib: u64) -> f64 {
    round(kib as f64 / 1024.0)
}
