//! What mnemo asks the LLM, and how it checks the answers.
//!
//! Every write-path call asks for JSON under a schema ([`JsonSchema`]) derived from the Rust type the
//! answer is read into ([`Extraction`], [`Reconciliation`], [`Summary`]), so the two cannot
//! drift. The schema is strict (every field required, nothing else allowed); reading is
//! lenient (a missing id or text, a lower-case event), and every answer is validated here
//! before the engine acts on it: a small local model does produce the odd invented id or
//! empty string, and the write path must never act on those.

use mnemo_llm::{ChatMessage, JsonSchema};
use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use serde::Deserialize;

/// At most this many facts come out of one message.
pub const MAX_FACTS: usize = 3;
/// Longer "facts" are not facts; they are cut here.
const MAX_FACT_CHARS: usize = 400;

const EXTRACTION_PROMPT: &str = r#"You extract durable facts about the user from the user's latest message, for a long-term memory.

Return JSON: {"facts": [ ... ]} with at most 3 facts. Each fact is one short, standalone sentence in the third person that makes sense without the conversation, e.g. "The user's wife is Anne." or "The user dislikes pizza."

Only keep what the user states about themselves, their life, preferences, plans, health, work, and the people, pets and things around them. Questions, greetings, thanks, small talk, requests for help, and anything about the assistant give no facts: return {"facts": []}.

Examples:
"Hi! How are you today?" -> {"facts": []}
"Can you recommend a good book?" -> {"facts": []}
"My wife Anne and I just moved to Lyon." -> {"facts": ["The user's wife is Anne.", "The user moved to Lyon."]}
"I'm vegetarian, so no meat please." -> {"facts": ["The user is vegetarian."]}"#;

/// Added to the extraction prompt when the exchange before the message is shown: only then,
/// so that a message read alone gets the prompt it always got.
const EXTRACTION_CONTEXT_PROMPT: &str = r#"

The messages just before the latest one are shown as EARLIER. They are context only: use them to understand what the latest message refers to (a short answer, "it", "she"), and take facts from the LATEST message alone. For example:
"EARLIER: Assistant: Which city do you live in? LATEST: Lisbon, for two years now." -> {"facts": ["The user has lived in Lisbon for two years."]}"#;

const RECONCILE_PROMPT: &str = r#"You maintain a long-term memory of facts about a user. You get the EXISTING memories (numbered) and NEW facts just learned. Decide, for the memory as a whole, what to do:

- ADD: a new fact that no existing memory covers. Give its text; id is -1.
- UPDATE: a new fact that changes or refines an existing memory (e.g. the user's wife is now Anne, not Jane). Give the existing id and the new, complete text.
- DELETE: a new fact shows an existing memory is no longer true and nothing replaces it. Give the existing id; text is "".
- NONE: an existing memory stays as it is. Give its id; text is "".

A new fact already covered by a memory needs no ADD. Use only the ids shown. Return JSON: {"operations": [{"event": "ADD" | "UPDATE" | "DELETE" | "NONE", "id": <number>, "text": "<text>"}]}"#;

const SUMMARY_PROMPT: &str = r#"You keep a short running summary of what is known about a user and what their conversation is about. You get the PREVIOUS summary (possibly empty), NEW facts, and facts that are NO LONGER TRUE. Rewrite the summary so it includes the new facts and states nothing that is no longer true: where a new fact corrects an old one, rewrite that sentence with the new fact instead of keeping both. Add nothing that the summary or the new facts do not say. Stay under 120 words, in plain sentences. If nothing changes, return the previous summary unchanged. Return JSON: {"summary": "<text>"}

Example. PREVIOUS summary: "Jonas is married to Jane. He likes hiking." NEW facts: "The user's wife is Anne". NO LONGER TRUE: "The user's wife is Jane". Answer: {"summary": "Jonas is married to Anne. He likes hiking."}"#;

/// The JSON schema of `T`, named `name`, as an LLM call asks for it: every subschema
/// inlined (small models and grammar-constrained servers handle no `$ref`), and none of what
/// is written for developers (rustdoc descriptions, titles, Rust's integer formats), which a
/// server in JSON mode would otherwise put in the model's prompt.
fn schema_of<T: schemars::JsonSchema>(name: &str) -> JsonSchema {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    RecursiveTransform(|s: &mut schemars::Schema| {
        for key in ["title", "description", "format"] {
            s.remove(key);
        }
    })
    .transform(&mut schema);
    JsonSchema::new(name, schema.to_value())
}

/// The exchange before a user's message, shown to the extractor as context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Earlier {
    /// The user's message before it.
    pub user: Option<String>,
    /// The assistant's answer to that message, the one the latest message replies to.
    pub assistant: Option<String>,
}

impl Earlier {
    fn is_empty(&self) -> bool {
        self.user.is_none() && self.assistant.is_none()
    }
}

/// The extraction call: the system prompt, then the user's message, after the `earlier`
/// exchange when there is one (as context, not a source of facts).
pub fn extraction(message: &str, earlier: &Earlier) -> (Vec<ChatMessage>, JsonSchema) {
    let (system, content) = if earlier.is_empty() {
        (EXTRACTION_PROMPT.to_owned(), message.to_owned())
    } else {
        let mut content = String::from("EARLIER (context only):\n");
        for (who, text) in [("User", &earlier.user), ("Assistant", &earlier.assistant)] {
            if let Some(text) = text {
                content.push_str(&format!("{who}: {}\n", one_line(text, EARLIER_CHARS)));
            }
        }
        content.push_str(&format!("\nLATEST message:\n{message}"));
        (
            format!("{EXTRACTION_PROMPT}{EXTRACTION_CONTEXT_PROMPT}"),
            content,
        )
    };
    (
        vec![ChatMessage::system(system), ChatMessage::user(content)],
        schema_of::<Extraction>("facts"),
    )
}

/// Most characters of an earlier message shown to the extractor: context, not material.
const EARLIER_CHARS: usize = 600;

/// `text` on one line, cut to `limit` characters.
fn one_line(text: &str, limit: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// The extraction's answer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Extraction {
    /// Short, standalone facts about the user, in the third person.
    #[schemars(length(max = MAX_FACTS))]
    pub facts: Vec<String>,
}

impl Extraction {
    /// Trimmed, non-empty, distinct facts; at most [`MAX_FACTS`].
    pub fn clean(self) -> Vec<String> {
        let mut facts: Vec<String> = Vec::new();
        for fact in self.facts {
            let fact: String = fact.split_whitespace().collect::<Vec<_>>().join(" ");
            let fact: String = fact.chars().take(MAX_FACT_CHARS).collect();
            if !fact.is_empty() && !facts.iter().any(|f| f.eq_ignore_ascii_case(&fact)) {
                facts.push(fact);
            }
        }
        facts.truncate(MAX_FACTS);
        facts
    }
}

/// The reconciliation call. Existing memories are numbered 0.. so the model cannot invent or
/// garble the real ids.
pub fn reconciliation(existing: &[&str], new_facts: &[String]) -> (Vec<ChatMessage>, JsonSchema) {
    let mut listing = String::from("EXISTING memories:\n");
    for (i, memory) in existing.iter().enumerate() {
        listing.push_str(&format!("{i}: {memory}\n"));
    }
    listing.push_str("\nNEW facts:\n");
    for fact in new_facts {
        listing.push_str(&format!("- {fact}\n"));
    }
    (
        vec![
            ChatMessage::system(RECONCILE_PROMPT),
            ChatMessage::user(listing),
        ],
        schema_of::<Reconciliation>("memory_operations"),
    )
}

/// The reconciliation's answer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Reconciliation {
    /// What to do, per memory.
    pub operations: Vec<RawOperation>,
}

/// One operation as the model wrote it, before [`Reconciliation::validate`] checks it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawOperation {
    /// ADD, UPDATE, DELETE or NONE (read in any case).
    #[schemars(with = "Event")]
    pub event: String,
    /// The existing memory's number; -1 for ADD. (A missing `Option` field reads as
    /// `None`; the schema still requires it.)
    #[schemars(with = "i64")]
    pub id: Option<i64>,
    /// The new text (ADD, UPDATE); empty otherwise.
    #[schemars(with = "String")]
    pub text: Option<String>,
}

/// The events the schema allows (the answer's `event` is read leniently, as a string).
#[derive(schemars::JsonSchema)]
#[allow(dead_code, clippy::upper_case_acronyms)]
enum Event {
    ADD,
    UPDATE,
    DELETE,
    NONE,
}

/// A checked operation; ids index the existing memories shown to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Write this text as a new fact.
    Add(String),
    /// Replace the fact at this position in the list shown with this text (the old one is
    /// tombstoned, pointing at the new one).
    Update(usize, String),
    /// Tombstone the fact at this position in the list shown: it no longer holds.
    Delete(usize),
    /// NONE: a new fact is already known; nothing to write.
    Keep,
}

impl Reconciliation {
    /// The operations to apply, or why the answer cannot be trusted (then the caller adds the
    /// new facts as they are). NONE becomes [`Operation::Keep`]; one memory gets at most one change.
    pub fn validate(self, existing: usize) -> Result<Vec<Operation>, String> {
        let mut operations = Vec::new();
        let mut touched = std::collections::HashSet::new();
        for op in self.operations {
            let text = op
                .text
                .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|t| !t.is_empty());
            let mut id = || -> Result<usize, String> {
                let id = op.id.ok_or_else(|| format!("{} without an id", op.event))?;
                let id = usize::try_from(id)
                    .ok()
                    .filter(|&i| i < existing)
                    .ok_or_else(|| {
                        format!("{} names memory {id}, which was not shown", op.event)
                    })?;
                if !touched.insert(id) {
                    return Err(format!("memory {id} is changed twice"));
                }
                Ok(id)
            };
            match op.event.to_ascii_uppercase().as_str() {
                "ADD" => operations.push(Operation::Add(text.ok_or("ADD without a text")?)),
                "UPDATE" => {
                    let id = id()?;
                    operations.push(Operation::Update(id, text.ok_or("UPDATE without a text")?))
                }
                "DELETE" => operations.push(Operation::Delete(id()?)),
                "NONE" => operations.push(Operation::Keep),
                other => return Err(format!("unknown event {other:?}")),
            }
        }
        Ok(operations)
    }
}

/// The summary call: the previous summary, the facts a pass added, and those it updated or
/// deleted (`retracted`), which the summary must stop saying.
pub fn summary(
    previous: Option<&str>,
    new_facts: &[String],
    retracted: &[String],
) -> (Vec<ChatMessage>, JsonSchema) {
    let mut text = format!(
        "PREVIOUS summary:\n{}\n\nNEW facts:\n",
        previous.unwrap_or("")
    );
    for fact in new_facts {
        text.push_str(&format!("- {fact}\n"));
    }
    if !retracted.is_empty() {
        text.push_str("\nNO LONGER TRUE:\n");
        for fact in retracted {
            text.push_str(&format!("- {fact}\n"));
        }
    }
    (
        vec![ChatMessage::system(SUMMARY_PROMPT), ChatMessage::user(text)],
        schema_of::<Summary>("summary"),
    )
}

/// The summary's answer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Summary {
    /// The rewritten summary.
    pub summary: String,
}

const QUERY_EXPANSION_PROMPT: &str = "List 8 to 12 words or short phrases, comma-separated, that messages answering this question would likely contain: synonyms, related activities, kinds of things. Do not answer the question. No commentary.";

/// Longest expansion kept: a few dozen words; a rambling reply is cut here.
const MAX_EXPANSION_CHARS: usize = 300;

/// The messages asking for words an answer to `query` would use: the optional query
/// expansion of the read path (`[retrieval] query_expansion`). The reply is plain text, not
/// JSON: it is only ever added to a search's words.
pub fn query_expansion(query: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(QUERY_EXPANSION_PROMPT),
        ChatMessage::user(query),
    ]
}

/// The words of an expansion reply, on one line and cut to a bounded length; `None` when
/// nothing is left.
pub fn expansion_words(reply: &str) -> Option<String> {
    let words: String = reply
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_EXPANSION_CHARS)
        .collect();
    (!words.is_empty()).then_some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(value: serde_json::Value) -> Reconciliation {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn extracted_facts_are_cleaned() {
        let e = Extraction {
            facts: vec![
                "  The user's wife is Anne. ".into(),
                "".into(),
                "the user's wife is anne.".into(),
                "a".into(),
                "b".into(),
                "c".into(),
            ],
        };
        assert_eq!(e.clean(), ["The user's wife is Anne.", "a", "b"]);
    }

    #[test]
    fn operations_are_checked_against_the_ids_shown() {
        let good = ops(serde_json::json!({"operations": [
            {"event": "UPDATE", "id": 0, "text": "The user's wife is Anne."},
            {"event": "NONE", "id": 1, "text": ""},
            {"event": "ADD", "id": -1, "text": "The user has a cat."},
            {"event": "delete", "id": 2}
        ]}));
        assert_eq!(
            good.validate(3).unwrap(),
            [
                Operation::Update(0, "The user's wife is Anne.".into()),
                Operation::Keep,
                Operation::Add("The user has a cat.".into()),
                Operation::Delete(2)
            ]
        );
        for (bad, why) in [
            (
                serde_json::json!({"operations": [{"event": "UPDATE", "id": 7, "text": "x"}]}),
                "not shown",
            ),
            (
                serde_json::json!({"operations": [{"event": "DELETE", "id": -1}]}),
                "not shown",
            ),
            (
                serde_json::json!({"operations": [{"event": "UPDATE", "id": 0, "text": " "}]}),
                "without a text",
            ),
            (
                serde_json::json!({"operations": [{"event": "MERGE", "id": 0}]}),
                "unknown event",
            ),
            (
                serde_json::json!({"operations": [{"event": "DELETE", "id": 0}, {"event": "UPDATE", "id": 0, "text": "y"}]}),
                "twice",
            ),
            (
                serde_json::json!({"operations": [{"event": "ADD", "id": -1}]}),
                "ADD without",
            ),
        ] {
            let err = ops(bad.clone()).validate(3).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn the_earlier_exchange_is_shown_as_context_before_the_message() {
        let (alone, _) = extraction("I'm an architect.", &Earlier::default());
        assert_eq!(alone[0].content, EXTRACTION_PROMPT);
        assert_eq!(alone[1].content, "I'm an architect.");
        let earlier = Earlier {
            user: Some("Do you remember my favourite colour?".into()),
            assistant: Some(format!("I'm sorry,\n{}", "no. ".repeat(400))),
        };
        let (messages, _) = extraction("It's green.", &earlier);
        assert!(messages[0].content.contains("shown as EARLIER"));
        let content = &messages[1].content;
        assert!(content.starts_with(
            "EARLIER (context only):\nUser: Do you remember my favourite colour?\nAssistant: I'm sorry, no."
        ), "{content}");
        assert!(
            content.ends_with("…\n\nLATEST message:\nIt's green."),
            "{content}"
        );
        assert!(content.len() < 800, "the earlier answer is cut");
    }

    #[test]
    fn the_schemas_are_strict_and_self_contained() {
        let (_, facts) = extraction("x", &Earlier::default());
        let (_, ops) = reconciliation(&["a"], &["b".into()]);
        let (_, summary) = summary(None, &["b".into()], &[]);
        let f = &facts.schema;
        assert_eq!(f["type"], "object");
        assert_eq!(f["required"], serde_json::json!(["facts"]));
        assert_eq!(f["additionalProperties"], false);
        assert_eq!(f["properties"]["facts"]["maxItems"], MAX_FACTS);
        assert_eq!(f["properties"]["facts"]["items"]["type"], "string");
        let op = &ops.schema["properties"]["operations"]["items"];
        assert_eq!(op["required"], serde_json::json!(["event", "id", "text"]));
        assert_eq!(op["additionalProperties"], false);
        assert_eq!(op["properties"]["id"]["type"], "integer");
        assert_eq!(op["properties"]["text"]["type"], "string");
        assert_eq!(
            op["properties"]["event"]["enum"],
            serde_json::json!(["ADD", "UPDATE", "DELETE", "NONE"])
        );
        assert_eq!(summary.schema["required"], serde_json::json!(["summary"]));
        for schema in [&facts, &ops, &summary] {
            let text = schema.schema.to_string();
            for word in ["$ref", "$schema", "description", "format", "title"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
        assert_eq!(
            (
                facts.name.as_str(),
                ops.name.as_str(),
                summary.name.as_str()
            ),
            ("facts", "memory_operations", "summary")
        );
    }

    #[test]
    fn the_model_sees_small_numbers_not_ids() {
        let (messages, schema) = reconciliation(
            &["The user's wife is Jane."],
            &["The user's wife is Anne.".into()],
        );
        assert!(messages[1].content.contains("0: The user's wife is Jane."));
        assert!(messages[1].content.contains("- The user's wife is Anne."));
        assert_eq!(schema.name, "memory_operations");
    }

    #[test]
    fn an_expansion_reply_is_one_bounded_line() {
        assert_eq!(
            expansion_words("books, novel,\n  author ").as_deref(),
            Some("books, novel, author")
        );
        assert_eq!(expansion_words(" \n "), None);
        let long = "word ".repeat(200);
        assert_eq!(
            expansion_words(&long).map(|w| w.chars().count()),
            Some(MAX_EXPANSION_CHARS)
        );
    }
}
