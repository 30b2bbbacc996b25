//! The search page: the production read path, with each stage's score per hit.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use mnemo_engine::{SearchHit, SearchRequest};
use serde::Deserialize;

use crate::conversations::conversation_id;
use crate::page::WebError;
use crate::page::{layout, respond, short, time, PageQuery};
use crate::state::{Viewer, WebState};

/// The longest query accepted, in bytes: the engine's, for every front end.
pub use mnemo_core::MAX_QUERY_BYTES;

/// The search form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    conversation: String,
}

/// `/ui/search?q=…&conversation=…`: the form, and once both are given, the hits.
pub async fn page(
    State(state): State<WebState>,
    viewer: Viewer,
    PageQuery(query): PageQuery<SearchQuery>,
) -> Result<Response, WebError> {
    let hits = if query.q.trim().is_empty() || query.conversation.is_empty() {
        None
    } else {
        if query.q.len() > MAX_QUERY_BYTES {
            return Err(WebError::bad_request(format!(
                "a query holds at most {MAX_QUERY_BYTES} bytes"
            )));
        }
        let request = SearchRequest {
            query: query.q.clone(),
            conversation_id: conversation_id(&query.conversation)?,
            ..SearchRequest::default()
        };
        Some(
            state
                .client
                .as_caller(viewer.0.clone())
                .search(request)
                .await?
                .hits,
        )
    };
    let body = html! {
        h1 { "Search" }
        form.search method="get" action="/ui/search" {
            input type="search" name="q" value=(query.q) placeholder="What to recall" aria-label="query";
            input type="text" name="conversation" value=(query.conversation) placeholder="conversation" aria-label="conversation" required;
            button type="submit" { "Search" }
        }
        @if let Some(hits) = &hits {
            p.count { (hits.len()) " hits, best first (after MMR): why each ranked" }
            (hits_table(hits))
        } @else {
            p.hint { "The same read path the proxy injects from: dense and lexical search, fusion, the cross-encoder, recency and MMR." }
        }
    };
    Ok(respond(StatusCode::OK, layout("Search", body)))
}

fn score(value: Option<f32>) -> Markup {
    html! {
        @match value {
            Some(v) => { (format!("{v:.3}")) }
            None => { span.none title="this stage did not find or score it" { "–" } }
        }
    }
}

fn hits_table(hits: &[SearchHit]) -> Markup {
    html! {
        table.hits {
            thead {
                tr {
                    th { "MMR rank" } th { "Memory" } th { "Dense" } th { "Lexical" } th { "Fused" }
                    th { "Rerank" } th { "Recency" } th { "Combined" }
                }
            }
            tbody {
                @for (rank, hit) in hits.iter().enumerate() {
                    tr {
                        td.num { (rank + 1) }
                        td {
                            span.role { (hit.role.as_str()) } " "
                            a href={ "/ui/memories/" (hit.id) } title=(hit.id) { (short(&hit.id.to_string())) }
                            " · " (time(hit.created_at))
                            @if hit.conversation_id.as_str() == "global" { " · " span.badge { "global" } }
                            @if hit.scores.low_information {
                                " · " span.badge title="only filler, or only what the turn it answers said: ranked after every memory that says something" { "says nothing new" }
                            }
                            div.content { (hit.content) }
                        }
                        td.num { (score(hit.scores.dense)) }
                        td.num { (score(hit.scores.lexical)) }
                        td.num { (score(Some(hit.scores.fused))) }
                        td.num { (score(hit.scores.rerank)) }
                        td.num { (score(Some(hit.scores.recency))) }
                        td.num { (score(Some(hit.scores.combined))) }
                    }
                }
            }
        }
    }
}
