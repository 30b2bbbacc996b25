//! The chat endpoint and `/health`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::{ApiError, AppState};

/// Reads a JSON body of at most `limit` bytes.
pub(crate) async fn read_json(body: Body, limit: usize) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        if std::error::Error::source(&e)
            .is_some_and(|s| s.to_string().contains("length limit exceeded"))
            || e.to_string().contains("length limit exceeded")
        {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("the request body is larger than {limit} bytes"),
            )
        } else {
            ApiError::invalid(format!("cannot read the request body: {e}"))
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))
}

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

pub(crate) async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let client = &state.client;
    let points = client.index_size().await?;
    let upstream = match client.upstream() {
        Some(llm) => {
            let reachable = llm.health().await;
            json!({
                "url": llm.config().base_url,
                "label": state.options.upstream_label,
                "reachable": reachable.is_ok(),
                "error": reachable.err().map(|e| e.to_string()),
            })
        }
        None => json!(null),
    };
    let healthy = upstream["reachable"].as_bool().unwrap_or(false);
    Ok(Json(json!({
        "status": if healthy { "ok" } else { "degraded" },
        "store": client.store().root(),
        "index": {"points": points},
        "models": {
            "embedding": client.config().embedding_model,
            "reranker": if client.has_reranker() { "loaded" } else { "not installed" },
        },
        "upstream": upstream,
        "uptime_s": state.started.elapsed().as_secs(),
    })))
}
