//! Whom each clause of a message speaks of, and whether it states, denies, supposes or asks.
//!
//! The write path keeps a fact only when the user's message says it of the same person and
//! in the same way ([`crate::text::grounding`]), so a message is read clause by clause:
//!
//! - **Clauses.** A sentence is cut at `, ; : ( )`, dashes, and the conjunctions that start a
//!   new statement ([`CLAUSE_CONJUNCTIONS`]: "and", "but", "so", "because", ...).
//! - **Person.** A word of the speaker's — a first-person pronoun ("I", "I'm", "we", "me",
//!   "us"), or "my"/"our" before a thing ("my knee", "our flat") — makes a clause the
//!   speaker's, at least in part ("My boss and I ...", "... moved us to Oslo", "Do you
//!   remember my address?"). Otherwise the first word naming someone else decides: a
//!   third-person pronoun of a person ("he", "she", "his", "her"; not "they", which is as
//!   often nobody in particular), "you", or "my"/"our" before a word for a person or a pet
//!   ([`PERSON_NOUNS`]: "my sister", "our dog", "my best friend"). A clause with none of these speaks of whom the clause before it in the same
//!   sentence spoke of ("My sister lives in Quito and teaches maths": both about her).
//! - **Stance.** In a clause, a negation ("not", "never", "no", "without", a word in "n't")
//!   denies every word after it; "anymore", "any more", "no more" and "no longer" deny the
//!   whole clause. A supposition ("if", "unless", "would", "I'd", "could", "might", "wish",
//!   "someday", "maybe", "perhaps") makes every word after it supposed, not stated, denials
//!   included ("if I didn't have a car" states nothing about a car).
//! - **Asking.** A sentence ending in "?" asks; so does one opening with a request
//!   ("please", or a verb of asking for something: [`REQUEST_VERBS`], "write", "suggest",
//!   "explain", ...). It says little about the asker.

use super::words::{sentences, words_of_sentence, Word};

/// Whom a clause speaks of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Person {
    /// The one who wrote the message ("I", "we", "my knee").
    Speaker,
    /// Someone else: a third person, someone the speaker names by relation, or the listener.
    Someone,
    /// The clause names no one.
    Unknown,
}

/// How a clause holds one of its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stance {
    /// Said to be so.
    Stated,
    /// Said not to be so (or no longer).
    Denied,
    /// Only supposed, wished or conditional.
    Supposed,
}

/// One clause of a message.
#[derive(Debug, Clone)]
pub struct Clause {
    /// Whom it speaks of.
    pub person: Person,
    /// Its sentence asks (a question or a request) instead of telling.
    pub asks: bool,
    /// Its words, each with how the clause holds it.
    pub words: Vec<(Word, Stance)>,
}

/// Conjunctions that start a new statement within a sentence.
pub const CLAUSE_CONJUNCTIONS: &[&str] = &[
    "and", "but", "so", "because", "although", "though", "while", "whereas", "yet",
];

/// Words for a person or a pet as someone's relation: family, partners, friends, neighbours,
/// people one works or lives with, and the animals people keep. Roles that mostly qualify
/// another word ("my dentist appointment", "my student loan", "my doctor's note") are left
/// out: they would take the speaker's own matter for someone else's.
pub const PERSON_NOUNS: &[&str] = &[
    "aunt",
    "baby",
    "boss",
    "boyfriend",
    "brother",
    "brothers",
    "buddy",
    "cat",
    "cats",
    "child",
    "children",
    "classmate",
    "classmates",
    "colleague",
    "colleagues",
    "cousin",
    "cousins",
    "coworker",
    "coworkers",
    "dad",
    "daddy",
    "daughter",
    "daughters",
    "dog",
    "dogs",
    "ex",
    "father",
    "fiance",
    "fiancee",
    "fiancé",
    "fiancée",
    "flatmate",
    "friend",
    "friends",
    "girlfriend",
    "granddaughter",
    "grandfather",
    "grandma",
    "grandmother",
    "grandpa",
    "grandparents",
    "grandson",
    "hamster",
    "horse",
    "housemate",
    "husband",
    "kid",
    "kids",
    "kitten",
    "manager",
    "mom",
    "mommy",
    "mother",
    "mum",
    "neighbor",
    "neighbors",
    "neighbour",
    "neighbours",
    "nephew",
    "nephews",
    "niece",
    "nieces",
    "parent",
    "parents",
    "partner",
    "pet",
    "pets",
    "puppy",
    "rabbit",
    "roommate",
    "sibling",
    "siblings",
    "sister",
    "sisters",
    "son",
    "sons",
    "spouse",
    "supervisor",
    "teammate",
    "teammates",
    "twin",
    "uncle",
    "wife",
];

/// Verbs that open a request to the listener ("Write me a haiku.", "Suggest a name."): a
/// sentence starting with one asks for something instead of telling.
pub const REQUEST_VERBS: &[&str] = &[
    "add",
    "book",
    "calculate",
    "check",
    "compare",
    "convert",
    "create",
    "describe",
    "draft",
    "edit",
    "explain",
    "find",
    "fix",
    "generate",
    "give",
    "help",
    "list",
    "make",
    "name",
    "outline",
    "plan",
    "please",
    "recommend",
    "remind",
    "rewrite",
    "search",
    "send",
    "show",
    "suggest",
    "summarise",
    "summarize",
    "tell",
    "translate",
    "write",
];

const SPEAKER: &[&str] = &["i", "we", "me", "us", "myself", "ourselves"];
const SOMEONE: &[&str] = &[
    "he",
    "she",
    "they",
    "him",
    "them",
    "his",
    "her",
    "hers",
    "their",
    "theirs",
    "himself",
    "herself",
    "themselves",
];
const LISTENER: &[&str] = &["you", "your", "yours", "yourself"];
const SUPPOSITIONS: &[&str] = &[
    "if",
    "unless",
    "would",
    "could",
    "might",
    "wish",
    "wished",
    "someday",
    "maybe",
    "perhaps",
    "hypothetically",
    "imagine",
];
const CLAUSE_DENIALS: &[&[&str]] = &[
    &["anymore"],
    &["any", "more"],
    &["no", "more"],
    &["no", "longer"],
];

/// Whether `message` speaks of its speaker in the first person ("I", "my", "we"): a message
/// without ("The birch.", "She quit last year.") leans on the exchange before it.
pub fn names_the_speaker(message: &str) -> bool {
    super::words::words(message)
        .iter()
        .any(|w| SPEAKER.contains(&w.base()) || matches!(w.base(), "my" | "our" | "mine" | "ours"))
}

/// The clauses of `message`, sentence by sentence.
pub fn clauses(message: &str) -> Vec<Clause> {
    let mut out = Vec::new();
    for sentence in sentences(message) {
        let all = words_of_sentence(sentence);
        let asks = super::words::is_question(sentence)
            || all
                .first()
                .is_some_and(|w| REQUEST_VERBS.contains(&w.text.as_str()));
        let mut person = Person::Unknown;
        for piece in clause_texts(sentence) {
            let words = clause_words(&all, piece, sentence);
            let own = person_of(&words);
            if own != Person::Unknown {
                person = own;
            }
            out.push(Clause {
                person,
                asks,
                words: stances(words),
            });
        }
    }
    out
}

/// The pieces of `sentence` between clause marks and conjunctions (byte ranges).
fn clause_texts(sentence: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for (i, c) in sentence.char_indices() {
        if matches!(c, ',' | ';' | ':' | '(' | ')' | '—' | '–') {
            ranges.push(start..i);
            start = i + c.len_utf8();
        }
    }
    ranges.push(start..sentence.len());
    // Then at conjunctions, which belong to the clause they open.
    let mut out = Vec::new();
    for range in ranges {
        let piece = &sentence[range.clone()];
        let mut from = range.start;
        let mut offset = 0;
        for token in piece.split_inclusive(char::is_whitespace) {
            let word = token.trim().to_lowercase();
            let at = range.start + offset;
            if CLAUSE_CONJUNCTIONS.contains(&word.as_str()) && at > from {
                out.push(from..at);
                from = at;
            }
            offset += token.len();
        }
        out.push(from..range.end);
    }
    out.into_iter()
        .filter(|r| sentence[r.clone()].chars().any(char::is_alphanumeric))
        .collect()
}

/// The words of `all` (the sentence's words, numbered in the sentence) that lie in `piece`.
fn clause_words(all: &[Word], piece: std::ops::Range<usize>, sentence: &str) -> Vec<Word> {
    let before = words_of_sentence(&sentence[..piece.start]).len();
    let inside = words_of_sentence(&sentence[piece]).len();
    all.iter().skip(before).take(inside).cloned().collect()
}

/// Whom `words` (one clause) speak of. A word of the speaker's anywhere makes the clause
/// the speaker's ("My boss and I", "My husband's job moved us", "Do you remember my
/// address?"): what it says is at least partly theirs. Otherwise the first word naming
/// someone else decides.
fn person_of(words: &[Word]) -> Person {
    let people: Vec<Person> = (0..words.len())
        .filter_map(|i| person_at(words, i))
        .collect();
    if people.contains(&Person::Speaker) {
        Person::Speaker
    } else {
        people.first().copied().unwrap_or(Person::Unknown)
    }
}

/// The person the word at `i` names, if it names one: a first-person pronoun, or "my"/"our"
/// before a thing, is the speaker; a third-person pronoun, "you", or "my"/"our" before a word
/// for a person or a pet is someone else.
fn person_at(words: &[Word], i: usize) -> Option<Person> {
    let base = words[i].base();
    if matches!(base, "my" | "our") {
        let mut next = words.iter().skip(i + 1).take(2).map(|w| w.base());
        return Some(if next.any(|w| PERSON_NOUNS.contains(&w)) {
            Person::Someone
        } else {
            Person::Speaker
        });
    }
    if SPEAKER.contains(&base) {
        return Some(Person::Speaker);
    }
    (SOMEONE.contains(&base) || LISTENER.contains(&base)).then_some(Person::Someone)
}

/// Each word of one clause with how the clause holds it.
fn stances(words: Vec<Word>) -> Vec<(Word, Stance)> {
    let denied_whole = CLAUSE_DENIALS.iter().any(|phrase| {
        words
            .windows(phrase.len())
            .any(|w| w.iter().zip(phrase.iter()).all(|(word, p)| word.text == *p))
    });
    let mut stance = if denied_whole {
        Stance::Denied
    } else {
        Stance::Stated
    };
    let mut out = Vec::with_capacity(words.len());
    for word in words {
        let supposes =
            SUPPOSITIONS.contains(&word.base()) || word.text.ends_with("'d") || word.text == "i'd";
        if supposes {
            stance = Stance::Supposed;
        } else if word.negates() && stance != Stance::Supposed {
            stance = Stance::Denied;
        }
        out.push((word, stance));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(message: &str) -> Vec<(Person, bool, String)> {
        clauses(message)
            .into_iter()
            .map(|c| {
                let text: Vec<String> = c.words.iter().map(|(w, _)| w.text.clone()).collect();
                (c.person, c.asks, text.join(" "))
            })
            .collect()
    }

    fn stance_of(message: &str, word: &str) -> Vec<Stance> {
        clauses(message)
            .into_iter()
            .flat_map(|c| c.words)
            .filter(|(w, _)| w.text == word)
            .map(|(_, s)| s)
            .collect()
    }

    #[test]
    fn each_clause_speaks_of_someone() {
        use Person::*;
        assert_eq!(
            read("My cousin Ilse repairs boats, and I sell bicycles."),
            [
                (Someone, false, "my cousin ilse repairs boats".into()),
                (Speaker, false, "and i sell bicycles".into()),
            ]
        );
        assert_eq!(
            read("Ilse is great. She sails every July.")
                .iter()
                .map(|c| c.0)
                .collect::<Vec<_>>(),
            [Unknown, Someone]
        );
        // A clause naming no one continues the clause before it in the sentence.
        assert_eq!(
            read("My uncle lives in Quito and teaches chemistry.")
                .iter()
                .map(|c| c.0)
                .collect::<Vec<_>>(),
            [Someone, Someone]
        );
        // "my" before a thing is the speaker's own.
        assert_eq!(read("My ankle still aches.")[0].0, Speaker);
        assert_eq!(read("Our best friend moved.")[0].0, Someone);
        assert_eq!(read("You recommended the blue one.")[0].0, Someone);
        // Asking the listener about the speaker's own matter is the speaker's.
        assert_eq!(read("Can you recall my favourite tree?")[0].0, Speaker);
        assert_eq!(
            read("Can you tell me what I said about kites?")[0].0,
            Speaker
        );
    }

    #[test]
    fn a_negation_denies_what_follows_it_in_its_clause() {
        assert_eq!(
            stance_of("I don't own a kayak, but I rent canoes.", "kayak"),
            [Stance::Denied]
        );
        assert_eq!(
            stance_of("I don't own a kayak, but I rent canoes.", "canoes"),
            [Stance::Stated]
        );
        assert_eq!(
            stance_of("I'm no longer a baker.", "baker"),
            [Stance::Denied]
        );
        assert_eq!(
            stance_of(
                "I play chess anymore? Not really, I stopped chess.",
                "chess"
            ),
            [Stance::Denied, Stance::Stated]
        );
        assert_eq!(
            stance_of("I have never seen snow.", "snow"),
            [Stance::Denied]
        );
    }

    #[test]
    fn a_supposition_states_nothing() {
        assert_eq!(
            stance_of("If I had a sailboat, I'd live on it.", "sailboat"),
            [Stance::Supposed]
        );
        assert_eq!(
            stance_of("If I had a sailboat, I'd live on it.", "live"),
            [Stance::Supposed]
        );
        assert_eq!(
            stance_of("Maybe I'll adopt a parrot someday.", "parrot"),
            [Stance::Supposed]
        );
        assert_eq!(
            stance_of("If I didn't have a bike I would walk.", "bike"),
            [Stance::Supposed]
        );
        assert_eq!(stance_of("I adopted a parrot.", "parrot"), [Stance::Stated]);
    }

    #[test]
    fn questions_and_requests_ask() {
        assert!(read("Which glue works on ceramic?")[0].1);
        assert!(read("Draft a note to my landlord.")[0].1);
        assert!(read("Please check the sum.")[0].1);
        assert!(!read("I glued the vase.")[0].1);
    }
}
