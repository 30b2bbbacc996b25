//! `mnemo eval locomo --answer` end to end: two small conversations, a scripted upstream
//! that answers only from what it is sent, and the scores the report gives for each setup.

use std::process::Command;

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};

fn fixture() -> Value {
    json!([
        {
            "sample_id": "one",
            "conversation": {
                "speaker_a": "Ann", "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat last week, her name is Miso."},
                    {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely, I only have plants."}
                ]
            },
            "qa": [
                {"question": "What did Ann adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
                {"question": "What does Ann's dog eat?", "adversarial_answer": "kibble", "evidence": [], "category": 5}
            ]
        },
        {
            "sample_id": "two",
            "conversation": {
                "speaker_a": "Cy", "speaker_b": "Di",
                "session_1_date_time": "9:00 am on 20 June, 2023",
                "session_1": [
                    {"speaker": "Cy", "dia_id": "D1:1", "text": "I bought a new bike this month."},
                    {"speaker": "Di", "dia_id": "D1:2", "text": "Ride safely!"}
                ]
            },
            "qa": [
                {"question": "When did Cy buy a bike?", "answer": "June 2023", "evidence": ["D1:1"], "category": 2}
            ]
        }
    ])
}

/// Answers from what the request carries, as a model with no memory of its own would;
/// judges by whether the answer holds the gold answer.
fn answering(request: &ChatRequest) -> Reply {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let said: String = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    if said.starts_with("Grade an answer") {
        let line = |label: &str| {
            said.lines()
                .find_map(|l| l.strip_prefix(label))
                .unwrap_or_default()
                .to_lowercase()
        };
        let correct = line("Generated answer: ").contains(&line("Gold answer: "));
        let label = if correct { "CORRECT" } else { "WRONG" };
        return Reply::text(format!(
            "{{\"reason\": \"compared\", \"label\": \"{label}\"}}"
        ));
    }
    let question = request.last_user_message().unwrap_or_default();
    // Memories are injected into the last user message: the question is matched whole.
    let answer = if question.contains("What did Ann adopt?") && said.contains("adopted a cat") {
        "a cat"
    } else if question.contains("When did Cy buy a bike?") && said.contains("bought a new bike") {
        "June 2023"
    } else {
        "Not mentioned in the conversation"
    };
    Reply::text(answer)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_setup_is_scored_by_f1_the_judges_and_the_evidence_it_was_given() {
    let llm = ScriptedLlm::with_handler(answering).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("locomo.json");
    std::fs::write(&data, fixture().to_string()).unwrap();
    let answers = dir.path().join("answers.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["eval", "locomo", "--answer", "--json", "--data"])
        .arg(&data)
        .arg("--answers-out")
        .arg(&answers)
        .arg("--memory-path")
        .arg(dir.path().join("store"))
        .env("MNEMO_OPENAI_BASE_URL", llm.base_url())
        .env("MNEMO_LLM_MODEL", "gpt-4o-mini")
        .env_remove("MNEMO_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["questions"], 3);
    assert_eq!(report["model"], "gpt-4o-mini");
    assert_eq!(report["window"], 128_000);
    assert_eq!(report["prompts"]["answer"].as_str().map(str::len), Some(12));
    let setup = |name: &str| {
        report["setups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["setup"] == name)
            .unwrap_or_else(|| panic!("no {name} in {report}"))
            .clone()
    };

    // No memory: the facts are not there; "not mentioned" is right only for category 5.
    let none = setup("none");
    assert_eq!(none["categories_1_4"]["questions"], 2);
    assert_eq!(none["categories_1_4"]["f1"], 0.0);
    assert_eq!(none["categories_1_4"]["judge"], 0.0);
    assert_eq!(none["adversarial"]["f1"], 1.0, "{none}");
    assert_eq!(none["tokens_injected_mean"], 0.0);
    assert!(none["categories_1_4"]["evidence_injected"].is_null());

    // mnemo injects the evidence turns: every fact answered, every judge agrees.
    let mnemo = setup("mnemo");
    assert_eq!(mnemo["categories_1_4"]["f1"], 1.0, "{mnemo}");
    assert_eq!(mnemo["categories_1_4"]["judge"], 1.0);
    assert_eq!(mnemo["categories_1_4"]["judge_strict"], 1.0);
    assert_eq!(mnemo["categories_1_4"]["evidence_injected"], 1.0);
    assert_eq!(mnemo["adversarial"]["f1"], 1.0);
    assert!(
        mnemo["tokens_injected_mean"].as_f64() > Some(0.0),
        "{mnemo}"
    );
    assert!(
        mnemo["tokens_sent_mean"].as_f64() > none["tokens_sent_mean"].as_f64(),
        "{mnemo}"
    );
    assert_eq!(mnemo["by_category"]["2"]["f1"], 1.0);

    // The whole conversation fits gpt-4o-mini's window: recent and full send all of it.
    for name in ["recent", "full"] {
        let s = setup(name);
        assert_eq!(s["categories_1_4"]["f1"], 1.0, "{s}");
        assert_eq!(s["skipped"], 0);
    }

    let lines: Vec<Value> = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12, "3 questions, 4 setups");
    let adopted = lines
        .iter()
        .find(|l| l["setup"] == "mnemo" && l["category"] == 4)
        .unwrap();
    assert_eq!(adopted["answer"], "a cat");
    assert_eq!(adopted["gold"], "a cat");
    assert!(adopted["judged_strict"].as_bool().unwrap());

    // Asking left no trace in memory: only the four turns are stored.
    let listed = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["list", "--json", "--memory-path"])
        .arg(dir.path().join("store"))
        .env_remove("MNEMO_CONFIG")
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
    assert_eq!(listed.as_array().map(Vec::len), Some(4), "{listed}");
}
