use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mnemo_engine::EngineError;
use mnemo_llm::LlmError;
use serde_json::json;
use tracing::warn;

/// An error as clients see it: a status and an OpenAI-shaped JSON body.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `not_found`, `upstream_error`, ...
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn upstream(error: &LlmError) -> Self {
        let status = match error {
            // The upstream refused the request itself: the caller should see why.
            LlmError::Status { status, .. } if (400..500).contains(status) && *status != 429 => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            LlmError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        Self::new(status, "upstream_error", format!("upstream LLM: {error}"))
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match &error {
            EngineError::InvalidInput(message) => Self::invalid(message.clone()),
            EngineError::Llm(e) => Self::upstream(e),
            EngineError::NoUpstream => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream_error",
                error.to_string(),
            ),
            _ => {
                warn!("request failed: {error}");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    error.to_string(),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "code": self.status.as_u16(),
        }});
        (self.status, Json(body)).into_response()
    }
}
