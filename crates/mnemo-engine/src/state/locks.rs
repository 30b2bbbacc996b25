//! [`LockMap`]: one async lock per key (a conversation), created on first use and dropped
//! when idle, so a process that has seen a million conversations does not keep a million
//! locks.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Idle locks kept before they are dropped.
const MAX_IDLE_LOCKS: usize = 1024;

/// One `tokio` mutex per key.
pub(crate) struct LockMap<K> {
    locks: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K: Eq + Hash + Clone> LockMap<K> {
    pub fn new() -> Self {
        Self {
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The lock of `key`: the same one for every caller while anyone holds or awaits it.
    pub fn get(&self, key: &K) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if locks.len() >= MAX_IDLE_LOCKS {
            // The map's own reference is the only one left on an idle lock.
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        locks.entry(key.clone()).or_default().clone()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_locks_are_dropped_and_held_ones_kept() {
        let map = LockMap::new();
        let held = map.get(&0usize);
        let guard = held.clone().lock_owned().await;
        for key in 1..5000 {
            drop(map.get(&key));
        }
        assert!(map.len() <= MAX_IDLE_LOCKS + 1, "{}", map.len());
        assert!(
            Arc::ptr_eq(&held, &map.get(&0)),
            "a held lock is the one everybody gets"
        );
        assert!(map.get(&0).try_lock().is_err());
        drop(guard);
        assert!(map.get(&0).try_lock().is_ok());
    }
}
