//! The list of conversations, and one conversation's facts, turns and tombstones.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use mnemo_core::{ConversationId, MemoryId};
use mnemo_store::{FileStore, ListedFile, Location, MemoryKind, StoredMemory};
use serde::Deserialize;

use crate::page::WebError;
use crate::page::{layout, pager, respond, short, text_block, time, PageQuery};
use crate::state::{Viewer, WebState};

/// Memories per page of a conversation.
pub const PER_PAGE: usize = 50;

/// One line of the conversation list.
#[derive(Default)]
struct Overview {
    facts: usize,
    turns: usize,
    tombstones: usize,
    last_activity: Option<DateTime<Utc>>,
    summary: Option<String>,
}

/// `/ui/`: every conversation the viewer may read, most recently active first.
pub async fn index(State(state): State<WebState>, viewer: Viewer) -> Result<Response, WebError> {
    let overviews = state
        .client
        .as_caller(viewer.0.clone())
        .read_readable_conversations(|store, readable| {
            readable
                .into_iter()
                .filter_map(|c| {
                    let overview = overview(store, &c);
                    let empty = overview.facts + overview.turns + overview.tombstones == 0
                        && overview.summary.is_none();
                    (!empty).then_some((c, overview))
                })
                .collect::<BTreeMap<_, _>>()
        })
        .await?;
    let mut rows: Vec<_> = overviews.into_iter().collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1.last_activity));
    let body = html! {
        h1 { "Conversations" }
        @if rows.is_empty() {
            p.empty { "No memories yet. Chat through mnemo, or add one over the REST API or MCP." }
        } @else {
            table.conversations {
                thead { tr { th { "Conversation" } th { "Facts" } th { "Turns" } th { "Tombstones" } th { "Last activity" } th { "Summary" } } }
                tbody {
                    @for (conversation, o) in &rows {
                        tr {
                            td { a href={ "/ui/conversations/" (conversation.as_str()) } { (conversation.as_str()) } }
                            td.num { (o.facts) }
                            td.num { (o.turns) }
                            td.num { (o.tombstones) }
                            td { @if let Some(at) = o.last_activity { (time(at)) } }
                            td.summary { @if let Some(summary) = &o.summary { (preview(summary)) } }
                        }
                    }
                }
            }
        }
    };
    Ok(respond(StatusCode::OK, layout("Conversations", body)))
}

/// Which memories of a conversation a page lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Show {
    /// Facts.
    #[default]
    Facts,
    /// The user's and the assistant's turns.
    Turns,
    /// Tombstones: facts and turns deleted or replaced.
    Deleted,
}

impl Show {
    fn name(self) -> &'static str {
        match self {
            Show::Facts => "facts",
            Show::Turns => "turns",
            Show::Deleted => "deleted",
        }
    }
}

/// The query of a conversation page.
#[derive(Debug, Deserialize)]
pub struct ConversationQuery {
    #[serde(default)]
    show: Show,
    page: Option<usize>,
}

/// `/ui/conversations/{conversation}`: its summary, then its facts, turns or tombstones,
/// newest first, [`PER_PAGE`] at a time.
pub async fn one(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(name): Path<String>,
    PageQuery(query): PageQuery<ConversationQuery>,
) -> Result<Response, WebError> {
    let conversation = conversation_id(&name)?;
    let page = query.page.unwrap_or(1).max(1);
    let caller = state.client.as_caller(viewer.0.clone());
    let scoped = caller.conversation(&conversation);
    let show = query.show;
    let listing = scoped
        .read_files(move |store, c| gather(store, c, show, page))
        .await?;
    if !listing.exists {
        return Err(WebError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no conversation {:?}: it has no memories",
                conversation.as_str()
            ),
        ));
    }
    let reasons = match query.show {
        Show::Deleted => deletion_reasons(&scoped).await,
        _ => HashMap::new(),
    };
    let Listing {
        total,
        items,
        summary,
        replacements,
        ..
    } = listing;
    let base = format!(
        "/ui/conversations/{}?show={}",
        conversation.as_str(),
        query.show.name()
    );
    let body = html! {
        h1 { "Conversation " code { (conversation.as_str()) } }
        section.summary {
            h2 { "Rolling summary" }
            @match &summary {
                Some(summary) => { (text_block(summary)) }
                None => { p.empty { "No summary yet." } }
            }
        }
        form.search method="get" action="/ui/search" {
            input type="hidden" name="conversation" value=(conversation.as_str());
            input type="search" name="q" placeholder="Search this conversation" aria-label="query";
            button type="submit" { "Search" }
        }
        nav.tabs {
            @for show in [Show::Facts, Show::Turns, Show::Deleted] {
                @if show == query.show {
                    strong { (show.name()) }
                } @else {
                    a href={ "/ui/conversations/" (conversation.as_str()) "?show=" (show.name()) } { (show.name()) }
                }
            }
            a href={ "/ui/conversations/" (conversation.as_str()) "/conflicts" } { "conflicts" }
        }
        p.count { (total) " " (query.show.name()) ", newest first" }
        @for memory in &items {
            (memory_card(memory, &reasons, &replacements))
        }
        (pager(&base, page, PER_PAGE, total))
    };
    Ok(respond(
        StatusCode::OK,
        layout(&format!("Conversation {}", conversation.as_str()), body),
    ))
}

/// One memory in a list: what it says, when, its front matter, and for a tombstone what
/// replaced it and why.
fn memory_card(
    memory: &StoredMemory,
    reasons: &HashMap<MemoryId, String>,
    replacements: &HashMap<MemoryId, String>,
) -> Markup {
    let record = &memory.record;
    let id = record.id.to_string();
    let tombstone = record.deleted_at.is_some();
    html! {
        article.memory.tombstone[tombstone] id={ "m-" (id) } {
            header {
                span.role { (record.role.as_str()) }
                " "
                a.id href={ "/ui/memories/" (id) } title=(id) { (short(&id)) }
                " · " time { (time(record.created_at)) }
                @if tombstone { " · " span.badge { "tombstone" } }
            }
            (text_block(&record.content))
            @if let Some(deleted_at) = record.deleted_at {
                p.why {
                    @match record.replaced_by {
                        Some(new) => {
                            "Replaced " (time(deleted_at)) " by "
                            a href={ "/ui/memories/" (new) } { (short(&new.to_string())) }
                            @if let Some(text) = replacements.get(&new) { ": “" (text) "”" }
                        }
                        None => { "Deleted " (time(deleted_at)) }
                    }
                    @if let Some(reason) = reasons.get(&record.id) {
                        br; "Why: " span.commit { (reason) }
                    }
                }
            }
            details.front-matter {
                summary { "front matter" }
                pre { (front_matter(record)) }
            }
        }
    }
}

/// A record's front matter as mnemo writes it.
pub fn front_matter(record: &mnemo_core::MemoryRecord) -> String {
    let file = mnemo_store::format::render(record);
    let yaml = file.strip_prefix("---\n").unwrap_or(&file);
    match yaml.find("\n---\n") {
        Some(end) => yaml[..end].to_owned(),
        None => yaml.to_owned(),
    }
}

/// Page `page` of the conversation's memories of kind `show`, newest first, and what the
/// page shows around them (blocking: it lists and reads files).
fn gather(store: &FileStore, c: &ConversationId, show: Show, page: usize) -> Listing {
    let kinds: &[MemoryKind] = match show {
        Show::Facts => &[MemoryKind::Fact],
        Show::Turns => &[MemoryKind::UserTurn, MemoryKind::AssistantTurn],
        Show::Deleted => &MemoryKind::ALL,
    };
    let files = newest_first(store, c, kinds, show == Show::Deleted);
    let total = files.len();
    let start = (page - 1).saturating_mul(PER_PAGE).min(total);
    let items: Vec<StoredMemory> = files[start..(start + PER_PAGE).min(total)]
        .iter()
        .filter_map(|path| store.read(path).ok())
        .collect();
    let summary = store.read(&store.summary_path(c)).ok();
    let exists = total > 0
        || summary.is_some()
        || MemoryKind::ALL.iter().any(|kind| {
            [false, true]
                .into_iter()
                .any(|deleted| !store.listed_files(c, *kind, deleted).is_empty())
        });
    // What replaced a tombstone on this page, when it is still live (the facts listed once).
    let wanted: Vec<MemoryId> = items.iter().filter_map(|m| m.record.replaced_by).collect();
    let replacements = match wanted.is_empty() {
        true => HashMap::new(),
        false => live_texts(store, c, &wanted),
    };
    Listing {
        total,
        items,
        summary: summary.map(|m| m.record.content),
        exists,
        replacements,
    }
}

/// Characters of a summary the conversation list shows.
const SUMMARY_PREVIEW_CHARS: usize = 300;

/// The start of `text`, cut at a character boundary, with an ellipsis when cut.
fn preview(text: &str) -> String {
    match text.char_indices().nth(SUMMARY_PREVIEW_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// What a conversation page shows, gathered off the async threads.
struct Listing {
    total: usize,
    items: Vec<StoredMemory>,
    summary: Option<String>,
    exists: bool,
    replacements: HashMap<MemoryId, String>,
}

/// One conversation's line in the list, from file names (only the summary and files a
/// person named are read).
fn overview(store: &FileStore, conversation: &ConversationId) -> Overview {
    let live = |kind| store.listed_files(conversation, kind, false);
    let facts = live(MemoryKind::Fact);
    let turns: Vec<ListedFile> = [MemoryKind::UserTurn, MemoryKind::AssistantTurn]
        .into_iter()
        .flat_map(live)
        .collect();
    let summary = store.read(&store.summary_path(conversation)).ok();
    let last_activity = facts
        .iter()
        .chain(&turns)
        .filter_map(|f| f.named_time)
        .chain(summary.as_ref().map(|s| s.record.created_at))
        .max();
    Overview {
        facts: facts.len(),
        turns: turns.len(),
        tombstones: MemoryKind::ALL
            .iter()
            .map(|kind| store.listed_files(conversation, *kind, true).len())
            .sum(),
        last_activity,
        summary: summary.map(|s| s.record.content),
    }
}

/// The files of `kinds`, newest first by the time their names carry; a file a person
/// named is read for its `created_at` (one that cannot be read is left out, as the scan
/// leaves it out, with a warning in the log).
fn newest_first(
    store: &FileStore,
    conversation: &ConversationId,
    kinds: &[MemoryKind],
    deleted: bool,
) -> Vec<PathBuf> {
    let mut timed: Vec<(DateTime<Utc>, PathBuf)> = kinds
        .iter()
        .flat_map(|kind| store.listed_files(conversation, *kind, deleted))
        .filter_map(|file| match file.named_time {
            Some(at) => Some((at, file.path)),
            None => store
                .read(&file.path)
                .ok()
                .map(|m| (m.record.created_at, file.path)),
        })
        .collect();
    timed.sort_by(|a, b| b.cmp(a));
    timed.into_iter().map(|(_, path)| path).collect()
}

/// The texts of the live facts of `conversation` among `ids`, found by their file names.
fn live_texts(
    store: &FileStore,
    conversation: &ConversationId,
    ids: &[MemoryId],
) -> HashMap<MemoryId, String> {
    store
        .listed_files(conversation, MemoryKind::Fact, false)
        .into_iter()
        .filter_map(|file| {
            let id = file.named_id.filter(|id| ids.contains(id))?;
            Some((id, file.path))
        })
        .filter_map(|(id, path)| store.read(&path).ok().map(|m| (id, m.record.content)))
        .collect()
}

/// Commits of the conversation walked for why its memories were deleted.
const REASON_COMMITS: usize = 500;

/// For the tombstones of `conversation` that its recent history moved: the commit message
/// that did it (a correction, a retraction, an eviction, a delete on request), by memory id.
async fn deletion_reasons(
    conversation: &mnemo_engine::ScopedConversation<'_>,
) -> HashMap<MemoryId, String> {
    let Ok(commits) = conversation.log(REASON_COMMITS).await else {
        return HashMap::new();
    };
    let mut reasons = HashMap::new();
    for commit in commits {
        for change in &commit.changes {
            // A file moved into `deleted/`, named by its id.
            let tombstoned = (change.status == mnemo_git::ChangeStatus::Renamed)
                .then(|| Location::parse(&change.path))
                .flatten()
                .filter(|location| location.tombstone)
                .and_then(|location| location.name_parts().0);
            if let Some(id) = tombstoned {
                let line = commit.message.lines().next().unwrap_or_default();
                reasons
                    .entry(id)
                    .or_insert_with(|| format!("{line} ({}, {})", commit.author, commit.short_id));
            }
        }
    }
    reasons
}

/// `name` as a conversation id, or a 400 saying why it is not one.
pub fn conversation_id(name: &str) -> Result<ConversationId, WebError> {
    ConversationId::new(name).map_err(|e| WebError::bad_request(format!("conversation: {e}")))
}
