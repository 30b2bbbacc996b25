//! `mnemo sessions ...` and `mnemo agent-memory ...`: chat sessions and agents' notes from the
//! command line, through the same engine calls as the REST API.

use anyhow::{anyhow, Context as _};
use clap::{Args, Subcommand};
use mnemo_core::ConversationId;
use mnemo_engine::{CompactReport, SessionContext, SessionExport, SessionInfo, UsageTotals};
use mnemo_engine::{Excerpt, HistoryScope, MemoryClient, SessionId};
use serde::Serialize;

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

#[derive(Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: SessionsCommand,
    /// Print JSON
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// List sessions, newest first
    List {
        /// Deleted sessions too
        #[arg(long)]
        all: bool,
        /// Only the sessions of this conversation
        #[arg(short, long)]
        conversation: Option<String>,
    },
    /// A session's settings and its latest messages
    Show {
        id: String,
        /// Messages to show, from the end of the current branch
        #[arg(short = 'n', long, default_value_t = 20)]
        messages: usize,
    },
    /// Copy a session under a new id (its parent is left as it is)
    Fork {
        id: String,
        /// The new session's id (generated when unset)
        #[arg(long = "as")]
        new_id: Option<String>,
    },
    /// Delete a session (softly: its log stays on disk)
    Delete { id: String },
    /// Write a session (settings and whole log) as one JSON document
    Export {
        id: String,
        /// The file to write [default: standard output]
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// Create a session from an exported one, from pydantic-deep's (a pydantic-ai message
    /// list: its `messages.json`, or the session folder holding it) or from co-cli's (its
    /// `<id>.jsonl` transcript)
    Import {
        /// The exported JSON ('-' for standard input), a pydantic-ai `messages.json` or a
        /// folder holding one, or a co-cli transcript
        file: std::path::PathBuf,
        /// The id to give it [default: its exported id; a new one for another system's]
        #[arg(long = "as")]
        new_id: Option<String>,
        /// For another system's session: the conversation whose memories feed it
        #[arg(short, long, default_value = "default")]
        conversation: String,
    },
    /// Summarise a session's older messages now, with an optional focus
    Compact {
        id: String,
        /// What the summary should keep above all
        #[arg(long)]
        focus: Option<String>,
        /// Do not start the local LLM when no upstream is configured
        #[arg(long)]
        no_local_llm: bool,
    },
    /// How full a session's context is
    Context { id: String },
    /// Search the full logs of a session, or of every session of a conversation
    Search {
        query: String,
        /// Only this session
        #[arg(short, long, conflicts_with = "conversation")]
        session: Option<String>,
        /// Every session of this conversation [default: default]
        #[arg(short, long)]
        conversation: Option<String>,
    },
}

pub fn session_id(raw: &str) -> Result<SessionId, Failure> {
    SessionId::new(raw).map_err(|e| Failure::invalid(anyhow!(e)))
}

fn print_json(value: &impl Serialize) -> CommandResult {
    println!(
        "{}",
        serde_json::to_string_pretty(value).map_err(anyhow::Error::from)?
    );
    Ok(())
}

pub async fn sessions(global: &GlobalArgs, args: SessionsArgs) -> CommandResult {
    let json = args.json;
    if let SessionsCommand::Compact {
        id,
        focus,
        no_local_llm,
    } = &args.command
    {
        let id = session_id(id)?;
        let mut config = commands::load_config(global)?;
        let (local, _) = crate::serve::start_upstream(&mut config, !no_local_llm).await?;
        let client = commands::open_with_config(config, false).await?;
        let result = client.compact_session(&id, focus.clone()).await;
        if let Some(llm) = local {
            llm.stop().await;
        }
        let report = result?;
        return if json {
            print_json(&report)
        } else {
            println!("{}", describe_compaction(&report));
            if report.unsummarised.is_none() {
                println!("{}", report.summary);
            }
            Ok(())
        };
    }
    let client = commands::open_client(global).await?;
    match args.command {
        SessionsCommand::List { all, conversation } => list(&client, all, conversation, json).await,
        SessionsCommand::Show { id, messages } => {
            show(&client, &session_id(&id)?, messages, json).await
        }
        SessionsCommand::Fork { id, new_id } => {
            let new_id = new_id.as_deref().map(session_id).transpose()?;
            let (new_id, meta) = client.fork_session(&session_id(&id)?, new_id).await?;
            if json {
                print_json(&serde_json::json!({"id": new_id, "session": meta}))
            } else {
                println!("{new_id}");
                Ok(())
            }
        }
        SessionsCommand::Delete { id } => {
            let id = session_id(&id)?;
            let meta = client.delete_session(&id).await?;
            if json {
                print_json(&serde_json::json!({"id": id, "deleted_at": meta.deleted_at}))
            } else {
                println!("deleted session {id} (its log stays in sessions/{id}/)");
                Ok(())
            }
        }
        SessionsCommand::Export { id, output } => {
            let export = client.export_session(&session_id(&id)?).await?;
            let text = serde_json::to_string_pretty(&export).map_err(anyhow::Error::from)?;
            match output {
                Some(path) => {
                    mnemo_store::atomic::write_atomic(&path, text.as_bytes())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!("exported session {id} to {}", path.display());
                }
                None => println!("{text}"),
            }
            Ok(())
        }
        SessionsCommand::Import {
            file,
            new_id,
            conversation,
        } => {
            let new_id = new_id.as_deref().map(session_id).transpose()?;
            let export = read_export(&file, new_id.as_ref(), &conversation)?;
            let (id, meta) = client.import_session(export, new_id).await?;
            if json {
                print_json(&serde_json::json!({"id": id, "session": meta}))
            } else {
                println!("{id}");
                Ok(())
            }
        }
        SessionsCommand::Context { id } => {
            let context = client.session_context(&session_id(&id)?).await?;
            if json {
                print_json(&context)
            } else {
                println!("{}", usage_bar(&context));
                Ok(())
            }
        }
        SessionsCommand::Search {
            query,
            session,
            conversation,
        } => {
            let scope = match session {
                Some(s) => HistoryScope::Session(session_id(&s)?),
                None => HistoryScope::Conversation(
                    ConversationId::new(conversation.as_deref().unwrap_or(ConversationId::DEFAULT))
                        .map_err(|e| Failure::invalid(anyhow!(e)))?,
                ),
            };
            let excerpts = client.search_history(scope, &query, 10).await?;
            if json {
                print_json(&excerpts)
            } else {
                print_excerpts(&excerpts);
                Ok(())
            }
        }
        SessionsCommand::Compact { .. } => unreachable!("handled above"),
    }
}

/// The largest export read: a full log and its settings.
const MAX_EXPORT_BYTES: u64 = mnemo_session::log::MAX_LOG_BYTES + (16 << 20);

/// The session document `file` (`-`: standard input) holds, read as untrusted (a regular
/// file, no link, no device, bounded in size): a mnemo export, or a pydantic-ai message list
/// (read from `messages.json` when `file` is a folder) or a co-cli transcript made into one,
/// under `id` (else a new id) in `conversation`.
fn read_export(
    file: &std::path::Path,
    id: Option<&SessionId>,
    conversation: &str,
) -> Result<SessionExport, Failure> {
    let folder_file;
    let file =
        if file.as_os_str() != "-" && std::fs::symlink_metadata(file).is_ok_and(|m| m.is_dir()) {
            folder_file = file.join("messages.json");
            folder_file.as_path()
        } else {
            file
        };
    let bytes = if file.as_os_str() == "-" {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_EXPORT_BYTES + 1)
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
        if bytes.len() as u64 > MAX_EXPORT_BYTES {
            return Err(Failure::invalid(anyhow!(
                "standard input holds more than {MAX_EXPORT_BYTES} bytes: not an exported session"
            )));
        }
        bytes
    } else {
        mnemo_store::untrusted::read_regular(file, MAX_EXPORT_BYTES)
            .map_err(|e| Failure::invalid(anyhow!("{}: {e}", file.display())))?
    };
    let id = id.cloned().unwrap_or_else(SessionId::generate);
    mnemo_session::foreign::read_document(&bytes, id.as_str(), conversation)
        .map(|(_, export)| export)
        .map_err(|e| Failure::invalid(anyhow!("{} is {e}", file.display())))
}

async fn list(
    client: &MemoryClient,
    all: bool,
    conversation: Option<String>,
    json: bool,
) -> CommandResult {
    let sessions: Vec<_> = client
        .list_sessions(all)
        .await?
        .into_iter()
        .filter(|(_, m)| conversation.as_ref().is_none_or(|c| *c == m.conversation))
        .collect();
    if json {
        let items: Vec<_> = sessions
            .iter()
            .map(|(id, meta)| serde_json::json!({"id": id, "session": meta}))
            .collect();
        return print_json(&items);
    }
    print!("{}", session_table(&sessions));
    Ok(())
}

/// Sessions as a table: id, messages, tokens, age, title.
pub fn session_table(sessions: &[(SessionId, mnemo_engine::SessionMeta)]) -> String {
    if sessions.is_empty() {
        return "no sessions\n".into();
    }
    let now = chrono::Utc::now();
    let mut out = String::new();
    for (id, meta) in sessions {
        let deleted = if meta.deleted_at.is_some() {
            " (deleted)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{id:<28} {:>5} msgs {:>8} tokens {:>9} ago  {}{deleted}\n",
            meta.messages,
            meta.tokens.map_or("-".into(), |t| t.to_string()),
            age(now - meta.updated_at),
            meta.title
        ));
    }
    out
}

async fn show(client: &MemoryClient, id: &SessionId, last: usize, json: bool) -> CommandResult {
    let info = client.session(id).await?;
    let offset = info.branch_messages.saturating_sub(last);
    let page = client
        .session_messages(id, offset, last.max(1), false)
        .await?;
    if json {
        return print_json(&serde_json::json!({"session": info, "messages": page}));
    }
    print_info(&info);
    for logged in &page.messages {
        println!("{}", render_message(&logged.message));
    }
    Ok(())
}

fn print_info(info: &SessionInfo) {
    let m = &info.meta;
    println!("session       {}", info.id);
    println!("title         {}", m.title);
    println!("conversation  {}", m.conversation);
    if let Some(agent) = &m.agent {
        println!("agent         {agent}");
    }
    if let Some(parent) = &m.parent {
        println!("parent        {parent}");
    }
    println!("created       {}", m.created_at.to_rfc3339());
    println!("updated       {}", m.updated_at.to_rfc3339());
    println!(
        "messages      {} logged, {} in the current branch",
        m.messages, info.branch_messages
    );
    println!("log           {}", bytes(info.log_bytes));
    if let Some(at) = m.deleted_at {
        println!("deleted       {}", at.to_rfc3339());
    }
    for skipped in &info.skipped_lines {
        println!("warning       {skipped}");
    }
    println!();
}

/// A logged message on one or more lines: `you: ...`, `assistant: ...`, `tool: ...`.
pub fn render_message(message: &serde_json::Value) -> String {
    let role = message["role"].as_str().unwrap_or("?");
    let label = match role {
        "user" => "you",
        other => other,
    };
    let text = mnemo_session::history::message_text(message);
    format!("{label}: {}", text.trim())
}

pub fn print_excerpts(excerpts: &[Excerpt]) {
    if excerpts.is_empty() {
        println!("nothing found");
    }
    for excerpt in excerpts {
        println!(
            "── {} line {} ({}, score {:.2})",
            excerpt.session,
            excerpt.line,
            excerpt.at.format("%Y-%m-%d %H:%M"),
            excerpt.score
        );
        println!("{}", excerpt.text);
    }
}

/// `[██████░░░░] 1234 / 8192 tokens (15%) · threshold 7372 (90%) · 12 messages · ... · log sessions/ID/messages.jsonl (3 KB) · ...`
pub fn usage_bar(c: &SessionContext) -> String {
    const WIDTH: usize = 30;
    let share = c.tokens as f64 / c.window.max(1) as f64;
    let filled = ((share * WIDTH as f64).round() as usize).min(WIDTH);
    let mark = ((c.threshold as f64 / c.window.max(1) as f64 * WIDTH as f64).round() as usize)
        .min(WIDTH.saturating_sub(1));
    let bar: String = (0..WIDTH)
        .map(|i| match (i < filled, i == mark) {
            (_, true) => '|',
            (true, false) => '█',
            (false, false) => '░',
        })
        .collect();
    let mut out = format!(
        "[{bar}] {} / {} tokens ({:.0}%) · threshold {} ({:.0}%) · {} messages · {} compressions · log {} ({}) · {} · mode {}\n",
        c.tokens,
        c.window,
        share * 100.0,
        c.threshold,
        c.threshold as f64 / c.window.max(1) as f64 * 100.0,
        c.messages,
        c.compressions,
        c.log,
        bytes(c.log_bytes),
        c.model,
        c.mode
    );
    if let Some(summary) = &c.summary {
        let kept = c.messages.saturating_sub(c.compacted_messages);
        out.push_str(&format!(
            "compacted: a summary of the first {} message(s), {kept} kept after it: {}\n",
            c.compacted_messages,
            commands::one_line(summary)
        ));
    }
    if let Some(governed) = &c.governed_summary {
        out.push_str(&format!(
            "the last request went with {} tokens: a summary of the first {} message(s), the rest kept: {}\n",
            c.sent_tokens.unwrap_or(0),
            governed.messages,
            commands::one_line(&governed.text)
        ));
    }
    out + &spending(&c.usage)
}

/// What a session's answers took and cost upstream, on one line.
pub fn spending(u: &UsageTotals) -> String {
    let cost = match (u.requests, u.unpriced_requests) {
        (0, _) => "nothing spent yet".to_owned(),
        (n, unpriced) if unpriced == n => "no price known for its model".to_owned(),
        (_, 0) => format!("${:.4}", u.cost_usd),
        (_, unpriced) => format!("${:.4} (+{unpriced} unpriced)", u.cost_usd),
    };
    let estimated = match u.estimated_requests {
        0 => String::new(),
        n => format!(" ({n} counted by mnemo)"),
    };
    format!(
        "spent: {} answer(s), {} prompt + {} completion tokens{estimated} · {cost}",
        u.requests, u.prompt_tokens, u.completion_tokens
    )
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn age(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[derive(Args)]
pub struct AgentMemoryArgs {
    #[command(subcommand)]
    command: AgentMemoryCommand,
}

#[derive(Subcommand)]
enum AgentMemoryCommand {
    /// Print an agent's notes (agents/AGENT/MEMORY.md)
    Read { agent: String },
    /// Append TEXT to an agent's notes ('-' reads it from stdin)
    Write {
        agent: String,
        /// The text (it may start with '-', as Markdown list items do)
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Replace one passage (which must occur exactly once) of an agent's notes
    Update {
        agent: String,
        /// The passage to replace
        #[arg(long, allow_hyphen_values = true)]
        old: String,
        /// What replaces it
        #[arg(long, allow_hyphen_values = true)]
        new: String,
    },
}

pub async fn agent_memory(global: &GlobalArgs, args: AgentMemoryArgs) -> CommandResult {
    let client = commands::open_client(global).await?;
    let text = match args.command {
        AgentMemoryCommand::Read { agent } => client.agent_memory(&agent).await?,
        AgentMemoryCommand::Write { agent, text } => {
            let text = if text == "-" {
                let mut buf = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
                    .map_err(|e| Failure::invalid(anyhow!("cannot read stdin: {e}")))?;
                buf
            } else {
                text
            };
            client.append_agent_memory(&agent, &text).await?
        }
        AgentMemoryCommand::Update { agent, old, new } => {
            client.update_agent_memory(&agent, &old, &new).await?
        }
    };
    print!("{text}");
    Ok(())
}

/// One line on what a compaction did, and why there is no summary when there is none.
pub(crate) fn describe_compaction(report: &CompactReport) -> String {
    let done = match &report.unsummarised {
        None => format!(
            "compacted {} message(s) into a summary",
            report.compacted_messages
        ),
        Some(why) => format!(
            "no summary could be written ({why}): dropped {} message(s) behind a marker instead",
            report.compacted_messages
        ),
    };
    format!(
        "{done}; {} kept; {} → {} tokens",
        report.kept_messages, report.tokens_before, report.tokens_after
    )
}
