//! [`AppState`]: what every handler may reach, and the parts of it that the layers and the
//! service routes take alone (axum's `FromRef`): authentication takes the tokens, the guard
//! the options, `/health` and `/metrics` their own state, the web view's sign-in its
//! sessions, and every body extractor the size limit. A handler that needs only one of them
//! asks for that one.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::FromRef;
use mnemo_engine::{MemoryClient, ScopedClient};

use crate::auth::{Auth, Grant};
use crate::body::BodyLimit;
use crate::health::{HealthState, ProbeCache};
use crate::metrics::{Metrics, MetricsState};
use crate::options::ServerOptions;
use crate::web::{WebSessions, WebSignIn};

/// The router's state: the memory client and what the server keeps beside it.
#[derive(Clone)]
pub(crate) struct AppState {
    pub client: MemoryClient,
    pub options: Arc<ServerOptions>,
    pub started: Instant,
    /// The document `/openapi.json` serves, built with the router.
    pub openapi: Arc<utoipa::openapi::OpenApi>,
    /// What `/metrics` exposes.
    pub metrics: Metrics,
    /// The upstream's last health probe, reused for a few seconds.
    pub upstream_probe: ProbeCache,
    /// Browsers signed in to the web view.
    pub web_sessions: Arc<WebSessions>,
}

impl AppState {
    /// The engine as the request's caller may use it: every call checked against its grant.
    pub fn caller(&self, grant: &Grant) -> ScopedClient {
        self.client.as_caller(grant.access())
    }
}

impl FromRef<AppState> for MemoryClient {
    fn from_ref(state: &AppState) -> Self {
        state.client.clone()
    }
}

impl FromRef<AppState> for Arc<ServerOptions> {
    fn from_ref(state: &AppState) -> Self {
        state.options.clone()
    }
}

impl FromRef<AppState> for Auth {
    fn from_ref(state: &AppState) -> Self {
        state.options.auth.clone()
    }
}

impl FromRef<AppState> for BodyLimit {
    fn from_ref(state: &AppState) -> Self {
        BodyLimit(state.options.max_body_bytes)
    }
}

impl FromRef<AppState> for Arc<utoipa::openapi::OpenApi> {
    fn from_ref(state: &AppState) -> Self {
        state.openapi.clone()
    }
}

impl FromRef<AppState> for Metrics {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}

impl FromRef<AppState> for MetricsState {
    fn from_ref(state: &AppState) -> Self {
        MetricsState {
            client: state.client.clone(),
            metrics: state.metrics.clone(),
        }
    }
}

impl FromRef<AppState> for HealthState {
    fn from_ref(state: &AppState) -> Self {
        HealthState {
            client: state.client.clone(),
            options: state.options.clone(),
            started: state.started,
            probe: state.upstream_probe.clone(),
        }
    }
}

impl FromRef<AppState> for WebSignIn {
    fn from_ref(state: &AppState) -> Self {
        WebSignIn {
            auth: state.options.auth.clone(),
            sessions: state.web_sessions.clone(),
        }
    }
}
