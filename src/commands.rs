//! The subcommands: each parses its arguments, opens a [`MemoryClient`] and prints.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mnemo_core::{Config, ConversationId};
use mnemo_engine::{EngineError, MemoryClient, OpenOptions, SearchOptions};
use mnemo_store::StoredMemory;
use serde::Serialize;

use crate::{input, locomo};

pub struct GlobalArgs {
    pub memory_path: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

/// An error and the exit code it maps to.
pub struct Failure {
    pub error: anyhow::Error,
    pub code: u8,
}

impl Failure {
    pub fn invalid(error: impl Into<anyhow::Error>) -> Self {
        Self {
            error: error.into(),
            code: 2,
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Self { error, code: 1 }
    }
}

impl From<EngineError> for Failure {
    fn from(error: EngineError) -> Self {
        let code = if error.is_invalid_input() {
            2
        } else if error.is_missing_setup() {
            3
        } else if matches!(error, EngineError::Locked { .. }) {
            4
        } else {
            1
        };
        Self {
            error: error.into(),
            code,
        }
    }
}

pub type CommandResult = Result<(), Failure>;

/// Memories written and indexed per step of `mnemo add`.
const ADD_CHUNK: usize = 16;

#[derive(Args)]
pub struct AddArgs {
    /// Texts to remember, one memory each
    texts: Vec<String>,
    /// Read memories from FILE ('-' for stdin)
    #[arg(short = 'f', long = "file", conflicts_with = "texts")]
    file: Option<PathBuf>,
    /// Conversation the memories belong to
    #[arg(short, long, default_value = ConversationId::DEFAULT)]
    conversation: String,
    /// Print the added memories as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SearchArgs {
    /// What to look for
    query: String,
    /// Conversation to search (its memories and those of `global`)
    #[arg(short, long, default_value = ConversationId::DEFAULT)]
    conversation: String,
    /// How many results [default: the config's default_top_k]
    #[arg(short = 'k', long)]
    top_k: Option<usize>,
    /// Weight of recency, 0..1, for queries about the present [default: config]
    #[arg(long)]
    recency_weight: Option<f32>,
    /// MMR trade-off, 1 = relevance only [default: config]
    #[arg(long)]
    mmr_lambda: Option<f32>,
    /// Drop results whose relevance (0..1) is below this [default: config]
    #[arg(long)]
    threshold: Option<f32>,
    /// Metadata filter as JSON, e.g. '{"topic": "food", "weight": {"gte": 3}}'
    #[arg(long)]
    filter: Option<String>,
    /// Print results as JSON, with each stage's scores
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ListArgs {
    /// Only this conversation
    #[arg(short, long)]
    conversation: Option<String>,
    /// Print memories as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReindexArgs {
    /// Rebuild the index from the files alone (also resets its write-ahead log)
    #[arg(long)]
    full: bool,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

pub fn load_config(global: &GlobalArgs) -> Result<Config, Failure> {
    let file = global
        .config
        .clone()
        .or_else(|| std::env::var_os("MNEMO_CONFIG").map(PathBuf::from))
        .or_else(|| Some(PathBuf::from("mnemo.toml")).filter(|p| p.is_file()));
    let mut config = Config::load(file.as_deref(), std::env::vars())
        .map_err(|e| Failure::invalid(anyhow!(e)))?;
    if let Some(path) = &global.memory_path {
        config.memory_path = path.clone();
    }
    Ok(config)
}

fn conversation(raw: &str) -> Result<ConversationId, Failure> {
    ConversationId::new(raw).map_err(|e| Failure::invalid(anyhow!(e)))
}

pub async fn open_client(global: &GlobalArgs) -> Result<MemoryClient, Failure> {
    open_client_with(global, false).await
}

async fn open_client_with(global: &GlobalArgs, rebuild: bool) -> Result<MemoryClient, Failure> {
    open_with_config(load_config(global)?, rebuild).await
}

/// Opens a client on `config`, with a progress bar while the index catches up.
pub async fn open_with_config(config: Config, rebuild: bool) -> Result<MemoryClient, Failure> {
    let bar = ProgressBar::hidden();
    let shown = bar.clone();
    let on_progress = Box::new(move |p: mnemo_engine::SyncProgress| {
        if shown.is_hidden() && std::io::stderr().is_terminal() {
            shown.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            shown.set_style(
                ProgressStyle::with_template("indexing {bar:30} {pos}/{len} files ({per_sec})")
                    .expect("valid template"),
            );
        }
        shown.set_length(p.to_embed as u64);
        shown.set_position(p.embedded as u64);
    });
    let client = MemoryClient::open(
        config,
        OpenOptions {
            on_progress: Some(on_progress),
            rebuild,
        },
    )
    .await?;
    bar.finish_and_clear();
    Ok(client)
}

pub async fn add(global: &GlobalArgs, args: AddArgs) -> CommandResult {
    let default_conversation = conversation(&args.conversation)?;
    let items = read_add_input(&args)?;
    if items.is_empty() {
        return Err(Failure::invalid(anyhow!(
            "nothing to add: the input holds no memories"
        )));
    }
    // Validate everything before writing anything.
    let mut by_conversation: BTreeMap<ConversationId, Vec<String>> = BTreeMap::new();
    for item in items {
        let conv = match &item.conversation_id {
            Some(raw) => conversation(raw)?,
            None => default_conversation.clone(),
        };
        by_conversation.entry(conv).or_default().push(item.content);
    }
    let client = open_client(global).await?;
    let mut added = Vec::new();
    for (conv, texts) in by_conversation {
        // In chunks, printing each as soon as it is durable: a line on stdout is an
        // acknowledgement that the memory is on disk and searchable (should the process die
        // before the index is flushed, the next start indexes the file again).
        for chunk in texts.chunks(ADD_CHUNK) {
            let stored = client.add(chunk.to_vec(), &conv).await?.added;
            if !args.json {
                for memory in &stored {
                    println!("{}  {}", memory.record.id, memory.path.display());
                }
            }
            added.extend(stored);
        }
    }
    if args.json {
        print_json(&added.iter().map(MemoryView::from).collect::<Vec<_>>())?;
    } else {
        eprintln!(
            "added {} {}",
            added.len(),
            plural(added.len(), "memory", "memories")
        );
    }
    Ok(())
}

fn read_add_input(args: &AddArgs) -> Result<Vec<input::NewMemory>, Failure> {
    if !args.texts.is_empty() {
        return Ok(args
            .texts
            .iter()
            .map(|t| input::NewMemory {
                content: t.trim().to_owned(),
                conversation_id: None,
            })
            .collect());
    }
    let text = match args.file.as_deref() {
        Some(path) if path.as_os_str() != "-" => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::invalid)?,
        Some(_) => read_stdin()?,
        None if std::io::stdin().is_terminal() => {
            return Err(Failure::invalid(anyhow!(
                "nothing to add: give texts as arguments, -f FILE, or pipe them on stdin"
            )))
        }
        None => read_stdin()?,
    };
    input::parse(&text).map_err(|e| Failure::invalid(anyhow!(e)))
}

fn read_stdin() -> Result<String, Failure> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read stdin")
        .map_err(Failure::invalid)?;
    Ok(text)
}

pub async fn search(global: &GlobalArgs, args: SearchArgs) -> CommandResult {
    let conv = conversation(&args.conversation)?;
    let filter = args
        .filter
        .as_deref()
        .map(serde_json::from_str::<serde_json::Value>)
        .transpose()
        .context("--filter is not JSON")
        .map_err(Failure::invalid)?;
    let client = open_client(global).await?;
    let options = SearchOptions {
        top_k: args.top_k.unwrap_or(client.config().default_top_k),
        recency_weight: args.recency_weight,
        mmr_lambda: args.mmr_lambda,
        score_threshold: args.threshold,
        filter,
        now: None,
    };
    let hits = client.search(&args.query, &conv, options).await?;
    if args.json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        println!("no memories found in {conv:?} or \"global\"");
    }
    for (rank, hit) in hits.iter().enumerate() {
        println!(
            "{:>2}. {:.3}  [{}/{}]  {}",
            rank + 1,
            hit.score,
            hit.conversation_id,
            hit.role,
            one_line(&hit.content)
        );
        println!("      {}  {}", hit.id, hit.path.display());
    }
    Ok(())
}

pub async fn list(global: &GlobalArgs, args: ListArgs) -> CommandResult {
    let conv = args.conversation.as_deref().map(conversation).transpose()?;
    let client = open_client(global).await?;
    let memories = client.list(conv).await?;
    if args.json {
        return print_json(&memories.iter().map(MemoryView::from).collect::<Vec<_>>());
    }
    for memory in &memories {
        let r = &memory.record;
        println!(
            "{}  [{}/{}]  {}",
            r.created_at.format("%Y-%m-%d %H:%M"),
            r.conversation_id,
            r.role,
            one_line(&r.content)
        );
        println!("      {}  {}", r.id, memory.path.display());
    }
    if memories.is_empty() {
        println!("no memories");
    }
    Ok(())
}

pub async fn reindex(global: &GlobalArgs, args: ReindexArgs) -> CommandResult {
    let client = open_client_with(global, args.full).await?;
    let report = client.startup_sync();
    let files_per_s = report.files as f64 / report.seconds.max(1e-9);
    if args.json {
        let mut value = serde_json::to_value(report).context("cannot serialise output")?;
        value["files_per_s"] = serde_json::json!(files_per_s.round());
        return print_json(&value);
    }
    println!(
        "{} files in {:.2} s ({:.0} files/s): {} embedded, {} points deleted, {} skipped",
        report.files,
        report.seconds,
        files_per_s,
        report.embedded,
        report.deleted,
        report.skipped.len()
    );
    for reason in &report.skipped {
        println!("  skipped: {reason}");
    }
    Ok(())
}

pub async fn status(global: &GlobalArgs, args: StatusArgs) -> CommandResult {
    let client = open_client(global).await?;
    let check = client.verify().await?;
    let consistent = check.missing.is_empty() && check.orphans.is_empty();
    if args.json {
        print_json(&check)?;
    } else {
        println!("store   {}", client.store().root().display());
        println!(
            "files   {} memories ({} unreadable)",
            check.files,
            check.skipped.len()
        );
        println!("index   {} points", check.points);
        for id in &check.missing {
            println!("  missing from the index: {id}");
        }
        for id in &check.orphans {
            println!("  point without a file: {id}");
        }
        println!(
            "{}",
            if consistent {
                "consistent"
            } else {
                "INCONSISTENT"
            }
        );
    }
    if consistent {
        Ok(())
    } else {
        Err(anyhow!("the index does not match the files").into())
    }
}

pub async fn watch(global: &GlobalArgs) -> CommandResult {
    let client = open_client(global).await?;
    let _watcher = client.start_watcher()?;
    eprintln!(
        "watching {} for changes (Ctrl-C to stop)",
        client.store().root().join("entries").display()
    );
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    Ok(())
}

/// A memory as `--json` prints it.
#[derive(Serialize)]
struct MemoryView<'a> {
    id: String,
    conversation_id: &'a str,
    role: &'a str,
    created_at: String,
    content: &'a str,
    path: &'a std::path::Path,
}

impl<'a> From<&'a StoredMemory> for MemoryView<'a> {
    fn from(m: &'a StoredMemory) -> Self {
        Self {
            id: m.record.id.to_string(),
            conversation_id: m.record.conversation_id.as_str(),
            role: m.record.role.as_str(),
            created_at: m.record.created_at.to_rfc3339(),
            content: &m.record.content,
            path: &m.path,
        }
    }
}

pub fn print_json<T: Serialize + ?Sized>(value: &T) -> CommandResult {
    let text = serde_json::to_string_pretty(value).context("cannot serialise output")?;
    println!("{text}");
    Ok(())
}

fn one_line(text: &str) -> String {
    const MAX: usize = 160;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > MAX {
        format!("{}…", flat.chars().take(MAX).collect::<String>())
    } else {
        flat
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

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
    let client = MemoryClient::open(config, OpenOptions::default()).await?;

    let ingest_started = std::time::Instant::now();
    let mut turns = 0;
    for sample in &samples {
        turns += ingest(&client, sample).await?;
    }
    let ingest_s = ingest_started.elapsed().as_secs_f64();

    let mut overall = locomo::Tally::default();
    let mut by_category: BTreeMap<u8, locomo::Tally> = BTreeMap::new();
    let mut latencies = Vec::new();
    let questions: usize = samples.iter().map(|s| s.questions.len()).sum();
    let bar = progress_bar(questions as u64, "questions");
    for sample in &samples {
        for question in &sample.questions {
            let options = SearchOptions {
                now: Some(sample.last_session),
                ..SearchOptions::top_k(max_k)
            };
            let started = std::time::Instant::now();
            let hits = client
                .search(&question.text, &sample.conversation, options)
                .await?;
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
            let retrieved: Vec<String> = hits
                .iter()
                .filter_map(|h| h.metadata.get("dia_id")?.as_str().map(str::to_owned))
                .collect();
            overall.add(&question.evidence, &retrieved, &ks);
            by_category.entry(question.category).or_default().add(
                &question.evidence,
                &retrieved,
                &ks,
            );
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    latencies.sort_by(f64::total_cmp);
    let report = EvalReport {
        conversations: samples.len(),
        turns,
        ingest_seconds: ingest_s,
        questions: overall.questions,
        overall: recall_row(&overall, &ks),
        categories: by_category
            .iter()
            .map(|(c, t)| (category_name(*c).to_owned(), recall_row(t, &ks)))
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

/// Writes a sample's turns unless the store already holds them all.
async fn ingest(client: &MemoryClient, sample: &locomo::Sample) -> Result<usize, Failure> {
    let present = client.list(Some(sample.conversation.clone())).await?.len();
    if present == sample.turns.len() {
        return Ok(present);
    }
    if present > 0 {
        return Err(anyhow!(
            "the store holds {present} memories of {} but the data has {} turns; use an empty --memory-path",
            sample.conversation,
            sample.turns.len()
        )
        .into());
    }
    let bar = progress_bar(sample.turns.len() as u64, "turns");
    for chunk in sample.turns.chunks(256) {
        client.add_records(chunk.to_vec()).await?;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(sample.turns.len())
}

fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!("{{bar:30}} {{pos}}/{{len}} {unit} ({{per_sec}})"))
            .expect("valid template"),
    );
    bar
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

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    (sorted[i] * 100.0).round() / 100.0
}

#[derive(Serialize)]
struct EvalReport {
    conversations: usize,
    turns: usize,
    ingest_seconds: f64,
    questions: usize,
    overall: BTreeMap<String, f64>,
    categories: BTreeMap<String, BTreeMap<String, f64>>,
    search_ms_p50: f64,
    search_ms_p99: f64,
}

fn recall_row(tally: &locomo::Tally, ks: &[usize]) -> BTreeMap<String, f64> {
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
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
