//! `mnemo sessions ...` and `mnemo agent-memory ...` end to end, on a session written the way
//! a person (or a git pull) would leave it: files on disk, read by the real binary.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod support;

fn mnemo(root: &Path, args: &[&str]) -> Output {
    support::mnemo_command(root)
        .args(args)
        .env("MNEMO_START_WATCHER", "false")
        .stdin(Stdio::null())
        .output()
        .expect("mnemo runs")
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A session as mnemo would have left it: settings and a log.
fn write_session(root: &Path, id: &str) {
    let dir = root.join("sessions").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("session.yaml"),
        "title: Fix the parser\nconversation: work\ncreated_at: 2026-11-20T10:00:00Z\nupdated_at: 2026-11-20T10:05:00Z\nmessages: 4\n",
    )
    .unwrap();
    let lines = [
        r#"{"kind":"message","at":"2026-11-20T10:00:00Z","message":{"role":"user","content":"The parser crashes on empty input."}}"#,
        r#"{"kind":"message","at":"2026-11-20T10:01:00Z","message":{"role":"assistant","content":"Check for an empty slice first."}}"#,
        r#"{"kind":"message","at":"2026-11-20T10:02:00Z","message":{"role":"user","content":"Done, it passes."}}"#,
        r#"{"kind":"message","at":"2026-11-20T10:03:00Z","message":{"role":"assistant","content":"Good."}}"#,
    ];
    std::fs::write(dir.join("messages.jsonl"), lines.join("\n") + "\n").unwrap();
}

#[test]
fn sessions_are_listed_shown_searched_forked_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    write_session(&root, "parser");

    let list: Value =
        serde_json::from_str(&ok(&mnemo(&root, &["sessions", "list", "--json"]))).unwrap();
    assert_eq!(list[0]["id"], "parser");
    assert_eq!(list[0]["session"]["title"], "Fix the parser");
    let table = ok(&mnemo(&root, &["sessions", "list"]));
    assert!(
        table.contains("parser") && table.contains("Fix the parser"),
        "{table}"
    );

    let shown = ok(&mnemo(&root, &["sessions", "show", "parser", "-n", "2"]));
    assert!(shown.contains("conversation  work"), "{shown}");
    assert!(shown.contains("you: Done, it passes."), "{shown}");
    assert!(
        !shown.contains("crashes"),
        "only the last two messages: {shown}"
    );

    let context = ok(&mnemo(&root, &["sessions", "context", "parser"]));
    assert!(
        context.contains("4 messages") && context.contains("tokens"),
        "{context}"
    );

    let found = ok(&mnemo(
        &root,
        &["sessions", "search", "EMPTY input", "-c", "work"],
    ));
    assert!(
        found.contains("User: The parser crashes on empty input."),
        "{found}"
    );
    assert!(
        found.contains("Assistant: Check for an empty slice first."),
        "{found}"
    );

    let forked = ok(&mnemo(
        &root,
        &["sessions", "fork", "parser", "--as", "parser-2"],
    ));
    assert_eq!(forked.trim(), "parser-2");
    ok(&mnemo(&root, &["sessions", "delete", "parser-2"]));
    let list: Value =
        serde_json::from_str(&ok(&mnemo(&root, &["sessions", "list", "--json"]))).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let all: Value =
        serde_json::from_str(&ok(&mnemo(&root, &["sessions", "list", "--all", "--json"]))).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 2);

    // Export to a file, import under a new id; the copy shows the same messages.
    let file = dir.path().join("parser.json");
    let file_arg = file.to_str().unwrap();
    ok(&mnemo(
        &root,
        &["sessions", "export", "parser", "-o", file_arg],
    ));
    let imported = ok(&mnemo(
        &root,
        &["sessions", "import", file_arg, "--as", "parser-3"],
    ));
    assert_eq!(imported.trim(), "parser-3");
    let copy = ok(&mnemo(&root, &["sessions", "show", "parser-3", "-n", "2"]));
    assert!(copy.contains("you: Done, it passes."), "{copy}");
    assert!(copy.contains("4 logged"), "{copy}");
    let taken = mnemo(&root, &["sessions", "import", file_arg]);
    assert_ne!(taken.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&taken.stderr).contains("exists already"),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    std::fs::write(&file, "{\"format\": \"something else\"}").unwrap();
    let foreign = mnemo(&root, &["sessions", "import", file_arg, "--as", "p4"]);
    assert_eq!(foreign.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&foreign.stderr).contains("not an exported session"));

    let missing = mnemo(&root, &["sessions", "show", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no session \"nope\""));
    let hostile = mnemo(&root, &["sessions", "show", "../x"]);
    assert_eq!(hostile.status.code(), Some(2));
}

#[test]
fn agent_notes_are_written_updated_and_versioned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    ok(&mnemo(
        &root,
        &[
            "agent-memory",
            "write",
            "coder",
            "- tests run with cargo test",
        ],
    ));
    ok(&mnemo(
        &root,
        &["agent-memory", "write", "coder", "- cargo is slow"],
    ));
    let updated = ok(&mnemo(
        &root,
        &[
            "agent-memory",
            "update",
            "coder",
            "--old",
            "run with cargo test",
            "--new",
            "run with scripts/test",
        ],
    ));
    assert_eq!(updated, "- tests run with scripts/test\n- cargo is slow\n");
    let ambiguous = mnemo(
        &root,
        &[
            "agent-memory",
            "update",
            "coder",
            "--old",
            "s",
            "--new",
            "x",
        ],
    );
    assert_eq!(ambiguous.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&ambiguous.stderr).contains("occurs"));
    assert_eq!(
        ok(&mnemo(&root, &["agent-memory", "read", "coder"])),
        std::fs::read_to_string(root.join("agents/coder/MEMORY.md")).unwrap()
    );
    let log = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(&root)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert_eq!(log.matches("notes of agent coder").count(), 3, "{log}");
}

#[test]
fn a_pydantic_deep_session_folder_is_imported_as_a_mnemo_session() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    // pydantic-deep's session folder: the pydantic-ai message list in messages.json.
    let deep = dir.path().join("deep-session");
    std::fs::create_dir(&deep).unwrap();
    let history = serde_json::json!([
        {"kind": "request", "parts": [
            {"part_kind": "system-prompt", "content": "You are a coding agent."},
            {"part_kind": "user-prompt", "content": "Why does the build fail?", "timestamp": "2026-10-02T09:00:00Z"}
        ]},
        {"kind": "response", "timestamp": "2026-10-02T09:00:05Z", "parts": [
            {"part_kind": "tool-call", "tool_name": "run", "args": "{\"cmd\": \"cargo build\"}", "tool_call_id": "c1"}
        ]},
        {"kind": "request", "parts": [
            {"part_kind": "tool-return", "tool_name": "run", "content": "error: missing semicolon", "tool_call_id": "c1"}
        ]},
        {"kind": "response", "parts": [{"part_kind": "text", "content": "A semicolon is missing in main.rs."}]}
    ]);
    std::fs::write(deep.join("messages.json"), history.to_string()).unwrap();
    let deep_arg = deep.to_str().unwrap();
    let imported = ok(&mnemo(
        &root,
        &[
            "sessions",
            "import",
            deep_arg,
            "--as",
            "from-deep",
            "-c",
            "work",
        ],
    ));
    assert_eq!(imported.trim(), "from-deep");
    let shown = ok(&mnemo(&root, &["sessions", "show", "from-deep"]));
    assert!(shown.contains("Why does the build fail?"), "{shown}");
    assert!(shown.contains("A semicolon is missing"), "{shown}");
    let listed: Value =
        serde_json::from_str(&ok(&mnemo(&root, &["sessions", "list", "--json"]))).unwrap();
    let session = &listed.as_array().unwrap()[0]["session"];
    assert_eq!(session["conversation"], "work", "{session}");
    assert_eq!(session["title"], "Why does the build fail?", "{session}");
    assert_eq!(session["created_at"], "2026-10-02T09:00:00Z", "{session}");

    // A history mnemo cannot read is refused, naming where, and leaves nothing behind.
    std::fs::write(
        deep.join("messages.json"),
        r#"[{"kind": "request", "parts": [{"part_kind": "audio"}]}]"#,
    )
    .unwrap();
    let refused = mnemo(&root, &["sessions", "import", deep_arg, "--as", "bad"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("message 0, part 0"), "{stderr}");
    assert!(!root.join("sessions/bad").exists());

    // co-cli's transcript: JSON lines of the same messages, between control lines.
    let lines: Vec<String> = std::iter::once(r#"{"type":"session_meta"}"#.to_owned())
        .chain(
            history
                .as_array()
                .unwrap()
                .iter()
                .map(|m| serde_json::json!([m]).to_string()),
        )
        .collect();
    let transcript = dir.path().join("0f3e2c1a.jsonl");
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let transcript_arg = transcript.to_str().unwrap();
    let imported = ok(&mnemo(
        &root,
        &["sessions", "import", transcript_arg, "-c", "work"],
    ));
    let id = imported.trim();
    assert_eq!(
        ok(&mnemo(&root, &["sessions", "show", id])).replace(id, "ID"),
        shown.replace("from-deep", "ID")
    );
    std::fs::write(&transcript, lines.join("\n") + "\n{\"type\": \"event\"}\n").unwrap();
    let refused = mnemo(&root, &["sessions", "import", transcript_arg]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("is not a co-cli transcript mnemo reads: line 6 is neither"),
        "{stderr}"
    );
}
