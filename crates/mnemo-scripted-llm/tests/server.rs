//! The scripted server over real HTTP: response shapes, faults, recording, the binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_scripted_llm::{fail_first, sequence, ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};

async fn post(server: &ScriptedLlm, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn ask(text: &str) -> Value {
    json!({ "model": "m", "messages": [{ "role": "user", "content": text }] })
}

/// The `data:` payloads of an SSE body.
fn events(body: &str) -> Vec<&str> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .collect()
}

#[tokio::test]
async fn echoes_as_a_valid_chat_completion() {
    let server = ScriptedLlm::start().await;
    let response = post(&server, ask("hi there")).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-scripted-0");
    assert_eq!(body["model"], "m");
    assert!(body["created"].is_u64());
    assert_eq!(
        body["choices"],
        json!([{
            "index": 0,
            "message": { "role": "assistant", "content": "echo: hi there" },
            "finish_reason": "stop",
        }])
    );
    assert_eq!(
        body["usage"],
        json!({ "prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5 })
    );
}

#[tokio::test]
async fn streams_text_as_chunks_ending_with_done() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| Reply::Json(json!({ "a": "b c" }))).await;
    let mut body = ask("x");
    body["stream"] = json!(true);
    let response = post(&server, body).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let events = events(&text);
    assert_eq!(events.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, r#"{"a":"b c"}"#);
    assert!(
        chunks.len() >= 4,
        "split into several pieces: {}",
        chunks.len()
    );
}

#[tokio::test]
async fn errors_look_like_openai_errors() {
    let server = ScriptedLlm::with_handler(sequence(vec![
        Reply::status(429, "slow down"),
        Reply::Malformed("{not json".into()),
        Reply::Raw {
            status: 503,
            headers: vec![("retry-after".into(), "7".into())],
            body: "busy".into(),
        },
    ]))
    .await;
    let response = post(&server, ask("x")).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "slow down");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let response = post(&server, ask("x")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "{not json");

    let response = post(&server, ask("x")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "7");
    // The last reply of a sequence repeats.
    assert_eq!(post(&server, ask("x")).await.status(), 503);
}

#[tokio::test]
async fn fail_first_then_recovers_and_set_handler_replaces() {
    let server = ScriptedLlm::with_handler(fail_first(
        2,
        Reply::status(500, "boom"),
        |_: &ChatRequest| Reply::text("ok"),
    ))
    .await;
    let statuses = [
        post(&server, ask("x")).await.status(),
        post(&server, ask("x")).await.status(),
        post(&server, ask("x")).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [500, 500, 200]);

    server.set_handler(|request: &ChatRequest| {
        Reply::text(format!(
            "call {} for {}",
            request.call,
            request.last_user_message().unwrap()
        ))
    });
    let body: Value = post(&server, ask("you")).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "call 3 for you");
    assert_eq!(server.chat_calls(), 4);
}

#[tokio::test]
async fn delays_chunks_and_hangs() {
    let ms = Duration::from_millis;
    let server = ScriptedLlm::with_handler(sequence(vec![
        Reply::delay(ms(150), Reply::text("late")),
        Reply::Chunks(vec![(ms(100), "a".into()), (ms(100), "b".into())]),
        Reply::Hang,
    ]))
    .await;
    let started = Instant::now();
    let body: Value = post(&server, ask("x")).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "late");
    assert!(started.elapsed() >= ms(150));

    // Without `stream`, chunks arrive as one completion after all their delays.
    let started = Instant::now();
    let body: Value = post(&server, ask("x")).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "ab");
    assert!(started.elapsed() >= ms(200));

    // A hang ends, with the server, when it is dropped.
    let url = format!("{}/chat/completions", server.base_url());
    let hanging = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&ask("x"))
            .send()
            .await
    });
    tokio::time::sleep(ms(100)).await;
    assert!(!hanging.is_finished());
    drop(server);
    let answered = tokio::time::timeout(Duration::from_secs(2), hanging).await;
    assert!(answered.is_ok(), "the hang outlived the server");
}

#[tokio::test]
async fn a_panicking_handler_answers_500() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| panic!("scripted assertion failed")).await;
    assert_eq!(post(&server, ask("x")).await.status(), 500);
}

#[tokio::test]
async fn models_other_paths_and_recording() {
    let server = ScriptedLlm::start().await;
    let client = reqwest::Client::new();
    let models: Value = client
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "scripted");

    let echoed: Value = client
        .delete(format!("{}/files/f1?force=true", server.base_url()))
        .header("x-trace", "t1")
        .body("raw text")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(echoed["path"], "/v1/files/f1");
    assert_eq!(echoed["method"], "DELETE");
    assert_eq!(echoed["query"], "force=true");
    assert_eq!(echoed["body"], "raw text");
    assert_eq!(echoed["headers"]["x-trace"], "t1");

    let not_json = client
        .post(format!("{}/chat/completions", server.base_url()))
        .body("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].header("x-trace"), Some("t1"));
    assert_eq!(requests[1].query.as_deref(), Some("force=true"));
    assert_eq!(&requests[2].raw_body[..], b"nope");
    assert_eq!(requests[2].body, None);
    assert_eq!(
        server.chat_calls(),
        0,
        "a body that is not JSON reaches no handler"
    );
    server.clear_requests();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_binary_prints_its_url_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mnemo-scripted-llm"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    let base_url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    assert!(
        base_url.starts_with("http://127.0.0.1:") && base_url.ends_with("/v1"),
        "{line}"
    );

    let reply: Value = reqwest::Client::new()
        .post(format!("{base_url}/chat/completions"))
        .json(&ask("from a process"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "echo: from a process"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_after_calls_reply_waits_for_the_later_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let server = Arc::new(
        ScriptedLlm::with_handler(|request: &ChatRequest| match request.call {
            0 => Reply::after_calls(2, Reply::text("first, answered once the second came")),
            _ => Reply::text("second"),
        })
        .await,
    );
    let second_sent = Arc::new(AtomicBool::new(false));
    let first = tokio::spawn({
        let (server, second_sent) = (server.clone(), second_sent.clone());
        async move {
            let body: Value = post(&server, ask("one")).await.json().await.unwrap();
            // Deterministic: the first cannot be answered before the server has the second.
            assert!(second_sent.load(Ordering::SeqCst), "answered alone: {body}");
            body
        }
    });
    while server.chat_calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    second_sent.store(true, Ordering::SeqCst);
    let second: Value = post(&server, ask("two")).await.json().await.unwrap();
    assert_eq!(second["choices"][0]["message"]["content"], "second");
    let first = first.await.unwrap();
    assert_eq!(
        first["choices"][0]["message"]["content"],
        "first, answered once the second came"
    );
}
