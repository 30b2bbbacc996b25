//! The official MCP Python SDK (installed by `scripts/setup test`) as an MCP host would use
//! it: it starts `mnemo mcp` over stdio and calls every memory tool, good calls and bad.
//! The checks are in `tests/python/mcp_stdio.py`. Around them, the command line and MCP see
//! each other's memories: the same store, the same engine search.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `mnemo ARGS --memory-path STORE`, which must succeed.
fn mnemo(store: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(args)
        .arg("--memory-path")
        .arg(store)
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "mnemo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn the_mcp_sdk_works_against_mnemo_mcp_over_stdio() {
    let python = root().join("models/python/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `scripts/setup test`",
        python.display()
    );
    let parent = tempfile::tempdir().unwrap();
    let store = parent.path().join("store");
    mnemo(
        &store,
        &["add", "-c", "mcp", "The user's dog is called Rex."],
    );
    let sdk = Command::new(python)
        .arg(root().join("tests/python/mcp_stdio.py"))
        .arg(env!("CARGO_BIN_EXE_mnemo"))
        .arg(&store)
        .current_dir(root())
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(
        sdk.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&sdk.stdout),
        String::from_utf8_lossy(&sdk.stderr)
    );
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
