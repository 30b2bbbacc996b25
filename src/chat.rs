//! `mnemo chat`: a terminal chat on the memory engine, with the local LLM by default (or the
//! configured upstream).
//!
//! Every message goes through the same path as the proxy's (`MemoryClient::chat`, streamed) in
//! a session with server-side history: long-term memories and the session's governed history
//! both feed each turn, and the answer is printed as it streams. Lines starting with `/` are
//! commands (`/help`). Ctrl-C during an answer stops it (the part received is logged, marked
//! incomplete); Ctrl-C or EOF at the prompt leaves. Either way the log stays consistent: each
//! message is appended whole and fsynced.

use std::io::{BufRead, Write};

use anyhow::anyhow;
use clap::Args;
use futures_util::StreamExt;
use mnemo_core::ConversationId;
use mnemo_engine::{ChatReply, HistoryScope, MemoryClient, SessionId};
use mnemo_llm::{SseEvent, SseParser};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::commands::{self, CommandResult, Failure, GlobalArgs};
use crate::sessions::{print_excerpts, render_message, session_id, session_table, usage_bar};

#[derive(Args)]
pub struct ChatArgs {
    /// Continue a session: the most recent one, or ID
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    resume: Option<String>,
    /// With --resume: continue in a copy of the session, leaving it as it was
    #[arg(long, requires = "resume")]
    fork: bool,
    /// The conversation whose long-term memories feed the chat [default: default, or the
    /// resumed session's]
    #[arg(short, long)]
    conversation: Option<String>,
    /// The agent whose notes (agents/AGENT/MEMORY.md) and strategy apply
    #[arg(long)]
    agent: Option<String>,
    /// The upstream model [default: the configured llm_model]
    #[arg(long)]
    model: Option<String>,
    /// Do not start the local LLM when no upstream is configured
    #[arg(long)]
    no_local_llm: bool,
}

const HELP: &str = "\
/compact [focus]  summarise older messages now (with an optional focus)
/context          how full the context is: tokens / window, threshold, messages, compressions, log size
/sessions         list sessions, newest first
/resume ID        continue session ID
/clear            start a new session (this one is kept: /resume ID returns to it)
/delete ID        delete session ID (its log stays on disk)
/memory           what long-term memory holds for this conversation (and the agent's notes)
/search QUERY     search everything said in this conversation's sessions
/help             this list
/quit             leave (so do Ctrl-D, and Ctrl-C at the prompt)";

/// The chat's state: the engine, the session and what every request carries.
struct Chat {
    client: MemoryClient,
    session: SessionId,
    conversation: Option<ConversationId>,
    agent: Option<String>,
    model: String,
}

pub async fn chat(global: &GlobalArgs, args: ChatArgs) -> CommandResult {
    let mut config = commands::load_config(global)?;
    let conversation = args
        .conversation
        .as_deref()
        .map(ConversationId::new)
        .transpose()
        .map_err(|e| Failure::invalid(anyhow!(e)))?;
    let (local, upstream) = crate::serve::start_upstream(&mut config, !args.no_local_llm).await?;
    let model = args
        .model
        .clone()
        .unwrap_or_else(|| config.llm_model.clone());
    let client = commands::open_with_config(config, false).await?;
    let result = run(client.clone(), args, conversation, model, &upstream).await;
    client.wait_idle().await;
    if let Some(llm) = local {
        llm.stop().await;
    }
    result
}

async fn run(
    client: MemoryClient,
    args: ChatArgs,
    conversation: Option<ConversationId>,
    model: String,
    upstream: &str,
) -> CommandResult {
    let session = match args.resume.as_deref() {
        None => SessionId::generate(),
        Some("") => most_recent(&client).await?,
        Some(id) => session_id(id)?,
    };
    let mut chat = Chat {
        client,
        session,
        conversation,
        agent: args.agent,
        model,
    };
    if args.resume.is_some() {
        chat.show_history().await?;
        if args.fork {
            let (forked, _) = chat.client.fork_session(&chat.session, None).await?;
            println!("(forked {} as {forked})", chat.session);
            chat.session = forked;
        }
    }
    println!(
        "mnemo chat · session {} · upstream {upstream} · /help for commands",
        chat.session
    );
    let mut lines = spawn_stdin_reader();
    loop {
        prompt();
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else {
            println!();
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let outcome = match line.strip_prefix('/') {
            Some(command) => chat.command(command).await,
            None => chat.say(line).await.map(|()| true),
        };
        match outcome {
            Ok(true) => {}
            Ok(false) => break,
            Err(failure) => eprintln!("error: {:#}", failure.error),
        }
    }
    println!(
        "session {} saved; `mnemo chat --resume {}` continues it",
        chat.session, chat.session
    );
    Ok(())
}

fn prompt() {
    print!("you> ");
    let _ = std::io::stdout().flush();
}

/// Lines from stdin, read on their own thread; the channel closes at EOF.
fn spawn_stdin_reader() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

async fn most_recent(client: &MemoryClient) -> Result<SessionId, Failure> {
    client
        .list_sessions(false)
        .await?
        .into_iter()
        .next()
        .map(|(id, _)| id)
        .ok_or_else(|| Failure::invalid(anyhow!("there is no session to resume")))
}

impl Chat {
    /// Sends one user message and prints the answer as it streams; Ctrl-C stops it (the
    /// part received so far is logged, marked incomplete).
    async fn say(&mut self, text: &str) -> CommandResult {
        tokio::select! {
            said = self.send(text) => said,
            _ = tokio::signal::ctrl_c() => {
                println!("\n(stopped; the part received is kept)");
                Ok(())
            }
        }
    }

    async fn send(&self, text: &str) -> CommandResult {
        let mut body = json!({
            "model": self.model,
            "stream": true,
            "messages": [{"role": "user", "content": text}],
            "memory_session": self.session.as_str(),
            "memory_history": "server",
        });
        if let Some(conversation) = &self.conversation {
            body["memory_id"] = json!(conversation.as_str());
        }
        if let Some(agent) = &self.agent {
            body["memory_agent"] = json!(agent);
        }
        let ChatReply::Stream(reply) = self.client.chat(body).await? else {
            return Err(anyhow!("a streamed chat came back whole").into());
        };
        if reply.status != 200 {
            let mut bytes = Vec::new();
            let mut stream = reply.body;
            while let Some(Ok(chunk)) = stream.next().await {
                bytes.extend_from_slice(&chunk);
            }
            return Err(anyhow!(
                "the upstream answered {}: {}",
                reply.status,
                String::from_utf8_lossy(&bytes)
            )
            .into());
        }
        print!("assistant> ");
        let _ = std::io::stdout().flush();
        let mut stream = reply.body;
        let mut parser = SseParser::new();
        loop {
            match stream.next().await {
                Some(Ok(bytes)) => print_deltas(parser.feed(&bytes)),
                Some(Err(e)) => return Err(anyhow!("the answer broke off: {e}").into()),
                None => break,
            }
        }
        print_deltas(parser.finish());
        println!();
        Ok(())
    }

    /// Runs a slash command; `Ok(false)` to leave.
    async fn command(&mut self, command: &str) -> Result<bool, Failure> {
        let (name, arg) = match command.split_once(char::is_whitespace) {
            Some((name, arg)) => (name, arg.trim()),
            None => (command, ""),
        };
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" | "h" | "?" => println!("{HELP}"),
            "context" => match self.client.session_context(&self.session).await {
                Ok(context) => println!("{}", usage_bar(&context)),
                Err(e) if e.is_not_found() => {
                    println!("the session starts with your first message")
                }
                Err(e) => return Err(e.into()),
            },
            "compact" => {
                let focus = (!arg.is_empty()).then(|| arg.to_owned());
                let report = self.client.compact_session(&self.session, focus).await?;
                println!("{}", crate::sessions::describe_compaction(&report));
            }
            "sessions" => print!(
                "{}",
                session_table(&self.client.list_sessions(false).await?)
            ),
            "resume" => {
                if arg.is_empty() {
                    println!("usage: /resume ID");
                } else {
                    let id = session_id(arg)?;
                    self.client.session(&id).await?;
                    self.session = id;
                    self.show_history().await?;
                }
            }
            "clear" => {
                let old = std::mem::replace(&mut self.session, SessionId::generate());
                match self.client.session(&old).await {
                    Ok(_) => println!(
                        "new session {}; {old} is kept (/resume {old} returns to it)",
                        self.session
                    ),
                    Err(e) if e.is_not_found() => println!("new session {}", self.session),
                    Err(e) => return Err(e.into()),
                }
            }
            "delete" => {
                if arg.is_empty() {
                    println!("usage: /delete ID");
                } else {
                    let id = session_id(arg)?;
                    self.client.delete_session(&id).await?;
                    println!("deleted session {id}");
                    if id == self.session {
                        self.session = SessionId::generate();
                        println!("(new session {})", self.session);
                    }
                }
            }
            "memory" => self.show_memory().await?,
            "search" => {
                if arg.is_empty() {
                    println!("usage: /search QUERY");
                } else {
                    let scope = HistoryScope::Conversation(self.conversation_id().await);
                    print_excerpts(&self.client.search_history(scope, arg, 10).await?);
                }
            }
            other => println!("unknown command /{other}; /help lists them"),
        }
        Ok(true)
    }

    /// The conversation the session feeds: named, the session's, or `default`.
    async fn conversation_id(&self) -> ConversationId {
        if let Some(c) = &self.conversation {
            return c.clone();
        }
        match self.client.session(&self.session).await {
            Ok(info) => ConversationId::new(&info.meta.conversation)
                .unwrap_or_else(|_| ConversationId::default_conversation()),
            Err(_) => ConversationId::default_conversation(),
        }
    }

    async fn show_history(&self) -> CommandResult {
        let info = self.client.session(&self.session).await?;
        let offset = info.branch_messages.saturating_sub(10);
        let page = self
            .client
            .session_messages(&self.session, offset, 10, false)
            .await?;
        println!(
            "resuming {} \"{}\" ({} messages)",
            info.id, info.meta.title, info.branch_messages
        );
        for logged in &page.messages {
            println!("{}", render_message(&logged.message));
        }
        Ok(())
    }

    async fn show_memory(&self) -> CommandResult {
        let conversation = self.conversation_id().await;
        let memories: Vec<_> = self
            .client
            .list(Some(conversation.clone()))
            .await?
            .into_iter()
            .filter(|m| m.record.role == mnemo_core::Role::Memory)
            .collect();
        println!(
            "long-term memory of {conversation}: {} fact(s)",
            memories.len()
        );
        for memory in memories.iter().rev().take(20) {
            println!("- {}", memory.record.content.trim());
        }
        if let Some(agent) = &self.agent {
            let notes = self.client.agent_memory(agent).await?;
            println!("notes of agent {agent} (agents/{agent}/MEMORY.md):");
            println!(
                "{}",
                if notes.trim().is_empty() {
                    "(empty)"
                } else {
                    notes.trim_end()
                }
            );
        }
        Ok(())
    }
}

/// Prints the text of streamed chunks as it arrives.
fn print_deltas(events: Vec<SseEvent>) {
    let mut out = std::io::stdout().lock();
    for event in events {
        let SseEvent::Data(data) = event else {
            continue;
        };
        let Ok(chunk) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if let Some(text) = chunk["choices"][0]["delta"]["content"].as_str() {
            let _ = out.write_all(text.as_bytes());
        }
    }
    let _ = out.flush();
}
