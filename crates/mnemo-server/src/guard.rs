//! Who may talk to mnemo over HTTP, checked before any handler runs.
//!
//! A browser on the same machine is an attacker too: a page on any site can send "simple"
//! cross-origin requests (no preflight) to `127.0.0.1`, and a DNS-rebinding page can even read
//! the answers. So:
//! - the `Host` must be a loopback name, the address mnemo listens on, or one configured
//!   (`--allow-host`): a rebound name is refused;
//! - an `Origin`, when a browser sends one, must be mnemo's own (same host and port) or
//!   configured (`--allow-origin`);
//! - a body sent to one of mnemo's own routes must be declared `application/json`: the
//!   content types a page may send without a preflight (`text/plain`, forms) get a 415.
//!   The web view's forms under `/ui` are the exception: each carries a form token only
//!   mnemo's own pages know, and the `Origin` rule above still applies to them.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use std::sync::Arc;

use crate::error::ApiError;
use crate::options::ServerOptions;

/// Names that always mean this machine.
const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

/// Refuses requests for foreign hosts, from foreign origins, and bodies not declared JSON.
pub(crate) async fn check_request(
    State(options): State<Arc<ServerOptions>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = request_host(&request);
    if let Err(e) = check_host(host.as_deref(), &options) {
        return e.into_response();
    }
    if let Err(e) = check_origin(headers, host.as_deref(), &options) {
        return e.into_response();
    }
    // The web view's forms are not JSON; each carries a form token instead (`web`).
    let own_route = request.extensions().get::<MatchedPath>().is_some()
        && !crate::web::is_web_path(request.uri().path());
    if own_route && has_body(request.method(), headers) {
        if let Err(e) = check_json(headers) {
            return e.into_response();
        }
    }
    next.run(request).await
}

/// The `Host` header (or, for HTTP/2, the URI's authority), as sent.
fn request_host(request: &Request) -> Option<String> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))
}

/// `host:port` without the port, lowercased; IPv6 literals keep their brackets.
fn host_name(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => authority[..=end].to_owned(),
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_owned(),
        _ => authority,
    }
}

fn host_allowed(name: &str, options: &ServerOptions) -> bool {
    LOOPBACK_HOSTS.contains(&name)
        || name.ends_with(".localhost")
        || options
            .allowed_hosts
            .iter()
            .any(|allowed| host_name(allowed) == name)
}

fn check_host(host: Option<&str>, options: &ServerOptions) -> Result<(), ApiError> {
    // HTTP/1.0 clients may send none; only a browser's forged request carries a foreign one.
    let Some(host) = host else { return Ok(()) };
    let name = host_name(host);
    if host_allowed(&name, options) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "host {name:?} is not one mnemo serves (a guard against DNS rebinding); start it with --allow-host {name} to serve it"
        ),
    ))
}

fn check_origin(
    headers: &HeaderMap,
    host: Option<&str>,
    options: &ServerOptions,
) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("").trim().to_ascii_lowercase();
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    let same_origin =
        !authority.is_empty() && host.is_some_and(|h| h.trim().eq_ignore_ascii_case(authority));
    let configured = options
        .allowed_origins
        .iter()
        .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(&origin));
    if same_origin || configured {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "requests from origin {origin:?} are refused: a web page may not use mnemo unless started with --allow-origin {origin}"
        ),
    ))
}

/// Whether the request carries a body: a declared length above 0, or a chunked one.
fn has_body(method: &Method, headers: &HeaderMap) -> bool {
    if matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS
    ) {
        return false;
    }
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(n) => n > 0,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = declared
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    // JSON lines (a co-cli transcript to import) too: like JSON, no browser form can send
    // them without asking first.
    let json = essence == "application/json"
        || essence == "application/x-ndjson"
        || essence == "application/jsonl"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        return Ok(());
    }
    let got = if declared.is_empty() {
        "none".to_owned()
    } else {
        format!("{declared:?}")
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_request_error",
        format!(
            "the body must be sent as Content-Type: application/json (or application/x-ndjson for JSON lines; got {got})"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port_only() {
        assert_eq!(host_name("127.0.0.1:8100"), "127.0.0.1");
        assert_eq!(host_name("LocalHost"), "localhost");
        assert_eq!(host_name("[::1]:8100"), "[::1]");
        assert_eq!(host_name("evil.example:80"), "evil.example");
        let options = ServerOptions {
            allowed_hosts: vec!["mnemo.lan:8100".into()],
            ..Default::default()
        };
        for ok in [
            "localhost",
            "127.0.0.1",
            "[::1]",
            "app.localhost",
            "mnemo.lan",
        ] {
            assert!(host_allowed(ok, &options), "{ok}");
        }
        for bad in ["evil.example", "127.0.0.1.evil.example", "localhost.evil"] {
            assert!(!host_allowed(bad, &options), "{bad}");
        }
    }
}
