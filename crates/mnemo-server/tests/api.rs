//! The HTTP API over real sockets: mnemo's server in front of a scripted upstream, a real
//! store, model, index and git.

use crate::support;

use std::path::Path;
use std::time::Duration;

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use mnemo_server::ServerOptions;
use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn chat_answers_with_memory_hits_and_strips_memory_fields() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let (status, _) = post(
        &format!("{}/v1/memories", server.url),
        json!({"content": "The user's favourite colour is teal.", "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201);
    let mut request = chat("What is my favourite colour?");
    request["memory_top_k"] = json!(2);
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), request).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("teal"));
    assert_eq!(
        body["memory_hits"][0]["content"],
        "The user's favourite colour is teal."
    );
    let forwarded = llm
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .find(|b| b.get("response_format").is_none())
        .unwrap();
    assert!(forwarded
        .as_object()
        .unwrap()
        .keys()
        .all(|k| !k.starts_with("memory_")));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_pass_through_as_server_sent_events() {
    let llm = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some(_) => Reply::Json(json!({"facts": []})),
        None => Reply::Chunks(vec![
            (Duration::ZERO, "one ".into()),
            (Duration::from_millis(20), "two".into()),
        ]),
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let mut request = chat("Count.");
    request["stream"] = json!(true);
    let response = http()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    assert!(
        text.contains("\"one \"") && text.contains("\"two\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let (_store, root) = server.shutdown().await;
    let turns = std::fs::read_dir(root.join("entries/c1/turns/assistant")).unwrap();
    let turn = std::fs::read_to_string(turns.into_iter().next().unwrap().unwrap().path()).unwrap();
    assert!(turn.contains("one two"), "{turn}");
}

#[tokio::test(flavor = "multi_thread")]
async fn other_paths_go_to_the_upstream_unchanged() {
    let llm = ScriptedLlm::start().await;
    let server = Server::start(Some(llm.base_url())).await;
    let models: Value = http()
        .get(format!("{}/v1/models", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(models["data"].is_array(), "{models}");
    let response = http()
        .post(format!("{}/v1/moderations?threshold=8", server.url))
        .header("x-custom", "kept")
        .json(&json!({"input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let echo: Value = response.json().await.unwrap();
    assert_eq!(echo["path"], "/v1/moderations");
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["query"], "threshold=8");
    assert_eq!(echo["body"]["input"], "hello");
    let recorded = llm.requests();
    let last = recorded.last().unwrap();
    assert_eq!(last.header("x-custom"), Some("kept"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_precise_errors_and_the_server_stays_up() {
    let llm = ScriptedLlm::with_handler(model).await;
    let options = ServerOptions {
        max_body_bytes: 4096,
        ..ServerOptions::default()
    };
    let server = Server::start_with(Some(llm.base_url()), options, |_| {}).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let raw = http()
        .post(&url)
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let body: Value = raw.json().await.unwrap();
    assert!(error_message(&body).contains("not valid JSON"), "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    for (request, expected) in [
        (
            json!({"messages": [], "memory_tpo_k": 3}),
            "unknown field \"memory_tpo_k\"",
        ),
        (json!({"model": "m"}), "\"messages\""),
        (
            json!({"messages": [], "memory_id": "../../etc/passwd"}),
            "memory_id",
        ),
        (
            json!({"messages": [], "memory_id": "a\nb"}),
            "control character",
        ),
        (json!({"messages": [], "memory_top_k": "all"}), "integer"),
    ] {
        let (status, body) = post(&url, request.clone()).await;
        assert_eq!(status, 400, "{request}: {body}");
        assert!(error_message(&body).contains(expected), "{request}: {body}");
    }

    let huge = json!({"messages": [{"role": "user", "content": "x".repeat(10_000)}]});
    let (status, body) = post(&url, huge).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        error_message(&body).contains("larger than 4096 bytes"),
        "{body}"
    );

    let (status, body) = post(
        &format!("{}/v1/memories", server.url),
        json!({"content": "x", "colour": 1}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error_message(&body).contains("unknown field `colour`"),
        "{body}"
    );
    for bad_id in ["not-a-uuid", "..%2F..%2Fetc", "%00"] {
        let response = http()
            .get(format!("{}/v1/memories/{bad_id}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad_id}");
    }

    // Still serving.
    let (status, _) = post(&url, chat("Still there?")).await;
    assert_eq!(status, 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_is_down_slow_or_failing_is_a_clear_gateway_error() {
    let llm = ScriptedLlm::start().await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);

    llm.set_handler(|_: &ChatRequest| Reply::status(500, "upstream exploded"));
    let (status, body) = post(&url, chat("hello")).await;
    assert_eq!(status, 502, "{body}");
    assert!(error_message(&body).contains("500"), "{body}");
    assert_eq!(body["error"]["type"], "upstream_error");

    llm.set_handler(|_: &ChatRequest| Reply::status(400, "no such model"));
    let (status, body) = post(&url, chat("hello")).await;
    assert_eq!(
        status, 400,
        "the upstream's refusal is the caller's: {body}"
    );

    llm.set_handler(|_: &ChatRequest| Reply::Hang);
    let (status, body) = post(&url, chat("hello")).await;
    assert_eq!(status, 504, "{body}");

    let (_store, root) = server.shutdown().await;
    drop(llm);
    // A chat the upstream did not take stores nothing (the client's retry stores it once).
    assert!(
        !root.join("entries/c1").exists(),
        "no turn, no conversation folder"
    );

    let dead = Server::start(Some("http://127.0.0.1:9/v1".into())).await;
    let (status, body) = post(&format!("{}/v1/chat/completions", dead.url), chat("hi")).await;
    assert_eq!(status, 502, "{body}");
    assert!(error_message(&body).contains("127.0.0.1:9"), "{body}");
    let health: Value = http()
        .get(format!("{}/health", dead.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "degraded");
    assert_eq!(health["upstream"]["reachable"], false);
    dead.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_memory_api_adds_searches_lists_gets_deletes_and_shows_history() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let base = format!("{}/v1/memories", server.url);
    let (status, added) = post(
        &base,
        json!({"texts": ["I keep bees.", "My bike is red.", "I live in Ghent."], "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["added"].as_array().unwrap().len(), 3);
    assert!(added["commit"].is_string());

    let (status, found) = post(
        &format!("{base}/search"),
        json!({"query": "what colour is my bicycle", "conversation_id": "c1", "top_k": 1}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(found["hits"][0]["content"], "My bike is red.");
    assert!(found["hits"][0]["scores"]["fused"].is_number());

    let page: Value = http()
        .get(format!("{base}?conversation_id=c1&limit=2&offset=1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["total"], 3);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);

    let id = found["hits"][0]["id"].as_str().unwrap().to_owned();
    let one: Value = http()
        .get(format!("{base}/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["content"], "My bike is red.");
    assert!(Path::new(one["path"].as_str().unwrap()).starts_with("entries/c1/facts"));

    let deleted = http().delete(format!("{base}/{id}")).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    let gone = http().get(format!("{base}/{id}")).send().await.unwrap();
    assert_eq!(gone.status(), 404);
    let again = http().delete(format!("{base}/{id}")).send().await.unwrap();
    assert_eq!(again.status(), 404);

    let history: Value = http()
        .get(format!("{base}/{id}/history"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "added, then deleted: {history}");
    assert!(versions[0]["content"]
        .as_str()
        .unwrap()
        .contains("deleted_at"));

    let spec: Value = http()
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    let (_store, root) = server.shutdown().await;
    assert!(root.join("entries/c1/deleted/facts").is_dir());
}

/// `mnemo_embedding_seconds_total` as `/metrics` reports it now.
async fn embedding_seconds(server: &Server) -> f64 {
    let metrics = server.metrics().await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("mnemo_embedding_seconds_total "))
        .unwrap_or_else(|| panic!("no embedding time in:\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_the_time_the_embedding_model_runs() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let base = format!("{}/v1/memories", server.url);
    let (status, _) = post(
        &base,
        json!({"texts": ["I keep bees."], "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201);
    let before = embedding_seconds(&server).await;
    assert!(before > 0.0, "the added memory was embedded");
    let search = json!({"query": "which insects do I keep", "conversation_id": "c1"});
    assert_eq!(post(&format!("{base}/search"), search.clone()).await.0, 200);
    let after = embedding_seconds(&server).await;
    assert!(
        after > before,
        "a new query runs the model: {before} -> {after}"
    );
    // The same query again is answered from the vectors embedded lately.
    assert_eq!(post(&format!("{base}/search"), search).await.0, 200);
    assert_eq!(embedding_seconds(&server).await, after);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_search_as_of_a_revision_answers_from_that_commits_memories() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let base = format!("{}/v1/memories", server.url);
    let (status, added) = post(
        &base,
        json!({"texts": ["The spare key hides under the blue flowerpot.", "I live in Ghent."], "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    let commit = added["commit"].as_str().unwrap().to_owned();
    let key = added["added"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().unwrap().contains("spare key"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deleted = http().delete(format!("{base}/{key}")).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    let query = json!({"query": "where is the spare key", "conversation_id": "c1", "top_k": 3});

    let (status, now) = post(&format!("{base}/search"), query.clone()).await;
    assert_eq!(status, 200, "{now}");
    assert!(now.get("as_of").is_none(), "{now}");
    assert!(now["hits"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["id"] != key.as_str()));

    for rev in [commit.as_str(), "HEAD~1"] {
        let (status, then) = post(&format!("{base}/search?as_of={rev}"), query.clone()).await;
        assert_eq!(status, 200, "{rev}: {then}");
        assert!(
            then["as_of"]["id"].as_str().unwrap().starts_with(&commit),
            "{then}"
        );
        assert_eq!(then["as_of"]["short_id"], commit.as_str());
        assert!(then["as_of"]["message"]
            .as_str()
            .unwrap()
            .starts_with("mnemo: c1"));
        assert!(then["as_of"]["time"].is_string());
        assert_eq!(then["hits"][0]["id"], key.as_str(), "{then}");
        let path = then["hits"][0]["path"].as_str().unwrap();
        assert!(path.starts_with("entries/c1/facts/"), "{path}");
    }

    let (status, body) = post(&format!("{base}/search?as_of=no-such-rev"), query.clone()).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["type"], "not_found");
    assert!(
        error_message(&body).contains("no revision \"no-such-rev\""),
        "{body}"
    );
    assert!(!error_message(&body).contains(&server.root.display().to_string()));
    let (status, body) = post(&format!("{base}/search?asof=HEAD"), query.clone()).await;
    assert_eq!(status, 400, "a misspelt parameter is refused: {body}");

    let spec: Value = http()
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let search = &spec["paths"]["/v1/memories/search"]["post"];
    assert_eq!(search["parameters"][0]["name"], "as_of", "{search}");
    assert!(search["responses"]["404"].is_object(), "{search}");
    assert!(
        spec["components"]["schemas"]["SearchResult"]["properties"]["as_of"].is_object(),
        "documented"
    );
    server.shutdown().await;

    let unversioned =
        Server::start_with(Some(llm.base_url()), ServerOptions::default(), |config| {
            config.enable_git_versioning = false;
        })
        .await;
    let (status, body) = post(
        &format!("{}/v1/memories/search?as_of=HEAD", unversioned.url),
        query,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(error_message(&body).contains("git is off"), "{body}");
    unversioned.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_finishes_queued_memory_writes() {
    let llm = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some("facts") => Reply::delay(
            Duration::from_millis(300),
            Reply::Json(json!({"facts": ["The user has a cat named Miso."]})),
        ),
        Some("summary") => Reply::Json(json!({"summary": "Cat owner."})),
        Some(_) => Reply::Json(json!({"operations": []})),
        None => Reply::text("Nice!"),
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let (status, _) = post(
        &format!("{}/v1/chat/completions", server.url),
        chat("I have a cat named Miso."),
    )
    .await;
    assert_eq!(status, 200);
    let (_store, root) = server.shutdown().await;
    let facts: Vec<_> = std::fs::read_dir(root.join("entries/c1/facts"))
        .expect("the fact was written before shutdown returned")
        .collect();
    assert_eq!(facts.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicts_are_listed_and_resolved_over_rest() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    for text in ["I live in Ghent.", "I keep bees.", "I live in Leuven."] {
        let (status, body) = post(
            &format!("{}/v1/memories", server.url),
            json!({"texts": [text], "conversation_id": "home"}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let list = format!("{}/v1/conversations/home/conflicts", server.url);
    let open: Value = http()
        .get(&list)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(open["conversation_id"], "home");
    let conflicts = open["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{open}");
    assert_eq!(conflicts[0]["earlier"]["content"], "I live in Ghent.");
    assert_eq!(conflicts[0]["later"]["content"], "I live in Leuven.");
    assert_eq!(
        conflicts[0]["earlier"]["conflicts_with"],
        conflicts[0]["later"]["id"]
    );
    let (earlier, later) = (
        conflicts[0]["earlier"]["id"].clone(),
        conflicts[0]["later"]["id"].clone(),
    );
    let resolve = format!("{list}/resolve");
    // A resolution that is none, an unknown field, a pair that is no conflict: refused,
    // precisely, and nothing changes.
    let (status, body) = post(
        &resolve,
        json!({"earlier": earlier, "later": later, "resolution": "keep_newest"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error_message(&body).contains("unknown variant `keep_newest`"),
        "{body}"
    );
    let (status, body) = post(
        &resolve,
        json!({"earlier": earlier, "later": later, "resolution": "both_hold", "why": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(
        &resolve,
        json!({"earlier": later, "later": earlier, "resolution": "keep_later"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        error_message(&body).contains("no conflict between"),
        "{body}"
    );

    let (status, body) = post(
        &resolve,
        json!({"earlier": earlier, "later": later, "resolution": "both_hold"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resolution"], "both_hold");
    assert!(body["retired"].is_null(), "{body}");
    assert_eq!(body["kept"][0]["compatible_with"][0], later, "{body}");
    let open: Value = http()
        .get(&list)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(open["conflicts"], json!([]), "{open}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_openapi_document_describes_exactly_the_routes_served() {
    // No upstream: a request no route takes falls through to the pass-through, which
    // answers 404 "no route for ...".
    let server = Server::start(None).await;
    let spec: Value = http()
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path} documents no response"
            );
            documented.push((method.clone(), path.clone()));
        }
    }
    documented.sort();
    let mut served: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    served.sort();
    assert_eq!(documented, served);

    // Each documented route is taken by a handler of mnemo's, not the pass-through.
    let id = mnemo_core::MemoryId::random().to_string();
    for (method, path) in &documented {
        let path = path
            .replace("{id}", &id)
            .replace("{agent}", "a")
            .replace("{call_id}", "c");
        let url = format!("{}{}", server.url, path);
        let request = match method.as_str() {
            "get" => http().get(&url),
            "delete" => http().delete(&url),
            "patch" => http().patch(&url).json(&json!({})),
            _ => http().post(&url).json(&json!({})),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_ne!(status, 405, "{method} {path}");
        assert!(
            !error_message(&body).starts_with("no route for"),
            "{method} {path} fell through: {body}"
        );
    }

    // Every schema a document points at exists.
    let text = spec.to_string();
    for piece in text.split("#/components/schemas/").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        assert!(
            spec["components"]["schemas"][&name].is_object(),
            "{name} is referenced but not defined"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_answering_429_is_a_502_that_says_so_after_retries() {
    let llm = ScriptedLlm::with_handler(|_: &ChatRequest| Reply::status(429, "slow down")).await;
    let server = Server::start(Some(llm.base_url())).await;
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), chat("hi")).await;
    assert_eq!(status, 502, "a rate limit is the gateway's failure: {body}");
    assert_eq!(body["error"]["type"], "upstream_error");
    assert!(error_message(&body).contains("429"), "{body}");
    assert!(
        llm.chat_calls() > 1,
        "429 is retried before giving up: {} call(s)",
        llm.chat_calls()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_mid_stream_drops_the_upstream_connection() {
    let llm = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some(_) => Reply::Json(json!({"facts": [], "operations": [], "summary": ""})),
        None => Reply::Chunks(
            (0..50)
                .map(|i| (Duration::from_millis(100), format!("word{i} ")))
                .collect(),
        ),
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let (status, _) = post(
        &format!("{}/v1/memories", server.url),
        json!({"content": "The user's favourite colour is teal.", "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201);
    let mut request = chat("Tell me a long story about my favourite colour.");
    request["stream"] = json!(true);
    request["memory_top_k"] = json!(1);
    let response = http()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-mnemo-memory-hits"],
        "1",
        "a stream says how many memories it was given"
    );
    let mut body = response.bytes_stream();
    use futures_util::StreamExt;
    let first = body.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop(body);

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let ended = loop {
        if let Some(end) = llm.streams().into_iter().next() {
            break end;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the upstream was still streaming after the client left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !ended.completed(),
        "mnemo stopped reading, so the upstream stopped: {ended:?}"
    );
    assert!(ended.events_sent < 20, "{ended:?}");
    server.shutdown().await;
}

/// A hand-written memory file of conversation `c1`.
fn hand_written(root: &Path, name: &str, front_matter: &str, content: &str) {
    let facts = root.join("entries/c1/facts");
    std::fs::create_dir_all(&facts).unwrap();
    std::fs::write(
        facts.join(name),
        format!("---\n{front_matter}\n---\n{content}\n"),
    )
    .unwrap();
}

fn hit_contents(answer: &Value) -> Vec<String> {
    answer["memory_hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_about_nothing_stored_gets_no_memories_and_is_told_so() {
    // Not the echoing model: its answer would repeat the injected block, be stored as the
    // assistant's turn, and come back as a memory of the next question.
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        mnemo_scripted_llm::learns_nothing(request).unwrap_or_else(|| Reply::text("Noted."))
    })
    .await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |config| {
        let root = &config.memory_path;
        hand_written(
            root,
            "tomatoes.md",
            "",
            "The user grows tomatoes on the balcony.",
        );
        hand_written(root, "violin.md", "", "The user's sister teaches violin.");
    })
    .await;
    let url = format!("{}/v1/chat/completions", server.url);
    // The write path learns from each turn and calls the same upstream, so the prompt a
    // question went with is found by the question, not by arriving last.
    let last_prompt = |question: &str| {
        llm.forwarded_chats()
            .iter()
            .rev()
            .filter_map(|chat| chat["messages"].as_array()?.last()?["content"].as_str())
            .find(|content| content.contains(question))
            .unwrap_or_else(|| panic!("no prompt asked {question:?}"))
            .to_owned()
    };
    let train = "Which train goes to the airport after midnight?";
    let unrelated = chat(train);
    let (status, answer) = post(&url, unrelated.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(hit_contents(&answer).is_empty(), "{answer}");
    let sent = last_prompt(train);
    assert!(sent.contains(mnemo_engine::NOTHING_RELEVANT), "{sent}");
    assert!(!sent.contains("tomatoes"), "{sent}");
    // The request may lower the floor; a related message passes it.
    let mut unfloored = unrelated;
    unfloored["memory_relevance_floor"] = json!(0);
    let (_, answer) = post(&url, unfloored).await;
    assert!(!hit_contents(&answer).is_empty(), "{answer}");
    assert!(!last_prompt(train).contains(mnemo_engine::NOTHING_RELEVANT));
    let vegetables = "What vegetables do I grow?";
    let (_, answer) = post(&url, chat(vegetables)).await;
    assert!(
        hit_contents(&answer).contains(&"The user grows tomatoes on the balcony.".to_owned()),
        "{answer}"
    );
    let sent = last_prompt(vegetables);
    assert!(
        sent.contains("tomatoes") && !sent.contains(mnemo_engine::NOTHING_RELEVANT),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn filter_threshold_and_recency_fields_shape_what_the_proxy_injects() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |config| {
        let root = &config.memory_path;
        let old = "created_at: 2020-01-01T00:00:00Z";
        hand_written(
            root,
            "ramen.md",
            &format!("{old}\nmetadata:\n  topic: food"),
            "The user eats ramen for lunch.",
        );
        hand_written(
            root,
            "salad.md",
            "metadata:\n  topic: food",
            "The user eats salad for lunch now.",
        );
        hand_written(
            root,
            "laptop.md",
            &format!("{old}\nmetadata:\n  topic: work"),
            "The user eats lunch at the laptop.",
        );
    })
    .await;
    let url = format!("{}/v1/chat/completions", server.url);
    let ask = |extra: Value| {
        let mut request = chat("What does the user eat for lunch now?");
        request["memory_top_k"] = json!(3);
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        request
    };

    let (status, all) = post(&url, ask(json!({}))).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(hit_contents(&all).len(), 3);

    let (_, food) = post(&url, ask(json!({"memory_filter": {"topic": "food"}}))).await;
    let mut got = hit_contents(&food);
    got.sort();
    assert_eq!(
        got,
        [
            "The user eats ramen for lunch.",
            "The user eats salad for lunch now."
        ]
    );
    let injected =
        llm.requests().last().and_then(|r| r.body.clone()).unwrap()["messages"].to_string();
    assert!(
        !injected.contains("laptop"),
        "filtered out of the prompt too: {injected}"
    );

    // A threshold between the best fact's relevance and the next one's keeps the best alone.
    // (Facts only: each chat stores its question as a turn, which the next one would find.)
    let facts = |threshold: Option<f64>| {
        let mut extra = json!({"memory_filter": {"role": "memory"}});
        if let Some(threshold) = threshold {
            extra["memory_score_threshold"] = json!(threshold);
        }
        ask(extra)
    };
    // Each fact's relevance (the stage the threshold reads), from the search endpoint.
    let (status, ranked) = post(
        &format!("{}/v1/memories/search", server.url),
        json!({"query": "What does the user eat for lunch now?", "conversation_id": "c1",
            "top_k": 3, "filter": {"role": "memory"}}),
    )
    .await;
    assert_eq!(status, 200, "{ranked}");
    let mut relevance: Vec<(f64, String)> = ranked["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("{ranked}"))
        .iter()
        .map(|h| {
            let fused = h["scores"]["fused"].as_f64().unwrap();
            (fused, h["content"].as_str().unwrap().to_owned())
        })
        .collect();
    relevance.sort_by(|a, b| b.0.total_cmp(&a.0));
    assert!(
        relevance.len() == 3 && relevance[0].0 > relevance[1].0,
        "{relevance:?}"
    );
    let threshold = (relevance[0].0 + relevance[1].0) / 2.0;
    let (_, strict) = post(&url, facts(Some(threshold))).await;
    assert_eq!(
        hit_contents(&strict),
        [relevance[0].1.clone()],
        "only the best match clears {threshold}: {relevance:?}"
    );

    // The query asks about now: with all the weight on recency the newest fact leads. (Facts
    // only: each chat above stored its own question as a turn, newer than any fact.)
    let (_, newest) = post(
        &url,
        ask(json!({"memory_recency_weight": 1.0, "memory_filter": {"role": "memory"}})),
    )
    .await;
    assert_eq!(
        hit_contents(&newest)[0],
        "The user eats salad for lunch now."
    );
    let recency: Vec<f64> = newest["memory_hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(
        recency[0] > 0.9 && recency[1] < 0.1,
        "scores are recency alone: {recency:?}"
    );

    let (status, bad) = post(
        &url,
        ask(json!({"memory_filter": {"topic": {"around": 1}}})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error_message(&bad).contains("memory_filter"), "{bad}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_name_becomes_the_speaker_and_lifts_their_turns() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    for (name, text) in [
        ("Melanie", "I adopted a pet kitten from the shelter."),
        ("Caroline", "I adopted a pet puppy from the shelter."),
    ] {
        let request = json!({
            "model": "m", "memory_id": "c1", "memory_top_k": 0,
            "messages": [{"role": "user", "name": name, "content": text}]
        });
        let (status, body) = post(&url, request).await;
        assert_eq!(status, 200, "{body}");
    }
    // Turns are indexed in the background: wait until both are searchable.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, found) = post(
            &format!("{}/v1/memories/search", server.url),
            json!({"query": "adopted a pet from the shelter", "conversation_id": "c1", "top_k": 10}),
        )
        .await;
        let speakers = found["hits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["metadata"]["speaker"].is_string())
            .count();
        if speakers == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{found}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let question = json!({
        "model": "m", "memory_id": "c1", "memory_top_k": 1,
        "messages": [{"role": "user", "content": "What pet did Caroline adopt from the shelter?"}]
    });
    let (status, answer) = post(&url, question).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        hit_contents(&answer),
        ["I adopted a pet puppy from the shelter."],
        "{answer}"
    );
    let page: Value = http()
        .get(format!(
            "{}/v1/memories?conversation_id=c1&role=user",
            server.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let speakers: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["metadata"]["speaker"].as_str())
        .collect();
    assert_eq!(speakers, ["Melanie", "Caroline"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn history_with_git_off_says_why_there_is_none() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |config| {
        config.enable_git_versioning = false;
    })
    .await;
    let (status, added) = post(
        &format!("{}/v1/memories", server.url),
        json!({"content": "The user keeps bees.", "conversation_id": "c1"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["commit"], Value::Null);
    let id = added["added"][0]["id"].as_str().unwrap();
    let response = http()
        .get(format!("{}/v1/memories/{id}/history", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(
        error_message(&body).contains("enable_git_versioning = false"),
        "{body}"
    );
    let (_store, root) = server.shutdown().await;
    assert!(!root.join(".git").exists());
}

// ---- Context governance -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn strategies_merge_request_over_conversation_over_agent_field_by_field() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |config| {
        config.context = serde_json::from_value(json!({
            "agents": {"coder": {"mode": "compact", "compact_keep": 1, "token_soft_budget": 10}}
        }))
        .unwrap();
    })
    .await;
    let chat_url = format!("{}/v1/chat/completions", server.url);
    let strategy_url = format!("{}/v1/conversations/c1/memory", server.url);
    let request = |strategy: Option<Value>| {
        let mut body = json!({"model": "m", "memory_id": "c1", "memory_top_k": 0,
            "memory_agent": "coder", "messages": tool_history(4, 3000)});
        if let Some(strategy) = strategy {
            body["memory_strategy"] = strategy;
        }
        body
    };

    // The agent alone: compact, keeping one turn.
    let (status, body) = post(&chat_url, request(None)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["memory_context"]["mode"], "compact", "{body}");
    let outputs = tool_outputs(&last_forwarded(&llm));
    assert_eq!(
        outputs[0],
        "⟦removed: tool output for read_file (call_id=call_0); reason=context_compaction⟧"
    );
    assert_eq!(outputs[3].len(), 3000, "the kept turn is untouched");

    // The conversation's stored mode over the agent's; the agent's keep and trigger still hold.
    let (status, stored) = patch(&strategy_url, json!({"mode": "trim"})).await;
    assert_eq!(status, 200, "{stored}");
    let (_, body) = post(&chat_url, request(None)).await;
    assert_eq!(body["memory_context"]["mode"], "trim");
    assert_eq!(body["memory_context"]["trimmed"], 3, "{body}");
    let outputs = tool_outputs(&last_forwarded(&llm));
    assert!(
        outputs[0].starts_with(&"0".repeat(2000)),
        "trimmed to the default 2000"
    );
    assert!(
        outputs[0].ends_with("[…truncated, 3000 chars total]"),
        "{}",
        outputs[0]
    );

    // The request's own field over both.
    let (_, body) = post(
        &chat_url,
        request(Some(json!({"tool_output_trim_chars": 50}))),
    )
    .await;
    assert_eq!(body["memory_context"]["mode"], "trim");
    let outputs = tool_outputs(&last_forwarded(&llm));
    assert!(outputs[1].starts_with(&"1".repeat(50)) && !outputs[1].starts_with(&"1".repeat(51)));

    // A field removed from the conversation falls back to the agent's again.
    let (status, stored) = patch(&strategy_url, json!({"mode": null})).await;
    assert_eq!((status, &stored["strategy"]), (200, &json!({})));
    let (_, body) = post(&chat_url, request(None)).await;
    assert_eq!(body["memory_context"]["mode"], "compact", "{body}");

    // Governance counted in /metrics.
    let metrics = server.metrics().await;
    for line in [
        "memory_compaction_items_total{stage=\"compact\"} 6",
        "memory_compaction_items_total{stage=\"trim\"} 6",
        "memory_tokens_before_after_count{phase=\"before\"} 4",
        "mnemo_background_queue_depth",
        "mnemo_request_duration_seconds_count{method=\"POST\",route=\"/v1/chat/completions\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_strategy_is_a_versioned_file_and_bad_ones_are_refused() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/conversations/trip/memory", server.url);
    let (status, body) = patch(&url, json!({"mode": "auto", "keep": {"messages": 4}})).await;
    assert_eq!(status, 200, "{body}");
    let file = server.root.join("conversations/trip/strategy.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    assert!(yaml.contains("mode: auto"), "{yaml}");
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "-1"])
        .current_dir(&server.root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "mnemo: strategy of conversation trip"
    );

    // Invalid patches: a 400 naming the field, and the file unchanged.
    for (patch_body, expected) in [
        (json!({"mdoe": "auto"}), "mdoe"),
        (
            json!({"compress_threshold": 1.5}),
            "compress_threshold must be between",
        ),
        (json!({"keep": {"fraction": -1}}), "keep.fraction"),
        (json!(["mode"]), "must be a JSON object"),
    ] {
        let (status, body) = patch(&url, patch_body.clone()).await;
        assert_eq!(status, 400, "{patch_body}: {body}");
        assert!(
            error_message(&body).contains(expected),
            "{patch_body}: {body}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), yaml);
    let (status, body) =
        post_get(&format!("{}/v1/conversations/..%2Fetc/memory", server.url)).await;
    assert_eq!(status, 400, "{body}");

    // A hand edit is read back; a broken one makes chats fail with the file named, not
    // silently ignored.
    std::fs::write(&file, "mode: trim\ntool_output_trim_chars: 10\n").unwrap();
    let (_, body) = post_get(&url).await;
    assert_eq!(
        body["strategy"],
        json!({"mode": "trim", "tool_output_trim_chars": 10})
    );
    std::fs::write(&file, "mode: [unclosed\n").unwrap();
    let mut request = chat("hello");
    request["memory_id"] = json!("trip");
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), request).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        error_message(&body).contains("conversations/trip/strategy.yaml"),
        "{body}"
    );
    assert_eq!(llm.chat_calls(), 0, "nothing went upstream");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_strategies_and_oversized_requests_never_reach_the_upstream() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    for (strategy, expected) in [
        (
            json!({"mdoe": "auto"}),
            "memory_strategy: mdoe: unknown field",
        ),
        (
            json!({"mode": "shrink"}),
            "memory_strategy: mode: unknown variant `shrink`",
        ),
        (
            json!({"token_remaining_pct": 2}),
            "memory_strategy: token_remaining_pct must be between 0 and 1",
        ),
        (
            json!({"compact_keep": "two"}),
            "memory_strategy: compact_keep: invalid type",
        ),
        (
            json!("auto"),
            "memory_strategy: a strategy is an object of fields",
        ),
    ] {
        let mut request = chat("hi");
        request["memory_strategy"] = strategy.clone();
        let (status, body) = post(&url, request).await;
        assert_eq!(status, 400, "{strategy}: {body}");
        assert!(
            error_message(&body).contains(expected),
            "{strategy}: {body}"
        );
    }
    let mut request = chat("hi");
    request["memory_agent"] = json!("../x");
    let (status, body) = post(&url, request).await;
    assert!(
        status == 400 && error_message(&body).contains("memory_agent"),
        "{body}"
    );

    let mut request = chat(&"word ".repeat(4000));
    request["memory_strategy"] = json!({"context_window_tokens": 2000});
    let (status, body) = post(&url, request).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let message = error_message(&body);
    assert!(
        message.contains("512 reserved for the answer")
            && message.contains("context window is 2000 tokens"),
        "{message}"
    );
    assert_eq!(llm.chat_calls(), 0, "nothing went upstream");
    let turns = server.root.join("entries/c1/turns/user");
    assert!(!turns.exists(), "a refused request stores no turn");
}

#[tokio::test(flavor = "multi_thread")]
async fn summaries_are_reused_for_a_resent_history_and_extended_as_it_grows() {
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        if request
            .system_prompt()
            .is_some_and(|s| s.starts_with("You are a conversation summariser"))
        {
            let user = request.last_user_message().unwrap_or_default();
            let carried = if user.contains("carry it forward") {
                " (extended)"
            } else {
                ""
            };
            return Reply::text(format!("SUMMARY {}{carried}", request.call));
        }
        model(request)
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let strategy = json!({"mode": "summarize", "max_history_messages": 6});
    let request = |messages: Vec<Value>| {
        json!({"model": "m", "memory_id": "c1", "memory_top_k": 0,
            "memory_strategy": strategy, "messages": messages})
    };
    let summary_calls = || {
        llm.requests()
            .iter()
            .filter(|r| {
                r.body.as_ref().is_some_and(|b| {
                    b["messages"][0]["content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("You are a conversation summariser"))
                })
            })
            .count()
    };

    let mut history = tool_history(4, 100);
    history.push(json!({"role": "assistant", "content": "Done."}));
    history.push(json!({"role": "user", "content": "What next?"}));
    let (status, body) = post(&url, request(history.clone())).await;
    assert_eq!(status, 200, "{body}");
    let context = &body["memory_context"];
    assert_eq!(context["summary"], "new", "{context}");
    let sent = last_forwarded(&llm);
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system", "the head stays");
    assert_eq!(messages[1]["role"], "user");
    let summarised = context["summarised_messages"].as_u64().unwrap();
    assert_eq!(
        messages[1]["content"].as_str().unwrap(),
        format!("[Summary of {summarised} earlier messages]\nSUMMARY 0")
    );
    assert_eq!(
        messages.last().unwrap()["content"],
        "What next?",
        "the current turn stays"
    );
    assert_eq!(summary_calls(), 1);

    // The same history again: the stored summary, no new call.
    let (_, body) = post(&url, request(history.clone())).await;
    assert_eq!(body["memory_context"]["summary"], "reused");
    assert_eq!(summary_calls(), 1);

    // Grown by an exchange: with the kept summary the history is under the trigger again
    // (head | summary | 3 messages), so it goes as it is, with no call.
    history.push(json!({"role": "assistant", "content": "Next, the tests."}));
    history.push(json!({"role": "user", "content": "Run them."}));
    let (_, body) = post(&url, request(history.clone())).await;
    assert_eq!(body["memory_context"]["summary"], "reused", "{body}");
    assert_eq!(summary_calls(), 1);

    // Grown past the trigger: the earlier summary carried forward over the new messages only.
    for step in ["Fix the parser.", "Now the lexer.", "And the docs."] {
        history.push(json!({"role": "assistant", "content": "Done."}));
        history.push(json!({"role": "user", "content": step}));
    }
    let (_, body) = post(&url, request(history.clone())).await;
    assert_eq!(body["memory_context"]["summary"], "extended", "{body}");
    assert_eq!(summary_calls(), 2);
    let sent = last_forwarded(&llm);
    assert!(sent["messages"][1]["content"]
        .as_str()
        .unwrap()
        .ends_with("(extended)"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_summary_leaves_the_static_marker_and_the_chat_goes_on() {
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        if request
            .system_prompt()
            .is_some_and(|s| s.starts_with("You are a conversation summariser"))
        {
            return Reply::status(500, "summariser down");
        }
        model(request)
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let mut history = tool_history(4, 100);
    history.push(json!({"role": "assistant", "content": "Done."}));
    history.push(json!({"role": "user", "content": "What next?"}));
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.url),
        json!({"model": "m", "memory_id": "c1", "memory_top_k": 0, "messages": history,
            "memory_strategy": {"mode": "summarize", "max_history_messages": 6}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["memory_context"]["summary"], "static_marker");
    assert!(body["memory_context"]["summary_error"]
        .as_str()
        .unwrap()
        .contains("500"));
    let sent = last_forwarded(&llm);
    let marker = sent["messages"][1]["content"].as_str().unwrap();
    assert!(
        marker.starts_with("[Earlier conversation trimmed — ")
            && marker.ends_with(" messages removed to stay within context budget]"),
        "{marker}"
    );
    // The client's history is the client's: the user's turn is stored whole.
    let turns = server.root.join("entries/c1/turns/user");
    assert_eq!(std::fs::read_dir(turns).unwrap().count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_reports_governance_in_a_header() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let response = http()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(
            &json!({"model": "m", "memory_id": "c1", "memory_top_k": 0, "stream": true,
            "memory_strategy": {"mode": "trim", "token_soft_budget": 10, "compact_keep": 1,
                "tool_output_trim_chars": 10},
            "messages": tool_history(3, 500)}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header: Value = serde_json::from_str(
        response.headers()["x-mnemo-memory-context"]
            .to_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["trimmed"], 2, "{header}");
    let tokens = |key: &str| {
        header[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key}: {header}"))
    };
    assert!(tokens("tokens_after") < tokens("tokens_before"), "{header}");
    let _ = response.text().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_waiting_still_gets_its_turn_kept() {
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| match request.schema_name() {
        Some(_) => model(request),
        None => Reply::delay(Duration::from_millis(700), Reply::text("A late answer.")),
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let left = impatient
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"model": "m", "memory_id": "gone",
            "messages": [{"role": "user", "content": "Answer slowly."}]}))
        .send()
        .await;
    assert!(left.is_err(), "the client gave up before the answer");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, page) = post_get(&format!(
            "{}/v1/memories?conversation_id=gone&role=assistant",
            server.url
        ))
        .await;
        if page["items"][0]["content"] == "A late answer." {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the answer was lost with the client: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_upstream_answer_is_refused_or_cut_and_stored_at_a_memory_s_size() {
    let huge = "word ".repeat(4 << 20); // 20 MiB
    let llm = ScriptedLlm::with_handler(move |request: &ChatRequest| match request.schema_name() {
        Some(_) => model(request),
        None if request.body["stream"] == true => Reply::Chunks(
            (0..20)
                .map(|_| (Duration::ZERO, huge[..1 << 20].to_owned()))
                .collect(),
        ),
        None => Reply::text(huge.clone()),
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);

    let (status, body) = post(
        &url,
        json!({"model": "m", "memory_id": "big",
        "messages": [{"role": "user", "content": "Say a lot."}]}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        error_message(&body).contains("mnemo takes at most"),
        "{body}"
    );

    let streamed = http()
        .post(&url)
        .json(&json!({"model": "m", "memory_id": "big", "stream": true,
            "messages": [{"role": "user", "content": "Stream a lot."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    let mut body = streamed.bytes_stream();
    let mut received = 0;
    let ended = loop {
        use futures_util::StreamExt;
        match body.next().await {
            Some(Ok(chunk)) => received += chunk.len(),
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(
        ended.is_some(),
        "a stream over the limit ends with an error, not as if whole: {received} bytes"
    );
    assert!(
        received > mnemo_llm::MAX_ANSWER_BYTES / 2 && received <= mnemo_llm::MAX_ANSWER_BYTES,
        "passed on up to the limit, cut there: {received} bytes"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let stored = loop {
        let (_, page) = post_get(&format!(
            "{}/v1/memories?conversation_id=big&role=assistant",
            server.url
        ))
        .await;
        if let Some(content) = page["items"][0]["content"].as_str() {
            break content.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no answer stored: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        stored.len() <= mnemo_core::MAX_MEMORY_BYTES && stored.contains("[cut by mnemo"),
        "{} bytes stored",
        stored.len()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_reports_a_failing_commit_until_one_succeeds() {
    let server = Server::start(None).await;
    let health = format!("{}/health", server.url);
    let (_, body) = post_get(&health).await;
    assert_eq!(body["versioning"], json!({"enabled": true, "error": null}));

    // Another git process holds the index: the memory is kept, the commit fails, and says so.
    let lock = server.root.join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let memories = format!("{}/v1/memories", server.url);
    let (status, added) = post(&memories, json!({"content": "The kayak is blue."})).await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["commit"], Value::Null);
    let (_, body) = post_get(&health).await;
    let error = body["versioning"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("locked"), "{body}");
    assert!(
        !error.contains(server.root.to_str().unwrap()),
        "no server path: {error}"
    );

    std::fs::remove_file(&lock).unwrap();
    let (status, added) = post(&memories, json!({"content": "The canoe is red."})).await;
    assert_eq!(status, 201);
    assert!(added["commit"].is_string(), "{added}");
    let (_, body) = post_get(&health).await;
    assert_eq!(body["versioning"]["error"], Value::Null);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_probes_the_upstream_at_most_once_per_5_s() {
    let llm = ScriptedLlm::start().await;
    let server = Server::start(Some(llm.base_url())).await;
    let health = format!("{}/health", server.url);
    let probes = || {
        llm.requests()
            .iter()
            .filter(|r| r.path == "/v1/models")
            .count()
    };
    // A flood, as a monitor gone wrong or anyone without a token could send: at once, then
    // one after another.
    let started = std::time::Instant::now();
    let burst = futures_util::future::join_all((0..20).map(|_| post_get(&health))).await;
    let mut answers = burst;
    for _ in 0..20 {
        answers.push(post_get(&health).await);
    }
    let elapsed = started.elapsed();
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["upstream"]["reachable"], true, "{body}");
    }
    // One probe answers for 5 s, so however slow this machine, 40 requests over `elapsed`
    // make at most one probe per 5 s begun.
    let allowed = 1 + (elapsed.as_secs() / 5) as usize;
    let made = probes();
    assert!(
        (1..=allowed).contains(&made),
        "{made} upstream probes for {} /health requests in {elapsed:?}",
        answers.len()
    );
    server.shutdown().await;
}
