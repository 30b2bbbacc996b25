//! A session's history as the log's records make it, and how a request's messages meet it.
//!
//! A request carries its history in one of two styles:
//! - **client-side**: the whole conversation every time. The longest common prefix with the
//!   log is found and only the tail after it is new.
//! - **server-side**: only the new messages. The log's history goes before them.
//!
//! [`HistoryStyle::Auto`] tells them apart: a request that starts with the whole logged
//! history is client-side; one that does not but carries an assistant message is a client
//! that rewrote its history (an edited or regenerated message, its own compaction), so the
//! log is rewound to the shared prefix (a [`Record::Rewind`]; nothing is deleted) and the request's
//! tail appended; anything else is server-side. Leading system or developer messages are the
//! session's instructions: logged when they change, reused when a request carries none.
//!
//! Messages are compared on what they say (role, text, tool calls, tool call id, name), not
//! byte for byte: SDKs resend an answer with fields of their own (`refusal: null`, ...).

use serde_json::Value;

use crate::log::Record;

/// How a request carries its history (`memory_history`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HistoryStyle {
    /// Tell from the messages (see the module docs).
    #[default]
    Auto,
    /// The request carries the whole history.
    Client,
    /// The request carries only new messages.
    Server,
}

impl HistoryStyle {
    /// Parses `auto`, `client` or `server`.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "auto" => Some(Self::Auto),
            "client" => Some(Self::Client),
            "server" => Some(Self::Server),
            _ => None,
        }
    }
}

/// A summary that stands for the first `covers` messages of the branch upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// How many messages it replaces.
    pub covers: usize,
    /// The summary.
    pub summary: String,
    /// Whether the messages after the previous summary were dropped without one.
    pub unsummarised: bool,
}

/// The current branch of a session: what the next request continues.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The messages of the current branch, in order.
    pub messages: Vec<Value>,
    /// The instructions (leading system/developer messages) last logged.
    pub instructions: Vec<Value>,
    /// Compactions on the current branch, oldest first; the last one applies.
    pub compactions: Vec<Compaction>,
    /// Every message record in the log, abandoned branches included.
    pub logged_messages: usize,
    /// Summaries written for the session: compactions, kept for the session's life.
    pub compressions: usize,
}

impl History {
    /// The history the records make.
    pub fn replay(records: &[Record]) -> Self {
        let mut history = History::default();
        for record in records {
            history.apply(record);
        }
        history
    }

    /// Applies one more record.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Message { message, .. } => {
                self.messages.push(message.clone());
                self.logged_messages += 1;
            }
            Record::Instructions { messages, .. } => self.instructions = messages.clone(),
            Record::Rewind { to, .. } => {
                self.messages.truncate(*to);
                self.compactions.retain(|c| c.covers <= *to);
            }
            Record::Compaction {
                covers,
                summary,
                unsummarised,
                ..
            } => {
                self.compressions += 1;
                self.compactions.push(Compaction {
                    covers: (*covers).min(self.messages.len()),
                    summary: summary.clone(),
                    unsummarised: unsummarised.is_some(),
                });
            }
        }
    }

    /// The compaction that applies, if any.
    pub fn compaction(&self) -> Option<&Compaction> {
        self.compactions.last()
    }

    /// The branch as it goes upstream: the compaction's summary in place of the messages it
    /// covers, then the rest.
    pub fn upstream_messages(&self) -> Vec<Value> {
        match self.compaction() {
            Some(c) if c.covers > 0 => {
                let mut out = Vec::with_capacity(self.messages.len() - c.covers + 1);
                out.push(compaction_message(c));
                out.extend(self.messages[c.covers..].iter().cloned());
                out
            }
            _ => self.messages.clone(),
        }
    }
}

/// The messages of a log with when they were logged: those of the current branch, or with
/// `all` every one ever logged (abandoned branches included), in log order.
pub fn timed_messages(
    records: &[Record],
    all: bool,
) -> Vec<(chrono::DateTime<chrono::Utc>, &Value)> {
    let mut out = Vec::new();
    for record in records {
        match record {
            Record::Message { at, message, .. } => out.push((*at, message)),
            Record::Rewind { to, .. } if !all => out.truncate(*to),
            _ => {}
        }
    }
    out
}

/// The message a compaction's summary goes upstream as.
pub fn compaction_message(compaction: &Compaction) -> Value {
    let summary = compaction.summary.trim();
    let content = match (compaction.unsummarised, summary.is_empty()) {
        (false, _) => format!(
            "[Summary of {} earlier messages of this session]\n{summary}",
            compaction.covers
        ),
        (true, true) => removed_marker(compaction.covers),
        (true, false) => format!(
            "{}\n[Summary of the earliest of them]\n{summary}",
            removed_marker(compaction.covers)
        ),
    };
    serde_json::json!({"role": "user", "content": content})
}

/// What stands upstream for messages dropped without a summary: the words governance's
/// static marker uses (`mnemo_context::summarize::static_marker`), so a model sees one form.
fn removed_marker(covers: usize) -> String {
    format!(
        "[Earlier conversation trimmed — {covers} messages removed to stay within context budget]"
    )
}

/// What a request adds to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The request's leading system/developer messages.
    pub instructions: Vec<Value>,
    /// Set when the client rewrote its history: the branch goes back to this many messages.
    pub rewind_to: Option<usize>,
    /// The messages new to the log, in order.
    pub new: Vec<Value>,
    /// The style the request was read in.
    pub style: HistoryStyle,
}

impl Split {
    /// The records that log this request: instructions when they changed, a rewind, the new
    /// messages.
    pub fn records(&self, history: &History) -> Vec<Record> {
        let now = chrono::Utc::now();
        let mut records = Vec::new();
        if !self.instructions.is_empty()
            && !same_messages(&self.instructions, &history.instructions)
        {
            records.push(Record::Instructions {
                at: now,
                messages: self.instructions.clone(),
            });
        }
        if let Some(to) = self.rewind_to {
            records.push(Record::Rewind { at: now, to });
        }
        records.extend(self.new.iter().map(|m| Record::Message {
            at: now,
            message: m.clone(),
            incomplete: false,
        }));
        records
    }
}

/// Splits a request's `messages` against the session's `history`.
pub fn split(history: &History, messages: &[Value], style: HistoryStyle) -> Split {
    let lead = messages
        .iter()
        .take_while(|m| matches!(role(m), "system" | "developer"))
        .count();
    let (instructions, conversation) = messages.split_at(lead);
    let logged = &history.messages;
    let common = logged
        .iter()
        .zip(conversation)
        .take_while(|(a, b)| same_message(a, b))
        .count();
    let has_assistant = conversation.iter().any(|m| role(m) == "assistant");
    let client = match style {
        HistoryStyle::Client => true,
        HistoryStyle::Server => false,
        HistoryStyle::Auto => logged.is_empty() || common == logged.len() || has_assistant,
    };
    let (rewind_to, new) = if client {
        let rewind = (common < logged.len()).then_some(common);
        (rewind, conversation[common..].to_vec())
    } else if is_retry(logged, conversation) {
        (None, Vec::new())
    } else {
        (None, conversation.to_vec())
    };
    Split {
        instructions: instructions.to_vec(),
        rewind_to,
        new,
        style: if client {
            HistoryStyle::Client
        } else {
            HistoryStyle::Server
        },
    }
}

/// Whether server-side `new` messages are the branch's unanswered tail sent again (an SDK's
/// retry after a timeout or a 5xx): the messages after the last assistant message.
fn is_retry(logged: &[Value], new: &[Value]) -> bool {
    let answered = logged
        .iter()
        .rposition(|m| role(m) == "assistant")
        .map_or(0, |i| i + 1);
    let unanswered = &logged[answered..];
    !unanswered.is_empty() && same_messages(unanswered, new)
}

fn role(message: &Value) -> &str {
    message["role"].as_str().unwrap_or("")
}

fn same_messages(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_message(x, y))
}

/// Whether two messages say the same: role, text, tool calls, tool call id and name.
pub fn same_message(a: &Value, b: &Value) -> bool {
    role(a) == role(b)
        && content_text(&a["content"]).trim() == content_text(&b["content"]).trim()
        && a["tool_call_id"] == b["tool_call_id"]
        && name(a) == name(b)
        && tool_calls(a) == tool_calls(b)
}

/// The text of a message's content: a string, or its parts (text parts as text, others as
/// their JSON, so an image still tells two messages apart).
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p["text"].as_str() {
                Some(text) if p["type"] == "text" => text.to_owned(),
                _ => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a message says, as text: its content, then each tool call it makes written out as
/// `[calls name(arguments)]`, so a transcript shows (and search finds) the calls too.
pub fn message_text(message: &Value) -> String {
    let mut text = content_text(&message["content"]);
    if let Some(calls) = message["tool_calls"].as_array() {
        for call in calls {
            text.push_str(&format!(
                "\n[calls {}({})]",
                call["function"]["name"].as_str().unwrap_or("?"),
                call["function"]["arguments"].as_str().unwrap_or("")
            ));
        }
    }
    text
}

fn name(message: &Value) -> Option<&str> {
    message["name"].as_str().filter(|n| !n.is_empty())
}

fn tool_calls(message: &Value) -> Vec<(&str, &str, &str)> {
    message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap_or(""),
                        c["function"]["name"].as_str().unwrap_or(""),
                        c["function"]["arguments"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn u(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }
    fn a(text: &str) -> Value {
        json!({"role": "assistant", "content": text})
    }
    fn logged(messages: &[Value]) -> History {
        let records: Vec<Record> = messages.iter().cloned().map(Record::message).collect();
        History::replay(&records)
    }

    #[test]
    fn a_resent_history_adds_only_its_tail() {
        let history = logged(&[u("hi"), a("hello")]);
        let request = [
            json!({"role": "system", "content": "Be brief."}),
            u("hi"),
            json!({"role": "assistant", "content": "hello", "refusal": null}),
            u("how are you?"),
        ];
        let split = split(&history, &request, HistoryStyle::Auto);
        assert_eq!(split.style, HistoryStyle::Client);
        assert_eq!(split.new, vec![u("how are you?")]);
        assert_eq!(split.rewind_to, None);
        assert_eq!(split.instructions.len(), 1);
        let records = split.records(&history);
        assert!(matches!(records[0], Record::Instructions { .. }));
        assert_eq!(records.len(), 2);
    }

    #[test]
    fn only_new_messages_follow_the_log() {
        let history = logged(&[u("hi"), a("hello")]);
        for request in [vec![u("hi")], vec![u("and now?")]] {
            let split = split(&history, &request, HistoryStyle::Auto);
            assert_eq!(split.style, HistoryStyle::Server, "{request:?}");
            assert_eq!(split.new, request);
        }
    }

    #[test]
    fn a_rewritten_history_rewinds_the_branch() {
        let history = logged(&[u("hi"), a("hello"), u("2+2?"), a("5")]);
        let request = [u("hi"), a("hello"), u("2+3?")];
        let split = split(&history, &request, HistoryStyle::Auto);
        assert_eq!(split.rewind_to, Some(2));
        assert_eq!(split.new, vec![u("2+3?")]);

        let mut after = history.clone();
        for record in split.records(&history) {
            after.apply(&record);
        }
        assert_eq!(after.messages, request.to_vec());
        assert_eq!(
            after.logged_messages, 5,
            "the abandoned messages stay logged"
        );
    }

    #[test]
    fn a_retried_unanswered_message_is_not_logged_twice() {
        let history = logged(&[u("hi"), a("hello"), u("and now?")]);
        let split = split(&history, &[u("and now?")], HistoryStyle::Server);
        assert!(split.new.is_empty(), "{split:?}");
        let split = split_auto(&history, &[u("and later?")]);
        assert_eq!(split.new, vec![u("and later?")]);
    }

    fn split_auto(history: &History, messages: &[Value]) -> Split {
        split(history, messages, HistoryStyle::Auto)
    }

    #[test]
    fn an_explicit_style_wins() {
        let history = logged(&[u("hi"), a("hello")]);
        let split_server = split(&history, &[u("hi"), a("hello")], HistoryStyle::Server);
        assert_eq!(split_server.new.len(), 2);
        let split_client = split(&history, &[u("edited")], HistoryStyle::Client);
        assert_eq!(split_client.rewind_to, Some(0));
        assert_eq!(split_client.new, vec![u("edited")]);
    }

    #[test]
    fn compactions_stand_in_upstream_and_follow_rewinds() {
        let mut history = logged(&[u("1"), a("2"), u("3"), a("4")]);
        history.apply(&Record::Compaction {
            at: chrono::Utc::now(),
            covers: 2,
            summary: "counted to two".into(),
            focus: None,
            model: "m".into(),
            unsummarised: None,
        });
        let upstream = history.upstream_messages();
        assert_eq!(upstream.len(), 3);
        assert!(upstream[0]["content"]
            .as_str()
            .unwrap()
            .contains("counted to two"));
        history.apply(&Record::Rewind {
            at: chrono::Utc::now(),
            to: 1,
        });
        assert_eq!(history.compaction(), None);
        assert_eq!(history.upstream_messages(), vec![u("1")]);
        assert_eq!(history.compressions, 1);
    }

    #[test]
    fn a_compaction_without_a_summary_goes_upstream_as_a_marker_after_the_earlier_summary() {
        let mut history = logged(&[u("1"), a("2"), u("3"), a("4"), u("5")]);
        let compaction = |covers, summary: &str, unsummarised: Option<&str>| Record::Compaction {
            at: chrono::Utc::now(),
            covers,
            summary: summary.into(),
            focus: None,
            model: String::new(),
            unsummarised: unsummarised.map(Into::into),
        };
        history.apply(&compaction(3, "", Some("the summariser is down")));
        let upstream = history.upstream_messages();
        assert_eq!(upstream.len(), 3);
        assert_eq!(
            upstream[0]["content"],
            "[Earlier conversation trimmed — 3 messages removed to stay within context budget]"
        );

        let mut history = logged(&[u("1"), a("2"), u("3"), a("4"), u("5")]);
        history.apply(&compaction(2, "counted to two", None));
        history.apply(&compaction(4, "counted to two", Some("down")));
        let first = history.upstream_messages()[0]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            first.starts_with("[Earlier conversation trimmed — 4 messages"),
            "{first}"
        );
        assert!(
            first.ends_with("[Summary of the earliest of them]\ncounted to two"),
            "{first}"
        );
    }

    #[test]
    fn tool_calls_and_parts_are_compared() {
        let call = |args: &str| {
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": args}}
            ]})
        };
        assert!(same_message(&call("{}"), &call("{}")));
        assert!(!same_message(&call("{}"), &call("{\"a\":1}")));
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        assert!(same_message(&parts, &u("hi")));
    }
}
