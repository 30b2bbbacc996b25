//! The layout every page shares, the error page, and small formatting helpers.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use mnemo_engine::EngineError;

/// A page with its title and body, in the shared layout.
pub fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mnemo" }
                link rel="stylesheet" href="/ui/style.css";
            }
            body {
                nav {
                    a.brand href="/ui/" { "mnemo" }
                    a href="/ui/" { "Conversations" }
                    a href="/ui/search" { "Search" }
                    a href="/ui/sessions" { "Sessions" }
                }
                main { (body) }
            }
        }
    }
}

/// An HTML answer with `status`. Its security headers are the router's
/// ([`secure`](crate::secure)), set on every answer under `/ui`.
pub fn respond(status: StatusCode, markup: Markup) -> Response {
    (status, markup).into_response()
}

/// Sets the web view's security headers on `headers`: no scripts, frames, foreign forms or
/// sniffing, no referrer outside mnemo, and no caching unless the answer says otherwise
/// (the stylesheet).
pub fn security_headers(headers: &mut axum::http::HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// A page that could not be shown: rendered as an error page with its status.
#[derive(Debug)]
pub struct WebError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, in words a person can act on.
    pub message: String,
}

impl WebError {
    /// An error page with `status` saying `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// A 400 saying `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<EngineError> for WebError {
    fn from(error: EngineError) -> Self {
        let status = if error.is_invalid_input() {
            StatusCode::BAD_REQUEST
        } else if error.is_not_found() {
            StatusCode::NOT_FOUND
        } else if error.is_forbidden() {
            StatusCode::FORBIDDEN
        } else if error.is_conflict() {
            StatusCode::CONFLICT
        } else if error.is_index_unavailable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            tracing::warn!("web view: {error}");
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self::new(status, error.to_string())
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            h1 { (self.status.as_u16()) " " (reason) }
            p.error { (self.message) }
            p { a href="/ui/" { "Back to the conversations" } }
        };
        respond(self.status, layout(reason, body))
    }
}

/// A page's query string, parsed; one that does not parse is a 400 page saying why (not
/// axum's plain-text rejection).
pub struct PageQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, WebError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e| WebError::bad_request(e.body_text()))
    }
}

/// A time as the pages show it (UTC, to the second).
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// The first eight characters of an id, for links that show a full id on hover.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Page numbers: "newer" and "older" links around page `page` of `total` items.
pub fn pager(base: &str, page: usize, per_page: usize, total: usize) -> Markup {
    let pages = total.div_ceil(per_page).max(1);
    let sep = if base.contains('?') { '&' } else { '?' };
    html! {
        p.pager {
            @if page > 1 {
                a href={ (base) (sep) "page=" (page - 1) } { "← newer" } " "
            }
            "page " (page) " of " (pages)
            @if page < pages {
                " " a href={ (base) (sep) "page=" (page + 1) } { "older →" }
            }
        }
    }
}

/// A meter of `used` tokens in a window of `total`, turning to "high" at `threshold`
/// (where compaction starts).
pub fn usage_bar(used: u64, total: u64, threshold: u64) -> Markup {
    html! {
        meter.usage min="0" max=(total) high=(threshold) value=(used)
            title={ (used) " of " (total) " tokens; compaction at " (threshold) } {
            (used) " / " (total)
        }
    }
}

/// Text shown as is, lines kept (for memory bodies and files).
pub fn text_block(text: &str) -> Markup {
    html! { pre.text { (text) } }
}

/// A hidden field carrying the form token.
pub fn form_token(token: &str) -> Markup {
    html! { input type="hidden" name="form_token" value=(token); }
}

/// The sign-in page (`/ui/login`), with what went wrong last time.
pub fn sign_in(status: StatusCode, error: Option<&str>) -> Response {
    let body = html! {
        h1 { "Sign in" }
        @if let Some(error) = error { p.error { (error) } }
        p { "This mnemo requires a token (one of its API tokens). It is kept in a cookie only mnemo's pages send." }
        form.login method="post" action="/ui/login" {
            input type="password" name="token" autocomplete="current-password" aria-label="token" required;
            button type="submit" { "Sign in" }
        }
    };
    respond(status, layout("Sign in", body))
}
