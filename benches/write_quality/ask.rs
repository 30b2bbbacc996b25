//! The ask stage: after a dialogue's write passes have settled, its `ask` is put through the
//! chat path as an agent would put it much later (`memory_learn: false`, so asking writes
//! nothing), and the answer is judged against the dialogue's `current` and `stale` claims:
//!
//! - `right`: it states a `current` claim and no `stale` one;
//! - `both`: it states one of each (the old value beside the new, nothing saying which holds);
//! - `stale`: it states a `stale` claim only (an old, retracted or someone else's value given
//!   as the user's truth now);
//! - `none`: it states neither.
//!
//! Beside it, the same model answers with the whole dialogue in its prompt and no memory at
//! all (`with_dialogue`): what it can do when nothing has to be remembered. The claims are
//! read by the same judge as the stored facts, with "you" and "your" naming the user, since
//! an answer speaks to them.
//!
//! With `--distractors N`, every conversation first gets N unrelated memories (facts about
//! the people of the LoCoMo dev split, dated before the dialogue), so the asks also measure
//! finding the dialogue's facts among many.

use mnemo_core::{ConversationId, MemoryRecord, Role, LOCAL_LLM_ALIAS};
use mnemo_engine::{ChatReply, MemoryClient};
use serde_json::{json, Value};

use crate::judge::judge_answer;
use crate::Dialogue;

/// The system prompt both setups answer under: plain, and the same for both.
const ANSWER_SYSTEM: &str = "You are a helpful personal assistant. Answer the user's \
question in one or two short sentences.";

/// Room for a short answer.
const ANSWER_TOKENS: u64 = 96;

/// The conversation the whole-dialogue setup asks from: it holds nothing.
const NO_MEMORY: &str = "ask-without-memory";

/// Which group of the report a dialogue's answers count in.
fn group(kind: &str) -> &'static str {
    match kind {
        "correction" | "change" => "corrections",
        "retraction" => "retractions",
        _ => "others",
    }
}

/// Asks every dialogue with an `ask`, in both setups; the counts per setup and group, and
/// each answer.
pub async fn ask_all(client: &MemoryClient, dialogues: &[Dialogue]) -> Value {
    let mut counts = json!({});
    let mut answers = Vec::new();
    for dialogue in dialogues {
        let Some(question) = &dialogue.ask else {
            continue;
        };
        let (current, stale) = dialogue.ask_claims();
        let mut line = json!({"dialogue": dialogue.name, "kind": dialogue.kind, "ask": question});
        for setup in ["memory", "with_dialogue"] {
            let body = request(dialogue, question, setup);
            let answer = match client.chat(body).await {
                Ok(ChatReply::Answer(answer)) => answer.body["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
                Ok(ChatReply::Stream(_)) => panic!("a whole answer was asked for"),
                Err(e) => panic!("{}: asking failed: {e}", dialogue.name),
            };
            let verdict = judge_answer(&answer, &current, &stale, &dialogue.people());
            for key in [group(&dialogue.kind), "all"] {
                let cell = &mut counts[setup][key];
                cell["of"] = json!(cell["of"].as_u64().unwrap_or(0) + 1);
                let slot = &mut cell[verdict.as_str()];
                *slot = json!(slot.as_u64().unwrap_or(0) + 1);
            }
            line[setup] = json!({"answer": answer, "verdict": verdict.as_str()});
        }
        eprintln!(
            "ask     {:<28} {:<13} memory {:<6} with dialogue {}",
            dialogue.name,
            dialogue.kind,
            line["memory"]["verdict"].as_str().unwrap_or(""),
            line["with_dialogue"]["verdict"].as_str().unwrap_or("")
        );
        answers.push(line);
    }
    json!({"counts": counts, "answers": answers})
}

/// The chat request of `setup`: the question alone through memory, or the whole dialogue
/// and the question with no memory.
fn request(dialogue: &Dialogue, question: &str, setup: &str) -> Value {
    let mut messages = vec![json!({"role": "system", "content": ANSWER_SYSTEM})];
    if setup == "with_dialogue" {
        for turn in &dialogue.turns {
            messages.push(json!({"role": "user", "content": turn.user}));
            messages.push(json!({"role": "assistant", "content": turn.assistant}));
        }
    }
    messages.push(json!({"role": "user", "content": question}));
    let mut body = json!({
        "model": LOCAL_LLM_ALIAS,
        "messages": messages,
        "temperature": 0,
        "max_tokens": ANSWER_TOKENS,
        "memory_learn": false,
    });
    if setup == "memory" {
        body["memory_id"] = json!(dialogue.name);
    } else {
        body["memory_id"] = json!(NO_MEMORY);
        body["memory_top_k"] = json!(0);
    }
    body
}

/// Unrelated facts for `--distractors`: the LoCoMo dev split's observations, in order.
pub fn distractor_pool() -> Vec<String> {
    let data = crate::support::locomo_dev();
    let mut pool = Vec::new();
    for sample in data.as_array().into_iter().flatten() {
        let Some(sessions) = sample["observation"].as_object() else {
            continue;
        };
        let mut sessions: Vec<(&String, &Value)> = sessions.iter().collect();
        sessions.sort_by_key(|(key, _)| crate::support::locomo_session_number(key));
        for (_, by_speaker) in sessions {
            for facts in by_speaker.as_object().into_iter().flat_map(|m| m.values()) {
                for fact in facts.as_array().into_iter().flatten() {
                    if let Some(text) = fact[0].as_str() {
                        pool.push(text.to_owned());
                    }
                }
            }
        }
    }
    assert!(!pool.is_empty(), "the LoCoMo dev split has no observations");
    pool
}

/// Writes `count` distractors into the `index`th dialogue's conversation, a day apart, the
/// newest a day before now; each dialogue gets its own slice of the pool.
pub async fn add_distractors(
    client: &MemoryClient,
    conversation: &ConversationId,
    pool: &[String],
    index: usize,
    count: usize,
) {
    let now = chrono::Utc::now();
    let records: Vec<MemoryRecord> = (0..count)
        .map(|k| {
            let text = &pool[(index * count + k) % pool.len()];
            let mut record = MemoryRecord::new(conversation.clone(), Role::Memory, text.as_str());
            record.created_at = now - chrono::Duration::days((count - k) as i64);
            record
        })
        .collect();
    client
        .add_records(records)
        .await
        .unwrap_or_else(|e| panic!("{conversation}: the distractors: {e}"));
}
