//! What the index embeds and tokenises for a memory: its *keys*.
//!
//! A memory is stored as written, but it is found through two derived texts:
//! - the **dense key**, `Speaker: content` when the memory records who said it (metadata
//!   `speaker`), else the content: embedded once, from the file alone;
//! - the **lexical key**, `[8 May 2023] Speaker: content` framed by the turns around it:
//!   the date lets "what did I do in May?" match by words, and the neighbouring turns carry
//!   the words of the exchange a turn belongs to (a question is often answered one turn later,
//!   in words that only the question shares). Neighbours are the chat turns of the same
//!   session up to [`KeyScheme::neighbour_turns`] away on each side (see
//!   [`crate::index::timeline`]), without their speaker names, which would only dilute the match on
//!   the speaker's own name; a neighbour's words count `decay^distance` (a word of the turn
//!   next door counts half, one two turns away a quarter). Then the facts the write path
//!   drew from the turn (facts whose `source_id` names it): "Researching adoption agencies"
//!   is found by "Caroline wants to adopt children" too. A last line holds canonical date
//!   tokens: the memory's day and every date its text mentions, resolved ([`crate::text::dates`]).
//!   Last, at a weight of their own, the embedding model's words nearest the memory's dense
//!   key (document expansion, [`crate::index::model_words`]): "I'm reading Dune" also holds *novel*.
//!
//! On LoCoMo these keys lift BM25's evidence recall at 10 from 0.64 (the turn's own words) to
//! 0.78 (docs/retrieval.md).
//! Because the lexical key reads the neighbours and the facts, it is rebuilt when they
//! change; the dense key never is.

use mnemo_core::MemoryRecord;

use crate::text::dates;

/// Metadata field naming who said a turn (from the OpenAI message's `name`, or set by hand).
pub const SPEAKER_FIELD: &str = "speaker";

/// How lexical keys are built; recorded in the snapshot so that a change rebuilds them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyScheme {
    /// Prefix the memory's date.
    pub date: bool,
    /// How many turns on each side of a turn lend it their words (0: none).
    pub neighbour_turns: usize,
    /// The weight of a neighbour's words: this to the power of its distance.
    pub neighbour_decay: f32,
    /// Add canonical date tokens: the memory's day and the dates its text mentions
    /// ([`crate::text::dates`]).
    pub date_tokens: bool,
    /// Add the texts of the facts drawn from a turn to the turn's key.
    pub facts: bool,
    /// How many of the model's words nearest the memory its key holds (0: none).
    pub document_words: usize,
    /// What each of those words weighs against a word of the memory's own.
    pub document_words_weight: f32,
}

impl KeyScheme {
    /// A short description, stored in `memory_index.json`.
    pub fn describe(&self, bm25: &str) -> String {
        let mut description = format!(
            "date={} neighbours={}x{} date_tokens={} facts={} {bm25}",
            self.date, self.neighbour_turns, self.neighbour_decay, self.date_tokens, self.facts
        );
        if self.document_words > 0 {
            description.push_str(&format!(
                " document_words={}x{}",
                self.document_words, self.document_words_weight
            ));
        }
        description
    }

    /// Whether a turn's key reads other files (its neighbours, its facts), and so must be
    /// rebuilt when they change.
    pub fn reads_context(&self) -> bool {
        self.neighbour_turns > 0 || self.facts
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

/// The texts around a memory that its lexical key reads: the neighbouring turns' contents,
/// the facts drawn from it, and the model's words nearest it.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyContextTexts<'a> {
    /// The turns before, in the same session, nearest first.
    pub before: &'a [String],
    /// The turns after, in the same session, nearest first.
    pub after: &'a [String],
    /// The live facts whose `source_id` is this turn.
    pub facts: &'a [String],
    /// The model's words nearest the memory's embedding, separated by spaces.
    pub nearest_words: &'a str,
}

/// The text BM25 reads for a memory, in weighted parts: the memory's own (weight 1), then
/// each neighbour's.
#[derive(Debug, Clone, PartialEq)]
pub struct LexicalKey {
    /// Each part's text and the weight of its words.
    pub parts: Vec<(String, f32)>,
}

impl LexicalKey {
    /// The parts as [`mnemo_index::LexicalEncoder::weighted_document`] reads them.
    pub fn weighted(&self) -> Vec<(&str, f32)> {
        self.parts.iter().map(|(t, w)| (t.as_str(), *w)).collect()
    }
}

/// What BM25 reads for `record`; `context` holds the neighbouring turns and the turn's facts.
pub fn lexical_key(
    record: &MemoryRecord,
    context: KeyContextTexts,
    scheme: KeyScheme,
) -> LexicalKey {
    let mut own = String::new();
    if scheme.date {
        own.push_str(&record.created_at.format("[%-d %B %Y] ").to_string());
    }
    own.push_str(&with_speaker(record));
    if scheme.facts && !context.facts.is_empty() {
        own.push('\n');
        own.push_str(&context.facts.join(" "));
    }
    if scheme.date_tokens {
        let day = record.created_at.date_naive();
        own.push('\n');
        own.push_str(&dates::day_tokens(day));
        let mentioned = dates::date_tokens(&record.content, day);
        if !mentioned.is_empty() {
            own.push(' ');
            own.push_str(&mentioned);
        }
    }
    let mut parts = vec![(own, 1.0)];
    if scheme.document_words > 0 && !context.nearest_words.is_empty() {
        parts.push((
            context.nearest_words.to_owned(),
            scheme.document_words_weight,
        ));
    }
    for side in [context.before, context.after] {
        let mut weight = 1.0;
        for text in side.iter().take(scheme.neighbour_turns) {
            weight *= scheme.neighbour_decay;
            parts.push((text.clone(), weight));
        }
    }
    LexicalKey { parts }
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
        neighbour_turns: 2,
        neighbour_decay: 0.5,
        date_tokens: false,
        facts: true,
        document_words: 5,
        document_words_weight: 0.3,
    };

    const BARE: KeyScheme = KeyScheme {
        date: false,
        neighbour_turns: 0,
        neighbour_decay: 0.5,
        date_tokens: false,
        facts: false,
        document_words: 0,
        document_words_weight: 0.3,
    };

    fn texts(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| (*t).to_owned()).collect()
    }

    fn parts(parts: &[(&str, f32)]) -> LexicalKey {
        LexicalKey {
            parts: parts.iter().map(|(t, w)| ((*t).to_owned(), *w)).collect(),
        }
    }

    #[test]
    fn the_lexical_key_frames_a_turn_with_its_date_and_neighbours_weighed_by_distance() {
        let r = turn("I went to a support group.", Some("Caroline"));
        let before = texts(&["How was your week?", "Hi Caroline!", "Hello."]);
        let after = texts(&["That's brave!"]);
        let context = KeyContextTexts {
            before: &before,
            after: &after,
            facts: &[],
            nearest_words: "therapy counseling",
        };
        assert_eq!(
            lexical_key(&r, context, ALL),
            parts(&[
                ("[8 May 2023] Caroline: I went to a support group.", 1.0),
                ("therapy counseling", 0.3),
                ("How was your week?", 0.5),
                ("Hi Caroline!", 0.25),
                ("That's brave!", 0.5),
            ])
        );
        assert_eq!(
            lexical_key(&r, KeyContextTexts::default(), ALL),
            parts(&[("[8 May 2023] Caroline: I went to a support group.", 1.0)])
        );
        let facts = texts(&["The user goes to a support group."]);
        let context = KeyContextTexts {
            facts: &facts,
            ..context
        };
        assert_eq!(
            lexical_key(&r, context, BARE),
            parts(&[("Caroline: I went to a support group.", 1.0)])
        );
    }

    #[test]
    fn a_turn_s_key_holds_the_facts_drawn_from_it() {
        let r = turn("Researching adoption agencies.", Some("Caroline"));
        let facts = texts(&[
            "Caroline wants to adopt children.",
            "Caroline dreams of a family.",
        ]);
        let before = texts(&["What are you up to?"]);
        let context = KeyContextTexts {
            before: &before,
            after: &[],
            facts: &facts,
            nearest_words: "",
        };
        assert_eq!(
            lexical_key(&r, context, ALL).parts[0].0,
            "[8 May 2023] Caroline: Researching adoption agencies.\n\
             Caroline wants to adopt children. Caroline dreams of a family."
        );
        let without = KeyScheme {
            facts: false,
            ..ALL
        };
        assert!(!lexical_key(&r, context, without).parts[0]
            .0
            .contains("adopt children"));
    }

    #[test]
    fn date_tokens_name_the_day_and_the_days_the_turn_speaks_of() {
        let r = turn("I went to a support group yesterday.", Some("Caroline"));
        let scheme = KeyScheme {
            date_tokens: true,
            ..BARE
        };
        assert_eq!(
            lexical_key(&r, KeyContextTexts::default(), scheme),
            parts(&[(
                "Caroline: I went to a support group yesterday.\n\
                 d20230508 m202305 w2023w19 y2023 d20230507 m202305 w2023w18 y2023",
                1.0
            )])
        );
    }

    #[test]
    fn the_dense_key_names_the_speaker_when_known() {
        assert_eq!(dense_key(&turn("Hi", Some(" Mel "))), "Mel: Hi");
        assert_eq!(dense_key(&turn("Hi", None)), "Hi");
        assert_eq!(dense_key(&turn("Hi", Some(""))), "Hi");
    }
}
