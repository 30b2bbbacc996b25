//! Words, stems and sentences: the units every text rule reads.
//!
//! A *word* is a run of letters and digits; an apostrophe inside a word stays with it
//! ("don't", "user's", "I'm"), so a contraction is one word that can be read whole
//! ([`Word::negates`]) or by its base ([`Word::base`]: "user's" is "user", "I'm" is "i").
//! Words are compared by their *stem*: a number by its digits ("14th" is "14"), any other
//! word by its first five letters, so "peanuts" meets "peanut" and "smoking" meets "smokes"
//! without a dictionary. A *content word* is one that is not a function word of English
//! (articles, pronouns, auxiliaries, prepositions, conjunctions: [`FUNCTION_WORDS`]) and not
//! a single letter; a *name* is a content word written with a capital past a sentence's
//! first word, or one with a digit.

use std::collections::HashSet;

/// Letters a word is compared by.
const STEM: usize = 5;

/// The closed classes of English that carry no claim of their own: articles, pronouns,
/// auxiliary and modal verbs, common prepositions and conjunctions, and the word the write
/// path uses for the speaker ("user").
pub const FUNCTION_WORDS: &[&str] = &[
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
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "each",
    "either",
    "for",
    "from",
    "had",
    "has",
    "have",
    "he",
    "her",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "i",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "me",
    "mine",
    "my",
    "myself",
    "of",
    "on",
    "onto",
    "or",
    "our",
    "ours",
    "ourselves",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "to",
    "too",
    "us",
    "user",
    "users",
    "very",
    "was",
    "we",
    "were",
    "which",
    "who",
    "whom",
    "whose",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
];

/// Words that say when or how often something happened, not what: units of time and the
/// words that place them ("last", "ago", "since"), the months and the days of the week.
const TIME_WORDS: &[&str] = &[
    "again",
    "ago",
    "already",
    "always",
    "currently",
    "day",
    "days",
    "decade",
    "decades",
    "ever",
    "hour",
    "hours",
    "last",
    "month",
    "months",
    "morning",
    "night",
    "now",
    "often",
    "recent",
    "since",
    "sometimes",
    "soon",
    "still",
    "today",
    "tonight",
    "week",
    "weekend",
    "weeks",
    "year",
    "years",
    "yesterday",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// Whether `word` says when or how rather than what: an adverb in "-ly" ("recently",
/// "finally", "actually"), a unit of time, or a word that places one.
pub fn says_when(word: &str) -> bool {
    (word.len() > 4 && word.ends_with("ly")) || TIME_WORDS.contains(&word)
}

/// One word of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word, lower-cased, inner apostrophes kept ("don't").
    pub text: String,
    /// Whether it was written with a capital first letter.
    pub capitalised: bool,
    /// Its position among the words of its sentence.
    pub index: usize,
}

impl Word {
    /// The word without a contraction's or possessive's tail: "user's" → "user",
    /// "i'm" → "i", "don't" → "don".
    pub fn base(&self) -> &str {
        self.text.split('\'').next().unwrap_or(&self.text)
    }

    /// Whether the word is a negation ("not", "never", "no", "don't", "cannot", ...).
    pub fn negates(&self) -> bool {
        self.text.ends_with("n't")
            || matches!(
                self.text.as_str(),
                "not"
                    | "no"
                    | "never"
                    | "nor"
                    | "neither"
                    | "none"
                    | "nobody"
                    | "nothing"
                    | "without"
                    | "cannot"
            )
    }

    /// What the word is compared by ([`stem`]).
    pub fn stem(&self) -> String {
        stem(self.base())
    }

    /// Whether the word carries content: not a function word, not a single letter.
    pub fn is_content(&self) -> bool {
        let base = self.base();
        let letter = base.chars().count() == 1 && !base.chars().all(|c| c.is_ascii_digit());
        !base.is_empty() && !letter && !FUNCTION_WORDS.contains(&base) && !self.negates()
    }

    /// Whether the word is a name or a number: capitalised past its sentence's first word,
    /// or holding a digit.
    pub fn is_name(&self) -> bool {
        (self.capitalised && self.index > 0) || self.text.chars().any(|c| c.is_ascii_digit())
    }
}

/// The words of `text`, in order, numbered from 0 within each sentence.
pub fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    for sentence in sentences(text) {
        out.extend(words_of_sentence(sentence));
    }
    out
}

/// The words of one sentence; `index` counts from 0 at its first word.
pub fn words_of_sentence(sentence: &str) -> Vec<Word> {
    fn push(word: &mut String, capitalised: bool, out: &mut Vec<Word>) {
        if !word.is_empty() {
            let index = out.len();
            out.push(Word {
                text: std::mem::take(word).to_lowercase(),
                capitalised,
                index,
            });
        }
    }
    let chars: Vec<char> = sentence.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut capitalised = false;
    for (i, &c) in chars.iter().enumerate() {
        let c = if matches!(c, '’' | '‘') { '\'' } else { c };
        let inner_apostrophe =
            c == '\'' && !word.is_empty() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            if word.is_empty() {
                capitalised = c.is_uppercase();
            }
            word.push(c);
        } else {
            push(&mut word, capitalised, &mut out);
        }
    }
    push(&mut word, capitalised, &mut out);
    out
}

/// What a word is compared by: a number by its digits ("14th" is "14"); any other word
/// without its inflection (a plural or third-person "-s"/"-es"/"-ies", then "-ing" or
/// "-ed" with a doubled consonant undone, then a final "-e") and cut to its first five
/// letters, so "plays", "played" and "playing" meet "play", and "smokes" meets "smoking".
pub fn stem(word: &str) -> String {
    let word = word.to_lowercase();
    if word.chars().any(|c| c.is_ascii_digit()) {
        return word.chars().filter(char::is_ascii_digit).collect();
    }
    let mut w: Vec<char> = word.chars().collect();
    let ends = |w: &[char], suffix: &str| {
        let s: Vec<char> = suffix.chars().collect();
        w.len() > s.len() && w[w.len() - s.len()..] == s[..]
    };
    if w.len() >= 5 && ends(&w, "ies") {
        w.truncate(w.len() - 3);
        w.push('y');
    } else if w.len() >= 5 && ends(&w, "es") {
        w.truncate(w.len() - 2);
    } else if w.len() >= 4 && ends(&w, "s") && !ends(&w, "ss") {
        w.pop();
    }
    let verbal = if w.len() >= 6 && ends(&w, "ing") {
        w.truncate(w.len() - 3);
        true
    } else if w.len() >= 5 && ends(&w, "ed") {
        w.truncate(w.len() - 2);
        true
    } else {
        false
    };
    let doubled = |w: &[char]| {
        let n = w.len();
        n >= 3 && w[n - 1] == w[n - 2] && !"aeioulsz".contains(w[n - 1])
    };
    if verbal && doubled(&w) {
        w.pop();
    }
    if w.len() > 3 && w.last() == Some(&'e') {
        w.pop();
    }
    w.into_iter().take(STEM).collect()
}

/// The stems of the content words of `text`.
pub fn content_stems(text: &str) -> HashSet<String> {
    words(text)
        .iter()
        .filter(|w| w.is_content())
        .map(Word::stem)
        .collect()
}

/// `text` cut after each sentence's end (`.`, `!` or `?` before a space, or a line end),
/// every piece keeping the whitespace after it, so the pieces join back into `text`.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = c == '\n'
            || (matches!(c, '.' | '!' | '?')
                && chars.peek().is_none_or(|(_, next)| next.is_whitespace()));
        if ends {
            let mut end = i + c.len_utf8();
            while let Some(&(j, next)) = chars.peek() {
                if !next.is_whitespace() {
                    break;
                }
                end = j + next.len_utf8();
                chars.next();
            }
            pieces.push(&text[start..end]);
            start = end;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// Whether `sentence` is a question.
pub fn is_question(sentence: &str) -> bool {
    sentence.trim_end().ends_with('?')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<String> {
        words(text).into_iter().map(|w| w.text).collect()
    }

    #[test]
    fn contractions_and_possessives_stay_one_word() {
        assert_eq!(
            texts("I’m sure the user's kite isn't blue."),
            ["i'm", "sure", "the", "user's", "kite", "isn't", "blue"]
        );
        let w = words("Our neighbours' garden doesn't flood.");
        assert_eq!(w[1].text, "neighbours");
        assert!(w[3].negates());
        assert_eq!(words("The user's kite.")[1].base(), "user");
    }

    #[test]
    fn names_are_capitals_past_the_first_word_and_numbers() {
        let w = words("Yesterday Ines flew to Quito on flight 702.");
        let names: Vec<&str> = w
            .iter()
            .filter(|w| w.is_name())
            .map(|w| w.text.as_str())
            .collect();
        assert_eq!(names, ["ines", "quito", "702"]);
        // Each sentence starts its own count.
        assert!(!words("It rained. Later it cleared.")[2].is_name());
    }

    #[test]
    fn stems_compare_inflections_and_digits() {
        assert_eq!(stem("Kayaking"), stem("kayaks"));
        for family in [
            ["plays", "played", "playing"],
            ["smokes", "smoking", "smoke"],
            ["stopped", "stops", "stop"],
            ["loves", "loved", "loving"],
            ["parties", "party", "party"],
            ["mornings", "morning", "morning"],
        ] {
            let stems: Vec<String> = family.iter().map(|w| stem(w)).collect();
            assert!(
                stems.iter().all(|s| *s == stems[0]),
                "{family:?}: {stems:?}"
            );
        }
        assert_eq!(stem("run"), stem("running"));
        assert_ne!(stem("glass"), stem("glad"));
        assert_eq!(stem("21st"), "21");
        assert_ne!(stem("cattle"), stem("cat"));
        assert!(content_stems("The user has a kayak.").contains("kayak"));
        assert!(!content_stems("She would have been there.")
            .iter()
            .any(|s| s == "would"));
    }

    #[test]
    fn sentences_join_back_into_the_text() {
        let text = "One. Two? Three!\nFour 3.5 stays\n";
        let pieces = sentences(text);
        assert_eq!(pieces.concat(), text);
        assert_eq!(pieces.len(), 4);
    }
}
