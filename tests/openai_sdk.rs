//! The official `openai` Python SDK (installed by `scripts/setup test`) talking to the real
//! `mnemo serve` binary, in front of a scripted upstream.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use mnemo_scripted_llm::ScriptedLlm;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdk_works_against_mnemo_serve() {
    let python = root().join("models/python/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `scripts/setup test`",
        python.display()
    );
    let upstream = ScriptedLlm::start().await;
    let store = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["serve", "--port", "0", "--memory-path"])
        .arg(store.path())
        .env("MNEMO_OPENAI_BASE_URL", upstream.base_url())
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a banner").unwrap();
        // Keep draining, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        first
            .strip_prefix("mnemo listening on ")
            .expect("the banner names the address")
            .to_owned()
    })
    .await
    .unwrap();

    let sdk = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(root().join("tests/python/openai_sdk.py"))
            .arg(&url)
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
    assert!(
        sdk.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&sdk.stdout),
        String::from_utf8_lossy(&sdk.stderr)
    );
    assert!(status.success(), "mnemo serve exited with {status}");
    let turns = store.path().join("entries/sdk/turns/user");
    // Three accepted requests; the one with a hostile memory_id wrote nothing.
    assert_eq!(std::fs::read_dir(turns).unwrap().count(), 3);
}
