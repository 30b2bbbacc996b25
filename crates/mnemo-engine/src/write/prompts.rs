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
/// Characters of the user's message shown with the question whether a fact replaces
/// another: enough for the sentence that says what changed, not a pasted document.
const MESSAGE_SHOWN: usize = 1000;

const EXTRACTION_PROMPT: &str = r#"You extract durable facts about the user from the user's latest message, for a long-term memory.

Return JSON: {"facts": [ ... ]} with at most 3 facts. Each fact is one short sentence in the third person that makes sense without the conversation. Write "The user ..." for the user, and name anyone else by their relation to the user and their name when it is given ("The user's neighbour Ines ...").

Rules:
- Keep only what the user says is true now about themselves, their life, work, health, habits, plans and preferences, and about the people, pets and things around them.
- What the user says about someone else is a fact about that person, never about the user.
- Keep negations and endings: "I never drink milk" gives "The user never drinks milk."; "I sold my van" gives "The user sold their van."
- When the user corrects what they said, give the fact as it now stands: "Sorry, the party is on Friday, not Thursday" gives "The user's party is on Friday."
- A wish or a condition is not a fact: "If I had more time I would paint" gives nothing; "I'd love to visit Chile one day" gives "The user would love to visit Chile."
- Questions, greetings, thanks, small talk, requests for help, and anything the assistant said give no facts: return {"facts": []}.

Examples:
"Morning! Can you convert 5 miles to kilometres for me?" -> {"facts": []}
"My neighbour Ines is a pilot, and I restore old clocks on weekends." -> {"facts": ["The user's neighbour Ines is a pilot.", "The user restores old clocks on weekends."]}
"I don't own a van anymore, I cycle everywhere now." -> {"facts": ["The user no longer owns a van.", "The user cycles everywhere."]}"#;

/// Added to the extraction prompt when the exchange before the message is shown: only then,
/// so that a message read alone gets the prompt it always got.
const EXTRACTION_CONTEXT_PROMPT: &str = r#"

The messages just before the latest one are shown as EARLIER. They are context only: use them to understand what the latest message refers to (a short answer, "it", "she"), and take facts from the LATEST message alone. When the latest message adds nothing new, return {"facts": []}. For example:
"EARLIER: Assistant: Which instrument do you play? LATEST: The bassoon, in a community orchestra." -> {"facts": ["The user plays the bassoon in a community orchestra."]}"#;

const RECONCILE_PROMPT: &str = r#"You maintain a long-term memory of facts about a user and the people around them. You get the EXISTING memories (numbered) and NEW facts just learned. Decide, for the memory as a whole, what to do:

- ADD: a new fact that no existing memory covers. Give its text; id is -1.
- UPDATE: a new fact that changes or corrects an existing memory about the same person (a new value for the same thing: another job, city, name, date or number). Give the existing id and the new, complete text.
- DELETE: a new fact shows an existing memory is no longer true and nothing replaces it. Give the existing id; text is "".
- NONE: a new fact that an existing memory already says. Give that memory's id; text is "".

A fact about one person never changes a memory about another. Change each existing memory at most once. Use only the ids shown. Return JSON: {"operations": [{"event": "ADD" | "UPDATE" | "DELETE" | "NONE", "id": <number>, "text": "<text>"}]}

Example. EXISTING memories: 0: The user drives a red hatchback. 1: The user's brother Tariq lives in Ghent. NEW facts: - The user now drives a blue pickup. - The user's brother Tariq has twin daughters. Answer: {"operations": [{"event": "UPDATE", "id": 0, "text": "The user now drives a blue pickup."}, {"event": "ADD", "id": -1, "text": "The user's brother Tariq has twin daughters."}]}"#;

const SUMMARY_PROMPT: &str = r#"You keep a short running summary of what is known about a user and what their conversation is about. You get the PREVIOUS summary (possibly empty), NEW facts, and facts that are NO LONGER TRUE. Rewrite the summary so it includes the new facts and states nothing that is no longer true: where a new fact corrects an old one, rewrite that sentence with the new fact instead of keeping both. Keep what is said of other people with those people: never give the user someone else's job, habit or trait. Add nothing that the summary or the new facts do not say. Stay under 120 words, in plain sentences. If nothing changes, return the previous summary unchanged. Return JSON: {"summary": "<text>"}"#;

const REPLACES_PROMPT: &str = r#"You keep a long-term memory about a user. The user just sent a MESSAGE, and a NEW fact was drawn from it. Say whether an OLD memory is no longer true after that message: "replaces" is true when the message corrects the OLD memory, or says that what it states changed, moved or ended (another home, job, name, number, day or habit in place of the old one), false when both can be true at once (two different things, or more detail on the same thing). Return JSON: {"replaces": true | false}

Examples:
MESSAGE: "They gave me a bigger locker, number 212." OLD: "The user's locker is number 48." NEW: "The user's locker is number 212." -> {"replaces": true}
MESSAGE: "We left the flat on Elm Road, we're renting a cottage by the river." OLD: "The user lives on Elm Road." NEW: "The user rents a cottage by the river." -> {"replaces": true}
MESSAGE: "I picked up the flute this spring." OLD: "The user plays chess on Sundays." NEW: "The user plays the flute." -> {"replaces": false}
MESSAGE: "My locker is next to the showers." OLD: "The user's locker is number 48." NEW: "The user's locker is next to the showers." -> {"replaces": false}"#;

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

/// The question whether `new`, drawn from the user's `message`, replaces `old`: asked for
/// a fact no rule and no reconciler answer let replace anything. The message is shown
/// because it, not the fact, says that something changed ("we left", "no longer").
pub fn replaces(message: &str, old: &str, new: &str) -> (Vec<ChatMessage>, JsonSchema) {
    (
        vec![
            ChatMessage::system(REPLACES_PROMPT),
            ChatMessage::user(format!(
                "MESSAGE: {:?}\nOLD: {old:?}\nNEW: {new:?}",
                one_line(message, MESSAGE_SHOWN)
            )),
        ],
        schema_of::<Replaces>("replaces"),
    )
}

/// The answer to [`replaces`].
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Replaces {
    /// Whether the new fact makes the old memory no longer true.
    pub replaces: bool,
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

/// A reconciler's answer after [`Reconciliation::validate`]: the operations to apply, and
/// what was mended to get them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The operations, in the answer's order.
    pub operations: Vec<Operation>,
    /// Each part of the answer that could not be used as it was, and what became of it.
    pub repairs: Vec<String>,
}

impl Reconciliation {
    /// The operations to apply, mending what can be mended: an UPDATE naming a memory that
    /// was not shown, or one already changed by this answer, adds its text instead; a
    /// DELETE or NONE naming such a memory, and an ADD or UPDATE without a text, is left
    /// out (the new facts it stood for are still written, [`crate::write`] makes sure). An
    /// answer that cannot be read at all (an unknown event) is an `Err`, for the caller to
    /// ask again. NONE becomes [`Operation::Keep`].
    pub fn validate(self, existing: usize) -> Result<Checked, String> {
        let mut checked = Checked {
            operations: Vec::new(),
            repairs: Vec::new(),
        };
        let mut touched = std::collections::HashSet::new();
        for op in self.operations {
            let text = op
                .text
                .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|t| !t.is_empty());
            let event = op.event.to_ascii_uppercase();
            let named = match op.id {
                Some(id) => id.to_string(),
                None => "no memory".to_owned(),
            };
            let shown = op
                .id
                .and_then(|id| usize::try_from(id).ok())
                .filter(|&i| i < existing);
            let (operations, repairs) = (&mut checked.operations, &mut checked.repairs);
            match (event.as_str(), shown, text) {
                ("ADD", _, Some(text)) => operations.push(Operation::Add(text)),
                ("ADD", _, None) => repairs.push("an ADD without a text was left out".into()),
                ("UPDATE", Some(i), Some(text)) if touched.insert(i) => {
                    operations.push(Operation::Update(i, text))
                }
                ("UPDATE", Some(i), Some(text)) => {
                    repairs.push(format!(
                        "memory {i} is changed twice: the second UPDATE's text is added"
                    ));
                    operations.push(Operation::Add(text));
                }
                ("UPDATE", None, Some(text)) => {
                    repairs.push(format!(
                        "UPDATE names {named}, which was not shown: its text is added"
                    ));
                    operations.push(Operation::Add(text));
                }
                ("UPDATE", _, None) => repairs.push("an UPDATE without a text was left out".into()),
                ("DELETE" | "NONE", Some(i), _) if touched.insert(i) => {
                    operations.push(if event == "DELETE" {
                        Operation::Delete(i)
                    } else {
                        Operation::Keep
                    })
                }
                ("DELETE" | "NONE", Some(i), _) => repairs.push(format!(
                    "memory {i} is changed twice: the {event} was left out"
                )),
                ("DELETE" | "NONE", None, _) => repairs.push(format!(
                    "{event} names {named}, which was not shown: left out"
                )),
                (other, _, _) => return Err(format!("unknown event {other:?}")),
            }
        }
        Ok(checked)
    }
}

/// What to tell a reconciler whose answer could not be read, before it answers again.
pub fn reconciliation_again(why: &str, existing: usize) -> ChatMessage {
    ChatMessage::user(format!(
        "That answer could not be used ({why}). Answer again with the same JSON shape: each event one of ADD, UPDATE, DELETE, NONE; ids only from 0 to {}; each existing memory changed at most once.",
        existing.saturating_sub(1)
    ))
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
                "  The user's kite is blue. ".into(),
                "".into(),
                "the user's kite is blue.".into(),
                "a".into(),
                "b".into(),
                "c".into(),
            ],
        };
        assert_eq!(e.clean(), ["The user's kite is blue.", "a", "b"]);
    }

    #[test]
    fn operations_are_checked_against_the_ids_shown() {
        let good = ops(serde_json::json!({"operations": [
            {"event": "UPDATE", "id": 0, "text": "The user's kite is blue."},
            {"event": "NONE", "id": 1, "text": ""},
            {"event": "ADD", "id": -1, "text": "The user has a ferret."},
            {"event": "delete", "id": 2}
        ]}));
        let checked = good.validate(3).unwrap();
        assert_eq!(
            checked.operations,
            [
                Operation::Update(0, "The user's kite is blue.".into()),
                Operation::Keep,
                Operation::Add("The user has a ferret.".into()),
                Operation::Delete(2)
            ]
        );
        assert!(checked.repairs.is_empty());
    }

    #[test]
    fn what_can_be_mended_is_mended_and_the_rest_is_refused() {
        for (answer, operations, repair) in [
            (
                serde_json::json!({"operations": [{"event": "UPDATE", "id": 7, "text": "x"}]}),
                vec![Operation::Add("x".into())],
                "not shown: its text is added",
            ),
            (
                serde_json::json!({"operations": [{"event": "DELETE", "id": -1}]}),
                vec![],
                "not shown: left out",
            ),
            (
                serde_json::json!({"operations": [{"event": "UPDATE", "id": 0, "text": " "}]}),
                vec![],
                "without a text",
            ),
            (
                serde_json::json!({"operations": [{"event": "DELETE", "id": 0}, {"event": "UPDATE", "id": 0, "text": "y"}]}),
                vec![Operation::Delete(0), Operation::Add("y".into())],
                "changed twice",
            ),
            (
                serde_json::json!({"operations": [{"event": "ADD", "id": -1}]}),
                vec![],
                "ADD without",
            ),
        ] {
            let checked = ops(answer.clone()).validate(3).unwrap();
            assert_eq!(checked.operations, operations, "{answer}");
            assert!(
                checked.repairs[0].contains(repair),
                "{answer}: {:?}",
                checked.repairs
            );
        }
        let err = ops(serde_json::json!({"operations": [{"event": "MERGE", "id": 0}]}))
            .validate(3)
            .unwrap_err();
        assert!(err.contains("unknown event"), "{err}");
        let again = reconciliation_again(&err, 3);
        assert!(again.content.contains("from 0 to 2"), "{}", again.content);
    }

    #[test]
    fn the_earlier_exchange_is_shown_as_context_before_the_message() {
        let (alone, _) = extraction("I'm a glazier.", &Earlier::default());
        assert_eq!(alone[0].content, EXTRACTION_PROMPT);
        assert_eq!(alone[1].content, "I'm a glazier.");
        let earlier = Earlier {
            user: Some("Do you know my favourite tree?".into()),
            assistant: Some(format!("I'm sorry,\n{}", "no. ".repeat(400))),
        };
        let (messages, _) = extraction("The birch.", &earlier);
        assert!(messages[0].content.contains("shown as EARLIER"));
        let content = &messages[1].content;
        assert!(content.starts_with(
            "EARLIER (context only):\nUser: Do you know my favourite tree?\nAssistant: I'm sorry, no."
        ), "{content}");
        assert!(
            content.ends_with("…\n\nLATEST message:\nThe birch."),
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
            &["The user's kite is red."],
            &["The user's kite is blue.".into()],
        );
        assert!(messages[1].content.contains("0: The user's kite is red."));
        assert!(messages[1].content.contains("- The user's kite is blue."));
        assert_eq!(schema.name, "memory_operations");
    }
}
