//! `/mcp`: mnemo's MCP server ([`mnemo_mcp`]) over streamable HTTP, beside the REST API.
//!
//! It sits behind the same guard (Host, Origin, JSON bodies) and the same bearer tokens as
//! every other route. Before a request reaches the MCP service, `admit` reads its body
//! within the server's limit (a 413 in mnemo's error shape, where the MCP service would
//! answer a bare 500) and hands the service the token's scope as a [`Caller`], which every
//! tool and resource checks through the engine.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use mnemo_mcp::Caller;

use mnemo_engine::MemoryClient;

use crate::auth::Grant;
use crate::body::{read_bytes, BodyLimit};
use crate::error::ApiError;

/// Where the MCP endpoint is served.
pub const MCP_PATH: &str = "/mcp";

/// `router` with the MCP endpoint mounted at [`MCP_PATH`].
pub(crate) fn mount<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    client: MemoryClient,
    limit: BodyLimit,
) -> Router<S> {
    let service = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(limit, admit))
        .service(mnemo_mcp::http_service(client));
    router.route_service(MCP_PATH, service)
}

/// Bounds the body and passes the request's scope on as its [`Caller`].
async fn admit(
    State(BodyLimit(limit)): State<BodyLimit>,
    request: Request,
    next: Next,
) -> Response {
    let Some(grant) = request.extensions().get::<Grant>().cloned() else {
        // Authentication ran first and found no token on a route that needs one.
        return ApiError::unauthorized("this mnemo requires a bearer token").into_response();
    };
    let (mut parts, body) = request.into_parts();
    let bytes = match read_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    parts.extensions.insert(Caller(grant.scope()));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
