//! Sessions written by the systems users come from, read as mnemo sessions.
//!
//! pydantic-deep keeps a session's history as `messages.json`, the message list of
//! pydantic-ai (`ModelMessagesTypeAdapter`): a list of requests (`"kind": "request"`, whose
//! parts are the system prompt, the user's prompts, tool returns and retry prompts) and
//! responses (`"kind": "response"`, whose parts are text, tool calls and thinking).
//! [`from_pydantic_ai`] turns it into the OpenAI chat messages a mnemo session logs, in
//! order: one message per system prompt, user prompt and tool return, one assistant message
//! per response (its text joined, its tool calls kept with their ids). Thinking is left out,
//! as no upstream takes it back.
//!
//! co-cli keeps a session as a JSON-lines transcript (`<id>.jsonl`): each line a list of
//! pydantic-ai messages (one, as co-cli writes them), between control lines
//! (`{"type": "compact_boundary"}`, `{"type": "session_meta", ...}`) that [`from_co_cli`]
//! passes over. Every message of the file is read, as co-cli itself resumes a transcript of
//! ordinary size: a mnemo log keeps everything, and governance decides what is sent.
//!
//! [`read_document`] tells the three documents apart (mnemo's export, a message list, a
//! transcript). Each is untrusted: anything that is not of its shape is an error naming the
//! message and part (and line), and the result then goes through the same checks as any
//! import ([`crate::SessionStore::import`]).

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::error::SessionError;
use crate::export::{SessionExport, EXPORT_FORMAT, EXPORT_VERSION, MAX_IMPORT_RECORDS};
use crate::log::Record;
use crate::store::SessionMeta;

/// The session documents [`read_document`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// mnemo's own export (`mnemo sessions export`, `GET /v1/sessions/{id}/export`).
    Mnemo,
    /// A pydantic-ai message list: pydantic-deep's `messages.json`.
    PydanticAi,
    /// A co-cli transcript: JSON lines of pydantic-ai messages.
    CoCli,
}

/// The session `bytes` hold, as a mnemo export: mnemo's own export as it is, a pydantic-ai
/// message list or a co-cli transcript made into one under `new_id` in `conversation`.
pub fn read_document(
    bytes: &[u8],
    new_id: &str,
    conversation: &str,
) -> Result<(DocumentKind, SessionExport), SessionError> {
    let document: Value = match serde_json::from_slice(bytes) {
        Ok(document) => document,
        Err(_) if looks_like_json_lines(bytes) => {
            return from_co_cli(bytes, new_id, conversation)
                .map(|export| (DocumentKind::CoCli, export))
                .map_err(|e| {
                    SessionError::Invalid(format!("not a co-cli transcript mnemo reads: {e}"))
                });
        }
        Err(e) => {
            return Err(SessionError::Invalid(format!(
                "not a session document (an export, a pydantic-ai message list or a co-cli transcript): {e}"
            )))
        }
    };
    if is_pydantic_ai(&document) {
        return from_pydantic_ai(&document, new_id, conversation)
            .map(|export| (DocumentKind::PydanticAi, export))
            .map_err(|e| {
                SessionError::Invalid(format!("not a pydantic-ai history mnemo reads: {e}"))
            });
    }
    serde_json::from_value(document)
        .map(|export| (DocumentKind::Mnemo, export))
        .map_err(|e| SessionError::Invalid(format!("not an exported session: {e}")))
}

/// Whether `bytes` are JSON lines rather than one JSON document: more than one line, the
/// first of them JSON by itself.
fn looks_like_json_lines(bytes: &[u8]) -> bool {
    let mut lines = bytes
        .split(|&b| b == b'\n')
        .filter(|line| !line.trim_ascii().is_empty());
    let first = lines.next();
    lines.next().is_some()
        && first.is_some_and(|line| serde_json::from_slice::<Value>(line).is_ok())
}

/// A mnemo export of the co-cli transcript `bytes`, to be imported under `id` in
/// `conversation`. A last line cut short (a crash while co-cli wrote it) is left out and
/// counted in `skipped_lines`; any other line that is neither a message list nor a control
/// line is an error naming it.
pub fn from_co_cli(
    bytes: &[u8],
    id: &str,
    conversation: &str,
) -> Result<SessionExport, SessionError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| SessionError::Invalid(format!("the transcript is not UTF-8: {e}")))?;
    let lines: Vec<&str> = text.split('\n').collect();
    let torn_tail = !text.ends_with('\n');
    let mut records = Vec::new();
    let mut skipped = 0;
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let number = n + 1;
        let value: Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(_) if torn_tail && n + 1 == lines.len() => {
                skipped += 1;
                continue;
            }
            Err(e) => return Err(SessionError::Invalid(format!("line {number}: {e}"))),
        };
        match value {
            Value::Array(items) => {
                for (k, item) in items.iter().enumerate() {
                    if records.len() >= MAX_IMPORT_RECORDS {
                        return Err(SessionError::Invalid(format!(
                            "line {number}: the transcript has more than {MAX_IMPORT_RECORDS} messages, the most an import takes"
                        )));
                    }
                    let found = message_records(item, k, last_time(&records))
                        .map_err(|e| SessionError::Invalid(format!("line {number}, {e}")))?;
                    records.extend(found);
                }
            }
            Value::Object(control)
                if matches!(
                    control.get("type").and_then(Value::as_str),
                    Some("compact_boundary" | "session_meta")
                ) => {}
            _ => {
                return Err(SessionError::Invalid(format!(
                    "line {number} is neither a list of messages nor a control line"
                )))
            }
        }
    }
    if records.is_empty() {
        return Err(SessionError::Invalid(
            "the transcript holds no message".into(),
        ));
    }
    let mut export = export_of(records, id, conversation);
    export.skipped_lines = skipped;
    Ok(export)
}

/// Whether `document` looks like a pydantic-ai message list (a list whose first item has a
/// `kind` and `parts`), rather than a mnemo export.
pub fn is_pydantic_ai(document: &Value) -> bool {
    document.as_array().is_some_and(|items| {
        items
            .first()
            .is_some_and(|m| m["kind"].is_string() && m["parts"].is_array())
    })
}

/// A mnemo export of the pydantic-ai message list `document`, to be imported under `id` in
/// `conversation`.
pub fn from_pydantic_ai(
    document: &Value,
    id: &str,
    conversation: &str,
) -> Result<SessionExport, SessionError> {
    let items = document.as_array().ok_or_else(|| {
        SessionError::Invalid("a pydantic-ai history is a list of messages".into())
    })?;
    if items.len() > MAX_IMPORT_RECORDS {
        return Err(SessionError::Invalid(format!(
            "the history has {} messages; an import takes at most {MAX_IMPORT_RECORDS}",
            items.len()
        )));
    }
    let mut records = Vec::new();
    for (n, item) in items.iter().enumerate() {
        records.extend(message_records(item, n, last_time(&records))?);
    }
    Ok(export_of(records, id, conversation))
}

/// The records of pydantic-ai message `item`, the `n`th of its document, dated by its own
/// timestamp, else as the message before it (`previous`), else now.
fn message_records(
    item: &Value,
    n: usize,
    previous: Option<DateTime<Utc>>,
) -> Result<Vec<Record>, SessionError> {
    let at = timestamp(item).or(previous).unwrap_or_else(Utc::now);
    let messages = match item["kind"].as_str() {
        Some("request") => request_messages(item, n)?,
        Some("response") => response_message(item, n)?.into_iter().collect(),
        other => {
            return Err(SessionError::Invalid(format!(
                "message {n}: kind {other:?} is neither \"request\" nor \"response\""
            )))
        }
    };
    Ok(messages
        .into_iter()
        .map(|message| Record::Message {
            at,
            message,
            incomplete: false,
        })
        .collect())
}

/// `records` as an export under `id` in `conversation`: titled by the first user message,
/// created and updated when its first and last messages were.
fn export_of(records: Vec<Record>, id: &str, conversation: &str) -> SessionExport {
    let first_prompt = records
        .iter()
        .find_map(|r| match r {
            Record::Message { message, .. } if message["role"] == "user" => {
                message["content"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .unwrap_or_default();
    let mut meta = SessionMeta::new(conversation, None, &first_prompt);
    if let Some(Record::Message { at, .. }) = records.first() {
        meta.created_at = *at;
    }
    if let Some(Record::Message { at, .. }) = records.last() {
        meta.updated_at = *at;
    }
    SessionExport {
        format: EXPORT_FORMAT.to_owned(),
        version: EXPORT_VERSION,
        id: id.to_owned(),
        meta,
        records,
        skipped_lines: 0,
    }
}

fn parts(item: &Value, n: usize) -> Result<&Vec<Value>, SessionError> {
    item["parts"]
        .as_array()
        .ok_or_else(|| SessionError::Invalid(format!("message {n} has no list of parts")))
}

fn request_messages(item: &Value, n: usize) -> Result<Vec<Value>, SessionError> {
    let mut messages = Vec::new();
    for (p, part) in parts(item, n)?.iter().enumerate() {
        let kind = part["part_kind"].as_str().unwrap_or_default();
        let message = match kind {
            "system-prompt" => json!({"role": "system", "content": text(&part["content"])}),
            "user-prompt" => json!({"role": "user", "content": text(&part["content"])}),
            "tool-return" | "retry-prompt" if part["tool_call_id"].is_string() => json!({
                "role": "tool",
                "tool_call_id": part["tool_call_id"],
                "content": text(&part["content"]),
            }),
            "retry-prompt" => json!({"role": "user", "content": text(&part["content"])}),
            other => {
                return Err(SessionError::Invalid(format!(
                    "message {n}, part {p}: a request part of kind {other:?} is not one mnemo reads"
                )))
            }
        };
        messages.push(message);
    }
    Ok(messages)
}

fn response_message(item: &Value, n: usize) -> Result<Option<Value>, SessionError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (p, part) in parts(item, n)?.iter().enumerate() {
        match part["part_kind"].as_str().unwrap_or_default() {
            "text" => texts.push(text(&part["content"])),
            "tool-call" => {
                let (Some(name), Some(call_id)) =
                    (part["tool_name"].as_str(), part["tool_call_id"].as_str())
                else {
                    return Err(SessionError::Invalid(format!(
                        "message {n}, part {p}: a tool call needs a tool_name and a tool_call_id"
                    )));
                };
                let arguments = match &part["args"] {
                    Value::String(s) => s.clone(),
                    Value::Null => "{}".to_owned(),
                    other => other.to_string(),
                };
                calls.push(json!({
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
            "thinking" | "builtin-tool-call" | "builtin-tool-return" => {}
            other => {
                return Err(SessionError::Invalid(format!(
                "message {n}, part {p}: a response part of kind {other:?} is not one mnemo reads"
            )))
            }
        }
    }
    if texts.is_empty() && calls.is_empty() {
        return Ok(None);
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        if texts.is_empty() {
            Value::Null
        } else {
            Value::String(texts.join("\n"))
        },
    );
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Some(Value::Object(message)))
}

/// A part's content as text: a string as it is, a list of strings joined, anything else
/// (a tool's structured return, an image's description) as its JSON.
fn text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// When the last of `records` was written.
fn last_time(records: &[Record]) -> Option<DateTime<Utc>> {
    records.iter().rev().find_map(|r| match r {
        Record::Message { at, .. } => Some(*at),
        _ => None,
    })
}

/// When a message was made: its own `timestamp`, else the first one among its parts.
fn timestamp(item: &Value) -> Option<DateTime<Utc>> {
    let parse = |v: &Value| {
        v.as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let parts = item["parts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    parse(&item["timestamp"]).or_else(|| parts.iter().find_map(|p| parse(&p["timestamp"])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> Value {
        json!([
            {"kind": "request", "parts": [
                {"part_kind": "system-prompt", "content": "You are a coding agent.", "timestamp": "2026-05-01T10:00:00Z"},
                {"part_kind": "user-prompt", "content": "List the files.", "timestamp": "2026-05-01T10:00:00Z"}
            ]},
            {"kind": "response", "timestamp": "2026-05-01T10:00:02Z", "parts": [
                {"part_kind": "thinking", "content": "Use ls."},
                {"part_kind": "tool-call", "tool_name": "ls", "args": {"path": "."}, "tool_call_id": "call_1"}
            ]},
            {"kind": "request", "parts": [
                {"part_kind": "tool-return", "tool_name": "ls", "content": ["a.rs", "b.rs"], "tool_call_id": "call_1"}
            ]},
            {"kind": "response", "parts": [{"part_kind": "text", "content": "Two files: a.rs and b.rs."}]}
        ])
    }

    #[test]
    fn a_pydantic_ai_history_becomes_chat_messages_in_order() {
        let document = history();
        assert!(is_pydantic_ai(&document));
        let export = from_pydantic_ai(&document, "s1", "default").unwrap();
        let messages: Vec<&Value> = export
            .records
            .iter()
            .map(|r| match r {
                Record::Message { message, .. } => message,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["content"], "List the files.");
        assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\".\"}"
        );
        assert!(messages[2]["content"].is_null(), "thinking is left out");
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["content"], "a.rs\nb.rs");
        assert_eq!(messages[4]["content"], "Two files: a.rs and b.rs.");
        assert_eq!(export.meta.title, "List the files.");
        assert_eq!(
            export.meta.created_at.to_rfc3339(),
            "2026-05-01T10:00:00+00:00"
        );
    }

    #[test]
    fn what_is_not_a_pydantic_ai_history_is_refused_naming_the_place() {
        let bad_kind = json!([{"kind": "event", "parts": []}]);
        let err = from_pydantic_ai(&bad_kind, "s1", "default").unwrap_err();
        assert!(err.to_string().contains("message 0"), "{err}");
        let bad_part = json!([{"kind": "request", "parts": [{"part_kind": "video"}]}]);
        let err = from_pydantic_ai(&bad_part, "s1", "default").unwrap_err();
        assert!(err.to_string().contains("message 0, part 0"), "{err}");
        let nameless = json!([{"kind": "response", "parts": [{"part_kind": "tool-call"}]}]);
        assert!(from_pydantic_ai(&nameless, "s1", "default").is_err());
        assert!(!is_pydantic_ai(&json!({"format": "mnemo-session"})));
        assert!(from_pydantic_ai(&json!({"kind": "request"}), "s1", "default").is_err());
    }

    /// A co-cli transcript of `history()`: one message a line, between control lines.
    fn transcript() -> String {
        let mut lines = vec![
            r#"{"type":"session_meta","parent_session":"a.jsonl","reason":"compaction"}"#
                .to_owned(),
        ];
        for (n, message) in history().as_array().unwrap().iter().enumerate() {
            lines.push(json!([message]).to_string());
            if n == 1 {
                lines.push(r#"{"type":"compact_boundary"}"#.to_owned());
            }
        }
        lines.join("\n") + "\n"
    }

    #[test]
    fn a_co_cli_transcript_reads_as_the_same_messages_as_its_message_list() {
        let (kind, export) = read_document(transcript().as_bytes(), "s2", "work").unwrap();
        assert_eq!(kind, DocumentKind::CoCli);
        let listed = from_pydantic_ai(&history(), "s2", "work").unwrap();
        assert_eq!(export.records, listed.records);
        assert_eq!(export.meta.conversation, "work");
        assert_eq!(export.skipped_lines, 0);

        // A last line cut short by a crash is left out and counted.
        let torn = transcript() + r#"[{"kind": "request", "parts": [{"part_k"#;
        let (_, export) = read_document(torn.as_bytes(), "s2", "work").unwrap();
        assert_eq!(export.records, listed.records);
        assert_eq!(export.skipped_lines, 1);
    }

    #[test]
    fn a_broken_co_cli_line_is_refused_naming_it() {
        let broken = transcript().replacen("\"kind\":\"response\"", "\"kind\":\"event\"", 1);
        let err = read_document(broken.as_bytes(), "s2", "work")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("not a co-cli transcript mnemo reads: line 3, message 0"),
            "{err}"
        );
        let not_json = transcript().replacen("{\"type\":\"compact_boundary\"}", "{oops", 1);
        let err = read_document(not_json.as_bytes(), "s2", "work")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4: "), "{err}");
        let stray = transcript() + "42\n";
        let err = read_document(stray.as_bytes(), "s2", "work")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 7 is neither a list of messages nor a control line"),
            "{err}"
        );
        let empty = "{\"type\":\"compact_boundary\"}\n{\"type\":\"compact_boundary\"}\n";
        let err = read_document(empty.as_bytes(), "s2", "work")
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds no message"), "{err}");
    }

    #[test]
    fn each_document_is_told_apart_and_a_stranger_is_named() {
        let (kind, _) = read_document(history().to_string().as_bytes(), "s3", "w").unwrap();
        assert_eq!(kind, DocumentKind::PydanticAi);
        let err = read_document(br#"{"format": "x"}"#, "s3", "w")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("not an exported session: "), "{err}");
        let err = read_document(b"hello\nworld\n", "s3", "w")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("not a session document"), "{err}");
    }
}
