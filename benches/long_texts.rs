//! How the embedder reads texts longer than all-MiniLM-L6-v2 was trained on (128 tokens):
//! whole up to 256 tokens, or in windows of at most 128, 96 or 64 tokens whose vectors are
//! averaged (`EmbedderConfig::window_tokens`). Dense retrieval alone, so that nothing else
//! moves the figures: for each question, are the passages holding its answer among the k
//! nearest? And the median time to embed one passage, in the same run.
//!
//! Two sets of passages of about 170-240 words (220-300 tokens):
//! - **LoCoMo dev**: each session's turns (`Speaker: text`) joined in order into passages of
//!   at least 170 words; a question's passages are those holding its evidence turns, all of
//!   which must be found (R_all@k, categories 1-4), within its own conversation.
//! - **Blind** (`benches/long_texts/blind.json`): 60 answers an assistant might give, in 6
//!   themes of 10 alike, and 120 questions, written by someone who had read neither the code
//!   nor LoCoMo, before the window was chosen; one question about the first third of each
//!   passage and one about its last third only.
//!
//! `cargo bench --bench long_texts [-- --json]`.

mod support;

use std::collections::HashMap;
use std::time::Instant;

use mnemo_embed::{cosine, Embedder, EmbedderConfig};
use serde_json::{json, Value};
use support::{locomo_dev, locomo_session_number, models_dir, percentile_ms, round};

/// Windows compared; 256 reads every text whole, as the model's input limit does.
const WINDOWS: [usize; 4] = [256, 128, 96, 64];
const KS: [usize; 4] = [1, 3, 5, 10];
/// A LoCoMo passage closes once it holds this many words.
const PASSAGE_WORDS: usize = 170;

/// Passages to search and questions to ask, each in a group (a conversation) of passages.
struct Set {
    passages: Vec<(usize, String)>,
    /// Question, its group, the passages (indices) it needs.
    questions: Vec<(String, usize, Vec<usize>, &'static str)>,
}

fn main() {
    let json_out = std::env::args().any(|a| a == "--json");
    let sets = [
        ("locomo_dev", locomo_passages()),
        ("blind", blind_passages()),
    ];
    let mut report = serde_json::Map::new();
    for window in WINDOWS {
        let embedder = embedder(window);
        let mut by_set = serde_json::Map::new();
        for (name, set) in &sets {
            by_set.insert((*name).into(), measure(&embedder, set));
        }
        report.insert(format!("window_{window}"), Value::Object(by_set));
    }
    let report = Value::Object(report);
    if json_out {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    }
}

fn embedder(window_tokens: usize) -> Embedder {
    let models = models_dir();
    let config = EmbedderConfig {
        window_tokens,
        ..EmbedderConfig::new(
            models.join("onnxruntime/libonnxruntime.so.1.31.1"),
            models.join("all-MiniLM-L6-v2"),
        )
    };
    Embedder::load(&config).unwrap_or_else(|e| panic!("{e}"))
}

/// Recall at each k, overall and by the part of the passage a question is about, and the
/// median milliseconds to embed one passage (one at a time, as the write path does).
fn measure(embedder: &Embedder, set: &Set) -> Value {
    let mut times = Vec::with_capacity(set.passages.len());
    let vectors: Vec<Vec<f32>> = set
        .passages
        .iter()
        .map(|(_, text)| {
            let started = Instant::now();
            let vector = embedder.embed(&[text]).unwrap().remove(0);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            vector
        })
        .collect();
    let asked: Vec<&str> = set.questions.iter().map(|q| q.0.as_str()).collect();
    let query_vectors = embedder.embed(&asked).unwrap();
    let mut found: HashMap<(&str, usize), (usize, usize)> = HashMap::new();
    for ((_, group, needed, part), query) in set.questions.iter().zip(&query_vectors) {
        let mut ranked: Vec<(f32, usize)> = set
            .passages
            .iter()
            .enumerate()
            .filter(|(_, (g, _))| g == group)
            .map(|(at, _)| (cosine(query, &vectors[at]), at))
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for k in KS {
            let top: Vec<usize> = ranked.iter().take(k).map(|r| r.1).collect();
            let hit = needed.iter().all(|n| top.contains(n)) as usize;
            let keys: &[&str] = if *part == "all" {
                &["all"]
            } else {
                &["all", part]
            };
            for key in keys {
                let counts = found.entry((*key, k)).or_default();
                counts.0 += hit;
                counts.1 += 1;
            }
        }
    }
    let mut recall = serde_json::Map::new();
    let mut keys: Vec<_> = found.keys().copied().collect();
    keys.sort();
    for (part, k) in keys {
        let (hits, asked) = found[&(part, k)];
        recall.insert(
            format!("{part}_R@{k}"),
            json!(round(hits as f64 / asked as f64)),
        );
    }
    json!({
        "passages": set.passages.len(),
        "questions": set.questions.len(),
        "recall": recall,
        "embed_ms_p50": round(percentile_ms(&mut times, 0.5)),
    })
}

/// LoCoMo dev's sessions cut into passages of consecutive turns.
fn locomo_passages() -> Set {
    let samples = locomo_dev();
    let mut set = Set {
        passages: Vec::new(),
        questions: Vec::new(),
    };
    for (group, sample) in samples
        .as_array()
        .expect("a list of samples")
        .iter()
        .enumerate()
    {
        let conversation = &sample["conversation"];
        let mut sessions: Vec<(&String, &Value)> = conversation
            .as_object()
            .expect("a conversation object")
            .iter()
            .filter(|(key, value)| key.starts_with("session_") && value.is_array())
            .collect();
        sessions.sort_by_key(|(key, _)| locomo_session_number(key));
        let mut passage_of: HashMap<String, usize> = HashMap::new();
        for (_, turns) in sessions {
            let mut text = String::new();
            let mut ids = Vec::new();
            let turns = turns.as_array().expect("a list of turns");
            for (at, turn) in turns.iter().enumerate() {
                let said = format!(
                    "{}: {}",
                    turn["speaker"].as_str().unwrap_or(""),
                    turn["text"].as_str().unwrap_or("")
                );
                text = if text.is_empty() {
                    said
                } else {
                    format!("{text} {said}")
                };
                ids.push(turn["dia_id"].as_str().unwrap_or("").to_owned());
                if text.split_whitespace().count() >= PASSAGE_WORDS || at + 1 == turns.len() {
                    for id in ids.drain(..) {
                        passage_of.insert(id, set.passages.len());
                    }
                    set.passages.push((group, std::mem::take(&mut text)));
                }
            }
        }
        for qa in sample["qa"].as_array().expect("a list of questions") {
            if !matches!(qa["category"].as_u64(), Some(1..=4)) {
                continue;
            }
            let mut needed: Vec<usize> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str())
                .flat_map(|e| e.split([';', ',', ' ']))
                .filter_map(|id| passage_of.get(id.trim()).copied())
                .collect();
            needed.sort_unstable();
            needed.dedup();
            if let (false, Some(question)) = (needed.is_empty(), qa["question"].as_str()) {
                set.questions
                    .push((question.to_owned(), group, needed, "any"));
            }
        }
    }
    set
}

/// The blind set: one group of 60 passages.
fn blind_passages() -> Set {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/long_texts/blind.json");
    let data: Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let texts = data["texts"].as_array().expect("texts");
    let at: HashMap<&str, usize> = texts
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t["id"].as_str()?, i)))
        .collect();
    Set {
        passages: texts
            .iter()
            .map(|t| (0, t["text"].as_str().unwrap_or("").to_owned()))
            .collect(),
        questions: data["questions"]
            .as_array()
            .expect("questions")
            .iter()
            .filter_map(|q| {
                let part = match q["part"].as_str()? {
                    "first" => "first_third",
                    _ => "last_third",
                };
                Some((
                    q["question"].as_str()?.to_owned(),
                    0,
                    vec![*at.get(q["text"].as_str()?)?],
                    part,
                ))
            })
            .collect(),
    }
}
