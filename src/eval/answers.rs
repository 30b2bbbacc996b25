//! `mnemo eval locomo --answer`: does the memory make answers right?
//!
//! Every question goes through the chat path as an agent's request would (memories and the
//! rolling summary injected, governance applied) to the configured upstream, or the local
//! LLM, with `memory_learn: false` so that asking does not itself write the conversation's
//! memory. Four setups answer the same questions in the same run:
//!
//! - `none`: the question alone, no memory;
//! - `recent`: the conversation's last turns that fit the model's window (what a plain chat
//!   client would send), no memory;
//! - `mnemo`: the question alone, with mnemo's defaults injecting what it retrieves;
//! - `full`: the whole conversation, where it fits the window (otherwise skipped and said).
//!
//! Each answer is scored three ways ([`crate::eval::answer_scoring`]): LoCoMo's token F1, an LLM
//! judge (lenient, and a strict variant that refuses vague answers), and, for `mnemo`, whether
//! the question's evidence turns were among the memories injected. Category 5 (adversarial:
//! the right answer is that the conversation does not say) is reported apart. Tokens sent,
//! tokens injected and the time of each part of an answer are reported per setup.
//!
//! A rate is over the answers it could score, and says how many: a verdict the judge gave
//! in no form [`parse_judge`] reads is neither right nor wrong, and a question without
//! evidence turns (category 5, or evidence naming no turn of its conversation) has nothing
//! to inject. Both are left out of their rate and counted apart (`judge_unparsed`,
//! `evidence_not_applicable`), so that a rate over few answers cannot pass for one over all.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use anyhow::{anyhow, Context};
use mnemo_core::MemoryId;
use mnemo_engine::{ChatReply, MemoryClient};
use serde::Serialize;
use serde_json::{json, Value};

use crate::commands::{progress_bar, Failure};
use crate::eval::answer_scoring::{
    judge_messages, parse_judge, prompt_hash, score_f1, stratified_sample, ANSWER_PROMPT,
    JUDGE_PROMPT, STRICT_JUDGE_PROMPT,
};
use crate::eval::locomo::{Question, Sample};
use crate::eval::percentile;

/// Tokens an answer may take.
const ANSWER_TOKENS: u64 = 64;

/// Tokens a judge's verdict may take: its reason comes before its label.
const JUDGE_TOKENS: u64 = 160;

/// The conversation the setups without memory (and the judges) ask from: nothing is ever
/// stored in it.
const NO_MEMORY: &str = "locomo-no-memory";

/// What answers a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    /// The question alone.
    None,
    /// The conversation's last turns that fit the window.
    Recent,
    /// The question, with mnemo's memory.
    Mnemo,
    /// The whole conversation, where it fits.
    Full,
}

/// The settings of one run.
pub struct AnswerRun {
    pub setups: Vec<Setup>,
    /// Questions to ask, stratified by category; all when unset.
    pub questions: Option<usize>,
    pub seed: u64,
    /// Ask the LLM judges too.
    pub judge: bool,
}

/// One question answered by one setup.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerLine {
    pub conversation: String,
    pub question: String,
    pub category: u8,
    pub gold: String,
    pub setup: Setup,
    pub answer: String,
    pub f1: f64,
    /// The lenient judge's verdict: `None` when not judged, or when its verdict could not be
    /// read (`judge_unparsed`).
    pub judged: Option<bool>,
    /// The lenient judge answered, but in no form its verdict could be read from.
    pub judge_unparsed: bool,
    pub judged_strict: Option<bool>,
    pub judge_strict_unparsed: bool,
    /// `mnemo` only: whether every evidence turn was among the memories injected; `None`
    /// for a question without evidence turns too (`evidence_not_applicable`).
    pub evidence_injected: Option<bool>,
    /// `mnemo` only: the question has no evidence turns, so there was nothing to inject.
    pub evidence_not_applicable: bool,
    pub tokens_sent: u64,
    pub tokens_injected: u64,
    pub retrieval_ms: f64,
    pub governance_ms: f64,
    pub upstream_ms: f64,
}

/// A setup's scores over some questions. Each rate is over its own count of answers, given
/// beside it: the questions less those it could not score.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SetupScores {
    pub questions: usize,
    pub f1: f64,
    /// Share of `judge_verdicts` that were CORRECT; `None` when there is none.
    pub judge: Option<f64>,
    /// The lenient judge's verdicts read: what `judge` is over.
    pub judge_verdicts: usize,
    /// Answers the lenient judge graded in no form its verdict could be read from; left out
    /// of `judge`.
    pub judge_unparsed: usize,
    pub judge_strict: Option<f64>,
    pub judge_strict_verdicts: usize,
    pub judge_strict_unparsed: usize,
    /// Share of `evidence_checked` whose every evidence turn was injected.
    pub evidence_injected: Option<f64>,
    /// Questions with evidence turns whose injection was checked: what `evidence_injected`
    /// is over.
    pub evidence_checked: usize,
    /// Questions without evidence turns (nothing to inject); left out of
    /// `evidence_injected`.
    pub evidence_not_applicable: usize,
}

/// A setup's results: scores for categories 1-4 together, each category, and category 5;
/// its costs.
#[derive(Debug, Clone, Serialize)]
pub struct SetupReport {
    pub setup: Setup,
    pub categories_1_4: SetupScores,
    pub by_category: BTreeMap<u8, SetupScores>,
    pub adversarial: SetupScores,
    pub skipped: usize,
    pub tokens_sent_mean: f64,
    pub tokens_sent_p50: f64,
    pub tokens_sent_p95: f64,
    pub tokens_injected_mean: f64,
    pub retrieval_ms_p50: f64,
    pub governance_ms_p50: f64,
    pub upstream_ms_p50: f64,
}

/// What a run measured, and what it ran with.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerReport {
    pub model: String,
    pub window: u64,
    pub seed: u64,
    pub questions: usize,
    pub prompts: BTreeMap<&'static str, String>,
    pub setups: Vec<SetupReport>,
}

/// Asks the chosen questions of `samples` in every setup of `run`; returns the report and
/// one line per answer.
pub async fn run_answers(
    client: &MemoryClient,
    samples: &[Sample],
    run: &AnswerRun,
    model: &str,
) -> Result<(AnswerReport, Vec<AnswerLine>), Failure> {
    let window = client.context_window(model);
    let chosen = choose(samples, run);
    let bar = progress_bar((chosen.len() * run.setups.len()) as u64, "answers");
    let mut lines = Vec::new();
    let mut skipped: BTreeMap<Setup, usize> = BTreeMap::new();
    for (sample, question) in &chosen {
        for &setup in &run.setups {
            let asked = Asked {
                client,
                sample,
                question,
                model,
                window,
            };
            match asked.answer(setup, run.judge).await? {
                Some(line) => lines.push(line),
                None => *skipped.entry(setup).or_default() += 1,
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let setups = run
        .setups
        .iter()
        .map(|&setup| setup_report(setup, &lines, skipped.get(&setup).copied().unwrap_or(0)))
        .collect();
    let prompts = BTreeMap::from([
        ("answer", prompt_hash(ANSWER_PROMPT)),
        ("judge", prompt_hash(JUDGE_PROMPT)),
        ("judge_strict", prompt_hash(STRICT_JUDGE_PROMPT)),
    ]);
    let report = AnswerReport {
        model: model.to_owned(),
        window,
        seed: run.seed,
        questions: chosen.len(),
        prompts,
        setups,
    };
    Ok((report, lines))
}

/// The questions asked: all, or a sample stratified by category over every conversation.
fn choose<'a>(samples: &'a [Sample], run: &AnswerRun) -> Vec<(&'a Sample, &'a Question)> {
    let all: Vec<(&Sample, &Question)> = samples
        .iter()
        .flat_map(|s| s.answer_questions.iter().map(move |q| (s, q)))
        .collect();
    let Some(n) = run.questions.filter(|&n| n < all.len()) else {
        return all;
    };
    let mut by_category: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
    for (i, (_, q)) in all.iter().enumerate() {
        by_category.entry(q.category).or_default().push(i);
    }
    let counts = by_category.iter().map(|(c, v)| (*c, v.len())).collect();
    let picks = stratified_sample(&counts, n, run.seed);
    let mut chosen: Vec<usize> = picks
        .iter()
        .flat_map(|(c, picked)| picked.iter().map(|&i| by_category[c][i]))
        .collect();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| all[i]).collect()
}

/// One question, about to be asked.
struct Asked<'a> {
    client: &'a MemoryClient,
    sample: &'a Sample,
    question: &'a Question,
    model: &'a str,
    window: u64,
}

impl Asked<'_> {
    /// The answer of `setup`, scored; `None` when the setup cannot ask it (the whole
    /// conversation does not fit).
    async fn answer(&self, setup: Setup, judge: bool) -> Result<Option<AnswerLine>, Failure> {
        let Some(body) = self.request(setup).await else {
            return Ok(None);
        };
        let sent = body["messages"].as_array().cloned().unwrap_or_default();
        let own_tokens = self.client.count_message_tokens(self.model, &sent).await as u64;
        let started = Instant::now();
        let reply = self.client.chat(body).await?;
        let ChatReply::Answer(answer) = reply else {
            return Err(anyhow!("the upstream streamed an answer that was asked whole").into());
        };
        let total_ms = started.elapsed().as_secs_f64() * 1e3;
        let text = answer.body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let tokens_sent = answer.body["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap_or(answer.context.tokens_after as u64);
        let timings = answer.timings;
        // A question without evidence turns would count as all of them injected: it has
        // none to inject, and is said to be so.
        let evidence_not_applicable = setup == Setup::Mnemo && self.question.evidence.is_empty();
        let evidence_injected = match setup {
            Setup::Mnemo if !evidence_not_applicable => {
                Some(self.evidence_injected(&answer.body["memory_hits"]).await?)
            }
            _ => None,
        };
        // The judges grade facts; category 5's right answer is that there is none, which
        // F1's phrase check scores.
        let judged_here = judge && self.question.category <= 4;
        let (judged, judged_strict) = if judged_here {
            (
                self.judge(JUDGE_PROMPT, &text).await?,
                self.judge(STRICT_JUDGE_PROMPT, &text).await?,
            )
        } else {
            (None, None)
        };
        let upstream_ms = timings.upstream.as_secs_f64() * 1e3;
        Ok(Some(AnswerLine {
            conversation: self.sample.conversation.to_string(),
            question: self.question.text.clone(),
            category: self.question.category,
            gold: self.question.answer.clone(),
            setup,
            f1: score_f1(self.question.category, &text, &self.question.answer),
            answer: text,
            judged,
            judge_unparsed: judged_here && judged.is_none(),
            judged_strict,
            judge_strict_unparsed: judged_here && judged_strict.is_none(),
            evidence_injected,
            evidence_not_applicable,
            tokens_sent,
            tokens_injected: (answer.context.tokens_before as u64).saturating_sub(own_tokens),
            retrieval_ms: timings.retrieval.as_secs_f64() * 1e3,
            governance_ms: timings.governance.as_secs_f64() * 1e3,
            upstream_ms: upstream_ms.min(total_ms),
        }))
    }

    /// The chat request `setup` sends.
    async fn request(&self, setup: Setup) -> Option<Value> {
        let today = self.sample.last_session.format("%-d %B %Y").to_string();
        let system = json!({"role": "system", "content": ANSWER_PROMPT.replace("{today}", &today)});
        let question = json!({"role": "user", "content": self.question.text});
        let history = match setup {
            Setup::None | Setup::Mnemo => Vec::new(),
            Setup::Recent => self.recent_turns(&system, &question).await,
            Setup::Full => {
                let all = self.turn_messages(0);
                if !self.fits(&system, &all, &question).await {
                    return None;
                }
                all
            }
        };
        let mut messages = vec![system];
        messages.extend(history);
        messages.push(question);
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": ANSWER_TOKENS,
            "memory_learn": false,
        });
        // The other setups ask from a conversation with nothing in it: no memory, no
        // summary.
        if setup == Setup::Mnemo {
            body["memory_id"] = json!(self.sample.conversation.as_str());
        } else {
            body["memory_id"] = json!(NO_MEMORY);
            body["memory_top_k"] = json!(0);
        }
        Some(body)
    }

    /// The conversation's turns from `from` on, as chat messages: each with its speaker and
    /// date, the first speaker as the user.
    fn turn_messages(&self, from: usize) -> Vec<Value> {
        self.sample.turns[from..]
            .iter()
            .map(|turn| {
                let role = match turn.role {
                    mnemo_core::Role::User => "user",
                    _ => "assistant",
                };
                let speaker = turn.metadata[mnemo_engine::SPEAKER_FIELD]
                    .as_str()
                    .unwrap_or("someone");
                let when = turn.created_at.format("%-d %B %Y");
                json!({"role": role, "content": format!("[{when}] {speaker}: {}", turn.content)})
            })
            .collect()
    }

    /// The last turns that fit the window beside the prompt, the question and the answer.
    async fn recent_turns(&self, system: &Value, question: &Value) -> Vec<Value> {
        let all = self.turn_messages(0);
        // Halving the search keeps the counting to a few passes over long conversations.
        let (mut lo, mut hi) = (0, all.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.fits(system, &all[mid..], question).await {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        all[lo..].to_vec()
    }

    async fn fits(&self, system: &Value, history: &[Value], question: &Value) -> bool {
        let mut messages = vec![system.clone()];
        messages.extend_from_slice(history);
        messages.push(question.clone());
        let tokens = self
            .client
            .count_message_tokens(self.model, &messages)
            .await as u64;
        // The margin covers the gap between this count and the upstream's own.
        tokens + ANSWER_TOKENS + tokens / 10 < self.window
    }

    /// Whether every evidence turn of the question is among `hits` (a fact counts for the
    /// turn it was drawn from).
    async fn evidence_injected(&self, hits: &Value) -> Result<bool, Failure> {
        let mut found: HashSet<String> = HashSet::new();
        for hit in hits.as_array().map(Vec::as_slice).unwrap_or_default() {
            let Some(id) = hit["id"]
                .as_str()
                .and_then(|id| id.parse::<MemoryId>().ok())
            else {
                continue;
            };
            let Some(memory) = self.client.get(id).await? else {
                continue;
            };
            if let Some(dia) = memory.record.metadata.get("dia_id").and_then(Value::as_str) {
                found.insert(dia.to_owned());
            }
        }
        Ok(self.question.evidence.iter().all(|e| found.contains(e)))
    }

    /// The judge's verdict on `answer` (`None` when it said neither).
    async fn judge(&self, prompt: &str, answer: &str) -> Result<Option<bool>, Failure> {
        let body = json!({
            "model": self.model,
            "messages": judge_messages(prompt, &self.question.text, &self.question.answer, answer),
            "temperature": 0,
            "max_tokens": JUDGE_TOKENS,
            "memory_top_k": 0,
            "memory_learn": false,
            "memory_id": NO_MEMORY,
        });
        let reply = self.client.chat(body).await.context("the judge's call")?;
        let ChatReply::Answer(verdict) = reply else {
            return Ok(None);
        };
        Ok(verdict.body["choices"][0]["message"]["content"]
            .as_str()
            .and_then(parse_judge))
    }
}

fn setup_report(setup: Setup, lines: &[AnswerLine], skipped: usize) -> SetupReport {
    let mine: Vec<&AnswerLine> = lines.iter().filter(|l| l.setup == setup).collect();
    let scores = |keep: &dyn Fn(&AnswerLine) -> bool| {
        scores(mine.iter().copied().filter(|l| keep(l)).collect())
    };
    let by_category = (1..=4)
        .map(|c| (c, scores(&|l: &AnswerLine| l.category == c)))
        .filter(|(_, s)| s.questions > 0)
        .collect();
    let mut sent: Vec<f64> = mine.iter().map(|l| l.tokens_sent as f64).collect();
    sent.sort_by(f64::total_cmp);
    let median = |f: fn(&AnswerLine) -> f64| {
        let mut values: Vec<f64> = mine.iter().map(|l| f(l)).collect();
        values.sort_by(f64::total_cmp);
        percentile(&values, 0.5)
    };
    SetupReport {
        setup,
        categories_1_4: scores(&|l: &AnswerLine| l.category <= 4),
        by_category,
        adversarial: scores(&|l: &AnswerLine| l.category == 5),
        skipped,
        tokens_sent_mean: mean(&sent),
        tokens_sent_p50: percentile(&sent, 0.5),
        tokens_sent_p95: percentile(&sent, 0.95),
        tokens_injected_mean: mean(
            &mine
                .iter()
                .map(|l| l.tokens_injected as f64)
                .collect::<Vec<_>>(),
        ),
        retrieval_ms_p50: median(|l| l.retrieval_ms),
        governance_ms_p50: median(|l| l.governance_ms),
        upstream_ms_p50: median(|l| l.upstream_ms),
    }
}

fn scores(lines: Vec<&AnswerLine>) -> SetupScores {
    // The share of `true` among the values given, and how many were given.
    let share = |values: Vec<Option<bool>>| {
        let given: Vec<bool> = values.into_iter().flatten().collect();
        let rate = (!given.is_empty())
            .then(|| round(given.iter().filter(|&&v| v).count() as f64 / given.len() as f64));
        (rate, given.len())
    };
    let count = |flag: fn(&AnswerLine) -> bool| lines.iter().filter(|l| flag(l)).count();
    let (judge, judge_verdicts) = share(lines.iter().map(|l| l.judged).collect());
    let (judge_strict, judge_strict_verdicts) =
        share(lines.iter().map(|l| l.judged_strict).collect());
    let (evidence_injected, evidence_checked) =
        share(lines.iter().map(|l| l.evidence_injected).collect());
    SetupScores {
        questions: lines.len(),
        f1: round(mean(&lines.iter().map(|l| l.f1).collect::<Vec<_>>())),
        judge,
        judge_verdicts,
        judge_unparsed: count(|l| l.judge_unparsed),
        judge_strict,
        judge_strict_verdicts,
        judge_strict_unparsed: count(|l| l.judge_strict_unparsed),
        evidence_injected,
        evidence_checked,
        evidence_not_applicable: count(|l| l.evidence_not_applicable),
    }
}

/// What the rates of `scores` left out, and so what they are over, said when anything was.
fn left_out(scores: &SetupScores) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, unparsed, verdicts) in [
        ("J 1-4", scores.judge_unparsed, scores.judge_verdicts),
        (
            "J strict",
            scores.judge_strict_unparsed,
            scores.judge_strict_verdicts,
        ),
    ] {
        if unparsed > 0 {
            notes.push(format!(
                "{name}: {unparsed} verdicts unreadable, left out; over {verdicts} verdicts"
            ));
        }
    }
    if scores.evidence_not_applicable > 0 {
        notes.push(format!(
            "evidence: {} questions without evidence turns, left out; over {} questions",
            scores.evidence_not_applicable, scores.evidence_checked
        ));
    }
    notes
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The report as a table: one row per setup.
pub fn print_answer_report(report: &AnswerReport) {
    println!(
        "LoCoMo answers: {} questions, model {} (window {} tokens), seed {}",
        report.questions, report.model, report.window, report.seed
    );
    println!(
        "{:<8}{:>6}{:>8}{:>8}{:>9}{:>10}{:>8}{:>10}{:>10}{:>10}{:>12}",
        "setup",
        "n",
        "F1 1-4",
        "J 1-4",
        "J strict",
        "evidence",
        "F1 adv",
        "tok mean",
        "tok p95",
        "injected",
        "upstream ms"
    );
    let opt = |x: Option<f64>| x.map_or("—".to_owned(), |v| format!("{v:.3}"));
    for s in &report.setups {
        println!(
            "{:<8}{:>6}{:>8.3}{:>8}{:>9}{:>10}{:>8.3}{:>10.0}{:>10.0}{:>10.0}{:>12.0}",
            format!("{:?}", s.setup).to_lowercase(),
            s.categories_1_4.questions,
            s.categories_1_4.f1,
            opt(s.categories_1_4.judge),
            opt(s.categories_1_4.judge_strict),
            opt(s.categories_1_4.evidence_injected),
            s.adversarial.f1,
            s.tokens_sent_mean,
            s.tokens_sent_p95,
            s.tokens_injected_mean,
            s.upstream_ms_p50,
        );
        if s.skipped > 0 {
            println!(
                "        ({} questions skipped: the conversation does not fit)",
                s.skipped
            );
        }
        for note in left_out(&s.categories_1_4) {
            println!("        ({note})");
        }
    }
}
