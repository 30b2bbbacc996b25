//! Whom a stored fact is about.
//!
//! Facts are written in the third person ("The user ...", "The user's sister Ilse ..."), so
//! the subject is read off the sentence's opening: "The user" (or "User", "I") followed by a
//! verb is the speaker; "The user's" followed by a word for a person or a pet
//! ([`PERSON_NOUNS`], possibly after one or two describing words: "older sister", "best
//! friend") is that person, named by the relation and the name after it when there is one;
//! "The user's" followed by anything else ("favourite colour", "flat") is the speaker's own.
//! A fact opening with a name ("Ilse repairs boats.") is about that name. Two facts are
//! about the same person when both are about the speaker, or both about someone and they
//! share a relation word or a name.

use super::clauses::PERSON_NOUNS;
use super::words::{words_of_sentence, Word};

/// Whom a fact is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The user.
    Speaker,
    /// Someone else, known by these words (a relation and/or a name, lower-cased).
    Someone(Vec<String>),
}

impl Subject {
    /// Whether the fact is about the user.
    pub fn is_speaker(&self) -> bool {
        *self == Subject::Speaker
    }

    /// Whether two subjects are the same person.
    pub fn same_person(&self, other: &Subject) -> bool {
        match (self, other) {
            (Subject::Speaker, Subject::Speaker) => true,
            (Subject::Someone(a), Subject::Someone(b)) => a.iter().any(|w| b.contains(w)),
            _ => false,
        }
    }
}

/// Whom `fact` is about, read from its first sentence's opening.
pub fn subject_of(fact: &str) -> Subject {
    let first = super::words::sentences(fact)
        .into_iter()
        .next()
        .unwrap_or_default();
    let words = words_of_sentence(first);
    let start = usize::from(words.first().is_some_and(|w| w.text == "the"));
    let Some(head) = words.get(start) else {
        return Subject::Speaker;
    };
    match head.text.as_str() {
        "user" | "users" | "i" | "i'm" => Subject::Speaker,
        "user's" | "users'" | "my" | "our" => possessed(&words[start + 1..]),
        _ if head.capitalised && head.is_content() => Subject::Someone(vec![head.text.clone()]),
        _ => Subject::Speaker,
    }
}

/// The subject of "The user's <words>": a person noun within the first three words makes it
/// that person (with a name right after it); otherwise it is the user's own thing.
fn possessed(words: &[Word]) -> Subject {
    let Some(at) = words
        .iter()
        .take(3)
        .position(|w| PERSON_NOUNS.contains(&w.base()))
    else {
        return Subject::Speaker;
    };
    let mut known = vec![words[at].base().to_owned()];
    if let Some(name) = words
        .get(at + 1)
        .filter(|w| w.capitalised && w.is_content())
    {
        known.push(name.base().to_owned());
    }
    Subject::Someone(known)
}

/// At most this many content words in the part where two rival facts differ, on each side:
/// a value ("Leuven", "Thursdays", "a ship's pilot"), not a new sentence.
const MAX_DIFFERING: usize = 2;

/// Whether two facts may say different things of the same thing: both of the same person,
/// word for word the same (by stem, words that say when left out) but for one part, short
/// on both sides, where each says something of its own ("The user lives in Leuven." and
/// "The user lives in Ghent."), or where the later only denies ("The user eats meat." and
/// "The user no longer eats meat."); and what they share holds a content word besides the
/// person (the attribute: "lives in"). A fact that only adds to the other ("keeps bees" and
/// "keeps bees on the roof"), one about something else ("swims" and "cooks"), or one that
/// says the other again in other words is no rival: paraphrases and elaborations are most of
/// what a long conversation stores, and nearness alone cannot tell them from a new value
/// (`benches/conflict_marks.rs` measures both).
pub fn may_conflict(earlier: &str, later: &str) -> bool {
    let subject = subject_of(earlier);
    if !subject.same_person(&subject_of(later)) {
        return false;
    }
    let person: &[String] = match &subject {
        Subject::Someone(words) => words,
        Subject::Speaker => &[],
    };
    let (a, b) = (
        compared_words(earlier, person),
        compared_words(later, person),
    );
    let prefix = a
        .iter()
        .zip(&b)
        .take_while(|(x, y)| x.stem == y.stem)
        .count();
    let room = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(room)
        .take_while(|(x, y)| x.stem == y.stem)
        .count();
    let (only_a, only_b) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let said = |part: &[Compared]| part.iter().filter(|w| w.content || w.negates).count();
    let shared = a[..prefix]
        .iter()
        .chain(&a[a.len() - suffix..])
        .any(|w| w.content);
    let new_value =
        (1..=MAX_DIFFERING).contains(&said(only_a)) && (1..=MAX_DIFFERING).contains(&said(only_b));
    let denial =
        only_a.is_empty() && only_b.iter().any(|w| w.negates) && said(only_b) <= MAX_DIFFERING;
    shared && (new_value || denial)
}

/// A word as [`may_conflict`] compares it.
struct Compared {
    stem: String,
    /// A content word that does not name the person the fact is about.
    content: bool,
    negates: bool,
}

fn compared_words(fact: &str, person: &[String]) -> Vec<Compared> {
    super::words::words(fact)
        .iter()
        .filter(|w| !super::words::says_when(w.base()))
        .map(|w| Compared {
            stem: w.stem(),
            content: w.is_content() && !person.iter().any(|p| p == w.base()),
            negates: w.negates(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rivals_are_of_one_person_and_differ_in_one_short_part() {
        assert!(may_conflict(
            "The user lives in Leuven.",
            "The user lives in Ghent."
        ));
        assert!(may_conflict(
            "The user works as a nurse.",
            "The user now works as a ship's pilot."
        ));
        assert!(may_conflict(
            "The user's aunt Wiebke lives in Graz.",
            "The user's aunt Wiebke lives in Linz."
        ));
        assert!(may_conflict(
            "The user eats meat.",
            "The user no longer eats meat."
        ));
        assert!(may_conflict("I live in Ghent.", "I live in Leuven."));
        // Another person, an addition, a restatement with a word of time, a new sentence,
        // a paraphrase: no rivals.
        assert!(!may_conflict(
            "The user lives in Graz.",
            "The user's aunt lives in Linz."
        ));
        assert!(!may_conflict(
            "The user keeps bees.",
            "The user keeps bees on the roof."
        ));
        assert!(!may_conflict(
            "The user keeps bees.",
            "The user now keeps bees."
        ));
        assert!(!may_conflict(
            "The user drives a green van.",
            "The user keeps bees on the roof."
        ));
        assert!(!may_conflict("Ilse swims.", "Ilse cooks."));
        assert!(!may_conflict(
            "The user is grateful for the help with the garden fence.",
            "The user thanks the assistant for the garden fence advice and feels relieved."
        ));
    }

    fn someone(words: &[&str]) -> Subject {
        Subject::Someone(words.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn the_opening_of_a_fact_says_whom_it_is_about() {
        assert_eq!(subject_of("The user repairs boats."), Subject::Speaker);
        assert_eq!(subject_of("User prefers tea."), Subject::Speaker);
        assert_eq!(
            subject_of("The user's favourite tree is the birch."),
            Subject::Speaker
        );
        assert_eq!(
            subject_of("The user's older cousin Ilse repairs boats."),
            someone(&["cousin", "ilse"])
        );
        assert_eq!(
            subject_of("The user's best friend sails."),
            someone(&["friend"])
        );
        assert_eq!(subject_of("Ilse repairs boats."), someone(&["ilse"]));
        assert_eq!(subject_of(""), Subject::Speaker);
    }

    #[test]
    fn people_are_the_same_by_a_relation_or_a_name() {
        let ilse = subject_of("The user's cousin Ilse repairs boats.");
        assert!(ilse.same_person(&subject_of("Ilse moved to Quito.")));
        assert!(ilse.same_person(&subject_of("The user's cousin sails.")));
        assert!(!ilse.same_person(&subject_of("The user's uncle sails.")));
        assert!(!ilse.same_person(&Subject::Speaker));
        assert!(Subject::Speaker.same_person(&subject_of("The user sails.")));
    }
}
