//! The store's vocabulary, embedded word by word: the words a search adds to a query that
//! names a kind of thing ("books", "music") so that it also finds the turns that name an
//! instance of it ("Dune", "Bach and Mozart") in words the question does not use.
//!
//! Every word the memories use, lower-case as written (so names, which are capitalised, are
//! left out), that is not a stop word, is embedded alone with the store's embedding model; it
//! is a candidate once [`MIN_MEMORIES`] memories use it, and until more than [`MAX_SHARE`] of
//! them do. A search takes the words closest to the
//! query's own embedding (computed for dense search anyway, so this costs one product with
//! the vocabulary's matrix) and searches again with them, as LLM query expansion does
//! ([`crate::retrieval`]). Only the store's own words are candidates: a word no memory uses
//! would match nothing.
//!
//! The vocabulary is built when the engine opens (from the index's copy of every memory's
//! text) and grows as memories are indexed. Counts are never decreased: a word whose memories
//! were all deleted stays a candidate and simply matches nothing, until the next start.

use std::collections::HashMap;

use mnemo_embed::Embedder;
use mnemo_index::LexicalEncoder;

use crate::EngineError;

/// A word becomes a candidate once this many memories use it: a word said once is as often
/// a typo as a topic.
pub const MIN_MEMORIES: u32 = 2;

/// A word more than this share of memories use says nothing about any of them ("user" in
/// facts, "love" in chat): it is no candidate.
pub const MAX_SHARE: f32 = 0.1;

/// The most words kept (about 75 MB of vectors at 384 dimensions); words first seen after
/// that are not candidates.
pub const MAX_WORDS: usize = 50_000;

/// Shortest and longest word kept, in characters.
const WORD_CHARS: std::ops::RangeInclusive<usize> = 3..=24;

/// The store's words with their embeddings.
#[derive(Debug, Default)]
pub struct Vocabulary {
    words: Vec<String>,
    /// How many memories used each word (as they were indexed).
    memories: Vec<u32>,
    /// Each word's unit vector, one after another.
    vectors: Vec<f32>,
    position: HashMap<String, usize>,
    dimension: usize,
    /// Memories whose words were counted.
    texts: u32,
}

impl Vocabulary {
    /// Words the vocabulary holds.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether it holds no word.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Counts the words of `texts` (each text one memory) and embeds the new ones.
    pub fn add<S: AsRef<str>>(
        &mut self,
        texts: &[S],
        lexical: &LexicalEncoder,
        embedder: &Embedder,
    ) -> Result<(), EngineError> {
        self.texts = self.texts.saturating_add(texts.len() as u32);
        let known = self.words.len();
        // Words first seen in these texts, with how many of them use each.
        let mut new_words: Vec<String> = Vec::new();
        let mut new_counts: HashMap<String, u32> = HashMap::new();
        for text in texts {
            for word in candidate_words(text.as_ref()) {
                if let Some(&at) = self.position.get(&word) {
                    self.memories[at] += 1;
                } else if let Some(count) = new_counts.get_mut(&word) {
                    *count += 1;
                } else if known + new_words.len() < MAX_WORDS && !lexical.query(&word).is_empty() {
                    new_counts.insert(word.clone(), 1);
                    new_words.push(word);
                }
            }
        }
        if new_words.is_empty() {
            return Ok(());
        }
        let vectors = embedder.embed(&new_words)?;
        for (word, vector) in new_words.into_iter().zip(vectors) {
            self.dimension = vector.len();
            self.vectors.extend(vector);
            self.memories.push(new_counts[&word]);
            self.position.insert(word.clone(), self.words.len());
            self.words.push(word);
        }
        Ok(())
    }

    /// The `n` candidate words closest to `query_vector` (a unit vector of the same model),
    /// closest first, leaving out those whose stem the query already has.
    pub fn nearest(
        &self,
        query_vector: &[f32],
        query: &str,
        n: usize,
        lexical: &LexicalEncoder,
    ) -> Vec<&str> {
        if n == 0 || self.dimension != query_vector.len() {
            return Vec::new();
        }
        let most = (self.texts as f32 * MAX_SHARE) as u32;
        let mut scored: Vec<(f32, usize)> = self
            .vectors
            .chunks_exact(self.dimension)
            .zip(&self.memories)
            .enumerate()
            .filter(|(_, (_, &memories))| (MIN_MEMORIES..=most).contains(&memories))
            .map(|(at, (vector, _))| (dot(vector, query_vector), at))
            .collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let query_terms = lexical.query(query).indices;
        scored
            .into_iter()
            .map(|(_, at)| self.words[at].as_str())
            .filter(|word| {
                let terms = lexical.query(word).indices;
                !terms.iter().any(|t| query_terms.contains(t))
            })
            .take(n)
            .collect()
    }
}

/// The distinct words of `text` that may enter the vocabulary: alphabetic, written in lower
/// case, of 3 to 24 characters.
fn candidate_words(text: &str) -> Vec<String> {
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_words_are_lower_case_alphabetic_and_distinct() {
        let words = candidate_words("Reading Dune by Frank Herbert; I love reading novels, ok? x2");
        assert_eq!(words, ["love", "novels", "reading"]);
    }
}
