//! Requests for the upstream's own API that mnemo does not handle itself go to the upstream
//! unchanged: method, headers (less hop-by-hop ones), query and body, streamed both ways.
//!
//! The upstream's base URL ends in `/v1`, so a request for `/v1/models` goes to
//! `<base>/models`. Only the OpenAI API's resources are passed ([`PASSED_THROUGH`]), and
//! never a path with dot segments or encoded separators: mnemo's upstream key goes with every
//! forwarded request, so nothing may address anything outside the upstream's base path.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::TryStreamExt;
use mnemo_llm::end_to_end_headers;

use mnemo_engine::MemoryClient;

use crate::error::ApiError;

/// The upstream API's resources passed through, under `/v1/`.
pub const PASSED_THROUGH: [&str; 9] = [
    "models",
    "embeddings",
    "completions",
    "moderations",
    "audio",
    "images",
    "responses",
    "files",
    "batches",
];

/// The path to forward (below the upstream's base), or why it is refused.
fn upstream_path(path: &str) -> Result<&str, ApiError> {
    let lowered = path.to_ascii_lowercase();
    let dot_segment = path
        .split('/')
        .any(|segment| segment == "." || segment == "..");
    if dot_segment
        || ["%2e", "%2f", "%5c", "\\"]
            .iter()
            .any(|bad| lowered.contains(bad))
    {
        return Err(ApiError::invalid(format!(
            "path {path:?} has dot segments or encoded separators; it is not passed on"
        )));
    }
    let relative = path.strip_prefix("/v1").unwrap_or("");
    let resource = relative
        .strip_prefix('/')
        .and_then(|r| r.split('/').next())
        .unwrap_or("");
    if PASSED_THROUGH.contains(&resource) {
        Ok(relative)
    } else {
        Err(ApiError::not_found(format!(
            "no route for {path}; mnemo passes only /v1/{{{}}} on to the upstream",
            PASSED_THROUGH.join(",")
        )))
    }
}

pub(crate) async fn forward(
    State(client): State<MemoryClient>,
    request: Request,
) -> Result<Response, ApiError> {
    let Some(llm) = client.upstream() else {
        return Err(ApiError::not_found(format!(
            "no route for {} {} and no upstream LLM to pass it to",
            request.method(),
            request.uri().path()
        )));
    };
    let (parts, body) = request.into_parts();
    let relative = upstream_path(parts.uri.path())?;
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("{relative}?{query}"),
        None => relative.to_owned(),
    };
    let body = reqwest::Body::wrap_stream(body.into_data_stream());
    let upstream = llm
        .forward(parts.method, &path_and_query, parts.headers, body)
        .await
        .map_err(|e| ApiError::upstream(&e))?;
    let status = upstream.status();
    let headers = end_to_end_headers(upstream.headers().clone());
    let mut response = Response::new(Body::from_stream(
        upstream
            .bytes_stream()
            .map_err(|e| std::io::Error::other(format!("upstream body: {e}"))),
    ));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_upstream_api_is_passed_and_never_a_dot_segment() {
        assert_eq!(upstream_path("/v1/models").ok(), Some("/models"));
        assert_eq!(
            upstream_path("/v1/models/gpt-4o").ok(),
            Some("/models/gpt-4o")
        );
        assert_eq!(upstream_path("/v1/embeddings").ok(), Some("/embeddings"));
        for (path, status) in [
            ("/v1/memories/../../../etc/passwd", 400),
            ("/v1/models/%2e%2e/%2e%2e/admin", 400),
            ("/v1/models%2F..%2Fadmin", 400),
            ("/v1/./models", 400),
            ("/etc/passwd", 404),
            ("/v1", 404),
            ("/v1/admin/keys", 404),
            ("/v2/models", 404),
            ("/v1models", 404),
        ] {
            let err = upstream_path(path).unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{path}: {}", err.message);
        }
    }
}
