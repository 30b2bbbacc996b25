//! What the scripted server saw: [`RecordedRequest`] for every request, as it arrived, and
//! [`ChatRequest`], the parsed view of a chat completion request that handlers decide on.

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use serde_json::Value;

/// Any request the server received, as it arrived.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: Method,
    /// The path without the query: `/v1/chat/completions`.
    pub path: String,
    /// The query string without its `?`, when there is one.
    pub query: Option<String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body parsed as JSON, when it is JSON.
    pub body: Option<Value>,
    /// The body's bytes, whatever they are.
    pub raw_body: Bytes,
}

impl RecordedRequest {
    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }
}

/// A chat completion request, as a handler sees it.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The JSON body, exactly as sent.
    pub body: Value,
    /// The request headers (to check `Authorization`, say).
    pub headers: HeaderMap,
    /// How many chat requests this server answered before this one.
    pub call: usize,
}

impl ChatRequest {
    /// The body's `messages`, or none when it has no such list.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// The text of the last `user` message.
    pub fn last_user_message(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| content_text(&m["content"]))
    }

    /// The text of every `system` (or `developer`) message, joined by blank lines.
    pub fn system_prompt(&self) -> Option<String> {
        let parts: Vec<String> = self
            .messages()
            .iter()
            .filter(|m| m["role"] == "system" || m["role"] == "developer")
            .map(|m| content_text(&m["content"]))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// `response_format.json_schema.name`: which structured call this is.
    pub fn schema_name(&self) -> Option<&str> {
        self.body
            .pointer("/response_format/json_schema/name")
            .and_then(Value::as_str)
    }

    /// `response_format.type`: `json_schema`, `json_object` or `text`.
    pub fn response_format_type(&self) -> Option<&str> {
        self.body
            .pointer("/response_format/type")
            .and_then(Value::as_str)
    }

    /// Whether the body asks for a streamed reply (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.body["stream"] == true
    }

    /// Whether a stream is to end with a usage chunk (`stream_options.include_usage`).
    pub fn wants_stream_usage(&self) -> bool {
        self.body["stream_options"]["include_usage"] == true
    }

    /// The body's `model`, when it names one.
    pub fn model(&self) -> Option<&str> {
        self.body["model"].as_str()
    }

    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }
}

/// A message's text: the string, or the `text` parts of a multi-part content joined by
/// newlines.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> ChatRequest {
        ChatRequest {
            body,
            headers: HeaderMap::new(),
            call: 0,
        }
    }

    #[test]
    fn conveniences_read_the_body() {
        let req = request(json!({
            "model": "m",
            "stream": true,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url"}]},
            ],
            "response_format": {"type": "json_schema", "json_schema": {"name": "facts", "schema": {}}},
        }));
        assert_eq!(req.last_user_message().as_deref(), Some("second"));
        assert_eq!(req.system_prompt().as_deref(), Some("Be brief."));
        assert_eq!(req.schema_name(), Some("facts"));
        assert_eq!(req.response_format_type(), Some("json_schema"));
        assert_eq!(req.model(), Some("m"));
        assert!(req.is_stream());

        let bare = request(json!({"messages": "not a list"}));
        assert_eq!(bare.last_user_message(), None);
        assert_eq!(bare.system_prompt(), None);
        assert_eq!(bare.schema_name(), None);
        assert!(!bare.is_stream());
    }
}
