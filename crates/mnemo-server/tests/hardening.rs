//! The second round of hardening, over real sockets: linked folders at every level of the
//! store's conversation and session trees, request numbers that would overflow, work bounded
//! before retrieval, and the smaller points (skipped lines, session settings, failed forks).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};
use support::*;

/// A scripted upstream: summaries for the summariser, echoes otherwise.
async fn upstream() -> ScriptedLlm {
    ScriptedLlm::with_handler(|request: &ChatRequest| {
        if request
            .system_prompt()
            .is_some_and(|s| s.starts_with("You are a conversation summariser"))
        {
            return Reply::text("SUMMARY");
        }
        model(request)
    })
    .await
}

async fn get(url: &str) -> (u16, Value) {
    post_get(url).await
}

/// Every file under `dir` with its text: what the outside of the store holds.
fn contents(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir() {
            for (inner, text) in contents(&entry.path()) {
                files.insert(format!("{name}/{inner}"), text);
            }
        } else {
            files.insert(name, std::fs::read_to_string(entry.path()).unwrap());
        }
    }
    files
}

/// A folder outside the store, holding what a link there would expose.
fn outside() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("strategy.yaml"),
        "focus: OUTSIDE-STRATEGY\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("call_1.txt"), "OUTSIDE-SECRET").unwrap();
    std::fs::write(dir.path().join("kept.json"), "{}").unwrap();
    dir
}

/// Replaces the store's `level` (and what is below it) by a link to `target`.
fn plant_link(root: &Path, level: &str, target: &Path) {
    let path = root.join(level);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(&path).unwrap();
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &path).unwrap();
}

/// A chat that offloads its tool output and is due a summary (`mode: auto`).
fn governed_chat(history: Vec<Value>) -> Value {
    json!({"model": "m", "memory_top_k": 0, "messages": history,
        "memory_strategy": {"mode": "auto", "offload_tokens": 100, "max_history_messages": 4}})
}

fn big_tool_history() -> Vec<Value> {
    let mut history = tool_history(3, 2000);
    history.push(json!({"role": "assistant", "content": "Done."}));
    history.push(json!({"role": "user", "content": "What next?"}));
    history
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_at_any_level_of_a_conversation_folder_is_refused() {
    let llm = upstream().await;
    let server = Server::start(Some(llm.base_url())).await;
    let (url, root) = (&server.url, server.root.clone());
    let outside = outside();
    let before = contents(outside.path());
    let chat_url = format!("{url}/v1/chat/completions");
    let memory_url = format!("{url}/v1/conversations/c/memory");
    let output_url = format!("{url}/v1/conversations/c/tool-outputs/call_1");

    for level in [
        "conversations",
        "conversations/c",
        "conversations/c/tool_outputs",
        "conversations/c/summaries",
    ] {
        if root.join("conversations").exists() {
            std::fs::remove_dir_all(root.join("conversations")).ok();
            std::fs::remove_file(root.join("conversations")).ok();
        }
        plant_link(&root, level, outside.path());
        let settings_linked = !level.ends_with("tool_outputs") && !level.ends_with("summaries");

        // The stored strategy: neither read nor written through the link.
        let (status, body) = get(&memory_url).await;
        assert!(!body.to_string().contains("OUTSIDE"), "{level}: {body}");
        let (patched, patch_body) = patch(&memory_url, json!({"mode": "trim"})).await;
        if settings_linked {
            for (status, body) in [(status, &body), (patched, &patch_body)] {
                assert_eq!(status, 500, "{level}: {body}");
                assert!(
                    error_message(body)
                        .contains(&format!("{level} is a symbolic link, not a real folder")),
                    "{level}: {body}"
                );
            }
        } else {
            assert_eq!(
                (status, patched),
                (200, 200),
                "{level}: {body} {patch_body}"
            );
        }

        // An offloaded output is not read from outside.
        let (status, body) = get(&output_url).await;
        assert_ne!(status, 200, "{level}: {body}");
        assert!(
            !body.to_string().contains("OUTSIDE-SECRET"),
            "{level}: {body}"
        );

        // A governed chat writes no output and no summary outside.
        let mut request = governed_chat(big_tool_history());
        request["memory_id"] = json!("c");
        let (status, body) = post(&chat_url, request).await;
        if settings_linked {
            assert_eq!(status, 500, "{level}: {body}");
        } else {
            assert_eq!(status, 200, "{level}: {body}");
            if level.ends_with("tool_outputs") {
                assert_eq!(body["memory_context"]["offloaded"], json!([]), "{body}");
            }
        }
        assert_eq!(contents(outside.path()), before, "{level}: written outside");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_at_any_level_of_a_session_folder_is_refused_and_a_failed_fork_leaves_nothing() {
    let llm = upstream().await;
    let server = Server::start(Some(llm.base_url())).await;
    let (url, root) = (&server.url, server.root.clone());
    let outside = outside();
    let before = contents(outside.path());
    let chat_url = format!("{url}/v1/chat/completions");
    let mut request = governed_chat(big_tool_history());
    request["memory_session"] = json!("s");
    let (status, body) = post(&chat_url, request).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["memory_context"]["offloaded"],
        json!(["call_0", "call_1", "call_2"])
    );

    for level in [
        "sessions/s/tool_outputs",
        "sessions/s/summaries",
        "sessions/s",
        "sessions",
    ] {
        let aside = root.join("aside");
        std::fs::rename(root.join(level), &aside).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join(level)).unwrap();

        let (status, body) = get(&format!("{url}/v1/sessions/s/tool-outputs/call_1")).await;
        assert!(
            !body.to_string().contains("OUTSIDE-SECRET"),
            "{level}: {body}"
        );
        if !level.ends_with("summaries") {
            assert_ne!(status, 200, "{level}: {body}");
        }

        let (status, body) = post(&format!("{url}/v1/sessions/s/fork"), json!({"id": "f"})).await;
        assert!(status >= 400, "{level}: {body}");
        assert!(
            error_message(&body).contains("a symbolic link, not a real folder"),
            "{level}: {body}"
        );
        if level != "sessions" {
            let (status, body) = get(&format!("{url}/v1/sessions/f")).await;
            assert_eq!(
                status, 404,
                "{level}: a failed fork left its folder: {body}"
            );
        }

        let mut request = governed_chat(big_tool_history());
        request["memory_session"] = json!("s");
        request["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": format!("Again, at {level}.")}));
        let (status, body) = post(&chat_url, request).await;
        if level == "sessions/s" || level == "sessions" {
            assert_eq!(status, 500, "{level}: {body}");
            assert!(
                error_message(&body).contains("a symbolic link, not a real folder"),
                "{level}: {body}"
            );
            let (status, body) = get(&format!("{url}/v1/sessions/s")).await;
            assert_eq!(status, 500, "{level}: {body}");
        }
        assert_eq!(contents(outside.path()), before, "{level}: written outside");

        std::fs::remove_file(root.join(level)).unwrap();
        std::fs::rename(&aside, root.join(level)).unwrap();
    }
    // Whole again: the fork a failed one tried is made, with the session's outputs.
    let (status, body) = post(&format!("{url}/v1/sessions/s/fork"), json!({"id": "f"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, slice) = get(&format!("{url}/v1/sessions/f/tool-outputs/call_1")).await;
    assert_eq!(status, 200, "{slice}");
    assert!(
        slice["text"].as_str().unwrap().starts_with("111"),
        "{slice}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_max_tokens_near_two_to_the_64_is_a_400_naming_the_field() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    for stream in [false, true] {
        for (field, value, expected) in [
            (
                "max_tokens",
                json!(u64::MAX),
                "max_tokens is 18446744073709551615",
            ),
            (
                "max_completion_tokens",
                json!(u64::MAX - 100),
                "max_completion_tokens is 18446744073709551515",
            ),
            ("max_tokens", json!(300_000), "max_tokens is 300000"),
            ("max_tokens", json!(-1), "max_tokens must be a whole number"),
            (
                "max_tokens",
                json!(1e30),
                "max_tokens must be a whole number",
            ),
        ] {
            let mut request = chat("Hello.");
            request[field] = value;
            request["stream"] = json!(stream);
            // With a strategy too: no stage's sum may overflow either.
            request["memory_strategy"] = json!({"mode": "auto"});
            let response = http().post(&url).json(&request).send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            assert_eq!(status, 400, "{field} {stream}: {body}");
            assert!(error_message(&body).starts_with(expected), "{body}");
        }
    }
    assert_eq!(llm.chat_calls(), 0, "nothing went upstream");
    let mut request = chat("Hello.");
    request["max_tokens"] = json!(100);
    let (status, body) = post(&url, request).await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_that_cannot_fit_costs_no_retrieval_and_retrieval_reads_a_bounded_query() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(
        Some(llm.base_url()),
        mnemo_server::ServerOptions::default(),
        |config| config.retrieval.query_expansion = true,
    )
    .await;
    let url = format!("{}/v1/chat/completions", server.url);
    // 2 MiB of text: far more than the 200,000 tokens of an unknown model's window, with or
    // without a strategy (governance never shrinks the latest user message).
    let huge = "word ".repeat(400_000);
    for strategy in [json!(null), json!({"mode": "auto"})] {
        let mut request = chat(&huge);
        request["memory_strategy"] = strategy.clone();
        let started = std::time::Instant::now();
        let (status, body) = post(&url, request).await;
        assert_eq!(status, 400, "{strategy}");
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        assert!(
            llm.requests().is_empty(),
            "{strategy}: nothing was searched (query expansion asks the upstream first)"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{strategy}: {:?}",
            started.elapsed()
        );
    }
    assert!(!server.root.join("entries/c1").exists(), "no turn stored");

    // A long message that fits: retrieval reads its first 4 KiB, the upstream gets it whole.
    let long = format!("Where do I live? {}", "context ".repeat(12_000));
    let (status, body) = post(&url, chat(&long)).await;
    assert_eq!(status, 200, "{body}");
    let expansion = llm
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .find(|b| b["max_tokens"] == 60)
        .expect("the query was expanded");
    let asked = expansion["messages"].to_string();
    assert!(asked.contains("Where do I live?"), "{asked}");
    assert!(
        asked.len() < mnemo_core::MAX_QUERY_BYTES + 4096,
        "the query is bounded: {} bytes",
        asked.len()
    );
    let forwarded = last_forwarded(&llm);
    assert!(
        forwarded.to_string().len() > long.len(),
        "the upstream got it whole"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn search_queries_have_a_documented_limit() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let long = "q".repeat(mnemo_core::MAX_QUERY_BYTES + 1);
    let (status, body) = post(
        &format!("{}/v1/memories/search", server.url),
        json!({"query": long, "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error_message(&body).starts_with("query is 4097 bytes; a query holds at most 4096"),
        "{body}"
    );
    let (status, body) = get(&format!("{}/v1/history/search?q={long}", server.url)).await;
    assert_eq!(status, 400, "{body}");
    assert!(error_message(&body).contains("at most 4096"), "{body}");
    let (status, body) = post(
        &format!("{}/v1/memories/search", server.url),
        json!({"query": "q".repeat(mnemo_core::MAX_QUERY_BYTES), "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let document: Value = http()
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        document["components"]["schemas"]["SearchRequest"]["properties"]["query"]["maxLength"],
        4096,
        "documented"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn skipped_lines_stay_reported_while_they_are_in_the_log() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let say = |text: &str| {
        json!({"model": "m", "memory_top_k": 0, "memory_session": "s",
        "messages": [{"role": "user", "content": text}]})
    };
    let (status, body) = post(&url, say("first")).await;
    assert_eq!(status, 200, "{body}");
    let log = server.root.join("sessions/s/messages.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, format!("{text}a hand edit\n")).unwrap();

    let skipped = || async {
        let (status, info) = get(&format!("{}/v1/sessions/s", server.url)).await;
        assert_eq!(status, 200, "{info}");
        info["skipped_lines"].as_array().unwrap().len()
    };
    assert_eq!(skipped().await, 1);
    for text in ["second", "third"] {
        let (status, body) = post(&url, say(text)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(skipped().await, 1, "the malformed line is still in the log");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_edited_session_yaml_with_a_bad_name_is_a_fault_of_the_file() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let dir = server.root.join("sessions/x");
    std::fs::create_dir_all(&dir).unwrap();
    let request = json!({"model": "m", "memory_top_k": 0, "memory_session": "x",
        "messages": [{"role": "user", "content": "hi"}]});
    for (field, line) in [
        ("agent", "conversation: c\nagent: ../../etc\n"),
        ("conversation", "conversation: a/b\n"),
    ] {
        std::fs::write(
            dir.join("session.yaml"),
            format!("title: t\n{line}created_at: 2026-01-01T00:00:00Z\nupdated_at: 2026-01-01T00:00:00Z\n"),
        )
        .unwrap();
        let (status, body) = post(&url, request.clone()).await;
        assert_eq!(status, 500, "{field}: {body}");
        assert!(
            error_message(&body).starts_with(&format!("sessions/x/session.yaml: {field}: ")),
            "{field}: {body}"
        );
    }
    assert_eq!(llm.chat_calls(), 0);
    server.shutdown().await;
}
