//! Every request mnemo does not handle itself goes to the upstream unchanged: method, headers
//! (less hop-by-hop ones), query and body, streamed both ways.
//!
//! The upstream's base URL ends in `/v1`, so a request for `/v1/models` goes to
//! `<base>/models`; a path outside `/v1` is appended to the base as it is.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::TryStreamExt;
use mnemo_llm::end_to_end_headers;

use crate::{ApiError, AppState};

pub(crate) async fn forward(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    let Some(llm) = state.client.upstream() else {
        return Err(ApiError::not_found(format!(
            "no route for {} {} and no upstream LLM to pass it to",
            request.method(),
            request.uri().path()
        )));
    };
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let relative = path.strip_prefix("/v1").unwrap_or(path);
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
