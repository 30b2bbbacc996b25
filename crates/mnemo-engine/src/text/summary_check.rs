//! Keeping the rolling summary honest without a second LLM call.
//!
//! The summariser is asked to rewrite the summary with the pass's new facts and without what
//! the pass retracted. A small model still keeps an old statement now and then, or gives
//! someone else's trait to the user, so its answer is read sentence by sentence:
//!
//! - **Stale.** A sentence with a clause that still states what set a retracted fact apart
//!   from the new facts (every name and number of it, or else two thirds of its other words,
//!   not denied: [`crate::text::clauses`]) and none of what the new facts say instead is cut
//!   ([`without_stale_sentences`]). "Ilse works in Lima." goes once "works in Lima" is
//!   replaced by "works in Quito", and so does "The user is a baker and sells cars." once
//!   "is a baker" is; "Ilse works in Quito, not Lima." stays. Then each new fact the summary
//!   no longer holds is added to it as written ([`with_new_facts`]).
//! - **Unsupported.** A sentence with a name or number that neither the previous summary nor
//!   the conversation's facts hold, or with fewer than half of its content words in them, is
//!   cut ([`without_unsupported_sentences`]): a small model copies an example or adds a detail.
//! - **Misattributed.** A sentence opening with "The user" that, before it turns to someone
//!   else, holds a word the conversation's facts say only of someone else (and neither the
//!   user's own facts nor the previous summary say) is cut
//!   ([`without_misattributed_sentences`]): "The user sails every July." goes when only the
//!   user's cousin sails, and so does "The user is allergic to wasps and dust" when wasps
//!   are the daughter's.

use std::collections::HashSet;

use super::clauses::{clauses, Person, Stance, PERSON_NOUNS};
use super::subjects::subject_of;
use super::words::says_when;
use super::words::{sentences, words, Word};

/// The content words of `text` with whether each is a name or number, by stem; words that
/// say when ("now", "again") are not what a sentence states.
fn terms(text: &str) -> Vec<(String, bool)> {
    words(text)
        .iter()
        .filter(|w| w.is_content() && !says_when(w.base()))
        .map(|w| (w.stem(), w.is_name()))
        .collect()
}

fn stems(text: &str) -> HashSet<String> {
    terms(text).into_iter().map(|(s, _)| s).collect()
}

/// `summary` without the sentences that still state a fact this pass retracted; returns the
/// summary and the sentences cut.
pub fn without_stale_sentences(
    summary: &str,
    retracted: &[String],
    added: &[String],
) -> (String, Vec<String>) {
    let added_stems: HashSet<String> = added.iter().flat_map(|a| stems(a)).collect();
    let stale: Vec<Retracted> = retracted
        .iter()
        .filter_map(|old| {
            let old_terms = terms(old);
            let old_stems: HashSet<String> = old_terms.iter().map(|(s, _)| s.clone()).collect();
            let distinct: Vec<(String, bool)> = old_terms
                .into_iter()
                .filter(|(s, _)| !added_stems.contains(s))
                .collect();
            let instead: HashSet<String> = added_stems.difference(&old_stems).cloned().collect();
            (!distinct.is_empty()).then_some(Retracted { distinct, instead })
        })
        .collect();
    cut_sentences(summary, |sentence| {
        clauses(sentence).iter().any(|clause| {
            let said: HashSet<String> = clause
                .words
                .iter()
                .filter(|(w, stance)| *stance == Stance::Stated && w.is_content())
                .map(|(w, _)| w.stem())
                .collect();
            stale.iter().any(|old| old.restated_by(&said))
        })
    })
}

/// What sets a retracted fact apart from the facts added in its place.
struct Retracted {
    /// Its terms (stem, whether a name or number) that no added fact holds.
    distinct: Vec<(String, bool)>,
    /// Stems the added facts hold and it does not.
    instead: HashSet<String>,
}

impl Retracted {
    /// Whether a clause saying `said` (stems it states) restates this fact: it holds what
    /// set the fact apart (every name and number, or else two thirds of its words) and none
    /// of what the new facts say instead.
    fn restated_by(&self, said: &HashSet<String>) -> bool {
        if self.instead.iter().any(|t| said.contains(t)) {
            return false;
        }
        let names: Vec<&String> = self
            .distinct
            .iter()
            .filter(|(_, n)| *n)
            .map(|(s, _)| s)
            .collect();
        if !names.is_empty() {
            return names.iter().all(|s| said.contains(*s));
        }
        let held = self
            .distinct
            .iter()
            .filter(|(s, _)| said.contains(s))
            .count();
        held * 3 >= self.distinct.len() * 2
    }
}

/// `summary` without the sentences about the user that hold what the known facts say only of
/// someone else. `facts` are the conversation's live facts; `previous` the summary before.
pub fn without_misattributed_sentences(
    summary: &str,
    facts: &[String],
    previous: Option<&str>,
) -> (String, Vec<String>) {
    let (mut users, mut others) = (HashSet::new(), HashSet::new());
    for fact in facts {
        let own: HashSet<String> = words(fact)
            .iter()
            .filter(|w| w.is_content() && !PERSON_NOUNS.contains(&w.base()))
            .map(Word::stem)
            .collect();
        if subject_of(fact).is_speaker() {
            users.extend(own);
        } else {
            others.extend(own);
        }
    }
    users.extend(previous.map(stems).unwrap_or_default());
    let theirs: HashSet<&String> = others.difference(&users).collect();
    cut_sentences(summary, |sentence| {
        if !(subject_of(sentence).is_speaker() && starts_with_the_user(sentence)) {
            return false;
        }
        // The clauses still about the user: up to the first that names someone else.
        clauses(sentence)
            .iter()
            .take_while(|c| c.person != Person::Someone)
            .flat_map(|c| &c.words)
            .filter(|(w, _)| w.is_content() && !w.is_name() && !says_when(w.base()))
            .any(|(w, _)| theirs.contains(&w.stem()))
    })
}

/// Whether `sentence` opens by naming the user ("The user ...", "User ..."), the only
/// sentences whose subject can be read with confidence.
fn starts_with_the_user(sentence: &str) -> bool {
    let w = words(sentence);
    let start = usize::from(w.first().is_some_and(|w| w.text == "the"));
    w.get(start).is_some_and(|w| w.base() == "user")
}

/// `summary` without the sentences the known facts do not support: a name or number none of
/// `sources` (the previous summary, the new facts, the conversation's facts) holds, or fewer
/// than half of its content words in them. A small model copies an example from its prompt,
/// or adds a detail nobody said.
pub fn without_unsupported_sentences(summary: &str, sources: &[String]) -> (String, Vec<String>) {
    let known: HashSet<String> = sources.iter().flat_map(|s| stems(s)).collect();
    cut_sentences(summary, |sentence| {
        let said = terms(sentence);
        let unknown_name = said.iter().any(|(s, name)| *name && !known.contains(s));
        let held = said.iter().filter(|(s, _)| known.contains(s)).count();
        unknown_name || held * 2 < said.len()
    })
}

/// `summary` with each of `added` that it does not hold (most of the fact's content words
/// missing) appended as written: a summary cut for being stale must not lose the news.
pub fn with_new_facts(summary: &str, added: &[String]) -> String {
    let held = stems(summary);
    let mut out = summary.trim().to_owned();
    for fact in added {
        let own = stems(fact);
        let present = own.iter().filter(|s| held.contains(*s)).count();
        if present * 2 < own.len() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(fact.trim());
        }
    }
    out
}

/// `text` without the sentences `cut` picks; returns the text and what was cut.
fn cut_sentences(text: &str, cut: impl Fn(&str) -> bool) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut removed = Vec::new();
    for sentence in sentences(text) {
        if cut(sentence) {
            removed.push(sentence.trim().to_owned());
        } else {
            kept.push_str(sentence);
        }
    }
    (kept.trim().to_owned(), removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stale(summary: &str, retracted: &[&str], added: &[&str]) -> (String, Vec<String>) {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        without_stale_sentences(summary, &owned(retracted), &owned(added))
    }

    #[test]
    fn a_summary_keeps_no_sentence_of_a_corrected_fact() {
        let (kept, cut) = stale(
            "Ilse works in Lima. She likes jazz.",
            &["The user's cousin Ilse works in Lima."],
            &["The user's cousin Ilse works in Quito."],
        );
        assert_eq!(kept, "She likes jazz.");
        assert_eq!(cut, ["Ilse works in Lima."]);
        let (kept, cut) = stale(
            "Ilse works in Quito, not Lima.",
            &["The user's cousin Ilse works in Lima."],
            &["The user's cousin Ilse works in Quito."],
        );
        assert_eq!(kept, "Ilse works in Quito, not Lima.");
        assert!(cut.is_empty());
    }

    #[test]
    fn a_clause_restating_the_old_value_takes_its_sentence() {
        let (kept, cut) = stale(
            "The user is a baker and sells cars now.",
            &["The user is a baker."],
            &["The user sells cars now."],
        );
        assert_eq!(kept, "");
        assert_eq!(cut.len(), 1);
        assert_eq!(
            with_new_facts(&kept, &["The user sells cars now.".to_string()]),
            "The user sells cars now."
        );
        let (kept, _) = stale(
            "The user is no longer a baker and sells cars now.",
            &["The user is a baker."],
            &["The user sells cars now."],
        );
        assert_eq!(kept, "The user is no longer a baker and sells cars now.");
        assert_eq!(
            with_new_facts(&kept, &["The user sells cars now.".to_string()]),
            kept
        );
    }

    #[test]
    fn a_summary_drops_what_was_retracted_with_nothing_new() {
        let (kept, cut) = stale(
            "The user swims every morning. The user likes tea.",
            &["The user swims every morning."],
            &[],
        );
        assert_eq!(kept, "The user likes tea.");
        assert_eq!(cut.len(), 1);
    }

    #[test]
    fn a_summary_says_only_what_the_facts_say() {
        let sources = [
            "The user repairs bikes.".to_string(),
            "The user's cousin Ilse sails every July.".to_string(),
        ];
        let (kept, cut) = without_unsupported_sentences(
            "The user repairs bikes. Ilse sails in July. The user keeps two hens in Ghent.",
            &sources,
        );
        assert_eq!(kept, "The user repairs bikes. Ilse sails in July.");
        assert_eq!(cut, ["The user keeps two hens in Ghent."]);
    }

    #[test]
    fn a_summary_gives_no_one_else_s_trait_to_the_user() {
        let facts = [
            "The user's cousin Ilse sails every July.".to_string(),
            "The user repairs bikes.".to_string(),
        ];
        let (kept, cut) = without_misattributed_sentences(
            "The user repairs bikes. The user sails every July. Their cousin Ilse sails.",
            &facts,
            None,
        );
        assert_eq!(kept, "The user repairs bikes. Their cousin Ilse sails.");
        assert_eq!(cut, ["The user sails every July."]);
        // A clause that turns to the other person keeps the sentence.
        let (kept, _) = without_misattributed_sentences(
            "The user repairs bikes, and their cousin Ilse sails.",
            &facts,
            None,
        );
        assert_eq!(kept, "The user repairs bikes, and their cousin Ilse sails.");
        // What the user's own facts or the previous summary say stays.
        let (kept, _) = without_misattributed_sentences(
            "The user sails every July.",
            &facts,
            Some("The user sails every July."),
        );
        assert_eq!(kept, "The user sails every July.");
    }
}
