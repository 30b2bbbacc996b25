//! The strict judge of the write-quality benchmark: does a stored sentence state a claim,
//! about the right person, without negating it?
//!
//! A dialogue says what must be remembered (`remember`), what may be (`true`) and what must
//! not be stated (`false`), each as [`Claim`]s: who the claim is about, and the words any
//! wording of it must hold. A stored text *states* a claim when one of its sentences holds
//! every word of the claim as whole words (numbers as whole tokens: "8" is not in "2018"),
//! the sentence's subject is the claim's person, and none of the claim's words stands where
//! the sentence denies or only supposes it. A claim with `negated` is the opposite: it is
//! stated by a sentence that denies its words ("The user has never been to Iceland.").
//!
//! - **Words.** Lower-cased runs of letters and digits, with inner apostrophes kept
//!   ("user's", "doesn't"); a claim word matches a token, or the token less a possessive
//!   "'s". An entry of a claim is a set of alternatives (`"peanut|peanuts"`); an alternative
//!   may be a phrase of several words ("ice cream", "gluten-free"), matched as consecutive
//!   tokens.
//! - **Subject.** A *mention* is the word "user" (or "i", "my", "me"), one of the dialogue's
//!   `user_names` (the user), or one of its `others` (someone else). A claim's subject in a
//!   sentence is the last mention before the first of its words; with none, the last person
//!   the sentence before mentioned; with none, the user ("Golf is his passion." is about the user
//!   unless a sentence before named someone). `about: "any"` checks no subject.
//! - **Scope.** A clause ends at `, ; : ( )` and at "and", "but", "although", "though",
//!   "while", "whereas", "because", "so", "yet". In a clause, a negation ("not", a word
//!   ending in "n't", "no", "never", "without", "nor", "neither", "none", "cannot") denies
//!   every word after it, and "anymore", "any more", "no more" or "no longer" deny the whole
//!   clause; a supposition ("if", "unless", "whether", "would", "could", "might", "may",
//!   "wish", "hope", "someday", "maybe", "perhaps") makes every word after it unasserted. A
//!   scope word that is itself one of the claim's matched words opens no scope for it
//!   ("would like": a claim naming "would" is stated by it).
//! - **Verdicts.** A stored fact is *false* when one of its sentences states a `false` claim,
//!   else *true* when one states a `remember` or `true` claim, else *unjudged* (and counted
//!   against precision). A `remember` claim is recalled when a live fact states it. A summary
//!   is judged sentence by sentence against the `false` claims.

use serde::Deserialize;

/// One claim a dialogue makes about what a memory may say.
#[derive(Debug, Clone, Deserialize)]
pub struct Claim {
    /// "user", "any", or alternatives naming someone else ("sister|Marta").
    pub about: String,
    /// The words any wording of the claim holds, each a set of alternatives ("a|b|c").
    pub says: Vec<String>,
    /// The claim is stated by denying its words.
    #[serde(default)]
    pub negated: bool,
    /// Why a `false` claim is false: old, third_party, hypothetical, negated, suggestion,
    /// invented.
    #[serde(default)]
    pub why: Option<String>,
}

/// Who a dialogue's people are, for finding a sentence's subject.
#[derive(Debug, Clone, Default)]
pub struct People {
    /// Names the user gives for themself.
    pub user_names: Vec<String>,
    /// Words naming anyone else (relations and names).
    pub others: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Person {
    User,
    Other(String),
}

/// One token of a sentence, with what the judge knows of it.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    /// Set when the token is a scope word: whether it denies (true) or only supposes.
    opens: Option<bool>,
    /// The clause denies everything in it ("anymore", "no longer").
    clause: usize,
}

const NEGATIONS: &[&str] = &[
    "not", "no", "never", "without", "nor", "neither", "none", "cannot",
];
const SUPPOSITIONS: &[&str] = &[
    "if", "unless", "whether", "would", "could", "might", "may", "wish", "wishes", "hope", "hopes",
    "someday", "maybe", "perhaps",
];
const CLAUSE_WORDS: &[&str] = &[
    "and", "but", "although", "though", "while", "whereas", "because", "so", "yet",
];
const CLAUSE_DENIALS: &[&[&str]] = &[
    &["anymore"],
    &["any", "more"],
    &["no", "more"],
    &["no", "longer"],
];

/// Sentences of `text`: cut after `.`, `!` or `?` before whitespace, and at line ends.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' {
            out.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
        if matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace()) {
            out.push(std::mem::take(&mut current));
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The tokens of one sentence, with clause numbers and scope words marked.
fn tokens(sentence: &str) -> Vec<Token> {
    let normal = sentence.replace(['’', '‘'], "'").to_lowercase();
    let mut raw: Vec<(String, usize)> = Vec::new();
    let mut clause = 0;
    let mut word = String::new();
    let chars: Vec<char> = normal.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let inner_apostrophe =
            c == '\'' && !word.is_empty() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            raw.push((std::mem::take(&mut word), clause));
        }
        if matches!(c, ',' | ';' | ':' | '(' | ')' | '—' | '–') {
            clause += 1;
        }
    }
    if !word.is_empty() {
        raw.push((word, clause));
    }
    // Clause words start a clause of their own.
    let mut tokens = Vec::new();
    let mut shift = 0;
    for (text, clause) in raw {
        if CLAUSE_WORDS.contains(&text.as_str()) {
            shift += 1;
        }
        let opens = if NEGATIONS.contains(&text.as_str()) || text.ends_with("n't") {
            Some(true)
        } else if SUPPOSITIONS.contains(&text.as_str()) {
            Some(false)
        } else {
            None
        };
        tokens.push(Token {
            text,
            opens,
            clause: clause + shift,
        });
    }
    tokens
}

/// Clauses that deny everything in them.
fn denied_clauses(tokens: &[Token]) -> Vec<usize> {
    let mut denied = Vec::new();
    for (i, _) in tokens.iter().enumerate() {
        for phrase in CLAUSE_DENIALS {
            let matches = phrase
                .iter()
                .enumerate()
                .all(|(k, w)| tokens.get(i + k).is_some_and(|t| t.text == *w));
            if matches {
                denied.push(tokens[i].clause);
            }
        }
    }
    denied
}

fn base(token: &str) -> &str {
    token
        .strip_suffix("'s")
        .unwrap_or(token)
        .trim_end_matches('\'')
}

/// Where an alternative (one word or a phrase) occurs in `tokens`: the positions it covers.
fn find(sentence: &[Token], alternative: &str) -> Vec<Vec<usize>> {
    // The alternative is read as a sentence is: "gluten-free" is "gluten free".
    let words: Vec<String> = tokens(alternative).into_iter().map(|t| t.text).collect();
    if words.is_empty() {
        return Vec::new();
    }
    (0..sentence.len())
        .filter(|&i| {
            words.iter().enumerate().all(|(k, w)| {
                sentence
                    .get(i + k)
                    .is_some_and(|t| t.text == *w || base(&t.text) == w)
            })
        })
        .map(|i| (i..i + words.len()).collect())
        .collect()
}

/// The person a token mentions, if any.
fn mention(token: &str, people: &People) -> Option<Person> {
    let word = base(token);
    if matches!(word, "user" | "users" | "i" | "my" | "me" | "myself") {
        return Some(Person::User);
    }
    if people.user_names.iter().any(|n| n.to_lowercase() == word) {
        return Some(Person::User);
    }
    people
        .others
        .iter()
        .find(|o| o.to_lowercase() == word)
        .map(|o| Person::Other(o.to_lowercase()))
}

/// How one sentence stands to a claim's words: not all there, stated, or denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Absent,
    Asserted,
    Denied,
    /// Present, but supposed ("if", "would") rather than asserted or denied.
    Supposed,
}

/// How `sentence` holds `claim`'s words, given the subject carried from the sentences
/// before; returns the reading and the subject the claim has there.
fn read(
    tokens: &[Token],
    claim: &Claim,
    people: &People,
    carried: &Option<Person>,
) -> (Reading, Option<Person>) {
    // For each entry, its first occurrence of any alternative.
    let mut covered: Vec<Vec<usize>> = Vec::new();
    for entry in &claim.says {
        let best = entry
            .split('|')
            .flat_map(|alt| find(tokens, alt))
            .min_by_key(|positions| positions[0]);
        match best {
            Some(positions) => covered.push(positions),
            None => return (Reading::Absent, None),
        }
    }
    let first = covered.iter().map(|p| p[0]).min().unwrap_or(0);
    let mut subject = None;
    for token in &tokens[..first] {
        if let Some(person) = mention(&token.text, people) {
            subject = Some(person);
        }
    }
    let subject = subject.or_else(|| carried.clone()).or(Some(Person::User));
    let claimed: Vec<usize> = covered.iter().flatten().copied().collect();
    let denied_clauses = denied_clauses(tokens);
    let mut reading = Reading::Asserted;
    for &i in &claimed {
        let clause = tokens[i].clause;
        if denied_clauses.contains(&clause) {
            reading = Reading::Denied;
            continue;
        }
        let scope = tokens[..i]
            .iter()
            .enumerate()
            .filter(|(j, t)| t.clause == clause && t.opens.is_some() && !claimed.contains(j))
            .map(|(_, t)| t.opens)
            .next_back()
            .flatten();
        match scope {
            Some(true) => reading = Reading::Denied,
            Some(false) if reading == Reading::Asserted => reading = Reading::Supposed,
            _ => {}
        }
    }
    (reading, subject)
}

fn right_person(claim: &Claim, subject: &Option<Person>) -> bool {
    match claim.about.to_lowercase().as_str() {
        "any" => true,
        "user" => *subject == Some(Person::User),
        names => match subject {
            Some(Person::Other(word)) => names.split('|').any(|n| n.trim() == word),
            _ => false,
        },
    }
}

/// Whether some sentence of `text` states `claim` (see the module doc).
pub fn states(text: &str, claim: &Claim, people: &People) -> bool {
    let mut carried: Option<Person> = None;
    for sentence in sentences(text) {
        let tokens = tokens(&sentence);
        let (reading, subject) = read(&tokens, claim, people, &carried);
        let wanted = if claim.negated {
            Reading::Denied
        } else {
            Reading::Asserted
        };
        if reading == wanted && right_person(claim, &subject) {
            return true;
        }
        if let Some(last) = tokens.iter().rev().find_map(|t| mention(&t.text, people)) {
            carried = Some(last);
        }
    }
    false
}

/// Whether every entry of `words` (alternatives "a|b") is in `text` as whole words.
pub fn holds_words(text: &str, words: &[String]) -> bool {
    let tokens = tokens(text);
    words
        .iter()
        .all(|entry| entry.split('|').any(|alt| !find(&tokens, alt).is_empty()))
}

/// A stored fact's verdict against a dialogue's claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    True,
    /// False, with the index of the first `false` claim it states.
    False(usize),
    Unjudged,
}

/// Judges one stored text.
pub fn verdict(text: &str, truths: &[&Claim], falsehoods: &[Claim], people: &People) -> Verdict {
    if let Some(i) = falsehoods.iter().position(|c| states(text, c, people)) {
        return Verdict::False(i);
    }
    if truths.iter().any(|c| states(text, c, people)) {
        return Verdict::True;
    }
    Verdict::Unjudged
}

/// How an answer stands to the dialogue's current and stale claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    Right,
    Both,
    Stale,
    None,
}

impl Answered {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Right => "right",
            Self::Both => "both",
            Self::Stale => "stale",
            Self::None => "none",
        }
    }
}

/// The judge's people for an answer: the dialogue's, with the second person as the user.
fn answer_people(people: &People) -> People {
    let mut people = people.clone();
    people
        .user_names
        .extend(["you", "your", "yours", "yourself"].map(String::from));
    people
}

/// Judges one answer (see the module doc).
pub fn judge_answer(answer: &str, current: &[Claim], stale: &[Claim], people: &People) -> Answered {
    let people = answer_people(people);
    let right = current.iter().any(|c| states(answer, c, &people));
    let old = stale.iter().any(|c| states(answer, c, &people));
    match (right, old) {
        (true, false) => Answered::Right,
        (true, true) => Answered::Both,
        (false, true) => Answered::Stale,
        (false, false) => Answered::None,
    }
}
