//! Keeping the rolling summary honest without a second LLM call.
//!
//! The summariser is asked to rewrite the summary with the pass's new facts and without what
//! the pass retracted. A small model still keeps an old statement now and then, so its answer
//! is read sentence by sentence. A sentence with a clause that still states what set a
//! retracted fact apart from the new facts (every name and number of it, or else two thirds
//! of its other words, not denied: [`crate::text::clauses`]) and none of what the new facts
//! say instead is cut ([`without_stale_sentences`]). "Ilse works in Lima." goes once "works
//! in Lima" is replaced by "works in Quito", and so does "The user is a baker and sells
//! cars." once "is a baker" is; "Ilse works in Quito, not Lima." stays. Then each new fact
//! the summary no longer holds is added to it as written ([`with_new_facts`]).

use std::collections::HashSet;

use super::clauses::{clauses, Stance};
use super::words::says_when;
use super::words::{sentences, words};

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
}
