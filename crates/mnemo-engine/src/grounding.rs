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
//! content. A message that only asks (every sentence a question, or a request such as
//! "Suggest a gift for my brother.") says little about the asker, so a fact drawn from it
//! must use the message's words alone and must not report the asking ("The user asked about
//! the weather in London.", "The user told you about food."); so must a fact with a name the
//! message only asks about. A fact about the user is refused when every statement of the
//! message speaks of someone else ("She quit smoking." is not "The user quit smoking.").
//! When the extractor was shown the user's previous message for context ([`ground_in`]),
//! its words support a fact too. What supported a kept fact is recorded with it
//! ([`Grounding::matched`]); a refused fact is logged with the words that were missing.
//!
//! The same words decide what a message says stopped ([`cessations`]: "I don't run
//! anymore", "She quit smoking") and which existing facts that retracts
//! ([`states_what_ceased`]), and when a reconciler's rewrite moves someone the message never
//! names ([`carried_name`]).
//!
//! The same words keep the rolling summary honest: [`without_stale_sentences`] cuts the
//! sentences of a rewritten summary that still state a fact the pass retracted.

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

/// Words a fact uses to report the conversation instead of something about the speaker.
const SPEECH_ACTS: &[&str] = &[
    "ask",
    "asked",
    "asking",
    "asks",
    "inquire",
    "inquired",
    "inquires",
    "question",
    "questions",
    "recall",
    "recalled",
    "recalls",
    "remember",
    "remembered",
    "remembers",
    "remind",
    "reminded",
    "reminds",
    "request",
    "requested",
    "requests",
    "tell",
    "telling",
    "tells",
    "told",
    "wonder",
    "wondering",
    "wonders",
];

/// First words of a sentence that asks for something instead of telling it.
const REQUESTS: &[&str] = &[
    "calculate",
    "compare",
    "describe",
    "draft",
    "explain",
    "find",
    "give",
    "help",
    "list",
    "please",
    "recommend",
    "remind",
    "show",
    "suggest",
    "summarise",
    "summarize",
    "tell",
    "translate",
    "write",
];

/// Words by which a speaker speaks of themselves.
const FIRST_PERSON: &[&str] = &[
    "i",
    "me",
    "my",
    "mine",
    "myself",
    "we",
    "us",
    "our",
    "ours",
    "ourselves",
];

/// Pronouns by which a speaker speaks of someone else.
const THIRD_PERSON: &[&str] = &[
    "he", "she", "him", "her", "his", "hers", "himself", "herself", "they", "them", "their",
    "theirs",
];

/// Words that say when something stopped, not what: "I quit smoking last year actually."
const WHEN_WORDS: &[&str] = &[
    "actually",
    "ago",
    "already",
    "day",
    "days",
    "ever",
    "finally",
    "last",
    "month",
    "months",
    "really",
    "recently",
    "since",
    "today",
    "week",
    "weeks",
    "year",
    "years",
    "yesterday",
];

/// Phrases by which a speaker says something stopped being true of them.
const CESSATIONS: &[&str] = &[
    "anymore",
    "no longer",
    "quit",
    "stopped",
    "gave up",
    "given up",
    "cancelled",
    "canceled",
    "used to",
];

/// The words of a cessation phrase, and the negations around one ("I don't run anymore"):
/// not what stopped.
const CESSATION_WORDS: &[&str] = &[
    "anymore",
    "any",
    "more",
    "no",
    "longer",
    "quit",
    "stopped",
    "gave",
    "given",
    "up",
    "cancelled",
    "canceled",
    "used",
    "not",
    "never",
    "don",
    "doesn",
    "didn",
    "won",
    "can",
    "cannot",
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
    /// The fact rests on what the user asked: the message only asks (questions and
    /// requests, no statement), or a name or number of the fact is only in its questions.
    pub from_questions: bool,
    /// The fact's words that report the asking ("asked", "told").
    pub speech_acts: Vec<String>,
    /// The fact is about the user, but the message's statements all speak of someone else
    /// ("She quit smoking last year."): the pronoun they use.
    pub said_of_someone_else: Option<String>,
}

impl Grounding {
    /// Whether the message supports the fact; `Err` says why not.
    pub fn verdict(&self) -> Result<(), String> {
        if let Some(pronoun) = &self.said_of_someone_else {
            return Err(format!(
                "the message speaks of someone else ({pronoun}), not of the user"
            ));
        }
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
        if self.from_questions {
            if !self.speech_acts.is_empty() {
                return Err(format!(
                    "it reports the user's question, not a fact ({})",
                    self.speech_acts.join(", ")
                ));
            }
            if !self.missing_words.is_empty() {
                return Err(format!(
                    "the user only asked, and these words are not theirs: {}",
                    self.missing_words.join(", ")
                ));
            }
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
    ground_in(fact, message, "")
}

/// How `message` supports `fact`, when the extractor was also shown the user's `earlier`
/// message for context (a short answer such as "It's green." needs the question it
/// answers): the words of both are the user's, so both support a fact; whom the fact is
/// about and whether it rests on questions is read from `message` alone.
pub fn ground_in(fact: &str, message: &str, earlier: &str) -> Grounding {
    let said: HashSet<String> = words(message)
        .chain(words(earlier))
        .map(|(w, _)| stem(&w))
        .collect();
    let statements: Vec<&str> = sentences(message)
        .into_iter()
        .filter(|s| !s.trim().is_empty() && !asks(s))
        .collect();
    let stated: HashSet<String> = statements
        .iter()
        .copied()
        .chain(sentences(earlier).into_iter().filter(|s| !asks(s)))
        .flat_map(words)
        .map(|(w, _)| stem(&w))
        .collect();
    // "I'm not vegetarian anymore" supports "The user is no longer vegetarian.": a message
    // that says something stopped supports any wording of the stopping.
    let message_ceases = states_a_cessation(message);
    let mut grounding = Grounding {
        matched: Vec::new(),
        missing_names: Vec::new(),
        missing_words: Vec::new(),
        from_questions: statements.is_empty(),
        speech_acts: words(fact)
            .map(|(w, _)| w)
            .filter(|w| SPEECH_ACTS.contains(&w.as_str()))
            .collect(),
        said_of_someone_else: None,
    };
    if about_the_speaker(fact) && !statements.is_empty() {
        let others: Vec<Option<String>> = statements.iter().map(|s| of_someone_else(s)).collect();
        if others.iter().all(Option::is_some) {
            grounding.said_of_someone_else = others.into_iter().flatten().next();
        }
    }
    for term in content_terms(fact) {
        let ceasing = message_ceases && CESSATION_WORDS.contains(&term.word.as_str());
        if ceasing || said.contains(&term.stem) {
            // A name the user only asked about ("...for my husband's birthday on Friday?")
            // supports only facts in the message's own words, as a message that only asks.
            if term.is_name && !ceasing && !stated.contains(&term.stem) {
                grounding.from_questions = true;
            }
            grounding.matched.push(term.word);
        } else if term.is_name {
            grounding.missing_names.push(term.word);
        } else {
            grounding.missing_words.push(term.word);
        }
    }
    grounding
}

/// A name from `old`, a fact about someone else, that `text` (the reconciler's rewrite of
/// it) keeps although `message` never says it: "The user's brother Paul lives in Milan." for
/// "The user's brother Paul lives in Rome." after "I don't live in Rome anymore, I moved to
/// Milan." moves Paul, of whom the message says nothing.
pub fn carried_name(text: &str, old: &str, message: &str) -> Option<String> {
    let said: HashSet<String> = words(message).map(|(w, _)| stem(&w)).collect();
    let old_names: HashSet<String> = content_terms(old)
        .into_iter()
        .filter(|t| t.is_name)
        .map(|t| t.stem)
        .collect();
    content_terms(text)
        .into_iter()
        .find(|t| t.is_name && old_names.contains(&t.stem) && !said.contains(&t.stem))
        .map(|t| t.word)
}

/// Whether `message` speaks of its speaker in the first person ("I", "my", "we"): a message
/// without ("It's green.", "She quit last year.") leans on the exchange before it.
pub fn names_the_speaker(message: &str) -> bool {
    words(message).any(|(w, _)| FIRST_PERSON.contains(&w.as_str()))
}

/// Whether `fact` is about the speaker ("The user runs...", "I run..."), not someone around
/// them ("The user's friend Sara runs...", "Tom is vegan.").
pub fn about_the_speaker(fact: &str) -> bool {
    let fact_words: Vec<String> = words(fact).map(|(w, _)| w).collect();
    match fact_words.as_slice() {
        [the, user, next, ..] if the == "the" && user == "user" => next != "s",
        [first, ..] => first == "user" || first == "i",
        [] => false,
    }
}

/// The third-person pronoun of `text` when it speaks of someone else and not of the speaker:
/// it has one ("she", "his", "they") and no first-person word ("I", "my", "we").
fn of_someone_else(text: &str) -> Option<String> {
    let mut pronoun = None;
    for (word, _) in words(text) {
        if FIRST_PERSON.contains(&word.as_str()) {
            return None;
        }
        if pronoun.is_none() && THIRD_PERSON.contains(&word.as_str()) {
            pronoun = Some(word);
        }
    }
    pronoun
}

/// Something a message says stopped being true: what stopped, and of whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ceased {
    /// The content words of what stopped ("run", "live berlin").
    pub words: Vec<String>,
    /// The clause speaks of someone else ("She quit smoking."), not of the speaker.
    pub of_someone_else: bool,
}

/// What `message` says stopped being true: for each clause with a cessation ("I don't run
/// anymore", "I cancelled Netflix", "She quit smoking last year"), its content words without
/// the cessation's own and without when it happened ("last year"), and whether the clause
/// speaks of someone else. Clauses are cut at sentence ends, commas, semicolons and
/// "but"/"so"; questions are skipped, and a clause left with no content word says nothing
/// about what stopped.
pub fn cessations(message: &str) -> Vec<Ceased> {
    let mut found = Vec::new();
    // A question ("Did you quit?") states nothing.
    for sentence in sentences(message)
        .into_iter()
        .filter(|s| !s.trim_end().ends_with('?'))
    {
        let lower = sentence.to_lowercase();
        for clause in lower
            .split([',', ';', ':'])
            .flat_map(|c| c.split(" but "))
            .flat_map(|c| c.split(" so "))
        {
            if !states_a_cessation(clause) {
                continue;
            }
            let what: Vec<String> = content_terms(clause)
                .into_iter()
                .map(|t| t.word)
                .filter(|w| !CESSATION_WORDS.contains(&w.as_str()))
                .filter(|w| !WHEN_WORDS.contains(&w.as_str()))
                .collect();
            if !what.is_empty() {
                found.push(Ceased {
                    words: what,
                    of_someone_else: of_someone_else(clause).is_some(),
                });
            }
        }
    }
    found
}

/// Whether `text` holds a cessation phrase ("anymore", "no longer", "quit"...).
fn states_a_cessation(text: &str) -> bool {
    let padded = format!(
        " {} ",
        words(text).map(|(w, _)| w).collect::<Vec<_>>().join(" ")
    );
    CESSATIONS
        .iter()
        .any(|c| padded.contains(&format!(" {c} ")))
}

/// `fact` without its sentences that state what one of `ceased` ([`cessations`] of the
/// message it comes from) says stopped: "The user is vegetarian. The user now eats fish."
/// after "I'm not vegetarian anymore, I eat fish now." keeps "The user now eats fish.".
pub fn without_ceased_sentences(fact: &str, ceased: &[Ceased]) -> String {
    sentences(fact)
        .into_iter()
        .filter(|sentence| !ceased.iter().any(|c| states_what_ceased(sentence, c)))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Whether `fact` states what `ceased` says stopped: it is about the same person (the
/// speaker: "The user runs..."; or, when the message spoke of someone else, anyone else:
/// "The user's sister smokes..."), holds every word of what stopped (as a word sharing their
/// first four letters, or all of a shorter word: "run" is in "runs", "smoking" in "smokes")
/// and states no cessation itself.
pub fn states_what_ceased(fact: &str, ceased: &Ceased) -> bool {
    if about_the_speaker(fact) == ceased.of_someone_else || states_a_cessation(fact) {
        return false;
    }
    let fact_words: Vec<String> = words(fact).map(|(w, _)| w).collect();
    let same = |a: &str, b: &str| {
        let n = a.chars().count().min(b.chars().count()).min(4);
        a.chars().take(n).eq(b.chars().take(n))
    };
    ceased
        .words
        .iter()
        .all(|c| fact_words.iter().any(|w| same(c, w)))
}

/// Whether `sentence` asks (a question, or a request such as "Suggest a gift.") instead of
/// telling.
fn asks(sentence: &str) -> bool {
    let sentence = sentence.trim();
    let first = words(sentence).next().map(|(w, _)| w);
    sentence.ends_with('?') || first.is_some_and(|w| REQUESTS.contains(&w.as_str()))
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

/// `summary` without the sentences that still state a fact this pass retracted: a sentence
/// is stale when it holds what set a `retracted` fact apart from the pass's `added` facts
/// (every such name or number, or else two thirds of such words) and none of what the added
/// facts say instead. "His wife is Jane." goes once "wife is Jane" is replaced by "wife is
/// Anne"; "His wife is Anne, not Jane." stays. The summariser is asked to do this itself;
/// this catches what a small model keeps anyway. Returns the summary and the sentences cut.
pub fn without_stale_sentences(
    summary: &str,
    retracted: &[String],
    added: &[String],
) -> (String, Vec<String>) {
    let added_terms: HashSet<String> = added
        .iter()
        .flat_map(|a| content_terms(a))
        .map(|t| t.stem)
        .collect();
    let stale: Vec<(Vec<Term>, HashSet<String>)> = retracted
        .iter()
        .filter_map(|old| {
            let old_terms = content_terms(old);
            let old_stems: HashSet<String> = old_terms.iter().map(|t| t.stem.clone()).collect();
            let distinct: Vec<Term> = old_terms
                .into_iter()
                .filter(|t| !added_terms.contains(&t.stem))
                .collect();
            let instead: HashSet<String> = added_terms.difference(&old_stems).cloned().collect();
            (!distinct.is_empty()).then_some((distinct, instead))
        })
        .collect();
    let mut kept = String::new();
    let mut cut = Vec::new();
    for sentence in sentences(summary) {
        let said: HashSet<String> = content_terms(sentence)
            .into_iter()
            .map(|t| t.stem)
            .collect();
        let states_old = stale.iter().any(|(distinct, instead)| {
            if instead.iter().any(|t| said.contains(t)) {
                return false;
            }
            let names: Vec<&Term> = distinct.iter().filter(|t| t.is_name).collect();
            if !names.is_empty() {
                return names.iter().all(|t| said.contains(&t.stem));
            }
            let held = distinct.iter().filter(|t| said.contains(&t.stem)).count();
            held * 3 >= distinct.len() * 2
        });
        if states_old {
            cut.push(sentence.trim().to_owned());
        } else {
            kept.push_str(sentence);
        }
    }
    (kept.trim().to_owned(), cut)
}

/// A content word of a text: the word (lowercased), what it is compared by, and whether it
/// is a name or number.
struct Term {
    word: String,
    stem: String,
    is_name: bool,
}

/// The content words of `text`: no function words, no framing, no single letters (the
/// remains of contractions, "doesn't"). A name is a capitalised word past the first, or a
/// word with a digit.
fn content_terms(text: &str) -> Vec<Term> {
    words(text)
        .enumerate()
        .filter(|(_, (word, _))| {
            let letter = word.chars().count() == 1 && !word.chars().all(|c| c.is_ascii_digit());
            !letter && !NOT_CONTENT.contains(&word.as_str())
        })
        .map(|(i, (word, capitalised))| Term {
            is_name: (capitalised && i > 0) || word.chars().any(|c| c.is_ascii_digit()),
            stem: stem(&word),
            word,
        })
        .collect()
}

/// What the content words of `text` are compared by (see [`ground`]).
pub(crate) fn content_stems(text: &str) -> HashSet<String> {
    content_terms(text).into_iter().map(|t| t.stem).collect()
}

/// What `word` is compared by, as a content word of a text is.
pub(crate) fn word_stem(word: &str) -> String {
    stem(&word.to_lowercase())
}

/// `text` cut after each sentence's end (`.`, `!` or `?` before a space, or a line end),
/// every piece keeping what follows it, so the pieces join back into `text`.
fn sentences(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = c == '\n'
            || (matches!(c, '.' | '!' | '?')
                && chars.peek().is_none_or(|(_, next)| next.is_whitespace()));
        if ends {
            // Keep the whitespace after the end with this sentence.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(fact: &str, message: &str) -> bool {
        ground(fact, message).verdict().is_ok()
    }

    #[test]
    fn a_question_or_request_grounds_only_facts_in_its_own_words() {
        let refused = [
            ("The user calculated 17 times 23.", "What is 17 times 23?"),
            (
                "The user told you about food.",
                "Can you remind me what I told you about food?",
            ),
            (
                "The user suggests a gift for a boy.",
                "Suggest a gift for my brother.",
            ),
            (
                "The user is asking about the weather in London.",
                "Will it rain tomorrow in London?",
            ),
            ("The user is feeling well today.", "How are you today?"),
        ];
        for (fact, message) in refused {
            let verdict = ground(fact, message).verdict();
            assert!(verdict.is_err(), "{fact} from {message}");
        }
        assert!(kept(
            "The user is vegan.",
            "Can you suggest recipes for my vegan diet?"
        ));
        assert!(kept(
            "The user has a brother.",
            "Suggest a gift for my brother."
        ));
        // A statement beside the question grounds as any statement does.
        assert!(kept(
            "The user is learning Spanish.",
            "How do I say hello? I'm learning Spanish on weekends."
        ));
        assert!(kept(
            "The user told their boss about the move to Munich.",
            "I told my boss about the move to Munich."
        ));
        let why = ground(
            "The user told you about food.",
            "What did I tell you about food?",
        )
        .verdict()
        .unwrap_err();
        assert!(why.contains("reports the user's question"), "{why}");
    }

    /// What [`cessations`] finds stopped, as word lists.
    fn stopped(message: &str) -> Vec<Vec<String>> {
        cessations(message).into_iter().map(|c| c.words).collect()
    }

    #[test]
    fn a_cessation_names_what_stopped_and_finds_the_facts_that_state_it() {
        assert_eq!(stopped("I don't run anymore, my knee hurts."), [["run"]]);
        assert_eq!(
            stopped("I cancelled Netflix, I no longer have it."),
            [["netflix"]]
        );
        assert_eq!(
            stopped("Good news: I quit smoking, I no longer smoke at all."),
            [vec!["smoking"], vec!["smoke"]]
        );
        assert_eq!(
            stopped("I moved to Munich last month, so I don't live in Berlin anymore."),
            [["live", "berlin"]]
        );
        // When it stopped is not what stopped.
        assert_eq!(stopped("I gave up coffee last month."), [["coffee"]]);
        for none in [
            "I run 10 km every Saturday morning.",
            "I don't drink alcohol.",
            "Actually my wife is Anne, not Jane.",
            "Can you stop for a moment?",
            "Is there any more cake?",
        ] {
            assert!(cessations(none).is_empty(), "{none}");
        }
        let ran = |fact: &str, message: &str| {
            cessations(message)
                .iter()
                .any(|c| states_what_ceased(fact, c))
        };
        assert!(ran(
            "The user runs 10 km every Saturday morning.",
            "I don't run anymore, my knee hurts."
        ));
        assert!(ran(
            "The user smokes about five cigarettes a day.",
            "I quit smoking."
        ));
        assert!(ran(
            "The user has a Netflix subscription.",
            "I cancelled Netflix."
        ));
        assert!(ran(
            "The user lives in Berlin.",
            "So I don't live in Berlin anymore."
        ));
        // Not what stopped, or already saying it stopped.
        assert!(!ran(
            "The user has a knee injury.",
            "I don't run anymore, my knee hurts."
        ));
        assert!(!ran(
            "The user no longer runs.",
            "I don't run anymore, my knee hurts."
        ));
        assert!(!ran(
            "The user's friend Sara lives in Munich.",
            "I moved, I don't live in Munich anymore."
        ));
        // Someone else stopped: what they did is retracted, and not what the user does.
        let message = "She quit smoking last year actually.";
        assert!(cessations(message)[0].of_someone_else);
        assert!(ran("The user's sister smokes a lot.", message));
        assert!(!ran("The user smokes a lot.", message));
        assert!(!ran("The user's sister smokes a lot.", "I quit smoking."));
    }

    #[test]
    fn a_fact_about_the_user_needs_a_message_that_speaks_of_them() {
        let why = ground(
            "The user quit smoking last year.",
            "She quit smoking last year actually.",
        )
        .verdict()
        .unwrap_err();
        assert!(why.contains("speaks of someone else (she)"), "{why}");
        assert!(kept(
            "The user's sister quit smoking last year.",
            "My sister quit smoking last year."
        ));
        assert!(kept(
            "The user's husband loves spicy food.",
            "What should I cook for my husband's birthday? He loves spicy food."
        ));
        // One statement of the user's own is enough; so is no pronoun at all.
        assert!(kept(
            "The user is going to Paris tomorrow.",
            "Haha, she is funny. Anyway, going to Paris tomorrow."
        ));
        assert!(kept(
            "The user is going to Paris tomorrow.",
            "Going to Paris tomorrow."
        ));
        assert!(about_the_speaker("The user runs."));
        assert!(about_the_speaker("I run."));
        assert!(!about_the_speaker("The user's brother Paul runs."));
        assert!(!about_the_speaker("Tom is vegan."));
    }

    #[test]
    fn a_short_answer_is_grounded_in_the_user_s_earlier_words_too() {
        let fact = "The user's favourite colour is green.";
        assert!(!kept(fact, "It's green."));
        let earlier = "Do you remember my favourite colour?";
        assert!(ground_in(fact, "It's green.", earlier).verdict().is_ok());
        // Whom the fact is about is read from the latest message.
        let verdict = ground_in(
            "The user quit smoking last year.",
            "She quit smoking last year.",
            "My sister smokes a lot.",
        )
        .verdict();
        assert!(verdict.is_err());
        assert!(!names_the_speaker("It's green."));
        assert!(names_the_speaker("I'm an architect."));
    }

    #[test]
    fn a_rewrite_that_moves_someone_the_message_never_names_is_seen() {
        let message = "I don't live in Rome anymore, I moved to Milan.";
        let old = "The user's brother Paul lives in Rome.";
        assert_eq!(
            carried_name("The user's brother Paul lives in Milan.", old, message).as_deref(),
            Some("paul")
        );
        assert_eq!(carried_name("The user lives in Milan.", old, message), None);
        // A name the message says, or a name the old fact did not hold, is not carried.
        assert_eq!(
            carried_name(
                "The user's brother Paul lives in Milan.",
                old,
                "Paul moved to Milan."
            ),
            None
        );
        assert_eq!(
            carried_name(
                "The user's wife is Anne.",
                "The user's wife is Jane.",
                "I married Anne."
            ),
            None
        );
    }

    #[test]
    fn a_name_only_asked_about_grounds_only_facts_in_the_message_s_words() {
        let message =
            "What should I cook for my husband's birthday on Friday? He loves spicy food.";
        let why = ground(
            "The user's husband's birthday dinner is on Friday and needs a spicy dish.",
            message,
        )
        .verdict()
        .unwrap_err();
        assert!(why.contains("only asked"), "{why}");
        assert!(kept("The user's husband's birthday is on Friday.", message));
        // Names in a statement ground as in any statement.
        assert!(kept(
            "The user is planning a trip to Japan in April.",
            "Can you help me plan? I'm going to Japan in April for a trip."
        ));
    }

    #[test]
    fn a_stopping_is_supported_in_any_wording_and_cut_from_what_contradicts_it() {
        let message = "I'm not vegetarian anymore, I eat fish now.";
        assert!(kept("The user is no longer vegetarian.", message));
        assert!(!kept(
            "The user is no longer vegetarian.",
            "I'm vegetarian and I love it."
        ));
        let ceased = cessations(message);
        assert_eq!(
            without_ceased_sentences("The user is vegetarian. The user now eats fish.", &ceased),
            "The user now eats fish."
        );
        assert_eq!(
            without_ceased_sentences("The user is no longer vegetarian.", &ceased),
            "The user is no longer vegetarian."
        );
        assert_eq!(
            without_ceased_sentences("The user is vegetarian.", &ceased),
            ""
        );
        // Remembering is asked about, not stated.
        assert!(!kept(
            "The user remembers their favourite colour.",
            "Do you remember my favourite colour?"
        ));
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

    fn stale(summary: &str, retracted: &[&str], added: &[&str]) -> (String, Vec<String>) {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        without_stale_sentences(summary, &owned(retracted), &owned(added))
    }

    #[test]
    fn a_summary_keeps_no_sentence_of_a_corrected_fact() {
        let (kept, cut) = stale(
            "Jonas is married to Anne. Jonas' wife is Jane. They live in Ghent.",
            &["The user's wife is Jane"],
            &["The user's wife is Anne"],
        );
        assert_eq!(kept, "Jonas is married to Anne. They live in Ghent.");
        assert_eq!(cut, ["Jonas' wife is Jane."]);
        // Saying what changed is no contradiction.
        let (kept, cut) = stale(
            "His wife is Anne, not Jane.",
            &["The user's wife is Jane"],
            &["The user's wife is Anne"],
        );
        assert_eq!(kept, "His wife is Anne, not Jane.");
        assert!(cut.is_empty());
    }

    #[test]
    fn a_summary_drops_what_a_deletion_retracted() {
        let (kept, cut) = stale(
            "The user runs 10 km every Saturday morning.\nThe user hurt a knee.",
            &["The user runs 10 km every Saturday morning."],
            &[],
        );
        assert_eq!(kept, "The user hurt a knee.");
        assert_eq!(cut.len(), 1);
        // Without names or numbers, two thirds of what set the old fact apart must be there.
        let (kept, _) = stale(
            "The user is a software engineer in Lyon. The user enjoys engineering puzzles.",
            &["The user is a software engineer"],
            &["The user is a teacher now"],
        );
        assert_eq!(kept, "The user enjoys engineering puzzles.");
        let (kept, cut) = stale(
            "Nothing related.",
            &["The user smokes five cigarettes a day"],
            &[],
        );
        assert_eq!((kept.as_str(), cut.len()), ("Nothing related.", 0));
    }

    #[test]
    fn sentences_join_back_into_the_text() {
        for text in [
            "A. B! C? D",
            "One line\nTwo lines.",
            "3.5 km. Done.",
            "",
            "No end",
        ] {
            assert_eq!(sentences(text).concat(), text);
        }
        assert_eq!(sentences("Ran 3.5 km. Done."), ["Ran 3.5 km. ", "Done."]);
    }
}
