//! The write path end to end with the real local LLM (Qwen2.5-Coder-1.5B through llama.cpp,
//! installed by `scripts/setup llm`). These tests check structure — files, front matter,
//! commits, a summary, facts that carry what was said — not the model's wording. The message
//! shares nothing with the examples in the extraction prompt (`prompts.rs`), so a fact found
//! here was extracted, not copied.

use mnemo_core::{Config, ConversationId, LOCAL_LLM_ALIAS};
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest};
use mnemo_llm::{LocalLlm, LocalLlmOptions};
use serde_json::json;

mod support;
use support::models;

/// One local LLM at a time: two would fight over the machine's cores and memory.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// A client on a store in `dir`, with `llm` upstream and the cross-encoder off.
async fn open_client(
    llm: &LocalLlm,
    dir: &tempfile::TempDir,
    tune: impl FnOnce(&mut Config),
) -> MemoryClient {
    let mut config = Config {
        memory_path: dir.path().to_owned(),
        models_dir: models(),
        openai_base_url: Some(llm.base_url().to_owned()),
        start_watcher: false,
        ..Config::default()
    };
    config.retrieval.reranker = mnemo_core::RerankerMode::Off;
    tune(&mut config);
    MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_turn_becomes_turns_facts_a_summary_and_a_commit() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let llm = local_llm().await;
    let dir = tempfile::tempdir().unwrap();
    let client = open_client(&llm, &dir, |_| {}).await;
    let conversation = ConversationId::new("home").unwrap();

    let answer = client
        .chat(json!({
            "model": LOCAL_LLM_ALIAS,
            "max_tokens": 24,
            "memory_id": "home",
            "messages": [{"role": "user", "content": "My brother Tomasz works as a pilot, and I am allergic to cats."}]
        }))
        .await
        .unwrap()
        .into_json()
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

#[tokio::test(flavor = "multi_thread")]
async fn a_long_history_is_summarised_by_the_local_llm_and_the_summary_reused() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let llm = local_llm().await;
    let dir = tempfile::tempdir().unwrap();
    let client = open_client(&llm, &dir, |config| {
        config.enable_summarization = false;
        // What `mnemo serve` asks the server; one slot of 4096 tokens shared by 2.
        config.context.windows.insert(LOCAL_LLM_ALIAS.into(), 2048);
    })
    .await;
    let mut messages = vec![json!({"role": "system", "content": "You are a coding assistant."})];
    for said in [
        "I am porting the billing service from Python to Rust.",
        "The tests live in tests/billing.rs.",
        "We decided to use sqlx for the database.",
        "CI failed on a missing OPENSSL_DIR; installing libssl-dev fixed it.",
        "Next I need to port the invoice renderer.",
    ] {
        messages.push(json!({"role": "user", "content": said}));
        messages.push(json!({"role": "assistant", "content": "Noted."}));
    }
    messages.push(json!({"role": "user", "content": "What should I do next?"}));
    let request = json!({
        "model": LOCAL_LLM_ALIAS, "max_tokens": 16, "memory_id": "port", "memory_top_k": 0,
        "memory_strategy": {"mode": "summarize", "max_history_messages": 6},
        "messages": messages,
    });

    let answer = client
        .chat(request.clone())
        .await
        .unwrap()
        .into_json()
        .unwrap();
    let context = &answer["memory_context"];
    assert_eq!(context["summary"], "new", "{context}");
    assert_eq!(context["summarised_messages"], 10, "{context}");
    assert_eq!(context["window"], 2048);
    assert_eq!(
        context["counter"],
        "local LLM tokenizer (llama.cpp /tokenize)"
    );
    let tokens = |key: &str| {
        context[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key}: {context}"))
    };
    assert!(
        tokens("tokens_after") < tokens("tokens_before"),
        "{context}"
    );
    let kept: Vec<_> = std::fs::read_dir(dir.path().join("conversations/port/summaries"))
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert_eq!(kept.len(), 1);
    let stored: serde_json::Value = serde_json::from_str(&kept[0]).unwrap();
    let summary = stored["summary"].as_str().unwrap();
    assert_eq!(stored["messages"], 10);
    assert!(!summary.is_empty() && summary.len() < 2000, "{summary}");

    let again = client.chat(request).await.unwrap().into_json().unwrap();
    assert_eq!(again["memory_context"]["summary"], "reused");
    client.wait_idle().await;
    llm.stop().await;
}

/// llama.cpp's own `/v1/embeddings`, as a user running mnemo beside it would point
/// `embedding_provider = "openai"` at it: the local LLM's model, mean-pooled.
#[tokio::test(flavor = "multi_thread")]
async fn memories_are_found_with_llama_cpps_embeddings() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let config = Config {
        models_dir: models(),
        ..Config::default()
    };
    let paths = config.model_paths();
    let options = LocalLlmOptions {
        embeddings: true,
        ctx_size: 2048,
        parallel: 1,
        ..LocalLlmOptions::new(paths.python, paths.local_llm_model, LOCAL_LLM_ALIAS)
    };
    let llm = LocalLlm::start(&options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let client = open_client(&llm, &dir, |config| {
        config.embedding_provider = mnemo_core::EmbeddingProvider::Openai;
        config.embedding_model = LOCAL_LLM_ALIAS.into();
    })
    .await;
    let conversation = ConversationId::new("garden").unwrap();
    let facts = [
        "The user grows tomatoes on the balcony.",
        "The user's train to work leaves at 7:40.",
        "The user's sister teaches the violin.",
    ];
    // Stored as they are: this test is about the vectors, not the write path.
    let records = facts
        .iter()
        .map(|f| mnemo_core::MemoryRecord::new(conversation.clone(), mnemo_core::Role::Memory, *f))
        .collect();
    client.add_records(records).await.unwrap();
    let hits = client
        .search(SearchRequest::new("Which vegetables grow on my balcony?", conversation).top_k(3))
        .await
        .unwrap();
    assert_eq!(hits[0].content, facts[0], "{hits:?}");
    let snapshot = std::fs::read_to_string(dir.path().join("memory_index.json")).unwrap();
    assert!(
        snapshot.contains(&format!("openai:{LOCAL_LLM_ALIAS} (1536 dimensions)")),
        "the index records the embedder that filled it"
    );
    llm.stop().await;
}
