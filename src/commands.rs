//! The subcommands: each parses its arguments, opens a [`MemoryClient`] and prints.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mnemo_core::{Config, ConversationId};
use mnemo_engine::{
    Consistency, EngineError, IndexBackend, MemoryClient, OpenOptions, SearchRequest,
};
use mnemo_store::StoredMemory;
use serde::Serialize;

use crate::input;

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
        } else if error.is_index_unavailable() {
            5
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
    /// Drop results whose cross-encoder score (0..1, absolute; agent-cli uses 0.35) is
    /// below this [default: config]
    #[arg(long)]
    min_rerank_score: Option<f32>,
    /// Metadata filter as JSON, e.g. '{"topic": "food", "weight": {"gte": 3}}'
    #[arg(long)]
    filter: Option<String>,
    /// Search the memories as they were at this git revision (a hash or a prefix of one,
    /// HEAD~3, a branch); the first search as of a revision indexes its memories
    #[arg(long, value_name = "REV")]
    as_of: Option<String>,
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

pub fn conversation(raw: &str) -> Result<ConversationId, Failure> {
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
            ..OpenOptions::default()
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
        for chunk in texts.chunks(ADD_CHUNK.min(client.config().max_entries).max(1)) {
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
    let request = SearchRequest {
        top_k: args.top_k,
        recency_weight: args.recency_weight,
        mmr_lambda: args.mmr_lambda,
        score_threshold: args.threshold,
        min_rerank_score: args.min_rerank_score,
        filter,
        ..SearchRequest::new(args.query, conv.clone())
    };
    if let Some(rev) = &args.as_of {
        return search_as_of(&client, rev, request, args.json).await;
    }
    // A server has built its vocabulary long before most searches; a one-off search waits,
    // so that it finds what the server would (quick: the words' vectors are kept on disk).
    client.vocabulary_built().await;
    let hits = client.search(request).await?;
    if args.json {
        return print_json(&hits);
    }
    print_hits(&hits, &conv);
    Ok(())
}

/// `mnemo search --as-of REV`: the commit it answers from, then the hits (paths as the
/// commit's tree names them); `--json` prints both as one object.
async fn search_as_of(
    client: &MemoryClient,
    rev: &str,
    request: SearchRequest,
    json: bool,
) -> CommandResult {
    let conv = request.conversation_id.clone();
    let found = client.search_as_of(rev, request).await.map_err(|e| {
        // An unknown revision is the caller's mistake, as with `mnemo show`.
        if e.is_not_found() {
            Failure::invalid(anyhow!(e))
        } else {
            Failure::from(e)
        }
    })?;
    if json {
        return print_json(&found);
    }
    let commit = &found.as_of;
    println!(
        "as of commit {}  {}  {}",
        commit.short_id,
        commit.time.format("%Y-%m-%d %H:%M:%S"),
        commit.message.lines().next().unwrap_or_default()
    );
    print_hits(&found.hits, &conv);
    Ok(())
}

fn print_hits(hits: &[mnemo_engine::SearchHit], conv: &ConversationId) {
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
    let backend = client.index_backend();
    if args.json {
        #[derive(Serialize)]
        struct Status<'a> {
            index_backend: &'a IndexBackend,
            #[serde(flatten)]
            check: &'a Consistency,
        }
        print_json(&Status {
            index_backend: backend,
            check: &check,
        })?;
    } else {
        println!("store   {}", client.store().root().display());
        println!(
            "files   {} memories ({} unreadable)",
            check.files,
            check.skipped.len()
        );
        for reason in &check.skipped {
            println!("  unreadable: {reason}");
        }
        let place = match backend {
            IndexBackend::Embedded { path } => format!("embedded, {}", path.display()),
            IndexBackend::Qdrant { url, collection } => {
                format!("Qdrant at {url}, collection {collection:?}")
            }
            IndexBackend::Given => "given by the caller".into(),
        };
        println!("index   {} points ({place})", check.points);
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
        client.store().entries_dir().display()
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

pub fn one_line(text: &str) -> String {
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

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub fn progress_bar(len: u64, unit: &str) -> ProgressBar {
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
