//! A three-node Qdrant cluster on loopback (Raft consensus, three shards, two copies of
//! each): acknowledged writes survive a node's crash, searches keep answering, and the node
//! catches up once restarted. Without the server binary the test skips, saying why; under
//! `CI=true` it fails instead.

#[path = "../../mnemo-index/tests/conformance/mod.rs"]
#[allow(dead_code)]
mod conformance;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use conformance::{point, DIM};
use mnemo_core::{MemoryId, Role};
use mnemo_index::{Filter, Point, Query, VectorIndex};
use mnemo_qdrant::{QdrantIndex, QdrantOptions};
use mnemo_test_support::qdrant::{self, LocalQdrant};
use qdrant_client::qdrant::ReplicaState;
use uuid::Uuid;

fn cluster_options(cluster: &LocalQdrant, node: usize, store: Uuid) -> QdrantOptions {
    QdrantOptions {
        shards: 3,
        replication: 2,
        timeout: Duration::from_secs(10),
        ..QdrantOptions::new(&cluster.grpc_url(node), "replicated", store, DIM)
    }
}

fn points(n: usize) -> Vec<Point> {
    (0..n)
        .map(|i| point("a", Role::Memory, i % DIM, (i % 5) as f32 / 10.0))
        .collect()
}

/// Every acknowledged point is there, and a search answers.
fn assert_complete(index: &QdrantIndex, acknowledged: &HashSet<MemoryId>, when: &str) {
    let ids: HashSet<MemoryId> = index.ids().unwrap().into_iter().collect();
    let missing = acknowledged.difference(&ids).count();
    assert_eq!(missing, 0, "{when}: {missing} acknowledged points missing");
    assert_eq!(
        index.count(&Filter::all()).unwrap(),
        acknowledged.len(),
        "{when}"
    );
    let hits = index
        .query(&Query {
            vector: conformance::vector(0, 0.0).into(),
            filter: Filter::all(),
            limit: 5,
            with_vectors: false,
        })
        .unwrap();
    assert_eq!(hits.len(), 5, "{when}: a search answers");
}

/// Waits until every shard replica node `node` holds is active again (it caught up).
fn wait_until_caught_up(cluster: &LocalQdrant, node: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = {
        let _inside = runtime.enter();
        qdrant_client::Qdrant::from_url(&cluster.grpc_url(node))
            .skip_compatibility_check()
            .build()
            .unwrap()
    };
    let started = Instant::now();
    loop {
        let info = runtime.block_on(client.collection_cluster_info("replicated"));
        let states: Vec<i32> = info
            .iter()
            .flat_map(|i| &i.local_shards)
            .map(|s| s.state)
            .collect();
        if !states.is_empty() && states.iter().all(|&s| s == ReplicaState::Active as i32) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "node {node} did not catch up: shard states {states:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn acknowledged_writes_survive_a_node_crash_and_the_node_catches_up() {
    mnemo_test_support::skip_unless!(qdrant::binary());
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalQdrant::start(dir.path(), 3).unwrap();
    let store = Uuid::new_v4();
    let index = QdrantIndex::open(&cluster_options(&cluster, 0, store)).unwrap();
    let mut acknowledged = HashSet::new();
    for batch in points(600).chunks(100) {
        index.upsert(batch.to_vec()).unwrap();
        acknowledged.extend(batch.iter().map(|p| p.id));
    }

    // A crash right after the acknowledgements: the other copies hold every write.
    cluster.kill(1);
    assert_complete(&index, &acknowledged, "with node 2 down");
    // Writes go on while it is down.
    let during = points(200);
    index.upsert(during.clone()).unwrap();
    acknowledged.extend(during.iter().map(|p| p.id));
    assert_complete(&index, &acknowledged, "after writing with node 2 down");

    // Back up, node 2 catches up: with another node down, the shards it shares with that
    // node answer from its copy alone.
    cluster.restart(1).unwrap();
    wait_until_caught_up(&cluster, 1);
    cluster.kill(2);
    let through_node_2 = QdrantIndex::open(&cluster_options(&cluster, 1, store)).unwrap();
    assert_complete(
        &through_node_2,
        &acknowledged,
        "node 2 caught up, node 3 down",
    );
}
