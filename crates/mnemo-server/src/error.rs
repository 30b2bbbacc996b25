//! Errors as clients see them: a status and an OpenAI-shaped JSON body.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use mnemo_engine::EngineError;
use mnemo_llm::LlmError;
use serde::Serialize;
use tracing::warn;
use utoipa::ToSchema;

/// The body of every error answer: `{"error": {"message", "type", "code"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, OpenAI-style.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// One line saying what went wrong and, where it helps, what to do.
    pub message: String,
    /// `invalid_request_error`, `not_found`, `unauthorized`, `forbidden`, `conflict`,
    /// `upstream_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The HTTP status, or a name for the error where it has one (`context_length_exceeded`,
    /// `unauthorized`, `forbidden`).
    pub code: ErrorCode,
}

/// An error's `code`: a name where OpenAI's API has one, else the HTTP status.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ErrorCode {
    /// The HTTP status.
    Status(u16),
    /// OpenAI's name for the error.
    Name(&'static str),
}

/// The error answers several routes share, declared once for the OpenAPI document: a
/// route's `#[utoipa::path(responses(...))]` names them beside its own rows. Each is the
/// [`ErrorBody`] with the status and description it declares; the handlers never build
/// them (their errors are [`ApiError`]s), hence the `dead_code` allowance.
#[allow(dead_code)]
pub(crate) mod shared_answers {
    use super::ErrorBody;
    use utoipa::IntoResponses;

    #[derive(IntoResponses)]
    #[response(status = 400, description = "Invalid request")]
    pub(crate) struct InvalidRequest(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 413, description = "Request body too large")]
    pub(crate) struct BodyTooLarge(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 404, description = "No such session")]
    pub(crate) struct NoSuchSession(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 404, description = "No such memory")]
    pub(crate) struct NoSuchMemory(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 400, description = "Not a memory id")]
    pub(crate) struct NotAMemoryId(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 403, description = "The token may not read this conversation")]
    pub(crate) struct MayNotReadConversation(ErrorBody);

    #[derive(IntoResponses)]
    #[response(
        status = 403,
        description = "The token may not write this conversation"
    )]
    pub(crate) struct MayNotWriteConversation(ErrorBody);

    #[derive(IntoResponses)]
    #[response(
        status = 403,
        description = "The token may not read the session's conversation"
    )]
    pub(crate) struct MayNotReadSession(ErrorBody);

    #[derive(IntoResponses)]
    #[response(
        status = 403,
        description = "The token may not write the session's conversation"
    )]
    pub(crate) struct MayNotWriteSession(ErrorBody);

    #[derive(IntoResponses)]
    #[response(
        status = 403,
        description = "The token may not read the memory's conversation"
    )]
    pub(crate) struct MayNotReadMemory(ErrorBody);

    #[derive(IntoResponses)]
    #[response(status = 403, description = "The token may not use this agent's notes")]
    pub(crate) struct MayNotUseAgent(ErrorBody);

    #[derive(IntoResponses)]
    #[response(
        status = 507,
        description = "The disk that holds the store is full: nothing was stored; send it again once there is space"
    )]
    pub(crate) struct DiskFull(ErrorBody);
}

/// An error as clients see it: a status and an OpenAI-shaped JSON body.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status of the answer.
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `not_found`, `upstream_error`, ...
    pub kind: &'static str,
    /// One line for the client; it goes into the body's `error.message`.
    pub message: String,
    /// OpenAI's name for the error, when it has one; the body's `code` is the status else.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// An error with this status, type and message.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            code: None,
        }
    }

    /// 400: the request is wrong; the message says how.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401: no token, or one mnemo does not know; the answer carries
    /// `WWW-Authenticate: Bearer`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            code: Some("unauthorized"),
            ..Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
        }
    }

    /// 403: a valid token, but what the request touches is outside its scope.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            code: Some("forbidden"),
            ..Self::new(StatusCode::FORBIDDEN, "forbidden", message)
        }
    }

    /// The upstream LLM failed: its own 4xx is passed on (but 429), a timeout is 504, the
    /// rest 502.
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
        if error.is_invalid_input() {
            return Self::invalid(error.to_string());
        }
        if error.is_not_found() {
            return Self::not_found(error.to_string());
        }
        if error.is_forbidden() {
            return Self::forbidden(error.to_string());
        }
        if error.is_conflict() {
            return Self::new(StatusCode::CONFLICT, "conflict", error.to_string());
        }
        if error.is_out_of_space() {
            // The full error names the server's files: for the log, not for the client.
            warn!("a write was refused for lack of space: {error}");
            return Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                "the disk that holds the store is full: this request was not stored (what was acknowledged before is kept). Free space there and send it again",
            );
        }
        if error.is_disk_failure() {
            warn!("the disk failed a write: {error}");
            return Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage_error",
                "the disk that holds the store failed (an I/O error): this request may not have been stored, and what was acknowledged before is kept. The server's log names the file; check the disk, then send it again",
            );
        }
        if error.is_index_unavailable() {
            // Said once per outage by the engine; the client may simply try again.
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "index_unavailable",
                format!("{error}; anything written was saved to its file and is indexed once the index answers"),
            );
        }
        match &error {
            EngineError::Llm(e) => Self::upstream(e),
            EngineError::SummaryFailed(_) => {
                Self::new(StatusCode::BAD_GATEWAY, "upstream_error", error.to_string())
            }
            EngineError::ContextLengthExceeded(e) => ApiError {
                code: Some("context_length_exceeded"),
                ..Self::invalid(e.to_string())
            },
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
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.message,
                kind: self.kind,
                code: match self.code {
                    Some(name) => ErrorCode::Name(name),
                    None => ErrorCode::Status(self.status.as_u16()),
                },
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.kind == "index_unavailable" {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme that would be accepted.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mnemo\""),
            );
        }
        response
    }
}
