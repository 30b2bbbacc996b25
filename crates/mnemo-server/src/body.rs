//! Reading a request: a JSON body within the server's size limit ([`JsonBody`],
//! [`OptionalJsonBody`]) and query parameters ([`QueryParams`]), as extractors whose faults
//! are 400s (413 past the limit) in mnemo's error shape. A body is read and checked before
//! the handler runs, so before the handler's scope checks: a malformed body is a 400 whoever
//! sends it, and neither answer tells anything of a memory.

use axum::body::{Body, Bytes};
use axum::extract::{FromRef, FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use crate::error::ApiError;

/// The largest body read, in bytes (the server's `max_body_bytes`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub usize);

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

/// The body as a `T`, parsed once: a body that is not JSON says so, and one whose fields do
/// not fit names the field.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        Category::Data => ApiError::invalid(format!("invalid request: {e}")),
        _ => ApiError::invalid(format!("the request body is not valid JSON: {e}")),
    })
}

/// A JSON body of at most the server's `max_body_bytes`, as a `T` (a `serde_json::Value`
/// takes any JSON); a field that does not fit says so.
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T>
where
    BodyLimit: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let BodyLimit(limit) = BodyLimit::from_ref(state);
        let bytes = read_bytes(request.into_body(), limit).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// Like [`JsonBody`], but an empty body is `T::default()`.
pub(crate) struct OptionalJsonBody<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJsonBody<T>
where
    BodyLimit: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let BodyLimit(limit) = BodyLimit::from_ref(state);
        let bytes = read_bytes(request.into_body(), limit).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse(&bytes).map(OptionalJsonBody)
    }
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
