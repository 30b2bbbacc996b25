//! The turns a chat wrote and the index has not taken in yet. One task at a time drains
//! them, a batch at a time: under load, the index's per-write upkeep (the timeline, the
//! keys) runs once per batch instead of once per turn.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// Paths waiting to be indexed, and whether a task is draining them.
#[derive(Default)]
pub(crate) struct IndexQueue {
    state: Mutex<(BTreeSet<PathBuf>, bool)>,
}

impl IndexQueue {
    /// Queues `path`; true when no task is draining, so the caller starts one.
    pub(crate) fn push(&self, path: PathBuf) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.insert(path);
        !std::mem::replace(&mut state.1, true)
    }

    /// Everything queued, for the draining task; `None` when nothing is, and the task
    /// stops (the next push starts another).
    pub(crate) fn take(&self) -> Option<BTreeSet<PathBuf>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.0.is_empty() {
            state.1 = false;
            return None;
        }
        Some(std::mem::take(&mut state.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_drainer_takes_batches_until_nothing_is_left() {
        let queue = IndexQueue::default();
        assert!(queue.push("a".into()), "the first push starts a drainer");
        assert!(!queue.push("b".into()), "a drainer is running");
        assert_eq!(queue.take().unwrap().len(), 2);
        assert!(!queue.push("c".into()));
        assert_eq!(queue.take().unwrap().len(), 1);
        assert!(queue.take().is_none(), "the drainer stops");
        assert!(queue.push("d".into()), "and the next push starts one again");
    }
}
