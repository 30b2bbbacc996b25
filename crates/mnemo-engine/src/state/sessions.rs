//! The engine's sessions as state: the session store and one lock per session, guarding
//! its parsed log, which stays cached while the session is used (within a count and a byte
//! budget). What a chat request does with a session is in [`crate::sessions`], the session wing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mnemo_session::{LoadedSession, SessionId, SessionStore};

/// Sessions whose parsed logs stay cached, at most (idle ones are dropped past this).
const CACHED_SESSIONS: usize = 256;
/// Bytes of logs whose parsed records idle sessions keep cached, at most (one full log):
/// past it, the largest idle ones are dropped and read again when next used.
pub(crate) const CACHED_LOG_BYTES: u64 = mnemo_session::log::MAX_LOG_BYTES;

pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<LoadedSession>>>;

/// The engine's sessions: the store and one lock (guarding the cached log) per session.
pub(crate) struct SessionState {
    pub store: SessionStore,
    slots: Mutex<HashMap<SessionId, Slot>>,
}

impl SessionState {
    pub(crate) fn new(store_root: PathBuf) -> Self {
        Self {
            store: SessionStore::new(store_root),
            slots: Mutex::default(),
        }
    }

    pub(crate) fn slot(&self, id: &SessionId) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() >= CACHED_SESSIONS && !slots.contains_key(id) {
            // Only slots nobody holds (the map's own reference) can go.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        slots.entry(id.clone()).or_default().clone()
    }

    /// Drops the parsed logs of idle sessions, largest first, until those left hold at most
    /// `budget` bytes of log; a session in use (its lock held) keeps its own.
    pub(crate) fn trim_cache(&self, budget: u64) {
        let slots: Vec<Slot> = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.values().cloned().collect()
        };
        let mut idle: Vec<(u64, tokio::sync::MutexGuard<'_, Option<LoadedSession>>)> = slots
            .iter()
            .filter_map(|slot| slot.try_lock().ok())
            .filter_map(|guard| Some((guard.as_ref()?.log_bytes, guard)))
            .collect();
        let mut total = idle
            .iter()
            .fold(0u64, |sum, (bytes, _)| sum.saturating_add(*bytes));
        idle.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        for (bytes, mut guard) in idle {
            if total <= budget {
                break;
            }
            *guard = None;
            total -= bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_session::{History, SessionMeta};

    fn cached(state: &SessionState, id: &str, log_bytes: u64) -> Slot {
        let id = SessionId::new(id).unwrap();
        let slot = state.slot(&id);
        *slot.try_lock().unwrap() = Some(LoadedSession {
            id: id.clone(),
            meta: SessionMeta::new("c", None, "hi"),
            history: History::default(),
            log_bytes,
            skipped: Vec::new(),
            torn: false,
        });
        slot
    }

    #[test]
    fn idle_cached_logs_give_way_largest_first_past_the_budget() {
        let state = SessionState::new(PathBuf::from("/nowhere"));
        let small = cached(&state, "small", 10);
        let large = cached(&state, "large", 300);
        let middle = cached(&state, "middle", 200);
        let in_use = cached(&state, "in-use", 1000);
        let held = in_use.try_lock().unwrap();
        state.trim_cache(250);
        assert!(
            large.try_lock().unwrap().is_none(),
            "the largest idle one went"
        );
        assert!(middle.try_lock().unwrap().is_some());
        assert!(small.try_lock().unwrap().is_some());
        assert!(held.is_some(), "a session in use keeps its log");
        drop(held);
        state.trim_cache(250);
        assert!(in_use.try_lock().unwrap().is_none());
        assert!(middle.try_lock().unwrap().is_some(), "210 bytes fit");
    }
}
