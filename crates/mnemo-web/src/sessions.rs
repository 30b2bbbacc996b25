//! Chat sessions: the list with each one's context usage, and one session's full log with
//! what governance compacted or offloaded marked.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use mnemo_engine::SessionId;
use mnemo_session::history::message_text;
use serde::Deserialize;
use serde_json::Value;

use crate::page::WebError;
use crate::page::{layout, pager, respond, text_block, time, usage_bar, PageQuery};
use crate::state::{Viewer, WebState};

/// Messages per page of a session's log.
pub const PER_PAGE: usize = 100;

/// `/ui/sessions`: the sessions the viewer may read, most recently used first.
pub async fn index(State(state): State<WebState>, viewer: Viewer) -> Result<Response, WebError> {
    let mut sessions = state
        .client
        .as_caller(viewer.0.clone())
        .sessions()
        .list(None, false)
        .await?;
    sessions.sort_by_key(|s| std::cmp::Reverse(s.1.updated_at));
    let body = html! {
        h1 { "Sessions" }
        @if sessions.is_empty() {
            p.empty { "No chat sessions yet (they start with a session id on a chat request, or with mnemo chat)." }
        } @else {
            table.sessions {
                thead { tr { th { "Session" } th { "Conversation" } th { "Messages" } th { "Context (last request)" } th { "Compressions" } th { "Updated" } } }
                tbody {
                    @for (id, meta) in &sessions {
                        tr {
                            td { a href={ "/ui/sessions/" (id.as_str()) } { (meta.title) } br; code { (id.as_str()) } }
                            td { (conversation_link(&meta.conversation)) }
                            td.num { (meta.messages) }
                            td {
                                @match (meta.tokens, meta.window) {
                                    (Some(tokens), Some(window)) => { (usage_bar(tokens as u64, window, window)) }
                                    _ => { span.none { "–" } }
                                }
                            }
                            td.num { (meta.compressions) }
                            td { (time(meta.updated_at)) }
                        }
                    }
                }
            }
        }
    };
    Ok(respond(StatusCode::OK, layout("Sessions", body)))
}

/// The query of a session page.
#[derive(Debug, Deserialize)]
pub struct SessionQuery {
    page: Option<usize>,
}

/// `/ui/sessions/{id}`: its context usage, then its current branch message by message.
pub async fn one(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(id): Path<String>,
    PageQuery(query): PageQuery<SessionQuery>,
) -> Result<Response, WebError> {
    let id = SessionId::new(&id).map_err(|e| WebError::bad_request(format!("session: {e}")))?;
    let client = &state.client;
    let caller = client.as_caller(viewer.0.clone());
    let sessions = caller.sessions();
    let info = sessions.get(&id).await?;
    let context = sessions.context(&id).await?;
    let page = query.page.unwrap_or(1).max(1);
    let messages = sessions
        .messages(&id, (page - 1).saturating_mul(PER_PAGE), PER_PAGE, false)
        .await?;
    let calls = messages
        .messages
        .iter()
        .filter_map(|m| m.message["tool_call_id"].as_str().map(str::to_owned))
        .collect();
    let offloaded = sessions.offloaded_calls(&id, calls).await?;
    let base = format!("/ui/sessions/{}", id.as_str());
    let body = html! {
        h1 { (info.meta.title) }
        p {
            code { (id.as_str()) } " · conversation " (conversation_link(&info.meta.conversation))
            @if let Some(agent) = &info.meta.agent { " · agent " code { (agent) } }
            @if let Some(parent) = &info.meta.parent {
                " · forked from "
                @if SessionId::new(parent).is_ok() {
                    a href={ "/ui/sessions/" (parent) } { code { (parent) } }
                } @else {
                    code { (parent) }
                }
            }
        }
        section.context {
            h2 { "Context" }
            p {
                (usage_bar(context.tokens as u64, context.window, context.threshold))
                " " (context.tokens) " of " (context.window) " tokens (" (context.model) ", counted with " (context.counter) "); compaction at " (context.threshold)
            }
            p.usage {
                "Spent upstream: " (context.usage.requests) " answers, " (context.usage.prompt_tokens) " prompt + " (context.usage.completion_tokens) " completion tokens"
                @if context.usage.estimated_requests > 0 { " (" (context.usage.estimated_requests) " counted by mnemo)" }
                @if context.usage.requests > context.usage.unpriced_requests { "; $" (format!("{:.4}", context.usage.cost_usd)) }
                @if context.usage.unpriced_requests > 0 { "; " (context.usage.unpriced_requests) " with no known price" }
            }
            p { (context.compressions) " compressions; the first " (context.compacted_messages) " of " (context.messages) " messages go upstream as a summary; " (context.logged_messages) " messages logged in all" }
        }
        h2 { "Log" }
        @for logged in &messages.messages {
            (message(logged.index, logged.at, &logged.message, logged.index < context.compacted_messages, &offloaded))
        }
        (pager(&base, page, PER_PAGE, messages.total))
    };
    Ok(respond(StatusCode::OK, layout(&info.meta.title, body)))
}

/// A link to a conversation named in a session's (hand-editable) metadata; a name that is
/// no conversation id is shown as text.
fn conversation_link(name: &str) -> Markup {
    html! {
        @if mnemo_core::ConversationId::new(name).is_ok() {
            a href={ "/ui/conversations/" (name) } { (name) }
        } @else {
            code { (name) }
        }
    }
}

/// One logged message, marked when compaction covers it or its tool output was offloaded.
fn message(
    index: usize,
    at: chrono::DateTime<chrono::Utc>,
    message: &Value,
    compacted: bool,
    offloaded: &std::collections::HashSet<String>,
) -> Markup {
    let role = message["role"].as_str().unwrap_or("?");
    let call_id = message["tool_call_id"].as_str();
    let is_offloaded = call_id.is_some_and(|c| offloaded.contains(c));
    html! {
        article.message.compacted[compacted].offloaded[is_offloaded] id={ "msg-" (index) } {
            header {
                span.role { (role) } " #" (index) " · " (time(at))
                @if compacted { " · " span.badge title="sent upstream as part of the compaction's summary" { "compacted" } }
                @if is_offloaded { " · " span.badge title="its output is kept on disk; upstream got a preview and a pointer" { "offloaded" } }
                @if let Some(call) = call_id { " · call " code { (call) } }
            }
            (text_block(&message_text(message)))
        }
    }
}
