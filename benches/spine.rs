//! Throughput and latency of the spine: embedding, and filtered index search at scale.
//!
//! `cargo bench --bench spine [-- --json] [-- --quick]`. Each figure comes with a baseline
//! measured in the same run, because these machines are shared and noisy:
//! - embeddings/s in batches of 64 vs. one sentence per call;
//! - filtered search (conversation + `global`, summaries excluded) vs. unfiltered search,
//!   at 10k and 100k points with synthetic 384-dim vectors;
//! - one query embedding (what a real search adds on top of the index).

use std::path::Path;
use std::time::{Duration, Instant};

use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use mnemo_embed::{Embedder, EmbedderConfig};
use mnemo_index::{
    EdgeIndex, EdgeIndexOptions, Filter, Point, PointPayload, Query, SparseVector, VectorIndex,
};
use serde_json::json;

mod support;
use support::{conversation_filter, ms, percentile, round};

const DIM: usize = 384;
const CONVERSATIONS: usize = 100;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let mut report = serde_json::Map::new();

    let embed = bench_embedding(if quick { 4 } else { 12 });
    report.insert("embedding".into(), embed);
    for &n in if quick {
        &[10_000][..]
    } else {
        &[10_000, 100_000][..]
    } {
        report.insert(
            format!("search_{n}"),
            bench_search(n, if quick { 200 } else { 1000 }),
        );
    }

    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        for (name, value) in &report {
            println!("{name}: {value}");
        }
    }
}

fn embedder() -> Embedder {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let config = EmbedderConfig::new(
        models.join("onnxruntime/libonnxruntime.so.1.31.1"),
        models.join("all-MiniLM-L6-v2"),
    );
    Embedder::load(&config).expect("models installed (scripts/setup)")
}

fn sentences(n: usize) -> Vec<String> {
    let subjects = [
        "My sister",
        "The landlord",
        "Our team lead",
        "Grandpa",
        "The neighbour's dog",
    ];
    let verbs = [
        "moved to",
        "keeps talking about",
        "bought a ticket to",
        "is allergic to",
        "loves",
    ];
    let objects = [
        "Lisbon",
        "sourdough bread",
        "the jazz festival",
        "peanuts",
        "the new bike lane",
    ];
    (0..n)
        .map(|i| {
            format!(
                "{} {} {} since week {}.",
                subjects[i % 5],
                verbs[(i / 5) % 5],
                objects[(i / 25) % 5],
                i
            )
        })
        .collect()
}

fn bench_embedding(batches: usize) -> serde_json::Value {
    let e = embedder();
    // Each phase embeds texts no other embedded before: the embedder answers a text it
    // embedded lately without the model.
    let texts = sentences(64 + 64 * batches + 64 + 100);
    let (warm_up, rest) = texts.split_at(64);
    let (batched_texts, rest) = rest.split_at(64 * batches);
    let (single_texts, query_texts) = rest.split_at(64);
    e.embed(warm_up).unwrap();

    let mut batch_rates = Vec::new();
    for chunk in batched_texts.chunks(64) {
        let t = Instant::now();
        e.embed(chunk).unwrap();
        batch_rates.push(64.0 / t.elapsed().as_secs_f64());
    }
    let mut single_rates = Vec::new();
    for text in single_texts {
        let t = Instant::now();
        e.embed_one(text).unwrap();
        single_rates.push(1.0 / t.elapsed().as_secs_f64());
    }
    let mut query_latency: Vec<Duration> = Vec::new();
    for text in query_texts {
        let t = Instant::now();
        e.embed_one(text).unwrap();
        query_latency.push(t.elapsed());
    }
    let batched = median(&mut batch_rates);
    let single = median(&mut single_rates);
    json!({
        "batch64_sentences_per_s_median": round(batched),
        "single_sentences_per_s_median": round(single),
        "batch_over_single": round(batched / single),
        "query_embed_ms_p50": ms(percentile(&mut query_latency, 0.5)),
        "query_embed_ms_p99": ms(percentile(&mut query_latency, 0.99)),
    })
}

/// Deterministic pseudo-random unit vectors (xorshift), so runs are comparable.
struct Vectors(u64);

impl Vectors {
    fn next_unit(&mut self) -> Vec<f32> {
        let mut v: Vec<f32> = (0..DIM)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}

fn bench_search(points: usize, queries: usize) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let index = EdgeIndex::open(&dir.path().join("index"), &EdgeIndexOptions::new(DIM)).unwrap();
    let mut gen = Vectors(0x9e37_79b9_7f4a_7c15);
    let t = Instant::now();
    for start in (0..points).step_by(1000) {
        let batch = (start..(start + 1000).min(points))
            .map(|i| {
                let conversation = if i % 10 == 0 {
                    "global".to_owned()
                } else {
                    format!("conv-{}", i % CONVERSATIONS)
                };
                let role = [Role::Memory, Role::User, Role::Assistant, Role::Memory][i % 4];
                let conversation = ConversationId::new(&conversation).unwrap();
                let record = MemoryRecord::new(conversation, role, format!("memory {i}"));
                Point {
                    id: MemoryId::random(),
                    vector: gen.next_unit(),
                    lexical: SparseVector::default(),
                    payload: PointPayload::of(&record, "p"),
                }
            })
            .collect();
        index.upsert(batch).unwrap();
    }
    let insert_s = t.elapsed().as_secs_f64();

    let mut run = |filtered: bool| {
        let mut times = Vec::with_capacity(queries);
        for q in 0..queries {
            let query = Query {
                vector: gen.next_unit().into(),
                filter: if filtered {
                    conversation_filter(q % CONVERSATIONS)
                } else {
                    Filter::all()
                },
                limit: 15,
                with_vectors: true,
            };
            let t = Instant::now();
            let hits = index.query(&query).unwrap();
            times.push(t.elapsed());
            assert!(!hits.is_empty());
        }
        times
    };
    run(true); // warm-up
    let mut filtered = run(true);
    let mut unfiltered = run(false);
    let f50 = percentile(&mut filtered, 0.5);
    let u50 = percentile(&mut unfiltered, 0.5);
    json!({
        "points": points,
        "insert_points_per_s": round(points as f64 / insert_s),
        "filtered_ms_p50": ms(f50),
        "filtered_ms_p99": ms(percentile(&mut filtered, 0.99)),
        "unfiltered_ms_p50": ms(u50),
        "unfiltered_ms_p99": ms(percentile(&mut unfiltered, 0.99)),
        "filtered_over_unfiltered_p50": round(f50.as_secs_f64() / u50.as_secs_f64()),
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}
