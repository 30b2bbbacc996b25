//! Background processing time per turn with the real local LLM, split into time spent
//! waiting for the LLM and time spent in the engine (embedding, files, index, git).
//!
//! `cargo bench --bench write_path [-- --json]`. Needs `scripts/setup llm`. Each turn is
//! written, then the write path runs on it (extraction, reconciliation, summary, eviction,
//! commit), as after a chat request.

use mnemo_core::{Config, ConversationId, MemoryRecord, Role, LOCAL_LLM_ALIAS};
use mnemo_engine::{MemoryClient, OpenOptions};
use serde_json::json;

mod support;

const MESSAGES: [&str; 12] = [
    "My wife is Jane and we live in Lyon.",
    "What's a good recipe for dinner tonight?",
    "I'm allergic to peanuts.",
    "Thanks, that sounds great!",
    "My daughter Mia started school this week.",
    "Actually my wife is Anne, not Jane.",
    "Can you remind me what I told you about food?",
    "I run 10 km every Saturday morning.",
    "We are planning a trip to Japan in April.",
    "How are you today?",
    "I switched jobs; I now work as a nurse.",
    "I don't run anymore, my knee hurts.",
];

fn main() {
    let json_out = std::env::args().any(|a| a == "--json");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let report = runtime.block_on(run());
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        println!("{report:#}");
    }
}

async fn run() -> serde_json::Value {
    let (llm, base) = support::local_llm().await;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        memory_path: dir.path().to_owned(),
        openai_base_url: Some(llm.base_url().to_owned()),
        start_watcher: false,
        ..base
    };
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .expect("a client");
    let conversation = ConversationId::new("bench").unwrap();

    let (mut llm_ms, mut engine_ms, mut facts) = (Vec::new(), Vec::new(), 0);
    for message in MESSAGES {
        let turn = MemoryRecord::new(conversation.clone(), Role::User, message);
        let turn = client.add_records(vec![turn]).await.unwrap().pop().unwrap();
        let report = client
            .learn_from_turn(&conversation, Some(&turn), 1)
            .await
            .unwrap();
        llm_ms.push(report.llm_time.as_secs_f64() * 1000.0);
        engine_ms.push(report.engine_time.as_secs_f64() * 1000.0);
        facts += report.added.len();
        eprintln!(
            "{:>7.0} ms LLM {:>6.0} ms engine  +{} ~{} -{}  {message}",
            llm_ms.last().unwrap(),
            engine_ms.last().unwrap(),
            report.added.len() - report.updated.len(),
            report.updated.len(),
            report.deleted.len(),
        );
    }
    llm.stop().await;
    let total: Vec<f64> = llm_ms.iter().zip(&engine_ms).map(|(a, b)| a + b).collect();
    json!({
        "turns": MESSAGES.len(),
        "facts_written": facts,
        "llm_ms_p50": median(llm_ms),
        "engine_ms_p50": median(engine_ms),
        "total_ms_p50": median(total),
        "llm": LOCAL_LLM_ALIAS,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2] * 10.0).round() / 10.0
}
