//! Reading a request body as JSON, within the server's size limit.

use axum::body::Body;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ApiError;

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

/// Reads a JSON body of at most `limit` bytes as a `T`; a field that does not fit says so.
pub(crate) async fn read_typed<T: DeserializeOwned>(
    body: Body,
    limit: usize,
) -> Result<T, ApiError> {
    let value = read_json(body, limit).await?;
    serde_json::from_value(value).map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
}
