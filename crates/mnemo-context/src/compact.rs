//! Stage 3: compact or trim the tool outputs of old turns.
//!
//! Outside the `compact_keep` most recent turns, or the `compact_keep_messages` most recent
//! messages (which are never touched), each tool output
//! of a tool the strategy lets it touch ([`ResolvedStrategy::touches_tool`]) is:
//! - `compact`: replaced by the placeholder [`placeholder`], the message marked
//!   `"compacted": true` (mnemo's mark, stripped before the request goes upstream);
//! - `trim`: cut to `tool_output_trim_chars` characters, with `[…truncated, N chars total]`
//!   appended; a non-string output (a JSON object) is trimmed as its JSON text.
//!
//! With `compact_clear_tool_inputs`, the arguments of those old tool calls are replaced too,
//! by a JSON object holding a placeholder (arguments must stay a JSON object's text).

use serde_json::{json, Value};

use crate::messages::{answered_call, output_text, role, tool_names};
use crate::strategy::ResolvedStrategy;

/// The text that replaces a compacted tool output.
pub fn placeholder(tool: &str, call_id: &str) -> String {
    format!("⟦removed: tool output for {tool} (call_id={call_id}); reason=context_compaction⟧")
}

/// The text that replaces a compacted tool call's arguments.
pub fn input_placeholder(tool: &str, call_id: &str) -> String {
    format!("⟦removed: tool input for {tool} (call_id={call_id}); reason=context_compaction⟧")
}

/// The marker appended to a trimmed output.
pub fn trim_marker(total_chars: usize) -> String {
    format!("[…truncated, {total_chars} chars total]")
}

/// Replaces old tool outputs (and, if asked, inputs) with placeholders. Returns how many
/// outputs and inputs were compacted.
pub fn compact(messages: &mut [Value], strategy: &ResolvedStrategy) -> usize {
    let names = tool_names(messages);
    let protected = strategy.protected_from(messages);
    let mut compacted = 0;
    for message in &mut messages[..protected] {
        if let Some(call_id) = answered_call(message).map(str::to_owned) {
            let tool = names.get(&call_id).map(String::as_str).unwrap_or("unknown");
            let text = placeholder(tool, &call_id);
            if !strategy.touches_tool(tool) || message["content"] == text.as_str() {
                continue;
            }
            message["content"] = Value::String(text);
            message["compacted"] = Value::Bool(true);
            compacted += 1;
            continue;
        }
        if strategy.compact_clear_tool_inputs && role(message) == "assistant" {
            compacted += clear_inputs(message, strategy);
        }
    }
    compacted
}

fn clear_inputs(message: &mut Value, strategy: &ResolvedStrategy) -> usize {
    let mut cleared = 0;
    let Some(calls) = message["tool_calls"].as_array_mut() else {
        return 0;
    };
    for call in calls {
        let tool = call["function"]["name"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned();
        let id = call["id"].as_str().unwrap_or_default().to_owned();
        let arguments = json!({"removed": input_placeholder(&tool, &id)}).to_string();
        if !strategy.touches_tool(&tool) || call["function"]["arguments"] == arguments.as_str() {
            continue;
        }
        call["function"]["arguments"] = Value::String(arguments);
        cleared += 1;
    }
    if cleared > 0 {
        message["compacted"] = Value::Bool(true);
    }
    cleared
}

/// Cuts old tool outputs to `tool_output_trim_chars` characters. Returns how many were cut.
pub fn trim(messages: &mut [Value], strategy: &ResolvedStrategy) -> usize {
    let limit = strategy.tool_output_trim_chars;
    if limit == 0 {
        return 0;
    }
    let names = tool_names(messages);
    let protected = strategy.protected_from(messages);
    let mut trimmed = 0;
    for message in &mut messages[..protected] {
        let Some(call_id) = answered_call(message).map(str::to_owned) else {
            continue;
        };
        let tool = names.get(&call_id).map(String::as_str).unwrap_or("unknown");
        if !strategy.touches_tool(tool) {
            continue;
        }
        let text = output_text(message);
        let total = text.chars().count();
        if total <= limit {
            continue;
        }
        let kept: String = text.chars().take(limit).collect();
        message["content"] = Value::String(format!("{kept}\n{}", trim_marker(total)));
        trimmed += 1;
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Strategy;
    use serde_json::json;

    fn strategy(fields: Value) -> ResolvedStrategy {
        Strategy::from_json(fields).unwrap().resolve()
    }

    /// `turns` turns of: user, assistant calling `tool`, its result, assistant answer.
    fn history(turns: usize, tool: &str, output: &str) -> Vec<Value> {
        let mut h = vec![json!({"role": "system", "content": "be brief"})];
        for t in 0..turns {
            let id = format!("call_{t}");
            h.push(json!({"role": "user", "content": format!("question {t}")}));
            h.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": tool, "arguments": "{\"path\": \"/x\"}"}}]}));
            h.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            h.push(json!({"role": "assistant", "content": format!("answer {t}")}));
        }
        h
    }

    #[test]
    fn placeholders_are_exact_and_the_recent_turns_untouched() {
        let mut h = history(4, "read_file", "file contents");
        let n = compact(
            &mut h,
            &strategy(json!({"mode": "compact", "compact_keep": 2})),
        );
        assert_eq!(n, 2);
        assert_eq!(
            h[3]["content"],
            "⟦removed: tool output for read_file (call_id=call_0); reason=context_compaction⟧"
        );
        assert_eq!(h[3]["compacted"], true);
        assert_eq!(h[7]["compacted"], true);
        assert_eq!(h[11]["content"], "file contents", "turn 3 of 4 is kept");
        assert_eq!(h[15]["content"], "file contents");
        assert_eq!(h[11].get("compacted"), None);
        assert_eq!(
            compact(&mut h, &strategy(json!({"compact_keep": 2}))),
            0,
            "compacting twice changes nothing"
        );
    }

    #[test]
    fn include_beats_exclude_and_inputs_can_be_cleared() {
        let mut h = history(3, "grep", "matches");
        h.extend(history(1, "ls", "files").into_iter().skip(1));
        let s = strategy(json!({
            "compact_keep": 1, "compact_include_tools": ["ls", "grep"],
            "compact_exclude_tools": ["grep"], "compact_clear_tool_inputs": true
        }));
        compact(&mut h, &s);
        assert_eq!(
            h[3]["compacted"], true,
            "grep is included, whatever exclude says"
        );
        assert!(h[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap()
            .contains(
                "⟦removed: tool input for grep (call_id=call_0); reason=context_compaction⟧"
            ));
        let args: Value = serde_json::from_str(
            h[2]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(args.is_object(), "arguments stay a JSON object's text");
        let mut only_ls = history(3, "grep", "matches");
        compact(
            &mut only_ls,
            &strategy(json!({"compact_keep": 1, "compact_include_tools": ["ls"]})),
        );
        assert!(only_ls.iter().all(|m| m.get("compacted").is_none()));
        let mut excluded = history(3, "grep", "matches");
        compact(
            &mut excluded,
            &strategy(json!({"compact_keep": 1, "compact_exclude_tools": ["grep"]})),
        );
        assert!(excluded.iter().all(|m| m.get("compacted").is_none()));
    }

    #[test]
    fn trimming_cuts_long_string_and_json_outputs_with_the_marker() {
        let long = "x".repeat(5000);
        let mut h = history(3, "cat", &long);
        h[7]["content"] = json!({"rows": ["a".repeat(3000)]});
        h[3]["content"] = Value::String("short".into());
        let n = trim(
            &mut h,
            &strategy(json!({"mode": "trim", "compact_keep": 1})),
        );
        assert_eq!(n, 1, "the short one is untouched, the JSON one trimmed");
        assert_eq!(h[3]["content"], "short");
        let json_text = h[7]["content"].as_str().unwrap();
        assert!(json_text.starts_with("{\"rows\":[\"aaa"), "{json_text}");
        assert!(
            json_text.ends_with("[…truncated, 3013 chars total]"),
            "{json_text}"
        );
        assert_eq!(
            json_text.chars().count(),
            2000 + 1 + "[…truncated, 3013 chars total]".chars().count()
        );
        assert_eq!(
            h[11]["content"],
            long.as_str(),
            "the last exchange is protected"
        );
        let mut off = history(3, "cat", &long);
        assert_eq!(
            trim(
                &mut off,
                &strategy(json!({"tool_output_trim_chars": 0, "compact_keep": 0}))
            ),
            0,
            "0 disables"
        );
    }
}
