//! `mnemo log` and `mnemo show`: the git history of the memories.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use mnemo_git::Shown;

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

#[derive(Args)]
pub struct LogArgs {
    /// Only changes to this conversation
    #[arg(short, long)]
    conversation: Option<String>,
    /// How many commits
    #[arg(short = 'n', long, default_value_t = 20)]
    limit: usize,
    /// Print the commits as JSON
    #[arg(long)]
    json: bool,
}

pub async fn log(global: &GlobalArgs, args: LogArgs) -> CommandResult {
    let conversation = args
        .conversation
        .as_deref()
        .map(|c| mnemo_core::ConversationId::new(c).map_err(|e| Failure::invalid(anyhow!(e))))
        .transpose()?;
    let client = commands::open_client(global).await?;
    let commits = client.log(conversation, args.limit).await?;
    if args.json {
        return commands::print_json(&commits);
    }
    for commit in &commits {
        println!(
            "{}  {}  {}",
            commit.short_id,
            commit.time.format("%Y-%m-%d %H:%M:%S"),
            commit.message.lines().next().unwrap_or_default()
        );
        for change in &commit.changes {
            println!("    {:?}  {}", change.status, change.path.display());
        }
    }
    Ok(())
}

#[derive(Args)]
pub struct ShowArgs {
    /// A revision (hash, HEAD~2, ...), optionally with a file: REV:entries/conv/facts/x.md
    target: String,
    /// Print as JSON
    #[arg(long)]
    json: bool,
}

pub async fn show(global: &GlobalArgs, args: ShowArgs) -> CommandResult {
    let (rev, path) = match args.target.split_once(':') {
        Some((rev, path)) => (rev.to_owned(), Some(PathBuf::from(path))),
        None => (args.target.clone(), None),
    };
    let client = commands::open_client(global).await?;
    let shown = client
        .show(rev, path)
        .await
        .map_err(|e| Failure::invalid(anyhow!(e)))?;
    if args.json {
        return commands::print_json(&shown);
    }
    match shown {
        Shown::Commit(commit) => {
            println!("commit {}", commit.id);
            println!("Author: {}", commit.author);
            println!("Date:   {}", commit.time.to_rfc3339());
            println!("\n    {}\n", commit.message.trim());
            for change in &commit.changes {
                println!("{:?}  {}", change.status, change.path.display());
            }
        }
        Shown::File { content, .. } => print!("{content}"),
    }
    Ok(())
}
