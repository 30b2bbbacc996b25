//! What a deep search costs: `top_k` 100 (the most any front end allows) against `top_k` 10
//! in the same run, on one conversation of 2,000 memories, through `MemoryClient::search`
//! (dense + lexical retrieval, fusion, recency, MMR; the cross-encoder off). MMR picks each
//! result against everything picked before, which used to make its cost cubic in `top_k`.
//!
//! `cargo bench --bench search_depth [-- --json] [-- --quick]`.

mod support;

use std::time::Instant;

use mnemo_core::ConversationId;
use mnemo_engine::SearchRequest;
use serde_json::json;
use support::filled_store;

const MEMORIES: usize = 2_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let rounds = if args.iter().any(|a| a == "--quick") {
        10
    } else {
        50
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(run(rounds));
    if json_out {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    }
}

async fn run(rounds: usize) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let client = filled_store(dir.path(), MEMORIES, |_| "bench".to_owned()).await;
    let conversation = ConversationId::new("bench").unwrap();
    let queries = [
        "who is allergic to peanuts",
        "trips to Lisbon",
        "the jazz festival",
    ];
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..rounds + 3 {
        // Interleaved, so both depths see the same machine.
        for (slot, top_k) in [10, 100].into_iter().enumerate() {
            let query = queries[round % queries.len()];
            let started = Instant::now();
            let hits = client
                .search(SearchRequest::new(query, conversation.clone()).top_k(top_k))
                .await
                .unwrap();
            assert_eq!(hits.len(), top_k);
            if round >= 3 {
                times[slot].push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let [shallow, deep] = times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    });
    json!({
        "memories": MEMORIES,
        "rounds": rounds,
        "top_k_10_p50_ms": (shallow * 100.0).round() / 100.0,
        "top_k_100_p50_ms": (deep * 100.0).round() / 100.0,
        "ratio": (deep / shallow * 100.0).round() / 100.0,
    })
}
