//! The write path against a scripted OpenAI-compatible server (real HTTP, deterministic
//! answers, injected faults), a real store, the real embedding model, index and git.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use mnemo_core::{Config, ConversationId};
use mnemo_engine::{ChatReply, EngineError, MemoryClient, OpenOptions, SearchRequest};
use mnemo_scripted_llm::{add_every_fact, ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};

use crate::support;
use support::{config_without_reranker, conv};

fn config(memory_path: &Path, llm: &ScriptedLlm) -> Config {
    Config {
        openai_base_url: Some(llm.base_url()),
        llm_timeout_secs: 2,
        start_watcher: false,
        ..config_without_reranker(memory_path)
    }
}

async fn open(memory_path: &Path, llm: &ScriptedLlm) -> MemoryClient {
    MemoryClient::open(config(memory_path, llm), OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A model that extracts "The user's husband is X." from "my husband is X", answers questions with
/// no facts, replaces the first existing memory when one is shown, and keeps a summary.
fn spouse_model(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => {
            let facts: Vec<String> = message
                .strip_prefix("My husband is ")
                .map(|name| format!("The user's husband is {}", name.trim_end_matches('.')))
                .into_iter()
                .collect();
            Reply::Json(json!({ "facts": facts }))
        }
        Some("memory_operations") => {
            let new = message
                .lines()
                .find_map(|l| l.strip_prefix("- "))
                .unwrap_or_default()
                .to_owned();
            Reply::Json(json!({"operations": [{"event": "UPDATE", "id": 0, "text": new}]}))
        }
        Some("summary") => Reply::Json(json!({"summary": new_facts_told(&message)})),
        _ => Reply::text("Noted."),
    }
}

/// A summary request's new facts, one after another: a summary that says only what it was
/// told, as the write path's summary check requires.
fn new_facts_told(summary_request: &str) -> String {
    summary_request
        .split("NEW facts:")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .take_while(|l| !l.starts_with("NO LONGER TRUE"))
        .filter_map(|l| l.strip_prefix("- "))
        .collect::<Vec<_>>()
        .join(" ")
}

fn user(text: &str, conversation: &str) -> Value {
    json!({
        "model": "m",
        "memory_id": conversation,
        "messages": [{"role": "user", "content": text}]
    })
}

fn files(dir: &Path, conversation: &str, folder: &str) -> Vec<String> {
    let path = dir.join("entries").join(conversation).join(folder);
    let Ok(entries) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut texts: Vec<String> = entries
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    texts.sort();
    texts
}

/// The output of a git command run in the store.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_husband_replaces_the_old_fact_and_keeps_a_tombstone() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    // Back to back: the second pass must wait for the first to see its fact.
    let first = client
        .chat(user("My husband is Tobias.", "family"))
        .await
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(first["choices"][0]["message"]["content"], "Noted.");
    client
        .chat(user("My husband is Aurelio.", "family"))
        .await
        .unwrap();
    client.wait_idle().await;

    let facts = files(dir.path(), "family", "facts");
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(
        facts[0].contains("The user's husband is Aurelio"),
        "{}",
        facts[0]
    );
    let new_id = facts[0]
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_owned();
    let tombstones = files(dir.path(), "family", "deleted/facts");
    assert_eq!(tombstones.len(), 1);
    assert!(tombstones[0].contains("The user's husband is Tobias"));
    assert!(
        tombstones[0].contains(&format!("replaced_by: {new_id}")),
        "{}",
        tombstones[0]
    );
    assert!(
        facts[0].contains("source_id: "),
        "facts name the turn they came from"
    );
    assert_eq!(files(dir.path(), "family", "turns/user").len(), 2);
    assert_eq!(files(dir.path(), "family", "turns/assistant").len(), 2);
    assert!(files(dir.path(), "family", "summaries")[0].contains("The user's husband is Aurelio"));

    let log = git(dir.path(), &["log", "--format=%s"]);
    assert!(
        log.contains("mnemo: family: 2 turns, +1 fact, summary"),
        "{log}"
    );
    assert!(log.contains("mnemo: family: 2 turns, 1 updated"), "{log}");
    // Commits stage the files each pass noted: none may be missed (turns, the tombstone,
    // the summary).
    assert_eq!(
        git(dir.path(), &["status", "--porcelain"]),
        "",
        "everything committed"
    );

    let verify = client.verify().await.unwrap();
    assert!(
        verify.missing.is_empty() && verify.orphans.is_empty(),
        "{verify:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_conversations_passes_apply_in_the_order_of_its_turns() {
    // Every other answer is long, so storing it takes longer than the next turn's round
    // trip: passes that raced for their conversation would overtake each other.
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        let message = request.last_user_message().unwrap_or_default();
        let long = ["Ada", "Cleo", "Eve", "Gia"]
            .iter()
            .any(|name| message.contains(name));
        match (request.schema_name(), long) {
            (None, true) => Reply::text("Noted, and a long answer follows. ".repeat(1500)),
            _ => spouse_model(request),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let names = ["Ada", "Bea", "Cleo", "Dora", "Eve", "Fay", "Gia", "Hana"];
    for name in names {
        client
            .chat(user(&format!("My husband is {name}."), "family"))
            .await
            .unwrap();
    }
    client.wait_idle().await;

    assert_replaced_in_order(dir.path(), &names);
}

#[tokio::test(flavor = "multi_thread")]
async fn passes_resumed_at_start_apply_in_the_order_they_were_queued() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let names = ["Ada", "Bea", "Cleo", "Dora", "Eve", "Fay", "Gia", "Hana"];
    // What an earlier process left: user turns on disk and a journal entry per pass, the
    // earlier ones with the longer answers to store.
    let client = open(dir.path(), &llm).await;
    let pending = dir.path().join("pending");
    std::fs::create_dir_all(&pending).unwrap();
    for (i, name) in names.iter().enumerate() {
        let turn = mnemo_core::MemoryRecord::new(
            conv("family"),
            mnemo_core::Role::User,
            format!("My husband is {name}."),
        );
        let stored = client.add_records(vec![turn]).await.unwrap();
        let relative = stored[0].path.strip_prefix(dir.path()).unwrap();
        let entry = json!({
            "conversation": "family",
            "user_turn": relative,
            "assistant_text": "Noted. ".repeat(800 >> i),
            "incomplete": false,
        });
        std::fs::write(
            pending.join(format!("1700000000000-{i:08}-a.json")),
            entry.to_string(),
        )
        .unwrap();
    }
    assert_eq!(client.resume_pending_passes(), names.len());
    client.wait_idle().await;
    assert_eq!(client.pending_passes(), 0);
    assert_replaced_in_order(dir.path(), &names);
}

/// Asserts that the user's husband is the last of `names` and that each earlier one was
/// replaced by the next: the chain of tombstones runs in the order the user spoke.
fn assert_replaced_in_order(store: &Path, names: &[&str]) {
    let facts = files(store, "family", "facts");
    assert_eq!(facts.len(), 1, "{facts:?}");
    let last = names[names.len() - 1];
    assert!(
        facts[0].contains(&format!("The user's husband is {last}")),
        "{}",
        facts[0]
    );
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_owned()
    };
    let name_in = |text: &str| {
        *names
            .iter()
            .find(|n| text.contains(&format!("husband is {n}")))
            .unwrap()
    };
    let tombstones = files(store, "family", "deleted/facts");
    assert_eq!(tombstones.len(), names.len() - 1, "{tombstones:?}");
    let mut name_of: std::collections::HashMap<String, &str> = tombstones
        .iter()
        .map(|t| (field(t, "id: "), name_in(t)))
        .collect();
    name_of.insert(field(&facts[0], "id: "), last);
    for tombstone in &tombstones {
        let name = name_in(tombstone);
        let next = names[names.iter().position(|n| *n == name).unwrap() + 1];
        let replaced_by = field(tombstone, "replaced_by: ");
        assert_eq!(name_of[&replaced_by], next, "{name} replaced out of order");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_correction_leaves_no_sentence_of_the_old_fact_in_the_summary() {
    // A summariser that keeps both sides, as the small local model did; it records what it
    // was told no longer holds.
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = told.clone();
    let llm = ScriptedLlm::with_handler(move |request: &ChatRequest| {
        if request.schema_name() == Some("summary") {
            let message = request.last_user_message().unwrap_or_default();
            seen.lock().unwrap().push(message.to_owned());
            let summary = if message.contains("Aurelio") {
                "The user's husband is Tobias. The user is now the husband of Aurelio."
            } else {
                "The user's husband is Tobias."
            };
            return Reply::Json(json!({ "summary": summary }));
        }
        spouse_model(request)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    for text in ["My husband is Tobias.", "My husband is Aurelio."] {
        client.chat(user(text, "family")).await.unwrap();
    }
    client.wait_idle().await;
    let prompts = told.lock().unwrap().clone();
    assert!(
        prompts[1].contains("NO LONGER TRUE:\n- The user's husband is Tobias"),
        "{prompts:?}"
    );
    let summary = files(dir.path(), "family", "summaries").pop().unwrap();
    assert!(
        summary.ends_with("---\nThe user is now the husband of Aurelio.\n"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_git_commit_loses_nothing_and_the_next_commit_carries_it() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    // Another git process holds the index: every try of the first pass fails.
    let lock = dir.path().join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    client
        .chat(user("My husband is Tobias.", "family"))
        .await
        .unwrap();
    client.wait_idle().await;
    assert_eq!(files(dir.path(), "family", "facts").len(), 1);
    assert!(
        !git(dir.path(), &["log", "--format=%s"]).contains("family"),
        "no commit while locked"
    );

    std::fs::remove_file(&lock).unwrap();
    client
        .add(vec!["The user likes tea.".to_owned()], &conv("family"))
        .await
        .unwrap();
    let head = git(dir.path(), &["show", "--name-only", "--format=%s", "HEAD"]);
    assert!(head.contains("turns/user"), "the first pass's turn: {head}");
    assert!(head.contains("summaries/summary.md"), "{head}");
    assert_eq!(
        git(dir.path(), &["status", "--porcelain"]),
        "",
        "everything committed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn memories_are_injected_and_reported_and_memory_fields_stripped() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    client
        .add(
            vec!["The user's husband is Aurelio.".into()],
            &conv("family"),
        )
        .await
        .unwrap();
    let mut request = user("Who is my husband?", "family");
    request["memory_top_k"] = json!(3);
    request["temperature"] = json!(0.3);
    let answer = client.chat(request).await.unwrap().into_json().unwrap();
    let hits = answer["memory_hits"].as_array().unwrap();
    assert_eq!(hits[0]["content"], "The user's husband is Aurelio.");

    let sent = llm
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .find(|b| b["temperature"] == 0.3)
        .expect("the chat request reached the upstream");
    assert!(sent.get("memory_id").is_none() && sent.get("memory_top_k").is_none());
    let content = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        content.contains("The user's husband is Aurelio."),
        "{content}"
    );
    assert!(
        content.ends_with("Current message:\nWho is my husband?"),
        "{content}"
    );
    client.wait_idle().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_creates_no_fact() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    client
        .chat(user("What should I cook tonight?", "c1"))
        .await
        .unwrap();
    client.wait_idle().await;
    assert!(files(dir.path(), "c1", "facts").is_empty());
    assert_eq!(files(dir.path(), "c1", "turns/user").len(), 1);
    assert!(git(dir.path(), &["log", "--format=%s"]).contains("mnemo: c1: 2 turns\n"));
}

/// Extraction always says "The user likes tea."; the other calls are answered by `faulty`.
fn with_faulty_reconciler(faulty: Reply) -> impl Fn(&ChatRequest) -> Reply + Send + Sync {
    move |request: &ChatRequest| match request.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": ["The user likes tea."]})),
        Some("memory_operations") => faulty.clone(),
        Some("summary") => Reply::Json(json!({"summary": "Tea."})),
        _ => Reply::text("ok"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reconciler_that_fails_or_talks_nonsense_means_add() {
    let dir = tempfile::tempdir().unwrap();
    let faults = [
        Reply::status(500, "overloaded"),
        Reply::Malformed("{\"operations\": [".into()),
        Reply::Json(json!({"operations": [{"event": "DELETE", "id": 42, "text": ""}]})),
        Reply::Json(json!({"operations": [{"event": "MERGE", "id": 0, "text": "x"}]})),
        // A well-formed answer that forgets the new fact: it is added all the same.
        Reply::Json(json!({"operations": []})),
        Reply::Hang,
    ];
    let llm = ScriptedLlm::start().await;
    let client = open(dir.path(), &llm).await;
    client
        .add(vec!["The user likes tea a lot.".into()], &conv("c1"))
        .await
        .unwrap();
    for (i, fault) in faults.into_iter().enumerate() {
        llm.set_handler(with_faulty_reconciler(fault.clone()));
        let report = client
            .add(vec![format!("The user likes tea, note {i}.")], &conv("c1"))
            .await;
        let report = report.unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        assert_eq!(
            report.added.len(),
            1,
            "{fault:?}: the fact is added as it is"
        );
        assert!(report.fallback.is_some(), "{fault:?}");
    }
    let facts = files(dir.path(), "c1", "facts");
    assert_eq!(facts.len(), 7, "nothing lost, nothing deleted");
    assert!(files(dir.path(), "c1", "deleted/facts").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_write_path_keeps_the_turn_and_a_chat_the_upstream_refuses_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await;
    let client = open(dir.path(), &llm).await;
    // The extraction fails; the chat itself succeeds.
    llm.set_handler(|r: &ChatRequest| match r.schema_name() {
        Some(_) => Reply::status(500, "boom"),
        None => Reply::text("fine"),
    });
    client.chat(user("I moved to Porto.", "c1")).await.unwrap();
    client.wait_idle().await;
    assert_eq!(files(dir.path(), "c1", "turns/user").len(), 1);
    assert_eq!(files(dir.path(), "c1", "turns/assistant").len(), 1);
    assert!(files(dir.path(), "c1", "facts").is_empty());

    // The upstream is down for the chat: an error, and nothing of it is stored (the
    // client's retry stores the message once).
    llm.set_handler(|_: &ChatRequest| Reply::status(503, "down"));
    let err = client
        .chat(user("I adopted a cat.", "c1"))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Llm(_)), "{err}");
    assert!(err.to_string().contains("503"), "{err}");
    let turns = files(dir.path(), "c1", "turns/user");
    assert!(
        !turns.iter().any(|t| t.contains("I adopted a cat.")),
        "{turns:?}"
    );
    client.wait_idle().await;
    let verify = client.verify().await.unwrap();
    assert_eq!((verify.files, verify.points), (2, 2), "{verify:?}");

    // The retry, answered, stores it once and indexes it.
    llm.set_handler(|r: &ChatRequest| match r.schema_name() {
        Some(_) => Reply::status(500, "boom"),
        None => Reply::text("noted"),
    });
    client.chat(user("I adopted a cat.", "c1")).await.unwrap();
    client.wait_idle().await;
    let turns = files(dir.path(), "c1", "turns/user");
    assert_eq!(
        turns
            .iter()
            .filter(|t| t.contains("I adopted a cat."))
            .count(),
        1,
        "{turns:?}"
    );
    let hits = client
        .search(SearchRequest::new("adopted a cat", conv("c1")).top_k(3))
        .await
        .unwrap();
    assert!(hits[0].content.contains("I adopted a cat."), "{hits:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oldest_memories_are_evicted_beyond_max_entries() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some("memory_operations") => add_every_fact(r),
        Some("summary") => Reply::Json(json!({"summary": "Hobbies."})),
        _ => Reply::text("ok"),
    })
    .await;
    let mut cfg = config(dir.path(), &llm);
    cfg.max_entries = 3;
    let client = MemoryClient::open(cfg, OpenOptions::default())
        .await
        .unwrap();
    let hobbies = ["chess", "climbing", "pottery", "sailing", "baking"];
    for hobby in hobbies {
        let report = client
            .add(vec![format!("The user's hobby: {hobby}.")], &conv("c1"))
            .await
            .unwrap();
        assert!(report.fallback.is_none());
    }
    let live = files(dir.path(), "c1", "facts");
    assert_eq!(live.len(), 3, "{live:?}");
    for kept in ["pottery", "sailing", "baking"] {
        assert!(live.iter().any(|f| f.contains(kept)), "{kept} kept");
    }
    assert_eq!(files(dir.path(), "c1", "deleted/facts").len(), 2);
    assert_eq!(
        files(dir.path(), "c1", "summaries").len(),
        1,
        "summaries are exempt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_summary_is_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let summaries = Arc::new(Mutex::new(0));
    let seen = summaries.clone();
    let llm = ScriptedLlm::with_handler(move |r: &ChatRequest| match r.schema_name() {
        Some("summary") => {
            *seen.lock().unwrap() += 1;
            Reply::Json(json!({"summary": "The user likes tea."}))
        }
        Some("memory_operations") => add_every_fact(r),
        _ => Reply::text("ok"),
    })
    .await;
    let client = open(dir.path(), &llm).await;
    client
        .add(vec!["The user likes tea.".into()], &conv("c1"))
        .await
        .unwrap();
    let path = dir.path().join("entries/c1/summaries/summary.md");
    let written = std::fs::metadata(&path).unwrap().modified().unwrap();
    let report = client
        .add(vec!["The user likes green tea.".into()], &conv("c1"))
        .await
        .unwrap();
    assert_eq!(*summaries.lock().unwrap(), 2, "asked twice");
    assert!(!report.summary_updated);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        written
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_is_passed_through_and_its_turn_stored_even_when_cut() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": []})),
        _ => Reply::Chunks(vec![
            (Duration::from_millis(0), "Hello".into()),
            (Duration::from_millis(10), ", there".into()),
            (Duration::from_millis(10), "!".into()),
        ]),
    })
    .await;
    let client = open(dir.path(), &llm).await;
    let mut request = user("Say hello.", "c1");
    request["stream"] = json!(true);
    let ChatReply::Stream(reply) = client.chat(request.clone()).await.unwrap() else {
        panic!("asked for a stream")
    };
    assert_eq!(reply.status, 200);
    let chunks: Vec<_> = reply.body.collect().await;
    assert!(chunks.len() >= 3, "passed on chunk by chunk");
    client.wait_idle().await;
    let turns = files(dir.path(), "c1", "turns/assistant");
    assert!(turns[0].contains("Hello, there!"), "{turns:?}");
    assert!(!turns[0].contains("incomplete"));

    // The client reads one chunk and goes away.
    llm.set_handler(|r: &ChatRequest| match r.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": []})),
        _ => Reply::Chunks(vec![
            (Duration::from_millis(0), "Partial".into()),
            (Duration::from_secs(30), " never sent".into()),
        ]),
    });
    request["messages"][0]["content"] = json!("Say more.");
    let ChatReply::Stream(mut reply) = client.chat(request).await.unwrap() else {
        panic!("asked for a stream")
    };
    let mut got = String::new();
    while !got.contains("Partial") {
        let chunk = reply.body.next().await.unwrap().unwrap();
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(reply);
    client.wait_idle().await;
    let turns = files(dir.path(), "c1", "turns/assistant");
    let cut = turns
        .iter()
        .find(|t| t.contains("Partial"))
        .expect("stored");
    assert!(cut.contains("incomplete: true"), "{cut}");
    assert_eq!(files(dir.path(), "c1", "turns/user").len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await;
    let client = open(dir.path(), &llm).await;
    for (body, why) in [
        (json!([1, 2]), "JSON object"),
        (json!({"model": "m"}), "\"messages\""),
        (user("hi", "../../etc"), "memory_id"),
        (json!({"messages": [], "memory_k": 1}), "unknown field"),
    ] {
        let err = client.chat(body.clone()).await.unwrap_err();
        assert!(err.is_invalid_input(), "{body}: {err}");
        assert!(err.to_string().contains(why), "{body}: {err}");
    }
    assert_eq!(llm.chat_calls(), 0);
    assert!(!dir.path().join("entries/default").exists());
}

/// The EXISTING memories a reconciliation call showed the model.
fn shown_to_reconciler(request: &ChatRequest) -> Vec<String> {
    let listing = request.last_user_message().unwrap_or_default();
    let existing = listing
        .split("NEW facts:")
        .next()
        .unwrap_or_default()
        .to_owned();
    existing
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(_, fact)| fact.to_owned()))
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reconciler_delete_tombstones_the_fact_without_a_replacement() {
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        let message = request.last_user_message().unwrap_or_default();
        match request.schema_name() {
            Some("facts") if message.contains("no longer") => {
                Reply::Json(json!({"facts": ["The user no longer has a dog."]}))
            }
            Some("facts") => Reply::Json(json!({"facts": []})),
            Some("memory_operations") => {
                Reply::Json(json!({"operations": [{"event": "DELETE", "id": 0, "text": ""}]}))
            }
            Some("summary") => Reply::Json(json!({"summary": "The user no longer has a dog."})),
            _ => Reply::text("Sorry to hear."),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let added = client
        .add(vec!["The user has a dog named Rex.".into()], &conv("pets"))
        .await
        .unwrap();
    let rex = added.added[0].record.id;

    client
        .chat(user("I no longer have a dog, Rex ran away.", "pets"))
        .await
        .unwrap();
    client.wait_idle().await;

    assert!(
        files(dir.path(), "pets", "facts").is_empty(),
        "DELETE adds nothing and removes the fact"
    );
    let tombstones = files(dir.path(), "pets", "deleted/facts");
    assert_eq!(tombstones.len(), 1, "{tombstones:?}");
    assert!(tombstones[0].contains(&format!("id: {rex}")));
    assert!(tombstones[0].contains("deleted_at: "));
    assert!(
        !tombstones[0].contains("replaced_by"),
        "nothing replaced it: {}",
        tombstones[0]
    );
    let hits = client
        .search(SearchRequest::new("dog named Rex", conv("pets")).top_k(5))
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.id != rex), "{hits:?}");
    assert!(client.get(rex).await.unwrap().is_none());
    let log = git(dir.path(), &["log", "--format=%s", "-1"]);
    assert!(log.contains("pets:") && log.contains("1 deleted"), "{log}");
    let summary = files(dir.path(), "pets", "summaries");
    assert!(
        summary[0].contains("The user no longer has a dog."),
        "{summary:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_sees_only_related_facts_five_per_new_fact_and_ten_in_all() {
    let shown: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let recorded = shown.clone();
    let llm = ScriptedLlm::with_handler(move |request: &ChatRequest| {
        if request.schema_name() == Some("memory_operations") {
            recorded.lock().unwrap().push(shown_to_reconciler(request));
        }
        add_every_fact(request)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &llm);
    config.enable_summarization = false;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let topic = |what: &str| -> Vec<String> {
        (1..=7)
            .map(|i| format!("The user's {what} number {i} lives in the garden."))
            .collect()
    };
    let unrelated = vec![
        "The printer on the second floor needs new toner.".to_owned(),
        "Quarterly tax returns are due in April.".to_owned(),
    ];
    let existing: Vec<String> = [
        topic("beehive"),
        topic("cat"),
        topic("tortoise"),
        unrelated.clone(),
    ]
    .concat();
    // Without existing facts nothing is reconciled; these are added as they are.
    client.add(existing.clone(), &conv("home")).await.unwrap();
    assert!(shown.lock().unwrap().is_empty());

    client
        .add(
            vec!["The user's new beehive lives in the garden.".into()],
            &conv("home"),
        )
        .await
        .unwrap();
    let one = shown.lock().unwrap().pop().unwrap();
    assert_eq!(one.len(), 5, "five nearest for one new fact: {one:?}");
    assert!(one.iter().all(|f| f.contains("beehive")), "{one:?}");

    client
        .add(
            vec![
                "The user's new beehive lives in the garden.".into(),
                "The user's new cat lives in the garden.".into(),
                "The user's new tortoise lives in the garden.".into(),
            ],
            &conv("home"),
        )
        .await
        .unwrap();
    let three = shown.lock().unwrap().pop().unwrap();
    assert_eq!(
        three.len(),
        10,
        "ten in all, however many new facts: {three:?}"
    );
    assert!(
        three.iter().all(|f| !unrelated.contains(f)),
        "facts below the similarity floor are never shown: {three:?}"
    );
    let mut distinct = three.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), three.len(), "no fact shown twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_git_and_summaries_off_the_pass_writes_facts_only() {
    let llm = ScriptedLlm::with_handler(spouse_model).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &llm);
    config.enable_git_versioning = false;
    config.enable_summarization = false;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let report = client
        .add(
            vec!["The user's husband is Tobias.".into()],
            &conv("family"),
        )
        .await
        .unwrap();
    assert_eq!(report.commit, None);
    assert!(!report.summary_updated);
    client
        .chat(user("My husband is Aurelio.", "family"))
        .await
        .unwrap();
    client.wait_idle().await;

    let facts = files(dir.path(), "family", "facts");
    assert_eq!(facts.len(), 1, "the update still happened: {facts:?}");
    assert!(facts[0].contains("Aurelio"));
    assert!(files(dir.path(), "family", "summaries").is_empty());
    assert!(!dir.path().join(".git").exists(), "no repository is made");
    assert!(
        llm.structured_calls("summary").is_empty(),
        "no summary is asked for"
    );
    let id = report.added[0].record.id;
    assert_eq!(client.history(id, 10).await.unwrap(), []);
    let err = client.log(None, 10).await.unwrap_err();
    assert!(err.is_invalid_input());
    assert!(
        err.to_string().contains("enable_git_versioning = false"),
        "{err}"
    );
}

/// How many commits the store at `dir` has.
fn commits(dir: &Path) -> usize {
    git(dir, &["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap_or(0)
}

/// A model whose extractions find no fact and are answered only once the server has had
/// `calls` chat requests in all; each extraction notes, as it arrives, how many commits the
/// store at `dir` has. A pass commits what was noted when it is done, before its slot is
/// free, so the first pass to finish always makes a commit (later ones may find nothing left).
fn gated_extractions(
    dir: &Path,
    calls: usize,
) -> (
    impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static,
    Arc<Mutex<Vec<usize>>>,
) {
    let commits_seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (seen, store) = (commits_seen.clone(), dir.to_owned());
    let handler = move |request: &ChatRequest| match request.schema_name() {
        Some("facts") => {
            seen.lock().unwrap().push(commits(&store));
            Reply::after_calls(calls, Reply::Json(json!({"facts": []})))
        }
        Some(other) => Reply::status(500, format!("no {other} call expected")),
        None => Reply::text("Noted."),
    };
    (handler, commits_seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn passes_of_different_conversations_run_in_parallel() {
    // Each extraction is answered only once both chats and both extractions have reached the
    // model: were passes serialised across conversations, the first would wait for a second
    // that cannot start, until it timed out and its pass committed.
    let dir = tempfile::tempdir().unwrap();
    let (handler, commits_seen) = gated_extractions(dir.path(), 4);
    let llm = ScriptedLlm::with_handler(handler).await;
    let mut config = config(dir.path(), &llm);
    config.llm_timeout_secs = 30;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        client.chat(user("I planted tulips today.", "garden")),
        client.chat(user("I fixed the oven today.", "kitchen")),
    );
    a.unwrap();
    b.unwrap();
    client.wait_idle().await;
    let seen = commits_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[1], seen[0],
        "the second conversation's pass reached the model only after the first had committed"
    );
    assert!(commits(dir.path()) > seen[0], "the passes committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_two_passes_do_their_llm_work_at_once() {
    // Extractions are answered only once all three have reached the model. With two slots the
    // third cannot: the two running ones time out, commit and free a slot, and only then does
    // the third reach the model. Without the limit all three would meet while none had
    // committed.
    let dir = tempfile::tempdir().unwrap();
    let (handler, commits_seen) = gated_extractions(dir.path(), 6);
    let llm = ScriptedLlm::with_handler(handler).await;
    let mut config = config(dir.path(), &llm);
    // How long the two waiting extractions hold their slots.
    config.llm_timeout_secs = 5;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let (a, b, c) = tokio::join!(
        client.chat(user("I planted tulips today.", "garden")),
        client.chat(user("I fixed the oven today.", "kitchen")),
        client.chat(user("I painted the shed today.", "shed")),
    );
    for answer in [a, b, c] {
        answer.unwrap();
    }
    client.wait_idle().await;
    let seen = commits_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0], seen[1],
        "the first two passes did not run at once: {seen:?}"
    );
    assert!(
        seen[2] > seen[0],
        "a third pass reached the model while two were running: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fact_the_reconciler_knows_is_reported_as_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await;
    let client = open(dir.path(), &llm).await;
    client
        .add(vec!["The user likes green tea.".into()], &conv("c1"))
        .await
        .unwrap();
    llm.set_handler(with_faulty_reconciler(Reply::Json(
        json!({"operations": [{"event": "NONE", "id": 0, "text": ""}]}),
    )));
    let report = client
        .add(
            vec![
                "The user likes green tea!".into(),
                "The user likes oolong.".into(),
            ],
            &conv("c1"),
        )
        .await
        .unwrap();
    assert_eq!(report.not_stored, ["The user likes green tea!"]);
    let added: Vec<&str> = report
        .added
        .iter()
        .map(|m| m.record.content.as_str())
        .collect();
    assert_eq!(
        added,
        ["The user likes oolong."],
        "one NONE explains one fact only"
    );
    assert!(report.fallback.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_add_never_acknowledges_what_eviction_takes() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await;
    let mut config = config(dir.path(), &llm);
    config.openai_base_url = None;
    config.max_entries = 3;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let texts = |from: usize, n: usize| {
        (from..from + n)
            .map(|i| format!("Fact number {i}."))
            .collect::<Vec<_>>()
    };

    let err = client.add(texts(0, 4), &conv("c1")).await.unwrap_err();
    assert!(err.to_string().contains("at most 3 are taken"), "{err}");
    let err = client
        .add(
            vec!["x".repeat(mnemo_core::MAX_MEMORY_BYTES + 1)],
            &conv("c1"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a memory holds at most"), "{err}");
    assert!(
        files(dir.path(), "c1", "facts").is_empty(),
        "nothing written"
    );

    client.add(texts(0, 2), &conv("c1")).await.unwrap();
    let report = client.add(texts(2, 3), &conv("c1")).await.unwrap();
    assert_eq!(report.added.len(), 3);
    assert_eq!(report.evicted, 2, "the two older facts make room");
    for memory in &report.added {
        assert!(
            memory.path.is_file(),
            "acknowledged and still live: {}",
            memory.path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reconciler_cannot_write_more_facts_than_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start().await;
    let client = open(dir.path(), &llm).await;
    client
        .add(vec!["The user likes green tea.".into()], &conv("c1"))
        .await
        .unwrap();
    let flood: Vec<Value> = (0..50)
        .map(|i| json!({"event": "ADD", "id": -1, "text": format!("Invented fact {i}.")}))
        .collect();
    llm.set_handler(with_faulty_reconciler(Reply::Json(
        json!({"operations": flood}),
    )));
    let report = client
        .add(vec!["The user likes green tea a lot.".into()], &conv("c1"))
        .await
        .unwrap();
    assert_eq!(report.added.len(), 1, "one fact given, one written");
    assert_eq!(files(dir.path(), "c1", "facts").len(), 2);
}

/// Extraction returns what the user said and two things nobody said; every fact is added.
fn inventive_model(request: &ChatRequest) -> Reply {
    match request.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": [
            "The user is planning a trip to Peru in October.",
            "We are planning to travel next autumn to South America.",
            "We should avoid hot weather and high pollution levels.",
        ]})),
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "A trip is planned."})),
        _ => Reply::text("Noted."),
    }
}

/// A client with `fact_grounding` off: what the extractor and reconciler say is written.
async fn open_ungrounded(dir: &Path, llm: &ScriptedLlm) -> MemoryClient {
    let config = Config {
        fact_grounding: false,
        ..config(dir, llm)
    };
    MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap()
}

/// Writes `message` as the user's turn and runs the write path on it.
async fn learn_from(
    client: &MemoryClient,
    conversation: &ConversationId,
    message: &str,
) -> (mnemo_store::StoredMemory, mnemo_engine::WriteReport) {
    let turn = mnemo_core::MemoryRecord::new(conversation.clone(), mnemo_core::Role::User, message);
    let turn = client.add_records(vec![turn]).await.unwrap().pop().unwrap();
    let report = client
        .learn_from_turn(conversation, Some(&turn), 1)
        .await
        .unwrap();
    (turn, report)
}

#[tokio::test(flavor = "multi_thread")]
async fn facts_the_user_did_not_say_are_not_stored() {
    let llm = ScriptedLlm::with_handler(inventive_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("trip");
    let (turn, report) = learn_from(
        &client,
        &conversation,
        "We are planning a trip to Peru in October.",
    )
    .await;
    let stored: Vec<&str> = report
        .added
        .iter()
        .map(|m| m.record.content.as_str())
        .collect();
    assert_eq!(stored, ["The user is planning a trip to Peru in October."]);
    let refused: Vec<&str> = report.ungrounded.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        refused,
        [
            "We are planning to travel next autumn to South America.",
            "We should avoid hot weather and high pollution levels."
        ]
    );
    assert!(
        report.ungrounded[0].1.contains("south"),
        "{:?}",
        report.ungrounded
    );
    // What the fact stands on is in its front matter.
    let fact = &report.added[0];
    assert_eq!(fact.record.source_id, Some(turn.record.id));
    let grounded_on = &fact.record.metadata[mnemo_engine::GROUNDED_ON];
    for word in ["planning", "trip", "peru", "october"] {
        assert!(
            grounded_on.as_array().unwrap().iter().any(|w| w == word),
            "{grounded_on}"
        );
    }
    let file = std::fs::read_to_string(&fact.path).unwrap();
    assert!(file.contains("grounded_on"), "{file}");

    // With grounding off, whatever the extractor returns is stored.
    drop(client);
    let other = tempfile::tempdir().unwrap();
    let client = open_ungrounded(other.path(), &llm).await;
    let (_, report) = learn_from(
        &client,
        &conversation,
        "We are planning a trip to Peru in October.",
    )
    .await;
    assert_eq!(report.added.len(), 3);
    assert!(report.ungrounded.is_empty());
}

async fn live_facts(client: &MemoryClient, conversation: &ConversationId) -> Vec<String> {
    let mut facts: Vec<String> = client
        .list(Some(conversation.clone()))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.record.role == mnemo_core::Role::Memory)
        .map(|m| m.record.content)
        .collect();
    facts.sort();
    facts
}

/// Extraction gives a fact for every message it is sent; the reconciler adds.
fn welder_model(request: &ChatRequest) -> Reply {
    match request.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": ["The user works as a welder in Valencia."]})),
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "The user works as a welder."})),
        _ => Reply::text("Noted."),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_that_says_nothing_is_not_sent_for_extraction() {
    let llm = ScriptedLlm::with_handler(welder_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("chat");
    for message in ["Thanks!", "Cheers, see you later!", "Okay, sure."] {
        let (_, report) = learn_from(&client, &conversation, message).await;
        assert!(report.extracted.is_empty(), "{message}: {report:?}");
    }
    assert_eq!(llm.chat_calls(), 0, "no LLM call for chit-chat");
    learn_from(&client, &conversation, "I work as a welder in Valencia.").await;
    assert_eq!(llm.chat_calls(), 2, "extraction, then the summary");
}

/// Writes a user turn and the assistant's answer, as a chat does, and runs the write path on
/// the user's turn.
async fn chat_turn(
    client: &MemoryClient,
    conversation: &ConversationId,
    said: &str,
    answered: &str,
) -> mnemo_engine::WriteReport {
    let records = [
        (mnemo_core::Role::User, said),
        (mnemo_core::Role::Assistant, answered),
    ]
    .map(|(role, text)| mnemo_core::MemoryRecord::new(conversation.clone(), role, text));
    let written = client.add_records(records.to_vec()).await.unwrap();
    client
        .learn_from_turn(conversation, written.first(), 2)
        .await
        .unwrap()
}

/// A model that reads a short answer only with the exchange before it, and that takes a
/// "she" for the user, as a small model does.
fn contextual_model(request: &ChatRequest) -> Reply {
    let said = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") if said.contains("LATEST message:\nThe cello.") => {
            Reply::Json(json!({"facts": ["The user plays the cello."]}))
        }
        Some("facts") if said.ends_with("She stopped smoking in May, finally.") => {
            Reply::Json(json!({"facts": ["The user stopped smoking in May."]}))
        }
        Some("facts") if said.contains("smokes a lot") => {
            Reply::Json(json!({"facts": ["The user's aunt smokes a lot."]}))
        }
        Some("facts") => Reply::Json(json!({"facts": []})),
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "About the user."})),
        _ => Reply::text("Noted."),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_answer_is_read_with_the_exchange_it_answers() {
    let llm = ScriptedLlm::with_handler(contextual_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("instrument");
    chat_turn(
        &client,
        &conversation,
        "Did I ever tell you which instrument I play?",
        "Not that I can see in our chat so far.",
    )
    .await;
    llm.clear_requests();
    let report = chat_turn(&client, &conversation, "The cello.", "The cello, lovely!").await;
    let shown = extraction_shown(&llm);
    assert_eq!(
        shown,
        "EARLIER (context only):\nUser: Did I ever tell you which instrument I play?\n\
         Assistant: Not that I can see in our chat so far.\n\n\
         LATEST message:\nThe cello."
    );
    // "play" is the user's own earlier word: the fact stands.
    let stored: Vec<&str> = report
        .added
        .iter()
        .map(|m| m.record.content.as_str())
        .collect();
    assert_eq!(stored, ["The user plays the cello."]);

    // A message that speaks of the user in the first person is read alone.
    llm.clear_requests();
    chat_turn(&client, &conversation, "I'm a glazier.", "Great!").await;
    assert_eq!(extraction_shown(&llm), "I'm a glazier.");
}

/// What the last extraction call showed the model as the user's message.
fn extraction_shown(llm: &ScriptedLlm) -> String {
    let extraction = llm
        .structured_calls("facts")
        .pop()
        .expect("an extraction call");
    let messages = extraction["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn what_someone_else_stopped_is_not_taken_for_the_user() {
    let llm = ScriptedLlm::with_handler(contextual_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("family");
    chat_turn(&client, &conversation, "My aunt smokes a lot.", "Oh no.").await;
    assert_eq!(
        live_facts(&client, &conversation).await,
        ["The user's aunt smokes a lot."]
    );
    let report = chat_turn(
        &client,
        &conversation,
        "She stopped smoking in May, finally.",
        "Good for her!",
    )
    .await;
    // The model's "The user stopped smoking" is about the user; the message is about "she".
    assert_eq!(report.ungrounded.len(), 1, "{report:?}");
    assert!(
        report.ungrounded[0].1.contains("of someone else"),
        "{:?}",
        report.ungrounded
    );
}

/// A reconciler that moves the user's brother along with the user, as a small model did.
fn moving_model(request: &ChatRequest) -> Reply {
    let said = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") if said.contains("brother") => {
            Reply::Json(json!({"facts": ["The user's brother Oren lives in Valencia."]}))
        }
        Some("facts") => Reply::Json(json!({"facts": ["The user moved to Bilbao."]})),
        Some("memory_operations") if said.contains("Oren") => Reply::Json(json!({"operations": [
            {"event": "UPDATE", "id": 0, "text": "The user's brother Oren lives in Bilbao."}
        ]})),
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "About the user."})),
        _ => Reply::text("Noted."),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_does_not_move_someone_the_user_did_not_speak_of() {
    let llm = ScriptedLlm::with_handler(moving_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("move");
    learn_from(&client, &conversation, "My brother Oren lives in Valencia.").await;
    let (_, report) = learn_from(
        &client,
        &conversation,
        "I gave up my flat in Valencia when I moved to Bilbao.",
    )
    .await;
    assert!(report.updated.is_empty(), "{report:?}");
    let mut facts = live_facts(&client, &conversation).await;
    facts.sort();
    assert_eq!(
        facts,
        [
            "The user moved to Bilbao.",
            "The user's brother Oren lives in Valencia."
        ]
    );

    // With grounding off, the engine leaves it to the model.
    drop(client);
    let other = tempfile::tempdir().unwrap();
    let client = open_ungrounded(other.path(), &llm).await;
    learn_from(&client, &conversation, "My brother Oren lives in Valencia.").await;
    let (_, report) = learn_from(
        &client,
        &conversation,
        "I gave up my flat in Valencia when I moved to Bilbao.",
    )
    .await;
    assert_eq!(report.updated.len(), 1, "{report:?}");
}

/// Extraction gives a new value in words no rule reads as a change, the reconciler only adds,
/// and asked whether the new fact replaces the old one the model says yes for the bike's
/// place and no for anything else.
fn relocating_model(request: &ChatRequest) -> Reply {
    let said = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") if said.contains("Fenwick") => {
            Reply::Json(json!({"facts": ["The user keeps a bike in a garage on Fenwick Street."]}))
        }
        Some("facts") if said.contains("hallway") => {
            Reply::Json(json!({"facts": ["The user keeps the bike in the hallway."]}))
        }
        Some("facts") if said.contains("red") => {
            Reply::Json(json!({"facts": ["The user has a second red bike."]}))
        }
        Some("facts") => Reply::Json(json!({"facts": []})),
        Some("memory_operations") => add_every_fact(request),
        Some("replaces") => {
            let new = said.split("NEW:").nth(1).unwrap_or_default();
            Reply::Json(json!({"replaces": new.contains("hallway")}))
        }
        Some("summary") => Reply::Json(json!({"summary": "About the user's bike."})),
        _ => Reply::text("Noted."),
    }
}

fn replaces_questions(llm: &ScriptedLlm) -> usize {
    llm.structured_calls("replaces").len()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_no_rule_reads_is_asked_about_and_the_old_fact_replaced() {
    let llm = ScriptedLlm::with_handler(relocating_model).await;
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), &llm).await;
    let conversation = conv("bike");
    learn_from(
        &client,
        &conversation,
        "I keep my bike in a garage on Fenwick Street.",
    )
    .await;
    assert_eq!(replaces_questions(&llm), 0, "nothing to replace yet");

    let (_, report) = learn_from(
        &client,
        &conversation,
        "Things changed, the bike lives in my hallway now.",
    )
    .await;
    assert_eq!(replaces_questions(&llm), 1);
    assert_eq!(report.updated.len(), 1, "{report:?}");
    assert_eq!(
        live_facts(&client, &conversation).await,
        ["The user keeps the bike in the hallway."]
    );
    let new_id = files(dir.path(), "bike", "facts")[0]
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_owned();
    let tombstones = files(dir.path(), "bike", "deleted/facts");
    assert_eq!(tombstones.len(), 1);
    assert!(
        tombstones[0].contains("Fenwick Street"),
        "{}",
        tombstones[0]
    );
    assert!(
        tombstones[0].contains(&format!("replaced_by: {new_id}")),
        "{}",
        tombstones[0]
    );

    // A change the model says replaces nothing keeps both; a message that signals no
    // change is not asked about at all.
    let (_, report) = learn_from(
        &client,
        &conversation,
        "I got a second bike now, a red one.",
    )
    .await;
    assert_eq!(replaces_questions(&llm), 2);
    assert!(report.updated.is_empty(), "{report:?}");
    let (_, report) = learn_from(&client, &conversation, "I have a second red bike.").await;
    assert_eq!(
        replaces_questions(&llm),
        2,
        "no change signalled, no question"
    );
    assert!(report.updated.is_empty(), "{report:?}");
    let live = live_facts(&client, &conversation).await;
    assert!(
        live.contains(&"The user keeps the bike in the hallway.".to_owned())
            && live.contains(&"The user has a second red bike.".to_owned()),
        "{live:?}"
    );
}
