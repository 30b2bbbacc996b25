//! The engines of the git revisions searched last, kept by commit id ([`Revisions`]):
//! state the engine owns for `as_of`, generic over what is kept, so it names no engine.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The values of the last few keys asked for, most recent first, behind a lock.
pub(crate) struct Revisions<V> {
    entries: Mutex<VecDeque<(String, V)>>,
}

impl<V> Default for Revisions<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(VecDeque::new()),
        }
    }
}

impl<V: Clone> Revisions<V> {
    /// The value of `key`, made by `make` if it has none, now the most recent; the least
    /// recent go beyond `keep`.
    pub(crate) fn slot(&self, key: &str, keep: usize, make: impl FnOnce() -> V) -> V {
        let mut entries = self.lock();
        let entry = match entries.iter().position(|(k, _)| k == key) {
            Some(at) => entries.remove(at),
            None => None,
        };
        let entry = entry.unwrap_or_else(|| (key.to_owned(), make()));
        let value = entry.1.clone();
        entries.push_front(entry);
        entries.truncate(keep.max(1));
        value
    }

    /// Removes `key` if `check` accepts its value.
    pub(crate) fn remove_if(&self, key: &str, check: impl Fn(&V) -> bool) {
        self.lock().retain(|(k, v)| k != key || !check(v));
    }

    /// Forgets every value.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(String, V)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_keys_are_kept_and_a_hit_moves_to_the_front() {
        let recent = Revisions::default();
        let mut made = 0;
        let mut get = |recent: &Revisions<u32>, key: &str| {
            recent.slot(key, 2, || {
                made += 1;
                made
            })
        };
        assert_eq!(get(&recent, "a"), 1);
        assert_eq!(get(&recent, "b"), 2);
        assert_eq!(get(&recent, "a"), 1, "kept");
        assert_eq!(get(&recent, "c"), 3, "b, the least recent, goes");
        assert_eq!(get(&recent, "a"), 1);
        assert_eq!(get(&recent, "b"), 4, "made again");
        recent.remove_if("b", |v| *v == 0);
        assert_eq!(get(&recent, "b"), 4, "not removed: the check refused");
        recent.remove_if("b", |v| *v == 4);
        assert_eq!(get(&recent, "b"), 5);
        recent.clear();
        assert!(recent.lock().is_empty());
    }
}
