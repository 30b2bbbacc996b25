//! [`Recent`]: answers given lately, kept so the same question is not worked out twice in a
//! row. The embedder keeps the vectors of texts embedded lately (a chat turn's write path
//! embeds one fact to find the facts related to it, to index it, to look for the facts it
//! may contradict); the index keeps the model's words nearest a vector.
//!
//! Bounded by count: two generations of at most `generation` entries each; when the newer
//! fills up the older is dropped, so what is used keeps its place and the rest ages out
//! without bookkeeping per entry.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A bounded map of answers given lately (see the module doc). Thread-safe.
#[derive(Debug)]
pub struct Recent<K, V> {
    generation: usize,
    generations: Mutex<Generations<K, V>>,
}

#[derive(Debug)]
struct Generations<K, V> {
    newer: HashMap<K, V>,
    older: HashMap<K, V>,
}

impl<K: Hash + Eq, V: Clone> Recent<K, V> {
    /// Empty, keeping at most `generation` entries per generation.
    pub fn new(generation: usize) -> Self {
        Self {
            generation: generation.max(1),
            generations: Mutex::new(Generations {
                newer: HashMap::new(),
                older: HashMap::new(),
            }),
        }
    }

    /// The answer kept for `key`, if any (kept in the newer generation from now on).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut generations = self.lock();
        if let Some(value) = generations.newer.get(key) {
            return Some(value.clone());
        }
        let value = generations.older.remove(key)?;
        self.insert(&mut generations, key.to_owned(), value.clone());
        Some(value)
    }

    /// Whether an answer is kept for `key`.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let generations = self.lock();
        generations.newer.contains_key(key) || generations.older.contains_key(key)
    }

    /// Keeps `value` as the answer for `key`.
    pub fn put(&self, key: K, value: V) {
        let mut generations = self.lock();
        self.insert(&mut generations, key, value);
    }

    fn insert(&self, generations: &mut Generations<K, V>, key: K, value: V) {
        if generations.newer.len() >= self.generation {
            generations.older = std::mem::take(&mut generations.newer);
        }
        generations.newer.insert(key, value);
    }

    fn lock(&self) -> MutexGuard<'_, Generations<K, V>> {
        self.generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_is_used_and_forgets_the_rest() {
        const GENERATION: usize = 1024;
        let recent: Recent<String, Vec<f32>> = Recent::new(GENERATION);
        recent.put("used".into(), vec![1.0]);
        recent.put("unused".into(), vec![2.0]);
        for i in 0..GENERATION {
            recent.put(format!("filler {i}"), vec![0.0]);
            if i % 100 == 0 {
                assert_eq!(recent.get("used"), Some(vec![1.0]));
            }
        }
        for i in 0..GENERATION {
            recent.put(format!("more {i}"), vec![0.0]);
        }
        assert_eq!(recent.get("unused"), None, "aged out after two generations");
        assert_eq!(recent.get("used"), None, "unless used meanwhile");
        let total = {
            let g = recent.lock();
            g.newer.len() + g.older.len()
        };
        assert!(total <= 2 * GENERATION, "bounded: {total}");
    }
}
