//! `MemoryClient` over a real store, the real model and the real embedded index.

use std::path::Path;

use mnemo_engine::{EngineError, MemoryClient, OpenOptions, SearchRequest};

use crate::support;
use support::{conv, store_config, CountingIndex};

async fn open(memory_path: &Path) -> MemoryClient {
    MemoryClient::open(store_config(memory_path), OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn answers(client: &MemoryClient, query: &str) -> Vec<(String, String)> {
    client
        .search(SearchRequest::new(query, conv("c1")).top_k(5))
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.id.to_string(), format!("{:.5}", h.score)))
        .collect()
}

const FACTS: [&str; 6] = [
    "Anne is my wife.",
    "I dislike pizza.",
    "We adopted a grey cat called Miso in 2024.",
    "My brother Tom lives in Denver.",
    "I swim 2 km every Tuesday evening.",
    "My favourite band is Radiohead.",
];

#[tokio::test(flavor = "multi_thread")]
async fn reopening_embeds_nothing_and_a_rebuilt_index_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path()).await;
    client
        .add(FACTS.iter().map(|s| s.to_string()).collect(), &conv("c1"))
        .await
        .unwrap();
    let queries = ["who is my wife", "pets", "exercise habits", "music taste"];
    let mut before = Vec::new();
    for q in queries {
        before.push(answers(&client, q).await);
    }
    drop(client);

    let client = open(dir.path()).await;
    assert_eq!(client.startup_sync().embedded, 0, "nothing changed on disk");
    drop(client);

    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let client = open(dir.path()).await;
    assert_eq!(client.startup_sync().embedded, FACTS.len());
    for (q, expected) in queries.iter().zip(&before) {
        assert_eq!(&answers(&client, q).await, expected, "query {q:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_snapshot_only_costs_a_re_embed() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path()).await;
    client
        .add(
            vec!["The spare key is under the blue pot.".into()],
            &conv("c1"),
        )
        .await
        .unwrap();
    drop(client);
    std::fs::write(dir.path().join("memory_index.json"), "{ not json").unwrap();
    let index = CountingIndex::open(dir.path());
    let options = OpenOptions {
        index: Some(index.clone()),
        ..OpenOptions::default()
    };
    let client = MemoryClient::open(store_config(dir.path()), options)
        .await
        .unwrap();
    assert_eq!(client.startup_sync().embedded, 1);
    assert_eq!(index.upserts(), 1, "one file re-embedded, upserted once");
    assert_eq!(client.index_size().await.unwrap(), 1, "under its own id");
    let hits = client
        .search(SearchRequest::new("spare key", conv("c1")).top_k(5))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_process_owns_a_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let _first = open(dir.path()).await;
    let second = MemoryClient::open(store_config(dir.path()), OpenOptions::default()).await;
    match second {
        Err(EngineError::Locked { path }) => assert_eq!(path, dir.path().canonicalize().unwrap()),
        Err(other) => panic!("expected a lock error, got {other}"),
        Ok(_) => panic!("a second client opened the same store"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_held_at_the_lock_s_old_place_is_not_opened() {
    // What a mnemo from before the lock moved to the root holds.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("index")).unwrap();
    let old = std::fs::File::create(dir.path().join("index/.lock")).unwrap();
    old.try_lock().unwrap();
    let opened = MemoryClient::open(store_config(dir.path()), OpenOptions::default()).await;
    assert!(
        matches!(opened, Err(EngineError::Locked { .. })),
        "opened beside an older mnemo"
    );
    drop(old);
    let client = open(dir.path()).await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_texts_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path()).await;
    let err = client
        .add(vec!["fine".into(), "   ".into()], &conv("c1"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(client.list(None).await.unwrap().is_empty());
}
