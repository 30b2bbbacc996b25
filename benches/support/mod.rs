//! What several benchmarks share: the memories they fill a store with, where the models are.

// Each bench is its own crate and uses part of this module.
#![allow(dead_code, unused_imports)]

/// The `i`th memory of a synthetic store: 125 distinct sentences (a subject, a verb, an
/// object), each numbered, so searches have near-duplicates to rank and MMR to thin out.
pub fn memory_text(i: usize) -> String {
    let subjects = [
        "My sister",
        "The landlord",
        "Our team lead",
        "Grandpa",
        "The dog",
    ];
    let verbs = [
        "moved to",
        "talks about",
        "bought tickets to",
        "is allergic to",
        "loves",
    ];
    let objects = [
        "Lisbon",
        "sourdough",
        "the jazz festival",
        "peanuts",
        "the bike lane",
    ];
    format!(
        "{} {} {} (note {i}).",
        subjects[i % 5],
        verbs[(i / 5) % 5],
        objects[(i / 25) % 5]
    )
}

/// The LoCoMo dev split (`MNEMO_LOCOMO_DEV`, or the shared data folder beside the
/// repository), parsed; a bench without it cannot run, so a missing file panics, named.
pub fn locomo_dev() -> serde_json::Value {
    let path = std::env::var_os("MNEMO_LOCOMO_DEV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/data/locomo/locomo_dev.json")
        });
    serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The session number of a LoCoMo key (`session_12_observation` is 12).
pub fn locomo_session_number(key: &str) -> u32 {
    key.split('_')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub use mnemo_test_support::{models_dir, percentile};

use mnemo_scripted_llm::{add_every_fact, echo, ChatRequest, Reply};

/// The scripted model the proxy and soak benches chat with: echoes chats; turns each message
/// into one fact, adds every new fact, and answers a new summary, as a model would, so each
/// turn's write path does all its work.
pub fn scripted_model(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => {
            let fact = message.replacen("My ", "The user's ", 1);
            Reply::Json(serde_json::json!({ "facts": [fact] }))
        }
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => {
            let facts = message.lines().filter(|l| l.starts_with("- ")).count();
            Reply::Json(
                serde_json::json!({"summary": format!("The user told {facts} more things.")}),
            )
        }
        _ => echo(request),
    }
}

/// The `q` quantile of `values` in milliseconds, rounded for a report; 0 for none.
pub fn percentile_ms(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    round(percentile(values, q))
}

/// Starts the local LLM set-up installed (`scripts/setup llm`); returns it and a config
/// with the models' folder set, for the bench to complete.
pub async fn local_llm() -> (mnemo_llm::LocalLlm, mnemo_core::Config) {
    let base = mnemo_core::Config {
        models_dir: models_dir(),
        ..mnemo_core::Config::default()
    };
    let paths = base.model_paths();
    let llm = mnemo_llm::LocalLlm::start(&mnemo_llm::LocalLlmOptions::new(
        paths.python,
        paths.local_llm_model,
        mnemo_core::LOCAL_LLM_ALIAS,
    ))
    .await
    .expect("the local LLM starts (scripts/setup llm)");
    (llm, base)
}

/// Milliseconds, to the microsecond.
pub fn ms(d: std::time::Duration) -> f64 {
    round(d.as_secs_f64() * 1000.0)
}

/// To three decimals, for reports.
pub fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The filter every engine search has, for synthetic conversation `conv-{c}`: that
/// conversation or `global`, no summaries.
pub fn conversation_filter(c: usize) -> mnemo_index::Filter {
    use mnemo_index::{Condition, Filter};
    Filter::all()
        .must(Condition::any_of(
            "conversation_id",
            [format!("conv-{c}"), "global".to_owned()],
        ))
        .must_not(Condition::equals("role", "summary"))
}

/// A store at `root` holding `memories` synthetic facts ([`memory_text`]), the `i`th in
/// conversation `conversation_of(i)`, written in batches of 500: no git, no watcher, no
/// cross-encoder, nothing evicted.
pub async fn filled_store(
    root: &std::path::Path,
    memories: usize,
    conversation_of: impl Fn(usize) -> String,
) -> mnemo_engine::MemoryClient {
    let mut config = mnemo_core::Config {
        memory_path: root.to_owned(),
        models_dir: models_dir(),
        start_watcher: false,
        enable_git_versioning: false,
        max_entries: memories,
        ..mnemo_core::Config::default()
    };
    config.retrieval.reranker = mnemo_core::RerankerMode::Off;
    let client = mnemo_engine::MemoryClient::open(config, mnemo_engine::OpenOptions::default())
        .await
        .unwrap();
    let records: Vec<mnemo_core::MemoryRecord> = (0..memories)
        .map(|i| {
            let conversation = mnemo_core::ConversationId::new(&conversation_of(i)).unwrap();
            mnemo_core::MemoryRecord::new(conversation, mnemo_core::Role::Memory, memory_text(i))
        })
        .collect();
    for chunk in records.chunks(500) {
        client.add_records(chunk.to_vec()).await.unwrap();
    }
    client
}

/// The configuration of a store at `root` whose upstream is `upstream` (a scripted model):
/// the checkout's models, no watcher, no cross-encoder; the rest as a user gets it.
pub fn scripted_store_config(root: &std::path::Path, upstream: String) -> mnemo_core::Config {
    let mut config = mnemo_core::Config {
        memory_path: root.to_owned(),
        models_dir: models_dir(),
        openai_base_url: Some(upstream),
        start_watcher: false,
        ..mnemo_core::Config::default()
    };
    config.retrieval.reranker = mnemo_core::RerankerMode::Off;
    config
}

/// Serves `client` on a free loopback port until the runtime ends; returns `http://ADDR`.
pub async fn serve_on_loopback(client: &mnemo_engine::MemoryClient) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let client = client.clone();
    tokio::spawn(async move {
        mnemo_server::serve(
            listener,
            client,
            mnemo_server::ServerOptions::default(),
            std::future::pending(),
        )
        .await
    });
    url
}
