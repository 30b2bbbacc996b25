//! Reading a request: a JSON body within the server's size limit, query parameters whose
//! faults are 400s in mnemo's error shape.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ApiError;

/// Reads a body of at most `limit` bytes (413 past it).
pub(crate) async fn read_bytes(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
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
    })
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
}

/// Reads a JSON body of at most `limit` bytes.
pub(crate) async fn read_json(body: Body, limit: usize) -> Result<Value, ApiError> {
    parse_json(&read_bytes(body, limit).await?)
}

/// Reads a JSON body of at most `limit` bytes as a `T`; a field that does not fit says so.
pub(crate) async fn read_typed<T: DeserializeOwned>(
    body: Body,
    limit: usize,
) -> Result<T, ApiError> {
    typed(read_json(body, limit).await?)
}

/// Like [`read_typed`], but an empty body is `T::default()`.
pub(crate) async fn read_optional<T: DeserializeOwned + Default>(
    body: Body,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = read_bytes(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    typed(parse_json(&bytes)?)
}

/// Query parameters as a `T`; a parameter that does not fit is a 400 that names it.
pub(crate) struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(params)| QueryParams(params))
            .map_err(|e| ApiError::invalid(e.body_text()))
    }
}
