//! What a word of the two word lists is (the store's words in [`crate::index::vocabulary`], the
//! model's in [`crate::index::model_words`], both kept on disk by [`crate::index::vocabulary_file`]), and how
//! their vectors are compared. A leaf: the three modules share these rules and none of them
//! imports another for them.

/// The most words kept (about 75 MB of vectors at 384 dimensions); words first seen after
/// that are not candidates.
pub const MAX_WORDS: usize = 50_000;

/// Shortest and longest word kept, in characters.
pub(crate) const WORD_CHARS: std::ops::RangeInclusive<usize> = 3..=24;

/// Whether `word` is one the vocabulary may take: what [`candidate_words`] finds in it alone.
pub(crate) fn is_candidate_word(word: &str) -> bool {
    candidate_words(word) == [word]
}

/// The distinct words of `text` that may enter the vocabulary: alphabetic, written in lower
/// case, of 3 to 24 characters.
pub(crate) fn candidate_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = text
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| WORD_CHARS.contains(&w.chars().count()))
        .filter(|w| w.chars().all(char::is_lowercase))
        .map(str::to_owned)
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// The dot product of two vectors of equal length, summed in eight lanes, which the compiler
/// can keep in vector registers (a single running sum is one it may not reorder): about twice
/// as fast as a plain sum.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut lanes = [0.0f32; 8];
    for (x, y) in a8.zip(b8) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}
