//! The write path end to end with the real local LLM (Qwen2.5-Coder-1.5B through llama.cpp,
//! installed by `scripts/setup llm`). These tests check structure — files, front matter,
//! commits, a summary, facts that carry what was said — not the model's wording. The message
//! shares nothing with the examples in the extraction prompt (`prompts.rs`), so a fact found
//! here was extracted, not copied.

use std::path::PathBuf;

use mnemo_core::{Config, ConversationId, LOCAL_LLM_ALIAS};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use mnemo_llm::{LocalLlm, LocalLlmOptions};
use serde_json::json;

fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

async fn local_llm() -> LocalLlm {
    let config = Config {
        models_dir: models(),
        ..Config::default()
    };
    let paths = config.model_paths();
    LocalLlm::start(&LocalLlmOptions::new(
        paths.python,
        paths.local_llm_model,
        LOCAL_LLM_ALIAS,
    ))
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_turn_becomes_turns_facts_a_summary_and_a_commit() {
    let llm = local_llm().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        memory_path: dir.path().to_owned(),
        models_dir: models(),
        openai_base_url: Some(llm.base_url().to_owned()),
        start_watcher: false,
        ..Config::default()
    };
    config.retrieval.reranker = mnemo_core::RerankerMode::Off;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let conversation = ConversationId::new("home").unwrap();

    let answer = client
        .chat(json!({
            "model": LOCAL_LLM_ALIAS,
            "max_tokens": 24,
            "memory_id": "home",
            "messages": [{"role": "user", "content": "My brother Tomasz works as a pilot, and I am allergic to cats."}]
        }))
        .await
        .unwrap();
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );
    assert!(answer["memory_hits"].is_array());
    client.wait_idle().await;

    let memories = client.list(Some(conversation.clone())).await.unwrap();
    let user_turn = memories
        .iter()
        .find(|m| m.record.role == mnemo_core::Role::User)
        .expect("the user's turn is stored");
    let facts: Vec<_> = memories
        .iter()
        .filter(|m| m.record.role == mnemo_core::Role::Memory)
        .collect();
    assert!(
        (1..=3).contains(&facts.len()),
        "one to three facts from a message with two: {facts:?}"
    );
    for fact in &facts {
        assert_eq!(fact.record.source_id, Some(user_turn.record.id));
        let text = std::fs::read_to_string(&fact.path).unwrap();
        assert!(text.starts_with("---\nid: "), "{text}");
        assert!(text.contains("role: memory"));
    }
    let mentions = |text: &str, words: &[&str]| {
        let text = text.to_lowercase();
        words.iter().any(|w| text.contains(w))
    };
    const BROTHER: [&str; 3] = ["tomasz", "pilot", "brother"];
    assert!(
        facts.iter().any(|f| mentions(&f.record.content, &BROTHER)),
        "a fact carries what the user said of their brother: {facts:?}"
    );
    assert!(memories
        .iter()
        .any(|m| m.record.role == mnemo_core::Role::Assistant));

    let log = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let log = String::from_utf8(log.stdout).unwrap();
    assert!(log.starts_with("mnemo: home: 2 turns, +"), "{log}");

    let summary = memories
        .iter()
        .find(|m| m.record.role == mnemo_core::Role::Summary)
        .expect("a rolling summary was written");
    assert!(summary.path.ends_with("summaries/summary.md"));
    assert!(
        mentions(
            &summary.record.content,
            &["tomasz", "pilot", "brother", "cat", "allerg"]
        ),
        "the summary is about what was said: {}",
        summary.record.content
    );

    // The facts themselves (not the stored turn) are found again by the read path.
    let hits = client
        .search(SearchRequest {
            filter: Some(json!({"role": "memory"})),
            ..SearchRequest::new(
                "What does my brother do for a living?",
                conversation.clone(),
            )
            .top_k(3)
        })
        .await
        .unwrap();
    assert!(
        hits.first().is_some_and(
            |h| facts.iter().any(|f| f.record.id == h.id) && mentions(&h.content, &BROTHER)
        ),
        "{hits:?}"
    );
    llm.stop().await;
}
