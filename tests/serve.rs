//! `mnemo serve` as a person starts it, without an upstream: the real binary brings up the
//! local LLM and takes it down on exit; with `--no-local-llm` chat answers 503.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;

/// `mnemo serve` on a free port with no upstream and no tokens configured, plus `extra`
/// arguments and `env` variables.
fn command(store: &Path, extra: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .args(["serve", "--port", "0", "--memory-path"])
        .arg(store)
        .args(extra)
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_API_TOKEN")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied());
    command
}

/// Starts `mnemo serve` on a free port with no upstream configured; returns the process and
/// its base URL, read from the banner.
fn serve(store: &Path, extra: &[&str]) -> (Child, String) {
    serve_with(store, extra, &[])
}

fn serve_with(store: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    support::spawn_server(&mut command(store, extra, env))
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn get(url: &str) -> Value {
    let response = http().get(url).send().await.unwrap();
    response.json().await.unwrap_or(Value::Null)
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = http().post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The processes `pid` started.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let text = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap();
        found.extend(text.split_whitespace().map(|p| p.parse::<u32>().unwrap()));
    }
    found
}

fn alive(pid: u32) -> bool {
    // A zombie has been stopped but not yet reaped by its parent; it no longer runs.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: sends a signal to the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    child.wait().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_upstream_the_local_llm_is_started_and_stopped_with_the_server() {
    let store = tempfile::tempdir().unwrap();
    let (mut server, url) = serve(store.path(), &[]);
    let health = get(&format!("{url}/health")).await;
    assert_eq!(health["status"], "ok", "{health}");
    let upstream = &health["upstream"];
    assert!(
        upstream["label"]
            .as_str()
            .is_some_and(|l| l.starts_with("local LLM")),
        "{health}"
    );
    assert_eq!(upstream["reachable"], true, "{health}");
    let local_llm = children(server.id());
    assert!(
        !local_llm.is_empty(),
        "the local LLM runs as a child of mnemo serve"
    );
    // The local LLM answers to any model name, and its slot is the window whatever the
    // name: not the 128,000 tokens the bundled data knows for gpt-4o.
    let chat = json!({
        "model": "gpt-4o",
        "max_tokens": 4,
        "memory_learn": false,
        "messages": [{"role": "user", "content": "Say hi."}]
    });
    let (status, answer) = post(&format!("{url}/v1/chat/completions"), &chat).await;
    if status != 200 {
        terminate(&mut server);
        panic!("{answer}");
    }
    let context = answer["memory_context"].clone();

    // Stopped before the checks: a server left running would hold the test's stderr open.
    let status = terminate(&mut server);
    assert_eq!(context["window_source"], "config", "{context}");
    let window = context["window"].as_u64().unwrap_or_default();
    assert!((512..=4096).contains(&window), "{context}");
    assert!(status.success(), "mnemo serve exited with {status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while local_llm.iter().any(|&pid| alive(pid)) {
        assert!(
            Instant::now() < deadline,
            "the local LLM outlived mnemo serve: {local_llm:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_local_llm_chat_answers_503_and_memories_still_work() {
    let store = tempfile::tempdir().unwrap();
    let (mut server, url) = serve(store.path(), &["--no-local-llm"]);
    assert!(children(server.id()).is_empty(), "no local LLM started");
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hello there."}]});
    let (status, body) = post(&format!("{url}/v1/chat/completions"), &chat).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "upstream_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no upstream LLM is configured"),
        "{body}"
    );
    let health = get(&format!("{url}/health")).await;
    assert_eq!(health["status"], "degraded");
    assert_eq!(health["upstream"], Value::Null);
    // The memory API needs no LLM.
    let (status, added) = post(
        &format!("{url}/v1/memories"),
        &json!({"content": "The spare key is under the mat."}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    // The web view of the same binary shows it.
    let page = http().get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.url().path(), "/ui/", "GET / leads to the web view");
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("/ui/conversations/default"));
    let status = terminate(&mut server);
    assert!(status.success(), "mnemo serve exited with {status}");
    // A chat no model answered stored no turn (the client sends it again).
    let turns = store.path().join("entries/default/turns/user");
    assert!(!turns.exists(), "a refused chat stored a turn");
}

/// Runs `mnemo serve` expecting it to refuse to start: its exit code, stdout and stderr.
/// One that starts anyway is killed after a while, and the test fails on its exit code.
fn refused(store: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut child = command(store, extra, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn beyond_loopback_it_refuses_to_start_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // 192.0.2.1 (TEST-NET-1) is no address of this machine: even a server that failed to
    // refuse could not bind it. Only once that refusal is seen is 0.0.0.0 tried.
    for host in ["192.0.2.1", "0.0.0.0"] {
        let (code, stdout, stderr) = refused(&store, &["--host", host], &[]);
        assert_eq!(code, Some(2), "--host {host}: invalid usage\n{stderr}");
        assert!(
            stderr.contains(&format!(
                "refusing to listen on {host}:0 without authentication"
            )) && stderr.contains("MNEMO_API_TOKEN")
                && stderr.contains("[[server.tokens]]"),
            "{stderr}"
        );
        assert!(stdout.is_empty(), "no banner: it never listened: {stdout}");
        assert!(!store.exists(), "the store was not even opened");
    }
}

#[test]
fn a_short_or_missing_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (code, _, stderr) = refused(&store, &[], &[("MNEMO_API_TOKEN", "short")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("MNEMO_API_TOKEN: the token is 5 characters long")
            && stderr.contains("at least 16"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("short"),
        "the token is not echoed: {stderr}"
    );

    let config = dir.path().join("mnemo.toml");
    std::fs::write(
        &config,
        "[[server.tokens]]\nname = \"alice\"\ntoken_env = \"MNEMO_TEST_UNSET_TOKEN\"\nconversations = [\"alice\"]\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (code, _, stderr) = refused(&store, &[], &[("MNEMO_CONFIG", config)]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "server.tokens[0] (alice): token_env names MNEMO_TEST_UNSET_TOKEN, which is not set"
        ),
        "{stderr}"
    );
    assert!(!store.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_token_every_memory_call_needs_it() {
    let store = tempfile::tempdir().unwrap();
    let token = "a-token-for-the-real-binary";
    let (mut server, url) = serve_with(
        store.path(),
        &["--no-local-llm"],
        &[("MNEMO_API_TOKEN", token)],
    );
    let memories = format!("{url}/v1/memories");
    let response = http().get(&memories).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers().contains_key("www-authenticate"));
    let response = http()
        .get(&memories)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(get(&format!("{url}/health")).await["status"], "degraded");
    let status = terminate(&mut server);
    assert!(status.success(), "mnemo serve exited with {status}");
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: sends a signal to the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_waits_a_grace_period_and_the_next_start_resumes_what_is_left() {
    use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
    let store = tempfile::tempdir().unwrap();
    let pending = store.path().join("pending");
    // Answers chats, never the write path's calls: every pass hangs.
    let silent = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some(_) => Reply::Hang,
        None => Reply::text("Noted."),
    })
    .await;
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "My wife is Anne."}]});

    let (mut server, url) = serve_with(
        store.path(),
        &["--shutdown-grace-secs", "1"],
        &[("MNEMO_OPENAI_BASE_URL", &silent.base_url())],
    );
    let (status, body) = post(&format!("{url}/v1/chat/completions"), &chat).await;
    assert_eq!(status, 200, "{body}");
    let asked = Instant::now();
    let status = terminate(&mut server);
    assert!(status.success(), "{status}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(count(&pending), 1, "the unfinished pass is journaled");
    assert_eq!(
        count(&store.path().join("entries/default/turns/assistant")),
        1
    );

    // The next start, with an upstream that answers, finishes it.
    let answering = ScriptedLlm::with_handler(|r: &ChatRequest| match r.schema_name() {
        Some("facts") => Reply::Json(json!({"facts": ["The user's wife is Anne."]})),
        Some("summary") => Reply::Json(json!({"summary": "The user's wife is Anne."})),
        Some(_) => Reply::Json(json!({"operations": []})),
        None => Reply::text("ok"),
    })
    .await;
    let (mut server, _) = serve_with(
        store.path(),
        &[],
        &[("MNEMO_OPENAI_BASE_URL", &answering.base_url())],
    );
    let facts = store.path().join("entries/default/facts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&facts) == 0 || count(&pending) > 0 {
        assert!(Instant::now() < deadline, "the queued pass was not resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(terminate(&mut server).success());
    assert_eq!(
        count(&store.path().join("entries/default/turns/assistant")),
        1,
        "the answer is stored once"
    );

    // A second Ctrl-C does not wait for the grace period.
    let (mut server, url) = serve_with(
        store.path(),
        &["--shutdown-grace-secs", "600"],
        &[("MNEMO_OPENAI_BASE_URL", &silent.base_url())],
    );
    let (status, _) = post(&format!("{url}/v1/chat/completions"), &chat).await;
    assert_eq!(status, 200);
    let asked = Instant::now();
    signal(&server, libc::SIGINT);
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(&server, libc::SIGINT);
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(count(&pending), 1, "journaled for the next start");

    // Journaled before the answer is sent: a SIGKILL right after it loses nothing.
    let (mut server, url) = serve_with(
        store.path(),
        &[],
        &[("MNEMO_OPENAI_BASE_URL", &silent.base_url())],
    );
    let (status, _) = post(&format!("{url}/v1/chat/completions"), &chat).await;
    assert_eq!(status, 200);
    signal(&server, libc::SIGKILL);
    server.wait().unwrap();
    assert_eq!(
        count(&pending),
        2,
        "the new pass is journaled beside the old one"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_index_server_answers_503_and_health_says_so_until_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    mnemo_test_support::skip_unless!(mnemo_test_support::qdrant::binary());
    let mut qdrant = mnemo_test_support::qdrant::LocalQdrant::start(&dir.path().join("qdrant"), 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let index_url = qdrant.grpc_url(0);
    let store = dir.path().join("store");
    let (server, url) = serve_with(
        &store,
        &["--no-local-llm"],
        &[("MNEMO_INDEX_URL", &index_url)],
    );
    // Stopped even when an assertion fails, so no server outlives the test.
    let mut server = Stopped(server);
    let add = |text: &str| json!({"content": text, "conversation_id": "c1"});
    let (status, body) = post(&format!("{url}/v1/memories"), &add("I keep bees.")).await;
    assert_eq!(status, 201, "{body}");
    let health = get(&format!("{url}/health")).await;
    assert_eq!(health["index"]["backend"], "qdrant", "{health}");
    assert_eq!(health["index"]["url"], index_url.as_str(), "{health}");
    assert_eq!(health["index"]["points"], 1, "{health}");

    qdrant.kill(0);
    let response = http()
        .post(format!("{url}/v1/memories"))
        .json(&add("I play the cello."))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("2")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "index_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&index_url),
        "{body}"
    );
    let health = get(&format!("{url}/health")).await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["index"]["points"], Value::Null, "{health}");
    assert!(health["index"]["error"].as_str().is_some(), "{health}");

    qdrant.restart(0).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = post(&format!("{url}/v1/memories"), &add("I play the cello.")).await;
        if status == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(&format!("{url}/health")).await["index"]["points"], 2);
    assert!(terminate(&mut server.0).success());
}

/// A child process that is killed when dropped (a no-op once it has exited).
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// POSTs a memory whose content is `bytes` long; returns the status and the error message.
async fn post_memory_of(url: &str, bytes: usize) -> (u16, String) {
    let body = json!({"content": "x".repeat(bytes), "conversation_id": "c1"});
    let (status, answer) = post(&format!("{url}/v1/memories"), &body).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    (status, message.to_owned())
}

/// `mnemo serve --max-body-mib MIB --no-local-llm`; returns the server, its URL and what it
/// logged before it listened.
fn serve_with_max_body(store: &Path, mib: &str) -> (Child, String, String) {
    let log = store.with_extension("log");
    let file = std::fs::File::create(&log).unwrap();
    let (server, url) = support::spawn_server_with_stderr(
        &mut command(store, &["--no-local-llm", "--max-body-mib", mib], &[]),
        file.into(),
    );
    // The limit is settled, and warned about, before the banner is printed.
    let logged = std::fs::read_to_string(&log).unwrap();
    (server, url, logged)
}

#[tokio::test(flavor = "multi_thread")]
async fn max_body_mib_is_brought_within_1_to_1024_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();

    // 0 would refuse every body: it is 1 MiB.
    let (server, url, logged) = serve_with_max_body(&dir.path().join("zero"), "0");
    let server = Stopped(server);
    assert!(
        logged.contains("--max-body-mib 0 is outside 1 to 1024; using 1"),
        "{logged}"
    );
    let (status, message) = post_memory_of(&url, 2 << 20).await;
    assert_eq!(status, 413, "{message}");
    assert!(message.contains("larger than 1048576 bytes"), "{message}");
    // Under the limit the body is read; its memory is then too long to keep (400).
    let (status, message) = post_memory_of(&url, 512 << 10).await;
    assert_eq!(status, 400, "{message}");
    drop(server);

    // 2^44 MiB is 2^64 bytes, which would wrap to a limit of 0: it is 1024 MiB.
    let (server, url, logged) = serve_with_max_body(&dir.path().join("huge"), "17592186044416");
    let _server = Stopped(server);
    assert!(
        logged.contains("--max-body-mib 17592186044416 is outside 1 to 1024; using 1024"),
        "{logged}"
    );
    let (status, message) = post_memory_of(&url, 9 << 20).await;
    assert_eq!(status, 400, "9 MiB is read: {message}");
}
