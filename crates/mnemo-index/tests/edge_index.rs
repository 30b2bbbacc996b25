//! The embedded qdrant-edge index on a real directory: the conformance suite every
//! `VectorIndex` passes, and what is particular to this backend.

#[macro_use]
mod conformance;

use std::path::Path;

use conformance::{point, DIM};
use mnemo_core::Role;
use mnemo_index::{EdgeIndex, EdgeIndexOptions, VectorIndex};

fn open_edge(dir: &Path) -> Box<dyn VectorIndex> {
    Box::new(EdgeIndex::open(&dir.join("index"), &EdgeIndexOptions::new(DIM)).unwrap())
}

vector_index_conformance!(open_edge);

#[test]
fn reopening_with_another_dimension_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(open_edge(dir.path()));
    let err =
        EdgeIndex::open(&dir.path().join("index"), &EdgeIndexOptions::new(DIM + 1)).unwrap_err();
    assert!(err.to_string().contains("8-dimensional"), "{err}");
}

#[test]
fn a_failed_flush_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let index = open_edge(dir.path());
    // The folder vanishes under a live index (as a full disk would fail the writes): the
    // flush reports it, and closing the index does not bring the process down.
    index
        .upsert(vec![point("a", Role::Memory, 2, 0.0)])
        .unwrap();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let err = index.flush().unwrap_err().to_string();
    assert!(err.contains("cannot flush the index"), "{err}");
    drop(index);
}
