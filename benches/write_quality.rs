//! Is what the write path remembers true, and is it what the chat path answers with later?
//! Scripted dialogues go through the real write path with the real local LLM, one
//! conversation each, turn by turn as after a chat request (the user's and the assistant's
//! turns written, then extraction from the user's message, reconciliation, summary, commit).
//! Then the live facts and the summary are judged against what the dialogue says should and
//! should not be remembered, and, with `--ask`, the dialogue's question is asked.
//!
//! Three sets of dialogues:
//! - `tuning` (`benches/write_quality/tuning.json`): the dialogues the write path's rules
//!   and prompts were developed against. Its figures are in-sample.
//! - `seen` (`benches/write_quality/seen.json`): written apart from the prompts and rules,
//!   but its failures were read and later tuning dialogues copy its scenarios: a second
//!   tuning set.
//! - `frozen-2` (`benches/write_quality/frozen-2.json`): written in one sitting by a writer who
//!   had read neither the code, the prompts nor the other sets, committed before the changes
//!   it measures, and measured only when named (`--set frozen-2`): the figures to quote. Its
//!   sha256 is in docs/write.md.
//!
//! Each dialogue lists `remember` (claims that must be stored), `true` (claims that may be)
//! and `false` (claims no live fact and no summary may state, each with why it is false:
//! `old`, `third_party`, `hypothetical`, `negated`, `suggestion`, `invented`), and the
//! people it names besides the user (`others`). The judge (`write_quality/judge.rs`) reads
//! sentence by sentence, by whole words, with the subject and with denial and supposition
//! ("not", "no longer", "if", "would") taken into account. Reported per set:
//! - `precision`: true facts / all stored facts (a fact no claim recognises counts against
//!   it), and `precision_judged`: true / (true + false);
//! - `recall`: `remember` claims stated by a live fact / all of them;
//! - `corrections` (kinds `correction` and `change`) and `retractions`: dialogues of that
//!   kind with every `remember` claim stated and no `old` claim stated by a live fact;
//! - `no_ops`: question and chit-chat dialogues that stored nothing;
//! - `false_by_why`: live facts stating a `false` claim, by why (`third_party` is someone
//!   else's fact given to the user, `hypothetical` and `negated` what the user supposed or
//!   denied);
//! - `summaries_false`: summaries with a sentence stating a `false` claim, by why (an `old`
//!   one is a contradiction: the summary still says what was corrected);
//! - `marks`: each older fact the write path marked as contradicted by a later one, with
//!   both facts' verdicts and their cosine; `marks_of_old` (the earlier states an old value:
//!   right) and `marks_of_true` (it is a true fact: wrong), and `old_live_unmarked`, live
//!   facts stating an old value that no mark names as superseded;
//! - `fallbacks`: passes whose reconciliation answer could not be used, and `repairs`: the
//!   parts of answers mended or asked again (listed under `repaired`);
//! - the write path's time per turn (LLM and engine), median;
//! - `injection`: for each dialogue with an `ask`, the best [`INJECTED`] memories of its
//!   conversation, as a prompt with little room would get them: how many asks got a fact
//!   (`role: memory`) holding the `answer` words, and, reported apart, how many got such a
//!   turn;
//! - `asks` (with `--ask`): each `ask` answered through the chat path and, beside it, with
//!   the whole dialogue in the prompt and no memory, judged right, both, stale or none
//!   (`write_quality/ask.rs`), counted for corrections, retractions and the rest.
//!
//! `cargo bench --bench write_quality [-- --json] [-- --set tuning|seen|frozen-2] [-- --ask]
//! [-- --distractors N] [-- --conflicts off] [-- --conflict-similarity X] [-- --only NAME,NAME]
//! [-- --kinds K,K] [-- --grounding on|off|both] [-- --rules-off RULE,RULE]
//! [-- --llm-cache DIR] [-- --verbose]`. `--rules-off` leaves out rules of the write path by
//! their names in `write_rules_off` (docs/write.md); `--llm-cache` records the local LLM's
//! answers in DIR and replays them when the same call comes again (`write_quality/replay.rs`),
//! so that runs differing in one rule pay only for the calls it changes. Needs `scripts/setup llm` (the local LLM); a few seconds per turn on 2
//! cores, about ten minutes per set, as long again for the asks.

#[path = "write_quality/ask.rs"]
mod ask;
#[path = "write_quality/judge.rs"]
mod judge;
#[path = "write_quality/replay.rs"]
mod replay;
mod support;

use judge::{Claim, People, Verdict};
use mnemo_core::{Config, ConversationId, MemoryRecord, Role, WriteRule, LOCAL_LLM_ALIAS};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Dialogue {
    name: String,
    kind: String,
    #[serde(default)]
    user_names: Vec<String>,
    #[serde(default)]
    others: Vec<String>,
    turns: Vec<Turn>,
    #[serde(default)]
    remember: Vec<Claim>,
    /// True claims the dialogue does not require (a paraphrase, a detail).
    #[serde(default, rename = "true")]
    also_true: Vec<Claim>,
    #[serde(default, rename = "false")]
    falsehoods: Vec<Claim>,
    /// A question about the dialogue, asked afterwards of its memories.
    #[serde(default)]
    ask: Option<String>,
    /// Words a memory answering `ask` holds (whole words, alternatives "a|b").
    #[serde(default)]
    answer: Vec<String>,
    /// Claims an answer to `ask` that holds the current truth states (any one).
    #[serde(default)]
    current: Vec<Claim>,
    /// Claims an answer to `ask` that gives an old or wrong value states (any one).
    #[serde(default)]
    stale: Vec<Claim>,
}

impl Dialogue {
    /// The claims a true fact may state: what must be remembered, and what else is true.
    fn truths(&self) -> Vec<&Claim> {
        self.remember.iter().chain(&self.also_true).collect()
    }

    fn people(&self) -> People {
        People {
            user_names: self.user_names.clone(),
            others: self.others.clone(),
        }
    }

    /// What a right and a stale answer to `ask` state: the dialogue's own `current` and
    /// `stale` claims, or, where it has none, its `answer` words (about anyone) and its
    /// `false` claims that are old values.
    fn ask_claims(&self) -> (Vec<Claim>, Vec<Claim>) {
        let current = if self.current.is_empty() {
            vec![Claim {
                about: "any".into(),
                says: self.answer.clone(),
                negated: false,
                why: None,
            }]
        } else {
            self.current.clone()
        };
        let stale = if self.stale.is_empty() {
            self.falsehoods
                .iter()
                .filter(|c| c.why.as_deref() == Some("old"))
                .cloned()
                .collect()
        } else {
            self.stale.clone()
        };
        (current, stale)
    }
}

/// How many memories the injection probe takes per ask: a prompt with little room.
const INJECTED: usize = 2;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    user: String,
    assistant: String,
}

/// What one dialogue left behind, judged.
#[derive(Default)]
struct Outcome {
    true_facts: usize,
    unjudged: usize,
    /// Why each false live fact is false.
    false_facts: Vec<String>,
    recalled: usize,
    passed: Option<bool>,
    /// Why each false claim the summary states is false.
    summary_false: Vec<String>,
    fallbacks: usize,
    /// What the pass mended in reconciliation answers, and why it fell back.
    repairs: Vec<Value>,
    turn_ms: Vec<f64>,
    /// Extracted facts grounding refused, with why.
    refused: Vec<Value>,
    /// Older facts the write path marked as contradicted by a later one: (the earlier
    /// fact's text, the later fact's id, their cosine).
    marked: Vec<(String, mnemo_core::MemoryId, f32)>,
    /// Live facts stating an old value that no mark names as superseded.
    old_unmarked: usize,
    detail: Value,
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    // The engine's own account of each pass (what was replaced, refused, repaired), on
    // stderr, when RUST_LOG asks for it.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let verbose = args.iter().any(|a| a == "--verbose");
    let only: Option<Vec<String>> =
        arg(&args, "--only").map(|names| names.split(',').map(str::to_owned).collect());
    let kinds: Option<Vec<String>> =
        arg(&args, "--kinds").map(|k| k.split(',').map(str::to_owned).collect());
    // The frozen set is measured only when named.
    let sets: Vec<String> = match arg(&args, "--set") {
        Some(set) => vec![set],
        None => vec!["tuning".into(), "seen".into()],
    };
    let stages = Stages {
        ask: args.iter().any(|a| a == "--ask"),
        distractors: arg(&args, "--distractors").map_or(0, |n| {
            n.parse()
                .unwrap_or_else(|e| panic!("--distractors {n}: {e}"))
        }),
        conflict_similarity: arg(&args, "--conflict-similarity").map(|x| {
            x.parse()
                .unwrap_or_else(|e| panic!("--conflict-similarity {x}: {e}"))
        }),
        conflict_marking: arg(&args, "--conflicts").as_deref() != Some("off"),
        rules_off: arg(&args, "--rules-off").map_or_else(Vec::new, |names| {
            names
                .split(',')
                .map(|name| {
                    serde_json::from_value(json!(name)).unwrap_or_else(|_| {
                        let known: Vec<String> = WriteRule::ALL.iter().map(|r| r.name()).collect();
                        panic!("--rules-off {name}: not a rule ({})", known.join(", "))
                    })
                })
                .collect()
        }),
        llm_cache: arg(&args, "--llm-cache").map(std::path::PathBuf::from),
    };
    let grounding: Vec<bool> = match arg(&args, "--grounding").as_deref() {
        Some("off") => vec![false],
        Some("both") => vec![false, true],
        _ => vec![true],
    };
    let mut loaded = Vec::new();
    for set in &sets {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("benches/write_quality/{set}.json"));
        let dialogues: Vec<Dialogue> = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let dialogues: Vec<Dialogue> = dialogues
            .into_iter()
            .filter(|d| only.as_ref().is_none_or(|o| o.contains(&d.name)))
            .filter(|d| kinds.as_ref().is_none_or(|k| k.contains(&d.kind)))
            .collect();
        loaded.push((set.clone(), dialogues));
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let report = runtime.block_on(run(&loaded, &grounding, &stages, verbose));
    if json_out {
        println!("{report}");
    } else {
        println!("{report:#}");
        eprintln!("{}", table(&report));
    }
}

/// What runs besides the write passes and the judging of what they left.
struct Stages {
    /// Each `ask` answered through the chat path and with the whole dialogue.
    ask: bool,
    /// Unrelated memories written into each conversation before its dialogue.
    distractors: usize,
    /// The cosine from which a later fact may contest an earlier one, when not the
    /// configured one.
    conflict_similarity: Option<f32>,
    /// Whether the write path marks conflicts at all.
    conflict_marking: bool,
    /// The write path's rules left out.
    rules_off: Vec<WriteRule>,
    /// Where the local LLM's answers are recorded and replayed from (`replay.rs`).
    llm_cache: Option<std::path::PathBuf>,
}

async fn run(
    sets: &[(String, Vec<Dialogue>)],
    modes: &[bool],
    stages: &Stages,
    verbose: bool,
) -> Value {
    let (llm, base) = support::local_llm().await;
    let replay = match &stages.llm_cache {
        Some(dir) => Some(replay::Replay::start(llm.base_url(), dir.clone()).await),
        None => None,
    };
    let llm_url = replay
        .as_ref()
        .map_or(llm.base_url(), |r| r.base_url())
        .to_owned();
    let mut report = json!({
        "llm": LOCAL_LLM_ALIAS,
        "distractors": stages.distractors,
        "rules_off": stages.rules_off,
    });
    let pool = if stages.distractors > 0 {
        ask::distractor_pool()
    } else {
        Vec::new()
    };
    for (set, dialogues) in sets {
        for &grounding in modes {
            let mode = if grounding {
                "grounding_on"
            } else {
                "grounding_off"
            };
            let dir = tempfile::tempdir().unwrap();
            let config = Config {
                memory_path: dir.path().to_owned(),
                openai_base_url: Some(llm_url.clone()),
                llm_model: LOCAL_LLM_ALIAS.to_owned(),
                start_watcher: false,
                fact_grounding: grounding,
                conflict_marking: stages.conflict_marking,
                write_rules_off: stages.rules_off.clone(),
                conflict_similarity: stages
                    .conflict_similarity
                    .unwrap_or(base.conflict_similarity),
                ..base.clone()
            };
            let client = MemoryClient::open(config.clone(), OpenOptions::default())
                .await
                .expect("a client");
            let mut outcomes = Vec::new();
            for (i, dialogue) in dialogues.iter().enumerate() {
                if stages.distractors > 0 {
                    let conversation = ConversationId::new(&dialogue.name).expect("an id");
                    ask::add_distractors(&client, &conversation, &pool, i, stages.distractors)
                        .await;
                }
                let outcome = play(&client, dialogue).await;
                eprintln!(
                    "{set:<7} {mode:<14} {:<28} {:<13} true {} false {} unjudged {}  recalled {}/{}{}",
                    dialogue.name,
                    dialogue.kind,
                    outcome.true_facts,
                    outcome.false_facts.len(),
                    outcome.unjudged,
                    outcome.recalled,
                    dialogue.remember.len(),
                    match outcome.passed {
                        Some(true) => "  pass",
                        Some(false) => "  FAIL",
                        None => "",
                    }
                );
                outcomes.push((dialogue, outcome));
            }
            let key = format!("{set}/{mode}");
            report[&key] = summarise(&outcomes, verbose);
            if grounding {
                drop(client);
                let client = MemoryClient::open(config.clone(), OpenOptions::default())
                    .await
                    .expect("the played store opens again");
                report[&key]["injection"] = probe_injection(&client, dialogues).await;
                if stages.ask {
                    report[&key]["asks"] = ask::ask_all(&client, dialogues).await;
                }
            }
        }
    }
    if let Some(replay) = replay {
        let (replayed, asked) = replay.counts();
        report["llm_calls"] = json!({"replayed": replayed, "asked": asked});
    }
    llm.stop().await;
    report
}

/// Searches each dialogue's `ask` in the played store, reopened from its files.
async fn probe_injection(client: &MemoryClient, dialogues: &[Dialogue]) -> Value {
    let (mut asks, mut by_fact, mut by_turn) = (0, 0, 0);
    let mut injected = Vec::new();
    for dialogue in dialogues {
        let Some(ask) = &dialogue.ask else { continue };
        let conversation = ConversationId::new(&dialogue.name).expect("an id");
        let request = SearchRequest::new(ask.as_str(), conversation).top_k(INJECTED);
        let hits = client.search(request).await.expect("a search");
        asks += 1;
        let answers = |role: Role| {
            hits.iter()
                .any(|h| h.role == role && judge::holds_words(&h.content, &dialogue.answer))
        };
        by_fact += usize::from(answers(Role::Memory));
        by_turn += usize::from(answers(Role::User) || answers(Role::Assistant));
        injected.push(json!({
            "ask": ask,
            "hits": hits.iter().map(|h| json!({"role": h.role.as_str(), "content": h.content})).collect::<Vec<_>>(),
        }));
    }
    json!({
        "asks": asks,
        "answered_by_a_fact": by_fact,
        "answered_by_a_turn": by_turn,
        "injected": injected,
    })
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
        outcome.fallbacks += usize::from(report.fallback.is_some());
        outcome
            .repairs
            .extend(report.repairs.iter().map(|r| json!(r)));
        if let Some(why) = &report.fallback {
            outcome.repairs.push(json!({"fallback": why}));
        }
        outcome.refused.extend(
            report
                .ungrounded
                .iter()
                .map(|(fact, why)| json!({"fact": fact, "why": why})),
        );
        outcome.marked.extend(
            report
                .contested
                .iter()
                .map(|c| (c.earlier_text.clone(), c.later, c.similarity)),
        );
    }
    let live: Vec<MemoryRecord> = client
        .list(Some(conversation.clone()))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.record.role == Role::Memory)
        .map(|m| m.record)
        .collect();
    let facts: Vec<String> = live.iter().map(|r| r.content.clone()).collect();
    // No summary yet is an empty one; any other failure stops the bench rather than
    // passing for "no false summary".
    let summary = match client
        .as_caller(std::sync::Arc::new(mnemo_engine::Unrestricted))
        .summary(&conversation)
        .await
    {
        Ok(summary) => summary,
        Err(mnemo_engine::EngineError::NotFound(_)) => String::new(),
        Err(e) => panic!("{}: the summary: {e}", dialogue.name),
    };
    judge_dialogue(dialogue, &facts, &summary, &mut outcome);
    judge_marks(dialogue, &live, &mut outcome);
    outcome
}

/// Judges the conflict marks: each mark made (is its earlier fact an old value, or a true
/// fact?), and the live facts stating an old value that no live mark names as superseded.
fn judge_marks(dialogue: &Dialogue, live: &[MemoryRecord], outcome: &mut Outcome) {
    let people = dialogue.people();
    let truths = dialogue.truths();
    let verdict_of = |text: &str| match judge::verdict(text, &truths, &dialogue.falsehoods, &people)
    {
        Verdict::True => "true".to_owned(),
        Verdict::False(i) => why(&dialogue.falsehoods[i]),
        Verdict::Unjudged => "unjudged".to_owned(),
    };
    let by_id: std::collections::HashMap<mnemo_core::MemoryId, &MemoryRecord> =
        live.iter().map(|r| (r.id, r)).collect();
    let marks: Vec<Value> = outcome
        .marked
        .iter()
        .map(|(earlier, later, similarity)| {
            let later_text = by_id.get(later).map(|r| r.content.as_str()).unwrap_or("");
            json!({
                "earlier": earlier, "earlier_verdict": verdict_of(earlier),
                "later": later_text, "later_verdict": if later_text.is_empty() { "gone".to_owned() } else { verdict_of(later_text) },
                "similarity": (*similarity * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    outcome.old_unmarked = live
        .iter()
        .filter(|r| verdict_of(&r.content) == "old")
        .filter(|r| !r.conflicts_with.is_some_and(|l| by_id.contains_key(&l)))
        .count();
    outcome.detail["marks"] = json!(marks);
}

fn why(claim: &Claim) -> String {
    claim.why.clone().unwrap_or_else(|| "unspecified".into())
}

fn judge_dialogue(dialogue: &Dialogue, facts: &[String], summary: &str, outcome: &mut Outcome) {
    let people = dialogue.people();
    let truths = dialogue.truths();
    let mut verdicts = Vec::new();
    let mut old_stated = false;
    for fact in facts {
        let verdict = match judge::verdict(fact, &truths, &dialogue.falsehoods, &people) {
            Verdict::True => {
                outcome.true_facts += 1;
                json!("true")
            }
            Verdict::False(i) => {
                let claim = &dialogue.falsehoods[i];
                old_stated |= claim.why.as_deref() == Some("old");
                outcome.false_facts.push(why(claim));
                json!({"false": claim.says, "why": why(claim)})
            }
            Verdict::Unjudged => {
                outcome.unjudged += 1;
                json!("unjudged")
            }
        };
        verdicts.push(json!({"fact": fact, "verdict": verdict}));
    }
    let missed: Vec<&Vec<String>> = dialogue
        .remember
        .iter()
        .filter(|c| !facts.iter().any(|f| judge::states(f, c, &people)))
        .map(|c| &c.says)
        .collect();
    outcome.recalled = dialogue.remember.len() - missed.len();
    outcome.passed = match dialogue.kind.as_str() {
        "correction" | "change" | "retraction" => Some(missed.is_empty() && !old_stated),
        "chitchat" | "question" => Some(facts.is_empty()),
        _ => None,
    };
    let mut summary_says = Vec::new();
    for claim in &dialogue.falsehoods {
        if judge::states(summary, claim, &people) {
            outcome.summary_false.push(why(claim));
            summary_says.push(json!({"false": claim.says, "why": why(claim)}));
        }
    }
    outcome.detail = json!({
        "name": dialogue.name,
        "facts": verdicts,
        "missed": missed,
        "summary": summary,
        "summary_false": summary_says,
    });
}

fn count_by(whys: impl Iterator<Item = String>) -> Value {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for why in whys {
        *counts.entry(why).or_default() += 1;
    }
    json!(counts)
}

fn summarise(outcomes: &[(&Dialogue, Outcome)], verbose: bool) -> Value {
    let sum = |f: fn(&Outcome) -> usize| outcomes.iter().map(|(_, o)| f(o)).sum::<usize>();
    let (true_facts, false_facts, unjudged) = (
        sum(|o| o.true_facts),
        sum(|o| o.false_facts.len()),
        sum(|o| o.unjudged),
    );
    let expected: usize = outcomes.iter().map(|(d, _)| d.remember.len()).sum();
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
    let not_true: Vec<Value> = outcomes
        .iter()
        .flat_map(|(d, o)| {
            o.detail["facts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["verdict"] != "true")
                .map(|f| json!({"dialogue": d.name, "fact": f["fact"], "verdict": f["verdict"]}))
        })
        .collect();
    let missed: Vec<Value> = outcomes
        .iter()
        .filter(|(_, o)| o.detail["missed"].as_array().is_some_and(|m| !m.is_empty()))
        .map(|(d, o)| json!({"dialogue": d.name, "missed": o.detail["missed"]}))
        .collect();
    let summaries: Vec<Value> = outcomes
        .iter()
        .filter(|(_, o)| !o.summary_false.is_empty())
        .map(|(d, o)| json!({"dialogue": d.name, "summary": o.detail["summary"], "false": o.detail["summary_false"]}))
        .collect();
    let mut report = json!({
        "dialogues": outcomes.len(),
        "turns": turn_ms.len(),
        "facts_stored": true_facts + false_facts + unjudged,
        "true": true_facts, "false": false_facts, "unjudged": unjudged,
        "precision": rate(true_facts, true_facts + false_facts + unjudged),
        "precision_judged": rate(true_facts, true_facts + false_facts),
        "recall": rate(outcomes.iter().map(|(_, o)| o.recalled).sum(), expected),
        "corrections": passing(&["correction", "change"]),
        "retractions": passing(&["retraction"]),
        "no_ops": passing(&["chitchat", "question"]),
        "false_by_why": count_by(outcomes.iter().flat_map(|(_, o)| o.false_facts.clone())),
        "summaries_false": outcomes.iter().filter(|(_, o)| !o.summary_false.is_empty()).count(),
        "summary_false_by_why": count_by(outcomes.iter().flat_map(|(_, o)| o.summary_false.clone())),
        "fallbacks": sum(|o| o.fallbacks),
        "marks": outcomes.iter().flat_map(|(d, o)| o.detail["marks"].as_array().cloned().unwrap_or_default().into_iter().map(move |mut m| { m["dialogue"] = json!(d.name); m })).collect::<Vec<_>>(),
        "marks_of_old": outcomes.iter().map(|(_, o)| o.detail["marks"].as_array().map_or(0, |m| m.iter().filter(|x| x["earlier_verdict"] == "old").count())).sum::<usize>(),
        "marks_of_true": outcomes.iter().map(|(_, o)| o.detail["marks"].as_array().map_or(0, |m| m.iter().filter(|x| x["earlier_verdict"] == "true").count())).sum::<usize>(),
        "old_live_unmarked": sum(|o| o.old_unmarked),
        "repaired": outcomes.iter().filter(|(_, o)| !o.repairs.is_empty()).map(|(d, o)| json!({"dialogue": d.name, "repairs": o.repairs})).collect::<Vec<_>>(),
        "turn_ms_p50": (median * 10.0).round() / 10.0,
        "not_true": not_true,
        "missed": missed,
        "false_summaries": summaries,
        "refused_by_grounding": outcomes.iter().flat_map(|(_, o)| o.refused.clone()).collect::<Vec<_>>(),
    });
    if verbose {
        report["dialogue_details"] = outcomes.iter().map(|(_, o)| o.detail.clone()).collect();
    }
    report
}

/// The headline figures of every set and mode run, side by side.
fn table(report: &Value) -> String {
    let runs: Vec<(&String, &Value)> = report
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.contains('/'))
        .collect();
    let mut out = format!("{:<36}", "");
    for (key, _) in &runs {
        out.push_str(&format!("{key:>26}"));
    }
    out.push('\n');
    type Cell = fn(&Value) -> String;
    let rows: [(&str, Cell); 18] = [
        ("dialogues / turns", |r| {
            format!("{} / {}", r["dialogues"], r["turns"])
        }),
        ("facts stored (true/false/unjudged)", |r| {
            format!(
                "{} ({}/{}/{})",
                r["facts_stored"], r["true"], r["false"], r["unjudged"]
            )
        }),
        ("precision", |r| r["precision"].to_string()),
        ("precision of judged facts", |r| {
            r["precision_judged"].to_string()
        }),
        ("recall", |r| r["recall"].to_string()),
        ("corrections", |r| {
            format!("{}/{}", r["corrections"]["passed"], r["corrections"]["of"])
        }),
        ("retractions", |r| {
            format!("{}/{}", r["retractions"]["passed"], r["retractions"]["of"])
        }),
        ("no-ops", |r| {
            format!("{}/{}", r["no_ops"]["passed"], r["no_ops"]["of"])
        }),
        ("false facts by why", |r| r["false_by_why"].to_string()),
        ("marks: of old / of true / old unmarked", |r| {
            format!(
                "{} / {} / {}",
                r["marks_of_old"], r["marks_of_true"], r["old_live_unmarked"]
            )
        }),
        ("false summaries by why", |r| {
            r["summary_false_by_why"].to_string()
        }),
        ("asks answered by a fact / turn", |r| {
            format!(
                "{}/{} / {}",
                r["injection"]["answered_by_a_fact"],
                r["injection"]["asks"],
                r["injection"]["answered_by_a_turn"]
            )
        }),
        ("asks, memory: right/both/stale/none", |r| {
            asked(&r["asks"]["counts"]["memory"]["all"])
        }),
        ("  corrections", |r| {
            asked(&r["asks"]["counts"]["memory"]["corrections"])
        }),
        ("  retractions", |r| {
            asked(&r["asks"]["counts"]["memory"]["retractions"])
        }),
        ("asks, whole dialogue", |r| {
            asked(&r["asks"]["counts"]["with_dialogue"]["all"])
        }),
        ("  corrections", |r| {
            asked(&r["asks"]["counts"]["with_dialogue"]["corrections"])
        }),
        ("  retractions", |r| {
            asked(&r["asks"]["counts"]["with_dialogue"]["retractions"])
        }),
    ];
    for (label, cell) in rows {
        out.push_str(&format!("{label:<36}"));
        for (_, run) in &runs {
            out.push_str(&format!("{:>26}", cell(run)));
        }
        out.push('\n');
    }
    out
}

/// One ask count as "right/both/stale/none of N".
fn asked(cell: &Value) -> String {
    if cell.is_null() {
        return "-".into();
    }
    let n = |key: &str| cell[key].as_u64().unwrap_or(0);
    format!(
        "{}/{}/{}/{} of {}",
        n("right"),
        n("both"),
        n("stale"),
        n("none"),
        n("of")
    )
}
