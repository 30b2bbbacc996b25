//! `mnemo eval`: measuring quality on a benchmark, kept apart from the commands a user
//! runs every day. This file drives LoCoMo's evidence recall through the read path;
//! [`locomo`] reads the data and tallies recall, [`answers`] runs the answer benchmark
//! through the chat path (`--answer`), and [`answer_scoring`] scores those answers.

mod answer_scoring;
mod answers;
mod locomo;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clap::Args;
use mnemo_core::{MemoryRecord, Role};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use serde::Serialize;

use crate::commands::{load_config, print_json, progress_bar, CommandResult, Failure, GlobalArgs};
use crate::eval::answers::{print_answer_report, run_answers, AnswerRun, Setup};
#[derive(Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    benchmark: Benchmark,
}

#[derive(clap::Subcommand)]
enum Benchmark {
    /// Evidence recall on LoCoMo: ingest each conversation's turns, ask every question of
    /// categories 1-4 through `search`, and score the evidence turns found
    Locomo(LocomoArgs),
}

#[derive(Args)]
struct LocomoArgs {
    /// The LoCoMo JSON file (e.g. ../shared/data/locomo/locomo_dev.json)
    #[arg(long)]
    data: PathBuf,
    /// Conversations to use, by position in the file: `0-4`, `2`
    #[arg(long)]
    convs: Option<String>,
    /// Cut-offs to score, comma-separated
    #[arg(short = 'k', long, value_delimiter = ',', default_values_t = [5, 10])]
    k: Vec<usize>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// Also write one JSON line per question (its text, category, evidence and the turns
    /// retrieved, best first) to this file: what an analysis of the misses reads
    #[arg(long, value_name = "FILE")]
    questions_out: Option<PathBuf>,
    /// With --questions-out: also ask each question of the next conversation, which holds
    /// nothing it asks about, and write those hits' scores too (`unrelated_hits`): what a
    /// relevance floor is calibrated against, beside the hits of its own conversation
    #[arg(long, requires = "questions_out")]
    unrelated: bool,
    /// Also store facts drawn from the turns, to measure what facts written at ingest add:
    /// `memories` stores the dataset's observations (facts about each speaker, with the turn
    /// each came from) as facts drawn from their turns, `in-turns` appends them to their
    /// turn's text instead, and `extracted` stores what the write path's extraction (the
    /// configured LLM, or the local one, and grounding) draws from each turn. A fact found
    /// counts as finding its turn
    #[arg(long, value_enum)]
    observations: Option<Observations>,
    /// With `--observations extracted`: a JSON file of the facts extracted so far, per
    /// conversation and turn; read first, written as extraction goes, so a second run (or
    /// one that was stopped) asks the LLM only about turns it has not seen
    #[arg(long, value_name = "FILE")]
    facts_cache: Option<PathBuf>,
    /// Score answers instead of retrieval: ask each question (categories 1-5) through the
    /// chat path of the configured upstream (or the local LLM) in each of `--setups`, and
    /// score them by LoCoMo's F1, an LLM judge and whether the evidence was injected
    #[arg(long)]
    answer: bool,
    /// With --answer: how many questions, stratified by category [default: all]
    #[arg(long, value_name = "N")]
    questions: Option<usize>,
    /// With --answer --questions: the sample's seed
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// With --answer: the setups that answer, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Setup::None, Setup::Recent, Setup::Mnemo, Setup::Full])]
    setups: Vec<Setup>,
    /// With --answer: skip the LLM judges (F1 and evidence only)
    #[arg(long)]
    no_judge: bool,
    /// With --answer: also write one JSON line per answer to this file
    #[arg(long, value_name = "FILE")]
    answers_out: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Observations {
    Memories,
    InTurns,
    Extracted,
}

/// Runs a benchmark. Without `--memory-path` it works in a temporary store, never in the
/// configured one; with it, conversations already ingested there are reused.
pub async fn eval(global: &GlobalArgs, args: EvalArgs) -> CommandResult {
    let Benchmark::Locomo(args) = args.benchmark;
    let text = std::fs::read_to_string(&args.data)
        .with_context(|| format!("cannot read {}", args.data.display()))
        .map_err(Failure::invalid)?;
    let mut samples = locomo::parse(&text)
        .with_context(|| format!("{} is not LoCoMo data", args.data.display()))
        .map_err(Failure::invalid)?;
    if let Some(range) = &args.convs {
        let (from, to) = parse_range(range, samples.len()).map_err(Failure::invalid)?;
        samples = samples.drain(from..=to).collect();
    }
    let ks: Vec<usize> = {
        let mut ks = args.k.clone();
        ks.sort_unstable();
        ks.dedup();
        ks.retain(|&k| k > 0);
        ks
    };
    let Some(&max_k) = ks.last() else {
        return Err(Failure::invalid(anyhow!(
            "-k needs at least one cut-off above 0"
        )));
    };

    let scratch = tempfile::tempdir().context("cannot create a temporary store")?;
    let mut config = load_config(global)?;
    config.memory_path = global
        .memory_path
        .clone()
        .unwrap_or_else(|| scratch.path().join("store"));
    config.start_watcher = false;
    config.enable_git_versioning = false;
    let extracting = args.observations == Some(Observations::Extracted);
    let (local_llm, _) =
        crate::serve::start_upstream(&mut config, extracting || args.answer).await?;
    let model = config.llm_model.clone();
    let client = MemoryClient::open(config, OpenOptions::default()).await?;

    let ingest_started = std::time::Instant::now();
    let mut turns = 0;
    let mut cache = match (&args.facts_cache, extracting) {
        (Some(path), true) => FactsCache::load(path)?,
        _ => FactsCache::default(),
    };
    for sample in &samples {
        let observations = match args.observations {
            Some(Observations::Extracted) => {
                let facts = extract_facts(&client, sample, &mut cache, args.facts_cache.as_deref());
                Some(Observations::Memories).zip(Some(facts.await?))
            }
            Some(mode) => Some((mode, sample.observations.clone())),
            None => None,
        };
        turns += ingest(&client, sample, observations).await?;
    }
    // A store measured again is opened with its vocabulary still to build.
    client.vocabulary_built().await;
    let ingest_s = ingest_started.elapsed().as_secs_f64();
    if args.answer {
        let answered = answer(&client, &samples, &args, &model).await;
        if let Some(llm) = local_llm {
            llm.stop().await;
        }
        return answered;
    }
    if let Some(llm) = local_llm {
        llm.stop().await;
    }

    let mut overall = locomo::Tally::default();
    let mut by_category: BTreeMap<u8, locomo::Tally> = BTreeMap::new();
    let mut by_conversation: BTreeMap<String, locomo::Tally> = BTreeMap::new();
    let mut latencies = Vec::new();
    let questions: usize = samples.iter().map(|s| s.questions.len()).sum();
    let bar = progress_bar(questions as u64, "questions");
    let mut question_lines = String::new();
    for (position, sample) in samples.iter().enumerate() {
        let unrelated = &samples[(position + 1) % samples.len()].conversation;
        for question in &sample.questions {
            let request = SearchRequest {
                now: Some(sample.last_session),
                ..SearchRequest::new(question.text.clone(), sample.conversation.clone())
                    .top_k(max_k)
            };
            let started = std::time::Instant::now();
            let hits = client.search(request).await?;
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
            // A fact stands for its turn; a turn found twice counts once, where first found.
            let mut retrieved: Vec<String> = Vec::new();
            for hit in &hits {
                if let Some(id) = hit.metadata.get("dia_id").and_then(|v| v.as_str()) {
                    if !retrieved.iter().any(|r| r == id) {
                        retrieved.push(id.to_owned());
                    }
                }
            }
            if args.questions_out.is_some() {
                let unrelated_hits = if args.unrelated && unrelated != &sample.conversation {
                    let request = SearchRequest {
                        now: Some(sample.last_session),
                        ..SearchRequest::new(question.text.clone(), unrelated.clone()).top_k(max_k)
                    };
                    Some(client.search(request).await?)
                } else {
                    None
                };
                question_lines.push_str(&question_line(
                    sample,
                    question,
                    &retrieved,
                    &hits,
                    unrelated_hits.as_deref(),
                ));
            }
            overall.add(&question.evidence, &retrieved, &ks);
            by_category.entry(question.category).or_default().add(
                &question.evidence,
                &retrieved,
                &ks,
            );
            by_conversation
                .entry(sample.conversation.to_string())
                .or_default()
                .add(&question.evidence, &retrieved, &ks);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(path) = &args.questions_out {
        std::fs::write(path, question_lines)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    latencies.sort_by(f64::total_cmp);
    let report = EvalReport {
        conversations: samples.len(),
        turns,
        ingest_seconds: ingest_s,
        questions: overall.questions,
        overall: recall_row(&overall, &ks, 3),
        categories: by_category
            .iter()
            .map(|(c, t)| (category_name(*c).to_owned(), recall_row(t, &ks, 3)))
            .collect(),
        per_conversation: by_conversation
            .iter()
            .map(|(c, t)| (c.clone(), recall_row(t, &ks, 6)))
            .collect(),
        search_ms_p50: percentile(&latencies, 0.50),
        search_ms_p99: percentile(&latencies, 0.99),
    };
    if args.json {
        return print_json(&report);
    }
    print_eval_report(&report, &ks);
    Ok(())
}

/// `--answer`: the answer benchmark ([`crate::eval::answers`]).
async fn answer(
    client: &MemoryClient,
    samples: &[locomo::Sample],
    args: &LocomoArgs,
    model: &str,
) -> CommandResult {
    let run = AnswerRun {
        setups: args.setups.clone(),
        questions: args.questions,
        seed: args.seed,
        judge: !args.no_judge,
    };
    let (report, lines) = run_answers(client, samples, &run, model).await?;
    if let Some(path) = &args.answers_out {
        let text: String = lines
            .iter()
            .map(|l| serde_json::to_string(l).map(|j| j + "\n"))
            .collect::<Result<_, _>>()
            .context("the answers serialise")?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        return print_json(&report);
    }
    print_answer_report(&report);
    Ok(())
}

/// One question's line for `--questions-out`.
fn question_line(
    sample: &locomo::Sample,
    question: &locomo::Question,
    retrieved: &[String],
    hits: &[mnemo_engine::SearchHit],
    unrelated: Option<&[mnemo_engine::SearchHit]>,
) -> String {
    let mut evidence: Vec<&String> = question.evidence.iter().collect();
    evidence.sort();
    let scores = |hits: &[mnemo_engine::SearchHit]| -> Vec<serde_json::Value> {
        hits.iter()
            .map(|h| {
                serde_json::json!({
                    "dia_id": h.metadata.get("dia_id"),
                    "role": h.role.as_str(),
                    "tokens": h.content.len() / 4,
                    "scores": h.scores,
                })
            })
            .collect()
    };
    let mut line = serde_json::json!({
        "conversation": sample.conversation.as_str(),
        "question": question.text,
        "category": question.category,
        "evidence": evidence,
        "retrieved": retrieved,
        "hits": scores(hits),
    });
    if let Some(unrelated) = unrelated {
        line["unrelated_hits"] = serde_json::json!(scores(unrelated));
    }
    format!("{line}\n")
}

/// Writes a sample's turns (and facts drawn from them, stored as `observations` says)
/// unless the store already holds them all.
async fn ingest(
    client: &MemoryClient,
    sample: &locomo::Sample,
    observations: Option<(Observations, Vec<MemoryRecord>)>,
) -> Result<usize, Failure> {
    let mut records = sample.turns.clone();
    match observations {
        Some((Observations::InTurns, facts)) => append_observations(&mut records, &facts),
        Some((_, facts)) => records.extend(facts),
        None => {}
    }
    let present = client.list(Some(sample.conversation.clone())).await?.len();
    if present == records.len() {
        return Ok(sample.turns.len());
    }
    if present > 0 {
        return Err(anyhow!(
            "the store holds {present} memories of {} but the data has {} to store; use an empty --memory-path",
            sample.conversation,
            records.len()
        )
        .into());
    }
    let bar = progress_bar(records.len() as u64, "memories");
    for chunk in records.chunks(256) {
        client.add_records(chunk.to_vec()).await?;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(sample.turns.len())
}

/// Facts extracted from LoCoMo turns: conversation → `dia_id` → the facts kept.
#[derive(Default, Serialize, serde::Deserialize)]
struct FactsCache(BTreeMap<String, BTreeMap<String, Vec<String>>>);

impl FactsCache {
    /// The cache at `path`; empty when there is no file yet.
    fn load(path: &Path) -> Result<Self, Failure> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a facts cache", path.display()))
                .map_err(Failure::invalid),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(anyhow!("cannot read {}: {e}", path.display()).into()),
        }
    }

    fn save(&self, path: &Path) -> Result<(), Failure> {
        let bytes = serde_json::to_vec_pretty(self).context("the facts cache serialises")?;
        mnemo_store::atomic::write_atomic(path, &bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}

/// The facts the write path's extraction draws from each turn of `sample` (both speakers':
/// in LoCoMo both are people), as facts drawn from their turns; turns `cache` holds are not
/// asked about again, and the cache is written to `cache_path` every 25 turns.
async fn extract_facts(
    client: &MemoryClient,
    sample: &locomo::Sample,
    cache: &mut FactsCache,
    cache_path: Option<&Path>,
) -> Result<Vec<MemoryRecord>, Failure> {
    let conversation = sample.conversation.to_string();
    let cached = |cache: &FactsCache, id: &str| cache.0.get(&conversation)?.get(id).cloned();
    let missing = sample
        .turns
        .iter()
        .filter_map(dia_id)
        .filter(|id| cached(cache, id).is_none())
        .count();
    let bar = progress_bar(missing as u64, "turns read for facts");
    let mut since_save = 0;
    let mut facts = Vec::new();
    for turn in &sample.turns {
        let Some(id) = dia_id(turn) else { continue };
        let kept = match cached(cache, id) {
            Some(kept) => kept,
            None => {
                let (kept, _) = client
                    .extract_facts(&sample.conversation, &turn.content)
                    .await
                    .with_context(|| format!("extracting facts from {id}"))?;
                let turns = cache.0.entry(conversation.clone()).or_default();
                turns.insert(id.to_owned(), kept.clone());
                bar.inc(1);
                since_save += 1;
                kept
            }
        };
        for text in kept {
            let mut fact = MemoryRecord::new(sample.conversation.clone(), Role::Memory, text);
            fact.created_at = turn.created_at;
            fact.source_id = Some(turn.id);
            fact.metadata = turn.metadata.clone();
            facts.push(fact);
        }
        if let Some(path) = cache_path.filter(|_| since_save >= 25) {
            cache.save(path)?;
            since_save = 0;
        }
    }
    bar.finish_and_clear();
    if let Some(path) = cache_path {
        cache.save(path)?;
    }
    Ok(facts)
}

/// Appends each observation to the text of the turn it came from.
fn append_observations(
    turns: &mut [mnemo_core::MemoryRecord],
    observations: &[mnemo_core::MemoryRecord],
) {
    let mut by_turn: HashMap<&str, String> = HashMap::new();
    for fact in observations {
        if let Some(id) = dia_id(fact) {
            let text = by_turn.entry(id).or_default();
            text.push(' ');
            text.push_str(&fact.content);
        }
    }
    for turn in turns {
        let facts = dia_id(turn).and_then(|id| by_turn.get(id)).cloned();
        if let Some(facts) = facts {
            turn.content.push_str(&facts);
        }
    }
}

fn dia_id(record: &mnemo_core::MemoryRecord) -> Option<&str> {
    record.metadata.get("dia_id")?.as_str()
}

fn parse_range(raw: &str, len: usize) -> anyhow::Result<(usize, usize)> {
    let (from, to) = raw.split_once('-').unwrap_or((raw, raw));
    let parse = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| anyhow!("--convs {raw:?} is not a position or a range like 0-4"))
    };
    let (from, to) = (parse(from)?, parse(to)?);
    if from > to || to >= len {
        anyhow::bail!(
            "--convs {raw:?} is outside the file's {len} conversations (0-{})",
            len.saturating_sub(1)
        );
    }
    Ok((from, to))
}

fn category_name(category: u8) -> &'static str {
    match category {
        1 => "1 multi-hop",
        2 => "2 temporal",
        3 => "3 open-domain",
        _ => "4 single-hop",
    }
}

#[derive(Serialize)]
struct EvalReport {
    conversations: usize,
    turns: usize,
    ingest_seconds: f64,
    questions: usize,
    overall: BTreeMap<String, f64>,
    categories: BTreeMap<String, BTreeMap<String, f64>>,
    /// Recall of each conversation's questions, to 6 decimals: what a held-out check combines.
    per_conversation: BTreeMap<String, BTreeMap<String, f64>>,
    search_ms_p50: f64,
    search_ms_p99: f64,
}

fn recall_row(tally: &locomo::Tally, ks: &[usize], decimals: i32) -> BTreeMap<String, f64> {
    let scale = 10f64.powi(decimals);
    let round = |x: f64| (x * scale).round() / scale;
    let mut row = BTreeMap::new();
    for &k in ks {
        let (all, any) = tally.means(k);
        row.insert(format!("R_all@{k}"), round(all));
        row.insert(format!("R_any@{k}"), round(any));
    }
    row.insert("questions".into(), tally.questions as f64);
    row
}

fn print_eval_report(report: &EvalReport, ks: &[usize]) {
    println!(
        "LoCoMo: {} conversations, {} turns, {} questions (ingest {:.1} s)",
        report.conversations, report.turns, report.questions, report.ingest_seconds
    );
    let columns: Vec<String> = ks
        .iter()
        .map(|k| format!("R_all@{k}"))
        .chain(ks.iter().map(|k| format!("R_any@{k}")))
        .collect();
    print!("{:<16}", "");
    for c in &columns {
        print!("{c:>10}");
    }
    println!("{:>6}", "n");
    let rows = std::iter::once(("overall", &report.overall))
        .chain(report.categories.iter().map(|(c, r)| (c.as_str(), r)));
    for (name, row) in rows {
        print!("{name:<16}");
        for c in &columns {
            print!("{:>10.3}", row.get(c).copied().unwrap_or_default());
        }
        println!("{:>6}", row["questions"]);
    }
    println!(
        "search latency: p50 {:.1} ms, p99 {:.1} ms",
        report.search_ms_p50, report.search_ms_p99
    );
}

/// The value at share `q` (0..1) of `sorted`, rounded to two decimals; 0 for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    (sorted[i] * 100.0).round() / 100.0
}
