//! Long texts are embedded in windows: a text longer than the window is cut into pieces of
//! about equal length, each embedded on its own, and its vector is the mean of theirs.
//!
//! Why: all-MiniLM-L6-v2 was trained on inputs of up to 128 tokens. Read whole, a text of
//! 230 tokens is both slower (attention grows with the square of the length: one 256-token
//! run costs more than two of 128) and found less well: over LoCoMo's dev conversations cut
//! into passages of about 230 tokens, dense evidence recall at 1 was 0.245 read whole and
//! 0.286 in windows of 128, at 10 0.637 and 0.651 (`benches/long_texts.rs`,
//! docs/retrieval.md). What is covered does not change: the first `max_length` tokens.

use std::ops::Range;

/// The byte ranges of `text` to embed: the whole text when its `token_offsets` (the byte
/// range of each token, as many as the model reads) number `window` or fewer; else
/// consecutive pieces of at most `window` tokens and about equal length, from the first
/// token's start to the last one's end.
pub(crate) fn window_ranges(
    text: &str,
    token_offsets: &[(usize, usize)],
    window: usize,
) -> Vec<Range<usize>> {
    let whole = 0..text.len();
    let tokens = token_offsets.len();
    let window = window.max(1);
    if tokens <= window {
        return vec![whole];
    }
    let pieces = tokens.div_ceil(window);
    let cuts: Vec<usize> = (0..=pieces).map(|i| i * tokens / pieces).collect();
    let ranges: Vec<Range<usize>> = cuts
        .windows(2)
        .map(|pair| token_offsets[pair[0]].0..token_offsets[pair[1] - 1].1)
        .collect();
    // Offsets that do not fall on the text's characters (a tokenizer that rewrote the
    // text) are not guessed at: the text is read whole, as the model would truncate it.
    if ranges
        .iter()
        .all(|r| r.start < r.end && text.get(r.clone()).is_some())
    {
        ranges
    } else {
        vec![whole]
    }
}

/// The mean of `vectors` (one text's windows; one vector is its own mean, exactly), not yet
/// of unit length.
pub(crate) fn mean(vectors: &[Vec<f32>]) -> Vec<f32> {
    let mut sum = vec![0.0; vectors.first().map(Vec::len).unwrap_or(0)];
    for vector in vectors {
        sum.iter_mut().zip(vector).for_each(|(s, x)| *s += x);
    }
    let count = vectors.len().max(1) as f32;
    sum.iter_mut().for_each(|s| *s /= count);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per word of `text`, as a tokenizer would give their byte ranges.
    fn words(text: &str) -> Vec<(usize, usize)> {
        let mut offsets = Vec::new();
        let mut start = None;
        for (at, c) in text.char_indices().chain([(text.len(), ' ')]) {
            match (c.is_whitespace(), start) {
                (true, Some(s)) => {
                    offsets.push((s, at));
                    start = None;
                }
                (false, None) => start = Some(at),
                _ => {}
            }
        }
        offsets
    }

    /// The pieces of `text` cut for a model that reads `offsets`.
    fn pieces<'t>(text: &'t str, offsets: &[(usize, usize)], window: usize) -> Vec<&'t str> {
        window_ranges(text, offsets, window)
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    #[test]
    fn a_text_within_the_window_is_read_whole() {
        let text = "one two three";
        assert_eq!(window_ranges(text, &words(text), 3), vec![0..text.len()]);
        assert_eq!(window_ranges("", &[], 3), vec![0..0]);
    }

    #[test]
    fn a_longer_text_is_cut_into_even_pieces_of_at_most_the_window() {
        let text = "a b c d e f g h i j";
        assert_eq!(pieces(text, &words(text), 4), ["a b c", "d e f", "g h i j"]);
        assert_eq!(pieces(text, &words(text), 5), ["a b c d e", "f g h i j"]);
    }

    #[test]
    fn only_the_tokens_the_model_reads_are_covered() {
        let text = "a b c d e f g h i j";
        assert_eq!(pieces(text, &words(text)[..6], 3), ["a b c", "d e f"]);
    }

    #[test]
    fn offsets_off_the_text_read_it_whole() {
        let text = "é a b c";
        // The first token starts inside the two bytes of "é".
        let offsets = [(1, 2), (3, 4), (5, 6), (7, 8)];
        assert_eq!(window_ranges(text, &offsets, 2), vec![0..text.len()]);
    }

    #[test]
    fn the_mean_is_taken_dimension_by_dimension() {
        assert_eq!(
            mean(&[vec![1.0, 0.0], vec![0.0, 1.0], vec![2.0, 2.0]]),
            vec![1.0, 1.0]
        );
    }
}
