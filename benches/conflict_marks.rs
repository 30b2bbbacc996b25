//! How often the write path would mark a true fact as contradicted: the LoCoMo dev split's
//! observations (what each speaker said, session by session, facts that mostly all hold)
//! written into one conversation per sample, one pass per session, and every mark the
//! passes made counted by the cosine of its pair.
//!
//! `cargo bench --bench conflict_marks [-- --json] [-- --show 0.55]`. Needs only the
//! embedding model (`scripts/setup core`): facts are added as they are, with no LLM, so
//! what is measured is the marking rule alone (`text::subjects::may_conflict` and the
//! nearness threshold, `conflict_similarity`). Marks are made from a cosine of 0.3 and
//! counted from each threshold up, so one run gives the whole curve; the write bench's
//! `marks` (with `--conflict-similarity 0.3`) gives the other side, the old values a
//! threshold catches. `--show X` prints the pairs marked at cosine X and above.

use mnemo_core::{Config, ConversationId};
use mnemo_engine::{MemoryClient, OpenOptions};
use serde_json::{json, Value};

mod support;

/// The lowest cosine at which marks are made; every threshold reported is at least this.
const LOWEST: f32 = 0.3;
const THRESHOLDS: [f32; 8] = [0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let show: Option<f32> = args
        .iter()
        .position(|a| a == "--show")
        .and_then(|i| args.get(i + 1))
        .map(|x| x.parse().unwrap_or_else(|e| panic!("--show {x}: {e}")));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let report = runtime.block_on(run(show));
    if json_out {
        println!("{report}");
    } else {
        println!("{report:#}");
    }
}

/// Each sample's sessions in order, each session's observations as one list of facts.
fn samples() -> Vec<(String, Vec<Vec<String>>)> {
    let data = support::locomo_dev();
    let mut samples = Vec::new();
    for (i, sample) in data.as_array().into_iter().flatten().enumerate() {
        let Some(sessions) = sample["observation"].as_object() else {
            continue;
        };
        let mut sessions: Vec<(&String, &Value)> = sessions.iter().collect();
        sessions.sort_by_key(|(key, _)| support::locomo_session_number(key));
        let passes: Vec<Vec<String>> = sessions
            .into_iter()
            .map(|(_, by_speaker)| {
                by_speaker
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                    .flat_map(|facts| facts.as_array().into_iter().flatten())
                    .filter_map(|fact| fact[0].as_str().map(str::to_owned))
                    .collect()
            })
            .filter(|facts: &Vec<String>| !facts.is_empty())
            .collect();
        let name = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("sample-{i}"), str::to_owned);
        samples.push((name, passes));
    }
    assert!(
        !samples.is_empty(),
        "the LoCoMo dev split has no observations"
    );
    samples
}

async fn run(show: Option<f32>) -> Value {
    let samples = samples();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = Config {
        memory_path: dir.path().to_owned(),
        models_dir: support::models_dir(),
        openai_base_url: None,
        start_watcher: false,
        enable_git_versioning: false,
        enable_summarization: false,
        conflict_marking: true,
        conflict_similarity: LOWEST,
        // Every observation stays: eviction would drop the oldest of a long sample.
        max_entries: 100_000,
        ..Config::default()
    };
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .expect("a client (scripts/setup core)");
    let mut facts = 0usize;
    let mut similarities: Vec<f32> = Vec::new();
    let mut shown: Vec<Value> = Vec::new();
    for (name, passes) in &samples {
        let conversation = ConversationId::new(name).expect("a conversation id");
        for pass in passes {
            facts += pass.len();
            let report = client
                .add(pass.clone(), &conversation)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let later_text = |id| {
                report
                    .added
                    .iter()
                    .find(|m| m.record.id == id)
                    .map_or("", |m| m.record.content.as_str())
            };
            for mark in &report.contested {
                similarities.push(mark.similarity);
                if show.is_some_and(|x| mark.similarity >= x) {
                    shown.push(json!({
                        "sample": name,
                        "similarity": (mark.similarity * 1000.0).round() / 1000.0,
                        "earlier": mark.earlier_text,
                        "later": later_text(mark.later),
                    }));
                }
            }
        }
        eprintln!("{name}: {facts} facts so far, {} marks", similarities.len());
    }
    let curve: Vec<Value> = THRESHOLDS
        .iter()
        .map(|&t| {
            let marks = similarities.iter().filter(|&&s| s >= t).count();
            json!({
                "conflict_similarity": t,
                "marks": marks,
                "marks_per_100_facts": support::round(marks as f64 * 100.0 / facts.max(1) as f64),
            })
        })
        .collect();
    json!({
        "samples": samples.len(),
        "facts": facts,
        "by_threshold": curve,
        "shown": shown,
    })
}
