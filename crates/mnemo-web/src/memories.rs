//! One memory: its file, its git history with a diff per change, any old version, and the
//! forms that edit or delete it.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use mnemo_core::MemoryId;
use mnemo_engine::Memory;
use mnemo_git::FileVersion;
use serde::Deserialize;
use similar::{ChangeTag, TextDiff};

use crate::page::WebError;
use crate::page::{form_token, layout, respond, short, text_block, time};
use crate::state::{Viewer, WebState};

/// Versions of a memory a page shows.
pub const VERSIONS: usize = 50;

/// `/ui/memories/{id}`: the memory (live, or its last version when deleted), the forms that
/// change it, and its history.
pub async fn one(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let id = memory_id(&id)?;
    let client = &state.client;
    let live = match client.as_caller(viewer.0.clone()).get(id).await {
        Ok(memory) => Some(memory),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let (versions, no_history) = match client
        .as_caller(viewer.0.clone())
        .history(id, Some(VERSIONS))
        .await
    {
        Ok(history) => (history.versions, None),
        Err(e) if e.is_not_found() => (Vec::new(), Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    if live.is_none() && versions.is_empty() {
        return Err(WebError::new(
            StatusCode::NOT_FOUND,
            format!("no memory {id}, live or in git"),
        ));
    }
    let file = match &live {
        Some(memory) => {
            let bytes = client
                .as_caller(viewer.0.clone())
                .memory_file(memory.id)
                .await?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
        None => versions
            .first()
            .map(|v| v.content.clone())
            .unwrap_or_default(),
    };
    let body = html! {
        h1 { "Memory " code title=(id) { (short(&id.to_string())) } }
        @match &live {
            Some(memory) => { (live_header(memory)) }
            None => { p.badge { "deleted: the last version in git is shown" } }
        }
        h2 { "File" }
        (text_block(&file))
        @if let Some(memory) = &live {
            (forms(memory, &state.form_token))
        }
        h2 { "History" }
        @if let Some(why) = &no_history {
            p.empty { (why) }
        }
        @for (i, version) in versions.iter().enumerate() {
            (version_entry(id, version, versions.get(i + 1), &client.config().git_author_name))
        }
    };
    Ok(respond(
        StatusCode::OK,
        layout(&format!("Memory {id}"), body),
    ))
}

fn live_header(memory: &Memory) -> Markup {
    html! {
        p {
            span.role { (memory.role.as_str()) }
            " in "
            a href={ "/ui/conversations/" (memory.conversation_id.as_str()) } { (memory.conversation_id.as_str()) }
            " · " (time(memory.created_at))
            " · " code { (memory.path.display().to_string()) }
        }
    }
}

/// The edit and delete forms of a live memory.
fn forms(memory: &Memory, token: &str) -> Markup {
    let id = memory.id.to_string();
    html! {
        h2 { "Edit" }
        form.edit method="post" action={ "/ui/memories/" (id) "/edit" } {
            (form_token(token))
            textarea name="content" rows="6" aria-label="content" { (memory.content) }
            p.hint { "Saved to the file, re-indexed and committed, as a hand edit would be." }
            button type="submit" { "Save" }
        }
        form.delete method="post" action={ "/ui/memories/" (id) "/delete" } {
            (form_token(token))
            button type="submit" { "Delete" }
            span.hint { " The file moves to its conversation's deleted/ folder; git keeps every version." }
        }
    }
}

/// One version in the history: who changed what, and the diff against the version before.
/// A commit by anyone but mnemo's configured author is a person's hand edit; one a person
/// left uncommitted rides in mnemo's next commit and shows as mnemo's.
fn version_entry(
    id: MemoryId,
    version: &FileVersion,
    older: Option<&FileVersion>,
    mnemo_author: &str,
) -> Markup {
    let commit = &version.commit;
    let by_hand = commit.author != mnemo_author;
    html! {
        article.version {
            header {
                a href={ "/ui/memories/" (id) "/versions/" (commit.id) } { code { (commit.short_id) } }
                " " span.status { (format!("{:?}", version.status).to_lowercase()) }
                " · " (time(commit.time))
                " · " span.author { (commit.author) @if by_hand { " (hand edit)" } }
            }
            p.commit { (commit.message.lines().next().unwrap_or_default()) }
            (diff(older.map_or("", |v| v.content.as_str()), &version.content))
        }
    }
}

/// Versions larger than this are not diffed (their pages show them whole).
pub const MAX_DIFF_BYTES: usize = 64 << 10;
/// How long one diff may search for the smallest edit before it settles for a coarser one.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(20);

/// A line diff of `old` to `new`, three lines of context around each change; bounded in
/// size and time, so a page of 50 versions stays cheap whatever the files hold.
pub fn diff(old: &str, new: &str) -> Markup {
    if old.len() > MAX_DIFF_BYTES || new.len() > MAX_DIFF_BYTES {
        return html! { p.hint { "Too large to diff here: open the versions to compare them." } };
    }
    let diff = TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new);
    html! {
        pre.diff {
            @for group in diff.grouped_ops(3) {
                @for op in &group {
                    @for change in diff.iter_changes(op) {
                        @match change.tag() {
                            ChangeTag::Delete => { del { "-" (change.value()) } }
                            ChangeTag::Insert => { ins { "+" (change.value()) } }
                            ChangeTag::Equal => { span { " " (change.value()) } }
                        }
                    }
                }
            }
        }
    }
}

/// `/ui/memories/{id}/versions/{commit}`: the memory's file as that commit left it.
pub async fn old_version(
    State(state): State<WebState>,
    viewer: Viewer,
    Path((id, commit)): Path<(String, String)>,
) -> Result<Response, WebError> {
    let id = memory_id(&id)?;
    if !(4..=40).contains(&commit.len()) || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WebError::bad_request(
            "a commit is named by 4 to 40 hexadecimal digits",
        ));
    }
    let history = state
        .client
        // The versions the memory's page links to, no more.
        .as_caller(viewer.0.clone())
        .history(id, Some(VERSIONS))
        .await?;
    let version = history
        .versions
        .iter()
        .find(|v| v.commit.id.starts_with(&commit.to_ascii_lowercase()))
        .ok_or_else(|| {
            WebError::new(
                StatusCode::NOT_FOUND,
                format!("memory {id} has no version in commit {commit}"),
            )
        })?;
    let body = html! {
        h1 { "Memory " a href={ "/ui/memories/" (id) } title=(id) { (short(&id.to_string())) } " at " code { (version.commit.short_id) } }
        p { (time(version.commit.time)) " · " (version.commit.author) " · " (version.commit.message.lines().next().unwrap_or_default()) }
        (text_block(&version.content))
    };
    Ok(respond(
        StatusCode::OK,
        layout(&format!("Memory {id} at {}", version.commit.short_id), body),
    ))
}

/// The edit form's fields.
#[derive(Debug, Deserialize)]
pub struct EditForm {
    content: String,
    form_token: String,
}

/// `POST /ui/memories/{id}/edit`: the new text written to the memory's file, indexed and
/// committed; back to the memory's page.
pub async fn edit(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(id): Path<String>,
    form: Result<Form<EditForm>, FormRejection>,
) -> Result<Response, WebError> {
    let id = memory_id(&id)?;
    let Form(form) = form.map_err(|e| WebError::bad_request(e.body_text()))?;
    state.check_form_token(&form.form_token)?;
    // Browsers send CR LF line ends from a text area; the file keeps the user's lines.
    let content = form.content.replace("\r\n", "\n");
    state
        .client
        .as_caller(viewer.0.clone())
        .edit(id, content)
        .await?;
    Ok(Redirect::to(&format!("/ui/memories/{id}")).into_response())
}

/// The delete form's fields.
#[derive(Debug, Deserialize)]
pub struct DeleteForm {
    form_token: String,
}

/// `POST /ui/memories/{id}/delete`: the memory soft-deleted; back to its conversation.
pub async fn delete(
    State(state): State<WebState>,
    viewer: Viewer,
    Path(id): Path<String>,
    form: Result<Form<DeleteForm>, FormRejection>,
) -> Result<Response, WebError> {
    let id = memory_id(&id)?;
    let Form(form) = form.map_err(|e| WebError::bad_request(e.body_text()))?;
    state.check_form_token(&form.form_token)?;
    let memory = state.client.as_caller(viewer.0.clone()).get(id).await?;
    state.client.as_caller(viewer.0.clone()).delete(id).await?;
    Ok(Redirect::to(&format!(
        "/ui/conversations/{}?show=deleted",
        memory.conversation_id.as_str()
    ))
    .into_response())
}

/// `text` as a memory id, or a 400 saying it is not one.
pub fn memory_id(text: &str) -> Result<MemoryId, WebError> {
    text.parse::<MemoryId>()
        .map_err(|_| WebError::bad_request(format!("{text:?} is not a memory id (a UUID)")))
}
