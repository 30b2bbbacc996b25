//! The official `openai` Python SDK (installed by `scripts/setup test`) talking to the real
//! `mnemo serve` binary, in front of a scripted upstream. mnemo requires a bearer token
//! (`MNEMO_API_TOKEN`), which the SDK sends as its `api_key`.

use std::path::PathBuf;
use std::process::Command;

use mnemo_scripted_llm::{add_every_fact, echo, ChatRequest, Reply, ScriptedLlm};
use serde_json::json;

mod support;

/// mnemo's token: the SDK's `api_key`, never seen by the upstream.
const TOKEN: &str = "sdk-token-0123456789";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Echoes chats, and answers mnemo's own calls as a model would: the sister's city as a
/// fact, every new fact added, a one-line summary.
fn model(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => {
            let facts: Vec<String> = message
                .strip_prefix("My sister lives in ")
                .map(|city| format!("The user's sister lives in {city}"))
                .into_iter()
                .collect();
            Reply::Json(json!({ "facts": facts }))
        }
        Some("memory_operations") => add_every_fact(request),
        Some("summary") => Reply::Json(json!({"summary": "The user's sister lives in Oslo."})),
        _ if is_summary_call(request) => {
            Reply::text("The agent read files 0 to 40 with read_file; each defines helpers.")
        }
        _ => echo(request),
    }
}

/// Whether `request` is context governance asking for a summary.
fn is_summary_call(request: &ChatRequest) -> bool {
    request
        .system_prompt()
        .is_some_and(|s| s.starts_with("You are a conversation summariser"))
}

/// The third call of the session sent only its new message; the upstream got all five.
fn check_server_side_history(upstream: &ScriptedLlm) {
    let third = upstream
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .find(|b| {
            b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .is_some_and(|c| c.ends_with("Session three: their names?"))
        })
        .expect("the third session call went upstream");
    let texts: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts.len(), 5, "{texts:?}");
    assert_eq!(texts[0], "Session one: my cat is Tom.");
    assert_eq!(texts[2], "Session two: my dog is Rex.");
    assert_eq!(third["memory_session"], serde_json::Value::Null);
}

/// Checks what the upstream got for the governed tool history: a valid request (every tool
/// result answers a call just before it, no mnemo-only fields), smaller than what was sent.
fn check_governed_requests(upstream: &ScriptedLlm) {
    let governed: Vec<serde_json::Value> = upstream
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .filter(|b| {
            b["messages"].as_array().is_some_and(|m| {
                m.iter().any(|m| {
                    m["content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("[Summary of"))
                })
            })
        })
        .collect();
    assert_eq!(governed.len(), 2, "the governed request and its resend");
    let summary_calls = upstream
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .filter(|b| {
            b["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("You are a conversation summariser"))
        })
        .count();
    assert!(
        summary_calls >= 1,
        "the middle was summarised by the upstream"
    );
    for body in governed {
        let messages = body["messages"].as_array().unwrap();
        assert!(
            messages.len() < 200,
            "{} messages went upstream",
            messages.len()
        );
        let mut open_calls: Vec<String> = Vec::new();
        for message in messages {
            assert!(
                message.get("compacted").is_none(),
                "mnemo's mark is stripped: {message}"
            );
            match message["role"].as_str().unwrap() {
                "assistant" => {
                    open_calls = message["tool_calls"]
                        .as_array()
                        .map(|calls| {
                            calls
                                .iter()
                                .map(|c| c["id"].as_str().unwrap().to_owned())
                                .collect()
                        })
                        .unwrap_or_default();
                }
                "tool" => {
                    let id = message["tool_call_id"].as_str().unwrap();
                    assert!(
                        open_calls.iter().any(|c| c == id),
                        "an orphaned result went upstream: {id}"
                    );
                }
                _ => open_calls.clear(),
            }
        }
        let sent: usize = messages.iter().map(|m| m.to_string().len()).sum();
        assert!(sent < 100_000, "the governed request is {sent} bytes");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdk_works_against_mnemo_serve() {
    let python = root().join("models/python/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `scripts/setup test`",
        python.display()
    );
    let upstream = ScriptedLlm::with_handler(model).await;
    let store = tempfile::tempdir().unwrap();
    let (mut server, url) = support::spawn_server(
        Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["serve", "--port", "0", "--memory-path"])
            .arg(store.path())
            .env("MNEMO_OPENAI_BASE_URL", upstream.base_url())
            .env("MNEMO_START_WATCHER", "false")
            .env("MNEMO_API_TOKEN", TOKEN)
            .env_remove("MNEMO_CONFIG"),
    );

    let sdk = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(root().join("tests/python/openai_sdk.py"))
            .arg(&url)
            .arg(TOKEN)
            .env("NO_PROXY", "127.0.0.1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    // SIGTERM: a graceful stop, exit status 0.
    // SAFETY: sends a signal to the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let status = server.wait().unwrap();
    support::assert_script_passed(&sdk, "openai sdk: ok");
    assert!(status.success(), "mnemo serve exited with {status}");
    check_governed_requests(&upstream);
    check_server_side_history(&upstream);
    for request in upstream.requests() {
        for value in request.headers.values() {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(!value.contains(TOKEN), "mnemo's token went upstream");
        }
    }
    let turns = store.path().join("entries/sdk/turns/user");
    // Three accepted requests; the one with a hostile memory_id wrote nothing.
    assert_eq!(std::fs::read_dir(turns).unwrap().count(), 3);
    // The write path ran on what the SDK sent: the fact, and the summary.
    let facts: Vec<String> = std::fs::read_dir(store.path().join("entries/sdk/facts"))
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(
        facts[0].contains("The user's sister lives in Oslo."),
        "{}",
        facts[0]
    );
    let summary = store.path().join("entries/sdk/summaries/summary.md");
    assert!(std::fs::read_to_string(summary)
        .unwrap()
        .contains("sister lives in Oslo"));
}

/// The SDK scripts check with `check` and `fail` (`tests/python/checks.py`), never with
/// `assert`: `python -O` or `PYTHONOPTIMIZE` in the environment removes every `assert`, and a
/// script without its checks passes having checked nothing.
#[test]
fn the_sdk_scripts_check_explicitly_and_their_checks_survive_pythonoptimize() {
    let python = root().join("models/python/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `scripts/setup test`",
        python.display()
    );
    let scripts = root().join("tests/python");
    let asserts = r#"
import ast, pathlib, sys
paths = sorted(pathlib.Path(sys.argv[1]).glob("*.py"))
print(len(paths))
for path in paths:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assert):
            print(f"{path.name}:{node.lineno}")
"#;
    let found = Command::new(&python)
        .args(["-c", asserts])
        .arg(&scripts)
        .output()
        .unwrap();
    assert!(found.status.success(), "{found:?}");
    let found = String::from_utf8(found.stdout).unwrap();
    let mut lines = found.lines();
    let scanned: usize = lines.next().unwrap().parse().unwrap();
    assert!(
        scanned >= 3,
        "the scripts and checks.py were scanned: {scanned}"
    );
    let asserts: Vec<&str> = lines.collect();
    assert!(
        asserts.is_empty(),
        "`assert` in the SDK scripts, which PYTHONOPTIMIZE removes: {asserts:?}"
    );

    // A failing check still fails with optimisation on.
    let failed = Command::new(&python)
        .args([
            "-c",
            "from checks import check; check(1 == 2, 'one is not two')",
        ])
        .current_dir(&scripts)
        .env("PYTHONOPTIMIZE", "2")
        .output()
        .unwrap();
    assert!(
        !failed.status.success(),
        "a failed check passed: {failed:?}"
    );
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("CheckFailed: one is not two"), "{stderr}");
}
