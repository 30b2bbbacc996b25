//! mnemo's web view: the memory as plain HTML pages, served by `mnemo serve` under `/ui/`.
//!
//! Every page is rendered on the server from the engine ([`mnemo_engine::MemoryClient`]) with
//! [`maud`], which escapes every value it interpolates: a memory holding `<script>` shows as
//! text. Nothing is fetched from elsewhere (one stylesheet compiled into the binary, no
//! script at all), so the view works offline.
//!
//! - [`conversations`]: the list of conversations with their counts and summaries, and one
//!   conversation's facts, turns and tombstones, newest first, paged.
//! - [`conflicts`]: a conversation's facts that say different things of the same thing,
//!   side by side, with the forms that resolve each pair.
//! - [`memories`]: one memory with its front matter, its git history (each change's diff,
//!   any old version), and the forms that edit or delete it through the engine.
//! - [`search`]: the production read path, with each stage's score per hit.
//! - [`sessions`]: chat sessions with their context usage, and a session's full log with
//!   compacted and offloaded items marked.
//! - [`page`]: the layout every page shares, and the error page; [`state`]: what every
//!   page handler gets (the engine, the form token) and the caller it serves ([`Viewer`]).
//!
//! The router is mounted by the server, which authenticates the request first and hands
//! this crate the caller's scope as a [`Viewer`]. Every page reads through the engine's
//! `ScopedClient` (`client.as_caller(access)`), which checks that scope first; a page that
//! lists files for a view of its own borrows the store from a scoped door
//! (`read_readable_conversations`, `conversation(&id).read_files`), so a token sees here
//! exactly what it sees over REST, and no page reads the store unchecked. Conversation
//! pages list files by name and read only those they show
//! ([`mnemo_store::FileStore::listed_files`]): a page of a conversation of 10k facts reads
//! 50 files, not 10k. Forms are
//! `application/x-www-form-urlencoded` posts carrying a [`WebState::form_token`] only
//! mnemo's own pages know, so another site cannot submit them (the server's guard refuses
//! foreign `Origin`s as well).

pub mod conflicts;
pub mod conversations;
pub mod memories;
pub mod page;
pub mod search;
pub mod sessions;
pub mod state;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
pub use page::WebError;
pub use state::{Viewer, WebState};

/// Where the web view is served.
pub const UI_PATH: &str = "/ui";

/// The web view's routes, relative to [`UI_PATH`] (the server nests them there).
pub fn router(state: WebState) -> Router {
    Router::new()
        .route("/", get(conversations::index))
        .route("/style.css", get(stylesheet))
        .route("/conversations/{conversation}", get(conversations::one))
        .route(
            "/conversations/{conversation}/conflicts",
            get(conflicts::page),
        )
        .route(
            "/conversations/{conversation}/conflicts/resolve",
            post(conflicts::resolve),
        )
        .route("/memories/{id}", get(memories::one))
        .route(
            "/memories/{id}/versions/{commit}",
            get(memories::old_version),
        )
        .route("/memories/{id}/edit", post(memories::edit))
        .route("/memories/{id}/delete", post(memories::delete))
        .route("/search", get(search::page))
        .route("/sessions", get(sessions::index))
        .route("/sessions/{id}", get(sessions::one))
        .fallback(not_found)
        .with_state(state)
        // Last, so it wraps everything the router answers: pages, error pages, and what
        // axum makes itself (405s, a 400 for a path that is not UTF-8).
        .layer(axum::middleware::map_response(secure))
}

/// Puts the web view's security headers ([`page::security_headers`]) on `response`: the one
/// layer every answer under `/ui` passes through (the server applies it to the answers it
/// makes there too: the sign-in page, redirects to it, refusals).
pub async fn secure(mut response: Response) -> Response {
    page::security_headers(response.headers_mut());
    response
}

/// Where `GET /` sends a browser.
pub fn home() -> Redirect {
    Redirect::to("/ui/")
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("style.css"),
    )
        .into_response()
}

async fn not_found() -> WebError {
    WebError::new(StatusCode::NOT_FOUND, "there is no such page")
}
