//! The embedded backend on `qdrant-edge` (Qdrant's in-process engine).
//!
//! Three properties of qdrant-edge 0.7.2 shape this file:
//! - loading a shard does not replay its write-ahead log, so a write is durable only after a
//!   flush ([`VectorIndex::flush`], or dropping the index). Flushing syncs every segment
//!   file, so writes do not flush one by one: mnemo flushes before it records what the index
//!   holds (`memory_index.json`), and the start-up sync re-indexes anything a crash lost;
//! - `flush()` panics if another thread is inside `update()`, so updates and flushes go
//!   through one writer lock;
//! - `EdgeShard::new` does not create its directory;
//! - a flush that fails (a full disk, a removed folder) panics, and dropping a shard
//!   flushes it: both are run through [`contained`], which turns the panic into an error the
//!   caller reports once, and keeps the panic hook quiet meanwhile;
//! - the shard writes its log and its segments through memory maps, and a write through a
//!   map into a page that a full disk cannot give is no error but SIGBUS, which ends the
//!   process without a word: updates and compactions are refused with [`IndexError::NoRoom`]
//!   while the index's disk counts as full ([`mnemo_fs::FreeSpace::is_full`]);
//! - a deleted or rewritten point stays in its segment, marked, until the shard's optimizers
//!   run, which only [`EdgeShard::optimize`] does: [`VectorIndex::compact`] runs them once
//!   enough has been written, with indexing off (searches are exact, so an HNSW graph would
//!   be built for nothing), so a store that lives with eviction does not grow for ever.

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use mnemo_core::MemoryId;
use parking_lot::Mutex;
use qdrant_edge::{
    CountRequest, CreateIndex, Distance, EdgeConfig, EdgeOptimizersConfig, EdgeShard,
    EdgeSparseVectorParams, EdgeVectorParams, FieldIndexOperations, Filter as EdgeFilter, JsonPath,
    Modifier, PayloadFieldSchema, PayloadSchemaType, PointId, PointIdsList, PointInsertOperations,
    PointOperations, PointStruct, PointVectorsPersisted, QueryEnum, QueryRequest, ScoringQuery,
    ScrollRequest, UpdateOperation, UpdateVectorsOp, VectorInternal, VectorOperations,
    VectorPersisted, VectorStructInternal, VectorStructPersisted, Vectors, WalOptions,
    WithPayloadInterface, WithVector,
};
use qdrant_edge::{NamedQuery, Payload as EdgePayload, Vector as EdgeVector};

use crate::filter::Filter;
use crate::payload::PointPayload;
use crate::vector_index::{Hit, IndexError, Point, Query, QueryVector, SparseVector, VectorIndex};

use crate::vector_index::{DENSE_VECTOR as DENSE, LEXICAL_VECTOR as SPARSE};

/// How to create a new embedded index.
#[derive(Debug, Clone)]
pub struct EdgeIndexOptions {
    /// Dimension of the dense vectors, fixed for the index's lifetime (the embedding model's).
    pub dimension: usize,
    /// Size of one write-ahead-log segment file.
    pub wal_segment_bytes: usize,
}

impl EdgeIndexOptions {
    /// Options for an index of `dimension`-dimensional dense vectors, with 4 MiB log segments.
    pub fn new(dimension: usize) -> Self {
        Self {
            dimension,
            wal_segment_bytes: 4 << 20,
        }
    }
}

/// A persistent in-process vector index in one directory.
pub struct EdgeIndex {
    /// Dropped by hand (see `Drop`), because dropping a shard flushes it and may panic.
    shard: ManuallyDrop<EdgeShard>,
    path: PathBuf,
    dimension: usize,
    /// Serialises update + flush (see module docs).
    writer: Mutex<()>,
    /// Keeps flushes out of the optimizers' way: a flush panics if it meets them swapping
    /// segments. Updates go on while they run.
    optimizing: Mutex<()>,
    /// Points written or deleted since the optimizers last ran.
    written_since_compaction: AtomicUsize,
}

/// How many points are written or deleted between two runs of the optimizers. Each run
/// first plans, which is cheap; it rewrites a segment only when a fifth of its points or
/// more are deleted (qdrant's vacuum threshold).
const COMPACT_EVERY: usize = 1_000;

impl std::fmt::Debug for EdgeIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeIndex")
            .field("path", &self.path)
            .field("dimension", &self.dimension)
            .finish()
    }
}

impl EdgeIndex {
    /// Opens the index at `path`, creating it (and the directory) if it does not exist.
    /// An existing index built for another dimension is an error.
    pub fn open(path: &Path, options: &EdgeIndexOptions) -> Result<Self, IndexError> {
        let open_error = |message: String| IndexError::Open {
            path: path.to_owned(),
            message,
        };
        let exists = path.join("edge_config.json").is_file();
        let shard = if exists {
            EdgeShard::load(path, None).map_err(|e| open_error(e.to_string()))?
        } else {
            std::fs::create_dir_all(path).map_err(|e| open_error(e.to_string()))?;
            EdgeShard::new(path, shard_config(options)).map_err(|e| open_error(e.to_string()))?
        };
        let dimension = shard
            .config()
            .vectors
            .get(DENSE)
            .map(|v| v.size)
            .ok_or_else(|| open_error(format!("the index has no {DENSE:?} vector")))?;
        if dimension != options.dimension {
            return Err(open_error(format!(
                "it holds {dimension}-dimensional vectors but the embedding model makes {}; \
                 delete the index folder to rebuild it from the files",
                options.dimension
            )));
        }
        if shard.config().optimizers != optimizers() {
            // An index made before compaction ran has the default optimizers, which would
            // build a graph for each large segment. The setting is saved in the index's
            // folder; where that fails (a full disk), this run compacts nothing.
            if let Err(e) = shard.set_optimizers_config(optimizers()) {
                tracing::warn!(index = %path.display(), "cannot switch the index's optimizers ({e}); it is not compacted until it can");
            }
        }
        let index = Self {
            shard: ManuallyDrop::new(shard),
            path: path.to_owned(),
            dimension,
            writer: Mutex::new(()),
            optimizing: Mutex::new(()),
            written_since_compaction: AtomicUsize::new(0),
        };
        if !exists {
            index.create_payload_indexes()?;
        }
        Ok(index)
    }

    /// The index's folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn create_payload_indexes(&self) -> Result<(), IndexError> {
        for field in PointPayload::KEYWORD_FIELDS {
            let field_name = field
                .parse::<JsonPath>()
                .map_err(|()| backend(format!("invalid payload field {field:?}")))?;
            let op = UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(
                CreateIndex {
                    field_name,
                    field_schema: Some(PayloadFieldSchema::FieldType(PayloadSchemaType::Keyword)),
                },
            ));
            self.apply(op)?;
        }
        Ok(())
    }

    /// Applies one update, under the writer lock.
    fn apply(&self, op: UpdateOperation) -> Result<(), IndexError> {
        self.apply_all(vec![op])
    }

    /// Applies updates in order, under the writer lock, counting the points they write or
    /// delete towards the next compaction.
    fn apply_all(&self, ops: Vec<UpdateOperation>) -> Result<(), IndexError> {
        self.check_room()?;
        let points: usize = ops.iter().map(points_touched).sum();
        self.written_since_compaction
            .fetch_add(points, Ordering::Relaxed);
        let _writer = self.writer.lock();
        for op in ops {
            self.shard.update(op).map_err(backend)?;
        }
        Ok(())
    }

    /// Refuses a write the index's disk has no room for (see the module docs): a full
    /// disk is an error, not a process ended by SIGBUS. A disk whose room cannot be read
    /// is let through.
    fn check_room(&self) -> Result<(), IndexError> {
        match mnemo_fs::free_space(&self.path) {
            Ok(free) if free.is_full() => Err(IndexError::NoRoom {
                path: self.path.clone(),
                free: free.bytes,
                source: std::io::ErrorKind::StorageFull.into(),
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for EdgeIndex {
    fn drop(&mut self) {
        // SAFETY: the shard is taken here, once, and never touched again.
        let shard = unsafe { ManuallyDrop::take(&mut self.shard) };
        // Dropping a shard flushes it; see `flush` for why that may panic.
        if let Err(why) = contained(|| drop(shard)) {
            tracing::warn!(
                "closing the index in {} failed: {why}; the next start re-indexes what was lost",
                self.path.display(),
            );
        }
    }
}

thread_local! {
    /// Whether this thread is inside [`contained`].
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Installs, once, a panic hook that stays silent for a panic inside [`contained`] (its
/// caller reports it as an error) and hands every other panic to the hook before it.
static QUIET_WHEN_CONTAINED: Once = Once::new();

/// Runs `work`, which may panic inside qdrant-edge, and returns the panic's message as an
/// error instead. The default hook would print every such panic with its backtrace (a
/// flush retried each second on a full disk printed five a minute), although none of them
/// ends anything: the error says it once, where it is handled.
fn contained<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    QUIET_WHEN_CONTAINED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINED.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(work));
    CONTAINED.with(|c| c.set(outer));
    result.map_err(|panic| panic_message(&panic))
}

/// The panic's message, without the backtrace qdrant-edge's errors carry (with
/// `RUST_BACKTRACE` set, a flush's error is 3 KB of frames): the log gets the reason.
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "qdrant-edge panicked".to_owned());
    match message.split_once(", backtrace: ") {
        Some((reason, _)) => format!("{reason} }}"),
        None => message,
    }
}

/// How many points an update writes or deletes.
fn points_touched(op: &UpdateOperation) -> usize {
    match op {
        UpdateOperation::PointOperation(PointOperations::UpsertPoints(
            PointInsertOperations::PointsList(points),
        )) => points.len(),
        UpdateOperation::PointOperation(PointOperations::DeletePoints { ids }) => ids.len(),
        UpdateOperation::VectorOperation(VectorOperations::UpdateVectors(op)) => op.points.len(),
        UpdateOperation::VectorOperation(VectorOperations::DeleteVectors(points, _)) => {
            points.points.len()
        }
        _ => 0,
    }
}

/// The optimizers the index runs: qdrant's defaults, but never building a graph.
fn optimizers() -> EdgeOptimizersConfig {
    EdgeOptimizersConfig {
        // 0 turns indexing off.
        indexing_threshold: Some(0),
        ..EdgeOptimizersConfig::default()
    }
}

fn shard_config(options: &EdgeIndexOptions) -> EdgeConfig {
    let mut config = EdgeConfig {
        optimizers: optimizers(),
        ..EdgeConfig::default()
    };
    config.vectors.insert(
        DENSE.to_owned(),
        EdgeVectorParams {
            size: options.dimension,
            distance: Distance::Cosine,
            on_disk: None,
            multivector_config: None,
            datatype: None,
            quantization_config: None,
            hnsw_config: None,
        },
    );
    config.sparse_vectors.insert(
        SPARSE.to_owned(),
        EdgeSparseVectorParams {
            full_scan_threshold: None,
            on_disk: None,
            modifier: Some(Modifier::Idf),
            datatype: None,
        },
    );
    config.wal_options = Some(WalOptions {
        segment_capacity: options.wal_segment_bytes,
        segment_queue_len: 0,
        retain_closed: NonZeroUsize::MIN,
    });
    config
}

fn backend(e: impl std::fmt::Display) -> IndexError {
    IndexError::Backend(e.to_string())
}

fn edge_filter(filter: &Filter) -> Result<Option<EdgeFilter>, IndexError> {
    if filter.is_empty() {
        return Ok(None);
    }
    serde_json::from_value(filter.to_qdrant_json())
        .map(Some)
        .map_err(|e| backend(format!("invalid filter: {e}")))
}

fn sparse_vector(v: SparseVector) -> Result<qdrant_edge::SparseVector, IndexError> {
    qdrant_edge::SparseVector::new(v.indices, v.values).map_err(backend)
}

fn edge_sparse(v: SparseVector) -> Result<EdgeVector, IndexError> {
    sparse_vector(v).map(EdgeVector::from)
}

fn point_id(id: MemoryId) -> PointId {
    PointId::Uuid(id.as_uuid())
}

fn memory_id(id: &PointId) -> Result<MemoryId, IndexError> {
    match id {
        PointId::Uuid(uuid) => Ok(MemoryId::from_uuid(*uuid)),
        PointId::NumId(n) => Err(backend(format!("unexpected numeric point id {n}"))),
    }
}

fn dense_vector(vectors: Option<VectorStructInternal>) -> Option<Vec<f32>> {
    match vectors? {
        VectorStructInternal::Named(mut named) => match named.remove(DENSE)? {
            VectorInternal::Dense(v) => Some(v),
            _ => None,
        },
        VectorStructInternal::Single(v) => Some(v),
        VectorStructInternal::MultiDense(_) => None,
    }
}

/// A point's payload as mnemo wrote it; a point without one, or with one that does not
/// read, is an error naming the point (the next `reindex --full` rewrites it).
fn point_payload(id: MemoryId, payload: Option<EdgePayload>) -> Result<PointPayload, IndexError> {
    let map: serde_json::Map<String, serde_json::Value> = payload
        .map(|p| p.0.into_iter().collect())
        .unwrap_or_default();
    serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|e| backend(format!("point {id} has an unreadable payload: {e}")))
}

impl VectorIndex for EdgeIndex {
    fn flush(&self) -> Result<(), IndexError> {
        let _optimizing = self.optimizing.lock();
        let _writer = self.writer.lock();
        // qdrant-edge panics when a flush fails (a full disk, a removed folder): make that an
        // error the caller can log and retry, not a dead thread.
        contained(|| self.shard.flush()).map_err(|why| {
            IndexError::Backend(format!(
                "cannot flush the index in {}: {why}",
                self.path.display(),
            ))
        })
    }

    fn compact(&self) -> Result<bool, IndexError> {
        let written = self.written_since_compaction.load(Ordering::Relaxed);
        // A compaction writes a new segment: on a full disk, it waits for room.
        if written < COMPACT_EVERY
            || self.shard.config().optimizers != optimizers()
            || self.check_room().is_err()
        {
            return Ok(false);
        }
        let _optimizing = self.optimizing.lock();
        self.written_since_compaction
            .fetch_sub(written, Ordering::Relaxed);
        contained(|| self.shard.optimize().map_err(|e| e.to_string()))
            .and_then(|optimized| optimized)
            .map_err(|why| {
                IndexError::Backend(format!(
                    "cannot compact the index in {}: {why}",
                    self.path.display()
                ))
            })
    }

    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError> {
        if points.is_empty() {
            return Ok(());
        }
        let mut batch = Vec::with_capacity(points.len());
        for point in points {
            if point.vector.len() != self.dimension {
                return Err(IndexError::Dimension {
                    expected: self.dimension,
                    got: point.vector.len(),
                });
            }
            let mut named = vec![(DENSE, EdgeVector::new_dense(point.vector))];
            if !point.lexical.is_empty() {
                named.push((SPARSE, edge_sparse(point.lexical)?));
            }
            let vectors = Vectors::new_named(named);
            let payload = serde_json::to_value(&point.payload)
                .map_err(|e| backend(format!("cannot encode the payload of {}: {e}", point.id)))?;
            batch.push(PointStruct::new(point_id(point.id), vectors, payload).into());
        }
        self.apply(UpdateOperation::PointOperation(
            PointOperations::UpsertPoints(PointInsertOperations::PointsList(batch)),
        ))
    }

    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids = ids.iter().copied().map(point_id).collect();
        self.apply(UpdateOperation::PointOperation(
            PointOperations::DeletePoints { ids },
        ))
    }

    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError> {
        let (empty, set): (Vec<_>, Vec<_>) = updates.into_iter().partition(|(_, v)| v.is_empty());
        let mut ops = Vec::new();
        if !set.is_empty() {
            let points = set
                .into_iter()
                .map(|(id, v)| {
                    let sparse = VectorPersisted::Sparse(sparse_vector(v)?);
                    Ok(PointVectorsPersisted {
                        id: point_id(id),
                        vector: VectorStructPersisted::Named([(SPARSE.to_owned(), sparse)].into()),
                    })
                })
                .collect::<Result<Vec<_>, IndexError>>()?;
            ops.push(UpdateOperation::VectorOperation(
                VectorOperations::UpdateVectors(UpdateVectorsOp {
                    points,
                    update_filter: None,
                }),
            ));
        }
        if !empty.is_empty() {
            let points = empty.into_iter().map(|(id, _)| point_id(id)).collect();
            ops.push(UpdateOperation::VectorOperation(
                VectorOperations::DeleteVectors(PointIdsList { points }, vec![SPARSE.to_owned()]),
            ));
        }
        if ops.is_empty() {
            return Ok(());
        }
        self.apply_all(ops)
    }

    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError> {
        let (vector, using) = match &query.vector {
            QueryVector::Dense(v) if v.len() != self.dimension => {
                return Err(IndexError::Dimension {
                    expected: self.dimension,
                    got: v.len(),
                })
            }
            QueryVector::Dense(v) => (VectorInternal::Dense(v.clone()), DENSE),
            QueryVector::Lexical(v) if v.is_empty() => return Ok(Vec::new()),
            QueryVector::Lexical(v) => (edge_sparse(v.clone())?.0, SPARSE),
        };
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let request = QueryRequest {
            prefetches: Vec::new(),
            query: Some(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery {
                query: vector,
                using: Some(using.to_owned()),
            }))),
            filter: edge_filter(&query.filter)?,
            score_threshold: None,
            limit: query.limit,
            offset: 0,
            params: None,
            with_vector: WithVector::Bool(query.with_vectors),
            with_payload: WithPayloadInterface::Bool(true),
        };
        self.shard
            .query(request)
            .map_err(backend)?
            .into_iter()
            .map(|p| {
                let id = memory_id(&p.id)?;
                Ok(Hit {
                    id,
                    score: p.score,
                    payload: point_payload(id, p.payload)?,
                    vector: dense_vector(p.vector),
                })
            })
            .collect()
    }

    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError> {
        let ids: Vec<PointId> = ids.iter().copied().map(point_id).collect();
        let records = self
            .shard
            .retrieve(
                &ids,
                Some(WithPayloadInterface::Bool(true)),
                Some(WithVector::Bool(with_vectors)),
            )
            .map_err(backend)?;
        records
            .into_iter()
            .map(|r| {
                let id = memory_id(&r.id)?;
                Ok(Hit {
                    id,
                    score: 0.0,
                    payload: point_payload(id, r.payload)?,
                    vector: dense_vector(r.vector),
                })
            })
            .collect()
    }

    fn count(&self, filter: &Filter) -> Result<usize, IndexError> {
        self.shard
            .count(CountRequest {
                filter: edge_filter(filter)?,
                exact: true,
            })
            .map_err(backend)
    }

    fn ids(&self) -> Result<Vec<MemoryId>, IndexError> {
        let mut ids = Vec::new();
        let mut offset = None;
        loop {
            let (records, next) = self
                .shard
                .scroll(ScrollRequest {
                    offset,
                    limit: Some(1024),
                    filter: None,
                    with_payload: Some(WithPayloadInterface::Bool(false)),
                    with_vector: WithVector::Bool(false),
                    order_by: None,
                })
                .map_err(backend)?;
            for record in &records {
                ids.push(memory_id(&record.id)?);
            }
            match next {
                Some(next) => offset = Some(next),
                None => return Ok(ids),
            }
        }
    }

    fn dimension(&self) -> usize {
        self.dimension
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_panic_is_an_error_with_its_message() {
        assert_eq!(contained(|| 7), Ok(7));
        assert_eq!(
            contained(|| -> () { panic!("segments flushed: no space") }),
            Err("segments flushed: no space".to_owned())
        );
        // Nested, the outer call is still contained after the inner one returns.
        let outer = contained(|| {
            let inner = contained(|| 1);
            assert!(CONTAINED.with(Cell::get));
            inner
        });
        assert_eq!(outer, Ok(Ok(1)));
        assert!(!CONTAINED.with(Cell::get));
    }
}
