//! What the index embeds and tokenises for a memory: its *keys*.
//!
//! A memory is stored as written, but it is found through two derived texts:
//! - the **dense key**, `Speaker: content` when the memory records who said it (metadata
//!   `speaker`), else the content: embedded once, from the file alone;
//! - the **lexical key**, `[8 May 2023] <previous turn> \n Speaker: content \n <next turn>`:
//!   the date lets "what did I do in May?" match by words, and the neighbouring turns carry
//!   the words of the exchange a turn belongs to (a question is often answered one turn later,
//!   in words that only the question shares). Neighbours are the adjacent chat turns of the
//!   same session (see [`crate::timeline`]), without their speaker names, which would only
//!   dilute the match on the speaker's own name. Then the facts the write path drew from
//!   the turn (facts whose `source_id` names it): "Researching adoption agencies" is found
//!   by "Caroline wants to adopt children" too. A last line holds canonical date tokens:
//!   the memory's day and every date its text mentions, resolved ([`crate::dates`]).
//!
//! On LoCoMo these keys lift BM25's evidence recall from 0.59 to 0.75 (docs/retrieval.md).
//! Because the lexical key reads the neighbours and the facts, it is rebuilt when they
//! change; the dense key never is.

use mnemo_core::MemoryRecord;

use crate::dates;

/// Metadata field naming who said a turn (from the OpenAI message's `name`, or set by hand).
pub const SPEAKER_FIELD: &str = "speaker";

/// How lexical keys are built; recorded in the snapshot so that a change rebuilds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyScheme {
    /// Prefix the memory's date.
    pub date: bool,
    /// Add the neighbouring turns' words to a turn's key.
    pub neighbours: bool,
    /// Add canonical date tokens: the memory's day and the dates its text mentions
    /// ([`crate::dates`]).
    pub date_tokens: bool,
    /// Add the texts of the facts drawn from a turn to the turn's key.
    pub facts: bool,
}

impl KeyScheme {
    /// A short description, stored in `memory_index.json`.
    pub fn describe(&self, bm25: &str) -> String {
        format!(
            "date={} neighbours={} date_tokens={} facts={} {bm25}",
            self.date, self.neighbours, self.date_tokens, self.facts
        )
    }

    /// Whether a turn's key reads other files (its neighbours, its facts), and so must be
    /// rebuilt when they change.
    pub fn reads_context(&self) -> bool {
        self.neighbours || self.facts
    }
}

/// Who said a memory, if it records that.
pub fn speaker(record: &MemoryRecord) -> Option<&str> {
    record
        .metadata
        .get(SPEAKER_FIELD)
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn with_speaker(record: &MemoryRecord) -> String {
    match speaker(record) {
        Some(name) => format!("{name}: {}", record.content),
        None => record.content.clone(),
    }
}

/// The text the embedding model reads.
pub fn dense_key(record: &MemoryRecord) -> String {
    with_speaker(record)
}

/// The texts around a memory that its lexical key reads: the neighbouring turns' contents
/// and the facts drawn from it.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyContextTexts<'a> {
    /// The turn before, in the same session.
    pub previous: Option<&'a str>,
    /// The turn after, in the same session.
    pub next: Option<&'a str>,
    /// The live facts whose `source_id` is this turn.
    pub facts: &'a [String],
}

/// The text BM25 reads; `context` holds the neighbouring turns and the turn's facts.
pub fn lexical_key(record: &MemoryRecord, context: KeyContextTexts, scheme: KeyScheme) -> String {
    let KeyContextTexts {
        previous,
        next,
        facts,
    } = context;
    let mut key = String::new();
    if scheme.date {
        key.push_str(&record.created_at.format("[%-d %B %Y] ").to_string());
    }
    if let Some(previous) = previous.filter(|_| scheme.neighbours) {
        key.push_str(previous);
        key.push('\n');
    }
    key.push_str(&with_speaker(record));
    if scheme.facts && !facts.is_empty() {
        key.push('\n');
        key.push_str(&facts.join(" "));
    }
    if let Some(next) = next.filter(|_| scheme.neighbours) {
        key.push('\n');
        key.push_str(next);
    }
    if scheme.date_tokens {
        let day = record.created_at.date_naive();
        key.push('\n');
        key.push_str(&dates::day_tokens(day));
        let mentioned = dates::date_tokens(&record.content, day);
        if !mentioned.is_empty() {
            key.push(' ');
            key.push_str(&mentioned);
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use mnemo_core::{ConversationId, Role};

    fn turn(content: &str, speaker: Option<&str>) -> MemoryRecord {
        let mut r = MemoryRecord::new(ConversationId::new("c").unwrap(), Role::User, content);
        r.created_at = chrono::Utc.with_ymd_and_hms(2023, 5, 8, 13, 56, 0).unwrap();
        if let Some(s) = speaker {
            r.metadata.insert(SPEAKER_FIELD.into(), s.into());
        }
        r
    }

    const ALL: KeyScheme = KeyScheme {
        date: true,
        neighbours: true,
        date_tokens: false,
        facts: true,
    };

    fn around<'a>(previous: &'a str, next: &'a str) -> KeyContextTexts<'a> {
        KeyContextTexts {
            previous: Some(previous),
            next: Some(next),
            facts: &[],
        }
    }

    #[test]
    fn the_lexical_key_frames_a_turn_with_its_date_and_neighbours() {
        let r = turn("I went to a support group.", Some("Caroline"));
        assert_eq!(
            lexical_key(&r, around("How was your week?", "That's brave!"), ALL),
            "[8 May 2023] How was your week?\nCaroline: I went to a support group.\nThat's brave!"
        );
        assert_eq!(
            lexical_key(&r, KeyContextTexts::default(), ALL),
            "[8 May 2023] Caroline: I went to a support group."
        );
        let bare = KeyScheme {
            date: false,
            neighbours: false,
            date_tokens: false,
            facts: false,
        };
        let facts = ["The user goes to a support group.".to_owned()];
        let context = KeyContextTexts {
            facts: &facts,
            ..around("x", "y")
        };
        assert_eq!(
            lexical_key(&r, context, bare),
            "Caroline: I went to a support group."
        );
    }

    #[test]
    fn a_turn_s_key_holds_the_facts_drawn_from_it() {
        let r = turn("Researching adoption agencies.", Some("Caroline"));
        let facts = [
            "Caroline wants to adopt children.".to_owned(),
            "Caroline dreams of a family.".to_owned(),
        ];
        let context = KeyContextTexts {
            facts: &facts,
            ..around("What are you up to?", "Wow!")
        };
        assert_eq!(
            lexical_key(&r, context, ALL),
            "[8 May 2023] What are you up to?\nCaroline: Researching adoption agencies.\n\
             Caroline wants to adopt children. Caroline dreams of a family.\nWow!"
        );
        let without = KeyScheme {
            facts: false,
            ..ALL
        };
        assert!(!lexical_key(&r, context, without).contains("adopt children"));
    }

    #[test]
    fn date_tokens_name_the_day_and_the_days_the_turn_speaks_of() {
        let r = turn("I went to a support group yesterday.", Some("Caroline"));
        let scheme = KeyScheme {
            date: false,
            neighbours: false,
            date_tokens: true,
            facts: false,
        };
        assert_eq!(
            lexical_key(&r, KeyContextTexts::default(), scheme),
            "Caroline: I went to a support group yesterday.\n\
             d20230508 m202305 w2023w19 y2023 d20230507 m202305 w2023w18 y2023"
        );
    }

    #[test]
    fn the_dense_key_names_the_speaker_when_known() {
        assert_eq!(dense_key(&turn("Hi", Some(" Mel "))), "Mel: Hi");
        assert_eq!(dense_key(&turn("Hi", None)), "Hi");
        assert_eq!(dense_key(&turn("Hi", Some(""))), "Hi");
    }
}
