//! Every parser of a file people and `git pull` put in the store, and of a document a client
//! imports, driven by generated inputs: a valid document mutated, cut short, repeated into a
//! huge one, nested thousands deep (`mnemo_test_support::hostile`). Whatever comes in, the
//! parser returns: never a panic, and every refusal names the file (or says what the
//! document is not). The suite runs a fixed seed; docs/limits.md says how to run longer.

use std::path::{Path, PathBuf};

use mnemo_context::buffer::{ConversationBuffer, Entry, EntryRole, SaveFormat};
use mnemo_session::{Record, SessionId, SessionMeta, SessionStore};
use mnemo_store::FileStore;
use mnemo_test_support::hostile;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::json;

/// The example store's files: every kind of memory file, and a name a person chose.
fn example_files() -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("memory_db.example");
    let mut found = Vec::new();
    let mut folders = vec![root.join("entries")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                let relative = path.strip_prefix(&root).unwrap().to_owned();
                found.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    found.sort();
    assert!(found.len() >= 10, "the example store has its files");
    found
}

/// Runs `property` on [`hostile::mutated`] versions of each of `bases`.
fn check(bases: Vec<Vec<u8>>, property: impl Fn(usize, Vec<u8>) -> Result<(), TestCaseError>) {
    let strategy =
        (0..bases.len()).prop_flat_map(move |i| (Just(i), hostile::mutated(bases[i].clone())));
    TestRunner::new(hostile::config())
        .run(&strategy, |(i, bytes)| property(i, bytes))
        .unwrap();
}

#[test]
fn hostile_memory_files_are_read_or_refused_by_name() {
    let files = example_files();
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let bases = files.iter().map(|(_, bytes)| bytes.clone()).collect();
    check(bases, |i, bytes| {
        let (relative, _) = &files[i];
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = store.read(&path) {
            let name = relative.file_name().unwrap().to_string_lossy();
            prop_assert!(e.to_string().contains(&*name), "{e}");
        }
        // And a scan of the conversation skips it by name rather than failing.
        let conversation = relative
            .iter()
            .nth(1)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if let Ok(conversation) = mnemo_core::ConversationId::new(&conversation) {
            let scan = store.scan_conversation(&conversation);
            for skipped in &scan.skipped {
                prop_assert!(!skipped.reason.is_empty());
            }
        }
        Ok(())
    });
}

/// A session of two turns, in a store of its own.
fn a_session() -> (tempfile::TempDir, SessionStore, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let id = SessionId::new("hostile").unwrap();
    store
        .write_meta(&id, &SessionMeta::new("c", Some("agent"), "Plan a trip"))
        .unwrap();
    store
        .append(
            &id,
            &[
                Record::message(json!({"role": "user", "content": "Plan a trip to Lisbon."})),
                Record::message(json!({"role": "assistant", "content": "Gladly: when?"})),
            ],
        )
        .unwrap();
    (dir, store, id)
}

#[test]
fn hostile_session_logs_are_read_or_refused_by_name() {
    let (_dir, store, id) = a_session();
    let log = store.log_path(&id);
    let base = std::fs::read(&log).unwrap();
    check(vec![base], |_, bytes| {
        std::fs::write(&log, &bytes).unwrap();
        match store.load(&id) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().contains("hostile"), "{e}"),
        }
        Ok(())
    });
}

#[test]
fn hostile_session_settings_are_read_or_refused_by_name() {
    let (dir, store, id) = a_session();
    let meta = dir.path().join("sessions/hostile/session.yaml");
    let base = std::fs::read(&meta).unwrap();
    check(vec![base], |_, bytes| {
        std::fs::write(&meta, &bytes).unwrap();
        if let Err(e) = store.meta(&id) {
            prop_assert!(e.to_string().contains("session.yaml"), "{e}");
        }
        Ok(())
    });
}

#[test]
fn hostile_import_documents_are_read_or_refused() {
    let pydantic = json!([
        {"kind": "request", "parts": [
            {"part_kind": "system-prompt", "content": "Be brief."},
            {"part_kind": "user-prompt", "content": "Plan a trip.", "timestamp": "2026-01-02T03:04:05Z"}
        ]},
        {"kind": "response", "parts": [{"part_kind": "text", "content": "Where to?"}],
         "timestamp": "2026-01-02T03:04:06Z"}
    ]);
    let co_cli = [
        json!({"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "Fix the parser."}]}),
        json!({"kind": "response", "parts": [{"part_kind": "text", "content": "Which one?"}]}),
    ]
    .iter()
    .map(|line| line.to_string() + "\n")
    .collect::<String>();
    let bases = vec![serde_json::to_vec(&pydantic).unwrap(), co_cli.into_bytes()];
    check(bases, |_, bytes| {
        if let Err(e) = mnemo_session::foreign::read_document(&bytes, "imported", "c") {
            prop_assert!(!e.to_string().is_empty());
        }
        Ok(())
    });
}

#[test]
fn hostile_strategy_files_are_read_or_refused() {
    let base = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("memory_db.example/conversations/trip-japan/strategy.yaml"),
    )
    .unwrap();
    check(vec![base], |_, bytes| {
        let Ok(text) = String::from_utf8(bytes) else {
            return Ok(());
        };
        match mnemo_store::untrusted::from_yaml::<serde_json::Value>(&text) {
            Ok(value) if !value.is_null() => {
                if let Err(e) = mnemo_context::Strategy::from_json(value) {
                    prop_assert!(!e.to_string().is_empty());
                }
            }
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
}

#[test]
fn hostile_conversation_buffers_are_read_or_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = ConversationBuffer::new();
    buffer.push(Entry::new(EntryRole::System, "Be brief."));
    buffer.push(Entry::new(EntryRole::User, "Plan a trip."));
    buffer.push(Entry::new(EntryRole::Assistant, "Where to?"));
    let mut bases = Vec::new();
    for (name, format) in [
        ("mnemo.json", SaveFormat::Mnemo),
        (
            "midori.json",
            SaveFormat::Midori {
                version: "1.0.0".into(),
            },
        ),
    ] {
        let path = dir.path().join(name);
        buffer.save_as(&path, &format).unwrap();
        bases.push(std::fs::read(&path).unwrap());
    }
    let path = dir.path().join("buffer.json");
    check(bases, |_, bytes| {
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = ConversationBuffer::load(&path) {
            prop_assert!(e.to_string().contains("buffer.json"), "{e}");
        }
        Ok(())
    });
}

/// MCP messages nobody wrote by hand: `mnemo mcp` over stdio, after a proper start, gets
/// mutated tool calls, one a line. It answers what it can, refuses the rest, and is still
/// there for a well-formed call at the end: no message ends the session or the process.
#[test]
fn hostile_mcp_messages_leave_the_server_answering() {
    use proptest::strategy::ValueTree;
    use std::io::Write;
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let calls = [
        json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {
            "name": "add_memory", "arguments": {"text": "The user likes tea.", "conversation": "mcp"}}}),
        json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
            "name": "search_memories", "arguments": {"query": "tea?", "conversation": "mcp", "limit": 3}}}),
        json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {
            "name": "list_memories", "arguments": {"conversation": "mcp", "offset": 0, "limit": 5}}}),
        json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {
            "name": "resolve_conflict", "arguments": {"conversation": "mcp",
            "earlier": "00000000-0000-4000-8000-000000000000",
            "later": "00000000-0000-4000-8000-000000000001", "keep": "later"}}}),
    ];
    let bases: Vec<Vec<u8>> = calls.iter().map(|c| c.to_string().into_bytes()).collect();
    let strategy = (0..bases.len()).prop_flat_map(move |i| hostile::mutated(bases[i].clone()));
    let mut runner = TestRunner::new(hostile::config());
    let messages: Vec<Vec<u8>> = (0..hostile::cases())
        .map(|_| {
            let mut line = strategy.new_tree(&mut runner).unwrap().current();
            // One message a line: the mutation's own line breaks become spaces.
            line.iter_mut()
                .filter(|b| **b == b'\n' || **b == b'\r')
                .for_each(|b| *b = b' ');
            line
        })
        .collect();

    let mut server = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["mcp", "--memory-path"])
        .arg(dir.path().join("store"))
        .env("MNEMO_START_WATCHER", "false")
        .env_remove("MNEMO_CONFIG")
        .env_remove("MNEMO_API_TOKEN")
        .env_remove("MNEMO_OPENAI_BASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let start = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for message in &start {
        writeln!(stdin, "{message}").unwrap();
    }
    for message in &messages {
        stdin.write_all(message).unwrap();
        stdin.write_all(b"\n").unwrap();
    }
    let last = json!({"jsonrpc": "2.0", "id": 999_999, "method": "tools/call", "params": {
        "name": "list_memories", "arguments": {"conversation": "mcp"}}});
    writeln!(stdin, "{last}").unwrap();
    drop(stdin);
    let output = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    // Each message with an id is answered, a refusal included (mutations that drop the
    // id, or make a notification of it, are not).
    assert!(
        answers.len() > messages.len() / 2,
        "{} answers to {} messages: {stderr}",
        answers.len(),
        messages.len()
    );
    let answered = answers.into_iter().find(|answer| answer["id"] == 999_999);
    let answered = answered.unwrap_or_else(|| panic!("no answer to the last call: {stderr}"));
    assert!(
        answered["result"]["structuredContent"].is_object(),
        "{answered}"
    );
}
