//! The official MCP Python SDK (installed by `scripts/setup test`) as an MCP host would use
//! it, over stdio (`mnemo mcp`) and over streamable HTTP (`/mcp` on `mnemo serve`): every
//! tool, good calls and bad, and the resources. The checks are in
//! `tests/python/mcp_client.py`. Around them, the other front ends and MCP see each other's
//! memories: the command line over stdio, the proxy's retrieval over HTTP.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};

mod support;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `mnemo ARGS --memory-path STORE`, which must succeed.
fn mnemo(store: &Path, args: &[&str]) -> Output {
    let output = support::mnemo_command(store)
        .args(args)
        .env("MNEMO_START_WATCHER", "false")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "mnemo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The test tools' Python, with the `mcp` SDK.
fn python() -> PathBuf {
    let python = root().join("models/python/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `scripts/setup test`",
        python.display()
    );
    python
}

#[test]
fn the_mcp_sdk_works_against_mnemo_mcp_over_stdio() {
    let python = python();
    let parent = tempfile::tempdir().unwrap();
    let store = parent.path().join("store");
    mnemo(
        &store,
        &["add", "-c", "mcp", "The user's dog is called Rex."],
    );
    let sdk = Command::new(python)
        .arg(root().join("tests/python/mcp_client.py"))
        .arg("stdio")
        .arg(env!("CARGO_BIN_EXE_mnemo"))
        .arg(&store)
        .current_dir(root())
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .output()
        .unwrap();
    support::assert_script_passed(&sdk, "mcp stdio: ok");
    // What MCP added is found by the command line's search.
    let found = mnemo(&store, &["search", "tea or coffee?", "-c", "mcp", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert_eq!(
        hits[0]["content"], "The user drinks tea, not coffee.",
        "{hits}"
    );
    // The store was written where it was named, and nothing beside it; the refused
    // conversation `../x` made no folder anywhere.
    assert!(store.join("entries/mcp").is_dir());
    assert!(!store.join("x").exists());
    let beside: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, vec![std::ffi::OsString::from("store")]);
}

const TOKEN: &str = "mcp-test-token-full-0001";
const SCOPED: &str = "mcp-test-token-other-0001";

/// The upstream: facts are the user's words, the summary repeats them, and a chat answer
/// says which memories were injected (so the test sees the proxy's retrieval).
fn upstream(request: &ChatRequest) -> Reply {
    let user = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": [format!("The user said: {user}")]})),
        Some("summary") => Reply::Json(json!({"summary": "The user has a cat called Miso."})),
        Some(_) => Reply::Json(json!({"operations": []})),
        None => Reply::text("Noted."),
    }
}

/// A server process, stopped when the test ends, passed or not.
struct Server(Child);

impl Server {
    /// SIGTERM, as a person's Ctrl-C; whether it exited cleanly.
    fn stop(mut self) -> bool {
        // SAFETY: signals the child this test started.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        self.0.wait().unwrap().success()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mnemo serve` on a free port with the scripted upstream and two tokens: TOKEN (full
/// access) and SCOPED (conversation `other` only). Returns the process and its URL.
fn serve(store: &Path, config: &Path, upstream: &str) -> (Server, String) {
    let (child, url) = support::spawn_server(
        Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["serve", "--port", "0", "--memory-path"])
            .arg(store)
            .arg("--config")
            .arg(config)
            .env("MNEMO_START_WATCHER", "false")
            .env("MNEMO_OPENAI_BASE_URL", upstream)
            .env("MNEMO_API_TOKEN", TOKEN)
            .env("MNEMO_TEST_SCOPED_TOKEN", SCOPED)
            .env_remove("MNEMO_CONFIG")
            .env_remove("RUST_LOG"),
    );
    (Server(child), url)
}

async fn chat(url: &str, body: Value) -> Value {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_sdk_works_against_mnemo_serve_over_http() {
    let llm = ScriptedLlm::with_handler(upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let config = dir.path().join("mnemo.toml");
    std::fs::write(
        &config,
        "[[server.tokens]]\nname = \"other\"\ntoken_env = \"MNEMO_TEST_SCOPED_TOKEN\"\nconversations = [\"other\"]\nglobal = \"none\"\n",
    )
    .unwrap();
    let (server, url) = serve(&store, &config, &llm.base_url());

    // Through the proxy: a session in conversation `mcp`, with a tool output offloaded.
    let output: String = (0..400).map(|i| format!("line {i}\n")).collect();
    let answer = chat(
        &url,
        json!({
            "model": "m",
            "memory_id": "mcp",
            "memory_session": "s1",
            "memory_strategy": {"mode": "auto", "offload_tokens": 100},
            "messages": [
                {"role": "user", "content": "list the files"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": output},
                {"role": "user", "content": "My cat is called Miso."},
            ],
        }),
    )
    .await;
    assert_eq!(
        answer["memory_context"]["offloaded"],
        json!(["call_9"]),
        "{answer}"
    );
    // The write path learns the fact and writes the summary in the background.
    let summary = store.join("entries/mcp/summaries");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !summary.is_dir() || std::fs::read_dir(&summary).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "no summary was written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let sdk = Command::new(python())
        .arg(root().join("tests/python/mcp_client.py"))
        .args(["http", &url, TOKEN, SCOPED])
        .current_dir(root())
        .output()
        .unwrap();
    support::assert_script_passed(&sdk, "mcp http: ok");

    // `mnemo mcp` on the store the server holds forwards to the server's /mcp.
    assert!(
        store.join(".mnemo.serve").is_file(),
        "the server announces itself"
    );
    let answers = through_mnemo_mcp(
        &store,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "search_memories",
                "arguments": {"query": "tea or coffee", "conversation": "mcp"}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "search_memories",
                "arguments": {"query": "q".repeat(4097), "conversation": "mcp"}}}),
        ],
    );
    assert_eq!(answers.len(), 3, "{answers:?}");
    let refused = answers.iter().find(|a| a["id"] == 3).unwrap();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        refused["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("a query holds at most 4096")),
        "a query has the same limit over MCP: {refused}"
    );
    let found = answers.iter().find(|a| a["id"] == 2).unwrap();
    assert_eq!(
        found["result"]["structuredContent"]["hits"][0]["content"],
        "The user drinks tea, not coffee.",
        "{found}"
    );

    // What MCP added is injected by the proxy's retrieval.
    let answer = chat(
        &url,
        json!({
            "model": "m",
            "memory_id": "mcp",
            "messages": [{"role": "user", "content": "Tea or coffee for me?"}],
        }),
    )
    .await;
    let injected: Vec<&str> = answer["memory_hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|hit| hit["content"].as_str())
        .collect();
    assert!(
        injected.contains(&"The user drinks tea, not coffee."),
        "{injected:?}"
    );
    assert!(server.stop(), "the server exits cleanly");
    assert!(
        !store.join(".mnemo.serve").exists(),
        "the announcement goes with the server"
    );
}

/// Runs `mnemo mcp` on `store` (held by a server) with `messages` on its stdin; returns the
/// JSON-RPC messages it wrote to stdout.
fn through_mnemo_mcp(store: &Path, messages: &[Value]) -> Vec<Value> {
    use std::io::Write;
    let mut bridge = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["mcp", "--memory-path"])
        .arg(store)
        .env("MNEMO_API_TOKEN", TOKEN)
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = bridge.stdin.take().unwrap();
    for message in messages {
        writeln!(stdin, "{message}").unwrap();
    }
    drop(stdin);
    let output = bridge.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The most `mnemo mcp` passes on either way when it forwards (8 MiB, the server's default
/// body limit).
const BRIDGE_LIMIT: usize = 8 << 20;

/// A stand-in for `mnemo serve` behind the bridge, on a free loopback port: `/health`
/// answers, and `/mcp` answers each message with its size, or with a result of more than
/// [`BRIDGE_LIMIT`] bytes when its method is `big`. Returns the base URL and the size of
/// every message `/mcp` received.
async fn stand_in_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) {
    use axum::routing::{get, post};
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = received.clone();
    let mcp = move |body: axum::body::Bytes| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(body.len());
            let message: Value = serde_json::from_slice(&body).unwrap();
            let result = match message["method"].as_str() {
                Some("big") => json!({"padding": "x".repeat(BRIDGE_LIMIT)}),
                _ => json!({"bytes": body.len()}),
            };
            axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        }
    };
    let app = axum::Router::new()
        .route("/health", get(|| async { "{}" }))
        .route("/mcp", post(mcp))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// Runs `mnemo mcp --url URL` with `lines` on its stdin; returns its output.
fn bridge(url: &str, lines: Vec<String>) -> Output {
    use std::io::Write;
    let mut bridge = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["mcp", "--url", url])
        .env_remove("MNEMO_API_TOKEN")
        .env_remove("MNEMO_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = bridge.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for line in lines {
            // A bridge that stopped reading closes the pipe: what it did is in its output.
            if writeln!(stdin, "{line}").is_err() {
                return;
            }
        }
    });
    let output = bridge.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_passes_at_most_8_mib_each_way() {
    let (url, received) = stand_in_server().await;
    let message = |id: u64, method: &str, padding: usize| {
        let mut message =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"p": ""}});
        let bare = message.to_string().len();
        message["params"]["p"] = json!("x".repeat(padding.saturating_sub(bare)));
        message.to_string()
    };
    // One message of exactly the limit and a small one go through; an answer over the limit
    // becomes a JSON-RPC error for its request, and the bridge goes on.
    let lines = vec![
        message(1, "small", 0),
        message(2, "big", 0),
        message(3, "whole", BRIDGE_LIMIT),
    ];
    assert_eq!(lines[2].len(), BRIDGE_LIMIT);
    let run = tokio::task::spawn_blocking({
        let url = url.clone();
        move || bridge(&url, lines)
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{}: {stderr}", run.status);
    let answers: Vec<Value> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let answer = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {answers:?}"))
    };
    assert!(
        answer(1)["result"]["bytes"].as_u64().is_some(),
        "{}",
        answer(1)
    );
    assert_eq!(
        answer(3)["result"]["bytes"],
        BRIDGE_LIMIT,
        "passed on whole"
    );
    let error = &answer(2)["error"];
    assert_eq!(error["code"], -32603, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("at most {BRIDGE_LIMIT} are passed on"))),
        "{error}"
    );
    assert!(
        answers.iter().all(|a| a.to_string().len() < BRIDGE_LIMIT),
        "no answer over the limit reached the host"
    );

    // A message from the host over the limit stops the bridge, saying why, before it is sent.
    received.lock().unwrap().clear();
    let run = tokio::task::spawn_blocking(move || {
        bridge(
            &url,
            vec![
                message(4, "small", BRIDGE_LIMIT + 1),
                message(5, "small", 0),
            ],
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "the bridge went on: {stderr}");
    assert!(
        stderr.contains(&format!(
            "a message of {} bytes from the host; at most {BRIDGE_LIMIT} are passed on",
            BRIDGE_LIMIT + 1
        )),
        "{stderr}"
    );
    assert!(
        received.lock().unwrap().iter().all(|&n| n <= BRIDGE_LIMIT),
        "nothing over the limit reached the server: {:?}",
        received.lock().unwrap()
    );
}
