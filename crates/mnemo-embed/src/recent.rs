//! The vectors of texts embedded lately, so the same text is not embedded twice in a row.
//!
//! A chat turn's write path embeds one fact several times: to find the facts related to it,
//! to index it, to look for the facts it may contradict, and again when an older fact's
//! front matter changes. The model is the costliest thing a busy server runs, and its
//! answer for a text does not change, so those repeats are answered from here.
//!
//! Bounded by count and by text length: two generations of [`GENERATION`] entries each;
//! when the newer fills up the older is dropped, so what is used keeps its place and the
//! rest ages out without bookkeeping per entry.

use std::collections::HashMap;
use std::sync::Mutex;

/// Entries per generation.
const GENERATION: usize = 1024;
/// Texts longer than this (bytes) are not kept: long texts are rarely embedded twice.
const MAX_TEXT_BYTES: usize = 2048;

#[derive(Default)]
pub(crate) struct RecentVectors {
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    newer: HashMap<String, Vec<f32>>,
    older: HashMap<String, Vec<f32>>,
}

impl Generations {
    fn insert(&mut self, text: String, vector: Vec<f32>) {
        if self.newer.len() >= GENERATION {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(text, vector);
    }
}

impl RecentVectors {
    /// The vector kept for `text`, if any (kept in the newer generation from now on).
    pub(crate) fn get(&self, text: &str) -> Option<Vec<f32>> {
        let mut generations = self.lock();
        if let Some(vector) = generations.newer.get(text) {
            return Some(vector.clone());
        }
        let vector = generations.older.remove(text)?;
        generations.insert(text.to_owned(), vector.clone());
        Some(vector)
    }

    /// Keeps `vector` as the vector of `text`.
    pub(crate) fn put(&self, text: &str, vector: &[f32]) {
        if text.len() <= MAX_TEXT_BYTES {
            self.lock().insert(text.to_owned(), vector.to_vec());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_is_used_and_forgets_the_rest() {
        let recent = RecentVectors::default();
        recent.put("used", &[1.0]);
        recent.put("unused", &[2.0]);
        for i in 0..GENERATION {
            recent.put(&format!("filler {i}"), &[0.0]);
            if i % 100 == 0 {
                assert_eq!(recent.get("used"), Some(vec![1.0]));
            }
        }
        for i in 0..GENERATION {
            recent.put(&format!("more {i}"), &[0.0]);
        }
        assert_eq!(recent.get("unused"), None, "aged out after two generations");
        assert_eq!(recent.get("used"), None, "unless used meanwhile");
        let total = {
            let g = recent.lock();
            g.newer.len() + g.older.len()
        };
        assert!(total <= 2 * GENERATION, "bounded: {total}");
    }

    #[test]
    fn long_texts_are_not_kept() {
        let recent = RecentVectors::default();
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        recent.put(&long, &[1.0]);
        assert_eq!(recent.get(&long), None);
    }
}
