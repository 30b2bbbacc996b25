//! The real `mnemo serve` killed with SIGKILL during a burst of session writes: after a
//! restart every acknowledged message (and its answer) is in its session's log, exactly once;
//! a torn last line is skipped with a warning and cut off by the next append; the sessions
//! resume where they were.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mnemo_scripted_llm::{learns_nothing, ChatRequest, Reply, ScriptedLlm};

mod support;
use serde_json::{json, Value};

const SESSIONS: usize = 4;

fn serve(root: &Path, upstream: &str) -> (Child, String) {
    support::spawn_server_with_stderr(
        support::mnemo_command(root)
            .args(["serve", "--port", "0"])
            .env("MNEMO_START_WATCHER", "false")
            .env("MNEMO_OPENAI_BASE_URL", upstream)
            .env("MNEMO_MAX_ENTRIES", "100000"),
        Stdio::null(),
    )
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn model(request: &ChatRequest) -> Reply {
    learns_nothing(request).unwrap_or_else(|| {
        Reply::text(format!(
            "ack {}",
            request.last_user_message().unwrap_or_default()
        ))
    })
}

/// How a request to a server that was killed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
    /// Sent, and the connection died before the answer: the kill cut it short.
    CutShort,
    /// Nobody listened any more.
    Refused,
}

/// Sends `session` one new message (server-side history): its answer once acknowledged, or
/// how it went unanswered. Any answer but a 200 with content fails the test: only the kill
/// may stop a writer.
async fn say(url: &str, session: &str, text: &str) -> Result<String, Unanswered> {
    let body = json!({"model": "m", "memory_top_k": 0, "memory_session": session,
        "memory_history": "server", "messages": [{"role": "user", "content": text}]});
    let unanswered = |e: reqwest::Error| match e.is_connect() {
        true => Unanswered::Refused,
        false => Unanswered::CutShort,
    };
    let response = http()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(unanswered)?;
    let status = response.status();
    let answer: Value = response.json().await.map_err(unanswered)?;
    assert_eq!(status, 200, "{session}: {text:?} answered {answer}");
    let content = answer["choices"][0]["message"]["content"].as_str();
    Ok(content
        .unwrap_or_else(|| panic!("{session}: no content in {answer}"))
        .to_owned())
}

/// Waits until every session has had an answer in this run and `total` answers came in
/// all: the kill then lands in the middle of the burst, wherever the machine's speed put it.
async fn wait_for_answers(answered: &[AtomicUsize], total: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let counts: Vec<usize> = answered.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        if counts.iter().all(|&n| n > 0) && counts.iter().sum::<usize>() >= total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the sessions were not answered: {counts:?} answers"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn get_json(url: String) -> Value {
    http().get(url).send().await.unwrap().json().await.unwrap()
}

async fn logged(url: &str, session: &str) -> (Vec<String>, Value) {
    let page = get_json(format!(
        "{url}/v1/sessions/{session}/messages?all=true&limit=1000"
    ))
    .await;
    let texts = page["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|m| m["message"]["content"].as_str().unwrap_or("").to_owned())
        .collect();
    let info = get_json(format!("{url}/v1/sessions/{session}")).await;
    (texts, info)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_session_writes_loses_no_acknowledged_message() {
    let llm = ScriptedLlm::with_handler(model).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    println!("kill schedule seed: {seed}");
    // (session, message) -> the answer acknowledged with it.
    let mut acked: HashMap<(usize, String), String> = HashMap::new();
    // Writers whose last request was sent and never answered: the kill cut them short.
    let mut cut_short = 0;

    for round in 0..3u64 {
        let (mut child, url) = serve(&root, &llm.base_url());
        let answered: Arc<Vec<AtomicUsize>> =
            Arc::new((0..SESSIONS).map(|_| AtomicUsize::new(0)).collect());
        let writers: Vec<_> = (0..SESSIONS)
            .map(|s| {
                let (url, answered) = (url.clone(), answered.clone());
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for i in 0.. {
                        let text = format!("round {round} session {s} message {i}");
                        match say(&url, &format!("burst-{s}"), &text).await {
                            Ok(answer) => {
                                done.push((text, answer));
                                answered[s].fetch_add(1, Ordering::SeqCst);
                            }
                            Err(how) => return (done, how),
                        }
                    }
                    unreachable!("a writer writes until the server dies")
                })
            })
            .collect();
        // The kill comes after a number of answers the seed picks, not after a time: on a
        // slow machine a time could pass before anything was acknowledged.
        let extra = (seed.wrapping_mul(round + 7) % 40) as usize;
        wait_for_answers(&answered, SESSIONS + extra).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for (s, writer) in writers.into_iter().enumerate() {
            let (done, how) = writer.await.unwrap();
            cut_short += usize::from(how == Unanswered::CutShort);
            for (text, answer) in done {
                acked.insert((s, text), answer);
            }
        }
    }
    println!(
        "{} messages acknowledged over 3 killed runs; {cut_short} writers cut short",
        acked.len()
    );
    assert!(
        cut_short > 0,
        "every kill landed between requests: no write was in flight when the server died"
    );

    // A crash mid-append: a torn line at the end of one log.
    let torn = root.join("sessions/burst-0/messages.jsonl");
    let mut text = std::fs::read(&torn).unwrap();
    text.extend_from_slice(br#"{"kind":"message","at":"2026-11-2"#);
    std::fs::write(&torn, text).unwrap();

    let (mut child, url) = serve(&root, &llm.base_url());
    for s in 0..SESSIONS {
        let (texts, info) = logged(&url, &format!("burst-{s}")).await;
        for ((session, message), answer) in acked.iter().filter(|((session, _), _)| *session == s) {
            let count = texts.iter().filter(|t| *t == message).count();
            assert_eq!(
                count, 1,
                "session {session}: {message:?} logged {count} times"
            );
            assert!(
                texts.contains(answer),
                "session {session}: answer to {message:?} lost"
            );
        }
        if s == 0 {
            let skipped = info["skipped_lines"].to_string();
            assert!(skipped.contains("torn last line"), "{info}");
        }
    }
    // The session resumes: the next request carries its whole history, and the torn
    // fragment is gone from the log.
    llm.clear_requests();
    let answer = say(&url, "burst-0", "after the crash")
        .await
        .expect("an answer");
    assert_eq!(answer, "ack after the crash");
    // The chat itself: the session's summariser, which may run meanwhile, asks without a
    // response format too.
    let forwarded = llm
        .requests()
        .into_iter()
        .filter_map(|r| r.body)
        .find(|b| {
            b["response_format"].is_null()
                && b["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["content"] == "after the crash")
        })
        .unwrap();
    let sent = forwarded["messages"].as_array().unwrap().len();
    let acked_0 = acked.keys().filter(|(s, _)| *s == 0).count();
    assert!(
        sent > 2 * acked_0,
        "{sent} messages went upstream for {acked_0} acknowledged turns"
    );
    let (_, info) = logged(&url, "burst-0").await;
    assert_eq!(info["skipped_lines"], json!([]), "{info}");
    let _ = child.kill();
    child.wait().unwrap();
}
