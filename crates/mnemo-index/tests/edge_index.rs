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

/// Bytes of the files under `dir`.
fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => size_of(&e.path()),
            false => e.metadata().unwrap().len(),
        })
        .sum()
}

/// A store that lives with eviction deletes as much as it adds: the deleted points go once
/// enough was written, and what is left is found as before, after a reopen too.
#[test]
fn compaction_gives_back_deleted_points_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let index = open_edge(dir.path());
    assert!(!index.compact().unwrap(), "nothing written, nothing to do");
    let points: Vec<_> = (0..3_000)
        .map(|i| point("a", Role::Memory, i % 8, i as f32 / 3_000.0))
        .collect();
    let ids: Vec<_> = points.iter().map(|p| p.id).collect();
    for batch in points.chunks(500) {
        index.upsert(batch.to_vec()).unwrap();
    }
    index.delete(&ids[..2_000]).unwrap();
    index.flush().unwrap();
    let before = size_of(&dir.path().join("index"));
    assert!(
        index.compact().unwrap(),
        "two thirds deleted: the segment is rewritten"
    );
    index.flush().unwrap();
    let after = size_of(&dir.path().join("index"));
    assert!(after < before, "{after} bytes after, {before} before");
    assert!(!index.compact().unwrap(), "nothing written since");
    let kept = |index: &dyn VectorIndex| {
        let mut kept = index.ids().unwrap();
        kept.sort();
        kept
    };
    let mut expected = ids[2_000..].to_vec();
    expected.sort();
    assert_eq!(kept(index.as_ref()), expected);
    let hits = index.retrieve(&ids[2_990..], true).unwrap();
    assert_eq!(hits.len(), 10);
    assert!(hits
        .iter()
        .all(|h| h.vector.as_ref().is_some_and(|v| v.len() == DIM)));
    // Writes go on into the compacted index.
    index
        .upsert(vec![point("a", Role::Memory, 3, 0.5)])
        .unwrap();
    drop(index);
    let reopened = open_edge(dir.path());
    assert_eq!(reopened.ids().unwrap().len(), 1_001);
}

/// qdrant-edge writes through memory maps, where a full disk is no error but SIGBUS, which
/// ends the process: on a full disk, an update is refused with "storage full", the process
/// lives on, and once there is room writes go on.
#[test]
fn a_full_disk_refuses_updates_and_the_process_lives() {
    use mnemo_test_support::full_disk::{fill, Tmpfs};
    let Some(fs) = mnemo_test_support::require(Tmpfs::mount("32m")) else {
        return;
    };
    let index = open_edge(fs.path());
    index
        .upsert(vec![point("a", Role::Memory, 1, 0.0)])
        .unwrap();
    let filler = fill(fs.path());
    for round in 0..200 {
        let points = (0..50)
            .map(|i| point("a", Role::Memory, i, round as f32))
            .collect();
        let err = index.upsert(points).unwrap_err();
        let storage_full = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::StorageFull);
        assert!(storage_full, "round {round}: {err}");
    }
    assert!(!index.compact().unwrap(), "no compaction on a full disk");
    std::fs::remove_file(filler).unwrap();
    index
        .upsert(vec![point("a", Role::Memory, 2, 0.0)])
        .unwrap();
    index.flush().unwrap();
    assert_eq!(index.ids().unwrap().len(), 2);
}
