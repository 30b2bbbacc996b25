//! The engines of the git revisions searched last, kept by commit id ([`Revisions`]):
//! state the engine owns for `as_of`, generic over what is kept, so it names no engine.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The values of the last few keys asked for, behind a lock.
pub(crate) struct Revisions<V> {
    recent: Mutex<Recent<V>>,
}

impl<V> Default for Revisions<V> {
    fn default() -> Self {
        Self {
            recent: Mutex::new(Recent::default()),
        }
    }
}

impl<V: Clone> Revisions<V> {
    /// The value of `key`, made by `make` if it has none, now the most recent; the least
    /// recent go beyond `keep`.
    pub(crate) fn slot(&self, key: &str, keep: usize, make: impl FnOnce() -> V) -> V {
        self.lock().get_or_insert(key, keep, make)
    }

    /// Removes `key` if `check` accepts its value.
    pub(crate) fn remove_if(&self, key: &str, check: impl Fn(&V) -> bool) {
        self.lock().remove_if(key, check);
    }

    /// Forgets every value.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, Recent<V>> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The values of the last few keys asked for, most recent first.
#[derive(Debug)]
struct Recent<V> {
    entries: VecDeque<(String, V)>,
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Self {
            entries: VecDeque::new(),
        }
    }
}

impl<V: Clone> Recent<V> {
    /// The value of `key`, made by `make` if it has none, now the most recent; the least
    /// recent go beyond `keep` entries.
    fn get_or_insert(&mut self, key: &str, keep: usize, make: impl FnOnce() -> V) -> V {
        let entry = match self.entries.iter().position(|(k, _)| k == key) {
            Some(at) => self.entries.remove(at),
            None => None,
        };
        let entry = entry.unwrap_or_else(|| (key.to_owned(), make()));
        let value = entry.1.clone();
        self.entries.push_front(entry);
        self.entries.truncate(keep.max(1));
        value
    }

    /// Removes `key` if `check` accepts its value.
    fn remove_if(&mut self, key: &str, check: impl Fn(&V) -> bool) {
        self.entries.retain(|(k, v)| k != key || !check(v));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_keys_are_kept_and_a_hit_moves_to_the_front() {
        let mut recent = Recent::default();
        let mut made = 0;
        let mut get = |recent: &mut Recent<u32>, key: &str| {
            recent.get_or_insert(key, 2, || {
                made += 1;
                made
            })
        };
        assert_eq!(get(&mut recent, "a"), 1);
        assert_eq!(get(&mut recent, "b"), 2);
        assert_eq!(get(&mut recent, "a"), 1, "kept");
        assert_eq!(get(&mut recent, "c"), 3, "b, the least recent, goes");
        assert_eq!(get(&mut recent, "a"), 1);
        assert_eq!(get(&mut recent, "b"), 4, "made again");
        recent.remove_if("b", |v| *v == 0);
        assert_eq!(get(&mut recent, "b"), 4, "not removed: the check refused");
        recent.remove_if("b", |v| *v == 4);
        assert_eq!(get(&mut recent, "b"), 5);
        recent.clear();
        assert!(recent.entries.is_empty());
    }
}
