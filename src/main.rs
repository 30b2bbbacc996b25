//! `mnemo`: the command-line front end of the memory engine.
//!
//! Exit codes: 0 success, 1 failure, 2 invalid input or usage, 3 set-up missing (run
//! `scripts/setup`), 4 the store is in use by another mnemo process, 5 the index server
//! (`index_url`) does not answer.

mod chat;
mod commands;
mod conflicts;
mod eval;
mod history;
mod input;
mod mcp;
mod models;
mod serve;
mod sessions;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mnemo",
    version,
    about = "Long-term memory for LLM agents, kept as Markdown files"
)]
struct Cli {
    /// Root of the memory store [env: MNEMO_MEMORY_PATH] [default: memory_db]
    #[arg(long, global = true)]
    memory_path: Option<PathBuf>,
    /// TOML config file [env: MNEMO_CONFIG] [default: ./mnemo.toml if present]
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// More logging (-v info, -vv debug); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the memory proxy (OpenAI-compatible API + REST API for memories); starts the local
    /// LLM when no upstream (openai_base_url) is configured
    Serve(serve::ServeArgs),
    /// Store memories verbatim: texts as arguments, from a file (-f), or from stdin;
    /// plain lines (list markers stripped) or a JSON list of strings or {content, conversation_id}
    Add(commands::AddArgs),
    /// Find the memories of a conversation (and of `global`) nearest to a query
    Search(commands::SearchArgs),
    /// List the memories of a conversation, or of all conversations
    List(commands::ListArgs),
    /// Bring the index in step with the files (only changed files are embedded)
    Reindex(commands::ReindexArgs),
    /// Check that the index holds exactly the memory files (exit 1 if not)
    Status(commands::StatusArgs),
    /// Keep the index in step with hand edits of the files until interrupted (Ctrl-C)
    Watch,
    /// Measure retrieval quality on a benchmark (LoCoMo)
    Eval(eval::EvalArgs),
    /// Facts of a conversation that say different things of the same thing: list them, or
    /// resolve one (`resolve EARLIER LATER --keep later|earlier|both`)
    Conflicts(conflicts::ConflictsArgs),
    /// The git history of the memories (of one conversation with -c)
    Log(history::LogArgs),
    /// A commit, or a memory file as it was: `mnemo show REV[:PATH]`
    Show(history::ShowArgs),
    /// Chat in the terminal with memory: a session logged in full, the local LLM by default
    Chat(chat::ChatArgs),
    /// Chat sessions: list, show, fork, delete, compact, context, search
    Sessions(sessions::SessionsArgs),
    /// An agent's own notes (agents/AGENT/MEMORY.md): read, write (append), update
    AgentMemory(sessions::AgentMemoryArgs),
    /// Serve the memory tools over the Model Context Protocol on stdin/stdout, for an MCP host
    Mcp(mcp::McpArgs),
    /// Which models are installed; --fetch-reranker downloads the cross-encoder from the hub
    Models(models::ModelsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let global = commands::GlobalArgs {
        memory_path: cli.memory_path,
        config: cli.config,
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Add(args) => commands::add(&global, args).await,
            Command::Search(args) => commands::search(&global, args).await,
            Command::List(args) => commands::list(&global, args).await,
            Command::Reindex(args) => commands::reindex(&global, args).await,
            Command::Status(args) => commands::status(&global, args).await,
            Command::Watch => commands::watch(&global).await,
            Command::Conflicts(args) => conflicts::conflicts(&global, args).await,
            Command::Eval(args) => eval::eval(&global, args).await,
            Command::Serve(args) => serve::serve(&global, args).await,
            Command::Log(args) => history::log(&global, args).await,
            Command::Show(args) => history::show(&global, args).await,
            Command::Mcp(args) => mcp::mcp(&global, args).await,
            Command::Models(args) => models::models(&global, args).await,
            Command::Chat(args) => chat::chat(&global, args).await,
            Command::Sessions(args) => sessions::sessions(&global, args).await,
            Command::AgentMemory(args) => sessions::agent_memory(&global, args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn init_logging(verbose: u8) {
    // qdrant-edge warns about process-wide settings only a Qdrant server initialises.
    let default = match verbose {
        0 => "warn,qdrant_edge=error",
        1 => "info,qdrant_edge=error",
        _ => "debug,qdrant_edge=warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
