//! What a message says is no longer so, and which stored facts that retracts.
//!
//! A small model often extracts the reason for a change and not the change ("The user has
//! a sore shoulder." from "I gave up swimming because of my shoulder."), and then has nothing
//! to retract. So the write path also reads the user's message itself for two ways English
//! takes something back ([`retractions`]):
//!
//! - **Stopping.** A stated clause with a phrase of stopping ([`STOPPING`]: "anymore", "no
//!   longer", "quit", "stopped", "gave up", "cancelled", "used to"). What stopped is the
//!   clause's remaining content words, less those that say when or how ([`says_when`]:
//!   words in "-ly", units of time and their counts, "ago", "last", "since", "now"...) and
//!   less the words naming people: "I gave up sugar two months ago" stopped "sugar".
//! - **Contrast.** A clause that denies a name or number while its sentence states another:
//!   "My locker is 14, not 41." takes back "41"; "It's Ilse, not Ilka." takes back "Ilka".
//!   The same construction with other words — a short "not ..." after what the sentence
//!   states ("it's the viola I teach, not the violin"), or "it's not ..." beside another clause
//!   ("It's not the violin, it's the viola") — takes back what it denies, with what the
//!   sentence states in its place ([`Retraction::instead`]): such a retraction reaches only
//!   a fact about the same thing as a new fact that states the replacement
//!   ([`corrected_by`]), since "not" alone says nothing of which fact was wrong.
//!
//! A stored fact states what a retraction takes back ([`states_retracted`]) when it is about
//! the same kind of person (the speaker, or someone else when the clause speaks of someone
//! else) or about someone the retraction names, holds the retraction's names and numbers
//! ("We cancelled the Kyoto trip" takes back "The user plans to visit Kyoto."), or all of its
//! words when it names none (sharing their first four letters, or, for a word shorter than
//! that, the same stem: "run" in "runs", not "bus" in "busy"), and neither denies nor stops
//! anything itself.
//! A message that repairs what was said ("actually", "I meant", "scratch that": [`REPAIRS`])
//! or says something changed ("now", "moved", "switched": [`CHANGES`]) may have new facts
//! that replace old ones in words no rule can match ([`signals_a_change`]); the write path
//! then asks the LLM about the closest pair.
//!
//! [`without_retracted_sentences`] cuts the same sentences from a new fact the pass is about
//! to write: a small model merges the old fact into its update ("The user is a baker. The
//! user now sells cars.").

use super::clauses::{clauses, Clause, Person, Stance, PERSON_NOUNS};
use super::subjects::{subject_of, Subject};
use super::words::{says_when, sentences, stem, words, Word};

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

/// Words that count units of time ("two weeks ago"): part of saying when.
const COUNTS: &[&str] = &[
    "couple", "eight", "few", "five", "four", "nine", "one", "several", "seven", "six", "ten",
    "three", "two",
];

/// Something a message takes back: what, and of whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retraction {
    /// The content words of what is no longer so ("run", "live quito").
    pub words: Vec<String>,
    /// Those of them that are names or numbers ("quito").
    pub names: Vec<String>,
    /// The clause speaks of someone else ("She quit smoking."), not of the speaker.
    pub of_someone_else: bool,
    /// For a contrast of things, the content words its sentence states in place of what it
    /// denies ("green", "tea" in "it's green tea now, not coffee"); empty otherwise.
    pub instead: Vec<String>,
}

impl Retraction {
    fn of(words: &[&Word], of_someone_else: bool) -> Self {
        let base = |w: &&Word| w.base().to_owned();
        Self {
            words: words.iter().map(base).collect(),
            names: words.iter().filter(|w| w.is_name()).map(base).collect(),
            of_someone_else,
            instead: Vec::new(),
        }
    }
}

/// Most content words in a "not ..." piece read as a contrast: a contrast names a thing
/// ("not the violin"), a longer piece is a clause of its own.
const CONTRAST_WORDS: usize = 3;

/// What may stand before the "not" of a piece that contrasts: a conjunction ("..., but not
/// the violin"), or "it"/"that" and a form of "be" ("it's not the violin").
const CONTRAST_LEADS: &[&str] = &["and", "but", "or", "it", "that", "is", "was"];

/// Whether `words` hold a phrase of stopping.
fn stops(words: &[&str]) -> bool {
    STOPPING
        .iter()
        .any(|phrase| words.windows(phrase.len()).any(|w| w == *phrase))
}

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

/// What `message` takes back, clause by clause; questions take back nothing.
pub fn retractions(message: &str) -> Vec<Retraction> {
    let mut found = Vec::new();
    let all = clauses(message);
    for clause in all.iter().filter(|c| !c.asks) {
        let texts: Vec<&str> = clause.words.iter().map(|(w, _)| w.text.as_str()).collect();
        if !stops(&texts) {
            continue;
        }
        let clause_words: Vec<&Word> = clause.words.iter().map(|(w, _)| w).collect();
        let what: Vec<&Word> = clause_words
            .iter()
            .enumerate()
            .filter(|(i, w)| is_what(w) && !counts_time(w, clause_words.get(i + 1)))
            .filter(|(_, w)| !STOPPING.iter().any(|p| p.contains(&w.base())))
            .map(|(_, w)| *w)
            .collect();
        if !what.is_empty() {
            found.push(Retraction::of(&what, clause.person == Person::Someone));
        }
    }
    found.extend(contrasts(message));
    found.extend(contrasted_things(message));
    found
}

/// A content word that can name what stopped: not a time word, not a word for a person.
fn is_what(word: &Word) -> bool {
    word.is_content() && !says_when(word.base()) && !PERSON_NOUNS.contains(&word.base())
}

/// Whether `word` counts the unit of time after it ("two" in "two weeks ago").
fn counts_time(word: &Word, next: Option<&&Word>) -> bool {
    let counts = COUNTS.contains(&word.base()) || word.base().chars().all(|c| c.is_ascii_digit());
    counts && next.is_some_and(|n| says_when(n.base()))
}

/// The clauses of each sentence of `message` that asks nothing: a contrast in a question
/// ("Is it 14, not 41?") takes nothing back.
fn sentences_that_state(message: &str) -> impl Iterator<Item = Vec<Clause>> + '_ {
    sentences(message)
        .into_iter()
        .map(clauses)
        .filter(|parts| !parts.iter().any(|c| c.asks))
}

/// The names and numbers a sentence denies while it states another ("14, not 41").
fn contrasts(message: &str) -> Vec<Retraction> {
    let mut found = Vec::new();
    for parts in sentences_that_state(message) {
        let is_name = |(w, _): &&(Word, Stance)| w.is_name() && w.is_content();
        let states_one = parts
            .iter()
            .flat_map(|c| &c.words)
            .filter(is_name)
            .any(|(_, s)| *s == Stance::Stated);
        if !states_one {
            continue;
        }
        for clause in &parts {
            let texts: Vec<&str> = clause.words.iter().map(|(w, _)| w.text.as_str()).collect();
            if stops(&texts) {
                continue;
            }
            let denied: Vec<&Word> = clause
                .words
                .iter()
                .filter(is_name)
                .filter(|(_, s)| *s == Stance::Denied)
                .map(|(w, _)| w)
                .collect();
            if !denied.is_empty() {
                found.push(Retraction::of(&denied, clause.person == Person::Someone));
            }
        }
    }
    found
}

/// The things (not names or numbers: [`contrasts`] reads those) a sentence denies in a short
/// "not ..." piece while another of its clauses states something in their place: "it's the
/// viola I teach, not the violin" takes back "violin", instead of "viola" and "teach".
fn contrasted_things(message: &str) -> Vec<Retraction> {
    let mut found = Vec::new();
    for parts in sentences_that_state(message) {
        for (at, clause) in parts.iter().enumerate() {
            let Some((denied, it_is_not)) = contrast_piece(clause, at) else {
                continue;
            };
            // The clause it stands against: the one after "it's not the violin, it's the
            // viola", the one before "it's the viola, not the violin".
            let paired = if it_is_not && at + 1 < parts.len() {
                parts.get(at + 1)
            } else {
                at.checked_sub(1).and_then(|before| parts.get(before))
            };
            let instead: Vec<String> = paired
                .into_iter()
                .flat_map(|c| &c.words)
                .filter(|(w, s)| *s == Stance::Stated && is_what(w))
                .map(|(w, _)| w.base().to_owned())
                .collect();
            if !instead.is_empty() {
                let mut retraction = Retraction::of(&denied, clause.person == Person::Someone);
                retraction.instead = instead;
                found.push(retraction);
            }
        }
    }
    found
}

/// The words `clause` (the `at`-th of its sentence) denies when it is a contrast piece, and
/// whether it opens with "it"/"that": a "not" after a conjunction or nothing, past the
/// sentence's first clause ("..., not the violin"), or after "it"/"that" and a form of "be"
/// anywhere ("it's not the violin"), denying at most [`CONTRAST_WORDS`] content words, none a
/// name or a number, and stopping nothing.
fn contrast_piece(clause: &Clause, at: usize) -> Option<(Vec<&Word>, bool)> {
    let texts: Vec<&str> = clause.words.iter().map(|(w, _)| w.text.as_str()).collect();
    if stops(&texts) {
        return None;
    }
    let negation = clause.words.iter().position(|(w, _)| w.negates())?;
    let (lead, negation_word) = (&clause.words[..negation], &clause.words[negation].0);
    if !(negation_word.text == "not" || negation_word.text.ends_with("n't")) {
        return None;
    }
    let lead: Vec<&str> = lead.iter().map(|(w, _)| w.base()).collect();
    if !lead.iter().all(|w| CONTRAST_LEADS.contains(w)) {
        return None;
    }
    let names_it = lead.iter().any(|w| matches!(*w, "it" | "that"));
    if at == 0 && !names_it {
        return None;
    }
    let denied: Vec<&Word> = clause.words[negation + 1..]
        .iter()
        .filter(|(w, s)| *s == Stance::Denied && w.is_content())
        .map(|(w, _)| w)
        .collect();
    let things = denied.iter().all(|w| is_what(w) && !w.is_name());
    (things && !denied.is_empty() && denied.len() <= CONTRAST_WORDS).then_some((denied, names_it))
}

/// Whether `fact` states what `retraction` takes back: it is about the same kind of person,
/// or about someone the retraction names ("We don't have Rufus anymore" takes back "The
/// user's dog Rufus sleeps all day."); it neither stops nor denies anything itself; and it
/// holds the retraction's names and numbers, or, when it names none, all of its words.
pub fn states_retracted(fact: &str, retraction: &Retraction) -> bool {
    let fact_words = words(fact);
    let texts: Vec<&str> = fact_words.iter().map(|w| w.text.as_str()).collect();
    if stops(&texts) || fact_words.iter().any(Word::negates) {
        return false;
    }
    let holds = |word: &String| fact_words.iter().any(|w| same_word(word, w.base()));
    let subject = subject_of(fact);
    let named = match &subject {
        Subject::Someone(known) => retraction.names.iter().any(|n| known.contains(n)),
        Subject::Speaker => false,
    };
    if !named && subject.is_speaker() == retraction.of_someone_else {
        return false;
    }
    if retraction.names.is_empty() {
        retraction.words.iter().all(holds)
    } else {
        retraction.names.iter().all(holds)
    }
}

/// Whether two words are one for a retraction: they share their first four letters, or,
/// when one is shorter than that, their stems are equal ("run" and "runs", not "bus" and
/// "busy").
fn same_word(a: &str, b: &str) -> bool {
    if a.chars().count() < 4 || b.chars().count() < 4 {
        return stem(a) == stem(b);
    }
    a.chars().take(4).eq(b.chars().take(4))
}

/// Whether `new`, a fact the write path just wrote, is what a contrast put in place of
/// `old`: it states one of the contrast's [`Retraction::instead`] words that `old` does not
/// hold, and it speaks of the same thing as `old` — they share a content word besides the
/// subject and what the contrast denies ("The user teaches the viola at the school." for "The
/// user teaches the violin at the school."; not "The user had a good day." for "The user has a
/// bad knee."). Only a contrast of things puts something in place of what it takes back.
pub fn corrected_by(old: &str, new: &str, retraction: &Retraction) -> bool {
    let (old_words, new_words) = (words(old), words(new));
    let holds = |ws: &[Word], x: &String| ws.iter().any(|w| same_word(x, w.base()));
    let states_instead = retraction
        .instead
        .iter()
        .any(|x| holds(&new_words, x) && !holds(&old_words, x));
    // "user" is a function word, so the subject is not a shared topic.
    let topic =
        |w: &Word| w.is_content() && !retraction.words.iter().any(|x| same_word(x, w.base()));
    states_instead
        && old_words.iter().filter(|w| topic(w)).any(|o| {
            new_words
                .iter()
                .filter(|w| topic(w))
                .any(|n| n.stem() == o.stem())
        })
}

/// `fact` without its sentences that state what one of `retractions` takes back. A contrast
/// of things cuts nothing: a new fact that names the old thing beside the new one ("The
/// user teaches the viola instead of the violin.") states the new one.
pub fn without_retracted_sentences(fact: &str, retractions: &[Retraction]) -> String {
    sentences(fact)
        .into_iter()
        .filter(|sentence| {
            !retractions
                .iter()
                .any(|r| r.instead.is_empty() && states_retracted(sentence, r))
        })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken_back(message: &str) -> Vec<Vec<String>> {
        retractions(message).into_iter().map(|r| r.words).collect()
    }

    #[test]
    fn a_stopping_names_what_stopped_without_when() {
        assert_eq!(
            taken_back("I gave up swimming because of my shoulder."),
            [["swimming"]]
        );
        assert_eq!(
            taken_back("I cancelled my chess club subscription two weeks ago."),
            [["chess", "club", "subscription"]]
        );
        assert_eq!(taken_back("Honestly I finally quit vaping."), [["vaping"]]);
        assert_eq!(
            taken_back("We moved to Quito, so we no longer live in Lima."),
            [["live", "lima"]]
        );
        for nothing in [
            "I swim every Tuesday.",
            "I don't drink soda.",
            "Did you quit?",
            "Is there any more soup?",
        ] {
            assert!(retractions(nothing).is_empty(), "{nothing}");
        }
    }

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

    #[test]
    fn a_contrast_takes_back_the_name_or_number_it_denies() {
        assert_eq!(taken_back("My locker is 14, not 41."), [["41"]]);
        assert_eq!(taken_back("Sorry, her name is Ilse, not Ilka."), [["ilka"]]);
        assert!(retractions("I have never been to Oslo.").is_empty());
        assert!(retractions("Is it 14, not 41?").is_empty());
    }

    #[test]
    fn a_contrast_of_things_takes_back_what_it_denies_with_what_stands_instead() {
        let one = |message: &str| {
            let found: Vec<Retraction> = retractions(message)
                .into_iter()
                .filter(|r| !r.instead.is_empty())
                .collect();
            assert_eq!(found.len(), 1, "{message}: {found:?}");
            (found[0].words.clone(), found[0].instead.clone())
        };
        assert_eq!(
            one("Hang on, it's the tram I ride, not the metro."),
            (vec!["metro".into()], vec!["tram".into(), "ride".into()])
        );
        assert_eq!(
            one("It isn't the oboe, it's the clarinet."),
            (vec!["oboe".into()], vec!["clarinet".into()])
        );
        assert_eq!(
            one("My brother fixes lorries, not buses.").0,
            vec!["buses".to_owned()]
        );
        assert!(retractions("My brother fixes lorries, not buses.")[0].of_someone_else);
        for nothing in [
            // Not a contrast: a denial of its own, a long clause, a name (read apart).
            "Not bad, I had a quiet weekend.",
            "I bake bread, but I don't enjoy kneading the heavy rye dough at all.",
            "Is it the tram, not the metro?",
            "We met in Porto, not Lisbon.",
        ] {
            assert!(
                retractions(nothing).iter().all(|r| r.instead.is_empty()),
                "{nothing}"
            );
        }
    }

    #[test]
    fn a_contrast_reaches_only_a_fact_about_the_same_thing_as_its_replacement() {
        let metro = retractions("It's the tram I ride to the depot, not the metro.")
            .into_iter()
            .find(|r| !r.instead.is_empty())
            .expect("a contrast");
        let old = "The user rides the metro to the depot.";
        assert!(states_retracted(old, &metro));
        assert!(corrected_by(
            old,
            "The user rides the tram to the depot.",
            &metro
        ));
        // A new fact that does not state the replacement, or speaks of something else.
        assert!(!corrected_by(old, "The user works at the depot.", &metro));
        assert!(!corrected_by(
            "The user collects metro maps.",
            "The user rides the tram.",
            &metro
        ));
        // The pass's own fact naming both keeps its sentence.
        let taken = retractions("It's the tram I ride, not the metro.");
        assert_eq!(
            without_retracted_sentences("The user rides the tram instead of the metro.", &taken),
            "The user rides the tram instead of the metro."
        );
    }

    #[test]
    fn a_short_word_is_the_same_only_by_its_stem() {
        assert!(same_word("run", "runs"));
        assert!(same_word("bus", "buses"));
        assert!(!same_word("bus", "busy"));
        assert!(!same_word("tea", "team"));
        assert!(same_word("swim", "swimming"));
    }

    #[test]
    fn a_fact_states_what_was_taken_back_about_the_same_person() {
        let swim = &retractions("I don't swim anymore.")[0];
        assert!(states_retracted("The user swims every morning.", swim));
        assert!(!states_retracted("The user no longer swims.", swim));
        assert!(!states_retracted("The user's son swims.", swim));
        let hers = &retractions("She stopped smoking in May.")[0];
        assert!(hers.of_someone_else);
        assert!(states_retracted("The user's aunt smokes a lot.", hers));
        assert!(!states_retracted("The user smokes.", hers));
        // A name taken back takes back the facts that hold it, and those about whom it names.
        let trip = &retractions("We cancelled the Zanzibar trip.")[0];
        assert!(states_retracted(
            "The user plans to visit Zanzibar in June.",
            trip
        ));
        assert!(!states_retracted(
            "The user's uncle lives in Zanzibar.",
            trip
        ));
        let rufus = &retractions("We don't have Rufus anymore.")[0];
        assert!(states_retracted(
            "The user's dog Rufus sleeps all day.",
            rufus
        ));
    }

    #[test]
    fn a_new_fact_loses_the_sentences_that_state_what_was_taken_back() {
        let taken = retractions("I'm not a baker anymore, I sell cars now.");
        assert_eq!(
            without_retracted_sentences("The user is a baker. The user sells cars.", &taken),
            "The user sells cars."
        );
        assert_eq!(
            without_retracted_sentences("The user is a baker.", &taken),
            ""
        );
    }
}
