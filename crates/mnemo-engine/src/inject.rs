//! Putting retrieved memories and an agent's notes into a chat request, as pure functions of the request.
//!
//! The last user message is replaced by one that carries, in this order: the conversation's
//! rolling summary, the memories, and then the user's own message. Other messages, and every
//! other field of the request, are left as they were. With neither a summary nor a memory
//! the request is not touched at all.
//!
//! Time decides what a small model cannot: the memories are shown **oldest first**, each
//! with its day (and the relative dates in its words resolved against that day), under a
//! line saying that where a later memory says otherwise, the later one holds. A fact that a
//! later fact may contradict (`conflicts_with`, [`crate::write::conflicts`]) is shown right
//! before that fact and marked as superseded by it, and the summary's sentences that still
//! state such an earlier fact are not shown: the summary comes first, and a small model
//! trusts it.

use std::collections::HashMap;

use chrono::NaiveDate;
use mnemo_core::MemoryId;
use serde_json::Value;

use crate::retrieval::SearchHit;
use crate::text::{dates, summary_check};

/// Heading above the user's own words in an injected message.
pub const CURRENT_MESSAGE_HEADING: &str = "Current message:";

/// Heading above the memories: the order they come in and which one holds.
pub const MEMORIES_HEADING: &str =
    "Relevant memories, oldest first (where a later memory says otherwise, the later one holds):";

/// What the model is told when memories were found but none is relevant to the message
/// (below the relevance floor): that it was looked for, so it neither invents a memory nor
/// takes the silence for one.
pub const NOTHING_RELEVANT: &str =
    "Relevant memories: none. Nothing stored about the user is relevant to this message.";

/// The memories a search found for the message, and whether it found some and withheld
/// them all as not relevant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Found<'a> {
    /// The memories to show.
    pub memories: &'a [SearchHit],
    /// Memories were found, and even the best fell below the relevance floor.
    pub nothing_relevant: bool,
}

/// What follows a fact that a later fact, shown right after it, may contradict.
pub const SUPERSEDED_MARK: &str = "(superseded by the next memory)";

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

/// The memories in the order they are shown, each with whether the fact shown after it
/// holds over it: oldest first, and a fact whose `conflicts_with` names a later one of
/// `memories` moved to just before that one. Memories of the same moment (the facts of one
/// message) go by their text, not by their random ids, so the same memories always make the
/// same prompt.
pub fn in_time_order(memories: &[SearchHit]) -> Vec<(&SearchHit, bool)> {
    let mut ordered: Vec<&SearchHit> = memories.iter().collect();
    ordered.sort_by(|a, b| (a.created_at, &a.content, a.id).cmp(&(b.created_at, &b.content, b.id)));
    let position: HashMap<MemoryId, usize> =
        ordered.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    let mut keyed: Vec<((usize, u8, usize), &SearchHit, bool)> = ordered
        .iter()
        .enumerate()
        .map(|(at, memory)| {
            let later = memory
                .conflicts_with
                .and_then(|later| position.get(&later).copied())
                .filter(|&later| later > at);
            match later {
                Some(later) => ((later, 0, at), *memory, true),
                None => ((at, 1, at), *memory, false),
            }
        })
        .collect();
    keyed.sort_by_key(|(key, _, _)| *key);
    keyed
        .into_iter()
        .map(|(_, memory, superseded)| (memory, superseded))
        .collect()
}

/// `summary` without the sentences that still state a fact shown as superseded.
fn summary_without_superseded(summary: &str, shown: &[(&SearchHit, bool)]) -> String {
    let earlier: Vec<String> = shown
        .iter()
        .filter(|(_, superseded)| *superseded)
        .map(|(m, _)| m.content.clone())
        .collect();
    if earlier.is_empty() {
        return summary.to_owned();
    }
    let later: Vec<String> = shown
        .iter()
        .filter(|(m, superseded)| !*superseded && m.role == mnemo_core::Role::Memory)
        .map(|(m, _)| m.content.clone())
        .collect();
    summary_check::without_stale_sentences(summary, &earlier, &later).0
}

/// The context block that goes before the user's words.
pub fn context_block(summary: Option<&str>, found: Found<'_>) -> Option<String> {
    let memories = found.memories;
    let shown = in_time_order(memories);
    let summary = summary
        .map(|s| summary_without_superseded(s, &shown))
        .filter(|s| !s.trim().is_empty());
    let nothing_relevant = found.nothing_relevant && memories.is_empty();
    if summary.is_none() && memories.is_empty() && !nothing_relevant {
        return None;
    }
    let mut block = String::new();
    if let Some(summary) = summary {
        block.push_str("Summary of the conversation so far:\n");
        block.push_str(summary.trim());
        block.push_str("\n\n");
    }
    if !shown.is_empty() {
        block.push_str(MEMORIES_HEADING);
        block.push('\n');
        for (memory, superseded) in shown {
            let content = memory
                .content
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let mark = superseded.then_some(SUPERSEDED_MARK);
            block.push_str(&memory_line(&content, memory.created_at.date_naive(), mark));
        }
        block.push('\n');
    }
    if nothing_relevant {
        block.push_str(NOTHING_RELEVANT);
        block.push_str("\n\n");
    }
    Some(block)
}

/// One memory as the model reads it: its day, its words, and what the relative dates in them
/// ("yesterday", "last week") meant on that day, spelled as people write dates. A small model
/// copies the date format it is shown into its answer, and cannot count back from a day.
fn memory_line(content: &str, day: NaiveDate, mark: Option<&str>) -> String {
    let mut line = format!("- [{}] {content}", dates::spell_day(day));
    let resolved = dates::resolved_phrases(content, day);
    if !resolved.is_empty() {
        let notes: Vec<String> = resolved
            .into_iter()
            .map(|(phrase, date)| format!("{phrase} = {date}"))
            .collect();
        line.push_str(&format!(" ({})", notes.join("; ")));
    }
    if let Some(mark) = mark {
        line.push(' ');
        line.push_str(mark);
    }
    line.push('\n');
    line
}

/// Returns `request` with the context injected into its last user message; `None` when there
/// is nothing to inject or no user message to carry it.
pub fn inject(request: &Value, summary: Option<&str>, found: Found<'_>) -> Option<Value> {
    let block = context_block(summary, found)?;
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

/// Puts the first lines of an agent's notes (`head`) into `request`'s system prompt, as an
/// `## Agent Memory` section (a system message is added when there is none).
pub fn agent_notes(request: &mut Value, head: &str) {
    let section = format!("## Agent Memory\n{head}");
    let Some(messages) = request["messages"].as_array_mut() else {
        return;
    };
    match messages.first_mut() {
        Some(first) if first["role"] == "system" && first["content"].is_string() => {
            let text = first["content"].as_str().unwrap_or_default();
            first["content"] = Value::String(format!("{text}\n\n{section}"));
        }
        _ => messages.insert(0, serde_json::json!({"role": "system", "content": section})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::StageScores;
    use chrono::TimeZone;
    use mnemo_core::{ConversationId, MemoryId, Role};
    use serde_json::json;

    fn shown(memories: &[SearchHit]) -> Found<'_> {
        Found {
            memories,
            nothing_relevant: false,
        }
    }

    #[test]
    fn nothing_relevant_is_said_only_when_memories_were_found_and_withheld() {
        let withheld = Found {
            memories: &[],
            nothing_relevant: true,
        };
        let block = context_block(None, withheld).unwrap();
        assert!(block.contains(NOTHING_RELEVANT), "{block}");
        assert!(context_block(None, shown(&[])).is_none());
        let kept = [memory("I like tea.", 3)];
        let some = Found {
            memories: &kept,
            nothing_relevant: true,
        };
        assert!(!context_block(None, some)
            .unwrap()
            .contains(NOTHING_RELEVANT));
    }

    fn memory(content: &str, day: u32) -> SearchHit {
        SearchHit {
            id: MemoryId::random(),
            conversation_id: ConversationId::new("c").unwrap(),
            role: Role::Memory,
            content: content.into(),
            created_at: chrono::Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap(),
            metadata: Default::default(),
            path: "x.md".into(),
            conflicts_with: None,
            score: 1.0,
            scores: StageScores::default(),
        }
    }

    /// `earlier`, marked as contradicted by `later`.
    fn superseded(mut earlier: SearchHit, later: &SearchHit) -> SearchHit {
        earlier.conflicts_with = Some(later.id);
        earlier
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
    fn summary_then_memories_oldest_first_then_the_message() {
        // Retrieval ranks the newer memory first; the prompt shows them as time does.
        let memories = [memory("I dislike pizza.", 2), memory("Anne is my wife.", 1)];
        let out = inject(&request(), Some("Planning dinners."), shown(&memories)).unwrap();
        let text = out["messages"][3]["content"].as_str().unwrap();
        let summary = text.find("Planning dinners.").unwrap();
        let heading = text.find(MEMORIES_HEADING).unwrap();
        let pizza = text.find("- [2 March 2026] I dislike pizza.").unwrap();
        let anne = text.find("- [1 March 2026] Anne is my wife.").unwrap();
        let current = text
            .find("Current message:\nWhat should I cook tonight?")
            .unwrap();
        assert!(
            summary < heading && heading < anne && anne < pizza && pizza < current,
            "{text}"
        );
        assert!(!text.contains(SUPERSEDED_MARK), "{text}");
        assert!(text.ends_with("What should I cook tonight?"));
        // Everything else is as it was.
        assert_eq!(out["messages"][1], request()["messages"][1]);
        assert_eq!(out["messages"][0], request()["messages"][0]);
        assert_eq!(out["temperature"], 0.2);
        assert_eq!(out["messages"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn memories_of_the_same_moment_are_shown_by_their_text_whatever_their_ids() {
        for _ in 0..8 {
            let memories = [
                memory("The user keeps bees.", 1),
                memory("The user grows leeks.", 1),
            ];
            let order: Vec<&str> = in_time_order(&memories)
                .into_iter()
                .map(|(m, _)| m.content.as_str())
                .collect();
            assert_eq!(order, ["The user grows leeks.", "The user keeps bees."]);
        }
    }

    #[test]
    fn relative_dates_in_a_memory_are_resolved_against_its_day() {
        // 3 March 2026 was a Tuesday.
        let memories = [memory(
            "I ran my first 10k yesterday, two weeks ago I could not.",
            3,
        )];
        let block = context_block(None, shown(&memories)).unwrap();
        assert!(
            block.contains(
                "- [3 March 2026] I ran my first 10k yesterday, two weeks ago I could not. \
                 (yesterday = 2 March 2026; two weeks ago = the week of 16 February 2026)\n"
            ),
            "{block}"
        );
        let plain = context_block(None, shown(&[memory("I like tea.", 3)])).unwrap();
        assert!(plain.contains("- [3 March 2026] I like tea.\n"), "{plain}");
    }

    #[test]
    fn a_superseded_fact_comes_right_before_what_holds_over_it_and_is_marked() {
        let van = memory("The user drives a green van.", 1);
        let tea = memory("The user drinks green tea.", 2);
        let bike = memory("The user rides a cargo bike.", 3);
        let van = superseded(van, &bike);
        // Relevance put the old value first and something else between them.
        let block = context_block(None, shown(&[van, bike, tea])).unwrap();
        let lines: Vec<&str> = block.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(
            lines,
            [
                MEMORIES_HEADING,
                "- [2 March 2026] The user drinks green tea.",
                "- [1 March 2026] The user drives a green van. (superseded by the next memory)",
                "- [3 March 2026] The user rides a cargo bike.",
            ],
            "{block}"
        );
    }

    #[test]
    fn a_mark_naming_a_fact_not_shown_or_an_older_one_moves_nothing() {
        let absent = memory("The user rides a cargo bike.", 9);
        let old = memory("The user drives a green van.", 1);
        let new = memory("The user drinks green tea.", 2);
        let backwards = superseded(new.clone(), &old);
        let block =
            context_block(None, shown(&[superseded(old.clone(), &absent), backwards])).unwrap();
        assert!(!block.contains(SUPERSEDED_MARK), "{block}");
        let van = block.find("green van").unwrap();
        assert!(van < block.find("green tea").unwrap(), "{block}");
    }

    #[test]
    fn a_summary_sentence_stating_a_superseded_fact_is_not_injected() {
        let bike = memory("The user rides a cargo bike.", 3);
        let van = superseded(memory("The user drives a green van.", 1), &bike);
        let summary = "The user drives a green van. The user's sister Wiebke is a potter.";
        let block = context_block(Some(summary), shown(&[bike.clone(), van])).unwrap();
        let summary_part = &block[..block.find(MEMORIES_HEADING).unwrap()];
        assert!(!summary_part.contains("green van"), "{block}");
        assert!(summary_part.contains("Wiebke is a potter."), "{block}");
        // Without the mark the summary is shown whole.
        let plain = memory("The user drives a green van.", 1);
        let block = context_block(Some(summary), shown(&[bike, plain])).unwrap();
        assert!(block.starts_with(&format!("Summary of the conversation so far:\n{summary}")));
    }

    #[test]
    fn nothing_to_inject_leaves_the_request_alone() {
        assert!(inject(&request(), None, shown(&[])).is_none());
        assert!(inject(&request(), Some("  "), shown(&[])).is_none());
        let no_user = json!({"messages": [{"role": "system", "content": "x"}]});
        assert!(inject(&no_user, Some("s"), shown(&[])).is_none());
    }

    #[test]
    fn a_summary_alone_is_injected() {
        let out = inject(&request(), Some("Planning dinners."), shown(&[])).unwrap();
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
        let out = inject(&req, None, shown(&[memory("I collect stamps.", 3)])).unwrap();
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
