//! Reading the server-sent events of a streamed chat reply while it is passed through.
//!
//! [`SseParser`] turns the body's bytes, cut anywhere, into [`SseEvent`]s; the
//! [`DeltaAccumulator`] on top of it collects the assistant's text from the events, so the
//! turn can be stored once the stream ends, without holding up a byte of it.

use serde_json::Value;

/// One event of a server-sent-events body, as OpenAI-compatible servers stream chat replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data:` payload of an event; several `data:` lines are joined with `\n`.
    Data(String),
    /// `data: [DONE]`, OpenAI's end-of-stream marker.
    Done,
}

/// Incremental SSE parser: feed it the body's bytes as they arrive, in chunks cut anywhere
/// (inside a line, inside a UTF-8 character, between `\r` and `\n`), and it yields complete
/// events. Comments (`:` lines) and fields other than `data` are skipped.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    /// The last byte was `\r`: a `\n` right after it ends the same line.
    after_cr: bool,
}

impl SseParser {
    /// A parser at the start of a body.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events completed by `bytes`.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => self.end_line(&mut events),
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// Call at the end of the body: a last event that was not followed by a blank line is
    /// still delivered, since servers that close the connection after it mean it.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.dispatch(&mut events);
        self.after_cr = false;
        events
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            return self.dispatch(events);
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        // Comment lines have an empty field name; they only keep connections alive.
        if field != b"data" {
            return;
        }
        let value = String::from_utf8_lossy(value);
        match &mut self.data {
            Some(data) => {
                data.push('\n');
                data.push_str(&value);
            }
            None => self.data = Some(value.into_owned()),
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        if let Some(data) = self.data.take() {
            events.push(if data.trim() == "[DONE]" {
                SseEvent::Done
            } else {
                SseEvent::Data(data)
            });
        }
    }
}

/// Collects the assistant's message from a streamed chat reply (`chat.completion.chunk`
/// events: `choices[0].delta.content` and `delta.tool_calls`), fed with the raw body bytes as
/// they are passed through.
#[derive(Debug, Default)]
pub struct DeltaAccumulator {
    parser: SseParser,
    text: String,
    /// Tool calls by their `index`, their name and arguments concatenated from the deltas.
    tool_calls: Vec<Value>,
    finish_reason: Option<String>,
    done: bool,
    /// The `usage` object a chunk carried (the last chunk, when the request asked
    /// `stream_options.include_usage`).
    usage: Option<Value>,
}

impl DeltaAccumulator {
    /// An accumulator at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next chunk of the body, as the upstream sent it.
    pub fn feed(&mut self, bytes: &[u8]) {
        let events = self.parser.feed(bytes);
        self.apply(events);
    }

    /// Ends the body and returns the whole assistant text.
    pub fn finish(mut self) -> String {
        let events = self.parser.finish();
        self.apply(events);
        self.text
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The assistant's message so far, as a chat message: its text and tool calls.
    pub fn message(&self) -> Value {
        let mut message = serde_json::json!({"role": "assistant", "content": self.text});
        if !self.tool_calls.is_empty() {
            if self.text.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        message
    }

    /// Whether `[DONE]` or a `finish_reason` arrived: a stream without either was cut short.
    pub fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// The `finish_reason` the reply ended with (`stop`, `length`, ...), once it has arrived.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The token usage the stream reported, if it did.
    pub fn usage(&self) -> Option<&Value> {
        self.usage.as_ref()
    }

    /// Merges one `delta.tool_calls` item into the call at its `index`.
    fn add_tool_call_delta(&mut self, delta: &Value) {
        let index = delta["index"].as_u64().unwrap_or(0) as usize;
        // An index far past the calls seen is not a real stream; ignore it.
        if index > self.tool_calls.len() || index > 128 {
            return;
        }
        if index == self.tool_calls.len() {
            self.tool_calls.push(serde_json::json!({
                "id": "", "type": "function", "function": {"name": "", "arguments": ""}
            }));
        }
        let call = &mut self.tool_calls[index];
        if let Some(id) = delta["id"].as_str() {
            call["id"] = Value::String(id.to_owned());
        }
        for field in ["name", "arguments"] {
            if let Some(piece) = delta["function"][field].as_str() {
                let joined = format!("{}{piece}", call["function"][field].as_str().unwrap_or(""));
                call["function"][field] = Value::String(joined);
            }
        }
    }

    fn apply(&mut self, events: Vec<SseEvent>) {
        for event in events {
            let data = match event {
                SseEvent::Done => {
                    self.done = true;
                    continue;
                }
                SseEvent::Data(data) => data,
            };
            let chunk: Value = match serde_json::from_str(&data) {
                Ok(chunk) => chunk,
                Err(e) => {
                    tracing::debug!(error = %e, "skipping a stream event that is not JSON");
                    continue;
                }
            };
            if chunk["usage"].is_object() {
                self.usage = Some(chunk["usage"].clone());
            }
            let Some(choice) = chunk["choices"].as_array().and_then(|choices| {
                choices
                    .iter()
                    .find(|c| c["index"].as_u64().unwrap_or(0) == 0)
            }) else {
                continue;
            };
            if let Some(piece) = choice["delta"]["content"].as_str() {
                self.text.push_str(piece);
            }
            if let Some(calls) = choice["delta"]["tool_calls"].as_array() {
                for call in calls {
                    self.add_tool_call_delta(call);
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> SseEvent {
        SseEvent::Data(s.to_string())
    }

    /// Feeds `body` cut at every possible place, and in single bytes, and checks each gives
    /// the same events.
    fn parse_all_ways(body: &str) -> Vec<SseEvent> {
        let bytes = body.as_bytes();
        let mut whole = SseParser::new();
        let mut expected = whole.feed(bytes);
        expected.extend(whole.finish());
        for cut in 0..=bytes.len() {
            let mut parser = SseParser::new();
            let mut got = parser.feed(&bytes[..cut]);
            got.extend(parser.feed(&bytes[cut..]));
            got.extend(parser.finish());
            assert_eq!(got, expected, "cut at {cut}");
        }
        let mut parser = SseParser::new();
        let mut got: Vec<_> = bytes.iter().flat_map(|b| parser.feed(&[*b])).collect();
        got.extend(parser.finish());
        assert_eq!(got, expected, "byte by byte");
        expected
    }

    #[test]
    fn events_and_done() {
        let body = "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
        assert_eq!(
            parse_all_ways(body),
            vec![data("{\"a\":1}"), data("{\"b\":2}"), SseEvent::Done]
        );
    }

    #[test]
    fn crlf_and_lone_cr_line_endings() {
        assert_eq!(
            parse_all_ways("data: x\r\n\r\ndata: y\r\rdata: z\n\n"),
            vec![data("x"), data("y"), data("z")]
        );
    }

    #[test]
    fn comments_other_fields_and_multiline_data() {
        let body = ": keep-alive\n\nevent: message\nid: 7\ndata: one\ndata:two\nretry: 10\n\n";
        assert_eq!(parse_all_ways(body), vec![data("one\ntwo")]);
        // A comment alone dispatches nothing; `data` without a colon is an empty line of data.
        assert_eq!(parse_all_ways(": ping\n\ndata\n\n"), vec![data("")]);
    }

    #[test]
    fn multibyte_characters_split_across_chunks() {
        assert_eq!(parse_all_ways("data: héllo ✓\n\n"), vec![data("héllo ✓")]);
    }

    #[test]
    fn last_event_without_blank_line_is_delivered_at_finish() {
        let mut parser = SseParser::new();
        assert_eq!(parser.feed(b"data: a\n\ndata: tail"), vec![data("a")]);
        assert_eq!(parser.finish(), vec![data("tail")]);
        assert_eq!(parser.finish(), vec![]);
    }

    #[test]
    fn accumulates_delta_text() {
        let chunk = |delta: &str, finish: &str| {
            format!(
                "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
            )
        };
        let body = [
            chunk(r#"{"role":"assistant","content":""}"#, "null"),
            chunk(r#"{"content":"Hello"}"#, "null"),
            ": comment\n\n".to_string(),
            chunk(r#"{"content":", wörld"}"#, "null"),
            "data: not json\n\n".to_string(),
            chunk("{}", r#""stop""#),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\n"
                .to_string(),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let mut acc = DeltaAccumulator::new();
        for piece in body.as_bytes().chunks(7) {
            acc.feed(piece);
        }
        assert!(acc.is_complete());
        assert_eq!(acc.finish_reason(), Some("stop"));
        assert_eq!(acc.usage().unwrap()["completion_tokens"], 3);
        assert_eq!(acc.finish(), "Hello, wörld");

        let mut cut_short = DeltaAccumulator::new();
        cut_short.feed(chunk(r#"{"content":"Hel"}"#, "null").as_bytes());
        assert!(!cut_short.is_complete());
        assert_eq!(cut_short.usage(), None);
        assert_eq!(cut_short.text(), "Hel");
    }

    #[test]
    fn accumulates_streamed_tool_calls() {
        let chunk =
            |delta: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
        let body = [
            chunk(r#"{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"ls","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"th\":1}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"cat","arguments":"{}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":9,"id":"bogus"}]}"#),
        ]
        .concat();
        let mut acc = DeltaAccumulator::new();
        acc.feed(body.as_bytes());
        let message = acc.message();
        assert_eq!(message["content"], Value::Null);
        let calls = message["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["function"]["arguments"], "{\"path\":1}");
        assert_eq!(calls[1]["function"]["name"], "cat");
    }
}
