//! What a query's words say about it: whether it asks about the present
//! ([`asks_about_now`]), and the whole-word matching the speaker boost uses.

/// Words that mark a question about the present state of things ("what does she do now?"),
/// where the newest memory should win over an older one that matches as well.
const PRESENT_CUES: [&str; 13] = [
    "latest",
    "recent",
    "recently",
    "currently",
    "current",
    "now",
    "nowadays",
    "these days",
    "lately",
    "newest",
    "anymore",
    "at the moment",
    "so far",
];

/// True when the query asks about now rather than about the past: it has a present-tense cue
/// and names no date. Recency only applies then: blended into every query it buries the
/// answers to "when did ..." and "what did ... first" (on LoCoMo, recall falls from 0.50 to
/// 0.31 with dense retrieval).
pub fn asks_about_now(query: &str) -> bool {
    let words = words(query);
    PRESENT_CUES.iter().any(|cue| contains_phrase(&words, cue))
        && !crate::text::dates::names_a_date(query)
}

/// The lower-case words of `text` (runs of letters and digits).
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// True when `phrase` (lower case, one or more words) occurs as whole words in `words`.
pub(crate) fn contains_phrase(words: &[String], phrase: &str) -> bool {
    let phrase: Vec<String> = self::words(phrase);
    !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_questions_about_now_are_recency_questions() {
        assert!(asks_about_now("Where does Anne work now?"));
        assert!(asks_about_now("what is my current address"));
        assert!(asks_about_now("What has she been reading lately?"));
        assert!(asks_about_now("What are you doing at the moment?"));
        assert!(!asks_about_now(
            "When did Caroline go to the support group?"
        ));
        assert!(!asks_about_now("What did Mel paint first?"));
        assert!(!asks_about_now("Who knows about snow?"));
        assert!(!asks_about_now(
            "What was she reading recently, in July 2023?"
        ));
        assert!(!asks_about_now("What did he do recently in 2022?"));
        assert!(
            asks_about_now("May I know what she does now?"),
            "a modal 'May'"
        );
        assert!(!asks_about_now("What did she do in May, recently?"));
    }
}
