//! What several end-to-end tests share: the `mnemo` binary run on a store of its own, apart
//! from the developer's settings; starting `mnemo serve` and finding its address; and
//! checking a run of a Python SDK script.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The `mnemo` binary on the store at `root`, with none of the caller's settings reaching it
/// (`MNEMO_CONFIG`, `RUST_LOG`, a token or an upstream from the environment): each test sets
/// what it needs on the command it gets.
pub fn mnemo_command(root: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .arg("--memory-path")
        .arg(root)
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_API_TOKEN")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .env_remove("RUST_LOG");
    command
}

/// Spawns `command` (a `mnemo serve ...` with `--port 0`), reads its banner and returns the
/// process and its base URL. The rest of its stdout is drained in the background, so the
/// server never blocks on a full pipe.
pub fn spawn_server(command: &mut Command) -> (Child, String) {
    spawn_server_with_stderr(command, Stdio::inherit())
}

/// [`spawn_server`], with the server's stderr (its log) going to `stderr`.
pub fn spawn_server_with_stderr(command: &mut Command, stderr: Stdio) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = lines.next().expect("a banner").expect("the banner is text");
    std::thread::spawn(move || lines.for_each(drop));
    let url = banner
        .strip_prefix("mnemo listening on ")
        .unwrap_or_else(|| panic!("the banner names the address: {banner}"))
        .to_owned();
    (child, url)
}

/// Checks a run of one of the Python SDK scripts in `tests/python/`: it exited 0 and the last
/// line it printed is `ok_line`, which a script prints only after its last check. The exit
/// status alone would pass a script that ended early without failing (an `exit(0)` in a
/// helper, a check that never ran).
pub fn assert_script_passed(run: &std::process::Output, ok_line: &str) {
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the script failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        run.status
    );
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
    assert_eq!(
        last,
        Some(ok_line),
        "the script did not end with {ok_line:?}:\nstdout: {stdout}\nstderr: {stderr}"
    );
}
