//! The LoCoMo long-conversation benchmark, as `mnemo eval locomo` reads and scores it.
//!
//! Each conversation's turns become chat-turn memories of one mnemo conversation (speaker A
//! as the user, speaker B as the assistant; the words, with a shared photo's caption
//! appended; the speaker's name in metadata `speaker`, as a chat message's `name` would be;
//! `created_at` is the session's date plus one second per turn, which keeps the turns in
//! order). Questions of categories 1-4 are scored by which evidence turns
//! (`dia_id`s) the search returns: R_all@k is the share of a question's evidence in the top k,
//! R_any@k whether any of it is.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{anyhow, bail, Context};
use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use serde::Serialize;
use serde_json::Value;

/// One conversation, ready to ingest and question.
#[derive(Debug)]
pub struct Sample {
    pub conversation: ConversationId,
    pub turns: Vec<MemoryRecord>,
    /// The dataset's observations (facts about each speaker, written per session by the
    /// benchmark's authors with an LLM), as facts drawn from the turn they came from
    /// (`source_id`, and its `dia_id` in metadata).
    pub observations: Vec<MemoryRecord>,
    pub questions: Vec<Question>,
    /// Every question of categories 1-5 with its gold answer, for the answer benchmark
    /// (category 5, adversarial, answered "not mentioned"; evidence may be empty).
    pub answer_questions: Vec<Question>,
    /// When the last session took place: "now" for the questions.
    pub last_session: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Question {
    pub text: String,
    pub category: u8,
    pub evidence: HashSet<String>,
    /// The gold answer (for category 5, what the conversation never says, so the right
    /// answer is that it is not mentioned).
    pub answer: String,
}

/// Reads the benchmark file: a JSON list of samples.
pub fn parse(json: &str) -> anyhow::Result<Vec<Sample>> {
    let samples: Vec<Value> = serde_json::from_str(json).context("not a JSON list of samples")?;
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| parse_sample(s).with_context(|| format!("sample {i}")))
        .collect()
}

fn parse_sample(sample: &Value) -> anyhow::Result<Sample> {
    let id = sample["sample_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no sample_id"))?;
    let conversation = ConversationId::new(&format!("locomo-{id}"))?;
    let conv = sample["conversation"]
        .as_object()
        .ok_or_else(|| anyhow!("no conversation"))?;
    let speaker_a = conv.get("speaker_a").and_then(Value::as_str).unwrap_or("");

    // Sessions by number; the date keys alone do not mean a session exists.
    let mut sessions: BTreeMap<u32, &Vec<Value>> = BTreeMap::new();
    for (key, value) in conv {
        let Some(n) = key.strip_prefix("session_").and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Value::Array(turns) = value {
            sessions.insert(n, turns);
        }
    }
    let mut turns = Vec::new();
    let mut dates = BTreeMap::new();
    for (n, session) in sessions {
        let raw_date = conv
            .get(&format!("session_{n}_date_time"))
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("session {n} has no date"))?;
        let date = parse_date(raw_date)?;
        dates.insert(n, date);
        for (i, turn) in session.iter().enumerate() {
            let speaker = turn["speaker"].as_str().unwrap_or("someone");
            let dia_id = turn["dia_id"]
                .as_str()
                .ok_or_else(|| anyhow!("a turn of session {n} has no dia_id"))?;
            let role = if speaker == speaker_a {
                Role::User
            } else {
                Role::Assistant
            };
            let mut record = MemoryRecord::new(conversation.clone(), role, turn_text(turn));
            record.created_at = date + Duration::seconds(i as i64);
            record.metadata.insert("dia_id".into(), Value::from(dia_id));
            record
                .metadata
                .insert(mnemo_engine::SPEAKER_FIELD.into(), Value::from(speaker));
            turns.push(record);
        }
    }
    let turn_ids: HashMap<&str, MemoryId> = turns
        .iter()
        .filter_map(|t| Some((t.metadata["dia_id"].as_str()?, t.id)))
        .collect();
    let known: HashSet<&str> = turn_ids.keys().copied().collect();
    let qa = sample["qa"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let questions = qa
        .iter()
        .filter_map(|q| parse_question(q, &known))
        .collect();
    let answer_questions = qa
        .iter()
        .filter_map(|q| parse_answer_question(q, &known))
        .collect();
    let observations = parse_observations(sample, &conversation, &dates, &turn_ids);
    let last_session = dates.values().max().copied();
    Ok(Sample {
        conversation,
        observations,
        turns,
        questions,
        answer_questions,
        last_session: last_session.ok_or_else(|| anyhow!("no sessions"))?,
    })
}

/// `observation.session_N_observation.{speaker: [[text, dia_id], ...]}`, as facts drawn from
/// their turn (`source_id`); an observation whose source is not a known turn is skipped.
fn parse_observations(
    sample: &Value,
    conversation: &ConversationId,
    dates: &BTreeMap<u32, DateTime<Utc>>,
    turn_ids: &HashMap<&str, MemoryId>,
) -> Vec<MemoryRecord> {
    let Some(sessions) = sample["observation"].as_object() else {
        return Vec::new();
    };
    let mut facts = Vec::new();
    for (key, speakers) in sessions {
        let Some(date) = key
            .strip_prefix("session_")
            .and_then(|k| k.strip_suffix("_observation"))
            .and_then(|n| n.parse::<u32>().ok())
            .and_then(|n| dates.get(&n))
        else {
            continue;
        };
        for (speaker, items) in speakers.as_object().into_iter().flatten() {
            for item in items.as_array().into_iter().flatten() {
                let (Some(text), Some(source)) = (item[0].as_str(), item[1].as_str()) else {
                    continue;
                };
                let Some((dia_id, turn)) = source
                    .split(|c: char| c == ';' || c == ',' || c.is_whitespace())
                    .find_map(|id| Some((id, *turn_ids.get(id)?)))
                else {
                    continue;
                };
                let mut fact = MemoryRecord::new(conversation.clone(), Role::Memory, text);
                fact.created_at = *date;
                fact.source_id = Some(turn);
                fact.metadata.insert("dia_id".into(), Value::from(dia_id));
                fact.metadata.insert(
                    mnemo_engine::SPEAKER_FIELD.into(),
                    Value::from(speaker.as_str()),
                );
                facts.push(fact);
            }
        }
    }
    facts
}

fn turn_text(turn: &Value) -> String {
    let text = turn["text"].as_str().unwrap_or("").trim();
    match turn["blip_caption"].as_str() {
        Some(caption) if !caption.trim().is_empty() => {
            format!("{text} [shares a photo: {}]", caption.trim())
        }
        _ => text.to_owned(),
    }
}

/// Questions of categories 1-4 with at least one usable evidence id; category 5 (adversarial,
/// unanswerable) is skipped. Malformed evidence lists ("D8:6; D9:17", "D30:05", a bare "D")
/// are split on `;`, `,` and whitespace, and only ids of existing turns are kept.
fn parse_question(qa: &Value, known: &HashSet<&str>) -> Option<Question> {
    let question = read_question(qa, known)?;
    ((1..=4).contains(&question.category) && !question.evidence.is_empty()).then_some(question)
}

/// A question of any category 1-5 with its gold answer: the answer benchmark asks category
/// 5 too, and questions whose evidence names no known turn, but not a question without an
/// answer to score against.
fn parse_answer_question(qa: &Value, known: &HashSet<&str>) -> Option<Question> {
    read_question(qa, known).filter(|q| !q.answer.is_empty())
}

/// A question of category 1-5, its evidence among the `known` turns, and its gold answer
/// (a number in the data read as its digits; empty when there is none).
fn read_question(qa: &Value, known: &HashSet<&str>) -> Option<Question> {
    let category = qa["category"].as_u64()? as u8;
    if !(1..=5).contains(&category) {
        return None;
    }
    let evidence: HashSet<String> = qa["evidence"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .flat_map(|e| e.split(|c: char| c == ';' || c == ',' || c.is_whitespace()))
        .filter(|id| known.contains(id))
        .map(str::to_owned)
        .collect();
    let answer = match (category, &qa["answer"]) {
        (5, _) => "Not mentioned in the conversation".to_owned(),
        (_, Value::String(text)) => text.trim().to_owned(),
        (_, Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    Some(Question {
        text: qa["question"].as_str()?.to_owned(),
        category,
        evidence,
        answer,
    })
}

/// "1:56 pm on 8 May, 2023" (taken as UTC).
fn parse_date(raw: &str) -> anyhow::Result<DateTime<Utc>> {
    for format in ["%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw.trim(), format) {
            return Ok(t.and_utc());
        }
    }
    bail!("cannot read the session date {raw:?}")
}

/// Recall of one question's retrieved turns at each k.
pub fn recall(evidence: &HashSet<String>, retrieved: &[String], k: usize) -> (f64, f64) {
    let top: HashSet<&String> = retrieved.iter().take(k).collect();
    let found = evidence.iter().filter(|e| top.contains(e)).count();
    let all = found as f64 / evidence.len() as f64;
    let any = if found > 0 { 1.0 } else { 0.0 };
    (all, any)
}

/// Sums of R_all and R_any at each k, over some questions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub questions: usize,
    #[serde(skip)]
    sums: BTreeMap<usize, (f64, f64)>,
}

impl Tally {
    pub fn add(&mut self, evidence: &HashSet<String>, retrieved: &[String], ks: &[usize]) {
        self.questions += 1;
        for &k in ks {
            let (all, any) = recall(evidence, retrieved, k);
            let sum = self.sums.entry(k).or_default();
            sum.0 += all;
            sum.1 += any;
        }
    }

    /// Mean R_all@k and R_any@k.
    pub fn means(&self, k: usize) -> (f64, f64) {
        let (all, any) = self.sums.get(&k).copied().unwrap_or_default();
        let n = self.questions.max(1) as f64;
        (all / n, any / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!([{
            "sample_id": "conv-1",
            "conversation": {
                "speaker_a": "Ann", "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                    {"speaker": "Bob", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a photo of a dog"}
                ],
                "session_2_date_time": "10:04 am on 22 June, 2023",
                "session_3_date_time": "9:00 am on 1 July, 2023",
                "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Miso is fine."}]
            },
            "observation": {
                "session_2_observation": {
                    "Ann": [["Ann's cat Miso is fine.", "D2:1"], ["Unknown source.", "D9:9"]]
                }
            },
            "qa": [
                {"question": "What did Ann adopt?", "answer": "a cat", "category": 4, "evidence": ["D1:1"]},
                {"question": "Pets?", "category": 1, "evidence": ["D1:1; D2:1", "D30:05", "D"]},
                {"question": "Unanswerable", "category": 5, "evidence": ["D1:1"]},
                {"question": "No evidence", "answer": 2023, "category": 2, "evidence": ["D9:9"]}
            ]
        }])
    }

    #[test]
    fn turns_questions_and_dates_are_read() {
        let samples = parse(&sample().to_string()).unwrap();
        let s = &samples[0];
        assert_eq!(s.conversation.as_str(), "locomo-conv-1");
        assert_eq!(s.turns.len(), 3);
        assert_eq!(s.turns[0].role, Role::User);
        assert_eq!(s.turns[1].role, Role::Assistant);
        assert_eq!(s.turns[0].content, "I adopted a cat.");
        assert_eq!(s.turns[0].metadata["speaker"], "Ann");
        assert_eq!(
            s.turns[1].content,
            "Look! [shares a photo: a photo of a dog]"
        );
        assert_eq!(
            s.turns[1].created_at.to_rfc3339(),
            "2023-05-08T13:56:01+00:00"
        );
        assert_eq!(s.last_session.to_rfc3339(), "2023-06-22T10:04:00+00:00");
        assert_eq!(s.questions.len(), 2, "category 5 and evidence-less skipped");
        // The answer benchmark asks every question with a gold answer, category 5 included.
        let answers: Vec<(&str, u8, &str)> = s
            .answer_questions
            .iter()
            .map(|q| (q.text.as_str(), q.category, q.answer.as_str()))
            .collect();
        assert_eq!(
            answers,
            [
                ("What did Ann adopt?", 4, "a cat"),
                ("Unanswerable", 5, "Not mentioned in the conversation"),
                ("No evidence", 2, "2023"),
            ]
        );
        assert_eq!(s.observations.len(), 1, "only observations of known turns");
        let fact = &s.observations[0];
        assert_eq!(fact.role, Role::Memory);
        assert_eq!(fact.content, "Ann's cat Miso is fine.");
        assert_eq!(fact.metadata["dia_id"], "D2:1");
        let source = s.turns.iter().find(|t| t.metadata["dia_id"] == "D2:1");
        assert_eq!(fact.source_id, source.map(|t| t.id), "drawn from its turn");
        assert_eq!(fact.created_at.to_rfc3339(), "2023-06-22T10:04:00+00:00");
        let pets = &s.questions[1].evidence;
        assert_eq!(pets.len(), 2);
        assert!(pets.contains("D2:1"));
    }

    #[test]
    fn recall_counts_evidence_in_the_top_k() {
        let evidence: HashSet<String> = ["a", "b"].map(String::from).into();
        let retrieved = ["x", "a", "y", "b"].map(String::from);
        assert_eq!(recall(&evidence, &retrieved, 1), (0.0, 0.0));
        assert_eq!(recall(&evidence, &retrieved, 2), (0.5, 1.0));
        assert_eq!(recall(&evidence, &retrieved, 10), (1.0, 1.0));
    }
}
