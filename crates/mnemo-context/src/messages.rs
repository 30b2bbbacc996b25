//! Reading OpenAI chat messages as plain JSON: roles, tool calls and their results, and the
//! turns a history divides into. Messages stay `serde_json::Value`s, so whatever a client
//! sends that mnemo does not know (images, audio, vendor fields) passes through untouched.

use std::collections::HashMap;

use serde_json::Value;

/// A message's role (`system`, `developer`, `user`, `assistant`, `tool`), or `""`.
pub fn role(message: &Value) -> &str {
    message["role"].as_str().unwrap_or_default()
}

/// Whether a message is a system or developer instruction.
pub fn is_instruction(message: &Value) -> bool {
    matches!(role(message), "system" | "developer")
}

/// The ids of the tool calls an assistant message makes.
pub fn tool_call_ids(message: &Value) -> Vec<&str> {
    message["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default()
}

/// The call a tool message answers.
pub fn answered_call(message: &Value) -> Option<&str> {
    (role(message) == "tool")
        .then(|| message["tool_call_id"].as_str())
        .flatten()
}

/// Each tool call's function name, by call id, over a whole history.
pub fn tool_names(messages: &[Value]) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for message in messages {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            if let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str())
            {
                names.insert(id.to_owned(), name.to_owned());
            }
        }
    }
    names
}

/// Where each turn starts: the index of every user message. Everything before the first is
/// the head (instructions); a turn runs from its user message to the next one.
pub fn turn_starts(messages: &[Value]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| role(m) == "user")
        .map(|(i, _)| i)
        .collect()
}

/// The index before which no message is protected by the `keep` most recent turns: messages
/// at or after it belong to those turns. With fewer turns than `keep`, everything after the
/// head is protected.
pub fn protected_from(messages: &[Value], keep: usize) -> usize {
    let starts = turn_starts(messages);
    if keep == 0 {
        return messages.len();
    }
    match starts.len().checked_sub(keep) {
        Some(first_kept) => starts[first_kept],
        None => head_len(messages),
    }
}

/// How many leading messages are instructions (system or developer).
pub fn head_len(messages: &[Value]) -> usize {
    messages.iter().take_while(|m| is_instruction(m)).count()
}

/// A tool message's output as text (a non-string content as JSON).
pub fn output_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(parts) if parts.iter().all(|p| p["text"].is_string()) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// Fields mnemo marks messages with while governing them, which upstreams do not know.
pub const INTERNAL_FIELDS: [&str; 1] = ["compacted"];

/// Removes mnemo's own marks from messages before they go upstream.
pub fn strip_internal_fields(messages: &mut [Value]) {
    for message in messages {
        if let Value::Object(map) = message {
            for field in INTERNAL_FIELDS {
                map.remove(field);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history() -> Vec<Value> {
        vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "u1"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "x"}),
            json!({"role": "assistant", "content": "done"}),
            json!({"role": "user", "content": "u2"}),
            json!({"role": "assistant", "content": "ok"}),
        ]
    }

    #[test]
    fn turns_start_at_user_messages() {
        let h = history();
        assert_eq!(turn_starts(&h), [1, 5]);
        assert_eq!(head_len(&h), 1);
        assert_eq!(protected_from(&h, 1), 5);
        assert_eq!(protected_from(&h, 2), 1);
        assert_eq!(
            protected_from(&h, 3),
            1,
            "fewer turns than kept: all but the head"
        );
        assert_eq!(protected_from(&h, 0), h.len());
        assert_eq!(tool_names(&h)["a"], "ls");
        assert_eq!(answered_call(&h[3]), Some("a"));
        assert_eq!(tool_call_ids(&h[2]), ["a"]);
    }
}
