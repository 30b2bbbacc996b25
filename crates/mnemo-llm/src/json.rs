//! The JSON that mnemo's own LLM calls send and get back: the messages of a prompt
//! ([`ChatMessage`]), the schema a reply must follow ([`JsonSchema`]), and finding the JSON
//! value in a reply that wraps it in prose or code fences ([`extract_json`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a chat, as mnemo's own prompts build them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user` or `assistant`.
    pub role: String,
    /// What they say.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A system message: the instructions for the call.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A user message: the input for the call.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An assistant message: an earlier reply, or an example of one.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// The shape a structured reply must have: `name` identifies it to the server (and in the
/// scripted test server), `schema` is a JSON Schema.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSchema {
    /// The schema's name, sent as `json_schema.name` and quoted in errors.
    pub name: String,
    /// The JSON Schema itself; sent with `strict: true`, so it should require every field and
    /// forbid others.
    pub schema: Value,
}

impl JsonSchema {
    /// The schema `schema`, known as `name`.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            schema,
        }
    }
}

/// The JSON value in a model's reply. Small models wrap it in ```json fences or in a sentence
/// even when asked not to, so this tries, in order: the whole reply, the inside of the first
/// fence, then the first `{` or `[` from which one complete value parses (text after it is
/// ignored), trying at most the first 32 brackets.
pub fn extract_json(reply: &str) -> Option<Value> {
    let reply = reply.trim();
    if let Ok(value) = serde_json::from_str(reply) {
        return Some(value);
    }
    if let Some(inside) = fenced(reply) {
        if let Ok(value) = serde_json::from_str(inside.trim()) {
            return Some(value);
        }
    }
    // Each try may read to the end of the reply: trying every bracket of a pathological
    // reply ("{{{{..." or a long unclosed value) would be quadratic in its length.
    reply
        .match_indices(['{', '['])
        .take(MAX_JSON_STARTS)
        .find_map(|(start, _)| first_value(&reply[start..]))
}

/// The most opening brackets [`extract_json`] tries a value from.
const MAX_JSON_STARTS: usize = 32;

/// The text between the first ``` fence (after its language tag) and the next one.
fn fenced(text: &str) -> Option<&str> {
    let after_open = &text[text.find("```")? + 3..];
    let body = &after_open[after_open.find('\n')? + 1..];
    Some(body.find("```").map_or(body, |end| &body[..end]))
}

/// One JSON value at the start of `text`, ignoring whatever follows it.
fn first_value(text: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()?
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pathological_reply_is_given_up_on_quickly() {
        // 200,000 brackets, each of which starts a value that runs to the end unclosed.
        let reply = format!("{}{}", "{\"a\": [".repeat(100_000), "1, ".repeat(100_000));
        assert_eq!(extract_json(&reply), None, "unbounded, this took minutes");
        assert_eq!(
            extract_json(&format!("{}{{\"ok\": 1}}", "{".repeat(40))),
            None,
            "past the 32nd bracket nothing is tried"
        );
        assert_eq!(extract_json("x { y [1]"), Some(json!([1])));
    }

    #[test]
    fn plain_json() {
        assert_eq!(extract_json(" {\"a\": 1}\n"), Some(json!({"a": 1})));
        assert_eq!(extract_json("[1, 2]"), Some(json!([1, 2])));
    }

    #[test]
    fn fenced_json() {
        let reply = "```json\n{\"facts\": [\"Anne is my wife\"]}\n```";
        assert_eq!(
            extract_json(reply),
            Some(json!({"facts": ["Anne is my wife"]}))
        );
        let reply = "Sure:\n```\n[\"x\"]\n```\nHope this helps.";
        assert_eq!(extract_json(reply), Some(json!(["x"])));
        // An unclosed fence still yields its content.
        assert_eq!(
            extract_json("```json\n{\"a\": true}"),
            Some(json!({"a": true}))
        );
    }

    #[test]
    fn json_inside_prose() {
        let reply = "Here is the result: {\"facts\": []}. Let me know {if} you need more.";
        assert_eq!(extract_json(reply), Some(json!({"facts": []})));
        // A brace in the prose before the value is skipped.
        let reply = "Using {braces} loosely, the answer is {\"ok\": [1, {\"n\": 2}]} done";
        assert_eq!(extract_json(reply), Some(json!({"ok": [1, {"n": 2}]})));
    }

    #[test]
    fn no_json_at_all() {
        assert_eq!(extract_json("I cannot help with that."), None);
        assert_eq!(extract_json("{\"unterminated\": "), None);
        assert_eq!(extract_json(""), None);
    }
}
