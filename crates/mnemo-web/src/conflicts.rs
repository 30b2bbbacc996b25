//! A conversation's conflicts: pairs of live facts about the same thing of the same person
//! that say different things, side by side with their days and the turns they came from,
//! each with the three ways a person resolves it (`mnemo_engine::Resolution`).

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use mnemo_engine::{Conflict, Memory, Resolution};
use serde::Deserialize;

use crate::conversations::conversation_id;
use crate::memories::memory_id;
use crate::page::WebError;
use crate::page::{form_token, layout, respond, text_block, time};
use crate::state::{Viewer, WebState};

/// `/ui/conversations/{conversation}/conflicts`: every open conflict, earliest first.
pub async fn page(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, WebError> {
    let conversation = conversation_id(&name)?;
    let open = state
        .client
        .as_caller(viewer.0.clone())
        .conflicts(&conversation)
        .await?;
    let back = format!("/ui/conversations/{}", conversation.as_str());
    let body = html! {
        h1 { "Conflicts in " a href=(back) { code { (conversation.as_str()) } } }
        p.hint {
            "Facts about the same thing that say different things. Until you choose, the later one "
            "holds: chats see both, the earlier marked as superseded."
        }
        @if open.conflicts.is_empty() {
            p.empty { "No open conflicts." }
        }
        @for conflict in &open.conflicts {
            (conflict_entry(conflict, &name, &state.form_token))
        }
    };
    Ok(respond(
        axum::http::StatusCode::OK,
        layout(&format!("Conflicts · {}", conversation.as_str()), body),
    ))
}

fn conflict_entry(conflict: &Conflict, conversation: &str, token: &str) -> Markup {
    let side = |label: &str, fact: &Memory, source: &Option<Memory>| {
        html! {
            div.side {
                h3 { (label) " · " (time(fact.created_at)) }
                p { a href={ "/ui/memories/" (fact.id) } { (fact.content) } }
                @if let Some(turn) = source {
                    p.hint { "From the " (turn.role.as_str()) "'s turn:" }
                    (text_block(&turn.content))
                }
            }
        }
    };
    let choice = |resolution: &str, label: &str| {
        html! {
            form.resolve method="post" action={ "/ui/conversations/" (conversation) "/conflicts/resolve" } {
                (form_token(token))
                input type="hidden" name="earlier" value=(conflict.earlier.id);
                input type="hidden" name="later" value=(conflict.later.id);
                input type="hidden" name="resolution" value=(resolution);
                button type="submit" { (label) }
            }
        }
    };
    html! {
        section.conflict {
            (side("Earlier", &conflict.earlier, &conflict.earlier_source))
            (side("Later", &conflict.later, &conflict.later_source))
            div.choices {
                (choice("keep_later", "Keep the later"))
                (choice("keep_earlier", "Keep the earlier"))
                (choice("both_hold", "Both hold"))
            }
        }
    }
}

/// The resolve form's fields.
#[derive(Debug, Deserialize)]
pub struct ResolveForm {
    form_token: String,
    earlier: String,
    later: String,
    resolution: Resolution,
}

/// `POST /ui/conversations/{conversation}/conflicts/resolve`: the conflict resolved through
/// the engine (the fact not kept tombstoned, the change committed); back to the list.
pub async fn resolve(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(name): Path<String>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Result<Response, WebError> {
    let conversation = conversation_id(&name)?;
    let Form(form) = form.map_err(|e| WebError::bad_request(e.body_text()))?;
    state.check_form_token(&form.form_token)?;
    let (earlier, later) = (memory_id(&form.earlier)?, memory_id(&form.later)?);
    state
        .client
        .as_caller(viewer.0.clone())
        .resolve_conflict(&conversation, earlier, later, form.resolution)
        .await?;
    Ok(Redirect::to(&format!(
        "/ui/conversations/{}/conflicts",
        conversation.as_str()
    ))
    .into_response())
}
