//! The conversation buffer's entries, dates and files: its own formats and Midori's.

use mnemo_context::buffer::{
    BufferError, ConversationBuffer, Entry, EntryRole, SaveFormat, ToolCall,
};
use serde_json::{json, Value};

fn is_rfc3339_utc(date: &str) -> bool {
    let bytes = date.as_bytes();
    bytes.len() == 24
        && bytes[4] == b'-'
        && bytes[10] == b'T'
        && bytes[19] == b'.'
        && date.ends_with('Z')
}

#[test]
fn timestamps_and_agent_ids_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buffer.json");
    let mut buffer = ConversationBuffer::new();
    buffer.set_agent_id(Some("coder".into()));
    buffer.user("Run the tests.");
    buffer.push(Entry {
        agent_id: Some("reviewer".into()),
        timestamp: Some("2025-06-01T08:00:00Z".into()),
        ..Entry::new(EntryRole::Assistant, "I looked at the diff.")
    });
    let user = &buffer.entries()[0];
    assert_eq!(
        user.agent_id.as_deref(),
        Some("coder"),
        "the buffer's agent"
    );
    assert!(
        is_rfc3339_utc(user.timestamp.as_deref().unwrap()),
        "{user:?}"
    );
    let created = buffer.created_at().unwrap().to_owned();
    assert!(is_rfc3339_utc(&created), "{created}");
    assert!(buffer.updated_at().unwrap() >= created.as_str());

    buffer.save(&path).unwrap();
    let loaded = ConversationBuffer::load(&path).unwrap().unwrap();
    assert_eq!(loaded, buffer);
    assert_eq!(loaded.agent_id(), Some("coder"));
    let pushed = &loaded.entries()[1];
    assert_eq!(pushed.agent_id.as_deref(), Some("reviewer"));
    assert_eq!(
        pushed.timestamp.as_deref(),
        Some("2025-06-01T08:00:00Z"),
        "an entry pushed as it is keeps its own time"
    );
    assert_eq!(loaded.created_at(), Some(created.as_str()));
}

#[test]
fn tool_results_carry_the_name_of_their_call() {
    let mut buffer = ConversationBuffer::new();
    buffer.user("What is in src?");
    buffer.tool_calls(vec![
        ToolCall::new("call_1", "list_files", r#"{"path": "src"}"#),
        ToolCall::new("call_2", "read_file", r#"{"path": "src/main.rs"}"#),
    ]);
    buffer.tool_result("call_2", "fn main() {}");
    buffer.tool_result("call_1", "main.rs lib.rs");
    buffer.tool_result("call_9", "an answer to nothing known");
    let names: Vec<Option<&str>> = buffer.entries()[2..]
        .iter()
        .map(|e| e.name.as_deref())
        .collect();
    assert_eq!(names, [Some("read_file"), Some("list_files"), None]);
    let message = buffer.entries()[2].to_message();
    assert_eq!(message["tool_call_id"], "call_2");
    assert!(
        message.get("name").is_none(),
        "OpenAI's tool message has no name"
    );
}

#[test]
fn results_recorded_on_calls_are_sent_as_tool_messages() {
    let mut buffer = ConversationBuffer::new();
    buffer.user("Weather?");
    buffer.tool_calls(vec![
        ToolCall {
            result: Some("sunny".into()),
            ..ToolCall::new("a", "weather", "{}")
        },
        ToolCall {
            result: Some("recorded twice".into()),
            ..ToolCall::new("b", "clock", "{}")
        },
    ]);
    buffer.tool_result("b", "12:00");
    let messages = buffer.to_messages();
    let tools: Vec<(&str, &str)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [("a", "sunny"), ("b", "12:00")],
        "a call its own entry answers is not answered twice"
    );
}

#[test]
fn clear_forgets_the_conversation_but_keeps_the_buffer() {
    let mut buffer = ConversationBuffer::with_max_entries(5);
    buffer.set_agent_id(Some("coder".into()));
    buffer
        .metadata_mut()
        .insert("project".into(), json!("mnemo"));
    buffer.system("Be brief.");
    buffer.user("hello");
    buffer.set_summary(Some("earlier".into()));
    let created = buffer.created_at().map(str::to_owned);
    let before = buffer.updated_at().map(str::to_owned);
    buffer.clear();
    assert!(buffer.is_empty());
    assert_eq!(buffer.summary(), None);
    assert_eq!(buffer.metadata()["project"], "mnemo");
    assert_eq!(buffer.agent_id(), Some("coder"));
    assert_eq!(buffer.created_at().map(str::to_owned), created);
    assert!(buffer.updated_at().map(str::to_owned) >= before);
    for i in 0..8 {
        buffer.user(format!("message {i}"));
    }
    assert_eq!(buffer.len(), 5, "the cap is kept");
}

#[test]
fn an_absent_file_is_no_buffer_yet_and_anything_else_stays_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("nothing-yet.json");
    let buffer = ConversationBuffer::load_or_new(&absent).unwrap();
    assert!(buffer.is_empty() && buffer.created_at().is_some());
    assert!(
        matches!(ConversationBuffer::load(&absent), Ok(None)),
        "no buffer yet, not an error"
    );

    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"format\": 2, \"entries\": [").unwrap();
    let err = ConversationBuffer::load_or_new(&broken).unwrap_err();
    assert!(
        matches!(&err, BufferError::InFile { source, .. } if matches!(**source, BufferError::Format(_))),
        "{err}"
    );
    assert!(
        err.to_string().contains("broken.json"),
        "names the file: {err}"
    );
    let linked = dir.path().join("linked.json");
    std::os::unix::fs::symlink(&absent, &linked).unwrap();
    let err = ConversationBuffer::load_or_new(&linked).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(
        ConversationBuffer::load_or_new(dir.path()).is_err(),
        "a folder is not a buffer"
    );
}

#[test]
fn a_format_1_file_still_loads() {
    let saved = json!({
        "format": 1,
        "entries": [
            {"role": "system", "content": "Be brief."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "name": "ls", "arguments": "{}"}]},
            {"role": "tool", "content": "a.txt", "tool_call_id": "c1"}
        ],
        "max_entries": 10,
        "summary": "earlier",
        "metadata": {"agent": "coder"}
    });
    let buffer = ConversationBuffer::from_json(saved).unwrap();
    assert_eq!(buffer.len(), 3);
    assert_eq!(buffer.entries()[1].tool_calls[0].result, None);
    assert_eq!(buffer.summary(), Some("earlier"));
    assert_eq!(buffer.created_at(), None, "format 1 did not record it");
    assert_eq!(
        buffer.to_json()["format"],
        json!(2),
        "saved again as format 2"
    );
}

/// A Midori memory file as OpenAI-shaped messages.
fn midori_messages() -> Value {
    json!({
        "version": "1.0.0",
        "created_at": "2025-05-30T09:12:44.120Z",
        "updated_at": "2025-05-30T09:14:02.981Z",
        "metadata": {"project": "greenhouse"},
        "messages": [
            {"role": "system", "content": "You are a gardening assistant.",
             "timestamp": "2025-05-30T09:12:44.120Z", "agent_id": "gardener"},
            {"role": "user", "content": "Is it going to rain today?",
             "timestamp": "2025-05-30T09:13:01.500Z", "agent_id": "gardener"},
            {"role": "assistant", "content": null,
             "timestamp": "2025-05-30T09:13:02.004Z", "agent_id": "gardener",
             "tool_calls": [
                {"id": "call_weather", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Kyoto\"}"},
                 "result": "light rain after 15:00"},
                {"id": "call_soil", "type": "function",
                 "function": {"name": "soil_moisture", "arguments": "{\"bed\": 3}"}}
             ]},
            {"role": "tool", "content": "41%", "tool_call_id": "call_soil",
             "name": "soil_moisture", "timestamp": "2025-05-30T09:13:02.511Z"},
            {"role": "assistant", "content": "Light rain after three; bed 3 can wait.",
             "timestamp": "2025-05-30T09:13:04.870Z", "agent_id": "gardener"}
        ],
        "summary": "The user grows tomatoes in bed 3."
    })
}

#[test]
fn a_midori_file_loads_with_its_tool_calls_and_results() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.json");
    std::fs::write(&path, midori_messages().to_string()).unwrap();
    let buffer = ConversationBuffer::load(&path).unwrap().unwrap();
    assert_eq!(buffer.len(), 5);
    assert_eq!(buffer.created_at(), Some("2025-05-30T09:12:44.120Z"));
    assert_eq!(buffer.updated_at(), Some("2025-05-30T09:14:02.981Z"));
    assert_eq!(buffer.metadata()["project"], "greenhouse");
    assert_eq!(buffer.summary(), Some("The user grows tomatoes in bed 3."));
    let user = &buffer.entries()[1];
    assert_eq!(user.timestamp.as_deref(), Some("2025-05-30T09:13:01.500Z"));
    assert_eq!(user.agent_id.as_deref(), Some("gardener"));
    let calls = &buffer.entries()[2].tool_calls;
    assert_eq!(buffer.entries()[2].content, "", "a null content");
    assert_eq!(
        calls[0],
        ToolCall {
            result: Some("light rain after 15:00".into()),
            ..ToolCall::new("call_weather", "get_weather", r#"{"city": "Kyoto"}"#)
        }
    );
    assert_eq!(calls[1].result, None);
    let tool = &buffer.entries()[3];
    assert_eq!(
        (tool.tool_call_id.as_deref(), tool.name.as_deref()),
        (Some("call_soil"), Some("soil_moisture"))
    );
    // Every call is answered upstream: one by its recorded result, one by its entry.
    let messages = buffer.to_messages();
    let answered: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["tool_call_id"])
        .collect();
    assert_eq!(answered, [&json!("call_weather"), &json!("call_soil")]);

    // Saved again, it keeps Midori's shape, word for word, so that Midori reads it back.
    buffer.save(&path).unwrap();
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved, midori_messages());
    let again = ConversationBuffer::load(&path).unwrap().unwrap();
    assert_eq!(again, buffer);
    // Asked for, mnemo's own format; a buffer saved so goes on saving so.
    let mut ours = again.clone();
    ours.set_save_format(SaveFormat::Mnemo);
    ours.save(&path).unwrap();
    let mine = ConversationBuffer::load(&path).unwrap().unwrap();
    assert_eq!(mine.to_json()["format"], json!(2));
    assert_eq!(mine.entries(), buffer.entries());
    assert_eq!(mine.save_format(), &SaveFormat::Mnemo);
}

#[test]
fn a_midori_snapshot_as_its_python_package_writes_it_loads() {
    let snapshot = json!({
        "agent_id": "gardener",
        "entries": [
            {"role": "user", "content": "Water bed 3.", "timestamp": 1748596381.5,
             "tool_calls": null, "metadata": null},
            {"role": "assistant", "content": "Done.", "timestamp": 1748596382.0,
             "tool_calls": [{"name": "water", "args": {"bed": 3, "litres": 2},
                             "result": "ok", "call_id": "w1"}],
             "metadata": {"turn": 1}},
            {"role": "tool", "content": "ok", "timestamp": 1748596382.25,
             "tool_calls": [{"name": "water", "args": {}, "result": "ok", "call_id": "w1"}],
             "metadata": null},
            {"role": "assistant", "content": "And the hose?", "timestamp": 1748596383,
             "tool_calls": [{"name": "hose", "args": {}, "result": "rolled up",
                             "call_id": null}]}
        ],
        "summary": null,
        "created_at": 1748596364.12,
        "updated_at": 1748596442.981,
        "metadata": null,
        "version": "1.0.0"
    });
    let buffer = ConversationBuffer::from_json(snapshot).unwrap();
    assert_eq!(buffer.agent_id(), Some("gardener"));
    assert_eq!(buffer.created_at(), Some("2025-05-30T09:12:44.120Z"));
    assert_eq!(
        buffer.entries()[0].timestamp.as_deref(),
        Some("2025-05-30T09:13:01.500Z")
    );
    let call = &buffer.entries()[1].tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), ("w1", "water"));
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(arguments, json!({"bed": 3, "litres": 2}));
    assert_eq!(buffer.entries()[1].metadata["turn"], 1);
    let tool = &buffer.entries()[2];
    assert!(tool.tool_calls.is_empty());
    assert_eq!(
        (tool.tool_call_id.as_deref(), tool.name.as_deref()),
        (Some("w1"), Some("water"))
    );
    let hose = &buffer.entries()[3].tool_calls[0];
    assert_eq!(hose.id, "midori_call_3_0", "a call with no id gets one");
    assert_eq!(hose.result.as_deref(), Some("rolled up"));
}

#[test]
fn a_newer_midori_major_and_unknown_shapes_are_refused() {
    let mut newer = midori_messages();
    newer["version"] = json!("2.0.0");
    let err = ConversationBuffer::from_json(newer).unwrap_err();
    assert!(matches!(err, BufferError::Newer { .. }), "{err}");
    assert!(err.to_string().contains("Midori version 2.0.0"), "{err}");

    let refused = |value: Value| match ConversationBuffer::from_json(value) {
        Err(BufferError::Format(why)) => why,
        other => panic!("{other:?}"),
    };
    let mut zero = midori_messages();
    zero["version"] = json!("0.9");
    refused(zero);
    refused(json!({"messages": []}));
    refused(json!({"version": 1, "messages": []}));
    refused(json!({"format": "2", "entries": []}));
    let why = refused(json!({"format": 2, "entries": [{"role": "narrator", "content": ""}]}));
    assert!(why.contains("entries[0].role"), "{why}");
    refused(json!(["not", "a", "buffer"]));
    let mut bad_role = midori_messages();
    bad_role["messages"][1]["role"] = json!("narrator");
    let why = refused(bad_role);
    assert!(why.contains("messages[1].role"), "{why}");
    let mut bad_time = midori_messages();
    bad_time["messages"][0]["timestamp"] = json!(1e300);
    let why = refused(bad_time);
    assert!(why.contains("messages[0].timestamp"), "{why}");
    let mut nameless = midori_messages();
    nameless["messages"][2]["tool_calls"][1]["function"] = Value::Null;
    let why = refused(nameless);
    assert!(why.contains("names no tool"), "{why}");
    let mut user_calls = midori_messages();
    user_calls["messages"][1]["tool_calls"] = user_calls["messages"][2]["tool_calls"].clone();
    refused(user_calls);
}
