//! The engine with its index on a real Qdrant server (started by each test on loopback):
//! the files stay the truth while the server is lost, stores share a collection without
//! seeing each other, and a full reindex touches only its own store's points.
//!
//! Without the Qdrant binary (`MNEMO_QDRANT_BIN`, or `../shared/qdrant/qdrant`) the tests
//! say why and pass; under `CI=true` they fail instead (`mnemo_test_support::require`).

use std::path::Path;
use std::time::{Duration, Instant};

use mnemo_core::Config;
use mnemo_engine::{IndexBackend, MemoryClient, OpenOptions, SearchRequest};
use mnemo_scripted_llm::{add_every_fact, ChatRequest, Reply, ScriptedLlm};
use mnemo_test_support::qdrant::{self, LocalQdrant};
use serde_json::json;

use crate::support;
use support::{config_without_reranker, conv};

/// The server for one test, or `None` when there is no binary (said on stderr; a failure
/// under `CI=true`).
fn server(dir: &Path) -> Option<LocalQdrant> {
    mnemo_test_support::require(qdrant::binary())?;
    Some(LocalQdrant::start(&dir.join("qdrant"), 1).unwrap_or_else(|e| panic!("{e}")))
}

fn config(memory_path: &Path, index_url: &str) -> Config {
    Config {
        index_url: Some(index_url.to_owned()),
        index_collection: "shared".into(),
        start_watcher: false,
        ..config_without_reranker(memory_path)
    }
}

async fn open(config: Config, rebuild: bool) -> MemoryClient {
    let options = OpenOptions {
        rebuild,
        ..OpenOptions::default()
    };
    MemoryClient::open(config, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn contents(client: &MemoryClient, query: &str) -> Vec<String> {
    client
        .search(SearchRequest::new(query, conv("c1")).top_k(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|h| h.content)
        .collect()
}

/// Extracts the cat from a message about it, adds every fact shown to it, keeps a summary,
/// and answers chats with "Noted.".
fn cat_model(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") if message.contains("Miso") => {
            Reply::Json(json!({"facts": ["The user adopted a grey cat called Miso."]}))
        }
        Some("facts") => Reply::Json(json!({"facts": []})),
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "The user has a wife and a cat."})),
        _ => Reply::text("Noted."),
    }
}

/// The texts of the files in one folder of conversation `c1`.
fn files(dir: &Path, folder: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("entries/c1").join(folder)) else {
        return Vec::new();
    };
    entries
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_server_loses_nothing_on_disk_and_is_caught_up_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut qdrant) = server(dir.path()) else {
        return;
    };
    let store = dir.path().join("store");
    let url = qdrant.grpc_url(0);
    let llm = ScriptedLlm::with_handler(cat_model).await;
    let mut config = config(&store, &url);
    config.openai_base_url = Some(llm.base_url());
    let client = open(config, false).await;
    let _watcher = client.start_watcher().unwrap();
    let added = client
        .add(vec!["Anne is my wife.".into()], &conv("c1"))
        .await
        .unwrap();
    let anne = added.added[0].record.id;
    assert!(contents(&client, "who is my wife").await[0].contains("Anne"));

    qdrant.kill(0);
    // What needs the index fails, saying which server and that it is unavailable.
    let err = client
        .add(vec!["My brother Tom lives in Denver.".into()], &conv("c1"))
        .await
        .unwrap_err();
    assert!(err.is_index_unavailable(), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
    let err = client
        .search(SearchRequest::new("wife", conv("c1")))
        .await
        .unwrap_err();
    assert!(err.is_index_unavailable(), "{err}");
    // A chat is answered without memories, and its turns are kept on disk.
    let body = json!({
        "model": "m",
        "memory_id": "c1",
        "messages": [{"role": "user", "content": "We adopted a grey cat called Miso."}],
    });
    client.chat(body).await.unwrap_or_else(|e| panic!("{e}"));
    client.wait_idle().await;
    assert!(files(&store, "turns/user")
        .iter()
        .any(|t| t.contains("called Miso")));
    // A hand edit, and a delete: the files change now, the index later.
    let facts = store.join("entries/c1/facts");
    std::fs::write(
        facts.join("boat.md"),
        "The sailing boat is moored at pier 7.",
    )
    .unwrap();
    let err = client.delete(anne).await.unwrap_err();
    assert!(err.is_index_unavailable(), "{err}");
    assert!(files(&store, "deleted/facts")
        .iter()
        .any(|t| t.contains("Anne")));

    // The write pass of the chat failed with the server away: no fact yet.
    assert!(files(&store, "facts").iter().all(|f| !f.contains("Miso")));

    qdrant.restart(0).unwrap_or_else(|e| panic!("{e}"));
    // Caught up without a call from here: the index matches the files, and the pass that
    // failed ran again and stored the cat.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let check = client.verify().await;
        let cat_stored = files(&store, "facts").iter().any(|f| f.contains("Miso"));
        if let Ok(check) = &check {
            if check.missing.is_empty() && check.orphans.is_empty() && cat_stored {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the index never caught up with the files: {check:?}\n{}",
            qdrant.log_tail(0)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(files(&store, "facts")
        .iter()
        .any(|f| f.contains("adopted a grey cat called Miso")));
    assert!(contents(&client, "our cat")
        .await
        .iter()
        .any(|c| c.contains("Miso")));
    assert!(contents(&client, "sailing boat").await[0].contains("pier 7"));
    assert!(!contents(&client, "who is my wife")
        .await
        .iter()
        .any(|c| c.contains("Anne")));
    // And writes work again.
    client
        .add(vec!["My brother Tom lives in Denver.".into()], &conv("c1"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn stores_share_a_collection_without_seeing_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let Some(qdrant) = server(dir.path()) else {
        return;
    };
    let url = qdrant.grpc_url(0);
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let client = open(config(&first, &url), false).await;
    client
        .add(
            vec![
                "I keep bees on the roof.".into(),
                "My sister is a pilot.".into(),
                "I play the cello.".into(),
            ],
            &conv("c1"),
        )
        .await
        .unwrap();
    assert_eq!(
        client.index_backend(),
        &IndexBackend::Qdrant {
            url: url.clone(),
            collection: "shared".into()
        }
    );
    let other = open(config(&second, &url), false).await;
    other
        .add(
            vec!["I grow tomatoes.".into(), "My sister is a nurse.".into()],
            &conv("c1"),
        )
        .await
        .unwrap();

    // Same collection, same conversation name: each sees its own memories only.
    let seen = contents(&other, "what does my sister do").await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|c| !c.contains("pilot")), "{seen:?}");
    assert_eq!(client.index_size().await.unwrap(), 3);
    assert_eq!(other.index_size().await.unwrap(), 2);

    // A full reindex of one store empties and refills only its own points.
    drop(other);
    let other = open(config(&second, &url), true).await;
    assert_eq!(other.startup_sync().embedded, 2);
    assert_eq!(other.index_size().await.unwrap(), 2);
    let check = client.verify().await.unwrap();
    assert_eq!((check.files, check.points), (3, 3), "{check:?}");
    assert!(contents(&client, "what does my sister do")
        .await
        .iter()
        .any(|c| c.contains("pilot")));

    // Reopened, the server already holds everything: nothing is embedded again.
    drop(client);
    let client = open(config(&first, &url), false).await;
    assert_eq!(client.startup_sync().embedded, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_at_start_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let err = MemoryClient::open(config(dir.path(), &url), OpenOptions::default())
        .await
        .err()
        .expect("no server, no client");
    assert!(err.is_index_unavailable(), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
}
