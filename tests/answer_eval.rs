//! `mnemo eval locomo --answer` end to end: two small conversations, a scripted upstream
//! that answers only from what it is sent, and the scores the report gives for each setup.

use std::process::Command;

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};
use tempfile::TempDir;

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

/// What `mnemo eval locomo --answer --json` on `data`, with `args` added, against `llm`
/// gives: the report, the answer lines, and the folder of its store.
fn eval_answers(llm: &ScriptedLlm, data: &Value, args: &[&str]) -> (Value, Vec<Value>, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data_file = dir.path().join("locomo.json");
    std::fs::write(&data_file, data.to_string()).unwrap();
    let answers = dir.path().join("answers.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["eval", "locomo", "--answer", "--json", "--data"])
        .arg(&data_file)
        .arg("--answers-out")
        .arg(&answers)
        .arg("--memory-path")
        .arg(dir.path().join("store"))
        .args(args)
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
    let lines: Vec<Value> = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (report, lines, dir)
}

/// The scores of setup `name` in `report`.
fn setup(report: &Value, name: &str) -> Value {
    report["setups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["setup"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
        .clone()
}

/// The line of the answer `setup` gave to `question`.
fn line<'a>(lines: &'a [Value], setup: &str, question: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["setup"] == setup && l["question"] == question)
        .unwrap_or_else(|| panic!("no {setup} answer to {question:?} in {lines:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn each_setup_is_scored_by_f1_the_judges_and_the_evidence_it_was_given() {
    let llm = ScriptedLlm::with_handler(answering).await;
    let (report, lines, dir) = eval_answers(&llm, &fixture(), &[]);
    assert_eq!(report["questions"], 3);
    assert_eq!(report["model"], "gpt-4o-mini");
    assert_eq!(report["window"], 128_000);
    assert_eq!(report["prompts"]["answer"].as_str().map(str::len), Some(12));
    let setup = |name: &str| setup(&report, name);

    // No memory: the facts are not there; "not mentioned" is right only for category 5.
    let none = setup("none");
    assert_eq!(none["categories_1_4"]["questions"], 2);
    assert_eq!(none["categories_1_4"]["f1"], 0.0);
    assert_eq!(none["categories_1_4"]["judge"], 0.0);
    // Each rate says what it is over: both verdicts were read.
    assert_eq!(none["categories_1_4"]["judge_verdicts"], 2, "{none}");
    assert_eq!(none["categories_1_4"]["judge_unparsed"], 0);
    assert_eq!(none["adversarial"]["f1"], 1.0, "{none}");
    assert_eq!(none["tokens_injected_mean"], 0.0);
    assert!(none["categories_1_4"]["evidence_injected"].is_null());
    assert_eq!(none["categories_1_4"]["evidence_checked"], 0);
    assert_eq!(none["categories_1_4"]["evidence_not_applicable"], 0);

    // mnemo injects the evidence turns: every fact answered, every judge agrees.
    let mnemo = setup("mnemo");
    assert_eq!(mnemo["categories_1_4"]["f1"], 1.0, "{mnemo}");
    assert_eq!(mnemo["categories_1_4"]["judge"], 1.0);
    assert_eq!(mnemo["categories_1_4"]["judge_strict"], 1.0);
    assert_eq!(mnemo["categories_1_4"]["evidence_injected"], 1.0);
    assert_eq!(mnemo["categories_1_4"]["evidence_checked"], 2, "{mnemo}");
    assert_eq!(mnemo["categories_1_4"]["evidence_not_applicable"], 0);
    assert_eq!(mnemo["categories_1_4"]["judge_verdicts"], 2);
    assert_eq!(mnemo["categories_1_4"]["judge_strict_verdicts"], 2);
    assert_eq!(mnemo["categories_1_4"]["judge_strict_unparsed"], 0);
    assert_eq!(mnemo["adversarial"]["f1"], 1.0);
    // Category 5's question has no evidence turns: nothing to inject, so no rate, and it is
    // counted apart; the judges do not grade it.
    assert!(
        mnemo["adversarial"]["evidence_injected"].is_null(),
        "{mnemo}"
    );
    assert_eq!(mnemo["adversarial"]["evidence_checked"], 0);
    assert_eq!(mnemo["adversarial"]["evidence_not_applicable"], 1);
    assert!(mnemo["adversarial"]["judge"].is_null());
    assert_eq!(mnemo["adversarial"]["judge_verdicts"], 0);
    assert_eq!(mnemo["adversarial"]["judge_unparsed"], 0);
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

    assert_eq!(lines.len(), 12, "3 questions, 4 setups");
    let adopted = lines
        .iter()
        .find(|l| l["setup"] == "mnemo" && l["category"] == 4)
        .unwrap();
    assert_eq!(adopted["answer"], "a cat");
    assert_eq!(adopted["gold"], "a cat");
    assert!(adopted["judged_strict"].as_bool().unwrap());
    assert_eq!(adopted["evidence_injected"], true);
    assert_eq!(adopted["evidence_not_applicable"], false);
    assert_eq!(adopted["judge_unparsed"], false);
    let dog = line(&lines, "mnemo", "What does Ann's dog eat?");
    assert!(dog["evidence_injected"].is_null(), "{dog}");
    assert_eq!(dog["evidence_not_applicable"], true);

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

/// Like [`answering`], but the lenient judge's verdict on the bike question says neither
/// CORRECT nor WRONG.
fn unsure_about_the_bike(request: &ChatRequest) -> Reply {
    let said = request.body["messages"].to_string();
    if said.contains("Be generous") && said.contains("When did Cy buy a bike?") {
        return Reply::text(
            "{\"reason\": \"the dates are hard to compare\", \"label\": \"UNSURE\"}",
        );
    }
    answering(request)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verdict_the_judge_did_not_give_is_counted_apart_not_in_the_rate() {
    let llm = ScriptedLlm::with_handler(unsure_about_the_bike).await;
    let (report, lines, _dir) = eval_answers(&llm, &fixture(), &["--setups", "none,mnemo"]);

    // mnemo answered both right: the lenient rate is over the one verdict read (1 of 1), the
    // unreadable one counted apart; the strict judge read both.
    let mnemo = setup(&report, "mnemo");
    let scores = &mnemo["categories_1_4"];
    assert_eq!(scores["questions"], 2, "{mnemo}");
    assert_eq!(scores["judge"], 1.0, "{mnemo}");
    assert_eq!(scores["judge_verdicts"], 1);
    assert_eq!(scores["judge_unparsed"], 1);
    assert_eq!(scores["judge_strict"], 1.0);
    assert_eq!(scores["judge_strict_verdicts"], 2);
    assert_eq!(scores["judge_strict_unparsed"], 0);
    let bikes = &mnemo["by_category"]["2"];
    assert!(bikes["judge"].is_null(), "no verdict, no rate: {mnemo}");
    assert_eq!(bikes["judge_verdicts"], 0);
    assert_eq!(bikes["judge_unparsed"], 1);

    // No memory: both wrong, one of them unreadable: 0 of 1.
    let none = setup(&report, "none");
    assert_eq!(none["categories_1_4"]["judge"], 0.0, "{none}");
    assert_eq!(none["categories_1_4"]["judge_verdicts"], 1);
    assert_eq!(none["categories_1_4"]["judge_unparsed"], 1);

    let bike = line(&lines, "mnemo", "When did Cy buy a bike?");
    assert!(bike["judged"].is_null(), "{bike}");
    assert_eq!(bike["judge_unparsed"], true);
    assert_eq!(bike["judged_strict"], true);
    assert_eq!(bike["judge_strict_unparsed"], false);
    let cat = line(&lines, "mnemo", "What did Ann adopt?");
    assert_eq!(cat["judged"], true, "{cat}");
    assert_eq!(cat["judge_unparsed"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_without_evidence_is_not_counted_as_its_evidence_injected() {
    // A question of category 3 whose evidence names no turn of its conversation: it is
    // asked, with no evidence to find.
    let mut data = fixture();
    data[1]["qa"].as_array_mut().unwrap().push(json!(
        {"question": "Where does Cy ride?", "answer": "to work", "evidence": ["D9:9"], "category": 3}
    ));
    let llm = ScriptedLlm::with_handler(answering).await;
    let (report, lines, _dir) = eval_answers(&llm, &data, &["--setups", "mnemo", "--no-judge"]);
    assert_eq!(report["questions"], 4, "{report}");

    // Categories 1-4: three questions, the rate over the two with evidence (both injected),
    // the third counted apart.
    let mnemo = setup(&report, "mnemo");
    let scores = &mnemo["categories_1_4"];
    assert_eq!(scores["questions"], 3, "{mnemo}");
    assert_eq!(scores["evidence_injected"], 1.0, "{mnemo}");
    assert_eq!(scores["evidence_checked"], 2);
    assert_eq!(scores["evidence_not_applicable"], 1);
    let riding = &mnemo["by_category"]["3"];
    assert_eq!(riding["questions"], 1, "{mnemo}");
    assert!(
        riding["evidence_injected"].is_null(),
        "not applicable, not injected: {mnemo}"
    );
    assert_eq!(riding["evidence_checked"], 0);
    assert_eq!(riding["evidence_not_applicable"], 1);
    // Without the judges, no judge rate and nothing unread.
    assert!(scores["judge"].is_null());
    assert_eq!(scores["judge_verdicts"], 0);
    assert_eq!(scores["judge_unparsed"], 0);

    let ride = line(&lines, "mnemo", "Where does Cy ride?");
    assert!(ride["evidence_injected"].is_null(), "{ride}");
    assert_eq!(ride["evidence_not_applicable"], true);
    let bike = line(&lines, "mnemo", "When did Cy buy a bike?");
    assert_eq!(bike["evidence_injected"], true, "{bike}");
    assert_eq!(bike["evidence_not_applicable"], false);
}
