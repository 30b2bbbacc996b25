//! Is what the write path remembers true? Scripted dialogues (`benches/write_quality/
//! dialogues.json`) go through the real write path with the real local LLM, one conversation
//! each, turn by turn as after a chat request (the user's and the assistant's turns written,
//! then extraction from the user's message, reconciliation, summary, commit). Then the live
//! facts and the summary are judged against what the dialogue says should and should not be
//! remembered.
//!
//! A dialogue lists `facts` (what must be remembered), `also_true` (true, not required) and
//! `absent` (what must not be), each a set of words that must all appear (any case) in one
//! fact. A stored fact is *false* when it matches an `absent` set, *true* when it matches a
//! `facts` or `also_true` set, and *unjudged* otherwise (printed, for a person to read). A
//! fact is judged sentence by sentence against `absent` and `old`: a sentence that negates
//! ("no longer", "not", "quit"...) states none of the words it holds ("The user no longer
//! lives in Berlin." is not "lives in Berlin"), and one sentence that states them makes the
//! fact false ("The user's sister smokes a lot. She quit last year.").
//! Every dialogue is played twice, on two stores: with `fact_grounding` off (what the
//! extractor returns is stored) and on (the default). Reported for each:
//! - `precision`: true facts / all stored facts (unjudged ones count against it), and
//!   `precision_judged`: true / (true + false);
//! - `recall`: `facts` sets matched by a live fact / all `facts` sets;
//! - `corrections`: correction dialogues whose `new` words are in a live fact and whose `old`
//!   words are in none;
//! - `deletions`: deletion dialogues whose `old` words are in no live fact;
//! - `no_ops`: chit-chat and question dialogues that stored nothing;
//! - `summary_contradictions`: dialogues whose summary states both sides of a
//!   `summary_conflicts` pair, and `summary_false`: summaries stating an `absent` set (both
//!   judged sentence by sentence, as facts are);
//! - the write path's time per turn (LLM and engine), median;
//! - `injection` (grounding on only): for each dialogue with an `ask`, the best
//!   [`INJECTED`] memories of its conversation, as a prompt with little room would get them,
//!   with turns that say nothing of their own placed last (`low_information_last`, the
//!   default) and ranked like any memory: how many such turns took a place, and how many
//!   asks got a memory holding their `answer` words.
//!
//! `cargo bench --bench write_quality [-- --json] [-- --only NAME,NAME] [-- --kinds K,K]
//! [-- --grounding on|off] [-- --verbose]` (`--kinds correction,deletion` plays those kinds of
//! dialogue only; `--grounding on` plays them with grounding on only). Needs
//! `scripts/setup llm` (the local LLM); a few seconds per turn on 2 cores, about ten minutes
//! in all.

mod support;

use mnemo_core::{Config, ConversationId, MemoryRecord, Role, LOCAL_LLM_ALIAS};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest, Unrestricted};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Dialogue {
    name: String,
    kind: String,
    turns: Vec<Turn>,
    facts: Vec<Vec<String>>,
    /// True facts the dialogue does not require (a paraphrase, a detail): judged true, not
    /// counted in recall.
    #[serde(default)]
    also_true: Vec<Vec<String>>,
    absent: Vec<Vec<String>>,
    #[serde(default)]
    old: Vec<String>,
    #[serde(default)]
    new: Vec<String>,
    #[serde(default)]
    summary_conflicts: Vec<[String; 2]>,
    /// A question about the dialogue, asked afterwards of its memories.
    #[serde(default)]
    ask: Option<String>,
    /// Words a memory answering `ask` holds.
    #[serde(default)]
    answer: Vec<String>,
}

/// How many memories the injection probe takes per ask: a prompt with little room.
const INJECTED: usize = 2;

#[derive(Deserialize)]
struct Turn {
    user: String,
    assistant: String,
}

/// What one dialogue left behind, judged.
#[derive(Default)]
struct Outcome {
    true_facts: usize,
    false_facts: usize,
    unjudged: usize,
    recalled: usize,
    passed: Option<bool>,
    contradiction: bool,
    summary_false: bool,
    turn_ms: Vec<f64>,
    /// Extracted facts grounding refused, with why.
    refused: Vec<Value>,
    detail: Value,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let verbose = args.iter().any(|a| a == "--verbose");
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|names| names.split(',').map(str::to_owned).collect());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/write_quality/dialogues.json");
    let dialogues: Vec<Dialogue> =
        serde_json::from_slice(&std::fs::read(&path).expect("the dialogues"))
            .expect("valid dialogues");
    let kinds: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--kinds")
        .and_then(|i| args.get(i + 1))
        .map(|k| k.split(',').map(str::to_owned).collect());
    let dialogues: Vec<Dialogue> = dialogues
        .into_iter()
        .filter(|d| only.as_ref().is_none_or(|o| o.contains(&d.name)))
        .filter(|d| kinds.as_ref().is_none_or(|k| k.contains(&d.kind)))
        .collect();
    let grounding: Vec<bool> = match args
        .iter()
        .position(|a| a == "--grounding")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("on") => vec![true],
        Some("off") => vec![false],
        _ => vec![false, true],
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let report = runtime.block_on(run(&dialogues, &grounding, verbose));
    if json_out {
        println!("{report}");
    } else {
        println!("{report:#}");
    }
}

async fn run(dialogues: &[Dialogue], modes: &[bool], verbose: bool) -> Value {
    let (llm, base) = support::local_llm().await;
    let mut report = json!({"llm": LOCAL_LLM_ALIAS});
    for &grounding in modes {
        let mode = if grounding {
            "grounding_on"
        } else {
            "grounding_off"
        };
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            memory_path: dir.path().to_owned(),
            openai_base_url: Some(llm.base_url().to_owned()),
            llm_model: LOCAL_LLM_ALIAS.to_owned(),
            start_watcher: false,
            fact_grounding: grounding,
            ..base.clone()
        };
        let client = MemoryClient::open(config.clone(), OpenOptions::default())
            .await
            .expect("a client");
        let mut outcomes = Vec::new();
        for dialogue in dialogues {
            let outcome = play(&client, dialogue).await;
            eprintln!(
                "{mode:<14} {:<24} {:<11} true {} false {} unjudged {}  recalled {}/{}{}",
                dialogue.name,
                dialogue.kind,
                outcome.true_facts,
                outcome.false_facts,
                outcome.unjudged,
                outcome.recalled,
                dialogue.facts.len(),
                match outcome.passed {
                    Some(true) => "  pass",
                    Some(false) => "  FAIL",
                    None => "",
                }
            );
            outcomes.push((dialogue, outcome));
        }
        report[mode] = summarise(&outcomes, verbose);
        if grounding {
            drop(client);
            report["injection"] = probe_injection(&config, dialogues).await;
        }
    }
    llm.stop().await;
    report
}

/// Asks each dialogue's `ask` of the store `config` names, with turns that say nothing
/// placed last and ranked like any memory.
async fn probe_injection(config: &Config, dialogues: &[Dialogue]) -> Value {
    let mut report = json!({});
    for (label, last) in [("placed_last", true), ("ranked_as_any", false)] {
        let mut config = config.clone();
        config.retrieval.low_information_last = last;
        let client = MemoryClient::open(config, OpenOptions::default())
            .await
            .expect("the played store opens again");
        let (mut asks, mut answered, mut low) = (0, 0, 0);
        let mut injected = Vec::new();
        for dialogue in dialogues {
            let Some(ask) = &dialogue.ask else { continue };
            let conversation = ConversationId::new(&dialogue.name).expect("an id");
            let request = SearchRequest::new(ask.as_str(), conversation).top_k(INJECTED);
            let hits = client.search(request).await.expect("a search");
            asks += 1;
            answered += usize::from(hits.iter().any(|h| contains(&h.content, &dialogue.answer)));
            low += hits.iter().filter(|h| h.scores.low_information).count();
            injected.push(json!({
                "ask": ask,
                "hits": hits.iter().map(|h| json!({
                    "content": h.content,
                    "low_information": h.scores.low_information,
                })).collect::<Vec<_>>(),
            }));
        }
        report[label] = json!({
            "asks": asks,
            "answered": answered,
            "low_information_injected": low,
            "places": asks * INJECTED,
            "injected": injected,
        });
    }
    report
}

/// Plays `dialogue` in a conversation of its own and judges what is left.
async fn play(client: &MemoryClient, dialogue: &Dialogue) -> Outcome {
    let conversation = ConversationId::new(&dialogue.name).expect("a dialogue name is an id");
    let mut outcome = Outcome::default();
    for turn in &dialogue.turns {
        let user = MemoryRecord::new(conversation.clone(), Role::User, turn.user.as_str());
        let assistant = MemoryRecord::new(
            conversation.clone(),
            Role::Assistant,
            turn.assistant.as_str(),
        );
        let written = client.add_records(vec![user, assistant]).await.unwrap();
        let report = client
            .learn_from_turn(&conversation, written.first(), 2)
            .await
            .unwrap();
        outcome
            .turn_ms
            .push((report.llm_time + report.engine_time).as_secs_f64() * 1e3);
        outcome.refused.extend(
            report
                .ungrounded
                .iter()
                .map(|(fact, why)| json!({"fact": fact, "why": why})),
        );
    }
    let facts: Vec<String> = client
        .list(Some(conversation.clone()))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.record.role == Role::Memory)
        .map(|m| m.record.content)
        .collect();
    let summary = client
        .summary_as(&Unrestricted, &conversation)
        .await
        .unwrap_or_default();
    judge(dialogue, &facts, &summary, &mut outcome);
    outcome
}

fn contains(text: &str, words: &[String]) -> bool {
    let text = text.to_lowercase();
    words.iter().all(|w| text.contains(&w.to_lowercase()))
}

/// Whether `fact` says something stopped or is not so ("The user no longer lives in
/// Berlin."): it does not state the `absent` or `old` words it holds.
fn negates(fact: &str) -> bool {
    let fact = format!(" {} ", fact.to_lowercase());
    [
        " no longer ",
        " anymore",
        " not ",
        "n't ",
        " quit ",
        " stopped ",
        " never ",
    ]
    .iter()
    .any(|n| fact.contains(n))
}

/// Whether a sentence of `fact` states `words` without negating them.
fn states(fact: &str, words: &[String]) -> bool {
    fact.split_inclusive(['.', '!', '?'])
        .any(|sentence| !negates(sentence) && contains(sentence, words))
}

fn judge(dialogue: &Dialogue, facts: &[String], summary: &str, outcome: &mut Outcome) {
    let mut verdicts = Vec::new();
    for fact in facts {
        let states = |words: &Vec<String>| states(fact, words);
        let verdict = if dialogue.absent.iter().any(states) {
            outcome.false_facts += 1;
            "false"
        } else if dialogue
            .facts
            .iter()
            .chain(&dialogue.also_true)
            .any(|f| contains(fact, f))
        {
            outcome.true_facts += 1;
            "true"
        } else {
            outcome.unjudged += 1;
            "unjudged"
        };
        verdicts.push(json!({"fact": fact, "verdict": verdict}));
    }
    outcome.recalled = dialogue
        .facts
        .iter()
        .filter(|f| facts.iter().any(|fact| contains(fact, f)))
        .count();
    let mentions = |word: &String| {
        facts
            .iter()
            .any(|fact| states(fact, std::slice::from_ref(word)))
    };
    outcome.passed = match dialogue.kind.as_str() {
        "correction" => {
            Some(dialogue.new.iter().all(mentions) && !dialogue.old.iter().any(mentions))
        }
        "deletion" => Some(!dialogue.old.iter().any(mentions)),
        "chitchat" | "question" => Some(facts.is_empty()),
        _ => None,
    };
    // Judged as facts are: "The user no longer lives in Berlin." does not state "lives in
    // Berlin", so beside "moved to Munich" it is no contradiction.
    outcome.contradiction = dialogue.summary_conflicts.iter().any(|[a, b]| {
        states(summary, std::slice::from_ref(a)) && states(summary, std::slice::from_ref(b))
    });
    outcome.summary_false = dialogue.absent.iter().any(|a| states(summary, a));
    outcome.detail = json!({"name": dialogue.name, "facts": verdicts, "summary": summary});
}

fn summarise(outcomes: &[(&Dialogue, Outcome)], verbose: bool) -> Value {
    let sum = |f: fn(&Outcome) -> usize| outcomes.iter().map(|(_, o)| f(o)).sum::<usize>();
    let (true_facts, false_facts, unjudged) = (
        sum(|o| o.true_facts),
        sum(|o| o.false_facts),
        sum(|o| o.unjudged),
    );
    let expected: usize = outcomes.iter().map(|(d, _)| d.facts.len()).sum();
    let rate = |part: usize, whole: usize| {
        if whole == 0 {
            Value::Null
        } else {
            json!(((part as f64 / whole as f64) * 1000.0).round() / 1000.0)
        }
    };
    let passing = |kinds: &[&str]| {
        let of_kind: Vec<&Outcome> = outcomes
            .iter()
            .filter(|(d, _)| kinds.contains(&d.kind.as_str()))
            .map(|(_, o)| o)
            .collect();
        let passed = of_kind.iter().filter(|o| o.passed == Some(true)).count();
        json!({"passed": passed, "of": of_kind.len(), "rate": rate(passed, of_kind.len())})
    };
    let mut turn_ms: Vec<f64> = outcomes
        .iter()
        .flat_map(|(_, o)| o.turn_ms.clone())
        .collect();
    turn_ms.sort_by(f64::total_cmp);
    let median = turn_ms.get(turn_ms.len() / 2).copied().unwrap_or(0.0);
    let unjudged_facts: Vec<&Value> = outcomes
        .iter()
        .flat_map(|(_, o)| o.detail["facts"].as_array().into_iter().flatten())
        .filter(|f| f["verdict"] != "true")
        .collect();
    let mut report = json!({
        "dialogues": outcomes.len(),
        "facts_stored": true_facts + false_facts + unjudged,
        "true": true_facts, "false": false_facts, "unjudged": unjudged,
        "precision": rate(true_facts, true_facts + false_facts + unjudged),
        "precision_judged": rate(true_facts, true_facts + false_facts),
        "recall": rate(outcomes.iter().map(|(_, o)| o.recalled).sum(), expected),
        "corrections": passing(&["correction"]),
        "deletions": passing(&["deletion"]),
        "no_ops": passing(&["chitchat", "question"]),
        "summary_contradictions": outcomes.iter().filter(|(_, o)| o.contradiction).count(),
        "summary_false": outcomes.iter().filter(|(_, o)| o.summary_false).count(),
        "turn_ms_p50": (median * 10.0).round() / 10.0,
        "turns": turn_ms.len(),
        "not_true": unjudged_facts,
        "refused_by_grounding": outcomes.iter().flat_map(|(_, o)| o.refused.clone()).collect::<Vec<_>>(),
    });
    if verbose {
        report["dialogue_details"] = outcomes.iter().map(|(_, o)| o.detail.clone()).collect();
    }
    report
}
