//! Bearer tokens over real sockets: who may call at all (401), what each token may touch
//! (403), and that mnemo's token never reaches the upstream.
//!
//! Three tokens: `FULL` (`MNEMO_API_TOKEN`: everything), `ALICE` (conversations `alice` and
//! `team-*`, `global` read-only, agent `coder`) and `CAROL` (conversation `carol`, no
//! `global` at all).

use crate::support;

use mnemo_core::{ApiKey, GlobalAccess, ServerConfig, TokenConfig};
use mnemo_scripted_llm::ScriptedLlm;
use mnemo_server::{Auth, ServerOptions};
use reqwest::Method;
use serde_json::{json, Value};
use support::*;

const FULL: &str = "full-access-token-0001";
const ALICE: &str = "alice-token-0000000001";
const CAROL: &str = "carol-token-0000000001";

fn tokens() -> Auth {
    let config = ServerConfig {
        tokens: vec![
            TokenConfig {
                name: Some("alice".into()),
                token_env: Some("MNEMO_TOKEN_ALICE".into()),
                conversations: vec!["alice".into(), "team-*".into()],
                agents: vec!["coder".into()],
                ..TokenConfig::default()
            },
            TokenConfig {
                name: Some("carol".into()),
                token: Some(ApiKey(CAROL.into())),
                conversations: vec!["carol".into()],
                global: GlobalAccess::None,
                ..TokenConfig::default()
            },
        ],
    };
    Auth::from_config(&config, |var| match var {
        "MNEMO_API_TOKEN" => Some(FULL.into()),
        "MNEMO_TOKEN_ALICE" => Some(ALICE.into()),
        _ => None,
    })
    .unwrap()
}

async fn start(upstream: Option<String>) -> Server {
    let options = ServerOptions {
        auth: tokens(),
        ..ServerOptions::default()
    };
    Server::start_with(upstream, options, |_| {}).await
}

/// Sends a request with `token` (none when `None`); the status, the JSON body (null when
/// none) and the `WWW-Authenticate` header.
async fn send(
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value, Option<String>) {
    let mut request = http().request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        response.json().await.unwrap_or(Value::Null),
        challenge,
    )
}

async fn get_as(url: &str, token: &str) -> (u16, Value) {
    let (status, body, _) = send(Method::GET, url, Some(token), None).await;
    (status, body)
}

async fn post_as(url: &str, token: &str, body: Value) -> (u16, Value) {
    let (status, body, _) = send(Method::POST, url, Some(token), Some(body)).await;
    (status, body)
}

async fn delete_as(url: &str, token: &str) -> (u16, Value) {
    let (status, body, _) = send(Method::DELETE, url, Some(token), None).await;
    (status, body)
}

/// Remembers `content` in `conversation` with the full token; returns the memory's id.
async fn remember(server: &Server, conversation: &str, content: &str) -> String {
    let (status, added) = post_as(
        &format!("{}/v1/memories", server.url),
        FULL,
        json!({"content": content, "conversation_id": conversation}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    added["added"][0]["id"].as_str().unwrap().to_owned()
}

fn assert_forbidden(status: u16, body: &Value, expected: &str) {
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert!(error_message(body).contains(expected), "{body}");
}

fn conversations_of(hits: &Value) -> Vec<String> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["conversation_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every header of every request the upstream got, none of which may hold a mnemo token.
fn assert_no_token_went_upstream(llm: &ScriptedLlm) {
    let requests = llm.requests();
    assert!(!requests.is_empty(), "the upstream was called");
    for request in requests {
        for (name, value) in &request.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            for token in [FULL, ALICE, CAROL] {
                assert!(
                    !value.contains(token),
                    "{} {} carried a mnemo token in {name}",
                    request.method,
                    request.path
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_known_token_every_route_but_health_and_the_document_is_401() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let id = mnemo_core::MemoryId::random().to_string();
    for (method, path) in ROUTES {
        let path = path
            .replace("{id}", &id)
            .replace("{agent}", "coder")
            .replace("{call_id}", "c");
        let url = format!("{}{}", server.url, path);
        let method: Method = method.to_uppercase().parse().unwrap();
        let open = matches!(path.as_str(), "/health" | "/openapi.json");
        let (status, body, challenge) = send(method.clone(), &url, None, None).await;
        if open {
            assert_eq!(status, 200, "{method} {path} is open: {body}");
            continue;
        }
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");
        assert!(
            error_message(&body).contains("Authorization: Bearer <token>"),
            "{body}"
        );
        assert!(
            challenge
                .as_deref()
                .is_some_and(|c| c.starts_with("Bearer")),
            "{method} {path}: a 401 names its scheme: {challenge:?}"
        );
        let (status, body, _) =
            send(method.clone(), &url, Some("not-a-token-of-mnemo"), None).await;
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(
            error_message(&body).contains("not one mnemo knows"),
            "{body}"
        );
    }
    // `/health` asked the upstream whether it is up; nothing else reached it.
    assert!(
        llm.requests().iter().all(|r| r.path == "/v1/models"),
        "{:?}",
        llm.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    llm.clear_requests();
    // Another scheme is refused as such.
    let response = http()
        .get(format!("{}/v1/memories", server.url))
        .basic_auth("alice", Some(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // The pass-through and the chat endpoint too: nothing reached the upstream.
    for (method, path) in [
        (Method::GET, "/v1/models"),
        (Method::POST, "/v1/embeddings"),
    ] {
        let (status, body, _) = send(
            method,
            &format!("{}{path}", server.url),
            None,
            Some(json!({"input": "x"})),
        )
        .await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let (status, _, _) = send(
        Method::POST,
        &format!("{}/v1/chat/completions", server.url),
        None,
        Some(chat("Hello.")),
    )
    .await;
    assert_eq!(status, 401);
    assert!(llm.requests().is_empty(), "the upstream saw nothing");

    // Every token is accepted.
    for token in [FULL, ALICE, CAROL] {
        let (status, body) = get_as(&format!("{}/v1/models", server.url), token).await;
        assert_eq!(status, 200, "{body}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_without_a_token_says_how_mnemo_is_not_where_things_are() {
    let llm = ScriptedLlm::start().await;
    let server = start(Some(llm.base_url())).await;
    let (status, anonymous, _) =
        send(Method::GET, &format!("{}/health", server.url), None, None).await;
    assert_eq!(status, 200, "{anonymous}");
    assert_eq!(anonymous["status"], "ok", "{anonymous}");
    assert_eq!(anonymous["upstream"]["reachable"], true, "{anonymous}");
    let shown = anonymous.to_string();
    let upstream_port = llm.base_url().rsplit(':').next().unwrap().to_owned();
    assert!(
        anonymous.get("store").is_none() && !shown.contains(&upstream_port),
        "{shown}"
    );
    let (status, detailed) = get_as(&format!("{}/health", server.url), ALICE).await;
    assert_eq!(status, 200);
    assert!(detailed["store"].is_string(), "{detailed}");
    assert_eq!(detailed["upstream"]["url"], llm.base_url(), "{detailed}");
    // A wrong token is refused even where none is needed: the client is misconfigured.
    let (status, _, _) = send(
        Method::GET,
        &format!("{}/health", server.url),
        Some("not-a-token-of-mnemo"),
        None,
    )
    .await;
    assert_eq!(status, 401);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scoped_token_reads_and_writes_its_own_conversations_only() {
    let server = start(None).await;
    let url = &server.url;
    let bob = remember(&server, "bob", "Bob's locker code is 4711.").await;
    remember(&server, "global", "The office locker room is on floor 2.").await;

    // Writes: its own conversations and prefixes; not bob's, not global.
    let (status, added) = post_as(
        &format!("{url}/v1/memories"),
        ALICE,
        json!({"content": "Alice's locker code is 1234.", "conversation_id": "alice"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    let alice = added["added"][0]["id"].as_str().unwrap().to_owned();
    let (status, added) = post_as(
        &format!("{url}/v1/memories"),
        ALICE,
        json!({"content": "The red team meets on Mondays.", "conversation_id": "team-red"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    let (status, body) = post_as(
        &format!("{url}/v1/memories"),
        ALICE,
        json!({"content": "Bob owes Alice lunch.", "conversation_id": "bob"}),
    )
    .await;
    assert_forbidden(status, &body, "may not write conversation \"bob\"");
    let (status, body) = post_as(
        &format!("{url}/v1/memories"),
        ALICE,
        json!({"content": "Everyone owes Alice lunch.", "conversation_id": "global"}),
    )
    .await;
    assert_forbidden(status, &body, "read-only");
    let (status, body) = post_as(
        &format!("{url}/v1/memories"),
        ALICE,
        json!({"content": "Unnamed conversation."}),
    )
    .await;
    assert_forbidden(status, &body, "conversation \"default\"");

    // Search: its own conversation with global's hits; not bob's.
    let search = |conversation: &str| json!({"query": "locker code", "conversation_id": conversation, "top_k": 10});
    let (status, found) =
        post_as(&format!("{url}/v1/memories/search"), ALICE, search("alice")).await;
    assert_eq!(status, 200, "{found}");
    let mut seen = conversations_of(&found["hits"]);
    seen.sort();
    assert_eq!(seen, ["alice", "global"], "{found}");
    let (status, body) = post_as(&format!("{url}/v1/memories/search"), ALICE, search("bob")).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");

    // List: a named conversation is checked; unnamed, only what it may read.
    let (status, body) = get_as(&format!("{url}/v1/memories?conversation_id=bob"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");
    let (status, page) = get_as(&format!("{url}/v1/memories?role=memory"), ALICE).await;
    assert_eq!(status, 200, "{page}");
    let mut listed = conversations_of(&page["items"]);
    listed.sort();
    assert_eq!(listed, ["alice", "global", "team-red"], "{page}");
    assert_eq!(page["total"], 3);
    let (_, page) = get_as(&format!("{url}/v1/memories?role=memory"), FULL).await;
    assert_eq!(page["total"], 4, "the full token sees everything: {page}");

    // By id: the memory's conversation decides.
    let (status, body) = get_as(&format!("{url}/v1/memories/{bob}"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");
    let (status, body) = get_as(&format!("{url}/v1/memories/{bob}/history"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");
    let (status, body) = delete_as(&format!("{url}/v1/memories/{bob}"), ALICE).await;
    assert_forbidden(status, &body, "may not write conversation \"bob\"");
    let (status, body) = get_as(&format!("{url}/v1/memories/{bob}"), FULL).await;
    assert_eq!(status, 200, "bob's memory is still there: {body}");
    let (status, body) = get_as(&format!("{url}/v1/memories/{alice}"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(&format!("{url}/v1/memories/{alice}/history"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = delete_as(&format!("{url}/v1/memories/{alice}"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    // A deleted memory lives in git only: its history is still bob's.
    let (status, body) = delete_as(&format!("{url}/v1/memories/{bob}"), FULL).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(&format!("{url}/v1/memories/{bob}/history"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");
    let (status, body) = get_as(&format!("{url}/v1/memories/{bob}/history"), FULL).await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_without_global_never_sees_global() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let url = &server.url;
    remember(&server, "global", "The office locker room is on floor 2.").await;
    remember(&server, "carol", "Carol's locker is number 12.").await;
    let search =
        json!({"query": "Where is the locker room?", "conversation_id": "carol", "top_k": 10});
    let (status, found) =
        post_as(&format!("{url}/v1/memories/search"), CAROL, search.clone()).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(conversations_of(&found["hits"]), ["carol"], "{found}");
    let (_, found) = post_as(&format!("{url}/v1/memories/search"), FULL, search).await;
    assert!(
        conversations_of(&found["hits"]).contains(&"global".to_owned()),
        "global has a hit to hide: {found}"
    );
    let (status, body) = get_as(&format!("{url}/v1/memories?conversation_id=global"), CAROL).await;
    assert_forbidden(status, &body, "may not read conversation \"global\"");
    let (_, page) = get_as(&format!("{url}/v1/memories?role=memory"), CAROL).await;
    assert_eq!(conversations_of(&page["items"]), ["carol"], "{page}");

    // A chat is served, without global's memories; a reader of global gets them.
    let mut request = chat("Where is the locker room?");
    request["memory_id"] = json!("carol");
    let (status, answer) = post_as(&format!("{url}/v1/chat/completions"), CAROL, request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        conversations_of(&answer["memory_hits"]),
        ["carol"],
        "{answer}"
    );
    let mut request = chat("Where is the locker room?");
    request["memory_id"] = json!("alice");
    let (status, answer) = post_as(&format!("{url}/v1/chat/completions"), ALICE, request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        conversations_of(&answer["memory_hits"]),
        ["global"],
        "{answer}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chats_are_checked_against_their_conversation_session_and_agent() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let url = &server.url;
    let completions = format!("{url}/v1/chat/completions");
    let said = |text: &str| {
        let text = text.to_owned();
        llm.requests().iter().any(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b.to_string().contains(&text))
        })
    };

    // A foreign conversation, streamed or not: 403, and nothing went upstream or to disk.
    for stream in [false, true] {
        let mut request = chat("Alice writes into bob's conversation.");
        request["memory_id"] = json!("bob");
        request["stream"] = json!(stream);
        let (status, body) = post_as(&completions, ALICE, request).await;
        assert_forbidden(status, &body, "may not write conversation \"bob\"");
    }
    assert!(!said("Alice writes into bob"), "the upstream saw nothing");
    assert!(
        !server.root.join("entries/bob").exists(),
        "no turn was stored"
    );

    // Its own conversation, with its agent; not another agent.
    let mut request = chat("Hello from Alice.");
    request["memory_id"] = json!("alice");
    request["memory_agent"] = json!("coder");
    let (status, body) = post_as(&completions, ALICE, request.clone()).await;
    assert_eq!(status, 200, "{body}");
    request["memory_agent"] = json!("reviewer");
    let (status, body) = post_as(&completions, ALICE, request).await;
    assert_forbidden(status, &body, "may not use the notes of agent \"reviewer\"");

    // A session is its conversation's: bob's session is bob's, whatever the request says.
    let mut request = chat("Bob starts his session.");
    request["memory_id"] = json!("bob");
    request["memory_session"] = json!("bob-s");
    let (status, body) = post_as(&completions, FULL, request).await;
    assert_eq!(status, 200, "{body}");
    let mut request = chat("Alice continues bob's session.");
    request["memory_session"] = json!("bob-s");
    request.as_object_mut().unwrap().remove("memory_id");
    let (status, body) = post_as(&completions, ALICE, request).await;
    assert_forbidden(status, &body, "may not write conversation \"bob\"");
    assert!(!said("Alice continues bob"), "the upstream saw nothing");
    let (_, page) = get_as(&format!("{url}/v1/sessions/bob-s/messages"), FULL).await;
    assert_eq!(
        page["total"], 2,
        "nothing was logged in bob's session: {page}"
    );

    // A session run for an agent carries it: continuing it needs the agent too.
    let mut request = chat("Coder session, by the full token.");
    request["memory_id"] = json!("alice");
    request["memory_session"] = json!("alice-reviewed");
    request["memory_agent"] = json!("reviewer");
    let (status, body) = post_as(&completions, FULL, request).await;
    assert_eq!(status, 200, "{body}");
    let mut request = chat("Alice continues without naming the agent.");
    request["memory_session"] = json!("alice-reviewed");
    request.as_object_mut().unwrap().remove("memory_id");
    let (status, body) = post_as(&completions, ALICE, request).await;
    assert_forbidden(status, &body, "agent \"reviewer\"");

    assert_no_token_went_upstream(&llm);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_conversations_and_agents_are_scoped() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let url = &server.url;
    for (token, conversation, session) in [(FULL, "bob", "bob-s"), (ALICE, "alice", "alice-s")] {
        let mut request = chat("Start a session.");
        request["memory_id"] = json!(conversation);
        request["memory_session"] = json!(session);
        let (status, body) = post_as(&format!("{url}/v1/chat/completions"), token, request).await;
        assert_eq!(status, 200, "{body}");
    }

    // Listings show what it may read; a named foreign conversation is a 403.
    let ids = |list: &Value| -> Vec<String> {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, list) = get_as(&format!("{url}/v1/sessions"), ALICE).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(ids(&list), ["alice-s"]);
    let (_, list) = get_as(&format!("{url}/v1/sessions"), FULL).await;
    assert_eq!(ids(&list).len(), 2, "{list}");
    let (status, body) = get_as(&format!("{url}/v1/sessions?conversation=bob"), ALICE).await;
    assert_forbidden(status, &body, "conversation \"bob\"");

    // Every route of a foreign session is a 403 naming its conversation.
    let s = format!("{url}/v1/sessions/bob-s");
    for (method, route) in [
        (Method::GET, s.clone()),
        (Method::GET, format!("{s}/messages")),
        (Method::GET, format!("{s}/context")),
        (Method::GET, format!("{s}/tool-outputs/c")),
        (
            Method::GET,
            format!("{url}/v1/history/search?q=session&session=bob-s"),
        ),
        (
            Method::GET,
            format!("{url}/v1/history/search?q=session&conversation=bob"),
        ),
        (Method::POST, format!("{s}/fork")),
        (Method::POST, format!("{s}/compact")),
        (Method::GET, format!("{s}/export")),
        (Method::DELETE, s.clone()),
    ] {
        let (status, body, _) = send(method.clone(), &route, Some(ALICE), None).await;
        assert_forbidden(status, &body, "conversation \"bob\"");
    }
    let (status, body) = get_as(&s, FULL).await;
    assert_eq!(status, 200, "bob's session is untouched: {body}");
    assert!(body["deleted_at"].is_null(), "{body}");

    // Its own session works.
    let (status, body) = get_as(&format!("{url}/v1/sessions/alice-s"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(
        &format!("{url}/v1/history/search?q=session&conversation=alice"),
        ALICE,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_as(
        &format!("{url}/v1/sessions/alice-s/fork"),
        ALICE,
        json!({"id": "alice-s2"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Its own session exports; the export imports for it, but not into bob's conversation.
    let (status, mut export) = get_as(&format!("{url}/v1/sessions/alice-s/export"), ALICE).await;
    assert_eq!(status, 200, "{export}");
    let (status, body) = post_as(
        &format!("{url}/v1/sessions?as=alice-s3"),
        ALICE,
        export.clone(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    export["meta"]["conversation"] = json!("bob");
    let (status, body) = post_as(&format!("{url}/v1/sessions?as=bob-s9"), ALICE, export).await;
    assert_forbidden(status, &body, "may not write conversation \"bob\"");

    // Conversation settings: read and write by conversation; global is read-only to it.
    let strategy = |conversation: &str| format!("{url}/v1/conversations/{conversation}/memory");
    let (status, body) = get_as(&strategy("bob"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");
    let (status, body, _) = send(
        Method::PATCH,
        &strategy("bob"),
        Some(ALICE),
        Some(json!({"mode": "auto"})),
    )
    .await;
    assert_forbidden(status, &body, "may not write conversation \"bob\"");
    let (status, body) = get_as(&strategy("global"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = send(
        Method::PATCH,
        &strategy("global"),
        Some(ALICE),
        Some(json!({"mode": "auto"})),
    )
    .await;
    assert_forbidden(status, &body, "read-only");
    let (status, body, _) = send(
        Method::PATCH,
        &strategy("team-blue"),
        Some(ALICE),
        Some(json!({"mode": "auto"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(&format!("{url}/v1/conversations/bob/tool-outputs/c"), ALICE).await;
    assert_forbidden(status, &body, "may not read conversation \"bob\"");

    // Agents' notes: only the agents it names.
    let notes = |agent: &str| format!("{url}/v1/agents/{agent}/memory");
    let (status, body) = post_as(&notes("coder"), ALICE, json!({"text": "Run the tests."})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(&notes("coder"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["content"].as_str().unwrap().contains("Run the tests."));
    let (status, body) = get_as(&notes("reviewer"), ALICE).await;
    assert_forbidden(status, &body, "may not use the notes of agent \"reviewer\"");
    let (status, body) = post_as(&notes("reviewer"), ALICE, json!({"text": "x"})).await;
    assert_forbidden(status, &body, "agent \"reviewer\"");
    let (status, body, _) = send(
        Method::PATCH,
        &notes("reviewer"),
        Some(ALICE),
        Some(json!({"old_text": "a", "new_text": "b"})),
    )
    .await;
    assert_forbidden(status, &body, "agent \"reviewer\"");
    let (status, body) = get_as(&notes("reviewer"), FULL).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(&notes("coder"), CAROL).await;
    assert_forbidden(status, &body, "agent \"coder\"");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mnemo_token_never_goes_upstream() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let url = &server.url;
    // Without a key of its own, mnemo used to pass the client's Authorization on; with
    // tokens, that header is mnemo's and stays here.
    let (status, body) = get_as(&format!("{url}/v1/models"), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let (status, echo) = post_as(
        &format!("{url}/v1/embeddings"),
        FULL,
        json!({"input": "hello"}),
    )
    .await;
    assert_eq!(status, 200, "{echo}");
    let forwarded = llm.requests();
    assert!(forwarded
        .iter()
        .all(|r| r.header("authorization").is_none()));
    let mut request = chat("Hello.");
    request["memory_id"] = json!("alice");
    let (status, body) = post_as(
        &format!("{url}/v1/chat/completions"),
        ALICE,
        request.clone(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    request["stream"] = json!(true);
    let (status, _) = post_as(&format!("{url}/v1/chat/completions"), ALICE, request).await;
    assert_eq!(status, 200);
    assert_no_token_went_upstream(&llm);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_key_of_its_own_mnemo_sends_that_key_upstream() {
    let llm = ScriptedLlm::with_handler(model).await;
    let options = ServerOptions {
        auth: tokens(),
        ..ServerOptions::default()
    };
    let server = Server::start_with(Some(llm.base_url()), options, |config| {
        config.openai_api_key = Some(ApiKey("sk-upstream-key".into()));
    })
    .await;
    let (status, body) = get_as(&format!("{}/v1/models", server.url), ALICE).await;
    assert_eq!(status, 200, "{body}");
    let mut request = chat("Hello.");
    request["memory_id"] = json!("alice");
    let (status, body) = post_as(
        &format!("{}/v1/chat/completions", server.url),
        ALICE,
        request,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for request in llm.requests() {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer sk-upstream-key"),
            "{} {}",
            request.method,
            request.path
        );
    }
    assert_no_token_went_upstream(&llm);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_naming_a_foreign_session_learns_nothing_of_it() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = start(Some(llm.base_url())).await;
    let url = &server.url;
    let completions = format!("{url}/v1/chat/completions");
    let mut request = chat("Bob's session, soon deleted.");
    request["memory_id"] = json!("bob");
    request["memory_session"] = json!("bob-gone");
    let (status, body) = post_as(&completions, FULL, request).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = delete_as(&format!("{url}/v1/sessions/bob-gone"), FULL).await;
    assert_eq!(status, 200, "{body}");

    // Alice may not write bob's conversation: the scope answers first, whether or not she
    // names a conversation, and says nothing of the session's state.
    for memory_id in [None, Some("alice")] {
        let mut request = chat("Alice tries bob's deleted session.");
        request["memory_session"] = json!("bob-gone");
        match memory_id {
            Some(id) => request["memory_id"] = json!(id),
            None => {
                request.as_object_mut().unwrap().remove("memory_id");
            }
        }
        let (status, body) = post_as(&completions, ALICE, request).await;
        assert_forbidden(status, &body, "may not write conversation \"bob\"");
        assert!(!error_message(&body).contains("deleted"), "{body}");
    }

    // A caller who may see it is told, with the session named as it was written.
    let mut request = chat("Full token, deleted session.");
    request["memory_session"] = json!("bob-gone");
    request.as_object_mut().unwrap().remove("memory_id");
    let (status, body) = post_as(&completions, FULL, request).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        error_message(&body).starts_with("session \"bob-gone\" was deleted at"),
        "{body}"
    );
    let mut request = chat("Full token, a live session of bob's named under alice.");
    request["memory_session"] = json!("bob-live");
    request["memory_id"] = json!("bob");
    let (status, body) = post_as(&completions, FULL, request.clone()).await;
    assert_eq!(status, 200, "{body}");
    request["memory_id"] = json!("alice");
    let (status, body) = post_as(&completions, FULL, request).await;
    assert_eq!(status, 400, "{body}");
    let message = error_message(&body);
    assert!(
        message.starts_with("session \"bob-live\" belongs to another conversation than \"alice\""),
        "{message}"
    );
    assert!(!message.contains("SessionId("), "{message}");
    let (status, body) = post_as(
        &format!("{url}/v1/sessions/bob-live/compact"),
        FULL,
        json!({}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(!error_message(&body).contains("SessionId("), "{body}");
    assert!(
        error_message(&body).starts_with("nothing to compact in session \"bob-live\""),
        "{body}"
    );
    server.shutdown().await;
}
