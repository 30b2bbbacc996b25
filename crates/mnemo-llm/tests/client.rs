//! `LlmClient` against the scripted server: real HTTP on 127.0.0.1, scripted faults.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mnemo_llm::{ChatMessage, DeltaAccumulator, JsonSchema, LlmClient, LlmConfig, LlmError};
use mnemo_scripted_llm::{echo, fail_first, sequence, ChatRequest, Reply, ScriptedLlm};
use serde::Deserialize;
use serde_json::{json, Value};

fn config(base_url: &str) -> LlmConfig {
    let mut config = LlmConfig::new(base_url, "test-model").unwrap();
    config.initial_backoff = Duration::from_millis(1);
    config.request_timeout = Duration::from_secs(5);
    config
}

fn client(server: &ScriptedLlm) -> LlmClient {
    LlmClient::new(config(&server.base_url())).unwrap()
}

fn hello() -> Value {
    json!({ "messages": [{ "role": "user", "content": "hello" }] })
}

fn content(reply: &Value) -> &str {
    reply["choices"][0]["message"]["content"].as_str().unwrap()
}

#[derive(Debug, Deserialize, PartialEq)]
struct Facts {
    facts: Vec<String>,
}

fn facts_schema() -> JsonSchema {
    JsonSchema::new(
        "facts",
        json!({
            "type": "object",
            "properties": { "facts": { "type": "array", "items": { "type": "string" } } },
            "required": ["facts"],
            "additionalProperties": false,
        }),
    )
}

#[tokio::test]
async fn chat_sends_the_body_with_the_default_model() {
    let server = ScriptedLlm::start().await;
    let reply = client(&server).chat(&hello()).await.unwrap();
    assert_eq!(content(&reply), "echo: hello");
    assert_eq!(reply["object"], "chat.completion");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body.as_ref().unwrap()["model"], "test-model");
    assert_eq!(requests[0].header("authorization"), None);

    let mut body = hello();
    body["model"] = json!("chosen-by-agent");
    let reply = client(&server).chat(&body).await.unwrap();
    assert_eq!(reply["model"], "chosen-by-agent");
}

#[tokio::test]
async fn api_key_is_sent_as_bearer() {
    let server = ScriptedLlm::start().await;
    let mut config = config(&server.base_url());
    config.api_key = Some("sk-test".into());
    LlmClient::new(config)
        .unwrap()
        .chat(&hello())
        .await
        .unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-test")
    );
}

#[tokio::test]
async fn retries_500_and_429_then_succeeds() {
    let server = ScriptedLlm::with_handler(sequence(vec![
        Reply::status(500, "boom"),
        Reply::Raw {
            status: 429,
            headers: vec![("retry-after".into(), "0".into())],
            body: "slow down".into(),
        },
        Reply::status(503, "loading model"),
        Reply::text("finally"),
    ]))
    .await;
    let reply = client(&server).chat(&hello()).await.unwrap();
    assert_eq!(content(&reply), "finally");
    assert_eq!(server.chat_calls(), 4);
}

#[tokio::test]
async fn gives_up_after_max_retries() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| Reply::status(502, "bad gateway upstream"))
            .await;
    let err = client(&server).chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Status { status: 502, body_snippet, .. } if body_snippet.contains("bad gateway upstream")),
        "{err}"
    );
    assert_eq!(server.chat_calls(), 4, "one attempt and 3 retries");
}

#[tokio::test]
async fn does_not_retry_a_400() {
    let server = ScriptedLlm::with_handler(fail_first(
        1,
        Reply::status(400, "messages is required"),
        echo,
    ))
    .await;
    let err = client(&server).chat(&hello()).await.unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, LlmError::Status { status: 400, .. }),
        "{message}"
    );
    assert!(
        message.contains(&format!("{}/chat/completions", server.base_url())),
        "{message}"
    );
    assert!(message.contains("messages is required"), "{message}");
    assert!(!message.contains('\n'));
    assert_eq!(server.chat_calls(), 1);
}

#[tokio::test]
async fn a_hanging_server_times_out() {
    let server = ScriptedLlm::with_handler(|_: &ChatRequest| Reply::Hang).await;
    let mut config = config(&server.base_url());
    config.request_timeout = Duration::from_millis(200);
    config.max_retries = 3;
    let started = Instant::now();
    let err = LlmClient::new(config)
        .unwrap()
        .chat(&hello())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Timeout { after, .. } if *after == Duration::from_millis(200)),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "one deadline for the call: {:?}",
        started.elapsed()
    );
    assert_eq!(
        server.chat_calls(),
        1,
        "a timeout is not retried: the upstream may still be doing (and billing) the work"
    );
}

#[tokio::test]
async fn retries_stop_at_the_call_s_deadline() {
    let server = ScriptedLlm::with_handler(|_: &ChatRequest| Reply::Raw {
        status: 503,
        headers: vec![("retry-after".into(), "20".into())],
        body: "busy".into(),
    })
    .await;
    let mut config = config(&server.base_url());
    config.request_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = LlmClient::new(config)
        .unwrap()
        .chat(&hello())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Status { status: 503, .. }), "{err}");
    // (`retry-after` above the 30 s cap would be capped; 20 s is simply too long here.)
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        server.chat_calls(),
        1,
        "a 20 s Retry-After does not fit in 0.5 s"
    );
}

#[tokio::test]
async fn answers_larger_than_the_cap_are_refused() {
    let big = "x".repeat(mnemo_llm::MAX_ANSWER_BYTES + 1);
    let server = ScriptedLlm::with_handler(move |_: &ChatRequest| Reply::text(&big)).await;
    let err = client(&server).chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidOutput { reason, .. } if reason.contains("mnemo takes at most")),
        "{err}"
    );

    let chunks: Vec<_> = (0..20)
        .map(|_| (Duration::ZERO, "y".repeat(1 << 20)))
        .collect();
    let server =
        ScriptedLlm::with_handler(move |_: &ChatRequest| Reply::Chunks(chunks.clone())).await;
    let mut stream = client(&server).chat_stream(&hello()).await.unwrap();
    let mut passed = 0;
    let err = loop {
        match stream.body.next().await {
            Some(Ok(chunk)) => passed += chunk.len(),
            Some(Err(e)) => break e,
            None => panic!("a 20 MiB stream was passed whole"),
        }
    };
    assert!(passed <= mnemo_llm::MAX_ANSWER_BYTES, "{passed}");
    assert!(err.to_string().contains("mnemo cut it there"), "{err}");
    assert!(stream.body.next().await.is_none());
}

#[tokio::test]
async fn a_malformed_body_is_invalid_output() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| Reply::Malformed("<html>oops".into())).await;
    let err = client(&server).chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidOutput { content_snippet, .. } if content_snippet == "<html>oops"),
        "{err}"
    );
}

#[tokio::test]
async fn nobody_listening_is_a_connect_error_naming_the_url() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let client = LlmClient::new(config(&base)).unwrap();
    let err = client.chat(&hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Connect { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("{base}/chat/completions")),
        "{err}"
    );
    assert!(matches!(
        client.health().await,
        Err(LlmError::Connect { .. })
    ));
}

#[tokio::test]
async fn health_asks_for_the_models() {
    let server = ScriptedLlm::start().await;
    client(&server).health().await.unwrap();
    assert_eq!(server.requests()[0].path, "/v1/models");
}

#[tokio::test]
async fn complete_json_asks_for_the_schema_and_parses_the_reply() {
    let server = ScriptedLlm::with_handler(|request: &ChatRequest| {
        assert_eq!(request.schema_name(), Some("facts"));
        assert_eq!(
            request.body["response_format"]["json_schema"]["strict"],
            true
        );
        assert_eq!(request.body["temperature"], 0);
        Reply::Json(json!({ "facts": ["Anne is my wife"] }))
    })
    .await;
    let facts: Facts = client(&server)
        .complete_json(vec![ChatMessage::user("Anne is my wife.")], &facts_schema())
        .await
        .unwrap();
    assert_eq!(facts.facts, ["Anne is my wife"]);
}

#[tokio::test]
async fn complete_json_tolerates_fences_and_prose() {
    let server = ScriptedLlm::with_handler(|_: &ChatRequest| {
        Reply::text("Sure! Here you go:\n```json\n{\"facts\": [\"I dislike pizza\"]}\n```")
    })
    .await;
    let facts: Facts = client(&server)
        .complete_json(vec![ChatMessage::user("I dislike pizza.")], &facts_schema())
        .await
        .unwrap();
    assert_eq!(facts.facts, ["I dislike pizza"]);
}

#[tokio::test]
async fn complete_json_reports_unusable_replies() {
    let server = ScriptedLlm::with_handler(sequence(vec![
        Reply::text("I cannot do that."),
        Reply::Json(json!({ "facts": "not a list" })),
        Reply::Malformed("{{{".into()),
    ]))
    .await;
    let client = client(&server);
    for expected in ["no JSON value", "does not fit facts", "is not JSON"] {
        let err = client
            .complete_json::<Facts>(vec![ChatMessage::user("hi")], &facts_schema())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::InvalidOutput { .. }), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[tokio::test]
async fn complete_json_falls_back_to_json_object_mode() {
    let server =
        ScriptedLlm::with_handler(
            |request: &ChatRequest| match request.response_format_type() {
                Some("json_schema") => {
                    Reply::status(400, "response_format of type json_schema is not supported")
                }
                _ => Reply::Json(json!({ "facts": [] })),
            },
        )
        .await;
    let facts: Facts = client(&server)
        .complete_json(
            vec![
                ChatMessage::system("Extract facts."),
                ChatMessage::user("hi"),
            ],
            &facts_schema(),
        )
        .await
        .unwrap();
    assert_eq!(facts, Facts { facts: vec![] });

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].body.as_ref().unwrap();
    assert_eq!(second["response_format"], json!({ "type": "json_object" }));
    let system = second["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Extract facts.") && system.contains("\"facts\""),
        "{system}"
    );
}

#[tokio::test]
async fn a_plain_400_is_not_a_schema_fallback() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| Reply::status(400, "context length exceeded"))
            .await;
    let err = client(&server)
        .complete_json::<Facts>(vec![ChatMessage::user("hi")], &facts_schema())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Status { status: 400, .. }), "{err}");
    assert_eq!(server.chat_calls(), 1);
}

#[tokio::test]
async fn streams_pass_chunks_through_and_accumulate_the_text() {
    let ms = Duration::from_millis;
    let server = ScriptedLlm::with_handler(fail_first(
        1,
        Reply::status(500, "warming up"),
        move |_: &ChatRequest| {
            Reply::Chunks(vec![
                (ms(30), "Hello".into()),
                (ms(30), ", ".into()),
                (ms(30), "world".into()),
            ])
        },
    ))
    .await;
    let stream = client(&server).chat_stream(&hello()).await.unwrap();
    assert_eq!(stream.status, 200);
    assert_eq!(stream.headers["content-type"], "text/event-stream");

    let chunks: Vec<_> = stream.body.collect().await;
    let mut text = DeltaAccumulator::new();
    for chunk in &chunks {
        text.feed(chunk.as_ref().unwrap());
    }
    assert!(
        chunks.len() >= 4,
        "pieces arrive as they are sent: {} chunks",
        chunks.len()
    );
    assert!(text.is_complete());
    assert_eq!(text.finish(), "Hello, world");

    assert_eq!(
        server.chat_calls(),
        2,
        "a failure before the stream starts is retried"
    );
    let sent = server.requests()[1].body.clone().unwrap();
    assert_eq!(
        (sent["stream"].clone(), sent["model"].clone()),
        (json!(true), json!("test-model"))
    );
}

#[tokio::test]
async fn a_stream_refused_with_400_is_a_status_error() {
    let server =
        ScriptedLlm::with_handler(|_: &ChatRequest| Reply::status(400, "bad request")).await;
    let err = client(&server).chat_stream(&hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Status { status: 400, .. }), "{err}");
}

#[tokio::test]
async fn a_silent_stream_fails_instead_of_waiting_forever() {
    let server = ScriptedLlm::with_handler(|_: &ChatRequest| {
        Reply::Chunks(vec![
            (Duration::ZERO, "a".into()),
            (Duration::from_secs(10), "b".into()),
        ])
    })
    .await;
    let mut config = config(&server.base_url());
    config.request_timeout = Duration::from_millis(200);
    let mut stream = LlmClient::new(config)
        .unwrap()
        .chat_stream(&hello())
        .await
        .unwrap();
    let mut got_text = DeltaAccumulator::new();
    let err = loop {
        match stream.body.next().await {
            Some(Ok(chunk)) => got_text.feed(&chunk),
            Some(Err(e)) => break e,
            None => panic!("the stream ended without an error"),
        }
    };
    assert!(matches!(err, LlmError::Stream(_)), "{err}");
    assert_eq!(got_text.text(), "a");
    assert!(stream.body.next().await.is_none());
}

#[tokio::test]
async fn forward_passes_method_query_headers_and_body() {
    let server = ScriptedLlm::start().await;
    let mut headers = http::HeaderMap::new();
    headers.insert("x-custom", "kept".parse().unwrap());
    headers.insert("authorization", "Bearer agent-key".parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("host", "mnemo.local:8100".parse().unwrap());
    headers.insert("connection", "x-hop".parse().unwrap());
    headers.insert("x-hop", "dropped".parse().unwrap());
    let response = client(&server)
        .forward(
            http::Method::PUT,
            "/files/abc?purpose=test&n=2",
            headers,
            reqwest::Body::from(r#"{"name":"notes"}"#),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let echoed: Value = response.json().await.unwrap();
    assert_eq!(echoed["path"], "/v1/files/abc");
    assert_eq!(echoed["method"], "PUT");
    assert_eq!(echoed["query"], "purpose=test&n=2");
    assert_eq!(echoed["body"], json!({ "name": "notes" }));

    let arrived = &server.requests()[0];
    assert_eq!(arrived.header("x-custom"), Some("kept"));
    assert_eq!(arrived.header("authorization"), Some("Bearer agent-key"));
    assert_eq!(
        arrived.header("host"),
        Some(server.addr().to_string().as_str())
    );
    assert_eq!(arrived.header("x-hop"), None);
}

#[tokio::test]
async fn forward_uses_the_configured_key_and_returns_any_status() {
    let server = ScriptedLlm::start().await;
    let mut config = config(&server.base_url());
    config.api_key = Some("sk-mnemo".into());
    let client = LlmClient::new(config).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", "Bearer agent-key".parse().unwrap());
    let response = client
        .forward(
            http::Method::GET,
            "/models",
            headers,
            reqwest::Body::from(""),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let models: Value = response.json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "scripted");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-mnemo")
    );

    // Not an error: the caller passes the upstream's answer on.
    let response = client
        .forward(
            http::Method::POST,
            "/chat/completions",
            http::HeaderMap::new(),
            reqwest::Body::from("not json"),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

/// An upstream that answers every request with a 500 whose body never ends, on a free
/// loopback port: its base URL.
async fn endless_error_page() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request is not needed; its headers are read so the client sends it whole.
                let mut request = [0u8; 8192];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let first = "<h1>The start of a broken upstream's page</h1>\n";
                let filler = "<p>and then more of it</p>\n".repeat(1000);
                let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
                let mut next = chunk(first);
                // Until the client hangs up: a client that reads it all never stops.
                while socket.write_all(next.as_bytes()).await.is_ok() {
                    next = chunk(&filler);
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn only_the_start_of_an_error_body_is_read() {
    let base = endless_error_page().await;
    let mut config = config(&base);
    config.max_retries = 0;
    // Far longer than the 5 s an error body may take: a client reading the endless body to
    // its end would give up at those 5 s with nothing quoted.
    config.request_timeout = Duration::from_secs(60);
    let err = LlmClient::new(config)
        .unwrap()
        .chat(&hello())
        .await
        .unwrap_err();
    match &err {
        LlmError::Status {
            status: 500,
            body_snippet,
            ..
        } => assert!(
            body_snippet.starts_with("<h1>The start of a broken upstream's page</h1>"),
            "the body's first 64 KiB are quoted: {body_snippet}"
        ),
        other => panic!("a 500 with its body's start: {other}"),
    }
}
