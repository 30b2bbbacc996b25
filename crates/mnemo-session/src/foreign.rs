//! Sessions written by the systems users come from, read as mnemo sessions.
//!
//! pydantic-deep keeps a session's history as `messages.json`, the message list of
//! pydantic-ai (`ModelMessagesTypeAdapter`): a list of requests (`"kind": "request"`, whose
//! parts are the system prompt, the user's prompts, tool returns and retry prompts) and
//! responses (`"kind": "response"`, whose parts are text, tool calls and thinking).
//! [`from_pydantic_ai`] turns it into the OpenAI chat messages a mnemo session logs, in
//! order: one message per system prompt, user prompt and tool return, one assistant message
//! per response (its text joined, its tool calls kept with their ids). Thinking is left out,
//! as no upstream takes it back. The document is untrusted: anything that is not a message
//! list of that shape is an error naming the message and part, and the result then goes
//! through the same checks as any import ([`crate::SessionStore::import`]).

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::export::{SessionExport, EXPORT_FORMAT, EXPORT_VERSION, MAX_IMPORT_RECORDS};
use crate::log::Record;
use crate::store::SessionMeta;
use crate::SessionError;

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
    let invalid = |m: String| SessionError::Invalid(m);
    let items = document
        .as_array()
        .ok_or_else(|| invalid("a pydantic-ai history is a list of messages".into()))?;
    if items.len() > MAX_IMPORT_RECORDS {
        return Err(invalid(format!(
            "the history has {} messages; an import takes at most {MAX_IMPORT_RECORDS}",
            items.len()
        )));
    }
    let mut records = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let at = timestamp(item);
        let messages = match item["kind"].as_str() {
            Some("request") => request_messages(item, n)?,
            Some("response") => response_message(item, n)?.into_iter().collect(),
            other => {
                return Err(invalid(format!(
                    "message {n}: kind {other:?} is neither \"request\" nor \"response\""
                )))
            }
        };
        records.extend(messages.into_iter().map(|message| Record::Message {
            at,
            message,
            incomplete: false,
        }));
    }
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
    Ok(SessionExport {
        format: EXPORT_FORMAT.to_owned(),
        version: EXPORT_VERSION,
        id: id.to_owned(),
        meta,
        records,
        skipped_lines: 0,
    })
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

/// When a message was made: its own `timestamp`, else the first one among its parts, else
/// now.
fn timestamp(item: &Value) -> DateTime<Utc> {
    let parse = |v: &Value| {
        v.as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let parts = item["parts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    parse(&item["timestamp"])
        .or_else(|| parts.iter().find_map(|p| parse(&p["timestamp"])))
        .unwrap_or_else(Utc::now)
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
}
