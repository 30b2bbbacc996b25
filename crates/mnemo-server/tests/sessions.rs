//! Chat sessions and agent notes over real HTTP: a scripted upstream, a real store, model,
//! index and git.

use crate::support;

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};
use support::*;

async fn get(url: &str) -> (u16, Value) {
    post_get(url).await
}

/// Field `name` of what `url` answers, once `done` accepts it (work that follows an answer
/// in the background), or as it is after 5 s.
async fn field_once(url: &str, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut value = Value::Null;
    for _ in 0..100 {
        value = get(url).await.1[name].clone();
        if done(&value) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    value
}

/// Waits until the server has no work left in the background (answers logged, sessions
/// titled, usage recorded, write passes), as `/metrics` reports it; panics after 30 s. What
/// a request set off in the background has then all been done, or tried.
async fn background_done(server: &Server) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let metrics = server.metrics().await;
        if metrics
            .lines()
            .any(|l| l == "mnemo_background_queue_depth 0")
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "background work still running after 30 s:\n{metrics}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn delete(url: &str) -> (u16, Value) {
    let response = http().delete(url).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// A chat request of session `session` with `messages`.
fn session_chat(session: &str, messages: Vec<Value>) -> Value {
    json!({"model": "m", "memory_top_k": 0, "memory_session": session, "messages": messages})
}

/// Sends a session chat; returns the answer's text.
async fn say(server: &Server, session: &str, messages: Vec<Value>) -> String {
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.url),
        session_chat(session, messages),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The (role, text) of a session's messages, from the API.
async fn logged(server: &Server, session: &str, all: bool) -> Vec<(String, String)> {
    let (status, page) = get(&format!(
        "{}/v1/sessions/{session}/messages?all={all}&limit=1000",
        server.url
    ))
    .await;
    assert_eq!(status, 200, "{page}");
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["message"]["role"].as_str().unwrap().to_owned(),
                m["message"]["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn forwarded_texts(llm: &ScriptedLlm) -> Vec<String> {
    last_forwarded(llm)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn server_side_history_sends_the_whole_session_upstream() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    for text in ["My name is Ada.", "I live in Lyon.", "Where do I live?"] {
        say(&server, "s1", vec![user(text)]).await;
    }
    assert_eq!(
        forwarded_texts(&llm),
        [
            "My name is Ada.",
            "You said: My name is Ada.",
            "I live in Lyon.",
            "You said: I live in Lyon.",
            "Where do I live?"
        ]
    );
    assert_eq!(logged(&server, "s1", false).await.len(), 6);

    let (status, list) = get(&format!("{}/v1/sessions", server.url)).await;
    assert_eq!(status, 200);
    let first = &list["sessions"][0];
    assert_eq!(first["id"], "s1");
    assert_eq!(first["title"], "My name is Ada.");
    assert_eq!(first["messages"], 6);
    assert_eq!(first["conversation"], "default");
    assert!(first["tokens"].as_u64().unwrap() > 0);

    let (_, page) = get(&format!(
        "{}/v1/sessions/s1/messages?offset=2&limit=2",
        server.url
    ))
    .await;
    assert_eq!(page["total"], 6);
    assert_eq!(page["messages"][0]["index"], 2);
    assert_eq!(page["messages"][0]["message"]["content"], "I live in Lyon.");
    assert_eq!(page["messages"].as_array().unwrap().len(), 2);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resent_history_is_not_duplicated_and_an_edit_rewinds() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let system = json!({"role": "system", "content": "Be brief."});
    let a1 = say(&server, "c1", vec![system.clone(), user("one")]).await;
    let a2 = say(
        &server,
        "c1",
        vec![system.clone(), user("one"), assistant(&a1), user("two")],
    )
    .await;
    let expected = vec![
        ("user".to_owned(), "one".to_owned()),
        ("assistant".to_owned(), a1.clone()),
        ("user".to_owned(), "two".to_owned()),
        ("assistant".to_owned(), a2.clone()),
    ];
    assert_eq!(logged(&server, "c1", false).await, expected);
    assert_eq!(
        forwarded_texts(&llm)[0],
        "Be brief.",
        "instructions go first"
    );

    // The client rewrote its second message: the branch goes back, the log keeps both.
    say(
        &server,
        "c1",
        vec![system, user("one"), assistant(&a1), user("TWO")],
    )
    .await;
    let branch = logged(&server, "c1", false).await;
    assert_eq!(branch.len(), 4);
    assert_eq!(branch[2].1, "TWO");
    assert_eq!(logged(&server, "c1", true).await.len(), 6);
    assert_eq!(forwarded_texts(&llm).len(), 4, "system, one, a1, TWO");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_and_delete_leave_the_parent_as_it_was() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    say(&server, "p", vec![user("first")]).await;
    let before = logged(&server, "p", true).await;

    let (status, forked) = post(
        &format!("{}/v1/sessions/p/fork", server.url),
        json!({"id": "child"}),
    )
    .await;
    assert_eq!(status, 201, "{forked}");
    assert_eq!(forked["parent"], "p");
    say(&server, "child", vec![user("second")]).await;
    assert_eq!(logged(&server, "child", false).await.len(), 4);
    assert_eq!(logged(&server, "p", true).await, before);

    let (status, taken) = post(
        &format!("{}/v1/sessions/p/fork", server.url),
        json!({"id": "child"}),
    )
    .await;
    assert_eq!(status, 409, "{taken}");

    let (status, _) = delete(&format!("{}/v1/sessions/child", server.url)).await;
    assert_eq!(status, 200);
    let (_, list) = get(&format!("{}/v1/sessions", server.url)).await;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["p"]);
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.url),
        session_chat("child", vec![user("more")]),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(error_message(&body).contains("was deleted"), "{body}");
    let (status, info) = get(&format!("{}/v1/sessions/child", server.url)).await;
    assert_eq!(status, 200);
    assert!(info["deleted_at"].is_string());
    assert_eq!(logged(&server, "p", true).await, before);

    let (status, body) = get(&format!("{}/v1/sessions/nope", server.url)).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get(&format!("{}/v1/sessions/..%2Fetc", server.url)).await;
    assert_eq!(status, 400, "{body}");
    server.shutdown().await;
}

/// Answers summary calls with a summary naming the focus, others like [`model`].
fn summarising_model(request: &ChatRequest) -> Reply {
    let text = request.last_user_message().unwrap_or_default();
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("conversation summariser"))
    {
        let focus = text
            .lines()
            .find_map(|l| l.strip_prefix("IMPORTANT: Focus the summary on: "))
            .unwrap_or("nothing");
        return Reply::text(format!("SUMMARY focused on {focus}"));
    }
    model(request)
}

#[tokio::test(flavor = "multi_thread")]
async fn compaction_summarises_with_a_focus_and_a_failure_changes_nothing() {
    let llm = ScriptedLlm::with_handler(summarising_model).await;
    let server = Server::start(Some(llm.base_url())).await;
    for text in ["alpha", "beta", "gamma"] {
        say(&server, "k", vec![user(text)]).await;
    }
    let context_url = format!("{}/v1/sessions/k/context", server.url);
    // The history's state, without the usage totals an answer adds in the background.
    let history_state = |mut context: Value| {
        context.as_object_mut().map(|c| c.remove("usage"));
        context
    };
    let (_, before) = get(&context_url).await;
    let before = history_state(before);
    assert_eq!(before["messages"], 6);
    assert_eq!(before["compressions"], 0);

    // A failing summariser and too few messages to drop any: 502, and the history is as it
    // was.
    llm.set_handler(|_: &ChatRequest| Reply::status(500, "down"));
    let (status, body) = post(
        &format!("{}/v1/sessions/k/compact", server.url),
        json!({"focus": "the Greek letters"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    let (_, unchanged) = get(&context_url).await;
    assert_eq!(history_state(unchanged), before);

    llm.set_handler(summarising_model);
    let (status, report) = post(
        &format!("{}/v1/sessions/k/compact", server.url),
        json!({"focus": "the Greek letters"}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["compacted_messages"], 4, "all but the latest turn");
    assert_eq!(report["summary"], "SUMMARY focused on the Greek letters");
    let (_, after) = get(&context_url).await;
    assert_eq!(after["compressions"], 1);
    assert_eq!(after["compacted_messages"], 4);

    say(&server, "k", vec![user("delta")]).await;
    let sent = forwarded_texts(&llm);
    assert!(
        sent[0].contains("SUMMARY focused on the Greek letters"),
        "{sent:?}"
    );
    assert_eq!(sent.len(), 4, "summary, gamma, its answer, delta: {sent:?}");
    assert_eq!(
        logged(&server, "k", false).await.len(),
        8,
        "the log keeps all"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_compaction_runs_at_the_next_request_of_a_session_or_conversation() {
    let llm = ScriptedLlm::with_handler(summarising_model).await;
    let server = Server::start(Some(llm.base_url())).await;
    for text in ["alpha", "beta", "gamma"] {
        say(&server, "d", vec![user(text)]).await;
    }
    let compact_url = format!("{}/v1/sessions/d/compact", server.url);
    let (status, body) = post(
        &compact_url,
        json!({"focus": "  the Greek letters ", "deferred": true}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"target": "session", "id": "d", "focus": "the Greek letters"})
    );
    let context_url = format!("{}/v1/sessions/d/context", server.url);
    let (_, context) = get(&context_url).await;
    assert_eq!(context["compressions"], 0, "nothing yet: {context}");

    say(&server, "d", vec![user("delta")]).await;
    let sent = forwarded_texts(&llm);
    assert_eq!(
        sent,
        [
            "[Summary of 4 earlier messages of this session]\nSUMMARY focused on the Greek letters",
            "gamma",
            "You said: gamma",
            "delta"
        ],
        "compacted before the request went"
    );
    let (_, context) = get(&context_url).await;
    assert_eq!(context["compressions"], 1, "{context}");
    let (status, body) = post(
        &format!("{}/v1/sessions/nope/compact", server.url),
        json!({"deferred": true}),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // A conversation's history is the client's: its next request is summarised on the way,
    // whatever its strategy (none here) says, and only that one.
    let (status, body) = post(
        &format!("{}/v1/conversations/c9/compact", server.url),
        json!({"focus": "pets"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let history = vec![
        user("I have a cat"),
        assistant("Nice."),
        user("and a dog"),
        assistant("Lovely."),
        user("what do I have?"),
    ];
    let request = |messages: Vec<Value>| json!({"model": "m", "memory_id": "c9", "memory_top_k": 0, "messages": messages});
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.url),
        request(history.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["memory_context"]["summary"], "new", "{body}");
    let sent = forwarded_texts(&llm);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[0].ends_with("SUMMARY focused on pets"), "{sent:?}");
    assert_eq!(sent[1], "what do I have?");
    let (status, _) = post(
        &format!("{}/v1/chat/completions", server.url),
        request(history.clone()),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(forwarded_texts(&llm).len(), 5, "asked once, done once");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_add_up_to_tokens_and_cost_per_session_and_conversation() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let chat_url = format!("{}/v1/chat/completions", server.url);
    let request = |text: &str, stream: Option<bool>| {
        let mut body = json!({"model": "gpt-4o", "memory_id": "spend", "memory_top_k": 0,
            "memory_session": "u", "messages": [user(text)]});
        if let Some(include_usage) = stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": include_usage});
        }
        body
    };
    // Two whole answers and a stream that report usage; a stream that does not.
    for (text, stream) in [
        ("one two three", None),
        ("four five", None),
        ("six", Some(true)),
        ("seven", Some(false)),
    ] {
        let (status, body) = post(&chat_url, request(text, stream)).await;
        assert!(status == 200, "{status}: {body}");
    }
    let context_url = format!("{}/v1/sessions/u/context", server.url);
    let usage = field_once(&context_url, "usage", |u| u["requests"] == 4).await;
    assert_eq!(usage["requests"], 4, "{usage}");
    assert_eq!(
        usage["estimated_requests"], 1,
        "the stream without usage: {usage}"
    );
    assert_eq!(usage["unpriced_requests"], 0, "{usage}");
    assert!(
        usage["cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "{usage}"
    );
    // The scripted upstream counts words: "You said: one two three" is 5.
    assert!(
        usage["completion_tokens"].as_u64() >= Some(5 + 4 + 3 + 3),
        "{usage}"
    );

    let (status, conversation) = get(&format!("{}/v1/conversations/spend/usage", server.url)).await;
    assert_eq!(status, 200, "{conversation}");
    assert_eq!(
        conversation["usage"], usage,
        "all its answers are the session's"
    );
    let (_, other) = get(&format!("{}/v1/conversations/quiet/usage", server.url)).await;
    assert_eq!(other["usage"]["requests"], 0);

    let metrics = server.metrics().await;
    assert!(
        metrics.contains("mnemo_upstream_answers_total 4"),
        "{metrics}"
    );
    let prompt = format!(
        "mnemo_upstream_tokens_total{{kind=\"prompt\"}} {}",
        usage["prompt_tokens"]
    );
    assert!(metrics.contains(&prompt), "{metrics}");
    assert!(
        metrics.contains("mnemo_upstream_cost_usd_total 0."),
        "{metrics}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_exports_as_json_and_imports_under_a_new_id() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    say(&server, "x", vec![user("remember the blue door")]).await;
    say(&server, "x", vec![user("and the red key")]).await;
    let (status, export) = get(&format!("{}/v1/sessions/x/export", server.url)).await;
    assert_eq!(status, 200, "{export}");
    assert_eq!(export["format"], "mnemo-session");
    assert_eq!(export["records"].as_array().map(Vec::len), Some(4));

    let sessions = format!("{}/v1/sessions", server.url);
    let (status, body) = post(&sessions, export.clone()).await;
    assert_eq!(status, 409, "x exists: {body}");
    let (status, body) = post(&format!("{sessions}?as=y"), export.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["id"], "y");
    assert_eq!(
        logged(&server, "y", false).await,
        logged(&server, "x", false).await
    );
    // The import continues like any session.
    say(&server, "y", vec![user("what did I say?")]).await;
    assert_eq!(
        forwarded_texts(&llm).len(),
        5,
        "the whole history went upstream"
    );

    let mut hostile = export.clone();
    hostile["meta"]["conversation"] = json!("../../etc");
    let (status, body) = post(&format!("{sessions}?as=z"), hostile).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&format!("{sessions}?as=..%2Fz"), export.clone()).await;
    assert_eq!(status, 400, "{body}");
    let mut newer = export;
    newer["version"] = json!(2);
    let (status, body) = post(&format!("{sessions}?as=z"), newer).await;
    assert_eq!(status, 400, "{body}");
    assert!(error_message(&body).contains("upgrade mnemo"), "{body}");
    let (status, _) = get(&format!("{sessions}/z")).await;
    assert_eq!(status, 404, "nothing was left of the refused imports");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_systems_session_is_imported_into_the_named_conversation() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let sessions = format!("{}/v1/sessions", server.url);
    let question = json!({"kind": "request", "parts": [
        {"part_kind": "user-prompt", "content": "Which port does the proxy use?", "timestamp": "2026-09-01T08:00:00Z"}
    ]});
    let answer =
        json!({"kind": "response", "parts": [{"part_kind": "text", "content": "Port 8080."}]});

    // pydantic-deep's messages.json, as JSON.
    let (status, body) = post(
        &format!("{sessions}?as=deep&conversation=work"),
        json!([question, answer]),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["conversation"], "work", "{body}");
    assert_eq!(
        logged(&server, "deep", false).await,
        [
            (
                "user".to_owned(),
                "Which port does the proxy use?".to_owned()
            ),
            ("assistant".to_owned(), "Port 8080.".to_owned())
        ]
    );

    // co-cli's transcript, as JSON lines, under a new id.
    let transcript = format!(
        "{}\n{}\n{}\n",
        json!([question]),
        r#"{"type":"compact_boundary"}"#,
        json!([answer])
    );
    let posted = |url: String, body: String| async move {
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (
            status,
            response.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    let (status, body) = posted(sessions.clone(), transcript.clone()).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(body["conversation"], "default", "{body}");
    assert_eq!(
        logged(&server, &id, false).await,
        logged(&server, "deep", false).await
    );

    // A broken line is named, and nothing is left of the refused import.
    let broken = transcript.replace("\"response\"", "\"event\"");
    let (status, body) = posted(format!("{sessions}?as=broken"), broken).await;
    assert_eq!(status, 400, "{body}");
    assert!(error_message(&body).contains("line 3, message 0"), "{body}");
    let (status, _) = get(&format!("{sessions}/broken")).await;
    assert_eq!(status, 404);
    let (status, body) = post(
        &format!("{sessions}?conversation=..%2Fx"),
        json!([question]),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    server.shutdown().await;
}

/// Answers a titling request with a quoted title, others like [`model`].
fn titling_model(request: &ChatRequest) -> Reply {
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("You title chat sessions"))
    {
        return Reply::text("\"Lisbon Trip Planning.\"");
    }
    model(request)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_llm_titles_a_new_session_is_titled_after_its_first_answer() {
    let llm = ScriptedLlm::with_handler(titling_model).await;
    let server = Server::start_with(
        Some(llm.base_url()),
        mnemo_server::ServerOptions::default(),
        |config| config.session_titles = mnemo_core::SessionTitles::Llm,
    )
    .await;
    say(
        &server,
        "t1",
        vec![user("I want to spend four days in Lisbon in May")],
    )
    .await;
    let url = format!("{}/v1/sessions/t1", server.url);
    let title = field_once(&url, "title", |t| t == "Lisbon Trip Planning").await;
    assert_eq!(title, "Lisbon Trip Planning");
    // Only a new session's first answer asks: a second turn keeps the title and asks nothing.
    let titling = |llm: &ScriptedLlm| {
        llm.requests()
            .iter()
            .filter(|r| {
                r.body.as_ref().is_some_and(|b| {
                    b["messages"][0]["content"]
                        .as_str()
                        .is_some_and(|s| s.contains("You title chat sessions"))
                })
            })
            .count()
    };
    assert_eq!(titling(&llm), 1);
    say(&server, "t1", vec![user("and what about Porto?")]).await;
    // Whatever the second turn set off is done: a second titling call would be in.
    background_done(&server).await;
    assert_eq!(titling(&llm), 1, "asked once");
    assert_eq!(get(&url).await.1["title"], "Lisbon Trip Planning");

    // A titling call that fails leaves the first message's title. The call is made: it
    // reaches the upstream, which fails it (every try of it).
    let before = titling(&llm);
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let failing = failed.clone();
    llm.set_handler(move |request: &ChatRequest| {
        if request
            .system_prompt()
            .is_some_and(|s| s.contains("You title chat sessions"))
        {
            failing.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Reply::status(500, "down");
        }
        model(request)
    });
    say(&server, "t2", vec![user("Fix the parser crash")]).await;
    background_done(&server).await;
    let asked = titling(&llm) - before;
    assert!(asked >= 1, "the titling call was made");
    assert_eq!(
        failed.load(std::sync::atomic::Ordering::SeqCst),
        asked,
        "and failed"
    );
    let (_, info) = get(&format!("{}/v1/sessions/t2", server.url)).await;
    assert_eq!(info["title"], "Fix the parser crash");
    server.shutdown().await;
}

/// Fails summary calls with a 500, answers others like [`model`].
fn summariser_down(request: &ChatRequest) -> Reply {
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("conversation summariser"))
    {
        return Reply::status(500, "down");
    }
    model(request)
}

#[tokio::test(flavor = "multi_thread")]
async fn compaction_without_a_summary_keeps_the_last_ten_messages_behind_a_marker() {
    let llm = ScriptedLlm::with_handler(summariser_down).await;
    let server = Server::start(Some(llm.base_url())).await;
    let padding = "and some more words to make each message worth its tokens ".repeat(5);
    for i in 0..7 {
        say(&server, "m", vec![user(&format!("message {i} {padding}"))]).await;
    }
    let (status, report) = post(&format!("{}/v1/sessions/m/compact", server.url), json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["compacted_messages"], 4,
        "14 messages, the last 10 kept"
    );
    assert_eq!(report["kept_messages"], 10);
    let why = report["unsummarised"].as_str().unwrap_or_default();
    assert!(why.contains("summary call failed"), "{report}");
    assert!(
        report["tokens_after"].as_u64() < report["tokens_before"].as_u64(),
        "{report}"
    );

    say(&server, "m", vec![user("message 7")]).await;
    let sent = forwarded_texts(&llm);
    assert!(
        sent[0].starts_with("[Earlier conversation trimmed — 4 messages removed"),
        "{sent:?}"
    );
    assert!(sent[1].starts_with("message 2 "), "{sent:?}");
    assert_eq!(
        logged(&server, "m", false).await.len(),
        16,
        "the log keeps all"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn offloaded_outputs_are_read_by_offset_and_limit() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let output: String = (0..400).map(|i| format!("line {i}\n")).collect();
    let mut request = session_chat(
        "t",
        vec![
            user("list the files"),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_9", "content": output}),
        ],
    );
    request["memory_strategy"] = json!({"mode": "auto", "offload_tokens": 100});
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), request).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["memory_context"]["offloaded"], json!(["call_9"]));

    let (status, slice) = get(&format!(
        "{}/v1/sessions/t/tool-outputs/call_9?offset=7&limit=6",
        server.url
    ))
    .await;
    assert_eq!(status, 200, "{slice}");
    assert_eq!(slice["text"], "line 1");
    assert_eq!(slice["total_chars"], output.chars().count());
    assert_eq!(
        logged(&server, "t", false).await[2].1,
        output,
        "the log is whole"
    );

    // Outside a session, the conversation keeps the output.
    let mut request = session_chat("unused", vec![]);
    request["messages"] = json!([
        user("list again"),
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": output},
    ]);
    request.as_object_mut().unwrap().remove("memory_session");
    request["memory_id"] = json!("plain");
    request["memory_strategy"] = json!({"mode": "auto", "offload_tokens": 100});
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), request).await;
    assert_eq!(status, 200, "{body}");
    let (status, slice) = get(&format!(
        "{}/v1/conversations/plain/tool-outputs/call_7?offset=0&limit=6",
        server.url
    ))
    .await;
    assert_eq!(
        (status, slice["text"].as_str()),
        (200, Some("line 0")),
        "{slice}"
    );
    let (status, _) = get(&format!(
        "{}/v1/conversations/plain/tool-outputs/call_9",
        server.url
    ))
    .await;
    assert_eq!(
        status, 404,
        "the session's output is not the conversation's"
    );

    for (path, expected) in [
        ("t/tool-outputs/call_0", 404),
        ("t/tool-outputs/..%2F..%2Fsession.yaml", 404),
        ("nope/tool-outputs/call_9", 404),
        ("t/tool-outputs/call_9?limit=0", 400),
    ] {
        let (status, body) = get(&format!("{}/v1/sessions/{path}", server.url)).await;
        assert_eq!(status, expected, "{path}: {body}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_search_finds_what_was_said_in_any_session() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    say(&server, "a", vec![user("The deploy key lives in vault.")]).await;
    say(&server, "b", vec![user("Lunch was ramen.")]).await;
    let (status, found) = get(&format!("{}/v1/history/search?q=DEPLOY%20key", server.url)).await;
    assert_eq!(status, 200, "{found}");
    let excerpts = found["excerpts"].as_array().unwrap();
    assert_eq!(excerpts.len(), 1);
    assert_eq!(excerpts[0]["session"], "a");
    let text = excerpts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("User: The deploy key lives in vault."),
        "{text}"
    );
    assert!(
        text.contains("Assistant: You said: The deploy key"),
        "{text}"
    );

    let (_, only_b) = get(&format!(
        "{}/v1/history/search?q=deploy&session=b",
        server.url
    ))
    .await;
    assert_eq!(only_b["excerpts"], json!([]));
    for query in [
        "q=",
        "q=x&session=a&conversation=default",
        "q=x&limit=11",
        "q=x&session=..",
    ] {
        let (status, body) = get(&format!("{}/v1/history/search?{query}", server.url)).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_notes_are_injected_updated_versioned_and_hand_edits_seen() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/agents/coder/memory", server.url);
    let notes: String = (1..=250).map(|i| format!("note {i}\n")).collect();
    let (status, body) = post(&url, json!({"text": notes})).await;
    assert_eq!(status, 200, "{body}");

    let mut request = chat("hello");
    request["memory_agent"] = json!("coder");
    let (status, _) = post(
        &format!("{}/v1/chat/completions", server.url),
        request.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let system = last_forwarded(&llm)["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let section = system.split("## Agent Memory\n").nth(1).unwrap();
    assert_eq!(section.lines().count(), 200);
    assert!(section.ends_with("note 200"), "{section}");

    let patch_url = |old: &str, new: &str| (url.clone(), json!({"old_text": old, "new_text": new}));
    let (u, b) = patch_url("note 249", "NOTE 249");
    let (status, body) = patch(&u, b).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["content"].as_str().unwrap().contains("NOTE 249"));
    let (u, b) = patch_url("absent", "x");
    let (status, body) = patch(&u, b).await;
    assert_eq!(status, 400);
    assert!(
        error_message(&body).contains("not in agents/coder/MEMORY.md"),
        "{body}"
    );
    let (u, b) = patch_url("note 1", "x");
    let (status, body) = patch(&u, b).await;
    assert_eq!(status, 400);
    assert!(error_message(&body).contains("occurs"), "{body}");

    // A hand edit is seen by the next request.
    std::fs::write(
        server.root.join("agents/coder/MEMORY.md"),
        "Edited by hand.\n",
    )
    .unwrap();
    post(&format!("{}/v1/chat/completions", server.url), request).await;
    let system = last_forwarded(&llm)["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(system, "## Agent Memory\nEdited by hand.");

    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "--", "agents/coder/MEMORY.md"])
        .current_dir(&server.root)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("update the notes of agent coder"), "{log}");
    assert!(log.contains("append to the notes of agent coder"), "{log}");

    let (status, body) = get(&format!("{}/v1/agents/..%2Fx/memory", server.url)).await;
    assert_eq!(status, 400, "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_answers_and_tool_calls_are_in_the_log_before_the_next_request() {
    let llm = ScriptedLlm::with_handler(|request: &ChatRequest| {
        let text = request.last_user_message().unwrap_or_default();
        if text.ends_with("run ls") {
            let body = json!({"id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": null, "refusal": null, "tool_calls": [
                        {"id": "call_ls", "type": "function",
                         "function": {"name": "ls", "arguments": "{}"}}]}}]});
            return Reply::Raw {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: body.to_string(),
            };
        }
        model(request)
    })
    .await;
    let server = Server::start(Some(llm.base_url())).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let mut request = session_chat("st", vec![user("stream this")]);
    request["stream"] = json!(true);
    let body = http()
        .post(&url)
        .json(&request)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("[DONE]"), "{body}");
    // At once: the streamed answer is in the history the next request continues.
    say(&server, "st", vec![user("run ls")]).await;
    let sent = forwarded_texts(&llm);
    assert_eq!(sent[1], "You said: stream this", "{sent:?}");

    // The tool call was logged; the client sends only the tool's result.
    say(
        &server,
        "st",
        vec![json!({"role": "tool", "tool_call_id": "call_ls", "content": "a.txt"})],
    )
    .await;
    let forwarded = last_forwarded(&llm);
    let messages = forwarded["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["id"],
        "call_ls",
        "{forwarded}"
    );
    assert!(
        messages[n - 2].get("refusal").is_none(),
        "SDK extras are not logged"
    );
    assert_eq!(messages[n - 1]["content"], "a.txt");
    assert_eq!(logged(&server, "st", false).await.len(), 6);
    server.shutdown().await;
}
