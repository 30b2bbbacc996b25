//! The Qdrant server backend against a real single-node server, started by each test on free
//! loopback ports with storage in the test's folder: the conformance suite every
//! `VectorIndex` passes, and what is particular to a shared server. Without the server binary
//! the tests skip, saying why; under `CI=true` they fail instead (`mnemo_test_support::require`).

#[path = "../../mnemo-index/tests/conformance/mod.rs"]
#[macro_use]
mod conformance;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use conformance::{point, DIM};
use mnemo_core::Role;
use mnemo_index::{Filter, IndexError, VectorIndex};
use mnemo_qdrant::{QdrantIndex, QdrantOptions};
use mnemo_test_support::qdrant::{self, LocalQdrant};
use mnemo_test_support::skip_unless;
use uuid::Uuid;

thread_local! {
    /// Each test's server, by the folder it opened: stopped when the test's thread ends.
    static SERVERS: RefCell<HashMap<PathBuf, LocalQdrant>> = RefCell::default();
}

/// Whether the tests can run here: the server binary is there, or why not.
fn server_binary() -> Result<(), String> {
    qdrant::binary().map(drop)
}

/// The store `dir` stands for, on the server started for `dir`.
fn open_server(dir: &Path) -> Box<dyn VectorIndex> {
    let url = SERVERS.with(|servers| {
        let mut servers = servers.borrow_mut();
        let server = servers
            .entry(dir.to_owned())
            .or_insert_with(|| LocalQdrant::start(&dir.join("qdrant"), 1).unwrap());
        server.grpc_url(0)
    });
    let store = Uuid::new_v5(&Uuid::NAMESPACE_URL, dir.to_string_lossy().as_bytes());
    Box::new(QdrantIndex::open(&QdrantOptions::new(&url, "mnemo", store, DIM)).unwrap())
}

vector_index_conformance!(open_server, server_binary);

fn options(server: &LocalQdrant, store: Uuid) -> QdrantOptions {
    QdrantOptions {
        timeout: Duration::from_secs(2),
        ..QdrantOptions::new(&server.grpc_url(0), "shared", store, DIM)
    }
}

#[test]
fn two_stores_share_a_collection_without_seeing_each_other() {
    skip_unless!(server_binary());
    let dir = tempfile::tempdir().unwrap();
    let server = LocalQdrant::start(dir.path(), 1).unwrap();
    let first = QdrantIndex::open(&options(&server, Uuid::new_v4())).unwrap();
    let second = QdrantIndex::open(&options(&server, Uuid::new_v4())).unwrap();
    // The second store is a copy of the first: the same memory, under the same id.
    let memory = point("trip", Role::Memory, 0, 0.0);
    let mut copy = memory.clone();
    copy.payload.content = "the copy, changed".into();
    first.upsert(vec![memory.clone()]).unwrap();
    second
        .upsert(vec![copy, point("other", Role::Memory, 1, 0.0)])
        .unwrap();
    assert_eq!(first.count(&Filter::all()).unwrap(), 1);
    assert_eq!(second.count(&Filter::all()).unwrap(), 2);
    assert_eq!(first.ids().unwrap(), vec![memory.id]);
    let hits = first
        .query(&mnemo_index::Query {
            vector: conformance::vector(1, 0.0).into(),
            filter: Filter::all(),
            limit: 10,
            with_vectors: false,
        })
        .unwrap();
    assert_eq!(hits.len(), 1, "the other store's points are not found");
    assert_eq!(
        hits[0].payload, memory.payload,
        "not overwritten by the copy"
    );
    second.delete(&[memory.id]).unwrap();
    assert_eq!(first.retrieve(&[memory.id], false).unwrap().len(), 1);
}

#[test]
fn a_collection_of_another_dimension_is_a_clear_error() {
    skip_unless!(server_binary());
    let dir = tempfile::tempdir().unwrap();
    let server = LocalQdrant::start(dir.path(), 1).unwrap();
    drop(QdrantIndex::open(&options(&server, Uuid::new_v4())).unwrap());
    let wider = QdrantOptions {
        dimension: DIM + 1,
        ..options(&server, Uuid::new_v4())
    };
    let err = QdrantIndex::open(&wider).unwrap_err().to_string();
    assert!(err.contains("8-dimensional"), "{err}");
    assert!(err.contains("index_collection"), "{err}");
}

#[test]
fn an_unreachable_server_is_named_and_a_lost_one_is_unavailable() {
    skip_unless!(server_binary());
    let dir = tempfile::tempdir().unwrap();
    let mut server = LocalQdrant::start(dir.path(), 1).unwrap();
    let store = Uuid::new_v4();
    let index = QdrantIndex::open(&options(&server, store)).unwrap();
    let kept = point("a", Role::Memory, 0, 0.0);
    index.upsert(vec![kept.clone()]).unwrap();

    server.kill(0);
    let url = server.grpc_url(0);
    let err = QdrantIndex::open(&options(&server, store)).unwrap_err();
    assert!(
        matches!(err, IndexError::Unavailable { .. }),
        "an unreachable server at start: {err:?}"
    );
    assert!(err.to_string().contains(&url), "{err}");
    let err = index
        .upsert(vec![point("a", Role::Memory, 1, 0.0)])
        .unwrap_err();
    assert!(
        matches!(err, IndexError::Unavailable { .. }),
        "a write to a lost server: {err:?}"
    );
    let err = index.count(&Filter::all()).unwrap_err();
    assert!(matches!(err, IndexError::Unavailable { .. }), "{err:?}");

    // The same index answers again once the server is back, with what it acknowledged.
    server.restart(0).unwrap();
    let mut answered = None;
    for _ in 0..100 {
        match index.ids() {
            Ok(ids) => {
                answered = Some(ids);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    assert_eq!(answered, Some(vec![kept.id]));
}
