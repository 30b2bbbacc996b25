//! `mnemo conflicts`: a conversation's facts that say different things of the same thing,
//! and their resolution by the person who knows which holds.

use std::sync::Arc;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use mnemo_core::{ConversationId, MemoryId};
use mnemo_engine::{Conflict, Memory, Resolution, Unrestricted};

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

#[derive(Args)]
pub struct ConflictsArgs {
    #[command(subcommand)]
    action: Option<ConflictsAction>,
    /// The conversation
    #[arg(short, long, default_value = ConversationId::DEFAULT, global = true)]
    conversation: String,
    /// Print the answer as JSON
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum ConflictsAction {
    /// Resolve one conflict: which fact holds
    Resolve {
        /// The earlier fact's id
        earlier: String,
        /// The later fact's id
        later: String,
        /// What holds: later, earlier or both
        #[arg(long)]
        keep: Resolution,
    },
}

pub async fn conflicts(global: &GlobalArgs, args: ConflictsArgs) -> CommandResult {
    let conversation = commands::conversation(&args.conversation)?;
    let client = commands::open_client(global).await?;
    let caller = client.as_caller(Arc::new(Unrestricted));
    match args.action {
        None => {
            let open = caller.conflicts(&conversation).await?;
            if args.json {
                return commands::print_json(&open);
            }
            if open.conflicts.is_empty() {
                println!("no conflicts in {conversation}");
            }
            for conflict in &open.conflicts {
                print_conflict(conflict);
            }
            Ok(())
        }
        Some(ConflictsAction::Resolve {
            earlier,
            later,
            keep,
        }) => {
            let resolved = caller
                .resolve_conflict(
                    &conversation,
                    memory_id(&earlier)?,
                    memory_id(&later)?,
                    keep,
                )
                .await?;
            if args.json {
                return commands::print_json(&resolved);
            }
            for memory in &resolved.kept {
                println!(
                    "kept     {}  {}",
                    memory.id,
                    commands::one_line(&memory.content)
                );
            }
            if let Some(retired) = &resolved.retired {
                println!(
                    "retired  {}  {}",
                    retired.id,
                    commands::one_line(&retired.content)
                );
            }
            if let Some(commit) = &resolved.commit {
                println!("commit   {commit}");
            }
            Ok(())
        }
    }
}

fn print_conflict(conflict: &Conflict) {
    let side = |label: &str, fact: &Memory, source: &Option<Memory>| {
        println!(
            "{label:<8} {}  {}  {}",
            fact.created_at.format("%Y-%m-%d %H:%M"),
            fact.id,
            commands::one_line(&fact.content)
        );
        if let Some(turn) = source {
            println!("{:<8} said: {}", "", commands::one_line(&turn.content));
        }
    };
    side("earlier", &conflict.earlier, &conflict.earlier_source);
    side("later", &conflict.later, &conflict.later_source);
    println!(
        "         resolve: mnemo conflicts resolve {} {} --keep later|earlier|both\n",
        conflict.earlier.id, conflict.later.id
    );
}

fn memory_id(raw: &str) -> Result<MemoryId, Failure> {
    raw.parse::<MemoryId>()
        .map_err(|_| Failure::invalid(anyhow!("{raw:?} is not a memory id (a UUID)")))
}
