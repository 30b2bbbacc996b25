//! Does a chat turn say anything of its own? A lexical check, so that turns like "Thanks!",
//! "I'm afraid I can't help with that." or "Sorry, I can't tell which street your office is on." (after
//! "Which street is my office on?") do not take the places of memories that hold something.
//!
//! A turn *says nothing* when every content word in it ([`crate::text::words`]) is
//! conversational filler or was already said in the turn it answers. Filler ([`FILLER`]) is
//! the union of a few classes of English that carry the exchange rather than its matter:
//! greetings and leave-takings, thanks and apologies, assent and reactions, hedges, the
//! light verbs and pronoun-like nouns of small talk ("get", "thing", "something"), question
//! words, and talk about the conversation itself ("help", "information", "remember",
//! "share"). Names and numbers are content like any word, so "Thanks, Ilse!" says something.
//! So is a question with a word of its own: it says nothing about the asker, but turns that
//! only ask hold evidence often enough that ranking them down costs recall. Stored facts and
//! summaries are never ranked down: they are what the write path kept.
//!
//! The read path gives such a turn only the places left after every memory that says
//! something (`[retrieval] low_information_last`); the write path asks for no facts from a
//! user message that says nothing, and keeps no extracted fact that says nothing
//! ([`crate::text::grounding`]: "The user will talk later.").

use std::collections::HashSet;
use std::sync::OnceLock;

use super::words::{content_stems, stem};

/// Greetings and leave-takings.
const GREETINGS: &[&str] = &[
    "bye", "cheers", "goodbye", "hello", "hey", "hi", "later", "soon", "talk", "today", "tomorrow",
    "tonight",
];
/// Thanks, politeness and apology.
const POLITENESS: &[&str] = &[
    "apologise",
    "apologize",
    "appreciate",
    "care",
    "kind",
    "please",
    "sorry",
    "thank",
    "thanks",
    "welcome",
    "worries",
];
/// Assent, agreement and reactions.
const ASSENT: &[&str] = &[
    "absolutely",
    "amazing",
    "awesome",
    "cool",
    "course",
    "definitely",
    "exactly",
    "fine",
    "glad",
    "good",
    "got",
    "great",
    "happy",
    "lovely",
    "nice",
    "noted",
    "oh",
    "ok",
    "okay",
    "problem",
    "right",
    "sound",
    "sounds",
    "sure",
    "totally",
    "understand",
    "well",
    "wonderful",
    "wow",
    "yeah",
    "yep",
    "yes",
];
/// Hedges, intensifiers and connectives that qualify rather than tell.
const HEDGES: &[&str] = &[
    "afraid",
    "again",
    "because",
    "else",
    "enough",
    "feel",
    "however",
    "if",
    "just",
    "lot",
    "may",
    "might",
    "more",
    "much",
    "really",
    "unfortunately",
];
/// Light verbs (those that lend a phrase its grammar, not its matter: "get going", "give it a
/// go", "make sure", "take a look") and pronoun-like nouns of small talk.
const LIGHT_WORDS: &[&str] = &[
    "doing",
    "get",
    "give",
    "go",
    "going",
    "hope",
    "keep",
    "let",
    "like",
    "love",
    "make",
    "mind",
    "need",
    "one",
    "see",
    "something",
    "anything",
    "take",
    "thing",
    "things",
    "want",
    "way",
];
/// Question words.
const QUESTION_WORDS: &[&str] = &["how", "what", "when", "where", "why"];
/// Talk about the conversation and the assistant itself.
const ABOUT_THE_CHAT: &[&str] = &[
    "able",
    "access",
    "answer",
    "ask",
    "assist",
    "assistance",
    "chat",
    "detail",
    "free",
    "hear",
    "help",
    "helpful",
    "here",
    "information",
    "know",
    "personal",
    "provide",
    "question",
    "remember",
    "request",
    "share",
    "sharing",
    "specific",
    "tell",
    "telling",
    "unable",
];

/// Every class of filler together.
pub const FILLER: &[&[&str]] = &[
    GREETINGS,
    POLITENESS,
    ASSENT,
    HEDGES,
    LIGHT_WORDS,
    QUESTION_WORDS,
    ABOUT_THE_CHAT,
];

fn filler() -> &'static HashSet<String> {
    static FILLER_STEMS: OnceLock<HashSet<String>> = OnceLock::new();
    FILLER_STEMS.get_or_init(|| {
        FILLER
            .iter()
            .flat_map(|c| c.iter())
            .map(|w| stem(w))
            .collect()
    })
}

/// Whether `turn` says something that is neither filler nor in `answered` (the turn right
/// before it in its session, if any).
pub fn says_something(turn: &str, answered: Option<&str>) -> bool {
    let before = answered.map(content_stems).unwrap_or_default();
    content_stems(turn)
        .iter()
        .any(|stem| !filler().contains(stem) && !before.contains(stem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings_thanks_assent_and_refusals_say_nothing() {
        for turn in [
            "Hey, good to hear from you!",
            "Cheers, that's really helpful.",
            "Okay, sure, sounds great.",
            "Sorry, I'm unable to share personal details.",
            "I'm afraid I can't help with that request.",
            "No worries, glad to help!",
            "See you later, take care!",
            "Thank you so much, I appreciate it.",
            "Okay, I'll keep it in mind and let you know!",
        ] {
            assert!(!says_something(turn, None), "{turn}");
        }
    }

    #[test]
    fn a_turn_that_only_repeats_the_one_it_answers_says_nothing() {
        let question = "Which street is my office on?";
        assert!(!says_something(
            "Sorry, I can't tell which street your office is on.",
            Some(question)
        ));
        assert!(says_something(
            "Your office is on Karlstrasse.",
            Some(question)
        ));
        assert!(!says_something(
            "Glad to hear about your garden.",
            Some("I planted a garden.")
        ));
    }

    #[test]
    fn statements_names_and_numbers_say_something() {
        for turn in [
            "I keep bees.",
            "Thanks, Ilse!",
            "We met in 2011.",
            "I'm lactose intolerant.",
            "Which kayak should I buy?",
        ] {
            assert!(says_something(turn, None), "{turn}");
        }
    }
}
