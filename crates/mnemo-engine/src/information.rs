//! Does a chat turn say anything of its own? A lexical check, so that turns like "Thanks!",
//! "I apologize, but I don't have enough information to assist with your request." or
//! "I'm sorry, I don't know your wife's name." (after "What's my wife's name?") do not take
//! the places of memories that hold something.
//!
//! A turn *says nothing* when every content word in it (as the grounding check reads them:
//! `grounding::content_stems`) is conversational filler or the assistant's
//! meta-talk (`FILLER`), or was already said in the turn it answers. Names and numbers are
//! content like any word, so "Thanks, Caroline!" says something. So is a question: it says
//! nothing about the asker, but on LoCoMo the turns that only ask hold evidence often enough
//! (weighing them down too cost a temporal question). Facts and summaries are never judged:
//! they are what the write path kept.
//!
//! The read path gives such a turn only the places left after every memory that says
//! something (`[retrieval] low_information_last`; docs/retrieval.md has what it did on
//! LoCoMo and on the write-path benchmark), and the write path asks for no facts from a user
//! message that says nothing ("Bye, talk tomorrow!").

use std::collections::HashSet;
use std::sync::OnceLock;

use crate::grounding::{content_stems, word_stem};

/// Words that make a turn polite, agreeable or apologetic without telling anything: greetings,
/// thanks, assent, and an assistant's talk about itself and the request.
const FILLER: &[&str] = &[
    "able",
    "absolutely",
    "access",
    "afraid",
    "again",
    "amazing",
    "answer",
    "anything",
    "apologise",
    "apologize",
    "appreciate",
    "ask",
    "assist",
    "assistance",
    "awesome",
    "because",
    "bye",
    "cannot",
    "care",
    "chat",
    "cool",
    "course",
    "definitely",
    "detail",
    "didn",
    "doesn",
    "doing",
    "don",
    "else",
    "enough",
    "exactly",
    "feel",
    "fine",
    "free",
    "get",
    "glad",
    "go",
    "going",
    "good",
    "goodbye",
    "got",
    "great",
    "happy",
    "hear",
    "hello",
    "help",
    "helpful",
    "here",
    "hey",
    "hi",
    "hope",
    "how",
    "however",
    "if",
    "information",
    "isn",
    "just",
    "keep",
    "kind",
    "know",
    "later",
    "let",
    "like",
    "ll",
    "lot",
    "love",
    "lovely",
    "may",
    "might",
    "mind",
    "more",
    "much",
    "need",
    "nice",
    "no",
    "not",
    "noted",
    "oh",
    "ok",
    "okay",
    "one",
    "please",
    "personal",
    "problem",
    "provide",
    "question",
    "re",
    "really",
    "remember",
    "request",
    "right",
    "see",
    "share",
    "sharing",
    "something",
    "soon",
    "sorry",
    "sound",
    "sounds",
    "specific",
    "sure",
    "take",
    "talk",
    "tell",
    "telling",
    "thank",
    "thanks",
    "thing",
    "things",
    "today",
    "tomorrow",
    "tonight",
    "too",
    "totally",
    "understand",
    "unable",
    "unfortunately",
    "ve",
    "want",
    "way",
    "welcome",
    "well",
    "what",
    "when",
    "where",
    "why",
    "wonderful",
    "worries",
    "wow",
    "yeah",
    "yep",
    "yes",
];

fn filler() -> &'static HashSet<String> {
    static FILLER_STEMS: OnceLock<HashSet<String>> = OnceLock::new();
    FILLER_STEMS.get_or_init(|| FILLER.iter().map(|w| word_stem(w)).collect())
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
    fn chit_chat_and_refusals_say_nothing() {
        for turn in [
            "Thanks!",
            "Hello! How can I help you today?",
            "Ok, sounds good.",
            "I apologize, but I don't have enough information to assist with your request.",
            "Sorry, I'm unable to access personal information.",
            "You're welcome, glad I could help!",
            "Thanks for telling me, I'll keep that in mind.",
            "Thanks for sharing.",
            "Bye, talk tomorrow!",
        ] {
            assert!(!says_something(turn, None), "{turn}");
        }
    }

    #[test]
    fn a_turn_that_only_repeats_the_one_it_answers_says_nothing() {
        let question = "What's my wife's name?";
        assert!(!says_something(
            "I'm sorry, I don't know your wife's name.",
            Some(question)
        ));
        assert!(says_something("Your wife is Anne.", Some(question)));
        assert!(!says_something(
            "I'm afraid I don't know what you do for work.",
            Some("Do you know what I do for work?")
        ));
        assert!(!says_something(
            "Nice to hear about Jane.",
            Some("My wife is Jane.")
        ));
    }

    #[test]
    fn statements_names_and_numbers_say_something() {
        for turn in [
            "I have a dog called Rex.",
            "Thanks, Caroline!",
            "We moved in 2019.",
            "I'm allergic to peanuts.",
            "What is my dog's name?",
        ] {
            assert!(says_something(turn, None), "{turn}");
        }
    }
}
