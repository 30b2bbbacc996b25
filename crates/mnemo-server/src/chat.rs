//! `POST /v1/chat/completions`: the OpenAI chat endpoint, through memory.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::body::read_json;
use crate::openapi::ChatRequest;
use crate::{ApiError, AppState, ErrorBody};

/// Chat completion through memory.
///
/// An OpenAI chat completion request, plus optional `memory_*` fields (taken out before
/// forwarding). Relevant memories are injected into the last user message; the turn is
/// stored and distilled into facts afterwards. Non-streamed answers carry `memory_hits`;
/// streamed ones (`stream: true`) are server-sent events passed through as they arrive, with
/// the header `x-mnemo-memory-hits`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "chat",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The upstream's answer (JSON, or text/event-stream when streaming), plus memory_hits"),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 413, description = "Request body too large", body = ErrorBody),
        (status = 502, description = "The upstream LLM failed", body = ErrorBody),
        (status = 503, description = "No upstream LLM", body = ErrorBody),
        (status = 504, description = "The upstream LLM timed out", body = ErrorBody),
    )
)]
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    body: Body,
) -> Result<Response, ApiError> {
    let request = read_json(body, state.options.max_body_bytes).await?;
    let stream = request["stream"].as_bool().unwrap_or(false);
    if !stream {
        let answer = state.client.chat(request).await?;
        return Ok(Json(answer).into_response());
    }
    let reply = state.client.chat_stream(request).await?;
    let mut response = Response::new(Body::from_stream(reply.body));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in reply.headers.iter() {
        // The body is re-framed by this server.
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        "x-mnemo-memory-hits",
        HeaderValue::from(reply.hits.len() as u64),
    );
    Ok(response)
}
