//! `POST /v1/chat/completions`: the OpenAI chat endpoint, through memory.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use mnemo_engine::{context_json, ChatReply, EngineError};
use mnemo_llm::LlmError;
use serde_json::Value;

use crate::auth::Grant;
use crate::body::JsonBody;
use crate::error::shared_answers::{BodyTooLarge, DiskFull};
use crate::error::{ApiError, ErrorBody};
use crate::openapi::ChatRequest;
use crate::state::AppState;

/// Chat completion through memory.
///
/// An OpenAI chat completion request, plus optional `memory_*` fields (taken out before
/// forwarding). Relevant memories are injected into the last user message; the turn is
/// stored and distilled into facts afterwards. The outgoing copy is governed by the request's
/// strategy (`memory_strategy`, over the conversation's and the agent's): tool outputs
/// offloaded, compacted or trimmed, the middle summarised; a request that cannot fit the
/// model's window is refused with 400 `context_length_exceeded` before any upstream call.
/// Non-streamed answers carry `memory_hits` and `memory_context`; streamed ones
/// (`stream: true`) are server-sent events passed through as they arrive, with the headers
/// `x-mnemo-memory-hits` and `x-mnemo-memory-context` (the same report, as JSON).
///
/// With bearer tokens, the token must write the request's conversation (a session's own, when
/// it names one) and use its agent's notes; `global`'s memories are injected only when it may
/// read them.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "chat",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The upstream's answer (JSON, or text/event-stream when streaming), plus memory_hits and memory_context"),
        (status = 400, description = "Invalid request, or context_length_exceeded", body = ErrorBody),
        (status = 403, description = "The token may not write the conversation or use the agent", body = ErrorBody),
        BodyTooLarge,
        (status = 502, description = "The upstream LLM failed", body = ErrorBody),
        (status = 503, description = "No upstream LLM", body = ErrorBody),
        (status = 504, description = "The upstream LLM timed out", body = ErrorBody),
        DiskFull,
    )
)]
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    grant: Grant,
    JsonBody(request): JsonBody<Value>,
) -> Result<Response, ApiError> {
    // The engine asks the scope once it knows the conversation and agent: a session decides
    // them, under its lock, so no check made here could be sure of them. A whole answer is
    // finished even if the client leaves: the answer and the turn's facts are kept.
    let reply = state
        .caller(&grant)
        .chat(request)
        .await
        .map_err(|e| count_upstream_error(&state, e))?;
    state.metrics.record_context(reply.context());
    let reply = match reply {
        ChatReply::Answer(answer) => return Ok(Json(answer.body).into_response()),
        ChatReply::Stream(stream) => stream,
    };
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
    if let Ok(value) = HeaderValue::from_str(&ascii_json(&context_json(&reply.context))) {
        headers.insert("x-mnemo-memory-context", value);
    }
    Ok(response)
}

fn count_upstream_error(state: &AppState, error: EngineError) -> ApiError {
    match &error {
        EngineError::Llm(LlmError::Timeout { .. }) => state.metrics.upstream_error("timeout"),
        EngineError::Llm(LlmError::Status { .. }) => state.metrics.upstream_error("status"),
        EngineError::Llm(_) => state.metrics.upstream_error("other"),
        _ => {}
    }
    ApiError::from(error)
}

/// JSON with every non-ASCII character escaped, as a header value must be.
fn ascii_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    for c in value.to_string().chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}
