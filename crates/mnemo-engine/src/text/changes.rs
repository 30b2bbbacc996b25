//! Whether a message says something changed, so that its new facts may replace old ones.
//!
//! A message that repairs what was said ("actually", "I meant", "scratch that": [`REPAIRS`]),
//! says something changed ("now", "moved", "switched": [`CHANGES`]) or stopped ("anymore",
//! "no longer", "quit": [`STOPPING`]) may have new facts that replace old ones in words no
//! rule can match ([`signals_a_change`]); the write path then asks the LLM about the closest
//! pair. Without such a signal it does not ask: a small model answers "yes, it replaces it"
//! too readily for two facts that both hold.

use super::words::{sentences, words};

/// Phrases by which a speaker says something stopped being so.
pub const STOPPING: &[&[&str]] = &[
    &["anymore"],
    &["any", "more"],
    &["no", "longer"],
    &["no", "more"],
    &["quit"],
    &["quitting"],
    &["stopped"],
    &["gave", "up"],
    &["given", "up"],
    &["cancelled"],
    &["canceled"],
    &["used", "to"],
];

/// Editing terms by which a speaker repairs what they said ("actually", "sorry", "I meant",
/// "scratch that", "correction").
pub const REPAIRS: &[&[&str]] = &[
    &["actually"],
    &["sorry"],
    &["wait"],
    &["oops"],
    &["correction"],
    &["update"],
    &["scratch", "that"],
    &["i", "meant"],
    &["i", "mean"],
    &["misspoke"],
    &["mixed", "up"],
    &["got", "that", "wrong"],
    &["i", "said"],
];

/// Words by which a speaker says something changed ("now", "moved", "switched", "new").
pub const CHANGES: &[&[&str]] = &[
    &["now"],
    &["new"],
    &["again"],
    &["moved"],
    &["switched"],
    &["changed"],
    &["started"],
    &["became"],
    &["promoted"],
    &["these", "days"],
    &["from", "now", "on"],
];

/// Whether `message` repairs something said before ([`REPAIRS`]), says something changed
/// ([`CHANGES`]) or stopped ([`STOPPING`]), in a sentence that is not a question: a message
/// whose new facts may replace old ones.
pub fn signals_a_change(message: &str) -> bool {
    sentences(message)
        .into_iter()
        .filter(|s| !super::words::is_question(s))
        .any(|sentence| {
            let ws = words(sentence);
            let texts: Vec<&str> = ws.iter().map(|w| w.text.as_str()).collect();
            [REPAIRS, CHANGES, STOPPING]
                .iter()
                .flat_map(|class| class.iter())
                .any(|phrase| texts.windows(phrase.len()).any(|w| w == *phrase))
        })
}

/// Whether `message` repairs something said before ([`REPAIRS`]).
pub fn repairs(message: &str) -> bool {
    let ws = words(message);
    let texts: Vec<&str> = ws.iter().map(|w| w.text.as_str()).collect();
    REPAIRS
        .iter()
        .any(|phrase| texts.windows(phrase.len()).any(|w| w == *phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_and_changes_are_signalled() {
        for said in [
            "Scratch that, the recital is on Monday.",
            "Sorry, I meant Ilka.",
            "We moved again.",
            "I'm a florist now.",
            "I don't swim anymore.",
        ] {
            assert!(signals_a_change(said), "{said}");
        }
        assert!(repairs("Oops, I mixed up the dates."));
        assert!(!repairs("We moved again."));
        for said in ["I keep bees.", "Did you move?", "My cousin Ilse sails."] {
            assert!(!signals_a_change(said), "{said}");
        }
    }
}
