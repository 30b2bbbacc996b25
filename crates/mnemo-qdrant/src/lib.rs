//! The vector index on a Qdrant server or cluster: [`QdrantIndex`] implements mnemo's
//! [`VectorIndex`] over `qdrant-client` (gRPC), beside the embedded engine of `mnemo-index`.
//!
//! What carries over from the embedded index, and what a shared server adds:
//! - **The same collection layout**: a named dense vector `dense` (cosine), a sparse vector
//!   `lexical` with Qdrant's IDF modifier (BM25 weights come from mnemo's
//!   [`LexicalEncoder`](mnemo_index::LexicalEncoder), IDF from the server at query time),
//!   keyword indexes on the conversation (a tenant index) and the role, a datetime index on
//!   `created_at` and a float index on `created_ts`. Queries and filters are the embedded
//!   ones, translated to gRPC (the private `convert` module).
//! - **Stores share a collection without seeing each other**: every point carries its store's
//!   id (`store_id`, a tenant index too) and every read and count filters on it. A point's id is
//!   derived from the store id and the memory id, so a store copied to a second server (same
//!   files, same memory ids) gets points of its own instead of overwriting the first's.
//! - **Acknowledged means on the server**: writes wait until the server has applied them
//!   (`wait`), through each shard's leader (medium ordering). Qdrant applies a write to every
//!   live copy of its shard before it answers, so a write acknowledged by a cluster survives
//!   the loss of a node; with the default write consistency factor of 1, writes go on while
//!   a node is down, and the node catches up when it returns.
//! - **Synchronous over asynchronous**: [`VectorIndex`] is synchronous (the engine calls it
//!   from blocking threads) and the client is async, so the index owns a one-thread tokio
//!   runtime and the calling thread waits for each call's answer on a channel.
//! - **Errors say where**: a server that does not answer is [`IndexError::Unavailable`], with
//!   its URL, so front ends can answer "try again" (503) rather than "broken" (500).
//!
//! The tests start a real Qdrant server on loopback through `mnemo-test-support`, which is not
//! part of this library.

mod convert;

use std::future::Future;
use std::time::Duration;

use mnemo_core::MemoryId;
use mnemo_index::{Filter, Hit, IndexError, Point, Query, QueryVector, SparseVector, VectorIndex};
use qdrant_client::qdrant::{
    self, vectors_config, CountPointsBuilder, CreateCollectionBuilder,
    CreateFieldIndexCollectionBuilder, DatetimeIndexParamsBuilder, DeletePointVectorsBuilder,
    DeletePointsBuilder, Distance, FieldType, FloatIndexParamsBuilder, GetPointsBuilder,
    KeywordIndexParamsBuilder, Modifier, PointVectors, PointsIdsList, QueryPointsBuilder,
    ScrollPointsBuilder, SparseVectorParamsBuilder, SparseVectorsConfigBuilder,
    UpdatePointVectorsBuilder, UpsertPointsBuilder, VectorParamsBuilder, VectorsConfigBuilder,
    VectorsSelector, WriteOrdering, WriteOrderingType,
};
use qdrant_client::{Qdrant, QdrantError};
use uuid::Uuid;

use crate::convert::{hit, named_vectors, point_struct, sparse, PointPayloadFields};
pub use crate::convert::{DENSE, MEMORY_FIELD, SPARSE, STORE_FIELD};

/// Points per upsert request: keeps each gRPC message far below its 4 MiB default limit
/// (a point of 384 dimensions and a long payload is a few KiB).
const UPSERT_CHUNK: usize = 256;
/// Point ids per page when listing a store's points.
const SCROLL_PAGE: u32 = 2048;
/// The protocol version this client speaks; a server more than one minor version away is
/// reported once, when the index opens.
const CLIENT_VERSION: (u64, u64) = (1, 20);

/// How to reach and, if need be, create the collection.
#[derive(Clone)]
pub struct QdrantOptions {
    /// The server's gRPC URL, e.g. `http://127.0.0.1:6334`.
    pub url: String,
    /// The server's API key, if it has one. Never logged.
    pub api_key: Option<String>,
    /// The collection, created on first use.
    pub collection: String,
    /// This store's id: its points are kept apart from other stores' in the collection.
    pub store_id: Uuid,
    /// Dimension of the dense vectors (the embedding model's).
    pub dimension: usize,
    /// Shards of a new collection.
    pub shards: u32,
    /// Copies of each shard in a new collection (a cluster's nodes hold them).
    pub replication: u32,
    /// How long one request may take, connecting included.
    pub timeout: Duration,
}

impl std::fmt::Debug for QdrantOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantOptions")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("collection", &self.collection)
            .field("store_id", &self.store_id)
            .field("dimension", &self.dimension)
            .field("shards", &self.shards)
            .field("replication", &self.replication)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl QdrantOptions {
    /// Options for `collection` on the server at `url`: one shard, one copy, 10 s requests.
    pub fn new(url: &str, collection: &str, store_id: Uuid, dimension: usize) -> Self {
        Self {
            url: url.to_owned(),
            api_key: None,
            collection: collection.to_owned(),
            store_id,
            dimension,
            shards: 1,
            replication: 1,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A store's points in a collection on a Qdrant server or cluster.
pub struct QdrantIndex {
    client: Qdrant,
    /// Runs the client's calls; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    collection: String,
    store_id: Uuid,
    url: String,
    dimension: usize,
}

impl std::fmt::Debug for QdrantIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantIndex")
            .field("url", &self.url)
            .field("collection", &self.collection)
            .field("store_id", &self.store_id)
            .finish()
    }
}

impl Drop for QdrantIndex {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside an async context (a server shutting
        // down drops its engine there); nothing is in flight once the index is unreachable.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl QdrantIndex {
    /// Connects to the server and opens the collection, creating it (and its payload indexes)
    /// if it does not exist. A collection made for another dimension, or not by mnemo, is an
    /// error; so is a server that does not answer, naming its URL.
    pub fn open(options: &QdrantOptions) -> Result<Self, IndexError> {
        let open_error = |message: String| IndexError::Open {
            path: options.url.clone().into(),
            message,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("qdrant-client")
            .enable_all()
            .build()
            .map_err(|e| open_error(format!("cannot start the client's runtime: {e}")))?;
        let mut config = qdrant_client::config::QdrantConfig::from_url(&options.url)
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            // mnemo checks the version itself, once (see `check_version`).
            .skip_compatibility_check();
        if let Some(key) = &options.api_key {
            config.set_api_key(key);
        }
        let client = {
            let _inside = runtime.enter();
            Qdrant::new(config).map_err(|e| open_error(e.to_string()))?
        };
        let index = Self {
            client,
            runtime: Some(runtime),
            collection: options.collection.clone(),
            store_id: options.store_id,
            url: options.url.clone(),
            dimension: options.dimension,
        };
        index.check_version()?;
        index.open_collection(options)?;
        Ok(index)
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The collection's name.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// Runs one client call on the index's runtime and waits for its answer.
    fn call<T, F>(&self, op: impl FnOnce(Qdrant, String) -> F) -> Result<T, IndexError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, QdrantError>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| IndexError::Backend("the index is closing".into()))?;
        let call = op(self.client.clone(), self.collection.clone());
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            // The caller waits on `answered`; it is never gone before this send.
            let _ = answer.send(call.await);
        });
        answered
            .recv()
            .map_err(|_| IndexError::Backend("the Qdrant client's task ended unanswered".into()))?
            .map_err(|e| self.error(e))
    }

    /// Sorts a client error: a server that does not answer is `Unavailable`, so callers can
    /// retry; anything else the server refused is a backend error with its message.
    fn error(&self, error: QdrantError) -> IndexError {
        use tonic::Code;
        match &error {
            QdrantError::ResponseError { status }
                if matches!(
                    status.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                ) =>
            {
                IndexError::Unavailable {
                    url: self.url.clone(),
                    message: status.message().to_owned(),
                }
            }
            // The client reports a failed connection as an internal error with this wording.
            QdrantError::ResponseError { status }
                if status.message().starts_with("Failed to connect") =>
            {
                IndexError::Unavailable {
                    url: self.url.clone(),
                    message: connect_failure(status.message()),
                }
            }
            QdrantError::ResponseError { status } => IndexError::Backend(format!(
                "Qdrant at {} refused: {}",
                self.url,
                status.message()
            )),
            _ => IndexError::Backend(format!("Qdrant at {}: {error}", self.url)),
        }
    }

    /// Reports a server more than one minor version from the client's, once per open: the
    /// calls mnemo makes have been stable for many versions, so it is a warning, not an error.
    fn check_version(&self) -> Result<(), IndexError> {
        let reply = self.call(|client, _| async move { client.health_check().await })?;
        let mut parts = reply.version.split('.').map(|p| p.parse::<u64>().ok());
        let server = (parts.next().flatten(), parts.next().flatten());
        let (major, minor) = CLIENT_VERSION;
        match server {
            (Some(m), Some(n)) if m == major && n.abs_diff(minor) <= 1 => {}
            _ => tracing::warn!(
                "the Qdrant server at {} is version {}, and mnemo's client speaks {major}.{minor}; \
                 mnemo uses only long-stable calls, but upgrade one of them if requests fail",
                self.url,
                reply.version
            ),
        }
        Ok(())
    }

    fn open_collection(&self, options: &QdrantOptions) -> Result<(), IndexError> {
        let exists = self.call(|c, name| async move { c.collection_exists(name).await })?;
        if !exists {
            if let Err(e) = self.create_collection(options) {
                // Another mnemo server may have created it at the same moment.
                let exists = self.call(|c, name| async move { c.collection_exists(name).await })?;
                if !exists {
                    return Err(e);
                }
            }
        }
        self.check_layout()?;
        self.create_payload_indexes()
    }

    fn create_collection(&self, options: &QdrantOptions) -> Result<(), IndexError> {
        let mut dense = VectorsConfigBuilder::default();
        dense.add_named_vector_params(
            DENSE,
            VectorParamsBuilder::new(options.dimension as u64, Distance::Cosine),
        );
        let mut lexical = SparseVectorsConfigBuilder::default();
        lexical.add_named_vector_params(
            SPARSE,
            SparseVectorParamsBuilder::default().modifier(Modifier::Idf as i32),
        );
        let request = CreateCollectionBuilder::new(&self.collection)
            .vectors_config(dense)
            .sparse_vectors_config(lexical)
            .shard_number(options.shards.max(1))
            .replication_factor(options.replication.max(1));
        self.call(|c, _| async move { c.create_collection(request).await })?;
        tracing::info!(
            "created the Qdrant collection {:?} at {} ({} shards, {} copies)",
            self.collection,
            self.url,
            options.shards.max(1),
            options.replication.max(1)
        );
        Ok(())
    }

    /// The collection must have mnemo's two vectors, the dense one of this dimension.
    fn check_layout(&self) -> Result<(), IndexError> {
        let info = self.call(|c, name| async move { c.collection_info(name).await })?;
        let params = info.result.and_then(|r| r.config).and_then(|c| c.params);
        let not_mnemo = |what: &str| IndexError::Open {
            path: self.url.clone().into(),
            message: format!(
                "the collection {:?} {what}: it was not made by mnemo; name another with \
                 index_collection",
                self.collection
            ),
        };
        let Some(params) = params else {
            return Err(not_mnemo("has no parameters"));
        };
        let dense = match params.vectors_config.and_then(|v| v.config) {
            Some(vectors_config::Config::ParamsMap(map)) => map.map.get(DENSE).map(|p| p.size),
            _ => None,
        };
        let Some(size) = dense else {
            return Err(not_mnemo(&format!("has no {DENSE:?} vector")));
        };
        let has_lexical = params
            .sparse_vectors_config
            .is_some_and(|s| s.map.contains_key(SPARSE));
        if !has_lexical {
            return Err(not_mnemo(&format!("has no {SPARSE:?} vector")));
        }
        if size as usize != self.dimension {
            return Err(IndexError::Open {
                path: self.url.clone().into(),
                message: format!(
                    "the collection {:?} holds {size}-dimensional vectors but the embedding \
                     model makes {}; name another collection with index_collection",
                    self.collection, self.dimension
                ),
            });
        }
        Ok(())
    }

    /// Creates the payload indexes every query uses; creating one that exists is a no-op.
    fn create_payload_indexes(&self) -> Result<(), IndexError> {
        let tenant = || KeywordIndexParamsBuilder::default().is_tenant(true);
        let mut requests = vec![
            CreateFieldIndexCollectionBuilder::new(
                &self.collection,
                STORE_FIELD,
                FieldType::Keyword,
            )
            .field_index_params(tenant()),
            CreateFieldIndexCollectionBuilder::new(
                &self.collection,
                mnemo_index::PointPayload::FIELD_CONVERSATION,
                FieldType::Keyword,
            )
            .field_index_params(tenant()),
            CreateFieldIndexCollectionBuilder::new(
                &self.collection,
                mnemo_index::PointPayload::FIELD_CREATED_AT,
                FieldType::Datetime,
            )
            .field_index_params(DatetimeIndexParamsBuilder::default()),
            CreateFieldIndexCollectionBuilder::new(
                &self.collection,
                mnemo_index::PointPayload::FIELD_CREATED_TS,
                FieldType::Float,
            )
            .field_index_params(FloatIndexParamsBuilder::default()),
        ];
        for field in mnemo_index::PointPayload::KEYWORD_FIELDS {
            if field != mnemo_index::PointPayload::FIELD_CONVERSATION {
                requests.push(CreateFieldIndexCollectionBuilder::new(
                    &self.collection,
                    field,
                    FieldType::Keyword,
                ));
            }
        }
        for request in requests {
            let request = request.wait(true);
            self.call(|c, _| async move { c.create_field_index(request).await })?;
        }
        Ok(())
    }

    /// Only this store's points.
    fn store_filter(&self, filter: &Filter) -> Result<qdrant::Filter, IndexError> {
        let mut filter = convert::filter(filter)?;
        filter.must.push(qdrant::Condition::matches(
            STORE_FIELD,
            self.store_id.to_string(),
        ));
        Ok(filter)
    }

    fn point_id(&self, id: MemoryId) -> qdrant::PointId {
        convert::point_id(self.store_id, id)
    }

    fn fields(&self) -> PointPayloadFields {
        PointPayloadFields {
            store_id: self.store_id,
        }
    }

    fn check_dimension(&self, got: usize) -> Result<(), IndexError> {
        if got != self.dimension {
            return Err(IndexError::Dimension {
                expected: self.dimension,
                got,
            });
        }
        Ok(())
    }
}

/// Writes are applied through a shard's leader, so replicas apply them in one order.
fn ordering() -> WriteOrdering {
    WriteOrdering {
        r#type: WriteOrderingType::Medium as i32,
    }
}

impl VectorIndex for QdrantIndex {
    /// Every acknowledged write is already durable on the server.
    fn flush(&self) -> Result<(), IndexError> {
        Ok(())
    }

    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError> {
        for point in &points {
            self.check_dimension(point.vector.len())?;
        }
        let fields = self.fields();
        for chunk in points.chunks(UPSERT_CHUNK) {
            let batch = chunk
                .iter()
                .map(|p| point_struct(&fields, p))
                .collect::<Result<Vec<_>, _>>()?;
            let request = UpsertPointsBuilder::new(&self.collection, batch)
                .wait(true)
                .ordering(ordering());
            self.call(|c, _| async move { c.upsert_points(request).await })?;
        }
        Ok(())
    }

    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids = ids.iter().map(|&id| self.point_id(id)).collect();
        let request = DeletePointsBuilder::new(&self.collection)
            .points(PointsIdsList { ids })
            .wait(true)
            .ordering(ordering());
        self.call(|c, _| async move { c.delete_points(request).await })?;
        Ok(())
    }

    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError> {
        let (empty, set): (Vec<_>, Vec<_>) = updates.into_iter().partition(|(_, v)| v.is_empty());
        if !set.is_empty() {
            let points = set
                .into_iter()
                .map(|(id, v)| PointVectors {
                    id: Some(self.point_id(id)),
                    vectors: Some(named_vectors(vec![(SPARSE, sparse(v))]).into()),
                })
                .collect::<Vec<_>>();
            let request = UpdatePointVectorsBuilder::new(&self.collection, points)
                .wait(true)
                .ordering(ordering());
            self.call(|c, _| async move { c.update_vectors(request).await })?;
        }
        if !empty.is_empty() {
            let ids = empty.into_iter().map(|(id, _)| self.point_id(id)).collect();
            let request = DeletePointVectorsBuilder::new(&self.collection)
                .points_selector(PointsIdsList { ids })
                .vectors(VectorsSelector {
                    names: vec![SPARSE.to_owned()],
                })
                .wait(true)
                .ordering(ordering());
            self.call(|c, _| async move { c.delete_vectors(request).await })?;
        }
        Ok(())
    }

    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError> {
        let (input, using) = match &query.vector {
            QueryVector::Dense(v) => {
                self.check_dimension(v.len())?;
                (qdrant::VectorInput::new_dense(v.clone()), DENSE)
            }
            QueryVector::Lexical(v) if v.is_empty() => return Ok(Vec::new()),
            QueryVector::Lexical(v) => (
                qdrant::VectorInput::new_sparse(v.indices.clone(), v.values.clone()),
                SPARSE,
            ),
        };
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let request = QueryPointsBuilder::new(&self.collection)
            .query(qdrant::Query::new_nearest(input))
            .using(using)
            .filter(self.store_filter(&query.filter)?)
            .limit(query.limit as u64)
            .with_payload(true)
            .with_vectors(dense_selector(query.with_vectors));
        let found = self.call(|c, _| async move { c.query(request).await })?;
        found
            .result
            .into_iter()
            .map(|p| hit(p.payload, p.score, p.vectors))
            .collect()
    }

    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<_> = ids.iter().map(|&id| self.point_id(id)).collect();
        let request = GetPointsBuilder::new(&self.collection, ids)
            .with_payload(true)
            .with_vectors(dense_selector(with_vectors));
        let found = self.call(|c, _| async move { c.get_points(request).await })?;
        found
            .result
            .into_iter()
            .map(|p| hit(p.payload, 0.0, p.vectors))
            .collect()
    }

    fn count(&self, filter: &Filter) -> Result<usize, IndexError> {
        let request = CountPointsBuilder::new(&self.collection)
            .filter(self.store_filter(filter)?)
            .exact(true);
        let counted = self.call(|c, _| async move { c.count(request).await })?;
        Ok(counted.result.map_or(0, |r| r.count as usize))
    }

    fn ids(&self) -> Result<Vec<MemoryId>, IndexError> {
        let filter = self.store_filter(&Filter::all())?;
        let mut ids = Vec::new();
        let mut offset = None;
        loop {
            let mut request = ScrollPointsBuilder::new(&self.collection)
                .filter(filter.clone())
                .limit(SCROLL_PAGE)
                .with_payload(qdrant::PayloadIncludeSelector {
                    fields: vec![MEMORY_FIELD.to_owned()],
                })
                .with_vectors(false);
            if let Some(offset) = offset.take() {
                request = request.offset(offset);
            }
            let page = self.call(|c, _| async move { c.scroll(request).await })?;
            for point in &page.result {
                ids.push(convert::memory_id(&point.payload)?);
            }
            match page.next_page_offset {
                Some(next) => offset = Some(next),
                None => return Ok(ids),
            }
        }
    }

    fn dimension(&self) -> usize {
        self.dimension
    }
}

/// Why a connection failed, in a few words instead of the client's debug dump.
fn connect_failure(message: &str) -> String {
    let reason = if message.contains("Connection refused") {
        "connection refused"
    } else if message.contains("timed out") || message.contains("Timeout") {
        "timed out connecting"
    } else {
        "cannot connect"
    };
    reason.to_owned()
}

/// The dense vector only (MMR needs it), or no vectors.
fn dense_selector(with_vectors: bool) -> qdrant::with_vectors_selector::SelectorOptions {
    match with_vectors {
        true => VectorsSelector {
            names: vec![DENSE.to_owned()],
        }
        .into(),
        false => false.into(),
    }
}
