//! `GET /health`: the state of the store, the index, the models and the upstream.
//!
//! It is served without a token, so monitors need none; then it leaves out what says where
//! things are (the store's folder name, the upstream's URL and label, its error message) and
//! keeps the state. A request with a token sees everything.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use mnemo_engine::IndexBackend;

use crate::auth::Grant;
use crate::error::{ApiError, ErrorBody};
use crate::options::ServerOptions;

/// What `/health` reads: the client, the options (the upstream's label) and when the server
/// started, and the last probe of the upstream.
#[derive(Clone)]
pub(crate) struct HealthState {
    pub client: mnemo_engine::MemoryClient,
    pub options: std::sync::Arc<ServerOptions>,
    pub started: std::time::Instant,
    pub probe: ProbeCache,
}

/// What `/health` answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when the upstream or the index server does not answer, or the
    /// store's disk is full.
    pub status: &'static str,
    /// The store's folder name (not its path: answers carry no server paths); left out
    /// without a token when tokens are required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The vector index.
    pub index: IndexHealth,
    /// The models in use.
    pub models: ModelsHealth,
    /// Git versioning of the store.
    pub versioning: VersioningHealth,
    /// Room on the disk that holds the store.
    pub storage: StorageHealth,
    /// The upstream LLM; null when none is configured.
    pub upstream: Option<UpstreamHealth>,
    /// Seconds since the server started.
    pub uptime_s: u64,
}

/// The vector index, as `/health` reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct IndexHealth {
    /// `embedded` (in the store's folder) or `qdrant` (a server or cluster).
    pub backend: &'static str,
    /// The server's URL, for `qdrant`; left out without a token when tokens are required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The server's collection, for `qdrant`; left out without a token when tokens are
    /// required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
    /// This store's points in the index; null when it cannot be read.
    pub points: Option<usize>,
    /// Why the index cannot be read (left out without a token when tokens are required).
    pub error: Option<String>,
}

impl IndexHealth {
    async fn of(client: &mnemo_engine::MemoryClient, detailed: bool) -> Result<Self, ApiError> {
        let (backend, url, collection) = match client.index_backend() {
            IndexBackend::Qdrant { url, collection } => {
                ("qdrant", Some(url.clone()), Some(collection.clone()))
            }
            IndexBackend::Embedded { .. } => ("embedded", None, None),
            IndexBackend::Given => ("given", None, None),
        };
        let (points, error) = match client.index_size().await {
            Ok(points) => (Some(points), None),
            // A lost server is a state to report, not a failure of `/health`.
            Err(e) if e.is_index_unavailable() => (None, Some(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        Ok(Self {
            backend,
            url: url.filter(|_| detailed),
            collection: collection.filter(|_| detailed),
            points,
            error: error.filter(|_| detailed),
        })
    }
}

/// Room on the disk that holds the store, as `/health` reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct StorageHealth {
    /// Less than [`MIN_FREE_BYTES`] (or no new file) can still be written: writes are
    /// refused with 507 until space is freed, and the status is `degraded`.
    pub full: bool,
    /// Bytes a write may still use; left out without a token when tokens are required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
}

pub use mnemo_store::MIN_FREE_BYTES;

impl StorageHealth {
    async fn of(client: &mnemo_engine::MemoryClient, detailed: bool) -> Self {
        match client.free_space().await {
            Ok(free) => Self {
                full: free.is_full(),
                free_bytes: detailed.then_some(free.bytes),
            },
            // A disk that cannot be measured is not called full: its writes say so if it is.
            Err(_) => Self {
                full: false,
                free_bytes: None,
            },
        }
    }
}

/// Git versioning, as `/health` reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersioningHealth {
    /// Whether changes are committed to the store's git repository.
    pub enabled: bool,
    /// Why versioning is off although configured, or why the last commit failed (while no
    /// later one has succeeded); the memories are on disk either way. Left out without a
    /// token when tokens are required.
    pub error: Option<String>,
}

/// The models, as `/health` reports them.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelsHealth {
    /// The embedding model's name.
    pub embedding: String,
    /// `loaded` or `not installed`.
    pub reranker: &'static str,
}

/// The upstream LLM, as `/health` reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamHealth {
    /// Its base URL; left out without a token when tokens are required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What it is ("local LLM ...", or its URL); left out without a token when tokens are
    /// required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Whether it answered just now.
    pub reachable: bool,
    /// Why not, when it did not (left out without a token when tokens are required).
    pub error: Option<String>,
}

/// Status of the store, index, models and upstream.
#[utoipa::path(
    get,
    path = "/health",
    tag = "service",
    security(()),
    responses(
        (status = 200, description = "Status", body = Health),
        (status = 500, description = "The index cannot be read", body = ErrorBody),
    )
)]
pub(crate) async fn health(
    State(state): State<HealthState>,
    grant: Option<Grant>,
) -> Result<Json<Health>, ApiError> {
    // Without auth every request has a grant; with it, only those with a known token.
    let detailed = grant.is_some();
    let client = &state.client;
    let index = IndexHealth::of(client, detailed).await?;
    let upstream = match client.upstream() {
        Some(llm) => {
            let reachable = state.probe.probe(llm).await;
            Some(UpstreamHealth {
                url: detailed.then(|| llm.config().base_url.clone()),
                label: detailed.then(|| state.options.upstream_label.clone()),
                reachable: reachable.is_ok(),
                error: reachable.err().filter(|_| detailed),
            })
        }
        None => None,
    };
    let storage = StorageHealth::of(client, detailed).await;
    let healthy =
        upstream.as_ref().is_some_and(|u| u.reachable) && index.points.is_some() && !storage.full;
    Ok(Json(Health {
        status: if healthy { "ok" } else { "degraded" },
        store: detailed.then(|| {
            client
                .store()
                .root()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        }),
        index,
        models: ModelsHealth {
            embedding: client.config().embedding_model.clone(),
            reranker: if client.has_reranker() {
                "loaded"
            } else {
                "not installed"
            },
        },
        versioning: {
            let (enabled, error) = client.versioning();
            VersioningHealth {
                enabled,
                error: error.filter(|_| detailed),
            }
        },
        storage,
        upstream,
        uptime_s: state.started.elapsed().as_secs(),
    }))
}

/// How long one probe of the upstream answers `/health`: the route needs no token, and each
/// probe is a request upstream with mnemo's key, so a flood of `/health` must not become one.
const PROBE_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// A probe's result and when it was made.
type Probe = (std::time::Instant, Result<(), String>);

/// The upstream's last health probe.
#[derive(Clone, Default)]
pub(crate) struct ProbeCache(std::sync::Arc<tokio::sync::Mutex<Option<Probe>>>);

impl ProbeCache {
    /// The last probe when it is recent, else a new one (one at a time).
    async fn probe(&self, llm: &mnemo_llm::LlmClient) -> Result<(), String> {
        let mut last = self.0.lock().await;
        if let Some((at, result)) = last.as_ref() {
            if at.elapsed() < PROBE_FOR {
                return result.clone();
            }
        }
        let result = llm.health().await.map_err(|e| e.to_string());
        *last = Some((std::time::Instant::now(), result.clone()));
        result
    }
}
