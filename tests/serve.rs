//! `mnemo serve` as a person starts it, without an upstream: the real binary brings up the
//! local LLM and takes it down on exit; with `--no-local-llm` chat answers 503.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Starts `mnemo serve` on a free port with no upstream configured; returns the process and
/// its base URL, read from the banner.
fn serve(store: &Path, extra: &[&str]) -> (Child, String) {
    serve_with(store, None, extra)
}

/// [`serve`], with `upstream` as the upstream LLM when given.
fn serve_with(store: &Path, upstream: Option<&str>, extra: &[&str]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    match upstream {
        Some(url) => command.env("MNEMO_OPENAI_BASE_URL", url),
        None => command.env_remove("MNEMO_OPENAI_BASE_URL"),
    };
    let mut child = command
        .args(["serve", "--port", "0", "--memory-path"])
        .arg(store)
        .args(extra)
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = lines.next().expect("a banner").expect("the banner is text");
    // Keep draining, so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let url = banner
        .strip_prefix("mnemo listening on ")
        .unwrap_or_else(|| panic!("the banner names the address: {banner}"))
        .to_owned();
    (child, url)
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

    let status = terminate(&mut server);
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
    // The user's words were kept, and the memory API needs no LLM.
    let (status, added) = post(
        &format!("{url}/v1/memories"),
        &json!({"content": "The spare key is under the mat."}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    let status = terminate(&mut server);
    assert!(status.success(), "mnemo serve exited with {status}");
    let turns = store.path().join("entries/default/turns/user");
    assert_eq!(std::fs::read_dir(turns).unwrap().count(), 1);
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
        Some(&silent.base_url()),
        &["--shutdown-grace-secs", "1"],
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
    let (mut server, _) = serve_with(store.path(), Some(&answering.base_url()), &[]);
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
        Some(&silent.base_url()),
        &["--shutdown-grace-secs", "600"],
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
}
