//! A disk that fails writes (EIO), met at each of mnemo's write seams in turn
//! ([`mnemo_fs::faults`]): every failure is an error that says so, never a panic, and every
//! memory acknowledged before or after is still there, in the files and in the index.
//! A full disk is tested on a real small filesystem (the server's `tests/full_disk.rs`).

use std::path::Path;

use mnemo_core::Config;
use mnemo_engine::{EngineError, MemoryClient, OpenOptions};
use mnemo_fs::faults::{self, Seam};
use mnemo_scripted_llm::{add_every_fact, ChatRequest, Reply, ScriptedLlm};
use serde_json::json;

use crate::support;
use support::{config_without_reranker, conv};

async fn open(config: Config) -> MemoryClient {
    MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The contents of the live memories of conversation `c`.
async fn contents(client: &MemoryClient) -> Vec<String> {
    let listed = client.list(Some(conv("c"))).await.unwrap();
    listed.into_iter().map(|m| m.record.content).collect()
}

fn is_disk_failure<T>(result: &Result<T, EngineError>) -> bool {
    result.as_ref().is_err_and(EngineError::is_disk_failure)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_io_error_at_any_write_of_an_add_is_an_error_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        start_watcher: false,
        ..config_without_reranker(dir.path())
    };
    let client = open(config.clone()).await;
    let mut acknowledged = vec![];
    for i in 0..3 {
        let text = format!("The user keeps box {i} in the attic.");
        client.add(vec![text.clone()], &conv("c")).await.unwrap();
        acknowledged.push(text);
    }

    // The k-th write of the add under the memory files fails, for k = 0, 1, ... until an
    // add no longer reaches it.
    let mut failed = 0;
    for k in 0.. {
        let text = format!("The user keeps crate {k} in the cellar.");
        let plan = faults::inject(dir.path().join("entries"), move |_, _, nth| {
            (nth == k).then(faults::io_error)
        });
        let added = client.add(vec![text.clone()], &conv("c")).await;
        let reached = plan.writes_seen() > k;
        drop(plan);
        match reached {
            true => {
                assert!(is_disk_failure(&added), "write {k}: {:?}", added.err());
                failed += 1;
            }
            false => {
                added.unwrap();
                acknowledged.push(text);
                break;
            }
        }
    }
    assert!(
        failed >= 4,
        "an add writes, syncs, renames and syncs its folder: {failed}"
    );
    let listed = contents(&client).await;
    for text in &acknowledged {
        assert!(listed.contains(text), "{text} is lost: {listed:?}");
    }
    // Reopened, the files and the index agree again, whatever the failures left behind.
    drop(client);
    let client = open(config).await;
    let listed = contents(&client).await;
    for text in &acknowledged {
        assert!(listed.contains(text), "{text} is lost after a restart");
    }
    let verify = client.verify().await.unwrap();
    assert_eq!(verify.files, verify.points, "{verify:?}");
}

/// A model that learns "The user keeps X." from "I keep X.".
fn keeper(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => {
            let facts: Vec<String> = message
                .strip_prefix("I keep ")
                .map(|rest| format!("The user keeps {rest}"))
                .into_iter()
                .collect();
            Reply::Json(json!({ "facts": facts }))
        }
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "The user keeps things."})),
        _ => Reply::text("Noted."),
    }
}

fn chat(text: &str) -> serde_json::Value {
    json!({"model": "m", "memory_id": "c", "messages": [{"role": "user", "content": text}]})
}

/// Chats `text` while every write under `folder` fails with EIO, and waits until what the
/// chat queued is done.
async fn chat_while_failing(
    client: &MemoryClient,
    folder: std::path::PathBuf,
    text: &str,
) -> Result<mnemo_engine::ChatReply, EngineError> {
    let plan = faults::inject(folder, |_: &Path, _: Seam, _: u64| Some(faults::io_error()));
    let answered = client.chat(chat(text)).await;
    client.wait_idle().await;
    drop(plan);
    answered
}

/// Entries in the journal of queued passes.
fn journaled(store: &Path) -> usize {
    std::fs::read_dir(store.join("pending")).unwrap().count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_on_a_failing_disk_says_so_and_its_pass_waits_in_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::with_handler(keeper).await;
    let config = Config {
        openai_base_url: Some(llm.base_url()),
        llm_timeout_secs: 5,
        start_watcher: false,
        ..config_without_reranker(dir.path())
    };
    let client = open(config.clone()).await;

    // The user's turn cannot be written: the chat is an error, and nothing of it is kept.
    let turns = dir.path().join("entries/c/turns/user");
    let answered = chat_while_failing(&client, turns, "I keep the oars in the shed.").await;
    assert!(is_disk_failure(&answered), "{:?}", answered.err());
    assert!(contents(&client).await.is_empty());

    // The journal cannot be written: the pass runs all the same, from memory.
    let journal = dir.path().join("pending");
    chat_while_failing(&client, journal, "I keep the kayak in the boathouse.")
        .await
        .unwrap();
    let kayak = "The user keeps the kayak in the boathouse.".to_owned();
    assert!(contents(&client).await.contains(&kayak));

    // The pass cannot write its fact: the chat was answered, the pass stays journaled and
    // is learnt at the next start.
    let facts = dir.path().join("entries/c/facts");
    chat_while_failing(&client, facts, "I keep the paddles in the loft.")
        .await
        .unwrap();
    let fact = "The user keeps the paddles in the loft.".to_owned();
    assert!(!contents(&client).await.contains(&fact));
    assert_eq!(journaled(dir.path()), 1, "the failed pass keeps its entry");
    drop(client);
    let client = open(config).await;
    assert_eq!(client.resume_pending_passes(), 1);
    client.wait_idle().await;
    let listed = contents(&client).await;
    assert!(listed.contains(&fact), "{listed:?}");
    assert!(listed.contains(&kayak));
    assert_eq!(journaled(dir.path()), 0, "resumed and done");
}
