//! Shared by the engine's test files: a store's configuration with the checkout's models,
//! conversation ids, and an index that counts what it is asked to write.

// Each test file uses a part of this module.
#![allow(dead_code, unused_imports)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use mnemo_core::{Config, ConversationId, MemoryId};
use mnemo_index::{
    EdgeIndex, EdgeIndexOptions, Filter, Hit, IndexError, Point, Query, SparseVector, VectorIndex,
};

pub use mnemo_test_support::{models_dir as models, store_config};

/// [`store_config`] with the cross-encoder off, for tests of the other stages.
pub fn config_without_reranker(memory_path: &Path) -> Config {
    let mut config = store_config(memory_path);
    config.retrieval.reranker = mnemo_core::RerankerMode::Off;
    config
}

/// A client on the store `config` names, its index thrown away and rebuilt from the files
/// first, as `mnemo reindex --full` opens it.
pub async fn open_rebuilt(config: Config) -> mnemo_engine::MemoryClient {
    let rebuild = mnemo_engine::OpenOptions {
        rebuild: true,
        ..mnemo_engine::OpenOptions::default()
    };
    mnemo_engine::MemoryClient::open(config, rebuild)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The conversation `id`, which the tests write valid.
pub fn conv(id: &str) -> ConversationId {
    ConversationId::new(id).expect("a valid conversation id")
}

/// The real embedded index of a store, counting the upserts of each point.
pub struct CountingIndex {
    inner: EdgeIndex,
    upserts: Mutex<HashMap<MemoryId, usize>>,
}

impl CountingIndex {
    /// Opens the embedded index of the store at `memory_path`, as the engine would.
    pub fn open(memory_path: &Path) -> Arc<Self> {
        let inner =
            EdgeIndex::open(&memory_path.join("index"), &EdgeIndexOptions::new(384)).unwrap();
        Arc::new(Self {
            inner,
            upserts: Mutex::default(),
        })
    }

    /// How many times `id` was upserted since the index was opened.
    pub fn upserts_of(&self, id: MemoryId) -> usize {
        self.upserts.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    /// Upserts since the index was opened, of every point.
    pub fn upserts(&self) -> usize {
        self.upserts.lock().unwrap().values().sum()
    }
}

impl VectorIndex for CountingIndex {
    fn flush(&self) -> Result<(), IndexError> {
        self.inner.flush()
    }

    fn upsert(&self, points: Vec<Point>) -> Result<(), IndexError> {
        {
            let mut upserts = self.upserts.lock().unwrap();
            for point in &points {
                *upserts.entry(point.id).or_default() += 1;
            }
        }
        self.inner.upsert(points)
    }

    fn delete(&self, ids: &[MemoryId]) -> Result<(), IndexError> {
        self.inner.delete(ids)
    }

    fn set_lexical(&self, updates: Vec<(MemoryId, SparseVector)>) -> Result<(), IndexError> {
        self.inner.set_lexical(updates)
    }

    fn query(&self, query: &Query) -> Result<Vec<Hit>, IndexError> {
        self.inner.query(query)
    }

    fn retrieve(&self, ids: &[MemoryId], with_vectors: bool) -> Result<Vec<Hit>, IndexError> {
        self.inner.retrieve(ids, with_vectors)
    }

    fn count(&self, filter: &Filter) -> Result<usize, IndexError> {
        self.inner.count(filter)
    }

    fn ids(&self) -> Result<Vec<MemoryId>, IndexError> {
        self.inner.ids()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
}
