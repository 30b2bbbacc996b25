//! Putting retrieved memories into a chat request, as a pure function of the request.
//!
//! The last user message is replaced by one that carries, in this order: the conversation's
//! rolling summary, the memories (most relevant first, each with its date), and then the
//! user's own message. Other messages, and every other field of the request, are left as they
//! were. With neither a summary nor a memory the request is not touched at all.

use serde_json::Value;

use crate::retrieval::SearchHit;

/// Heading above the user's own words in an injected message.
pub const CURRENT_MESSAGE_HEADING: &str = "Current message:";

/// The text of the last user message of an OpenAI chat request (text parts joined), if any.
pub fn last_user_text(request: &Value) -> Option<String> {
    let message = last_user_message(request)?;
    match &message["content"] {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

fn last_user_message(request: &Value) -> Option<&Value> {
    request["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
}

/// The context block that goes before the user's words.
pub fn context_block(summary: Option<&str>, memories: &[SearchHit]) -> Option<String> {
    let summary = summary.map(str::trim).filter(|s| !s.is_empty());
    if summary.is_none() && memories.is_empty() {
        return None;
    }
    let mut block = String::new();
    if let Some(summary) = summary {
        block.push_str("Summary of the conversation so far:\n");
        block.push_str(summary);
        block.push_str("\n\n");
    }
    if !memories.is_empty() {
        block.push_str("Relevant memories (most relevant first):\n");
        for memory in memories {
            let content = memory
                .content
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let day = memory.created_at.format("%Y-%m-%d");
            block.push_str(&format!("- [{day}] {content}\n"));
        }
        block.push('\n');
    }
    Some(block)
}

/// Returns `request` with the context injected into its last user message; `None` when there
/// is nothing to inject or no user message to carry it.
pub fn inject(request: &Value, summary: Option<&str>, memories: &[SearchHit]) -> Option<Value> {
    let block = context_block(summary, memories)?;
    let mut request = request.clone();
    let message = request["messages"]
        .as_array_mut()?
        .iter_mut()
        .rev()
        .find(|m| m["role"] == "user")?;
    let prefix = format!("{block}{CURRENT_MESSAGE_HEADING}\n");
    match &mut message["content"] {
        Value::String(text) => *text = format!("{prefix}{text}"),
        // Multimodal content: the context becomes a leading text part; images stay as sent.
        Value::Array(parts) => parts.insert(0, serde_json::json!({"type": "text", "text": prefix})),
        _ => return None,
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::StageScores;
    use chrono::TimeZone;
    use mnemo_core::{ConversationId, MemoryId, Role};
    use serde_json::json;

    fn memory(content: &str, day: u32) -> SearchHit {
        SearchHit {
            id: MemoryId::random(),
            conversation_id: ConversationId::new("c").unwrap(),
            role: Role::Memory,
            content: content.into(),
            created_at: chrono::Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap(),
            metadata: Default::default(),
            path: "x.md".into(),
            score: 1.0,
            scores: StageScores::default(),
        }
    }

    fn request() -> Value {
        json!({
            "model": "m",
            "temperature": 0.2,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "What should I cook tonight?"}
            ]
        })
    }

    #[test]
    fn summary_then_memories_then_the_message() {
        let memories = [memory("I dislike pizza.", 2), memory("Anne is my wife.", 1)];
        let out = inject(&request(), Some("Planning dinners."), &memories).unwrap();
        let text = out["messages"][3]["content"].as_str().unwrap();
        let summary = text.find("Planning dinners.").unwrap();
        let pizza = text.find("- [2026-03-02] I dislike pizza.").unwrap();
        let anne = text.find("- [2026-03-01] Anne is my wife.").unwrap();
        let current = text
            .find("Current message:\nWhat should I cook tonight?")
            .unwrap();
        assert!(summary < pizza && pizza < anne && anne < current, "{text}");
        assert!(text.ends_with("What should I cook tonight?"));
        // Everything else is as it was.
        assert_eq!(out["messages"][1], request()["messages"][1]);
        assert_eq!(out["messages"][0], request()["messages"][0]);
        assert_eq!(out["temperature"], 0.2);
        assert_eq!(out["messages"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn nothing_to_inject_leaves_the_request_alone() {
        assert!(inject(&request(), None, &[]).is_none());
        assert!(inject(&request(), Some("  "), &[]).is_none());
        let no_user = json!({"messages": [{"role": "system", "content": "x"}]});
        assert!(inject(&no_user, Some("s"), &[]).is_none());
    }

    #[test]
    fn a_summary_alone_is_injected() {
        let out = inject(&request(), Some("Planning dinners."), &[]).unwrap();
        let text = out["messages"][3]["content"].as_str().unwrap();
        assert!(text.starts_with("Summary of the conversation so far:\nPlanning dinners."));
        assert!(!text.contains("Relevant memories"));
    }

    #[test]
    fn multimodal_messages_get_a_leading_text_part() {
        let req = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ]}]});
        assert_eq!(last_user_text(&req).as_deref(), Some("What is this?"));
        let out = inject(&req, None, &[memory("I collect stamps.", 3)]).unwrap();
        let parts = out["messages"][0]["content"].as_array().unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts[0]["text"]
            .as_str()
            .unwrap()
            .contains("I collect stamps."));
        assert_eq!(parts[2]["type"], "image_url");
    }

    #[test]
    fn the_last_user_text_is_found() {
        assert_eq!(
            last_user_text(&request()).as_deref(),
            Some("What should I cook tonight?")
        );
        assert_eq!(last_user_text(&json!({"messages": []})), None);
        assert_eq!(last_user_text(&json!({})), None);
    }
}
