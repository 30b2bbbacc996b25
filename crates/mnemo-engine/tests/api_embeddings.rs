//! A store whose vectors come from an OpenAI-compatible `/v1/embeddings` endpoint (the
//! scripted server's, over real HTTP): written, searched, batched, retried, refused when the
//! endpoint fails for good, and never mixed with another model's vectors.

use std::path::Path;

use mnemo_core::{Config, EmbeddingProvider, MemoryRecord, Role};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use mnemo_scripted_llm::ScriptedLlm;

use crate::support;
use support::{config_without_reranker, conv, open_rebuilt};

/// Embeddings from `llm`'s endpoint, found through `openai_base_url`: the LLM's endpoint
/// serves both, as llama.cpp's or Ollama's does.
fn api_config(memory_path: &Path, llm: &ScriptedLlm) -> Config {
    Config {
        openai_base_url: Some(llm.base_url()),
        embedding_provider: EmbeddingProvider::Openai,
        embedding_model: "scripted-embeddings".into(),
        embedding_dimensions: Some(48),
        embed_batch_size: 2,
        embedding_timeout_secs: 5,
        start_watcher: false,
        ..config_without_reranker(memory_path)
    }
}

async fn open(config: Config) -> Result<MemoryClient, String> {
    MemoryClient::open(config, OpenOptions::default())
        .await
        .map_err(|e| e.to_string())
}

/// The content of the best hit for `query` in conversation `c1`.
async fn top_hit(client: &MemoryClient, query: &str) -> Result<String, String> {
    let hits = client
        .search(SearchRequest::new(query, conv("c1")).top_k(1))
        .await
        .map_err(|e| e.to_string())?;
    Ok(hits.first().map(|h| h.content.clone()).unwrap_or_default())
}

fn memory(content: &str) -> MemoryRecord {
    MemoryRecord::new(conv("c1"), Role::Memory, content)
}

#[tokio::test(flavor = "multi_thread")]
async fn memories_are_embedded_and_found_through_the_endpoint() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(api_config(dir.path(), &llm)).await.unwrap();
    client
        .add_records(vec![
            memory("The user grows tomatoes on the balcony."),
            memory("The user's sister teaches violin in Porto."),
            memory("The user cycles to work every morning."),
        ])
        .await
        .unwrap();
    assert_eq!(
        top_hit(&client, "tomatoes balcony").await.unwrap(),
        "The user grows tomatoes on the balcony."
    );

    let requests = llm.embedding_requests();
    assert!(requests.iter().all(|r| r["model"] == "scripted-embeddings"
        && r["dimensions"] == 48
        && r["input"].as_array().is_some_and(|texts| texts.len() <= 2)));
    // The probe, three memories in batches of two, the query.
    assert!(requests.len() >= 4, "{requests:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_endpoint_is_tried_again_then_named_in_the_error() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(api_config(dir.path(), &llm)).await.unwrap();
    client
        .add_records(vec![memory("The user grows tomatoes on the balcony.")])
        .await
        .unwrap();
    llm.fail_embeddings(2);
    let found = top_hit(&client, "tomatoes").await;
    assert_eq!(
        found.as_deref(),
        Ok("The user grows tomatoes on the balcony."),
        "two 503s are tried again"
    );

    llm.fail_embeddings(100);
    // A text embedded lately is answered from memory; a new one needs the endpoint.
    assert!(top_hit(&client, "tomatoes").await.is_ok());
    let error = top_hit(&client, "tomato plants").await.unwrap_err();
    assert!(
        error.contains(&format!("{}/embeddings", llm.base_url())) && error.contains("503"),
        "{error}"
    );
    // A write the endpoint cannot embed fails with the same message and stores nothing.
    let bees = || memory("The user keeps bees on the roof.");
    let refused = client
        .add_records(vec![bees()])
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("503"), "{refused}");
    assert_eq!(client.list(Some(conv("c1"))).await.unwrap().len(), 1);
    llm.fail_embeddings(0);
    assert_eq!(
        top_hit(&client, "tomato plants").await.unwrap(),
        "The user grows tomatoes on the balcony."
    );
    // The retry stores it once, indexed.
    client.add_records(vec![bees()]).await.unwrap();
    assert_eq!(client.list(Some(conv("c1"))).await.unwrap().len(), 2);
    assert_eq!(
        top_hit(&client, "bees roof").await.unwrap(),
        "The user keeps bees on the roof."
    );
    drop(client);
    let client = open(api_config(dir.path(), &llm)).await.unwrap();
    assert_eq!(
        client.startup_sync().embedded,
        0,
        "nothing was left unindexed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_filled_by_one_embedder_refuses_another_until_a_full_reindex() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(api_config(dir.path(), &llm)).await.unwrap();
    client
        .add_records(vec![memory("The user grows tomatoes on the balcony.")])
        .await
        .unwrap();
    drop(client);

    // The local model, whose vectors have another length and meaning.
    let local = Config {
        start_watcher: false,
        ..config_without_reranker(dir.path())
    };
    let refused = open(local.clone()).await.err().expect("refused");
    assert!(
        refused.contains("openai:scripted-embeddings (48 dimensions)")
            && refused.contains("all-MiniLM-L6-v2 (384 dimensions)")
            && refused.contains("mnemo reindex --full"),
        "{refused}"
    );
    // The same endpoint asked for other dimensions is another model too.
    let mut shorter = api_config(dir.path(), &llm);
    shorter.embedding_dimensions = Some(32);
    assert!(open(shorter).await.is_err());

    let client = open_rebuilt(local).await;
    assert_eq!(client.startup_sync().embedded, 1);
    assert_eq!(
        top_hit(&client, "What do I grow?").await.unwrap(),
        "The user grows tomatoes on the balcony."
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_does_not_answer_stops_the_store_from_opening_with_its_url() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = Config {
        embedding_provider: EmbeddingProvider::Openai,
        embedding_base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        embedding_timeout_secs: 2,
        start_watcher: false,
        ..config_without_reranker(dir.path())
    };
    let error = open(config).await.err().expect("refused");
    assert!(
        error.contains(&format!("http://127.0.0.1:{port}/v1/embeddings")),
        "{error}"
    );
}
