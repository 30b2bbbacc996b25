//! Stage 1: repair. Upstreams reject a tool result whose call is not in the history, and an
//! assistant's tool call that no result answers; both happen when a client trims or restarts
//! its history. A result without its call is dropped; a call without a result gets a stub
//! result right after the results it has, saying that none was recorded.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::messages::{answered_call, role, tool_call_ids};

/// The content of the result mnemo adds for a call that has none.
pub const MISSING_RESULT: &str = "[no result was recorded for this tool call]";

/// What repair changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repaired {
    /// Results dropped because no earlier assistant message made their call.
    pub orphan_results: usize,
    /// Stub results added for calls nothing answered.
    pub missing_results: usize,
}

impl Repaired {
    /// Whether anything changed.
    pub fn any(&self) -> bool {
        self.orphan_results + self.missing_results > 0
    }
}

/// Repairs `messages` in place.
pub fn repair(messages: &mut Vec<Value>) -> Repaired {
    let mut report = Repaired::default();
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    // Calls of the latest assistant message with tool calls that no result answered yet.
    let mut open: Vec<String> = Vec::new();
    let mut made: HashSet<String> = HashSet::new();
    let close = |out: &mut Vec<Value>, open: &mut Vec<String>, report: &mut Repaired| {
        for id in open.drain(..) {
            out.push(json!({"role": "tool", "tool_call_id": id, "content": MISSING_RESULT}));
            report.missing_results += 1;
        }
    };
    for message in messages.drain(..) {
        if let Some(call) = answered_call(&message) {
            if made.contains(call) {
                open.retain(|id| id != call);
                out.push(message);
            } else {
                report.orphan_results += 1;
            }
            continue;
        }
        if role(&message) == "tool" {
            // A tool message naming no call answers nothing.
            report.orphan_results += 1;
            continue;
        }
        close(&mut out, &mut open, &mut report);
        for id in tool_call_ids(&message) {
            made.insert(id.to_owned());
            open.push(id.to_owned());
        }
        out.push(message);
    }
    close(&mut out, &mut open, &mut report);
    *messages = out;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}))
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "r"})
    }

    #[test]
    fn orphan_results_go_and_missing_results_are_stubbed() {
        let mut h = vec![
            json!({"role": "user", "content": "go"}),
            result("ghost"),
            call(&["a", "b"]),
            result("b"),
            json!({"role": "user", "content": "next"}),
            call(&["c"]),
        ];
        let report = repair(&mut h);
        assert_eq!(
            report,
            Repaired {
                orphan_results: 1,
                missing_results: 2
            }
        );
        let roles: Vec<&str> = h.iter().map(role).collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "tool",
                "user",
                "assistant",
                "tool"
            ]
        );
        assert_eq!(h[3]["tool_call_id"], "a");
        assert_eq!(h[3]["content"], MISSING_RESULT);
        assert_eq!(h[6]["tool_call_id"], "c");
    }

    #[test]
    fn a_sound_history_is_left_alone() {
        let mut h = vec![
            json!({"role": "user", "content": "go"}),
            call(&["a"]),
            result("a"),
            json!({"role": "assistant", "content": "done"}),
        ];
        let before = h.clone();
        assert!(!repair(&mut h).any());
        assert_eq!(h, before);
    }
}
