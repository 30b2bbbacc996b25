//! Is an extracted fact the user's own? A check against the user's words, with no second
//! LLM call.
//!
//! A small model extracting facts writes things nobody said: details it invents, the
//! assistant's suggestions, someone else's habit given to the user, a wish or a denial
//! turned into a plain statement. A fact is kept only when the user's words support it in
//! the way it says it:
//!
//! 1. **Names, numbers and people.** Every name and number in the fact (a capitalised word
//!    past the first, a word with a digit) and every word for a person ("partner", "son")
//!    occurs in the user's words: "The user misses their partner." from "I'll miss her." is
//!    an invention.
//! 2. **Content.** At least half of its other content words occur there (compared by stem,
//!    [`crate::text::words`]).
//! 3. **Asking.** When every sentence of the latest message asks (a question or a request,
//!    [`crate::text::clauses`]), the fact must use the message's words alone and must not
//!    report the asking ("asked", "told", "wonders": [`SPEECH_ACTS`]); so must a fact with
//!    a name or number the message only asks about.
//! 4. **Person.** A fact about the user ([`crate::text::subjects`]) must not rest on a word
//!    the user said only of someone else: "My cousin sails; I sell bikes." does not support
//!    "The user sails.". Words for people and pets ("cousin", "dog") and names are not
//!    checked: "The user has a cousin named Ilse." is the user's own.
//! 5. **Stance.** A fact that states plainly must not rest on a word the user only denied
//!    ("I never eat lamb" does not support "The user eats lamb.") or only supposed ("If I had
//!    a boat ..." does not support "The user has a boat."). A fact that itself denies, stops
//!    or supposes (a negation, "no longer", "quit", "dislikes", "would", "wants", "plans":
//!    [`NEGATIVE_PREDICATES`], [`MODAL_WORDS`]) may. A word the latest message holds is
//!    read by its stance there alone: what it denies was taken back, whatever the earlier
//!    message stated ("I play the oboe." then "It's the flute, not the oboe.").
//! 6. **Something of its own.** A fact whose every content word is conversational filler
//!    ([`crate::text::low_information`]: greetings, thanks, assent, hedges, light verbs)
//!    says nothing worth keeping, however the user put it: "Okay, talk later!" does not give
//!    "The user will talk later.".
//!
//! Function words, single letters and the extractor's framing ("user") are not content. What
//! supported a kept fact is recorded with it ([`Grounding::matched`]); a refused fact is
//! logged with the reason.

use std::collections::HashMap;

use mnemo_core::WriteRule;

use super::clauses::{clauses, Clause, Person, Stance, PERSON_NOUNS};
use super::subjects::subject_of;
use super::words::{words, Word};

/// Share of a fact's plain content words the user's words must hold.
const MIN_SUPPORT: f32 = 0.5;

/// Verbs by which a fact reports the conversation instead of something about the speaker.
pub const SPEECH_ACTS: &[&str] = &[
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
    "say",
    "said",
    "says",
    "tell",
    "telling",
    "tells",
    "told",
    "wonder",
    "wondered",
    "wondering",
    "wonders",
];

/// Words that make a predicate negative without a "not": a fact holding one may rest on
/// what the user denied ("I don't eat lamb" → "The user avoids lamb.").
pub const NEGATIVE_PREDICATES: &[&str] = &[
    "avoid",
    "avoided",
    "avoids",
    "cancel",
    "canceled",
    "cancelled",
    "dislike",
    "disliked",
    "dislikes",
    "gave",
    "given",
    "hate",
    "hated",
    "hates",
    "lack",
    "lacks",
    "longer",
    "quit",
    "quits",
    "refuse",
    "refused",
    "refuses",
    "stop",
    "stopped",
    "stops",
];

/// Words that make a fact a wish, a plan or a condition rather than a plain statement: a fact
/// holding one may rest on what the user only supposed.
pub const MODAL_WORDS: &[&str] = &[
    "consider",
    "considering",
    "considers",
    "could",
    "dream",
    "dreams",
    "hope",
    "hopes",
    "hoping",
    "if",
    "interested",
    "may",
    "maybe",
    "might",
    "perhaps",
    "plan",
    "planning",
    "plans",
    "someday",
    "thinking",
    "unless",
    "want",
    "wants",
    "wish",
    "wishes",
    "would",
];

/// How a fact stands against the user's words.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Grounding {
    /// The fact's words found in the user's words.
    pub matched: Vec<String>,
    /// Its names and numbers not found there.
    pub missing_names: Vec<String>,
    /// Its other content words not found there.
    pub missing_words: Vec<String>,
    /// Why the fact is refused although its words are there, by the rule that refuses it,
    /// in the order the rules are read.
    pub refusals: Vec<(WriteRule, String)>,
}

impl Grounding {
    /// Whether the user's words support the fact under every rule but those `off`; `Err`
    /// says why not.
    pub fn verdict(&self, off: &[WriteRule]) -> Result<(), String> {
        let on = |rule: WriteRule| !off.contains(&rule);
        if on(WriteRule::GroundNames) && !self.missing_names.is_empty() {
            return Err(format!(
                "names or numbers the user did not say: {}",
                self.missing_names.join(", ")
            ));
        }
        if let Some((_, why)) = self.refusals.iter().find(|(rule, _)| on(*rule)) {
            return Err(why.clone());
        }
        if !on(WriteRule::GroundContent) {
            return Ok(());
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

/// Where each stem occurs in the user's words: the clause's person, whether it asks, and
/// how it holds the word.
struct Occurrences {
    by_stem: HashMap<String, Vec<(Person, bool, Stance)>>,
    /// The stances of each word of the latest message, there alone.
    latest: HashMap<String, Vec<Stance>>,
}

impl Occurrences {
    fn read(message: &str, earlier: &str) -> Self {
        let mut by_stem: HashMap<String, Vec<(Person, bool, Stance)>> = HashMap::new();
        let mut latest: HashMap<String, Vec<Stance>> = HashMap::new();
        for (text, is_latest) in [(message, true), (earlier, false)] {
            for clause in clauses(text) {
                for (word, stance) in &clause.words {
                    let stem = word.stem();
                    if is_latest {
                        latest.entry(stem.clone()).or_default().push(*stance);
                    }
                    by_stem
                        .entry(stem)
                        .or_default()
                        .push((clause.person, clause.asks, *stance));
                }
            }
        }
        Self { by_stem, latest }
    }

    fn get(&self, stem: &str) -> &[(Person, bool, Stance)] {
        self.by_stem.get(stem).map_or(&[], Vec::as_slice)
    }

    /// Whether every stance the user took to a word is `stance`, the latest message's
    /// alone when it holds the word: what it denies was taken back, whatever the earlier
    /// message stated ("I play the oboe." then "It's the flute, not the oboe.").
    fn only_in_stance(&self, stem: &str, stance: Stance) -> bool {
        match self.latest.get(stem) {
            Some(latest) => latest.iter().all(|s| *s == stance),
            None => self.get(stem).iter().all(|(_, _, s)| *s == stance),
        }
    }
}

/// How the user's words support `fact`: the latest `message`, and the user's `earlier`
/// message when the extractor was shown it for context.
pub fn ground_in(fact: &str, message: &str, earlier: &str) -> Grounding {
    let said = Occurrences::read(message, earlier);
    let only_asks = clauses(message).iter().all(|c: &Clause| c.asks);
    let fact_words = words(fact);
    let mut grounding = Grounding::default();
    let mut from_questions = only_asks;
    for word in fact_words.iter().filter(|w| w.is_content()) {
        let found = said.get(&word.stem());
        if found.is_empty() {
            // A person the user never mentioned is as invented as a name.
            if word.is_name() || PERSON_NOUNS.contains(&word.base()) {
                grounding.missing_names.push(word.text.clone());
            } else {
                grounding.missing_words.push(word.text.clone());
            }
            continue;
        }
        // A name the user only asked about supports only facts in the message's own words.
        if word.is_name() && found.iter().all(|(_, asks, _)| *asks) {
            from_questions = true;
        }
        grounding.matched.push(word.text.clone());
    }
    grounding.refusals = refusals(fact, &fact_words, &said);
    if from_questions {
        if let Some(why) = asking_refusal(&fact_words, &grounding) {
            grounding.refusals.push((WriteRule::GroundAsking, why));
        }
    }
    grounding
}

/// Why a fact whose words the user said is still not theirs (rules 6, 4 and 5), each with
/// its rule.
fn refusals(fact: &str, fact_words: &[Word], said: &Occurrences) -> Vec<(WriteRule, String)> {
    let mut refusals = Vec::new();
    if !super::low_information::says_something(fact, None) {
        refusals.push((
            WriteRule::GroundFiller,
            "it says nothing of its own: every word is conversational filler".into(),
        ));
    }
    let checked: Vec<&Word> = fact_words
        .iter()
        .filter(|w| w.is_content())
        .filter(|w| !PERSON_NOUNS.contains(&w.base()))
        .filter(|w| !said.get(&w.stem()).is_empty())
        .collect();
    if subject_of(fact).is_speaker() {
        // What a fact about the user says after it turns to someone else is said of them
        // ("The user has a cat called Miso.": "called" is the cat's), and names are checked
        // by presence alone: the user's flatmate's name is the user's to mention ("The user
        // has a flatmate named Oren.").
        let turns_to = fact_words
            .iter()
            .position(|w| PERSON_NOUNS.contains(&w.base()))
            .unwrap_or(fact_words.len());
        if let Some(word) = fact_words[..turns_to]
            .iter()
            .filter(|w| w.is_content() && !w.is_name())
            .find(|w| {
                let found = said.get(&w.stem());
                !found.is_empty()
                    && found
                        .iter()
                        .all(|(person, _, _)| *person == Person::Someone)
            })
        {
            refusals.push((
                WriteRule::GroundPerson,
                format!(
                    "the user said \"{}\" of someone else, not of themself",
                    word.text
                ),
            ));
        }
    }
    // A word the user only denied (or supposed) is not stated by a fact that states plainly:
    // any such word that is not a name, or every word the fact draws on ("I've never been to
    // Oslo" does not give "The user has been to Oslo."). A name alone may have been denied in
    // one clause and spoken of in another ("We don't have Rufus anymore, he died").
    let only = |stance: Stance| {
        let only_so = |w: &&&Word| said.only_in_stance(&w.stem(), stance);
        checked
            .iter()
            .filter(|w| !w.is_name())
            .find(only_so)
            .or_else(|| {
                checked
                    .iter()
                    .all(|w| only_so(&w))
                    .then(|| checked.first())
                    .flatten()
            })
    };
    let holds = |class: &[&str]| fact_words.iter().any(|w| class.contains(&w.base()));
    let denies = holds(NEGATIVE_PREDICATES) || fact_words.iter().any(Word::negates);
    let supposes = holds(MODAL_WORDS) || fact_words.iter().any(|w| w.text.ends_with("'d"));
    let stance = match (denies, supposes) {
        (false, _) if only(Stance::Denied).is_some() => only(Stance::Denied)
            .map(|w| format!("the user denied \"{}\"; the fact states it", w.text)),
        (_, false) => only(Stance::Supposed)
            .map(|w| format!("the user only supposed \"{}\"; the fact states it", w.text)),
        _ => None,
    };
    refusals.extend(stance.map(|why| (WriteRule::GroundStance, why)));
    refusals
}

/// Why a fact drawn from a message that only asks is refused, if it is: it reports the
/// asking, or uses words the user did not.
fn asking_refusal(fact_words: &[Word], grounding: &Grounding) -> Option<String> {
    let acts: Vec<&str> = fact_words
        .iter()
        .map(|w| w.base())
        .filter(|w| SPEECH_ACTS.contains(w))
        .collect();
    if !acts.is_empty() {
        return Some(format!(
            "it reports the user's question, not a fact ({})",
            acts.join(", ")
        ));
    }
    (!grounding.missing_words.is_empty()).then(|| {
        format!(
            "the user only asked, and these words are not theirs: {}",
            grounding.missing_words.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(fact: &str, message: &str) -> bool {
        ground_in(fact, message, "").verdict(&[]).is_ok()
    }

    fn why(fact: &str, message: &str) -> String {
        ground_in(fact, message, "").verdict(&[]).unwrap_err()
    }

    #[test]
    fn names_numbers_and_most_words_must_be_the_users() {
        assert!(kept("The user keeps bees.", "I keep bees on the roof."));
        assert!(kept(
            "The user's hives are on the roof.",
            "I keep bees; the hives are on the roof."
        ));
        assert!(why("The user keeps bees in Ghent.", "I keep bees.").contains("ghent"));
        assert!(why("The user has 12 hives.", "I have two hives.").contains("12"));
        assert!(why(
            "The user misses their partner.",
            "I will miss her terribly."
        )
        .contains("partner"));
        assert!(why(
            "The user enjoys outdoor hobbies and nature.",
            "I keep bees."
        )
        .contains("only 0/"));
    }

    #[test]
    fn a_question_or_request_grounds_only_facts_in_its_own_words() {
        assert!(
            why("The user asked about tides.", "When is high tide in Brest?")
                .contains("reports the user's question")
        );
        assert!(why(
            "The user is travelling to Brest.",
            "When is high tide in Brest?"
        )
        .contains("not theirs"));
        assert!(why(
            "The user's nephew likes trains.",
            "Recommend a present for my nephew."
        )
        .contains("not theirs"));
        assert!(kept(
            "The user is diabetic.",
            "Which desserts suit me? I'm diabetic."
        ));
        assert!(kept(
            "The user has a nephew.",
            "Recommend a present for my nephew."
        ));
    }

    #[test]
    fn what_the_user_said_of_someone_else_is_not_theirs() {
        let message = "My flatmate Oren is a drummer, and I teach yoga.";
        assert!(kept("The user teaches yoga.", message));
        assert!(kept("The user's flatmate Oren is a drummer.", message));
        assert!(why("The user is a drummer.", message).contains("of someone else"));
        assert!(why(
            "The user plays squash on Mondays.",
            "Oren is fun. He plays squash on Mondays."
        )
        .contains("of someone else"));
        // A relation is the user's own, and what follows it is said of the relation.
        assert!(kept("The user has a flatmate named Oren.", message));
        assert!(kept(
            "The user has a cat called Miso.",
            "My cat is called Miso."
        ));
        assert!(kept(
            "The user has a sister who paints murals.",
            "My sister paints murals."
        ));
        assert!(
            why("The user paints murals.", "My sister paints murals.").contains("of someone else")
        );
    }

    #[test]
    fn a_rule_left_out_refuses_nothing_and_the_others_still_do() {
        let under = |fact: &str, message: &str, off: &[WriteRule]| {
            ground_in(fact, message, "").verdict(off)
        };
        let (denied, message) = ("The user eats lamb.", "I never eat lamb.");
        assert!(under(denied, message, &[WriteRule::GroundStance]).is_ok());
        assert!(under(denied, message, &[WriteRule::GroundPerson]).is_err());
        let (borrowed, message) = ("The user paints murals.", "My sister paints murals.");
        assert!(under(borrowed, message, &[WriteRule::GroundPerson]).is_ok());
        // A fact refused by two rules is kept only with both left out.
        let (invented, message) = (
            "The user paints murals in Lyon.",
            "My sister paints murals.",
        );
        assert!(under(invented, message, &[WriteRule::GroundPerson]).is_err());
        let both = [WriteRule::GroundPerson, WriteRule::GroundNames];
        assert!(under(invented, message, &both).is_ok());
        let thin = (
            "The user restores old clocks for a museum.",
            "I like clocks.",
        );
        assert!(under(thin.0, thin.1, &[]).is_err());
        assert!(under(thin.0, thin.1, &[WriteRule::GroundContent]).is_ok());
    }

    #[test]
    fn what_the_user_denied_or_supposed_is_not_stated() {
        assert!(why("The user eats lamb.", "I never eat lamb.").contains("denied"));
        assert!(kept("The user never eats lamb.", "I never eat lamb."));
        assert!(kept(
            "The user avoids lamb.",
            "I don't eat lamb, I avoid it."
        ));
        assert!(why(
            "The user owns a boat.",
            "If I owned a boat, I'd sail to Corsica."
        )
        .contains("supposed"));
        assert!(kept(
            "The user would like to sail to Corsica.",
            "I'd like to sail to Corsica someday."
        ));
        assert!(kept(
            "The user no longer plays the oboe.",
            "I don't play the oboe anymore."
        ));
        assert!(
            why("The user plays the oboe.", "I don't play the oboe anymore.").contains("denied")
        );
    }

    #[test]
    fn a_fact_of_filler_alone_says_nothing() {
        assert!(why("The user will talk later.", "Okay, talk later!").contains("filler"));
        assert!(why("The user is glad.", "Oh I'm so glad!").contains("filler"));
        assert!(why(
            "The user will keep that in mind.",
            "Sure, I'll keep that in mind."
        )
        .contains("filler"));
        assert!(kept(
            "The user is glad to be back in Ghent.",
            "So glad to be back in Ghent!"
        ));
        assert!(kept("The user loves hiking.", "I love hiking."));
    }

    #[test]
    fn a_short_answer_is_grounded_with_the_message_it_answers() {
        assert!(ground_in(
            "The user's favourite season is autumn.",
            "Autumn, easily.",
            "What's my favourite season?"
        )
        .verdict(&[])
        .is_ok());
    }

    #[test]
    fn what_the_latest_message_denies_is_not_stated_from_the_earlier_one() {
        let earlier = "I play the oboe in a wind band.";
        let message = "Sorry, it's the flute, not the oboe.";
        let verdict = |fact: &str| ground_in(fact, message, earlier).verdict(&[]);
        assert!(verdict("The user plays the oboe in a wind band.")
            .unwrap_err()
            .contains("denied \"oboe\""));
        assert!(verdict("The user plays the flute in a wind band.").is_ok());
        assert!(verdict("The user no longer plays the oboe.").is_ok());
        // A word the latest message does not hold keeps the earlier message's stance.
        assert!(ground_in(
            "The user keeps bees for honey.",
            "Honey season is nearly here.",
            "I keep bees."
        )
        .verdict(&[])
        .is_ok());
    }
}
