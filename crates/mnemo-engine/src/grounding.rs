//! Is an extracted fact the user's own? A lexical check against the user's message, with no
//! second LLM call.
//!
//! A small model extracting facts sometimes writes things nobody said ("We are planning to
//! travel next spring to Europe." from "a trip to Japan in April"). A fact is kept only when
//! the user's words support it:
//! - every name, number and date word in it (a capitalised word past the first, or a word
//!   with a digit) occurs in the message;
//! - at least half of its other content words occur there too.
//!
//! Words are compared by a short prefix (their first five letters), so "peanuts" supports
//! "peanut" and "smoking" supports "smokes", and numbers by their digits ("14th" is "14");
//! function words, single letters and the model's own framing ("user", "their") are not
//! content. What supported a kept fact is recorded with it
//! ([`Grounding::matched`]); a refused fact is logged with the words that were missing.

use std::collections::HashSet;

/// Letters a word is compared by.
const STEM: usize = 5;
/// Share of a fact's plain content words the message must hold.
const MIN_SUPPORT: f32 = 0.5;

/// Words that carry no claim of their own, and the extractor's framing of the speaker.
const NOT_CONTENT: &[&str] = &[
    "a",
    "about",
    "after",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "before",
    "being",
    "but",
    "by",
    "can",
    "could",
    "currently",
    "did",
    "do",
    "does",
    "for",
    "from",
    "had",
    "has",
    "have",
    "he",
    "her",
    "him",
    "his",
    "i",
    "in",
    "into",
    "is",
    "it",
    "its",
    "me",
    "mine",
    "my",
    "now",
    "of",
    "on",
    "or",
    "our",
    "ours",
    "she",
    "should",
    "so",
    "some",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "they",
    "this",
    "to",
    "us",
    "user",
    "users",
    "very",
    "was",
    "we",
    "were",
    "which",
    "who",
    "will",
    "with",
    "would",
    "you",
    "your",
    "s",
];

/// How a fact stands against the message it was extracted from.
#[derive(Debug, Clone, PartialEq)]
pub struct Grounding {
    /// The fact's words found in the message.
    pub matched: Vec<String>,
    /// Its names, numbers and dates not found there.
    pub missing_names: Vec<String>,
    /// Its other content words not found there.
    pub missing_words: Vec<String>,
}

impl Grounding {
    /// Whether the message supports the fact; `Err` says why not.
    pub fn verdict(&self) -> Result<(), String> {
        if !self.missing_names.is_empty() {
            return Err(format!(
                "names or numbers the user did not say: {}",
                self.missing_names.join(", ")
            ));
        }
        let plain = self.matched.len() + self.missing_words.len();
        if plain == 0 {
            return Err("no content words".into());
        }
        let support = self.matched.len() as f32 / plain as f32;
        if support < MIN_SUPPORT {
            return Err(format!(
                "only {}/{plain} of its words are the user's (missing: {})",
                self.matched.len(),
                self.missing_words.join(", ")
            ));
        }
        Ok(())
    }
}

/// How `message` supports `fact`.
pub fn ground(fact: &str, message: &str) -> Grounding {
    let said: HashSet<String> = words(message).map(|(w, _)| stem(&w)).collect();
    let mut grounding = Grounding {
        matched: Vec::new(),
        missing_names: Vec::new(),
        missing_words: Vec::new(),
    };
    for (i, (word, capitalised)) in words(fact).enumerate() {
        // Single letters are the remains of contractions ("doesn't").
        let letter = word.chars().count() == 1 && !word.chars().all(|c| c.is_ascii_digit());
        if letter || NOT_CONTENT.contains(&word.as_str()) {
            continue;
        }
        let is_name = (capitalised && i > 0) || word.chars().any(|c| c.is_ascii_digit());
        if said.contains(&stem(&word)) {
            grounding.matched.push(word);
        } else if is_name {
            grounding.missing_names.push(word);
        } else {
            grounding.missing_words.push(word);
        }
    }
    grounding
}

/// The words of `text`, lowercased, each with whether it was capitalised.
fn words(text: &str) -> impl Iterator<Item = (String, bool)> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            (
                w.to_lowercase(),
                w.chars().next().is_some_and(char::is_uppercase),
            )
        })
}

/// What a word is compared by: a number by its digits ("14th" is "14"), any other word by
/// its first letters.
fn stem(word: &str) -> String {
    if word.chars().any(|c| c.is_ascii_digit()) {
        return word.chars().filter(char::is_ascii_digit).collect();
    }
    word.chars().take(STEM).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(fact: &str, message: &str) -> bool {
        ground(fact, message).verdict().is_ok()
    }

    #[test]
    fn the_user_s_own_statements_are_kept() {
        let message = "We are planning a trip to Japan in April.";
        assert!(kept(
            "The user is planning a trip to Japan in April.",
            message
        ));
        assert!(kept(
            "The user is allergic to peanuts.",
            "I'm allergic to peanut butter."
        ));
        assert!(kept(
            "The user no longer smokes.",
            "I quit smoking, I no longer smoke."
        ));
        assert!(kept(
            "The user's wife is Anne.",
            "Actually my wife is Anne, not Jane."
        ));
        assert!(kept(
            "The user got married in June 2018.",
            "We got married in June 2018."
        ));
        assert!(kept(
            "The user's birthday is on March 14th.",
            "My birthday is on 14 March."
        ));
        assert!(kept(
            "The user doesn't run anymore.",
            "I don't run anymore."
        ));
    }

    #[test]
    fn invented_facts_are_refused_with_the_reason() {
        let message = "We are planning a trip to Japan in April.";
        let invented = ground("We are planning to travel next spring to Europe.", message);
        assert_eq!(
            invented.verdict(),
            Err("names or numbers the user did not say: europe".into())
        );
        let err = ground(
            "We should avoid hot weather and high pollution levels.",
            message,
        )
        .verdict()
        .unwrap_err();
        assert!(err.starts_with("only 0/"), "{err}");
        assert!(!kept("The user's son is 8.", "My son is 7 years old."));
        assert!(!kept("The user is.", "I am."));
    }
}
