//! The conversations whose lexical-key upkeep waits for the end of their write-path pass.
//!
//! After every write the index rebuilds the lexical keys of the turns whose context
//! changed: a turn's key reads its neighbouring turns and the facts drawn from it. A pass
//! writes several times in a row (the answer, the facts, the marks on facts they may
//! contradict, the summary, the evictions), and each write made the same turns stale again,
//! so their keys were rebuilt four or five times a pass. While a conversation's pass runs,
//! its writes leave the keys to the pass's end, which rebuilds each stale key once; other
//! writers' upkeep in between (turns indexed, another conversation's pass) leaves them too.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use mnemo_core::ConversationId;

/// Conversations with a pass running, each with how many (one, but counted to be safe).
#[derive(Default)]
pub(crate) struct DeferredKeys(Mutex<HashMap<ConversationId, usize>>);

impl DeferredKeys {
    pub(crate) fn begin(&self, conversation: &ConversationId) {
        *self.lock().entry(conversation.clone()).or_default() += 1;
    }

    pub(crate) fn end(&self, conversation: &ConversationId) {
        let mut deferred = self.lock();
        if let Some(count) = deferred.get_mut(conversation) {
            *count -= 1;
            if *count == 0 {
                deferred.remove(conversation);
            }
        }
    }

    /// The conversations whose keys wait for the end of their pass, now.
    pub(crate) fn current(&self) -> HashSet<ConversationId> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, usize>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defers_while_a_pass_runs() {
        let keys = DeferredKeys::default();
        let (a, b) = (
            ConversationId::new("a").unwrap(),
            ConversationId::new("b").unwrap(),
        );
        assert!(keys.current().is_empty());
        keys.begin(&a);
        assert_eq!(
            keys.current(),
            HashSet::from([a.clone()]),
            "b has no pass running"
        );
        keys.end(&a);
        assert!(keys.current().is_empty());
        keys.end(&a);
        assert!(keys.current().is_empty(), "an extra end does no harm");
        keys.begin(&b);
        assert_eq!(keys.current(), HashSet::from([b]));
    }
}
