//! A full disk and a store mnemo may not write, as an operator meets them: the store on a
//! small filesystem (a tmpfs) that another file fills. `mnemo serve` stays up, refuses
//! writes with 507 `insufficient_storage` in words that name no server path, says so in
//! `/health`, loses nothing it acknowledged, and writes again once space is back; a
//! write-path pass the full disk failed runs again by itself once there is room; a store on
//! a read-only filesystem is a clear error at start-up.
//!
//! Mounting a tmpfs needs root (CI has it): without it these tests say why and pass, and
//! under `CI=true` they fail.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::sync::{Arc, Mutex};

use mnemo_scripted_llm::{add_every_fact, echo, ChatRequest, Reply, ScriptedLlm};
use serde_json::{json, Value};

mod support;

use mnemo_test_support::full_disk::{fill, Tmpfs};

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn add(url: &str, text: &str) -> (u16, Value) {
    send(
        http()
            .post(format!("{url}/v1/memories"))
            .json(&json!({"texts": [text], "conversation_id": "disk"})),
    )
    .await
}

/// `mnemo serve` on the store at `root`, with `env` set and its log kept outside the disk
/// under test.
struct Served {
    server: std::process::Child,
    url: String,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Served {
    fn start(root: &Path, env: &[(&str, &str)]) -> Self {
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("stderr");
        let mut command = support::mnemo_command(root);
        command
            .args(["serve", "--port", "0", "--no-local-llm"])
            .env("MNEMO_START_WATCHER", "false")
            .envs(env.iter().copied());
        let (server, url) = support::spawn_server_with_stderr(
            &mut command,
            Stdio::from(std::fs::File::create(&log).unwrap()),
        );
        Self {
            server,
            url,
            log,
            _log_dir: log_dir,
        }
    }

    /// The log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// Stops the server; returns its whole log.
    fn stop(mut self) -> String {
        self.server.kill().unwrap();
        self.server.wait().unwrap();
        self.log()
    }
}

async fn health(url: &str) -> Value {
    send(http().get(format!("{url}/health"))).await.1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_refuses_writes_with_507_and_loses_nothing() {
    let Some(fs) = mnemo_test_support::require(Tmpfs::mount("64m")) else {
        return;
    };
    let root = fs.path().join("store");
    let served = Served::start(&root, &[("RUST_BACKTRACE", "1")]);
    let url = served.url.clone();

    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let (status, body) = add(&url, &format!("The user keeps box {i} in the attic.")).await;
        assert_eq!(status, 201, "{body}");
        acknowledged.push(body["added"][0]["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(health(&url).await["storage"]["full"], false);

    let filler = fill(fs.path());
    // Long enough for the background flusher to meet the full disk.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let server_path = fs.path().to_string_lossy().into_owned();
    for i in 0..3 {
        let (status, body) = add(&url, &format!("The user keeps crate {i} in the cellar.")).await;
        assert_eq!(status, 507, "{body}");
        assert_eq!(body["error"]["type"], "insufficient_storage", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("disk"), "{message}");
        assert!(
            !message.contains(&server_path),
            "names a server path: {message}"
        );
    }
    // A delete needs room for its tombstone: refused the same way, the memory kept.
    let (status, body) =
        send(http().delete(format!("{url}/v1/memories/{}", acknowledged[0]))).await;
    assert_eq!(status, 507, "{body}");
    let full = health(&url).await;
    assert_eq!(full["status"], "degraded", "{full}");
    assert_eq!(full["storage"]["full"], true, "{full}");
    // Still up, and still answering what needs no disk.
    let (status, found) = send(
        http()
            .post(format!("{url}/v1/memories/search"))
            .json(&json!({"query": "where is box 3", "conversation_id": "disk"})),
    )
    .await;
    assert_eq!(status, 200, "{found}");

    std::fs::remove_file(&filler).unwrap();
    let (status, body) = add(&url, "The user keeps the sled in the shed.").await;
    assert_eq!(status, 201, "writes work again once space is back: {body}");
    acknowledged.push(body["added"][0]["id"].as_str().unwrap().to_owned());
    assert_eq!(health(&url).await["storage"]["full"], false);

    let listed = listed(&url).await;
    let listed: Vec<&str> = listed.iter().map(|m| m["id"].as_str().unwrap()).collect();
    for id in &acknowledged {
        assert!(listed.contains(&id.as_str()), "acknowledged {id} is lost");
    }
    assert_eq!(
        listed.len(),
        acknowledged.len(),
        "no refused write was kept"
    );
    // The index's flushes failed meanwhile (qdrant-edge panics when one does): contained,
    // and said once in the log, not as a panic with its backtrace every half second.
    let log = served.stop();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        log.matches("cannot flush the index and its snapshot")
            .count()
            <= 1,
        "{log}"
    );
    assert!(!log.contains("backtrace"), "{log}");
}

/// The live memories of conversation `disk`, as `GET /v1/memories` lists them.
async fn listed(url: &str) -> Vec<Value> {
    let (status, listed) =
        send(http().get(format!("{url}/v1/memories?conversation_id=disk&limit=100"))).await;
    assert_eq!(status, 200, "{listed}");
    listed["items"].as_array().unwrap().clone()
}

/// The facts of conversation `disk` as listed now.
async fn facts(url: &str) -> Vec<String> {
    listed(url)
        .await
        .iter()
        .filter(|m| m["role"] == "memory")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pass_the_full_disk_failed_runs_again_once_there_is_room() {
    let Some(fs) = mnemo_test_support::require(Tmpfs::mount("64m")) else {
        return;
    };
    let root = fs.path().join("store");
    // The model fills the disk as it is asked for the turn's facts: the chat was answered
    // and its turn stored, and the pass meets a full disk when it writes the fact.
    // (the filler, once made)
    let filler: Arc<Mutex<Option<Option<PathBuf>>>> = Arc::default();
    let llm = {
        let (filler, disk) = (filler.clone(), fs.path().to_owned());
        ScriptedLlm::with_handler(move |request: &ChatRequest| match request.schema_name() {
            Some("facts") => {
                let mut filler = filler.lock().unwrap();
                if filler.is_none() {
                    *filler = Some(Some(fill(&disk)));
                }
                Reply::Json(json!({"facts": ["The user keeps the kayak in the boathouse."]}))
            }
            Some("memory_operations") => add_every_fact(request),
            Some("summary") => Reply::Json(json!({"summary": "The user has a kayak."})),
            _ => echo(request),
        })
        .await
    };
    let served = Served::start(&root, &[("MNEMO_OPENAI_BASE_URL", &llm.base_url())]);
    let url = served.url.clone();
    let (status, answer) = send(
        http()
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({
                "model": "scripted",
                "memory_id": "disk",
                "messages": [{"role": "user", "content": "I keep the kayak in the boathouse."}],
            })),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !served
        .log()
        .contains("failed write-path passes run again once it has room")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the pass never met the full disk: {}",
            served.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        facts(&url).await.is_empty(),
        "nothing was learnt on a full disk"
    );

    let filled = filler.lock().unwrap().as_mut().unwrap().take().unwrap();
    std::fs::remove_file(filled).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let learnt = facts(&url).await;
        if !learnt.is_empty() {
            assert_eq!(learnt, ["The user keeps the kayak in the boathouse."]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pass did not run again once there was room: {}",
            served.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = served.stop();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_read_only_store_is_a_clear_error_at_start_up() {
    let Some(fs) = mnemo_test_support::require(Tmpfs::mount("64m")) else {
        return;
    };
    let root = fs.path().join("store");
    let made = support::mnemo_command(&root)
        .args(["add", "-c", "disk", "The user likes green tea."])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    fs.remount_read_only();

    let started = support::mnemo_command(&root)
        .args(["serve", "--port", "0", "--no-local-llm"])
        .output()
        .unwrap();
    assert!(!started.status.success(), "a read-only store was served");
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert!(
        stderr.contains("cannot be written (a read-only file system)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("cannot be written").count(),
        1,
        "said once: {stderr}"
    );
}
